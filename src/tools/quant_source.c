/* The float-source interface helpers and the directory reader of `dsflash quantize`.
 *
 * The reader maps every source shard once (io/safetensors) and answers row reads straight from
 * the mappings, so it is thread-safe without locks and never holds the model in memory
 * (TOOLS.md §3.5 "Memory").  In the default (bf16) mode it refuses anything that is not a float
 * tensor, naming the file and tensor: silently passing an int8 tensor through as "FLOAT" would
 * produce a release the engine misreads.  In fp8 mode encoded weights are paired with their
 * scales and decoded row by row on read (quant_fp8.c), so they too cost no memory. */
#define _GNU_SOURCE
#include "tools/quant_source.h"
#include "base/bf16.h"
#include "base/fsutil.h"
#include "tools/quant_fp8.h"
#include <cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Generic helpers                                                                            */

int ds_fsrc_find(const ds_fsrc *s, const char *name) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(s->t[mid].name, name);
        if (!c) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

void ds_fsrc_tensor_init(ds_fsrc_tensor *t, const char *name, ds_dtype dt, int ndim, const int64_t *shape) {
    memset(t, 0, sizeof *t);
    t->name = ds_xstrdup(name);
    t->dtype = dt;
    t->ndim = ndim;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) { t->shape[i] = shape[i]; numel *= shape[i]; }
    t->cols = ndim ? shape[ndim - 1] : 1;
    t->rows = t->cols ? numel / t->cols : 0;
    t->nbytes = ds_dtype_nbytes(dt, (uint64_t)numel);
}

static int cmp_fsrc_tensor(const void *a, const void *b) {
    return strcmp(((const ds_fsrc_tensor *)a)->name, ((const ds_fsrc_tensor *)b)->name);
}
void ds_fsrc_sort(ds_fsrc *s) { qsort(s->t, (size_t)s->n, sizeof *s->t, cmp_fsrc_tensor); }

void ds_fsrc_free(ds_fsrc *s) {
    if (!s) return;
    if (s->destroy) s->destroy(s);
    for (int i = 0; i < s->n; i++) free(s->t[i].name);
    free(s->t);
    free(s->config_json);
    free(s->label);
    free(s);
}

void ds_widen_to_f32(ds_dtype dt, const void *src, int64_t n, float *out) {
    if (dt == DS_DT_F32) {
        memcpy(out, src, sizeof(float) * (size_t)n);
    } else if (dt == DS_DT_BF16) {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) out[i] = ds_bf16_to_f32(h[i]);
    } else { /* F16 */
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) out[i] = ds_f16_to_f32(h[i]);
    }
}

void ds_narrow_from_f32(ds_dtype dt, const float *src, int64_t n, void *out) {
    if (dt == DS_DT_F32) {
        memcpy(out, src, sizeof(float) * (size_t)n);
    } else {
        uint16_t *h = out;
        for (int64_t i = 0; i < n; i++) h[i] = ds_f32_to_bf16(src[i]);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Directory reader                                                                           */

typedef struct dir_impl {
    char *dir;
    int n_files;
    ds_stfile **files;
    const ds_tensor **view;   /* [n] tensor in its mapped file, same order as s->t */
    const ds_tensor **scale;  /* [n] FP8 scale tensor, or NULL for a plain float tensor */
    int *fp8;                 /* [n] ds_fp8_kind, or 0 */
    char **aux;               /* relative paths copied unchanged */
    int n_aux;
} dir_impl;

static int fp8_rows(ds_fsrc *s, int i, int64_t r0, int64_t r1, float *out, ds_error *err) {
    dir_impl *d = s->impl;
    const ds_tensor *sc = d->scale[i];
    return ds_fp8_decode_rows((ds_fp8_kind)d->fp8[i], d->view[i]->data, sc->data, s->t[i].cols, sc->shape[1], r0, r1, out,
                              s->t[i].name, err);
}

static int dir_read_raw(ds_fsrc *s, int i, int64_t r0, int64_t r1, void *out, ds_error *err) {
    dir_impl *d = s->impl;
    const ds_fsrc_tensor *t = &s->t[i];
    if (d->fp8 && d->fp8[i]) { /* decoded values are exact in BF16 */
        float *f = ds_xmalloc(sizeof(float) * (size_t)((r1 - r0) * t->cols + 1));
        int rc = fp8_rows(s, i, r0, r1, f, err);
        if (!rc) ds_narrow_from_f32(DS_DT_BF16, f, (r1 - r0) * t->cols, out);
        free(f);
        return rc;
    }
    size_t row_bytes = (size_t)t->cols * (size_t)ds_dtype_size(t->dtype);
    const uint8_t *p = (const uint8_t *)d->view[i]->data + (size_t)r0 * row_bytes;
    memcpy(out, p, (size_t)(r1 - r0) * row_bytes);
    (void)err;
    return 0;
}

static int dir_read_f32(ds_fsrc *s, int i, int64_t r0, int64_t r1, float *out, ds_error *err) {
    dir_impl *d = s->impl;
    const ds_fsrc_tensor *t = &s->t[i];
    if (d->fp8 && d->fp8[i]) return fp8_rows(s, i, r0, r1, out, err);
    size_t row_bytes = (size_t)t->cols * (size_t)ds_dtype_size(t->dtype);
    const uint8_t *p = (const uint8_t *)d->view[i]->data + (size_t)r0 * row_bytes;
    ds_widen_to_f32(t->dtype, p, (r1 - r0) * t->cols, out);
    (void)err;
    return 0;
}

static int copy_file(const char *src_dir, const char *dst_dir, const char *rel, ds_error *err) {
    char *sp = ds_path_join(src_dir, rel), *dp = ds_path_join(dst_dir, rel);
    char *data = NULL;
    size_t len = 0;
    int rc = ds_read_file(sp, &data, &len, err);
    if (!rc) {
        char *slash = strrchr(dp, '/');
        if (slash && strchr(rel, '/')) {
            *slash = 0;
            rc = ds_mkdir_p(dp, err);
            *slash = '/';
        }
        if (!rc) rc = ds_write_file_atomic(dp, data, len, err);
    }
    free(data); free(sp); free(dp);
    return rc;
}

static int dir_write_aux(ds_fsrc *s, const char *dst_dir, ds_error *err) {
    dir_impl *d = s->impl;
    for (int i = 0; i < d->n_aux; i++)
        if (copy_file(d->dir, dst_dir, d->aux[i], err)) return -1;
    return 0;
}

static void dir_destroy(ds_fsrc *s) {
    dir_impl *d = s->impl;
    if (!d) return;
    for (int i = 0; i < d->n_files; i++) ds_st_close(d->files[i]);
    for (int i = 0; i < d->n_aux; i++) free(d->aux[i]);
    free(d->aux); free(d->files); free(d->view); free(d->scale); free(d->fp8); free(d->dir);
    free(d);
}

static int open_shard(dir_impl *d, const char *rel, ds_stfile **out, ds_error *err) {
    for (int i = 0; i < d->n_files; i++) {
        const char *p = d->files[i]->path + strlen(d->dir) + 1;
        if (!strcmp(p, rel)) { *out = d->files[i]; return 0; }
    }
    char *path = ds_path_join(d->dir, rel);
    if (!ds_file_exists(path)) {
        ds_fail(err, "E_MISSING_FILE", "%s: expected a safetensors file (listed by the source index), found none", path);
        free(path);
        return -1;
    }
    ds_stfile *f = NULL;
    int rc = ds_st_open(path, &f, err);
    free(path);
    if (rc) return -1;
    d->files = ds_xrealloc(d->files, sizeof(*d->files) * (size_t)(d->n_files + 1));
    d->files[d->n_files++] = f;
    *out = f;
    return 0;
}

typedef struct { ds_fsrc_tensor t; const ds_tensor *v; } tv_pair;
static int cmp_pair(const void *a, const void *b) {
    return strcmp(((const tv_pair *)a)->t.name, ((const tv_pair *)b)->t.name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* List the shard files of the source: from the float index when present, else the top-level glob. */
static int list_shards(const char *dir, char ***names, int *n, cJSON **index, ds_error *err) {
    *names = NULL; *n = 0; *index = NULL;
    char *ipath = ds_path_join(dir, DS_FLOAT_INDEX_FILE);
    if (ds_file_exists(ipath)) {
        char *text = NULL;
        size_t len = 0;
        if (ds_read_file(ipath, &text, &len, err)) { free(ipath); return -1; }
        cJSON *j = cJSON_Parse(text);
        free(text);
        const cJSON *wm = j ? cJSON_GetObjectItemCaseSensitive(j, "weight_map") : NULL;
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(j);
            ds_fail(err, "E_SRC_INDEX", "%s: weight_map: expected a JSON object of tensor -> file, found %s", ipath, j ? "something else" : "invalid JSON");
            free(ipath);
            return -1;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || !it->valuestring[0] || it->valuestring[0] == '/' || strstr(it->valuestring, "..")) {
                cJSON_Delete(j);
                ds_fail(err, "E_SRC_INDEX", "%s: weight_map.%s: expected a relative file path, found %s", ipath, it->string,
                        cJSON_IsString(it) ? it->valuestring : "a non-string");
                free(ipath);
                return -1;
            }
            int dup = 0;
            for (int k = 0; k < *n && !dup; k++) dup = !strcmp((*names)[k], it->valuestring);
            if (!dup) {
                *names = ds_xrealloc(*names, sizeof(char *) * (size_t)(*n + 1));
                (*names)[(*n)++] = ds_xstrdup(it->valuestring);
            }
        }
        *index = j;
    } else {
        DIR *dd = opendir(dir);
        if (!dd) { free(ipath); return ds_fail(err, "E_MISSING_FILE", "%s: cannot open the source directory", dir); }
        struct dirent *de;
        while ((de = readdir(dd))) {
            size_t l = strlen(de->d_name);
            if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
                *names = ds_xrealloc(*names, sizeof(char *) * (size_t)(*n + 1));
                (*names)[(*n)++] = ds_xstrdup(de->d_name);
            }
        }
        closedir(dd);
    }
    free(ipath);
    qsort(*names, (size_t)*n, sizeof(char *), cmp_str);
    if (*n == 0) return ds_fail(err, "E_MISSING_FILE", "%s: expected float safetensors shards (or %s), found none", dir, DS_FLOAT_INDEX_FILE);
    return 0;
}

/* The Engram token map named by the config (top level or text_config), or NULL. */
static char *config_token_map(const char *config_text) {
    cJSON *j = cJSON_Parse(config_text);
    if (!j) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "engram_token_map_file");
    if (!cJSON_IsString(v)) {
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
        v = tc ? cJSON_GetObjectItemCaseSensitive(tc, "engram_token_map_file") : NULL;
    }
    char *r = (cJSON_IsString(v) && v->valuestring[0]) ? ds_xstrdup(v->valuestring) : NULL;
    cJSON_Delete(j);
    return r;
}

static int load_rotation(ds_fsrc *s, const char *dir, ds_error *err) {
    char *path = ds_path_join(dir, DS_ROTATION_FILE);
    ds_rot32_identity(&s->rot);
    s->has_rotation = false;
    if (!ds_file_exists(path)) { free(path); return 0; }
    ds_stfile *f = NULL;
    int rc = ds_st_open(path, &f, err);
    if (!rc) {
        const ds_tensor *g = ds_st_find(f, "global_rotation");
        if (!g || g->dtype != DS_DT_F32 || g->ndim != 2 || g->shape[0] != g->shape[1])
            rc = ds_fail(err, "E_QUAROT_MISSING", "%s: global_rotation: expected an F32 [D, D] tensor, found %s", path,
                         g ? "another dtype or shape" : "no such tensor");
        else
            rc = ds_rot32_from_global(g->data, g->shape[0], &s->rot, path, err);
        if (!rc) s->has_rotation = true;
        ds_st_close(f);
    }
    free(path);
    return rc;
}

/* FP8 mode: pair every encoded weight with its `.scale`, present it as BF16 [out, in], drop the
 * scales from the tensor list (CHECKPOINT.md §14). */
static int pair_fp8(ds_fsrc *s, dir_impl *d, const char *dirname, ds_error *err) {
    d->scale = ds_xcalloc((size_t)(s->n ? s->n : 1), sizeof *d->scale);
    d->fp8 = ds_xcalloc((size_t)(s->n ? s->n : 1), sizeof *d->fp8);
    char *drop = ds_xcalloc((size_t)(s->n ? s->n : 1), 1);
    int rc = 0;
    for (int i = 0; i < s->n && !rc; i++) {
        const ds_tensor *w = d->view[i];
        size_t nl = strlen(w->name);
        bool encoded = w->dtype == DS_DT_F8_E4M3 || w->dtype == DS_DT_I8 || w->dtype == DS_DT_U8 || w->dtype == DS_DT_F4;
        if (nl > 6 && !strcmp(w->name + nl - 6, ".scale") && (w->dtype == DS_DT_F8_E8M0 || w->dtype == DS_DT_U8)) continue;
        if (!encoded) {
            if (!ds_dtype_is_float(w->dtype) || w->dtype == DS_DT_F64)
                rc = ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected BF16/F16/F32 or an FP8/MXFP4 weight, found %s", dirname, w->name,
                             ds_dtype_name(w->dtype));
            continue;
        }
        char sn[300];
        if (nl < 8 || strcmp(w->name + nl - 7, ".weight") || w->ndim != 2) {
            rc = ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected an encoded tensor to be a 2-D X.weight with an X.scale, found %d dimensions",
                         dirname, w->name, w->ndim);
            break;
        }
        snprintf(sn, sizeof sn, "%.*s.scale", (int)(nl - 7), w->name);
        int si = ds_fsrc_find(s, sn);
        const ds_tensor *sc = si >= 0 ? d->view[si] : NULL;
        int64_t out = w->shape[0], cols = w->shape[1];
        bool engram = strstr(w->name, ".engram.embed.weight") != NULL;
        ds_fp8_kind kind;
        int64_t in = cols, want0, want1;
        if (w->dtype == DS_DT_F8_E4M3) {
            kind = engram ? DS_FP8_ROWGROUP : DS_FP8_TILE;
            want0 = engram ? out : (out + 31) / 32;
            want1 = engram ? cols / 32 : (cols + 31) / 32;
            if (engram && cols % 32) sc = NULL;
        } else {
            kind = DS_FP8_MXFP4;
            in = ds_e2m1_inputs(w->dtype, cols);
            want0 = out;
            want1 = in / 32;
            if (in % 32) sc = NULL;
        }
        if (!sc || (sc->dtype != DS_DT_F8_E8M0 && sc->dtype != DS_DT_U8) || sc->ndim != 2 || sc->shape[0] != want0 || sc->shape[1] != want1) {
            rc = ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected an F8_E8M0 scale [%lld, %lld] for this %s weight, found %s", dirname, sn,
                         (long long)want0, (long long)want1, kind == DS_FP8_MXFP4 ? "MXFP4" : "FP8",
                         sc ? "another dtype or shape" : "none");
            break;
        }
        drop[si] = 1;
        d->scale[i] = sc;
        d->fp8[i] = kind;
        int64_t shape[2] = {out, in};
        char *name = s->t[i].name;
        ds_fsrc_tensor_init(&s->t[i], name, DS_DT_BF16, 2, shape);
        free(name);
    }
    if (!rc) { /* remove the consumed scales, keeping the arrays parallel */
        int k = 0;
        for (int i = 0; i < s->n; i++) {
            if (drop[i]) { free(s->t[i].name); continue; }
            s->t[k] = s->t[i];
            d->view[k] = d->view[i];
            d->scale[k] = d->scale[i];
            d->fp8[k] = d->fp8[i];
            k++;
        }
        s->n = k;
        for (int i = 0; i < s->n && !rc; i++) {
            size_t nl = strlen(s->t[i].name);
            if (!d->fp8[i] && nl > 6 && !strcmp(s->t[i].name + nl - 6, ".scale"))
                rc = ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected every scale to belong to an encoded X.weight, found an orphan", dirname,
                             s->t[i].name);
        }
    }
    free(drop);
    return rc;
}

/* An Engram table already in release form (I8 codes `X.engram.embed.weight` + F32 power-of-two
 * scales `X.engram.embed.scale`, CHECKPOINT.md §9) may sit in a float source: trained fixtures ship
 * it that way.  It is decoded exactly and re-quantized like any float Engram table. */
static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static bool is_engram_i8(const ds_tensor *t) {
    return (t->dtype == DS_DT_I8 && ends_with(t->name, ".engram.embed.weight")) ||
           (t->dtype == DS_DT_F32 && ends_with(t->name, ".engram.embed.scale"));
}

static int pair_engram_i8(ds_fsrc *s, dir_impl *d, const char *dirname, ds_error *err) {
    d->scale = ds_xcalloc((size_t)(s->n ? s->n : 1), sizeof *d->scale);
    d->fp8 = ds_xcalloc((size_t)(s->n ? s->n : 1), sizeof *d->fp8);
    char *drop = ds_xcalloc((size_t)(s->n ? s->n : 1), 1);
    int rc = 0;
    for (int i = 0; i < s->n && !rc; i++) {
        const ds_tensor *w = d->view[i];
        if (w->dtype != DS_DT_I8 || !ends_with(w->name, ".engram.embed.weight")) continue;
        char sn[300];
        snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(w->name) - 7), w->name);
        int si = ds_fsrc_find(s, sn);
        const ds_tensor *sc = si >= 0 ? d->view[si] : NULL;
        if (w->ndim != 2 || w->shape[1] % 32 || !sc || sc->dtype != DS_DT_F32 || sc->ndim != 2 ||
            sc->shape[0] != w->shape[0] || sc->shape[1] != w->shape[1] / 32) {
            rc = ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected an I8 [rows, w] table (w a multiple of 32) with an F32 scale "
                         "[rows, w/32], found %s", dirname, w->name, sc ? "another shape or dtype" : "no scale");
            break;
        }
        drop[si] = 1;
        d->scale[i] = sc;
        d->fp8[i] = DS_I8_ROWGROUP;
        char *name = s->t[i].name;
        ds_fsrc_tensor_init(&s->t[i], name, DS_DT_BF16, 2, w->shape);
        free(name);
    }
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        if (drop[i]) { free(s->t[i].name); continue; }
        s->t[k] = s->t[i];
        d->view[k] = d->view[i];
        d->scale[k] = d->scale[i];
        d->fp8[k] = d->fp8[i];
        k++;
    }
    s->n = k;
    for (int i = 0; i < s->n && !rc; i++)
        if (ends_with(s->t[i].name, ".engram.embed.scale"))
            rc = ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected an Engram scale next to its I8 table, found an orphan", dirname,
                         s->t[i].name);
    free(drop);
    return rc;
}

int ds_fsrc_open_dir(const char *dir, const char *label, bool fp8, ds_fsrc **out, ds_error *err) {
    *out = NULL;
    ds_fsrc *s = ds_xcalloc(1, sizeof *s);
    dir_impl *d = ds_xcalloc(1, sizeof *d);
    s->impl = d;
    s->destroy = dir_destroy;
    s->read_f32 = dir_read_f32;
    s->read_raw = dir_read_raw;
    s->write_aux = dir_write_aux;
    s->label = ds_xstrdup(label ? label : dir);
    d->dir = ds_xstrdup(dir);
    size_t dl = strlen(d->dir);
    while (dl > 1 && d->dir[dl - 1] == '/') d->dir[--dl] = 0;

    char **names = NULL;
    int n_names = 0;
    cJSON *index = NULL;
    char *cpath = ds_path_join(dir, "config.json");
    size_t clen = 0;
    int rc = -1;
    if (!ds_file_exists(cpath)) {
        ds_fail(err, "E_MISSING_FILE", "%s: expected the source model's config.json, found none", cpath);
        goto done;
    }
    if (ds_read_file(cpath, &s->config_json, &clen, err)) goto done;
    if (list_shards(d->dir, &names, &n_names, &index, err)) goto done;
    for (int i = 0; i < n_names; i++) {
        ds_stfile *f;
        if (open_shard(d, names[i], &f, err)) goto done;
    }
    int cap = 0;
    for (int i = 0; i < d->n_files; i++) cap += d->files[i]->n_tensors;
    s->t = ds_xcalloc((size_t)(cap ? cap : 1), sizeof *s->t);
    const ds_tensor **view = ds_xcalloc((size_t)(cap ? cap : 1), sizeof *view);
    d->view = view;
    for (int fi = 0; fi < d->n_files; fi++) {
        const ds_stfile *f = d->files[fi];
        const char *rel = f->path + dl + 1;
        for (int k = 0; k < f->n_tensors; k++) {
            const ds_tensor *t = &f->tensors[k];
            if (index) { /* only tensors the index maps to this file count */
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(index, "weight_map"), t->name);
                if (!cJSON_IsString(m) || strcmp(m->valuestring, rel)) continue;
            }
            if (!fp8 && t->dtype != DS_DT_BF16 && t->dtype != DS_DT_F32 && t->dtype != DS_DT_F16 && !is_engram_i8(t)) {
                ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected a float tensor (BF16, F16 or F32) in a float source checkpoint, found %s "
                        "(for the official FP8/MXFP4 checkpoint use --src-format fp8)",
                        f->path, t->name, ds_dtype_name(t->dtype));
                goto done;
            }
            ds_fsrc_tensor_init(&s->t[s->n], t->name, t->dtype, t->ndim, t->shape);
            view[s->n] = t;
            s->n++;
        }
    }
    /* sort tensors and their views together */
    {
        tv_pair *pr = ds_xmalloc(sizeof *pr * (size_t)(s->n ? s->n : 1));
        for (int i = 0; i < s->n; i++) { pr[i].t = s->t[i]; pr[i].v = view[i]; }
        qsort(pr, (size_t)s->n, sizeof *pr, cmp_pair);
        for (int i = 0; i < s->n; i++) { s->t[i] = pr[i].t; view[i] = pr[i].v; }
        free(pr);
    }
    for (int i = 1; i < s->n; i++)
        if (!strcmp(s->t[i].name, s->t[i - 1].name)) {
            ds_fail(err, "E_DUPLICATE_TENSOR", "%s: %s: expected each tensor in one source file, found it twice", d->dir, s->t[i].name);
            goto done;
        }
    if (index) { /* every indexed tensor must exist */
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(index, "weight_map")) {
            if (ds_fsrc_find(s, it->string) < 0) {
                ds_fail(err, "E_INDEX_TENSOR_ABSENT", "%s/%s: %s: expected the tensor in the file the index names, found it absent",
                        d->dir, it->valuestring, it->string);
                goto done;
            }
        }
    }
    if (fp8 && pair_fp8(s, d, d->dir, err)) goto done;
    if (!fp8 && pair_engram_i8(s, d, d->dir, err)) goto done;
    /* files copied unchanged into the release */
    const char *tok_files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < DS_ARRAY_LEN(tok_files); i++) {
        char *p = ds_path_join(d->dir, tok_files[i]);
        int ok = ds_file_exists(p);
        free(p);
        if (!ok) {
            ds_fail(err, "E_MISSING_FILE", "%s/%s: expected the tokenizer file that a release copies unchanged, found none", d->dir, tok_files[i]);
            goto done;
        }
        d->aux = ds_xrealloc(d->aux, sizeof(char *) * (size_t)(d->n_aux + 1));
        d->aux[d->n_aux++] = ds_xstrdup(tok_files[i]);
    }
    char *map = config_token_map(s->config_json);
    if (map) {
        char *p = ds_path_join(d->dir, map);
        int ok = ds_file_exists(p) && !strstr(map, "..") && map[0] != '/';
        free(p);
        if (!ok) {
            ds_fail(err, "E_MISSING_FILE", "%s/%s: expected the Engram token map named by config engram_token_map_file, found none", d->dir, map);
            free(map);
            goto done;
        }
        d->aux = ds_xrealloc(d->aux, sizeof(char *) * (size_t)(d->n_aux + 1));
        d->aux[d->n_aux++] = map;
    }
    if (load_rotation(s, d->dir, err)) goto done;
    rc = 0;
done:
    for (int i = 0; i < n_names; i++) free(names[i]);
    free(names);
    free(cpath);
    cJSON_Delete(index);
    if (rc) { ds_fsrc_free(s); return -1; }
    *out = s;
    return 0;
}
