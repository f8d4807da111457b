/* A W4A8 (or official FP8) release directory, opened and validated (CHECKPOINT.md §1–§15).
 *
 * The checkpoint resolves tensor names through the index JSON, then the auxiliary files in the
 * order of §4 (mtpq shards from the manifest, mtp-vocab, vision, engram_extra); it never globs.
 * All shard files are mmap'd read-only; tensors are views.  Validation runs the loader checklist
 * of §15 at level basic (or full) and reports the first failure as
 * `E_CODE: <file>[: <tensor>]: expected <x>, found <y>`. */
#ifndef DS_IO_CHECKPOINT_H
#define DS_IO_CHECKPOINT_H
#include "base/common.h"
#include "io/config.h"
#include "io/safetensors.h"

typedef enum { DS_LABEL_NONE = 0, DS_LABEL_FLOAT, DS_LABEL_W8A8, DS_LABEL_W4A8, DS_LABEL_OTHER } ds_label;

typedef struct ds_ckpt_opts {
    bool full;                /* level full (TOOLS verify --full) */
    int64_t max_model_len;    /* 0 = not requested */
    bool need_draft;          /* check mtpq shards/manifest */
    bool need_engram;         /* default true when config has Engram layers */
} ds_ckpt_opts;

typedef struct ds_checkpoint {
    char *dir;
    ds_config cfg;
    int n_files;
    ds_stfile **files;         /* every opened safetensors file */
    /* name -> tensor map (index first, then auxiliary files) */
    int n_names;
    const ds_tensor **by_name; /* sorted by name */
    /* quant description labels (name -> label) */
    int n_labels;
    char **label_names;
    ds_label *labels;
    /* QuaRot */
    bool has_rotation;
    float rot_block[32 * 32];  /* B, row-major */
    /* warnings emitted while loading */
    int n_warnings;
} ds_checkpoint;

void ds_ckpt_opts_default(ds_ckpt_opts *o);
int ds_ckpt_open(const char *dir, const ds_ckpt_opts *opts, ds_checkpoint **out, ds_error *err);
void ds_ckpt_close(ds_checkpoint *c);

/* Tensor by full name (a leading "model." is tolerated); NULL when absent. */
const ds_tensor *ds_ckpt_tensor(const ds_checkpoint *c, const char *name);
ds_label ds_ckpt_label(const ds_checkpoint *c, const char *name);

#endif
