/* Shared state of the verifier's two files: verify.c (directory model, report, F1 C1 LOAD I1 H1
 * N1 L1) and verify_tensors.c (S1 R1 E1 D1 X1).  The directory model (vckpt) is built once per
 * checkpoint — the verified one and, for --compare, the other — and never aborts: whatever cannot
 * be read is recorded so the checks can report it. */
#ifndef DS_TOOLS_VERIFY_INTERNAL_H
#define DS_TOOLS_VERIFY_INTERNAL_H
#include "tools/verify.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/tensor_plan.h"
#include <cJSON.h>

#define V_INDEX_FILE "quant_model_weights.safetensors.index.json"
#define V_DESC_FILE "quant_model_description.json"
#define V_MANIFEST_FILE "mtpq_manifest.json"
#define V_DEFAULT_QUAROT "optional/quarot.safetensors"

/* Status order doubles as severity: the worst issue decides a check's status. */
typedef enum { VS_PASS = 0, VS_WARN, VS_NEED, VS_FAIL, VS_SKIP } vstatus;

typedef struct vcheck {
    const char *id, *title;
    vstatus st;
    int n_issues, n_shown, n_warn;
    char detail[3072];
} vcheck;

typedef struct vfile {
    char *rel;
    ds_stfile *st;          /* NULL when missing or unreadable */
    bool missing, need;     /* need: absent, but split parts are there */
    bool index_target;      /* named by the index's weight_map */
    char err[1024];
} vfile;

typedef struct vname {
    const char *name;       /* points into the tensor record */
    int file;               /* index into vckpt.files */
    const ds_tensor *t;
    bool indexed;           /* resolved through the index (else an auxiliary file) */
    int order;              /* resolution priority (lower wins) */
} vname;

typedef struct vckpt {
    char *dir;
    cJSON *config, *index, *desc;
    char config_err[1024], index_err[1024], desc_err[1024];
    ds_config cfg;
    bool cfg_ok;
    char cfg_err[1024];
    int n_files;
    vfile *files;
    int n_names, cap_names;
    vname *names;           /* sorted by name */
    int n_desc;
    const cJSON **desc_items;   /* tensor-name entries of the description, sorted by name */
    int n_aux;                  /* auxiliary files found (mtpq shards, mtp-vocab, vision, engram_extra) */
    bool engram_need;       /* an Engram table exists only as parts */
} vckpt;

typedef struct vctx {
    const ds_verify_opts *o;
    vckpt m;
    bool profile;           /* the release profile applies */
    ds_plan plan;
    bool plan_ok;
    vcheck checks[16];
    int n_checks;
} vctx;

vcheck *vc_begin(vctx *v, const char *id, const char *title);
void vc_issue(vcheck *c, vstatus st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void vc_note(vcheck *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int vk_load(vckpt *k, const char *dir);
void vk_free(vckpt *k);
int vk_file(vckpt *k, const char *rel);                 /* opens lazily; index into files */
const vname *vk_find(const vckpt *k, const char *name);
const char *vk_label(const vckpt *k, const char *name); /* description label or NULL */
bool v_is_draft(const char *name);
bool v_is_vision(const char *name);
bool v_is_engram(const char *name);

const char *v_status_name(vstatus s);
ds_label v_name_label(const vckpt *k, const vname *n);   /* description label, else derived */
/* verify_json.c: write the --json-out result; 0 or -1 (message printed) */
int v_write_json(vctx *v, const char *verdict, int n_checks, int n_failed, int n_warn, const char *started);

/* verify_tensors.c */
void v_check_shapes(vctx *v);
void v_check_rotation(vctx *v);
void v_check_engram(vctx *v);
void v_check_deep(vctx *v);
void v_check_compare(vctx *v);

/* verify_official.c: the rows of the official FP8/MXFP4 layout (the shared rows passed in). */
void v_check_official(vctx *v, void (*config)(vctx *), void (*loader)(vctx *), void (*index)(vctx *), void (*headers)(vctx *));

#endif
