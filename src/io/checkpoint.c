/* Opening a W4A8 release directory (CHECKPOINT.md §1, §4, §5, §10, §11, §15).
 *
 * The order of work follows the order in which a broken directory is most usefully reported:
 * config first (nothing else can be sized without it), then the presence of the required files,
 * then the description and the index (every entry must resolve to a file that parses and holds the
 * tensor), the draft manifest, the auxiliary files in the lookup order of §4, and only then the
 * plan-driven checks on dtypes, shapes, labels and values (checkpoint_checks.c).  Each step stops at
 * the first failure with one `E_CODE: file[: tensor]: expected ..., found ...` message.
 *
 * Names are resolved through the index first; a name the index lists is never taken from another
 * file (the [1,1] Engram placeholders in engram_extra are thereby ignored).  Auxiliary files only
 * fill names the index lacks, and the same name in two auxiliary files must agree in dtype and
 * shape.  Every file is opened once (ds_st_open maps it), and the loader never globs: the only
 * directory listing is the one that looks for split parts next to an index target (§10). */
#define _GNU_SOURCE
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/io_util.h"
#include "io/official_layout.h"
#include "base/fsutil.h"
#include <cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_FILE "quant_model_weights.safetensors.index.json"
#define DESC_FILE "quant_model_description.json"
#define MANIFEST_FILE "mtpq_manifest.json"
#define MTPQ_SCHEMA "mtpq-draft-quant/1"
#define DEFAULT_QUAROT "optional/quarot.safetensors"

void ds_ckpt_opts_default(ds_ckpt_opts *o) {
    memset(o, 0, sizeof *o);
    o->need_draft = true;
    o->need_engram = true;
    o->engram_samples = 64;
}

void ck_warn(ds_checkpoint *c, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->warnings = ds_xrealloc(c->warnings, sizeof(char *) * (size_t)(c->n_warnings + 1));
    c->warnings[c->n_warnings++] = ds_xstrdup(buf);
    ds_log(DS_LOG_WARN, "%s", buf);
}

static const char *strip_model(const char *n) { return strncmp(n, "model.", 6) ? n : n + 6; }

/* Names are ordered without a leading "model." so lookups can tolerate it either way. */
static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp(strip_model((*(const ds_tensor *const *)a)->name), strip_model((*(const ds_tensor *const *)b)->name));
}
static int cmp_desc(const void *a, const void *b) { return strcmp(((const ck_desc_entry *)a)->name, ((const ck_desc_entry *)b)->name); }

int ck_find(const ds_checkpoint *c, const char *name) {
    name = strip_model(name);
    int lo = 0, hi = c->n_names - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, r = strcmp(strip_model(c->by_name[mid]->name), name);
        if (!r) return mid;
        if (r < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

const ds_tensor *ds_ckpt_tensor(const ds_checkpoint *c, const char *name) {
    if (!c || !name) return NULL;
    int i = ck_find(c, name);
    if (i < 0) {
        /* Markov head spellings (§2): either is accepted. */
        const char *alt[2][2] = {{"markov_head.embed.weight", "markov_head.markov_w1.weight"}, {"markov_head.head.weight", "markov_head.markov_w2.weight"}};
        for (int k = 0; k < 2 && i < 0; k++)
            for (int d = 0; d < 2 && i < 0; d++) {
                const char *hit = strstr(name, alt[k][d]);
                if (hit && !strcmp(hit, alt[k][d])) {
                    char buf[256];
                    snprintf(buf, sizeof buf, "%.*s%s", (int)(hit - name), name, alt[k][1 - d]);
                    i = ck_find(c, buf);
                }
            }
    }
    return i < 0 ? NULL : c->by_name[i];
}

ds_label ds_ckpt_label(const ds_checkpoint *c, const char *name) {
    const ds_tensor *t = ds_ckpt_tensor(c, name);
    if (!t || !c->detected) return DS_LABEL_NONE;
    int i = ck_find(c, t->name);
    return i < 0 ? DS_LABEL_NONE : c->detected[i];
}

const char *ck_desc_label(const ck_state *s, const char *name) {
    name = strip_model(name);
    ck_desc_entry key = {.name = (char *)name};
    const ck_desc_entry *e = bsearch(&key, s->desc, (size_t)s->n_desc, sizeof *s->desc, cmp_desc);
    return e ? e->label : NULL;
}

const char *ds_ckpt_desc_label(const ds_checkpoint *c, const char *name) {
    if (!c || !name) return NULL;
    name = strip_model(name);
    int lo = 0, hi = c->n_labels - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, r = strcmp(c->label_names[mid], name);
        if (!r) return ds_label_name(c->labels[mid]);
        if (r < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Files                                                                                     */

typedef struct ck_files {
    int n, cap;
    char **rel;
    ds_stfile **f;
    int last;
} ck_files;

static ds_stfile *files_get(ck_files *fs, const char *rel) {
    if (fs->last >= 0 && fs->last < fs->n && !strcmp(fs->rel[fs->last], rel)) return fs->f[fs->last];
    for (int i = 0; i < fs->n; i++)
        if (!strcmp(fs->rel[i], rel)) { fs->last = i; return fs->f[i]; }
    return NULL;
}
static void files_add(ck_files *fs, const char *rel, ds_stfile *f) {
    if (fs->n == fs->cap) {
        fs->cap = fs->cap ? 2 * fs->cap : 16;
        fs->rel = ds_xrealloc(fs->rel, sizeof(char *) * (size_t)fs->cap);
        fs->f = ds_xrealloc(fs->f, sizeof(ds_stfile *) * (size_t)fs->cap);
    }
    fs->rel[fs->n] = ds_xstrdup(rel);
    fs->f[fs->n++] = f;
    fs->last = fs->n - 1;
}

/* §10 / check 22: split parts of `full` present?  Returns the number of part files found. */
static int count_parts(const char *full) {
    char *d = ds_xstrdup(full), *b = ds_xstrdup(full);
    const char *dir = dirname(d), *base = basename(b);
    size_t bl = strlen(base);
    int n = 0;
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *de;
        while ((de = readdir(dp)))
            if (!strncmp(de->d_name, base, bl) && !strncmp(de->d_name + bl, ".part-", 6)) n++;
        closedir(dp);
    }
    free(d);
    free(b);
    return n;
}

/* A reassembled target next to its parts counts as verified only with a matching stamp
 * `<target>.verified` (TOOLS.md §1.2 step 7: size, mtime_ns, inode). */
static bool stamp_matches(const char *full) {
    char *sp = NULL, *text = NULL;
    if (asprintf(&sp, "%s.verified", full) < 0) return false;
    ds_error e;
    bool ok = false;
    struct stat st;
    if (stat(full, &st) == 0 && ds_read_file(sp, &text, NULL, &e) == 0) {
        cJSON *j = cJSON_Parse(text);
        int64_t size, mt, ino;
        if (j && ds_io_json_int(cJSON_GetObjectItemCaseSensitive(j, "size"), 0, INT64_MAX, &size) &&
            ds_io_json_int(cJSON_GetObjectItemCaseSensitive(j, "inode"), 0, INT64_MAX, &ino)) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "mtime_ns");
            int64_t have_mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
            /* mtime_ns exceeds 2^53; accept a JSON number within double precision or a decimal string */
            bool mt_ok = cJSON_IsString(m) ? (sscanf(m->valuestring, "%" SCNd64, &mt) == 1 && mt == have_mt)
                       : cJSON_IsNumber(m) ? (double)have_mt == m->valuedouble : false;
            ok = size == (int64_t)st.st_size && ino == (int64_t)st.st_ino && mt_ok;
        }
        cJSON_Delete(j);
    }
    free(sp);
    free(text);
    return ok;
}

/* Open (once) an index or auxiliary file; `tensor` names the first entry pointing at it. */
static int open_target(ck_state *s, ck_files *fs, const char *rel, const char *tensor, const char *what, ds_stfile **out, ds_error *err) {
    ds_checkpoint *c = s->c;
    if ((*out = files_get(fs, rel))) return 0;
    char *full = ds_path_join(c->dir, rel);
    int rc = -1;
    int parts = count_parts(full);
    if (!ds_file_exists(full)) {
        if (parts)
            ds_io_fail(err, "E_ENGRAM_PARTS_NOT_REASSEMBLED", full, tensor, "expected the reassembled file, found only %d split part(s); run `dsflash reassemble %s`",
                       parts, c->dir);
        else
            ds_io_fail(err, what ? "E_MISSING_FILE" : "E_INDEX_TARGET_MISSING", what ? full : s->index_path, what ? NULL : tensor,
                       "expected %s %s to exist, found no such file", what ? what : "weight_map target", rel);
        goto out;
    }
    if (parts && !stamp_matches(full)) {
        ds_io_fail(err, "E_ENGRAM_PARTS_NOT_REASSEMBLED", full, tensor,
                   "expected a verified reassembly (matching %s.verified stamp) next to its %d split part(s), found none; run `dsflash reassemble %s` (a copied directory needs this once: "
                   "a stamp vouches for one file)", rel, parts, c->dir);
        goto out;
    }
    ds_stfile *f;
    if (ds_st_open(full, &f, err)) goto out;
    for (int i = 0; i < f->n_warnings; i++) ck_warn(c, "%s", f->warnings[i]);
    files_add(fs, rel, f);
    *out = f;
    rc = 0;
out:
    free(full);
    return rc;
}

static int read_json(const char *path, const char *code, cJSON **out, ds_error *err) {
    char *text = NULL;
    ds_error e;
    if (!ds_file_exists(path)) return ds_io_fail(err, "E_MISSING_FILE", path, NULL, "expected a required file, found no such file");
    if (ds_read_file(path, &text, NULL, &e)) return ds_io_fail(err, "E_IO", path, NULL, "expected a readable file, found %s", e.msg);
    *out = cJSON_Parse(text);
    free(text);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return ds_io_fail(err, code, path, NULL, "expected a JSON object, found %s", "invalid JSON or another value");
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */

static int load_description(ck_state *s, char **quarot_rel, ds_error *err) {
    ds_checkpoint *c = s->c;
    cJSON *d;
    if (read_json(s->desc_path, "E_QUANT_DESC_PARSE", &d, err)) return -1;
    int rc = -1;
    char b1[256];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "version");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "1.0.0")) {
        ds_io_fail(err, "E_QUANT_DESC_VERSION", s->desc_path, "version", "expected \"1.0.0\", found %s", ds_io_json_brief(b1, sizeof b1, v));
        goto out;
    }
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(d, "group_size");
    if (!cJSON_IsNumber(g) || g->valuedouble != 0) {
        ds_io_fail(err, "E_QUANT_DESC_VERSION", s->desc_path, "group_size", "expected 0, found %s", ds_io_json_brief(b1, sizeof b1, g));
        goto out;
    }
    *quarot_rel = ds_xstrdup(DEFAULT_QUAROT);
    const cJSON *qr = cJSON_GetObjectItemCaseSensitive(d, "optional");
    qr = qr ? cJSON_GetObjectItemCaseSensitive(qr, "quarot") : NULL;
    qr = qr ? cJSON_GetObjectItemCaseSensitive(qr, "rotation_map") : NULL;
    qr = qr ? cJSON_GetObjectItemCaseSensitive(qr, "global_rotation") : NULL;
    if (qr) {
        if (!cJSON_IsString(qr) || !ds_io_safe_relpath(qr->valuestring)) {
            ds_io_fail(err, "E_QUAROT_MISSING", s->desc_path, "optional.quarot.rotation_map.global_rotation",
                       "expected a relative path inside the model directory, found %s", ds_io_json_brief(b1, sizeof b1, qr));
            goto out;
        }
        free(*quarot_rel);
        *quarot_rel = ds_xstrdup(qr->valuestring);
    }
    static const char *reserved[] = {"version", "model_quant_type", "group_size", "metadata", "optional"};
    int n = 0;
    for (cJSON *it = d->child; it; it = it->next) n++;
    s->desc = ds_xcalloc((size_t)n + 1, sizeof *s->desc);
    for (cJSON *it = d->child; it; it = it->next) {
        bool skip = false;
        for (size_t k = 0; k < DS_ARRAY_LEN(reserved); k++) skip |= !strcmp(it->string, reserved[k]);
        if (skip) continue;
        ck_desc_entry *e = &s->desc[s->n_desc++];
        e->name = ds_xstrdup(strip_model(it->string));
        e->label = ds_xstrdup(cJSON_IsString(it) ? it->valuestring : "");
    }
    qsort(s->desc, (size_t)s->n_desc, sizeof *s->desc, cmp_desc);
    c->n_labels = s->n_desc;
    c->label_names = ds_xcalloc((size_t)s->n_desc + 1, sizeof(char *));
    c->labels = ds_xcalloc((size_t)s->n_desc + 1, sizeof(ds_label));
    for (int i = 0; i < s->n_desc; i++) {
        c->label_names[i] = ds_xstrdup(s->desc[i].name);
        c->labels[i] = ds_label_parse(s->desc[i].label);
    }
    rc = 0;
out:
    cJSON_Delete(d);
    return rc;
}

/* Names map: index entries first (authoritative), then auxiliary tensors. */
typedef struct ck_names { int n, cap; const ds_tensor **t; } ck_names;
static void names_add(ck_names *m, const ds_tensor *t) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->t = ds_xrealloc(m->t, sizeof(ds_tensor *) * (size_t)m->cap);
    }
    m->t[m->n++] = t;
}

static bool is_engram_table(const char *n) {
    size_t k = strlen(n);
    return (k > 20 && !strcmp(n + k - 20, ".engram.embed.weight")) || (k > 19 && !strcmp(n + k - 19, ".engram.embed.scale"));
}

static int load_index(ck_state *s, ck_files *fs, ck_names *names, bool *skipped, ds_error *err) {
    ds_checkpoint *c = s->c;
    cJSON *ix;
    if (read_json(s->index_path, "E_INDEX_PARSE", &ix, err)) return -1;
    int rc = -1;
    char b1[256];
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix, "weight_map");
    if (!cJSON_IsObject(wm)) {
        ds_io_fail(err, "E_INDEX_PARSE", s->index_path, "weight_map", "expected an object of tensor -> file, found %s", ds_io_json_brief(b1, sizeof b1, wm));
        goto out;
    }
    c->index_total_size = -1;
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ix, "metadata"), "total_size");
    int64_t tsv;
    if (ts && ds_io_json_int(ts, 0, INT64_MAX, &tsv)) c->index_total_size = tsv;
    for (const cJSON *it = wm->child; it; it = it->next) {
        const char *name = it->string;
        if (!cJSON_IsString(it)) {
            ds_io_fail(err, "E_INDEX_PARSE", s->index_path, name, "expected a file path string, found %s", ds_io_json_brief(b1, sizeof b1, it));
            goto out;
        }
        const char *rel = it->valuestring;
        if (!ds_io_safe_relpath(rel)) {
            ds_io_fail(err, "E_INDEX_TARGET_MISSING", s->index_path, name, "expected a relative path without '..' components, found \"%s\"", rel);
            goto out;
        }
        if (!s->need_engram && is_engram_table(strip_model(name))) { *skipped = true; continue; }
        ds_stfile *f;
        if (open_target(s, fs, rel, name, NULL, &f, err)) goto out;
        const ds_tensor *t = ds_st_find(f, name);
        if (!t) {
            ds_io_fail(err, "E_INDEX_TENSOR_ABSENT", f->path, name, "expected the tensor named by the index in this file's header, found %d other tensors",
                       f->n_tensors);
            goto out;
        }
        names_add(names, t);
        c->n_index_entries++;
        s->index_bytes += (int64_t)t->nbytes;
    }
    rc = 0;
out:
    cJSON_Delete(ix);
    return rc;
}

/* §11: manifest schema and shard list; returns the shard list (relative paths). */
static int load_manifest(ck_state *s, char ***shards, int *n_shards, ds_error *err) {
    char *mp = ds_path_join(s->c->dir, MANIFEST_FILE);
    cJSON *m = NULL;
    int rc = -1;
    char b1[256];
    if (read_json(mp, "E_MTPQ_MANIFEST", &m, err)) goto out;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(m, "schema");
    if (!cJSON_IsString(sc) || strcmp(sc->valuestring, MTPQ_SCHEMA)) {
        ds_io_fail(err, "E_MTPQ_MANIFEST", mp, "schema", "expected \"%s\", found %s", MTPQ_SCHEMA, ds_io_json_brief(b1, sizeof b1, sc));
        goto out;
    }
    const cJSON *os = cJSON_GetObjectItemCaseSensitive(m, "output_shards");
    if (!cJSON_IsArray(os) || cJSON_GetArraySize(os) < 1) {
        ds_io_fail(err, "E_MTPQ_MANIFEST", mp, "output_shards", "expected a non-empty list of shard file names, found %s", ds_io_json_brief(b1, sizeof b1, os));
        goto out;
    }
    int n = cJSON_GetArraySize(os);
    *shards = ds_xcalloc((size_t)n, sizeof(char *));
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(os, i);
        if (!cJSON_IsString(e) || !ds_io_safe_relpath(e->valuestring)) {
            ds_io_fail(err, "E_MTPQ_MANIFEST", mp, "output_shards", "expected relative shard paths without '..', found %s at position %d",
                       ds_io_json_brief(b1, sizeof b1, e), i);
            goto out;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp((*shards)[j], e->valuestring)) {
                ds_io_fail(err, "E_MTPQ_MANIFEST", mp, "output_shards", "expected each shard listed once, found \"%s\" twice", e->valuestring);
                goto out;
            }
        (*shards)[i] = ds_xstrdup(e->valuestring);
        (*n_shards)++;
    }
    rc = 0;
out:
    cJSON_Delete(m);
    free(mp);
    return rc;
}

/* Auxiliary files in §4 order; fills names the index does not list. */
static int load_aux(ck_state *s, ck_files *fs, ck_names *names, ds_error *err) {
    ds_checkpoint *c = s->c;
    char **shards = NULL;
    int n_shards = 0, rc = -1;
    char *mp = ds_path_join(c->dir, MANIFEST_FILE);
    bool have_manifest = ds_file_exists(mp);
    free(mp);
    /* Draft files are only opened (and their manifest only judged) when the draft is wanted. */
    if (have_manifest && s->need_draft && load_manifest(s, &shards, &n_shards, err)) goto out;
    int n_index = names->n;
    /* sorted copy of index names for "is it in the index" */
    const ds_tensor **idx = ds_xmalloc(sizeof(ds_tensor *) * (size_t)(n_index + 1));
    memcpy(idx, names->t, sizeof(ds_tensor *) * (size_t)n_index);
    qsort(idx, (size_t)n_index, sizeof *idx, cmp_tensor_ptr);
    const char *fixed[] = {"mtp-vocab-00001-of-00001.safetensors", "vision-00001-of-00001.safetensors", "engram_extra.safetensors"};
    int n_aux = n_shards + 3;
    for (int a = 0; a < n_aux; a++) {
        const char *rel = a < n_shards ? shards[a] : fixed[a - n_shards];
        ds_stfile *f = NULL;
        char *full = ds_path_join(c->dir, rel);
        bool exists = ds_file_exists(full);
        free(full);
        if (a < n_shards) {
            if (open_target(s, fs, rel, NULL, "mtpq shard listed in mtpq_manifest.json", &f, err)) goto out_idx;
        } else {
            if (!exists) continue;
            if (a == n_shards + 2 && !s->need_engram) continue;
            if (a == n_shards && !s->need_draft) continue;
            if (open_target(s, fs, rel, NULL, "auxiliary file", &f, err)) goto out_idx;
            if (a == n_shards + 1) c->vision_available = c->cfg.vision_layers > 0;
        }
        for (int i = 0; i < f->n_tensors; i++) {
            const ds_tensor *t = &f->tensors[i], *key = t;
            if (bsearch(&key, idx, (size_t)n_index, sizeof *idx, cmp_tensor_ptr)) continue; /* index wins */
            const ds_tensor *prev = NULL;
            for (int k = n_index; k < names->n; k++)
                if (!strcmp(names->t[k]->name, t->name)) { prev = names->t[k]; break; }
            if (!prev) { names_add(names, t); continue; }
            bool same = prev->dtype == t->dtype && prev->ndim == t->ndim && !memcmp(prev->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            if (!same) {
                char s1[96], s2[96];
                ds_io_fail(err, "E_DUPLICATE_TENSOR", f->path, t->name, "expected the same dtype/shape as in %s (%s %s), found %s %s", prev->file->path,
                           ds_dtype_name(prev->dtype), ds_io_shape_str(s1, sizeof s1, prev->ndim, prev->shape), ds_dtype_name(t->dtype),
                           ds_io_shape_str(s2, sizeof s2, t->ndim, t->shape));
                goto out_idx;
            }
        }
    }
    if (c->cfg.vision_layers > 0 && !c->vision_available)
        ck_warn(c, "W_VISION_DISABLED: %s: expected vision-00001-of-00001.safetensors for vision_config (%d layers), found no such file; image inputs will be rejected",
                c->dir, c->cfg.vision_layers);
    /* Required auxiliary files (check 1) when their tensors are not in the index. */
    if (s->need_draft && !have_manifest) {
        char probe[64];
        snprintf(probe, sizeof probe, "mtp.0.attn_norm.weight");
        bool found = false;
        for (int k = 0; k < names->n && !found; k++) found = !strcmp(strip_model(names->t[k]->name), probe);
        if (!found) {
            char *p = ds_path_join(c->dir, MANIFEST_FILE);
            ds_io_fail(err, "E_MISSING_FILE", p, NULL, "expected the draft manifest (draft stages configured, draft tensors not in the index), found no such file");
            free(p);
            goto out_idx;
        }
    }
    if (s->need_engram) {
        char probe[64];
        snprintf(probe, sizeof probe, "layers.%d.engram.wkv.weight", c->cfg.engram_layers[0]);
        bool found = false;
        for (int k = 0; k < names->n && !found; k++) found = !strcmp(strip_model(names->t[k]->name), probe);
        char *p = ds_path_join(c->dir, "engram_extra.safetensors");
        if (!found && !ds_file_exists(p)) {
            ds_io_fail(err, "E_MISSING_FILE", p, NULL, "expected the Engram extra file (Engram layers configured), found no such file");
            free(p);
            goto out_idx;
        }
        free(p);
    }
    rc = 0;
out_idx:
    free(idx);
out:
    for (int i = 0; i < n_shards; i++) free(shards[i]);
    free(shards);
    return rc;
}

static int check_required_files(ck_state *s, bool official, ds_error *err) {
    ds_checkpoint *c = s->c;
    const char *req[2] = {official ? DS_OFFICIAL_INDEX : INDEX_FILE, DESC_FILE};
    for (int i = 0; i < (official ? 1 : 2); i++) {
        char *p = ds_path_join(c->dir, req[i]);
        bool ok = ds_file_exists(p);
        if (!ok) ds_io_fail(err, "E_MISSING_FILE", p, NULL, "expected a required file of the %s, found no such file",
                            official ? "official FP8/MXFP4 layout" : "W4A8 release");
        free(p);
        if (!ok) return -1;
    }
    if (s->need_engram) {
        const char *rel = c->cfg.engram_token_map_file[0] ? c->cfg.engram_token_map_file : "tokenizer.json";
        char *p = ds_path_join(c->dir, rel);
        bool ok = ds_file_exists(p);
        if (!ok)
            ds_io_fail(err, "E_MISSING_FILE", p, NULL, "expected %s (Engram token map %s), found no such file",
                       c->cfg.engram_token_map_file[0] ? "engram_token_map_file" : "tokenizer.json", c->cfg.engram_token_map_file[0] ? "file" : "source");
        free(p);
        if (!ok) return -1;
    }
    return 0;
}

int ds_ckpt_open(const char *dir, const ds_ckpt_opts *opts, ds_checkpoint **out, ds_error *err) {
    *out = NULL;
    ds_ckpt_opts def;
    if (!opts) { ds_ckpt_opts_default(&def); opts = &def; }
    ds_checkpoint *c = ds_xcalloc(1, sizeof *c);
    c->dir = ds_xstrdup(dir);
    c->index_total_size = -1;
    ck_state s = {.c = c, .o = opts};
    ck_files fs = {.last = -1};
    ck_names names = {0};
    char *quarot_rel = NULL;
    bool skipped = false;
    int rc = -1;
    s.index_path = ds_path_join(dir, INDEX_FILE);
    s.desc_path = ds_path_join(dir, DESC_FILE);
    char *cfg_path = ds_path_join(dir, "config.json");
    /* checks 2, 3 */
    if (ds_config_load(dir, &c->cfg, err)) goto out;
    const bool official = c->cfg.format == DS_FMT_FP8;   /* §14: index + shards only */
    if (c->cfg.format != DS_FMT_W4A8 && !official) {
        ds_io_fail(err, "E_CONFIG_QUANT", cfg_path, "quantization_config", "expected {\"quant_method\": \"ascend\", \"model_quant_type\": \"W4A8_DYNAMIC\"} "
                   "or the official {\"quant_method\": \"fp8\", ...}, found %s", "no quantization_config");
        goto out;
    }
    if (official) {
        free(s.index_path);
        s.index_path = ds_path_join(dir, DS_OFFICIAL_INDEX);
    }
    if (ds_config_is_v41_flash(&c->cfg) && c->cfg.max_pos != 1048576) {
        ds_io_fail(err, "E_CONFIG_MAXPOS", cfg_path, "text_config.max_position_embeddings",
                   "expected 1048576 for the V4.1-Flash release (a smaller value marks a mis-assembled directory), found %" PRId64, c->cfg.max_pos);
        goto out;
    }
    if (opts->max_model_len > 0 && c->cfg.max_pos < opts->max_model_len) {
        ds_io_fail(err, "E_CONFIG_MAXPOS", cfg_path, "text_config.max_position_embeddings", "expected >= the requested max model length %" PRId64 ", found %" PRId64,
                   opts->max_model_len, c->cfg.max_pos);
        goto out;
    }
    s.need_engram = opts->need_engram && c->cfg.n_engram > 0;
    s.need_draft = opts->need_draft && c->cfg.n_mtp_layers > 0;
    /* check 1 */
    if (check_required_files(&s, official, err)) goto out;
    /* check 4 */
    if (!official && load_description(&s, &quarot_rel, err)) goto out;
    /* checks 5, 6, 8-12, 22 */
    if (load_index(&s, &fs, &names, &skipped, err)) goto out;
    /* checks 25 (manifest), 26, 1 (aux files) */
    if (!official && load_aux(&s, &fs, &names, err)) goto out;
    c->n_names = names.n;
    c->by_name = names.t;
    names.t = NULL;
    qsort(c->by_name, (size_t)c->n_names, sizeof *c->by_name, cmp_tensor_ptr);
    c->detected = ds_xcalloc((size_t)c->n_names + 1, sizeof(ds_label));
    c->engram_enabled = s.need_engram;
    c->draft_enabled = s.need_draft;
    /* checks 17, 18 */
    if (!official && ck_check_rotation(&s, quarot_rel, err)) goto out;
    /* checks 7, 13-16, 20, 21, 25 (vocabulary), 27; the official layout's own set */
    if (official ? ck_check_official(&s, err) : ck_check_plan(&s, err)) goto out;
    /* check 23 (map file form) */
    if (s.need_engram && ck_check_token_map(&s, err)) goto out;
    /* check 28 (warning only) */
    if (c->index_total_size >= 0 && !skipped && c->index_total_size != s.index_bytes)
        ck_warn(c, "W_TOTAL_SIZE: %s: metadata.total_size: expected %" PRId64 " (sum of the indexed tensors' bytes), found %" PRId64, s.index_path, s.index_bytes,
                c->index_total_size);
    rc = 0;
out:
    if (s.rot_file) files_add(&fs, quarot_rel ? quarot_rel : DEFAULT_QUAROT, s.rot_file);
    c->files = fs.f;
    c->n_files = fs.n;
    for (int i = 0; i < fs.n; i++) free(fs.rel[i]);
    free(fs.rel);
    free(names.t);
    for (int i = 0; i < s.n_desc; i++) { free(s.desc[i].name); free(s.desc[i].label); }
    free(s.desc);
    free(s.index_path);
    free(s.desc_path);
    free(cfg_path);
    free(quarot_rel);
    if (rc == 0 && opts->extra_check && opts->extra_check(c, opts->extra_ctx, err)) rc = -1;
    if (rc) ds_ckpt_close(c);
    else *out = c;
    return rc;
}

size_t ds_ckpt_release(const ds_checkpoint *c, const void *p, size_t n) {
    const uint8_t *a = p, *b = a + n;
    size_t released = 0;
    for (int i = 0; i < c->n_files; i++) {   /* mappings may lie back to back: each its own part */
        const ds_stfile *f = c->files[i];
        const uint8_t *lo = a > f->map ? a : f->map, *hi = b < f->map + f->file_size ? b : f->map + f->file_size;
        if (lo < hi) released += ds_st_release(f, lo, (size_t)(hi - lo));
    }
    return released;
}

void ds_ckpt_close(ds_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_files; i++) ds_st_close(c->files[i]);
    free(c->files);
    free(c->by_name);
    for (int i = 0; i < c->n_labels; i++) free(c->label_names[i]);
    free(c->label_names);
    free(c->labels);
    for (int i = 0; i < c->n_warnings; i++) free(c->warnings[i]);
    free(c->warnings);
    free(c->detected);
    free(c->rotation_path);
    free(c->dir);
    free(c);
}
