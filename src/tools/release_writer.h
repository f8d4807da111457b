/* Writing a W4A8 release (or a float checkpoint) from a float source (TOOLS.md §3.2–§3.5,
 * CHECKPOINT.md §1–§13).
 *
 * Why a plan first: every output file's header, size and tensor offsets are computed from the
 * source *headers* before any weight is read (TOOLS.md §3.5 "A plan is computed first ... so MM is
 * known before writing").  That gives resumability (a finished file whose name exists with the
 * planned header and size is skipped), lets workers write their tensors with pwrite at fixed
 * offsets in any order (so the bytes do not depend on the thread count), and makes the layout a
 * pure function of (source tensor list, options): a release from mkmodel and one from quantize of
 * mkmodel's float output are the same bytes.
 *
 * Layout rules, shared by every file written here:
 *  - tensors are assigned to shards in sorted-name order; a shard is closed when the next source
 *    tensor's outputs would exceed the shard size (a quantized linear's weight, scale, offset and
 *    scale_bias always stay in one shard);
 *  - inside a file, data is placed by descending item size, then name (every tensor aligned to its
 *    item size with no gaps), the header lists tensors in name order and is space-padded so data
 *    starts at a multiple of 8 — the convention of io/safetensors' writer; Engram table files have a
 *    header of exactly 104 bytes (data at byte 112, CHECKPOINT.md §9) and no __metadata__;
 *  - every file is written as `<name>.partial`, fsynced, then renamed; JSON files are written
 *    atomically; the index is written last, so an interrupted run never looks complete. */
#ifndef DS_TOOLS_RELEASE_WRITER_H
#define DS_TOOLS_RELEASE_WRITER_H
#include "base/common.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "tools/quant.h"
#include "tools/quant_source.h"

#define DS_RW_W4A8 "W4A8_DYNAMIC"
#define DS_RW_W8A8 "W8A8_DYNAMIC"
#define DS_RW_FLOAT "FLOAT"
#define DS_RELEASE_INDEX "quant_model_weights.safetensors.index.json"
#define DS_RELEASE_DESC "quant_model_description.json"
#define DS_MTPQ_MANIFEST "mtpq_manifest.json"
#define DS_QUANT_MANIFEST "quant_manifest.json"
#define DS_QUANT_PLAN "quant_plan.json"
#define DS_ENGRAM_EXTRA "engram_extra.safetensors"
#define DS_VISION_FILE "vision-00001-of-00001.safetensors"
#define DS_TOOL_VERSION "dsflash-quantize/1"

typedef enum { DS_QK_FLOAT = 0, DS_QK_W8A8, DS_QK_W4A8, DS_QK_ENGRAM, DS_QK_ZERO } ds_qkind;
typedef enum {
    DS_RF_TRUNK = 0, DS_RF_DRAFT, DS_RF_EXTRA, DS_RF_ENGRAM_W, DS_RF_ENGRAM_S, DS_RF_VISION, DS_RF_FLOAT
} ds_rfile_kind;

typedef struct ds_rw_opts {
    bool float_export;        /* write a float checkpoint (mkmodel --float-out) instead of a release */
    bool aggressive;          /* --plan aggressive: draft wo_a / wo_b -> W8A8 */
    bool quant_main_proj;     /* mtp.*.main_proj -> W8A8 */
    bool quant_vocab;         /* draft vocabulary -> W8A8 */
    int ssz_steps;            /* int4 scale search steps (1 = minmax) */
    bool int4_minmax;
    uint64_t shard_bytes;     /* trunk and draft shard size */
    uint64_t split_engram;    /* 0 = no split; else part size of the Engram code tables */
    bool split_only;          /* keep only the parts of split tables */
    bool no_engram, engram_only;
    int threads;              /* 0 = online CPUs */
    bool quiet;
    const char *src_label;    /* "src" recorded in manifests */
    const char *out_label;    /* "out" recorded in manifests */
} ds_rw_opts;
void ds_rw_opts_default(ds_rw_opts *o);

typedef struct ds_rw_tensor {
    char *name;
    ds_dtype dtype;
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;          /* absolute byte offset of the data in its file */
    int file;
    const char *label;        /* NULL: unlabelled (Engram tables, placeholders) */
    bool in_index;
} ds_rw_tensor;

typedef struct ds_rw_group {
    int src;                  /* source tensor, -1 for generated placeholders */
    ds_qkind kind;
    int n_out;
    int out[4];               /* FLOAT/ZERO: [t]; W8A8: [weight, weight_scale, weight_offset];
                                 W4A8: + scale_bias; ENGRAM: [weight, scale] */
    int sb_chunks;            /* scale_bias columns (W4A8) */
    int unit;                 /* write unit (files written and committed together) */
    uint64_t src_bytes;
    /* results, filled by the writer */
    ds_qerr qerr;
    int64_t zero_groups;
    int min_exp, max_exp;
} ds_rw_group;

typedef struct ds_rw_file {
    char *relpath;
    ds_rfile_kind kind;
    int unit;
    int n_tensors;
    int *tensors;             /* name order */
    char *header;             /* the planned header bytes (JSON + padding), header_len long */
    uint64_t header_len;
    uint64_t size;
    bool skip;                /* resume: already complete */
} ds_rw_file;

typedef struct ds_rw_plan {
    ds_rw_opts opts;
    ds_config cfg;
    int n_tensors, cap_tensors;
    ds_rw_tensor *tensors;
    int n_groups, cap_groups;
    ds_rw_group *groups;
    int n_files, cap_files;
    ds_rw_file *files;
    int n_units;
    int n_trunk, n_draft;     /* shard counts */
    int n_src_used;           /* source tensors consumed */
    bool add_draft_vocab;     /* mtp vocabulary copied from embed/head (identity rotation only) */
} ds_rw_plan;

/* Build the plan from the source's tensor list and config.  Errors name the tensor and rule
 * (E_SRC_FORMAT for tensors that cannot be placed, E_CONFIG for config problems). */
int ds_rw_plan_build(ds_fsrc *src, const ds_rw_opts *opts, ds_rw_plan **out, ds_error *err);
void ds_rw_plan_free(ds_rw_plan *p);

/* The plan as JSON text (quant_plan.json): outputs, options and source tensor list.  Two runs
 * may resume into one directory only when these texts are equal. */
char *ds_rw_plan_json(const ds_rw_plan *p, const ds_fsrc *src);

/* Write everything: tensor files (skipping complete ones), the rotation file, config, aux files,
 * manifests, description and finally the index.  `dst` must exist.  Prints a summary unless quiet.
 * Returns 0 or -1 (err; E_IO for I/O failures, E_SRC_NONFINITE naming a tensor with NaN/Inf). */
int ds_rw_write(ds_rw_plan *p, ds_fsrc *src, const char *dst, ds_error *err);

/* Pieces used by tests and by mkmodel. */
const char *ds_rw_label_for(const ds_rw_opts *o, const char *name, int n_mtp, ds_qkind *kind);
/* config.json of the release: the float config with quantization_config set to the W4A8 form
 * (float_export: with quantization_config removed).  Caller frees. */
char *ds_rw_config_text(const char *float_config_json, bool float_export, ds_error *err);
/* Write optional/quarot.safetensors for block r and width D. */
int ds_rw_write_rotation(const char *dst, const ds_rot32 *r, int64_t D, ds_error *err);
/* Generated-UTC stamp: $SOURCE_DATE_EPOCH when set (reproducible outputs), else now. */
void ds_rw_utc_stamp(char *buf, size_t n);

#endif
