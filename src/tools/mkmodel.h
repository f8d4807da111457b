/* `dsflash mkmodel`: a complete synthetic checkpoint in the exact release format (MODEL.md §8).
 *
 * The model is generated as a *float* model with official tensor names in the original basis,
 * then the QuaRot rotation is folded in (MODEL.md §3), and the result is handed to the very same
 * release writer `dsflash quantize` uses (tools/release_writer.h).  So mkmodel never has its own
 * quantizer or layout code, and `quantize` applied to mkmodel's --float-out directory reproduces
 * the release byte for byte.
 *
 * Weights are pseudo-random but deterministic: every tensor row has its own generator stream,
 * seeded from (--seed, tensor name, row), so results do not depend on generation order or thread
 * count.  Scales are chosen so activations stay O(1) through every layer (mkmodel_init.c).
 * `--smooth` builds a *decisive* fixture: weights constructed so every discrete choice (router
 * top-k with its gate bias, indexer top-k, candidate blocks) has a clear margin; the generator
 * measures the margins by running the real forward pass on fixed prompts when the model library
 * provides it, and reports the smallest one. */
#ifndef DS_TOOLS_MKMODEL_H
#define DS_TOOLS_MKMODEL_H
#include "base/common.h"
#include "io/config.h"
#include "tools/quant_source.h"

typedef struct ds_mkmodel_opts {
    const char *config;        /* "tiny", "mini" or a config.json path */
    const char *out;           /* release directory (NULL: only --float-out) */
    const char *float_out;     /* float checkpoint directory, or NULL */
    uint64_t seed;
    bool smooth;               /* decisive fixture */
    bool identity_rotation;    /* R = I (no fold) */
    uint64_t shard_bytes;      /* 0: preset default (tiny 1 MiB so the trunk has several shards) */
    uint64_t split_engram;     /* 0: preset default (tiny 256 KiB); see no_split */
    bool no_split, split_only;
    int threads;
    bool quiet;
    bool no_verify;            /* skip the forward-pass checks */
    bool official;             /* --format official: the FP8/MXFP4 layout of CHECKPOINT.md §14 */
} ds_mkmodel_opts;

void ds_mkmodel_opts_default(ds_mkmodel_opts *o);
/* Returns an exit status (TOOLS.md §0); err holds the message when != 0. */
int ds_mkmodel_run(const ds_mkmodel_opts *o, ds_error *err);

/* The synthetic float source for a validated config (exposed for tests). */
int ds_mk_source_new(const ds_config *cfg, uint64_t seed, bool smooth, bool identity_rotation, ds_fsrc **out, ds_error *err);

/* ---- generator internals shared by mkmodel_source.c and mkmodel_init.c ---- */

/* splitmix64: the generator of every random stream here. */
static inline uint64_t ds_mk_mix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* FNV-1a of a string, mixed with the seed: the stream seed of one tensor. */
uint64_t ds_mk_tensor_seed(uint64_t seed, const char *name);
/* Approximately standard normal (Irwin–Hall of four 16-bit uniforms, unit variance, |z| < 3.47):
 * used for the few small structured tensors. */
static inline float ds_mk_normal(uint64_t *state) {
    uint64_t r = ds_mk_mix(state);
    int64_t s = (int64_t)(r & 0xffff) + (int64_t)((r >> 16) & 0xffff) + (int64_t)((r >> 32) & 0xffff) + (int64_t)(r >> 48);
    return (float)(((double)s - 131070.0) * (1.0 / 37837.22894));
}
/* Four zero-mean unit-variance uniform values (|z| < 1.733) from one draw: the bulk weights.  A
 * uniform law is as good as a normal one for a synthetic model and costs a quarter of the draws,
 * which is most of mkmodel's time on the 7 G-weight mini model. */
static inline void ds_mk_uniform4(uint64_t *state, float out[4]) {
    uint64_t r = ds_mk_mix(state);
    for (int k = 0; k < 4; k++) out[k] = (float)(((double)((r >> (16 * k)) & 0xffff) - 32767.5) * (3.4641016151377544 / 65536.0));
}

typedef enum {
    DS_MK_NORMAL = 0, DS_MK_HC_BASE, DS_MK_HC_SCALE, DS_MK_BIAS_TIERS, DS_MK_EMBED,
    DS_MK_DC_ROW0, DS_MK_DC_ALL, DS_MK_IDX_WQB, DS_MK_IDX_WK, DS_MK_ONES   /* --smooth indexer construction */
} ds_mk_kind;
typedef enum { DS_MK_FOLD_NONE = 0, DS_MK_FOLD_RIGHT, DS_MK_FOLD_LEFT, DS_MK_FOLD_LEFT_VALUE } ds_mk_fold;

typedef struct ds_mk_spec {
    ds_mk_kind kind;
    double mean, std;          /* NORMAL: mean + std·z */
    ds_mk_fold fold;
    char seed_name[96];        /* name whose stream generates the values (draft vocabulary copies) */
    int layer;                 /* for structured kinds */
    bool folded_norm;          /* a residual norm whose weights live in its readers: emits 1.0 */
    char norm_fold[96];        /* a reader of a residual norm: columns scaled by that norm's weights */
} ds_mk_spec;

/* The --smooth indexer's rotary pair and phase (mkmodel_init.c): index scores become a positive
 * per-row constant times relu(cos(phase + θ·distance)), strictly decreasing over a window of
 * recent entries and zero beyond it, for prompts of up to DS_MK_DECISIVE_LEN tokens. */
#define DS_MK_DECISIVE_LEN 320
/* Revision of what mkmodel writes for a given config and seed. Bump it whenever the output changes
 * (new config fields, other initialisation): caches of generated models are keyed by it, so a stale
 * checkpoint from an older build is never served in place of what this build would generate. */
#define DS_MKMODEL_REVISION 2
void ds_mk_index_pair(const ds_config *cfg, int *pair, double *phase);

/* Initialization rule of one tensor (mkmodel_init.c). */
void ds_mk_spec_for(const ds_config *cfg, const char *name, int64_t rows, int64_t cols, bool smooth, ds_mk_spec *out);
/* Unrotated values of rows [r0, r1) of a tensor with spec `sp` and stream seed `seed`. */
void ds_mk_gen_rows(const ds_config *cfg, const ds_mk_spec *sp, uint64_t seed, uint64_t global_seed, int64_t r0, int64_t r1,
                    int64_t cols, float *out);

#endif
