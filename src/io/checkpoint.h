/* A W4A8 release directory, opened and validated (CHECKPOINT.md §1–§15).  The official FP8/MXFP4
 * layout (§14) is opened through its own index (model.safetensors.index.json) and checked by
 * io/official_layout.c instead of the description, rotation and draft-manifest steps.
 *
 * The checkpoint resolves tensor names through the index JSON, then the auxiliary files in the
 * order of §4 (mtpq shards from the manifest, mtp-vocab, vision, engram_extra); it never globs.
 * All shard files are mmap'd read-only; tensors are views.  Validation runs the loader checklist
 * of §15 at level basic (or full) and reports the first failure as
 * `E_CODE: <file>[: <tensor>]: expected <x>, found <y>` (the message starts with the code).
 *
 * Checks done here: 1–18, 20–22, 23 when the token map comes from a map file, 25–28.  Checks 19
 * and 24 (and 23 when the map is computed from the tokenizer) need src/model's Engram math and run
 * through opts.extra_check.  Codes beyond §15 for unparsable JSON: E_INDEX_PARSE,
 * E_QUANT_DESC_PARSE; I/O failures are E_IO. */
#ifndef DS_IO_CHECKPOINT_H
#define DS_IO_CHECKPOINT_H
#include "base/common.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/tensor_plan.h"   /* ds_label */

struct ds_checkpoint;

typedef struct ds_ckpt_opts {
    bool full;                /* level full (TOOLS verify --full) */
    int64_t max_model_len;    /* 0 = not requested */
    bool need_draft;          /* check mtpq shards/manifest */
    bool need_engram;         /* default true when config has Engram layers */
    /* Draft vocabulary missing in a rotated release: fail with E_DRAFT_VOCAB_MISSING (default), or,
     * when draft_optional, log an ERROR, set draft_enabled = false and continue (SERVING §8.2). */
    bool draft_optional;
    int engram_samples;       /* rows sampled by check 21 at level basic (default 64) */
    /* Checks 19 (prime sums), 24 (multipliers) and 23 when the token map is computed from the
     * tokenizer need the Engram math of src/model; io cannot depend on it, so the caller may pass
     * them in here.  Called last, after every io check passed; non-zero fails the open. */
    int (*extra_check)(const struct ds_checkpoint *c, void *ctx, ds_error *err);
    void *extra_ctx;
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
    /* warnings emitted while loading (W_* texts, also logged) */
    int n_warnings;
    char **warnings;
    /* detected format of each tensor in by_name order (plan tensors; others FLOAT or NONE) */
    ds_label *detected;
    bool engram_enabled;       /* Engram tables checked and available */
    bool draft_enabled;        /* draft tensors checked and available */
    char draft_disabled_reason[256];
    bool vision_available;     /* config has vision and the vision file is present */
    char *rotation_path;       /* full path of the rotation file, or NULL */
    int n_index_entries;       /* weight_map entries resolved */
    int64_t index_total_size;  /* metadata.total_size, -1 if absent */
} ds_checkpoint;

void ds_ckpt_opts_default(ds_ckpt_opts *o);
int ds_ckpt_open(const char *dir, const ds_ckpt_opts *opts, ds_checkpoint **out, ds_error *err);
void ds_ckpt_close(ds_checkpoint *c);
/* ds_st_release on the part of [p, p + n) in each file's mapping; 0 where none holds it (an aligned copy). */
size_t ds_ckpt_release(const ds_checkpoint *c, const void *p, size_t n);

/* Tensor by full name (a leading "model." is tolerated); NULL when absent.  The Markov-head aliases
 * (markov_w1 / markov_w2) resolve to whichever spelling the checkpoint has. */
const ds_tensor *ds_ckpt_tensor(const ds_checkpoint *c, const char *name);
/* Detected label of a tensor (what the checks validated; for draft tensors the detected format
 * wins over the description, CHECKPOINT.md §5).  DS_LABEL_NONE when unknown. */
ds_label ds_ckpt_label(const ds_checkpoint *c, const char *name);
/* The description's label for a name as parsed ("FLOAT", "W8A8_DYNAMIC", "W4A8_DYNAMIC", "OTHER"),
 * NULL when unlabelled. */
const char *ds_ckpt_desc_label(const ds_checkpoint *c, const char *name);

#endif
