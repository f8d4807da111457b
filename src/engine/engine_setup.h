/* Start-up policy of a serving engine: how much memory the KV cache may take, and which token ids
 * the sampler must never emit.
 *
 * Why here and not in the CLI: these are decisions of the engine (SERVING.md §4.4 budget, §9 mask),
 * and a command-line front end should only parse flags and echo what the engine decided.  Keeping
 * them in one place also makes them testable without a server: the memory plan reads a meminfo
 * file whose path a test can replace (DSFLASH_MEMINFO, a debug hook), and the mask is built from a
 * token-lookup callback, so the engine stays independent of the tokenizer module.
 *
 * Memory plan.  The default KV budget is what is really free, not a share of the installed RAM:
 *     B_kv = min(u x MemTotal - weights_mapped - weights_packed, MemAvailable - weights_mapped)
 *            - activations - misc
 * MemAvailable is read after the model is loaded, so the repacked kernel tiles (anonymous memory)
 * are already out of it, while the mapped safetensors files are file-backed pages the kernel counts
 * as available although serving needs them resident, hence subtracted.  Another process's memory
 * is out of MemAvailable, so it shrinks the budget instead of being promised to the KV cache.
 * With --numa-nodes naming nodes, memory comes from those nodes only: MemTotal is theirs, and
 * MemAvailable is capped at their MemFree + FilePages (sysfs has no per-node MemAvailable). */
#ifndef DS_ENGINE_ENGINE_SETUP_H
#define DS_ENGINE_ENGINE_SETUP_H
#include "base/common.h"
#include "base/fsutil.h"
#include "engine/backend.h"
#include "engine/sampler.h"

struct ds_model;

typedef struct ds_mem_inputs {
    uint64_t kv_explicit;       /* --kv-cache-memory; 0 = derive from memory */
    double utilization;         /* share of MemTotal the engine plans for, (0, 1] */
    uint64_t weights_mapped;    /* safetensors bytes the model mapped */
    uint64_t weights_packed;    /* anonymous copies made at load (kernel tiles) */
    int64_t max_num_batched_tokens, max_num_seqs;
    int vocab, dim;
    const char *nodes;          /* --numa-nodes named: "0,1" (NULL: all) */
    uint64_t node_mem_total;    /* with nodes: their MemTotal and MemFree + FilePages, bytes */
    uint64_t node_mem_free;
} ds_mem_inputs;

typedef struct ds_mem_plan {
    char meminfo[320];          /* file read (and the NUMA nodes whose memory bounds the plan) */
    uint64_t mem_total, mem_available;
    uint64_t weights_mapped, weights_packed;
    uint64_t activations;       /* 1.5 x rows x (vocab + 64 dim) x 4 B, rows = max(batched tokens, seqs) */
    uint64_t misc;              /* 2 GiB: threads, HTTP, tokenizer, allocator slack */
    uint64_t from_share;        /* u x MemTotal - weights - activations - misc (0 when negative) */
    uint64_t from_available;    /* MemAvailable - mapped weights - activations - misc (0 when negative) */
    uint64_t kv_bytes;          /* the budget */
    bool kv_explicit;
    bool explicit_exceeds_available;   /* an explicit budget larger than from_available */
} ds_mem_plan;

/* Bytes of every safetensors file the model has mapped (less the Engram tables that `huge-pages`
 * copied or `disk` residency leaves out), and of the tiles repacked (and tables copied) at load. */
uint64_t ds_model_weights_mapped(const struct ds_model *m);
uint64_t ds_model_weights_packed(const struct ds_model *m);

/* Fails (E_KV_BUDGET) when no budget is left for the KV cache and none was given. */
int ds_mem_plan_compute(const ds_mem_inputs *in, ds_mem_plan *p, ds_error *err);
/* The capacity line: every term of the formula and where it came from (no newline). */
void ds_mem_plan_line(const ds_mem_plan *p, const char *residency, char *buf, size_t n);

/* Control tokens the encoder and the output parsers need: each must resolve to an id (start-up
 * self-check), and the sampler mask spares them inside the sentinel list, except BOS, which the
 * encoder writes but the model must never generate. */
extern const char *const ds_control_tokens[];
extern const int ds_n_control_tokens;
#define DS_CONTROL_BOS 0   /* index of BOS in ds_control_tokens: it must resolve, and it stays masked */

/* id of a token literal, or -1 (e.g. ds_tokenizer_token_id). */
typedef int32_t (*ds_token_id_fn)(const void *ctx, const char *literal);
/* The multimodal sentinel ids SERVING.md §9 masks by default (DeepSeek-V4.1's vocabulary; the
 * ranges hold 425 ids, of which the tokenizer's chat-control tokens are spared): `serve
 * --sampler-mask-ids` replaces the list. */
#define DS_DEFAULT_SENTINEL_IDS "128847-129270,129279"
/* The §9 sampler mask for `be`: noise, BOS, PAD, image sentinel and the `sentinels` ranges masked,
 * control tokens spared.  `line` receives the description echoed at start-up. */
void ds_engine_sampler_mask(const ds_backend *be, const ds_int_range *sentinels, int n_sentinels, ds_token_id_fn lookup,
                            const void *ctx, ds_token_mask *mask, char *line,
                            size_t n);

#endif
