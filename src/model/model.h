/* Internal model interface: the loaded weights (llama2.c-style plain structs, bound by tensor name
 * from the checkpoint), the per-sequence paged state, and what the engine needs beyond the public
 * API of include/dsflash.h (paged sequences over engine-owned pools, prefix adoption, page
 * reservation, batched steps, trace and margin probes).
 *
 * Why this split: ds_model is immutable after ds_model_load and shared by every sequence and
 * thread; everything mutable about one request lives in its ds_seq (block tables into KV pools,
 * processed length, token ids).  A step is n >= 1 rows at the sequence's next positions, so a
 * prefill chunk, a decode token and a multi-row verify block run the same code, and a batched step
 * only concatenates rows of several sequences for the linears (attention, compressor and indexer
 * stay per sequence).  Results are bit-identical whatever the chunking or batching (MODEL.md §6.4).
 *
 * The DSpark draft (its stages, rings in DRAFT pages, proposals) lives in model/draft.h.
 * Not part of this layer yet (clean seams): vision rows (every row is text: no image flags, no bias_vl), the CED prefill shortcut,
 * `index_keys = reference` and int8 index keys. */
#ifndef DS_MODEL_MODEL_H
#define DS_MODEL_MODEL_H
#include <pthread.h>
#include "dsflash.h"
#include "base/common.h"
#include "base/bf16.h"
#include "io/config.h"
#include "io/checkpoint.h"
#include "kernels/kernels.h"
#include "model/kvcache.h"
#include "model/rope.h"
#include "dist/dist.h"
#include "base/numa.h"
#include "model/hc.h"
#include "model/engram_hash.h"

/* Rollback allowance: window rows are retained (and persisted) for W + DS_MAX_ROLLBACK positions
 * behind the processed length, matching the STATE ring bound S + 2 <= 32 of SERVING.md §4.2. */
#define DS_MAX_ROLLBACK (DS_STATE_SLOTS - 2)
#define DS_DEFAULT_BLOCK 128     /* bs of a private pool (ds_seq_new) */

/* ------------------------------------------------------------------ weights */

typedef struct ds_layer_weights {
    /* norms (widened to fp32 at load) and hyper-connection parameters */
    const float *attn_norm;        /* [D] */
    const float *ffn_norm;         /* [D] */
    ds_hc_params hc_attn;          /* fn [(2+HC)·HC][HC·D], base [(2+HC)·HC], scale [3] (F32) */
    ds_hc_params hc_ffn;           /* same shapes */
    /* attention */
    ds_linear wq_a;                /* [q_lora, D] */
    const float *q_norm;           /* [q_lora] */
    ds_linear wq_b;                /* [H·d_h, q_lora] */
    ds_linear wkv;                 /* [d_h, D] */
    const float *kv_norm;          /* [d_h] */
    ds_linear *wo_a;               /* [o_groups] views, each [o_lora, H·d_h/o_groups] */
    ds_linear wo_b;                /* [D, o_groups·o_lora] */
    const float *attn_sink;        /* [H] */
    /* compressor (FULL layers) */
    ds_linear cmp_wkv;             /* [d_h, D]; ratio 1: bf16 output; ratio >= 2: fp32 output */
    ds_linear cmp_wgate;           /* [d_h, D] (ratio >= 2) */
    const float *cmp_norm;         /* [d_h] */
    /* indexer */
    ds_linear idx_wq_b;            /* [n_ih·d_ih, q_lora] (index sources) */
    ds_linear idx_wproj;           /* [n_ih, D] (index sources) */
    ds_linear idx_wk;              /* [d_ih, d_h] (FULL) */
    const float *idx_k_norm;       /* [d_ih] (FULL) */
    /* MoE */
    ds_linear gate;                /* [E_r, D] float, fp32 logits */
    const float *gate_bias;        /* [E_r] */
    const float *gate_bias_vl;     /* [E_r] (vision rows; unused until vision lands) */
    ds_linear *w1, *w2, *w3;       /* [E_r] experts: [inter, D], [D, inter], [inter, D] */
    ds_linear sw1, sw2, sw3;       /* shared expert, same shapes */
} ds_layer_weights;

typedef struct ds_engram_weights {
    int layer;                     /* backbone layer id */
    int64_t rows;                  /* table rows (= prime sum) */
    int fp8;                       /* 0: int8 codes + F32 scales; 1: E4M3 codes + E8M0 scales */
    const void *codes;             /* [rows][head_dim] (the file mapping, or its huge-page copy) */
    const void *scales;            /* [rows][head_dim/32] */
    const struct ds_tensor *t_codes, *t_scales;   /* the tensors in the checkpoint */
    void *copy_codes, *copy_scales;               /* huge-page copies (engram_resident.c), else NULL */
    ds_linear wkv;                 /* [(HC+1)·D, n_cols·head_dim] */
    float *wq;                     /* [HC][D] fp32(q_weight)·fp32(k_weight) */
} ds_engram_weights;

/* ------------------------------------------------------------------ probes */

/* Opt-in margin statistics for the decisive-fixture generator (MODEL.md §8).  For each discrete
 * choice the relative gap between the k-th and the (k+1)-th ranked value,
 *     gap = (v_k − v_{k+1}) / max(|v_k|, |v_{k+1}|)        (0 for a tie),
 * is folded into a running minimum:
 *   router  — the biased scores s[e] + b[e] at the router top-k (every row, every layer);
 *   indexer — the index scores I[s] at the top-k, only when more than index_topk entries are
 *             visible (otherwise nothing is chosen);
 *   cand    — the block maxima at the candidate-block top-k, only when more blocks exist than are
 *             kept; the always-kept newest block (+inf) is not a competitor.
 * `*_n` counts the selections observed.  `bf16_min` is the smallest |x − m| / ulp over the
 * sublayer outputs rounded to bf16 in the step (x the fp32 value, m the nearest bf16 rounding
 * midpoint, ulp its bf16 spacing): how close a stored value came to rounding the other way.
 * Start from ds_margin_reset.  Updates are serialized by the model (thread-safe). */
typedef struct ds_margin_stats {
    double router_min, indexer_min, cand_min;
    int64_t router_n, indexer_n, cand_n;
    double bf16_min;
    int64_t bf16_n;
} ds_margin_stats;
void ds_margin_reset(ds_margin_stats *s);
/* Attach (or detach with NULL) a probe; the model writes into *s during every later step. */
void ds_model_set_margin_probe(ds_model *m, ds_margin_stats *s);

/* Trace: called after every backbone block l with the residual copies X of every row of the step
 * (batched steps: rows of the sequences in argument order), X[n_rows][HC][D] bf16. */
typedef void (*ds_trace_fn)(void *ctx, int layer, int n_rows, const ds_bf16 *X);
void ds_model_set_trace(ds_model *m, ds_trace_fn fn, void *ctx);

/* ------------------------------------------------------------------ model */

struct ds_model {
    char *dir;
    ds_config cfg;
    ds_checkpoint *ckpt;
    /* global tensors */
    const ds_bf16 *embed;          /* [V][D] */
    const float *norm;             /* [D] */
    ds_linear head;                /* [V, D] fp32 logits */
    ds_layer_weights *layers;      /* [L + S_d]: backbone layers, then the draft stages when loaded */
    struct ds_draft *draft;        /* DSpark draft (model/draft.h), NULL when not loaded or disabled */
    /* Engram */
    ds_engram_weights engram[DS_MAX_LIST];   /* [|E|] */
    ds_engram_consts ec;
    uint32_t *token_class;         /* [V] raw id -> normalized class */
    int64_t pad_class;             /* class of engram_pad_id */
    int unrotate_gate;             /* un-rotate h for the gate dot (QuaRot, MODEL.md §3) */
    int rotate_value;              /* rotate the Engram value at run time (value_projection_rotated=false) */
    float rot[32 * 32];            /* B, row-major */
    float rot_t[32 * 32];          /* Bᵀ (the fast tier's gate un-rotation computes a block's 32 dots at once) */
    /* RoPE */
    ds_rope_table rope_swa;        /* base rope_theta, no YaRN */
    ds_rope_table rope_cmp;        /* base compress_rope_theta with YaRN */
    /* run-time settings */
    int64_t max_len;               /* largest position + 1 a sequence may reach */
    int kv_bs;                     /* block size of private pools */
    ds_numerics numerics;          /* tier of every float reduction (kernels.h) */
    int act_e4m3;                  /* official layout, `--activations e4m3`: FP8/MXFP4 linears but wo_a
                                      quantize their rows to E4M3 per 32 (ds_linear.act_e4m3) */
    /* per-step scratch (step_ctx.c): one arena per concurrently stepping thread */
    pthread_mutex_t step_mu;
    struct ds_step_ctx *step_free; /* contexts not in use */
    int n_step_ctx;                /* contexts made (in use or free) */
    size_t step_bytes;             /* arena size of a new context */
    /* probes */
    ds_margin_stats *margins;
    pthread_mutex_t probe_mu;
    ds_trace_fn trace;
    void *trace_ctx;
    /* owned allocations (widened norms, dequantized weights, views) */
    void **owned;
    int n_owned, cap_owned;
    ds_numa_plan numa;             /* --numa-nodes: CPUs, cores and memory of the nodes used */
    ds_linear **lins;              /* every bound linear (kernel tiles released at free) */
    int n_lins, cap_lins;
    size_t packed_bytes;           /* kernel tiles (and Engram table copies) made at load */
    size_t uncounted_bytes;        /* mapped bytes the memory plan leaves out: Engram tables copied (huge-pages)
                                      or left to the disk (disk), pages of linears read from their copies */
    size_t released_bytes;         /* of those, the published pages of prepared linears given back at load */
    size_t unread_bytes;           /* and the codes of rows, groups and experts other ranks serve (never read) */
    /* tensor/expert parallelism (dist/dist.h): this rank's share; size 1 = the whole model.  The
     * backbone's wq_b, wo_b and head_part hold only the owned rows; unowned wo_a groups and routed
     * experts are described but never prepared or read. */
    ds_shard shard;
    ds_linear head_part;           /* head rows [shard.v0, shard.v1) (== head when size 1) */
    struct ds_head_screen *head_screen; /* greedy screen of `head` (model/head_screen.h); NULL: full rows */
};

/* One-line "E_CODE: message" into a caller buffer (messages that already start with their code
 * are not prefixed twice).  No-op when buf is NULL. */
void ds_format_error(const ds_error *err, char *buf, size_t len);

/* Keep `p` until ds_model_free (memory allocated with ds_xmalloc / malloc). */
void *ds_model_own(ds_model *m, void *p);

/* Bind every tensor the config requires (model_weights.c).  Errors use the checklist format. */
int ds_model_bind_weights(ds_model *m, ds_error *err);
/* Bind one V4.1 block named `prefix` ("layers.3." or "mtp.0.") with E routed experts into lw:
 * a draft stage is a block with ratio 0 (model/draft.c). */
int ds_model_bind_block(ds_model *m, const char *prefix, int ratio_role_layer, int n_experts, ds_layer_weights *lw,
                        ds_error *err);
/* One linear `base` (+ ".weight", format detected from its tensors) of shape [out, in], and one
 * float vector widened to fp32, bound and owned by the model. */
int ds_model_bind_linear(ds_model *m, const char *base, int64_t out, int64_t in, ds_linear *L, ds_error *err);
/* After load: give back the mapped pages of every linear whose forwards read only its prepared
 * copy (ds_linear_published_idle), counted out of the memory plan; returns the bytes. */
size_t ds_model_release_published(ds_model *m);
int ds_model_bind_vec(ds_model *m, const char *name, int64_t n, const float **out, ds_error *err);
/* Engram constants, token map and the checks 19, 23, 24 (engram.c). */
int ds_model_init_engram(ds_model *m, ds_error *err);
/* Engram residency of the load options (engram_resident.c): "page-cache" (NULL: the tables are read
 * through the file mapping), "huge-pages" (copied into anonymous memory on transparent huge pages at
 * load, the file pages given back), "locked" (the mapping mlock'ed) or "disk" (the mapping, left
 * out of the memory plan).  Fails naming the value or the missing support. */
int ds_engram_make_resident(ds_model *m, const char *residency, ds_error *err);
void ds_engram_free_resident(ds_model *m);
/* Resident share of each Engram table (share[e], e < n_engram) from mincore on `samples` random
 * pages of its codes; returns n_engram, or -1 when mincore fails (errno). */
int ds_engram_resident_share(const ds_model *m, int samples, double *share);

/* ------------------------------------------------------------------ sequences */

struct ds_seq {
    const ds_model *m;
    ds_kv_pools *pools;            /* pages of this sequence live here */
    int own_pools;                 /* private pool made by ds_seq_new */
    ds_kv_alloc_ops ops;
    int64_t len;                   /* committed-and-processed positions */
    int32_t *tokens;               /* [tok_cap] token ids of positions 0..len-1 */
    int64_t tok_cap;
    ds_block_tab pg;               /* block tables (CKV, IDX, WIN, DRAFT) and the STATE page: the one
                                      copy, which the engine's request table points at */
    int64_t shared_len;            /* adopted prefix length: positions below it are read-only */
    int64_t win_lo;                /* window rows of positions >= win_lo (and < len) are present */
    int64_t drf_lo, drf_hi;        /* draft ring rows of positions [drf_lo, drf_hi) are present */
};

/* A sequence whose pages come from engine-owned pools through the engine's allocator. */
ds_seq *ds_seq_new_paged(const ds_model *m, ds_kv_pools *pools, ds_kv_alloc_ops ops);
/* A sequence with its own private pools of block size bs (16..256, power of two). */
ds_seq *ds_seq_new_bs(const ds_model *m, int bs, char *errbuf, size_t errlen);

/* Pages a step of n_new_rows would allocate, per kind (reserve them before the step: a step never
 * fails half-way; an allocation failure at its start leaves the sequence unchanged). */
void ds_seq_pages_needed(const ds_seq *s, int n_new_rows, uint32_t counts[DS_KV_KINDS]);

/* Adopt a cached prefix of k full blocks into an empty sequence: CKV/IDX pages of blocks 0..k-1,
 * the WIN pages of blocks k-n_win..k-1 (they must hold every window row the position k·bs reads,
 * i.e. (k-n_win)·bs <= k·bs-W+1), and the k·bs token ids.  The pages are shared and read-only to
 * this sequence (it never writes below k·bs and refuses to roll back below it); they are handed
 * back through ops.release when the sequence is freed or reset.  Returns 0 or -1 (E_KV_PREFIX). */
int ds_seq_adopt_prefix(ds_seq *s, int64_t k_blocks, const uint32_t *ckv_pages, const uint32_t *idx_pages,
                        int n_win, const uint32_t *win_pages, const int32_t *tokens, ds_error *err);

/* Page helpers used by the forward pass (seq.c). */
ds_bf16 *ds_seq_win_row(const ds_seq *s, int layer, int64_t pos);
ds_bf16 *ds_seq_ckv_row(const ds_seq *s, int src, int64_t entry);
ds_bf16 *ds_seq_idx_row(const ds_seq *s, int src, int64_t entry);
float *ds_seq_state_row(const ds_seq *s, int state_src, int64_t pos);   /* [2·d_h]: a ‖ g */
/* Allocate the pages steps of n_rows[i] rows need for seqs[i] (all or nothing: on failure every
 * page allocated here is released again), then, after the step, record tokens, length and window
 * retention (ds_seq_commit).  Used by the forward pass. */
int ds_seq_reserve_many(ds_seq **seqs, const int *n_rows, int n_seqs, ds_error *err);
/* Same, with its undo records in a caller's scratch arena (the forward step: no allocation). */
struct ds_arena;
int ds_seq_reserve_many_in(struct ds_arena *scratch, ds_seq **seqs, const int *n_rows, int n_seqs, ds_error *err);
/* Step scratch set-up at load and tear-down at free (step_ctx.c); rows: rows a step is sized for
 * (a larger step grows the arena once, logged). */
#define DS_STEP_ROWS_AT_LOAD 64
void ds_model_init_step_scratch(ds_model *m, int rows);
void ds_model_free_step_scratch(ds_model *m);
int64_t ds_seq_win_persist_from(const ds_seq *s, int64_t end);
void ds_seq_commit(ds_seq *s, const int32_t *tokens, int n);

#endif
