/* The tensor plan: every tensor a configuration requires in the W4A8 release layout, with its
 * label, accepted dtypes, exact shape and owning file (CHECKPOINT.md §2, §6, §8, §9, §11, §12 and
 * the role table of MODEL.md §1.2).
 *
 * One generator feeds three consumers — the loader checks (checklist 7, 13, 14, 15), the mkmodel
 * writer and `dsflash verify` counts — so they cannot disagree about what a checkpoint contains.
 * Everything is derived from ds_config (layer roles, expert counts, Engram layers, draft stages);
 * nothing assumes V4.1-Flash's 40 layers.  For V4.1-Flash the trunk part yields exactly the
 * counts of CHECKPOINT.md §8 (184,320 W4A8 + 744 W8A8 + 670 FLOAT = 185,734).
 *
 * Iteration is by callback so that the V4.1-Flash plan (~190,000 entries) need not be held in
 * memory; ds_plan_build collects it into an array for callers that want random access. */
#ifndef DS_IO_TENSOR_PLAN_H
#define DS_IO_TENSOR_PLAN_H
#include "base/common.h"
#include "io/config.h"
#include "io/safetensors.h"

/* Quantization label of a tensor (quant_model_description.json values, plus Engram tables that
 * are identified by name).  OTHER = a label string this engine does not implement. */
typedef enum { DS_LABEL_NONE = 0, DS_LABEL_FLOAT, DS_LABEL_W8A8, DS_LABEL_W4A8, DS_LABEL_OTHER, DS_LABEL_ENGRAM } ds_label;
const char *ds_label_name(ds_label l);          /* "FLOAT", "W8A8_DYNAMIC", "W4A8_DYNAMIC", "engram", ... */
ds_label ds_label_parse(const char *s);         /* unknown strings -> DS_LABEL_OTHER */

/* Which file of the release holds the tensor (CHECKPOINT.md §1). */
typedef enum {
    DS_PF_TRUNK = 0,     /* quant_model_weights-*.safetensors, through the index */
    DS_PF_ENGRAM_TABLE,  /* engram_int8/layers_{L}_engram_embed.{weight,scale}.safetensors */
    DS_PF_ENGRAM_EXTRA,  /* engram_extra.safetensors */
    DS_PF_DRAFT,         /* mtpq-*.safetensors (from mtpq_manifest.json) */
    DS_PF_DRAFT_VOCAB,   /* mtp.0.embed / mtp.{S-1}.head: mtpq shards, or mtp-vocab-00001-of-00001 */
    DS_PF_QUAROT,        /* optional/quarot.safetensors */
    DS_PF_COUNT
} ds_plan_file;
const char *ds_plan_file_name(ds_plan_file f);

/* Role of the tensor inside its linear / group. */
typedef enum {
    DS_PP_FLOAT = 0,     /* a single float tensor */
    DS_PP_WEIGHT,        /* X.weight of a quantized linear (I8 codes, packed for W4A8) */
    DS_PP_SCALE,         /* X.weight_scale [out, 1] */
    DS_PP_OFFSET,        /* X.weight_offset [out, 1] (must be zero) */
    DS_PP_SCALE_BIAS,    /* X.scale_bias [out, 1] or [out, 16] for w2 (W4A8 only) */
    DS_PP_ENGRAM_CODES,  /* int8 Engram rows [rows, head_dim] */
    DS_PP_ENGRAM_SCALE,  /* F32 power-of-two group scales [rows, head_dim / 32] */
    DS_PP_ROTATION,      /* global_rotation [D, D] */
} ds_plan_part;

#define DS_DT_BIT(t) (1u << (t))

typedef struct ds_plan_tensor {
    char name[80];
    char alias[80];          /* accepted alternative spelling (Markov head), or "" */
    char linear[72];         /* the linear's name X (without ".weight"), "" for non-linears */
    ds_label label;
    ds_plan_part part;
    ds_plan_file file;
    ds_dtype dtype;          /* what a writer produces */
    uint32_t dtype_mask;     /* what the loader accepts (DS_DT_BIT) */
    int ndim;
    int64_t shape[2];
    int layer;               /* backbone layer, L + s for draft stage s, -1 global */
    int expert;              /* routed expert id, or -1 */
    int64_t out, in;         /* logical linear dims; 0 for non-linears */
    bool flex_w8a8;          /* draft FLOAT linear that mtpq options may store as W8A8 (§11) */
} ds_plan_tensor;

typedef struct ds_plan_opts {
    bool trunk;              /* global + backbone layers (default true) */
    bool engram;             /* Engram tables and engram_extra (default: config has Engram layers) */
    bool draft;              /* draft stages and extras (default: n_mtp_layers > 0) */
    bool draft_vocab;        /* unrotated mtp.0.embed / last-stage head (W4A8 release only) */
    bool rotation;           /* optional/quarot.safetensors (W4A8 release) */
} ds_plan_opts;
void ds_plan_opts_default(ds_plan_opts *o, const ds_config *cfg);

/* Calls cb for every planned tensor in a fixed order; cb returns non-zero to stop (that value is
 * returned).  Returns -1 with err (E_CONFIG) when the config's format has no plan. */
typedef int (*ds_plan_cb)(const ds_plan_tensor *t, void *ctx);
int ds_plan_foreach(const ds_config *cfg, const ds_plan_opts *o, ds_plan_cb cb, void *ctx, ds_error *err);

typedef struct ds_plan {
    int64_t n;
    ds_plan_tensor *t;
} ds_plan;
int ds_plan_build(const ds_config *cfg, const ds_plan_opts *o, ds_plan *out, ds_error *err);
void ds_plan_free(ds_plan *p);

/* Tensor counts by file and label (what verify prints and §8/§11 quote). */
typedef struct ds_plan_counts {
    int64_t by_file_label[DS_PF_COUNT][DS_LABEL_ENGRAM + 1];
    int64_t bytes_by_file[DS_PF_COUNT];
    int64_t per_stage[DS_MAX_LAYERS][DS_LABEL_ENGRAM + 1]; /* draft stage s, block tensors only */
    int64_t total;
} ds_plan_counts;
int ds_plan_count(const ds_config *cfg, const ds_plan_opts *o, ds_plan_counts *c, ds_error *err);

/* Byte size of a planned tensor. */
uint64_t ds_plan_nbytes(const ds_plan_tensor *t);

#endif
