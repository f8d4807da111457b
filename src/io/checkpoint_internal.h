/* Private state shared by checkpoint.c (files, index, description, name map) and
 * checkpoint_checks.c (the plan-driven checks of CHECKPOINT.md §15).  Kept out of checkpoint.h so
 * the public struct stays the agreed interface. */
#ifndef DS_IO_CHECKPOINT_INTERNAL_H
#define DS_IO_CHECKPOINT_INTERNAL_H
#include "io/checkpoint.h"

typedef struct ck_desc_entry {
    char *name;
    char *label;               /* the raw string ("" for a non-string value) */
} ck_desc_entry;

typedef struct ck_state {
    ds_checkpoint *c;
    const ds_ckpt_opts *o;
    bool need_engram, need_draft;
    /* description labels, sorted by name */
    int n_desc;
    ck_desc_entry *desc;
    char *desc_path;
    char *index_path;
    int64_t index_bytes;       /* summed bytes of the indexed tensors (check 28) */
    ds_stfile *rot_file;       /* the rotation file, handed to c->files at the end */
    int n_scale_bias_bad;      /* W_SCALE_BIAS mismatches (only the first few are itemized) */
} ck_state;

/* Record a warning on the checkpoint (also logged). */
void ck_warn(ds_checkpoint *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Index of a name in c->by_name (after "model." stripping), or -1. */
int ck_find(const ds_checkpoint *c, const char *name);
const char *ck_desc_label(const ck_state *s, const char *name);

/* checkpoint_checks.c */
int ck_check_rotation(ck_state *s, const char *rel, ds_error *err);
int ck_check_plan(ck_state *s, ds_error *err);
int ck_check_token_map(ck_state *s, ds_error *err);
/* official_layout.c: the checks of the official FP8/MXFP4 layout (CHECKPOINT.md §14). */
int ck_check_official(ck_state *s, ds_error *err);

#endif
