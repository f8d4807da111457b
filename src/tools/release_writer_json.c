/* The JSON side of a release (TOOLS.md §3.5, CHECKPOINT.md §4, §5, §11) and the rotation file.
 *
 * Every output here is a pure function of the plan, the per-tensor statistics and the recorded
 * labels, written atomically; the only clock value (`generated_utc`) honours SOURCE_DATE_EPOCH
 * so that two runs can be compared file by file.  config.json is re-serialized through the
 * exact-number JSON writer (tokenizer/json_canon): the Engram multipliers exceed 2^53 and must
 * keep their digits (PITFALLS.md 18), which a plain cJSON round trip would destroy. */
#define _GNU_SOURCE
#include "tools/release_writer.h"
#include "base/fsutil.h"
#include "tokenizer/json_canon.h"
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ds_rw_json_outputs(ds_rw_plan *p, ds_fsrc *src, const char *dst, ds_error *err);

void ds_rw_utc_stamp(char *buf, size_t n) {
    time_t t = time(NULL);
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    if (sde && *sde) {
        char *end = NULL;
        long long v = strtoll(sde, &end, 10);
        if (end && !*end && v >= 0) t = (time_t)v;
    }
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int write_json(const char *dst, const char *rel, cJSON *j, ds_error *err) {
    char *s = cJSON_Print(j);
    size_t n = strlen(s);
    char *t = ds_xmalloc(n + 2);
    memcpy(t, s, n);
    t[n] = '\n';
    free(s);
    char *path = ds_path_join(dst, rel);
    int rc = ds_write_file_atomic(path, t, n + 1, err);
    free(path);
    free(t);
    return rc;
}

char *ds_rw_config_text(const char *float_config_json, bool float_export, ds_error *err) {
    cJSON *j = ds_json_parse_exact(float_config_json, strlen(float_config_json), err);
    if (!j) { ds_error_prefix(err, "config.json"); return NULL; }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        ds_fail(err, "E_CONFIG", "config.json: expected a JSON object, found another JSON value");
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(j, "quantization_config");
    if (!float_export) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "quant_method", "ascend");
        cJSON_AddStringToObject(q, "model_quant_type", DS_RW_W4A8);
        cJSON_AddItemToObject(j, "quantization_config", q);
    }
    ds_strbuf b = {0};
    ds_json_write(&b, j, NULL);
    ds_strbuf_putc(&b, '\n');
    cJSON_Delete(j);
    return ds_strbuf_take(&b, NULL);
}

int ds_rw_write_rotation(const char *dst, const ds_rot32 *r, int64_t D, ds_error *err) {
    float *g = ds_xmalloc(sizeof(float) * (size_t)D * (size_t)D);
    ds_rot32_global(r, D, g);
    ds_stwriter *w = ds_stw_new();
    int64_t shape[2] = {D, D};
    ds_stw_add(w, "global_rotation", DS_DT_F32, 2, shape, g, 1);
    char *dir = ds_path_join(dst, "optional");
    char *path = ds_path_join(dst, DS_ROTATION_FILE);
    int rc = ds_mkdir_p(dir, err);
    if (!rc) rc = ds_stw_finish(w, path, err);
    else ds_stw_free(w);
    free(dir); free(path); free(g);
    return rc;
}

/* "layers.3.ffn.experts.17.w1.weight" -> "layers.*.ffn.experts.*.w1.weight" */
static void name_pattern(const char *name, char *out, size_t n) {
    size_t k = 0;
    const char *s = name;
    while (*s && k + 2 < n) {
        const char *e = strchr(s, '.');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        bool digits = len > 0;
        for (size_t i = 0; i < len; i++) digits = digits && s[i] >= '0' && s[i] <= '9';
        if (digits) out[k++] = '*';
        else for (size_t i = 0; i < len && k + 2 < n; i++) out[k++] = s[i];
        if (!e) break;
        out[k++] = '.';
        s = e + 1;
    }
    out[k] = 0;
}

static const char *group_label(const ds_rw_plan *p, const ds_rw_group *g) {
    if (g->kind == DS_QK_ENGRAM) return "ENGRAM_INT8";
    const char *l = p->tensors[g->out[0]].label;
    return l ? l : DS_RW_FLOAT;
}

static uint64_t group_out(const ds_rw_plan *p, const ds_rw_group *g) {
    uint64_t b = 0;
    for (int i = 0; i < g->n_out; i++) b += p->tensors[g->out[i]].nbytes;
    return b;
}

/* stats {base_bytes, out_bytes, by_fmt, by_pattern} over groups selected by `draft_only`. */
static cJSON *stats_json(const ds_rw_plan *p, bool draft_only) {
    cJSON *st = cJSON_CreateObject();
    uint64_t base = 0, outb = 0;
    cJSON *by_fmt = cJSON_CreateObject(), *by_pat = cJSON_CreateObject();
    for (int gi = 0; gi < p->n_groups; gi++) {
        const ds_rw_group *g = &p->groups[gi];
        if (g->src < 0) continue;
        const char *name = p->tensors[g->out[0]].name;
        if (draft_only && strncmp(name, "mtp.", 4)) continue;
        base += g->src_bytes;
        uint64_t ob = group_out(p, g);
        outb += ob;
        const char *lab = group_label(p, g);
        cJSON *c = cJSON_GetObjectItemCaseSensitive(by_fmt, lab);
        if (c) cJSON_SetNumberValue(c, c->valuedouble + 1);
        else cJSON_AddNumberToObject(by_fmt, lab, 1);
        char pat[512];
        name_pattern(name, pat, sizeof pat);
        cJSON *pj = cJSON_GetObjectItemCaseSensitive(by_pat, pat);
        if (!pj) {
            pj = cJSON_AddObjectToObject(by_pat, pat);
            cJSON_AddNumberToObject(pj, "n", 0);
            cJSON_AddNumberToObject(pj, "base", 0);
            cJSON_AddNumberToObject(pj, "out", 0);
        }
        cJSON *n = cJSON_GetObjectItemCaseSensitive(pj, "n"), *b = cJSON_GetObjectItemCaseSensitive(pj, "base"),
              *o = cJSON_GetObjectItemCaseSensitive(pj, "out");
        cJSON_SetNumberValue(n, n->valuedouble + 1);
        cJSON_SetNumberValue(b, b->valuedouble + (double)g->src_bytes);
        cJSON_SetNumberValue(o, o->valuedouble + (double)ob);
    }
    cJSON_AddNumberToObject(st, "base_bytes", (double)base);
    cJSON_AddNumberToObject(st, "out_bytes", (double)outb);
    cJSON_AddItemToObject(st, "by_fmt", by_fmt);
    cJSON_AddItemToObject(st, "by_pattern", by_pat);
    return st;
}

static int cmp_tensor_idx(const void *a, const void *b, void *ctx) {
    const ds_rw_plan *p = ctx;
    return strcmp(p->tensors[*(const int *)a].name, p->tensors[*(const int *)b].name);
}

/* Indices of tensors satisfying `in_index` (or labelled, when labelled_only), sorted by name. */
static int *sorted_tensors(const ds_rw_plan *p, bool labelled_only, int *n) {
    int *idx = ds_xmalloc(sizeof(int) * (size_t)(p->n_tensors ? p->n_tensors : 1));
    *n = 0;
    for (int t = 0; t < p->n_tensors; t++) {
        if (labelled_only ? p->tensors[t].label == NULL : !p->tensors[t].in_index) continue;
        idx[(*n)++] = t;
    }
    qsort_r(idx, (size_t)*n, sizeof(int), cmp_tensor_idx, (void *)p);
    return idx;
}

static int write_index(const ds_rw_plan *p, const char *dst, ds_error *err) {
    int n;
    int *idx = sorted_tensors(p, false, &n);
    uint64_t total = 0;
    cJSON *j = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(j, "metadata");
    cJSON *wm = cJSON_CreateObject();
    for (int k = 0; k < n; k++) {
        const ds_rw_tensor *t = &p->tensors[idx[k]];
        total += t->nbytes;
        cJSON_AddStringToObject(wm, t->name, p->files[t->file].relpath);
    }
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddItemToObject(j, "weight_map", wm);
    int rc = write_json(dst, p->opts.float_export ? DS_FLOAT_INDEX_FILE : DS_RELEASE_INDEX, j, err);
    cJSON_Delete(j);
    free(idx);
    return rc;
}

static int write_description(const ds_rw_plan *p, const char *dst, ds_error *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "version", "1.0.0");
    cJSON_AddStringToObject(j, "model_quant_type", DS_RW_W4A8);
    cJSON_AddNumberToObject(j, "group_size", 0);
    cJSON_AddObjectToObject(j, "metadata");
    cJSON *rm = cJSON_AddObjectToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(j, "optional"), "quarot"), "rotation_map");
    cJSON_AddStringToObject(rm, "global_rotation", DS_ROTATION_FILE);
    int n;
    int *idx = sorted_tensors(p, true, &n);
    for (int k = 0; k < n; k++) cJSON_AddStringToObject(j, p->tensors[idx[k]].name, p->tensors[idx[k]].label);
    free(idx);
    int rc = write_json(dst, DS_RELEASE_DESC, j, err);
    cJSON_Delete(j);
    return rc;
}

static cJSON *shard_list(const ds_rw_plan *p, bool draft_only) {
    cJSON *a = cJSON_CreateArray();
    for (int fi = 0; fi < p->n_files; fi++)
        if (!draft_only || p->files[fi].kind == DS_RF_DRAFT) cJSON_AddItemToArray(a, cJSON_CreateString(p->files[fi].relpath));
    return a;
}

static int write_mtpq_manifest(const ds_rw_plan *p, const char *dst, ds_error *err) {
    char utc[40];
    ds_rw_utc_stamp(utc, sizeof utc);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "mtpq-draft-quant/1");
    cJSON_AddStringToObject(j, "generated_utc", utc);
    cJSON_AddStringToObject(j, "src", p->opts.src_label ? p->opts.src_label : "");
    cJSON_AddStringToObject(j, "out", p->opts.out_label ? p->opts.out_label : dst);
    cJSON *o = cJSON_AddObjectToObject(j, "options");
    cJSON_AddBoolToObject(o, "aggressive", p->opts.aggressive);
    cJSON_AddBoolToObject(o, "quant_main_proj", p->opts.quant_main_proj);
    cJSON_AddBoolToObject(o, "quant_vocab", p->opts.quant_vocab);
    cJSON_AddNumberToObject(o, "shard_gib", (double)p->opts.shard_bytes / (double)(1ull << 30));
    cJSON_AddItemToObject(j, "stats", stats_json(p, true));
    int n_in = 0, n_out = 0;
    for (int gi = 0; gi < p->n_groups; gi++) {
        const ds_rw_group *g = &p->groups[gi];
        if (g->src < 0 || strncmp(p->tensors[g->out[0]].name, "mtp.", 4)) continue;
        n_in++;
        n_out += g->n_out;
    }
    cJSON_AddNumberToObject(j, "mtp_input_tensors", n_in);
    cJSON_AddNumberToObject(j, "mtp_output_tensors", n_out);
    cJSON_AddItemToObject(j, "output_shards", shard_list(p, true));
    int rc = write_json(dst, DS_MTPQ_MANIFEST, j, err);
    cJSON_Delete(j);
    return rc;
}

static int write_quant_manifest(const ds_rw_plan *p, const ds_fsrc *src, const char *dst, ds_error *err) {
    char utc[40];
    ds_rw_utc_stamp(utc, sizeof utc);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "v41-quant/1");
    cJSON_AddStringToObject(j, "generated_utc", utc);
    cJSON_AddStringToObject(j, "src", p->opts.src_label ? p->opts.src_label : "");
    cJSON_AddStringToObject(j, "out", p->opts.out_label ? p->opts.out_label : dst);
    cJSON_AddStringToObject(j, "tool_version", DS_TOOL_VERSION);
    cJSON *o = cJSON_AddObjectToObject(j, "options");
    cJSON_AddStringToObject(o, "plan", p->opts.aggressive ? "aggressive" : "default");
    cJSON_AddStringToObject(o, "int4_search", p->opts.ssz_steps == 1 ? "minmax" : "ssz");
    cJSON_AddNumberToObject(o, "ssz_steps", p->opts.ssz_steps);
    cJSON_AddBoolToObject(o, "quant_main_proj", p->opts.quant_main_proj);
    cJSON_AddBoolToObject(o, "quant_vocab", p->opts.quant_vocab);
    cJSON_AddNumberToObject(o, "shard_gib", (double)p->opts.shard_bytes / (double)(1ull << 30));
    cJSON_AddNumberToObject(o, "split_engram_bytes", (double)p->opts.split_engram);
    cJSON_AddBoolToObject(o, "rotation", src->has_rotation && !src->rot.identity);
    cJSON_AddItemToObject(j, "stats", stats_json(p, false));
    /* reconstruction error per label, and warnings above the TOOLS.md §3.5 thresholds */
    cJSON *ej = cJSON_AddObjectToObject(j, "error");
    cJSON *warn = cJSON_CreateArray();
    const char *labels[2] = {DS_RW_W8A8, DS_RW_W4A8};
    const double limit[2] = {0.01, 0.15};
    for (int li = 0; li < 2; li++) {
        double sum = 0.0, mx = -1.0;
        int n = 0;
        const char *worst = "";
        for (int gi = 0; gi < p->n_groups; gi++) {
            const ds_rw_group *g = &p->groups[gi];
            if (g->src < 0 || (g->kind != DS_QK_W8A8 && g->kind != DS_QK_W4A8) || strcmp(group_label(p, g), labels[li])) continue;
            double e = ds_qerr_rel_rmse(&g->qerr);
            sum += e;
            n++;
            if (e > mx) { mx = e; worst = p->tensors[g->out[0]].name; }
            if (e > limit[li] && cJSON_GetArraySize(warn) < 100) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s: rel_rmse %.6f above %.2f (%s)", p->tensors[g->out[0]].name, e, limit[li], labels[li]);
                cJSON_AddItemToArray(warn, cJSON_CreateString(msg));
                if (!p->opts.quiet) fprintf(stderr, "WARN %s\n", msg);
            }
        }
        if (!n) continue;
        cJSON *l = cJSON_AddObjectToObject(ej, labels[li]);
        cJSON_AddNumberToObject(l, "rel_rmse_mean", sum / n);
        cJSON_AddNumberToObject(l, "rel_rmse_max", mx);
        cJSON_AddStringToObject(l, "worst_tensor", worst);
        cJSON_AddNumberToObject(l, "tensors", n);
    }
    /* per-tensor reconstruction error, in name order */
    cJSON *per = cJSON_AddObjectToObject(j, "rel_rmse");
    for (int gi = 0; gi < p->n_groups; gi++) {
        const ds_rw_group *g = &p->groups[gi];
        if (g->src >= 0 && (g->kind == DS_QK_W8A8 || g->kind == DS_QK_W4A8))
            cJSON_AddNumberToObject(per, p->tensors[g->out[0]].name, ds_qerr_rel_rmse(&g->qerr));
    }
    cJSON *eng = cJSON_AddObjectToObject(j, "engram");
    for (int gi = 0; gi < p->n_groups; gi++) {
        const ds_rw_group *g = &p->groups[gi];
        if (g->kind != DS_QK_ENGRAM) continue;
        int L = atoi(p->tensors[g->out[0]].name + 7);
        char key[16];
        snprintf(key, sizeof key, "%d", L);
        cJSON *e = cJSON_AddObjectToObject(eng, key);
        cJSON_AddNumberToObject(e, "rows", (double)p->tensors[g->out[0]].shape[0]);
        cJSON_AddNumberToObject(e, "zero_groups", (double)g->zero_groups);
        if (g->max_exp >= g->min_exp) {
            cJSON_AddNumberToObject(e, "min_exp", g->min_exp);
            cJSON_AddNumberToObject(e, "max_exp", g->max_exp);
        }
    }
    cJSON_AddNumberToObject(j, "input_tensors", src->n);
    int n_out = 0;
    for (int t = 0; t < p->n_tensors; t++) n_out += p->tensors[t].in_index;
    cJSON_AddNumberToObject(j, "output_tensors", n_out);
    cJSON_AddItemToObject(j, "output_shards", shard_list(p, false));
    cJSON_AddItemToObject(j, "warnings", warn);
    int rc = write_json(dst, DS_QUANT_MANIFEST, j, err);
    cJSON_Delete(j);
    return rc;
}

int ds_rw_json_outputs(ds_rw_plan *p, ds_fsrc *src, const char *dst, ds_error *err) {
    /* rotation: the release always has one (identity for an un-rotated source, TOOLS.md §3.3) */
    if (!p->opts.float_export || src->has_rotation) {
        ds_rot32 ident;
        ds_rot32_identity(&ident);
        if (ds_rw_write_rotation(dst, src->has_rotation ? &src->rot : &ident, p->cfg.dim, err)) return -1;
    }
    char *cfg = ds_rw_config_text(src->config_json, p->opts.float_export, err);
    if (!cfg) return -1;
    char *cpath = ds_path_join(dst, "config.json");
    int rc = ds_write_file_atomic(cpath, cfg, strlen(cfg), err);
    free(cpath);
    free(cfg);
    if (!rc) rc = src->write_aux(src, dst, err);
    if (!rc && !p->opts.float_export) {
        rc = write_description(p, dst, err);
        if (!rc && p->n_draft) rc = write_mtpq_manifest(p, dst, err);
        if (!rc) rc = write_quant_manifest(p, src, dst, err);
    }
    if (!rc) rc = write_index(p, dst, err); /* last: its presence marks a complete directory */
    return rc;
}
