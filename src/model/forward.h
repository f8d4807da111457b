/* The state of one (batched) step while it runs through the layers: which rows belong to which
 * sequence at which position, the residual copies, and the scratch every sublayer reuses.
 *
 * Why one struct for the whole batch: the linears see all rows of all sequences at once (each
 * weight streamed once per step), so every per-row buffer is [N][...] over the concatenated rows,
 * and per-sequence work (window/compressed attention, compressor, indexer) finds its rows through
 * the ds_step_seq ranges.  The indexer's top-k and the candidate-block mask are per row and live
 * here because REUSE layers and later index layers of the same step read them (MODEL.md §2.8). */
#ifndef DS_MODEL_FORWARD_H
#define DS_MODEL_FORWARD_H
#include "model/model.h"
#include "base/arena.h"

/* Scratch of one stepping thread (step_ctx.c): the model keeps a free list of these, a step takes
 * one for its duration, so concurrent steps never share scratch and a steady-state step allocates
 * nothing (the arena was sized at load, or grew once). */
typedef struct ds_step_ctx {
    ds_arena arena;
    struct ds_step_ctx *next;
} ds_step_ctx;
ds_step_ctx *ds_step_ctx_acquire(ds_model *m);
void ds_step_ctx_release(ds_model *m, ds_step_ctx *ctx);

typedef struct ds_step_seq {
    ds_seq *seq;
    int row0, n;                  /* rows [row0, row0+n) of the batch */
    int64_t p0;                   /* position of its first row */
    const int32_t *tok;           /* [n] tokens of this step */
} ds_step_seq;

typedef struct ds_step {
    ds_model *m;
    const ds_config *c;
    ds_arena *arena;              /* every temporary of the step (reset when it ends) */
    int N;                        /* rows in the batch */
    int n_seqs;
    ds_step_seq *ss;              /* [n_seqs] */
    int *row_seq;                 /* [N] sequence index of each row */
    int64_t *pos;                 /* [N] absolute position of each row */
    /* residual stream */
    ds_bf16 *X;                   /* [N][HC][D] */
    ds_bf16 *R;                   /* [N][HC][D] residual saved at a site's entry */
    float *pre;                   /* [N][HC] collapse weights of the previous site */
    ds_hc_mix *mix;               /* [N] mixes of the current site */
    ds_bf16 *u;                   /* [N][D] normalized sublayer input */
    ds_bf16 *y;                   /* [N][D] sublayer output */
    float *cs_swa, *cs_cmp;       /* [N][r_d] cos/sin of each row's position, per table */
    float *ftmp;                  /* [N][ftmp_cols] fp32 linear outputs */
    size_t ftmp_cols;
    /* attention */
    ds_bf16 *qr;                  /* [N][q_lora] */
    ds_bf16 *q;                   /* [N][H][d_h] */
    ds_bf16 *kv;                  /* [N][d_h] window keys of this layer (roped) */
    ds_bf16 *o;                   /* [N][H·d_h] attention output (inverse-roped) */
    ds_bf16 *grp;                 /* [N][H·d_h/o_groups] one output group, gathered */
    ds_bf16 *z;                   /* [N][o_groups·o_lora] */
    /* indexer results carried across layers of the step */
    int32_t *sel;                 /* [N][index_topk] selected compressed entries, ascending */
    int *n_sel;                   /* [N] */
    int32_t *cand;                /* [N][cand_topk_blocks] kept candidate blocks (any order) */
    int *n_cand;                  /* [N]; -1 = every block kept */
    ds_bf16 *qi;                  /* [N][n_ih·d_ih] index queries (roped) */
    float *iw;                    /* [N][n_ih] index head weights */
} ds_step;

/* Sublayers (each reads st->u and writes st->y for every row, or edits st->X for Engram). */
/* One lagged mHC site around a sublayer (MODEL.md §2): enter saves R = X, computes the mixes and
 * u = rmsnorm(collapse(X, pre)); the caller runs the sublayer (u -> y); exit sets X = expand(y, R)
 * and pre = this site's pre.  Shared by the target layers and the DSpark draft stages. */
void ds_mhc_site_enter(ds_step *st, const ds_hc_params *hp, const float *norm);
void ds_mhc_site_exit(ds_step *st);
void ds_attention_layer(ds_step *st, int layer);
void ds_compressor_run(ds_step *st, int layer);
void ds_indexer_run(ds_step *st, int layer);
void ds_moe_layer(ds_step *st, int layer);
void ds_engram_layer(ds_step *st, int e);

/* Margin probe hooks (no-ops unless a probe is attached). */
void ds_probe_gap(ds_model *m, int kind, float vk, float vnext);   /* kind 0 router, 1 indexer, 2 cand */
void ds_probe_bf16(ds_model *m, const float *x, size_t n);

/* Relative gap (v_k − v_{k+1}) / max(|v_k|, |v_{k+1}|), 0 for a tie. */
double ds_rel_gap(float vk, float vnext);

#endif
