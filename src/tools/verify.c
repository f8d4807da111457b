/* Structural verifier: the directory model, the report, and the file-level checks (F1 C1 LOAD I1
 * H1 N1 L1).  Tensor-level checks live in verify_tensors.c.  Design notes in verify.h; the shared
 * structs in verify_internal.h. */
#define _GNU_SOURCE
#include "tools/verify_internal.h"
#include "io/official_layout.h"
#include "base/fsutil.h"
#include "io/checkpoint.h"
#include "io/config_fields.h"
#include "model/engram_hash.h"
#include "tools/parts_manifest.h"
#include "tools/reassemble.h"
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void ds_verify_opts_default(ds_verify_opts *o) {
    memset(o, 0, sizeof *o);
    o->samples = 64;
    o->profile = DS_PROFILE_AUTO;
}

/* ------------------------------------------------------------------------------------------ */
/* Report                                                                                       */

const char *v_status_name(vstatus s) {
    static const char *n[] = {"PASS", "WARN", "NEED", "FAIL", "SKIP"};
    return n[s];
}

vcheck *vc_begin(vctx *v, const char *id, const char *title) {
    vcheck *c = &v->checks[v->n_checks++];
    memset(c, 0, sizeof *c);
    c->id = id;
    c->title = title;
    return c;
}

static void vc_append(vcheck *c, const char *fmt, va_list ap) {
    size_t k = strlen(c->detail);
    if (c->n_shown >= 6 || k + 8 >= sizeof c->detail) return;
    if (k) { memcpy(c->detail + k, "; ", 3); k += 2; }
    vsnprintf(c->detail + k, sizeof c->detail - k, fmt, ap);
    c->n_shown++;
}

void vc_issue(vcheck *c, vstatus st, const char *fmt, ...) {
    if (st > c->st || c->st == VS_SKIP) c->st = st;
    c->n_issues++;
    if (st == VS_WARN) c->n_warn++;
    /* Issues come before notes in the detail: a note shown first would hide the problem. */
    if (c->n_issues == 1 && c->n_shown) { c->detail[0] = 0; c->n_shown = 0; }
    va_list ap;
    va_start(ap, fmt);
    vc_append(c, fmt, ap);
    va_end(ap);
}

void vc_note(vcheck *c, const char *fmt, ...) {
    if (c->n_issues) return;
    va_list ap;
    va_start(ap, fmt);
    vc_append(c, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------------------------ */
/* Directory model                                                                              */

bool v_is_draft(const char *n) { return !strncmp(n, "mtp.", 4); }
bool v_is_vision(const char *n) { return !strncmp(n, "vision.", 7) || !strncmp(n, "aligner.", 8) || !strncmp(n, "image_", 6); }
bool v_is_engram(const char *n) { return !strncmp(n, "layers.", 7) && strstr(n, ".engram.") != NULL; }

static cJSON *read_json(const char *dir, const char *rel, char *err, size_t n) {
    char *path = ds_path_join(dir, rel), *text = NULL;
    ds_error e;
    cJSON *j = NULL;
    if (ds_read_file(path, &text, NULL, &e) != 0) {
        snprintf(err, n, "%s", e.msg);
    } else if (!(j = cJSON_Parse(text))) {
        const char *at = cJSON_GetErrorPtr();
        snprintf(err, n, "%s: not valid JSON (near byte %ld)", path, at ? (long)(at - text) : -1L);
    } else if (!cJSON_IsObject(j)) {
        snprintf(err, n, "%s: expected a JSON object", path);
        cJSON_Delete(j);
        j = NULL;
    }
    free(text);
    free(path);
    return j;
}

/* Split parts of `full` present next to it (count). */
static int parts_next_to(const char *full) {
    char *a = ds_xstrdup(full), *b = ds_xstrdup(full);
    const char *dir = dirname(a), *base = basename(b);
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *pb = NULL;
        if (ds_parts_parse_name(de->d_name, &pb, NULL, NULL, NULL)) {
            n += !strcmp(pb, base);
            free(pb);
        }
    }
    if (d) closedir(d);
    free(a);
    free(b);
    return n;
}

int vk_file(vckpt *k, const char *rel) {
    for (int i = 0; i < k->n_files; i++)
        if (!strcmp(k->files[i].rel, rel)) return i;
    k->files = ds_xrealloc(k->files, sizeof *k->files * (size_t)(k->n_files + 1));
    vfile *f = &k->files[k->n_files];
    memset(f, 0, sizeof *f);
    f->rel = ds_xstrdup(rel);
    char *full = ds_path_join(k->dir, rel);
    if (!ds_file_exists(full)) {
        f->missing = true;
        f->need = parts_next_to(full) > 0;
        snprintf(f->err, sizeof f->err, "%s: %s", full, f->need ? "present only as split parts" : "no such file");
    } else {
        ds_error e;
        if (ds_st_open(full, &f->st, &e) != 0) {
            snprintf(f->err, sizeof f->err, "%s", e.msg);
            f->st = NULL;
        }
    }
    free(full);
    return k->n_files++;
}

static int cmp_vname(const void *a, const void *b) { return strcmp(((const vname *)a)->name, ((const vname *)b)->name); }
static int cmp_vname_order(const void *a, const void *b) {
    int r = cmp_vname(a, b);
    return r ? r : ((const vname *)a)->order - ((const vname *)b)->order;
}

const vname *vk_find(const vckpt *k, const char *name) {
    vname key = {.name = name};
    return k->n_names ? bsearch(&key, k->names, (size_t)k->n_names, sizeof *k->names, cmp_vname) : NULL;
}

static int cmp_item(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

const char *vk_label(const vckpt *k, const char *name) {
    if (!k->n_desc) return NULL;
    cJSON key = {.string = (char *)name};
    const cJSON *kp = &key;
    const cJSON **hit = bsearch(&kp, k->desc_items, (size_t)k->n_desc, sizeof *k->desc_items, cmp_item);
    return hit && cJSON_IsString(*hit) ? (*hit)->valuestring : NULL;
}

static void push_name(vckpt *k, const ds_tensor *t, int fi, bool indexed) {
    if (k->n_names == k->cap_names) {
        k->cap_names = k->cap_names ? 2 * k->cap_names : 1024;
        k->names = ds_xrealloc(k->names, sizeof *k->names * (size_t)k->cap_names);
    }
    k->names[k->n_names] = (vname){t->name, fi, t, indexed, k->n_names};
    k->n_names++;
}

/* Names resolve through the index first, then the auxiliary files in the loader's order
 * (CHECKPOINT.md §4): mtpq shards from the manifest, mtp-vocab, vision, engram_extra. */
int vk_load(vckpt *k, const char *dir) {
    memset(k, 0, sizeof *k);
    k->dir = ds_xstrdup(dir);
    k->config = read_json(dir, "config.json", k->config_err, sizeof k->config_err);
    ds_error e;
    if (ds_config_load(dir, &k->cfg, &e) == 0) k->cfg_ok = true;
    else snprintf(k->cfg_err, sizeof k->cfg_err, "%s", e.msg);
    k->index = read_json(dir, k->cfg_ok && k->cfg.format == DS_FMT_FP8 ? DS_OFFICIAL_INDEX : V_INDEX_FILE, k->index_err, sizeof k->index_err);
    k->desc = read_json(dir, V_DESC_FILE, k->desc_err, sizeof k->desc_err);
    if (k->desc) {
        for (const cJSON *it = k->desc->child; it; it = it->next) {
            if (!strcmp(it->string, "version") || !strcmp(it->string, "model_quant_type") || !strcmp(it->string, "group_size") ||
                !strcmp(it->string, "metadata") || !strcmp(it->string, "optional"))
                continue;
            k->desc_items = ds_xrealloc(k->desc_items, sizeof *k->desc_items * (size_t)(k->n_desc + 1));
            k->desc_items[k->n_desc++] = it;
        }
        if (k->n_desc) qsort(k->desc_items, (size_t)k->n_desc, sizeof *k->desc_items, cmp_item);
    }
    const cJSON *wm = k->index ? cJSON_GetObjectItemCaseSensitive(k->index, "weight_map") : NULL;
    for (const cJSON *it = wm ? wm->child : NULL; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || it->valuestring[0] == '/' || strstr(it->valuestring, "..")) continue;
        int fi = vk_file(k, it->valuestring);
        k->files[fi].index_target = true;
        if (k->files[fi].need) k->engram_need = true;
        const ds_tensor *t = k->files[fi].st ? ds_st_find(k->files[fi].st, it->string) : NULL;
        if (t) push_name(k, t, fi, true);
    }
    /* auxiliary files */
    char *aux[256];
    int n_aux = 0;
    char merr[256];
    cJSON *man = read_json(dir, V_MANIFEST_FILE, merr, sizeof merr);
    const cJSON *shards = man ? cJSON_GetObjectItemCaseSensitive(man, "output_shards") : NULL;
    for (const cJSON *s = shards ? shards->child : NULL; s && n_aux < 250; s = s->next)
        if (cJSON_IsString(s)) aux[n_aux++] = ds_xstrdup(s->valuestring);
    const char *fixed[] = {"mtp-vocab-00001-of-00001.safetensors", "vision-00001-of-00001.safetensors", "engram_extra.safetensors"};
    for (size_t i = 0; i < DS_ARRAY_LEN(fixed); i++) aux[n_aux++] = ds_xstrdup(fixed[i]);
    for (int a = 0; a < n_aux; a++) {
        char *full = ds_path_join(dir, aux[a]);
        if (ds_file_exists(full)) {
            int fi = vk_file(k, aux[a]);
            for (int i = 0; k->files[fi].st && i < k->files[fi].st->n_tensors; i++) push_name(k, &k->files[fi].st->tensors[i], fi, false);
            k->n_aux++;
        }
        free(full);
        free(aux[a]);
    }
    cJSON_Delete(man);
    /* Keep the first resolution of every name: index, then auxiliary files in order. */
    if (k->n_names) qsort(k->names, (size_t)k->n_names, sizeof *k->names, cmp_vname_order);
    int w = 0;
    for (int i = 0; i < k->n_names; i++)
        if (!w || strcmp(k->names[w - 1].name, k->names[i].name)) k->names[w++] = k->names[i];
    k->n_names = w;
    /* Engram tables missing from the index still count as "need" when their parts are present. */
    for (int l = 0; k->cfg_ok && l < k->cfg.n_engram; l++)
        for (int sc = 0; sc < 2; sc++) {
            char rel[128];
            snprintf(rel, sizeof rel, "engram_int8/layers_%d_engram_embed.%s.safetensors", k->cfg.engram_layers[l], sc ? "scale" : "weight");
            char *full = ds_path_join(dir, rel);
            if (!ds_file_exists(full) && parts_next_to(full)) k->engram_need = true;
            free(full);
        }
    return 0;
}

void vk_free(vckpt *k) {
    for (int i = 0; i < k->n_files; i++) {
        if (k->files[i].st) ds_st_close(k->files[i].st);
        free(k->files[i].rel);
    }
    free(k->files);
    free(k->names);
    free(k->desc_items);
    cJSON_Delete(k->config);
    cJSON_Delete(k->index);
    cJSON_Delete(k->desc);
    free(k->dir);
    memset(k, 0, sizeof *k);
}

/* ------------------------------------------------------------------------------------------ */
/* F1: required files, dangling links, split-only tables                                        */

/* Walk a symlink chain; returns false (with the chain described) when it dangles. */
static bool link_chain_ok(const char *full, char *desc, size_t n) {
    char cur[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", full);
    desc[0] = 0;
    for (int hop = 0; hop < 40; hop++) {
        struct stat st;
        if (lstat(cur, &st) != 0) {
            size_t k = strlen(desc);
            snprintf(desc + k, n - k, "%s%s (missing)", k ? " -> " : "", cur);
            return false;
        }
        if (!S_ISLNK(st.st_mode)) return true;
        char tgt[PATH_MAX];
        ssize_t r = readlink(cur, tgt, sizeof tgt - 1);
        if (r < 0) return false;
        tgt[r] = 0;
        size_t k = strlen(desc);
        snprintf(desc + k, n - k, "%s%s", k ? " -> " : "", cur);
        if (tgt[0] == '/') {
            snprintf(cur, sizeof cur, "%s", tgt);
        } else {
            char *d = ds_xstrdup(cur);
            char next[PATH_MAX];
            snprintf(next, sizeof next, "%s/%s", dirname(d), tgt);
            free(d);
            snprintf(cur, sizeof cur, "%s", next);
        }
    }
    size_t k = strlen(desc);
    snprintf(desc + k, n - k, " (more than 40 links)");
    return false;
}

/* Check one required path; returns 1 when present and usable. */
static int need_file(vctx *v, vcheck *c, const char *rel, bool required) {
    char *full = ds_path_join(v->m.dir, rel);
    char chain[2048];
    struct stat st;
    int ok = 0;
    if (lstat(full, &st) == 0 && !link_chain_ok(full, chain, sizeof chain)) {
        vc_issue(c, VS_FAIL, "%s is a dangling symbolic link: %s", rel, chain);
    } else if (stat(full, &st) == 0) {
        ok = 1;
    } else if (parts_next_to(full)) {
        vc_issue(c, VS_NEED, "%s present only as split parts: NEED reassembly (dsflash reassemble %s)", rel, v->m.dir);
    } else if (required) {
        vc_issue(c, VS_FAIL, "%s is missing", rel);
    }
    if (ok && S_ISREG(st.st_mode) && parts_next_to(full) && !ds_reassemble_stamp_ok(full, NULL))
        vc_issue(c, VS_WARN, "%s sits next to its split parts without a matching .verified stamp (run dsflash reassemble %s)", rel, v->m.dir);
    free(full);
    return ok;
}

static void check_files(vctx *v) {
    vcheck *c = vc_begin(v, "F1", "required files");
    vckpt *k = &v->m;
    int present = 0;
    const char *always[] = {"config.json", "tokenizer.json", "tokenizer_config.json", V_INDEX_FILE, V_DESC_FILE};
    for (size_t i = 0; i < DS_ARRAY_LEN(always); i++) present += need_file(v, c, always[i], true);
    if (k->cfg_ok && k->cfg.n_engram > 0) {
        present += need_file(v, c, "engram_extra.safetensors", true);
        for (int l = 0; l < k->cfg.n_engram; l++)
            for (int w = 0; w < 2; w++) {
                char rel[128];
                snprintf(rel, sizeof rel, "engram_int8/layers_%d_engram_embed.%s.safetensors", k->cfg.engram_layers[l], w ? "scale" : "weight");
                present += need_file(v, c, rel, true);
            }
    }
    if (k->cfg_ok && k->cfg.n_mtp_layers > 0) {
        char *mp = ds_path_join(k->dir, V_MANIFEST_FILE);
        bool has_manifest = ds_file_exists(mp);
        free(mp);
        if (has_manifest) {
            present += need_file(v, c, V_MANIFEST_FILE, true);
            char err[512];
            cJSON *man = read_json(k->dir, V_MANIFEST_FILE, err, sizeof err);
            const cJSON *sh = man ? cJSON_GetObjectItemCaseSensitive(man, "output_shards") : NULL;
            if (!cJSON_IsArray(sh) || !cJSON_GetArraySize(sh))
                vc_issue(c, VS_FAIL, "%s: output_shards missing or empty", V_MANIFEST_FILE);
            for (const cJSON *s = sh ? sh->child : NULL; s; s = s->next)
                if (cJSON_IsString(s)) present += need_file(v, c, s->valuestring, true);
            cJSON_Delete(man);
        } else if (!need_file(v, c, "mtp-vocab-00001-of-00001.safetensors", false)) {
            vc_issue(c, VS_FAIL, "draft model missing: neither %s with mtpq shards nor mtp-vocab-00001-of-00001.safetensors", V_MANIFEST_FILE);
        } else {
            present++;
        }
    }
    char *vp = ds_path_join(k->dir, "vision-00001-of-00001.safetensors");
    if (ds_file_exists(vp)) present += need_file(v, c, "vision-00001-of-00001.safetensors", false);
    else if (k->cfg_ok && k->cfg.vision_layers > 0)
        vc_issue(c, VS_WARN, "vision_config present but vision-00001-of-00001.safetensors is absent (vision disabled)");
    free(vp);
    const cJSON *rot = k->desc ? cJSON_GetObjectItemCaseSensitive(k->desc, "optional") : NULL;
    rot = rot ? cJSON_GetObjectItemCaseSensitive(rot, "quarot") : NULL;
    rot = rot ? cJSON_GetObjectItemCaseSensitive(rot, "rotation_map") : NULL;
    rot = rot ? cJSON_GetObjectItemCaseSensitive(rot, "global_rotation") : NULL;
    if (cJSON_IsString(rot)) present += need_file(v, c, rot->valuestring, true);
    /* every other file the index names (trunk shards and whatever else weight_map points at) */
    for (int i = 0; i < k->n_files; i++)
        if (k->files[i].index_target && strncmp(k->files[i].rel, "engram_int8/", 12) != 0) present += need_file(v, c, k->files[i].rel, true);
    vc_note(c, "%d required files present", present);
}

/* ------------------------------------------------------------------------------------------ */
/* C1: config                                                                                   */

static bool field_equal(const cf_field *f, const ds_config *a, const ds_config *b) {
    const char *x = (const char *)a + f->off, *y = (const char *)b + f->off;
    switch (f->type) {
    case CF_INT: return *(const int *)x == *(const int *)y;
    case CF_I64: return *(const int64_t *)x == *(const int64_t *)y;
    case CF_DBL: return *(const double *)x == *(const double *)y;
    case CF_BOOL: return *(const bool *)x == *(const bool *)y;
    case CF_INTS: case CF_I64S: {
        int na = *(const int *)((const char *)a + f->cnt_off), nb = *(const int *)((const char *)b + f->cnt_off);
        size_t sz = f->type == CF_INTS ? sizeof(int) : sizeof(int64_t);
        return na == nb && !memcmp(x, y, sz * (size_t)na);
    }
    }
    return false;
}

static void field_str(const cf_field *f, const ds_config *cfg, char *buf, size_t n) {
    const char *x = (const char *)cfg + f->off;
    switch (f->type) {
    case CF_INT: snprintf(buf, n, "%d", *(const int *)x); return;
    case CF_I64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)x); return;
    case CF_DBL: snprintf(buf, n, "%.17g", *(const double *)x); return;
    case CF_BOOL: snprintf(buf, n, "%s", *(const bool *)x ? "true" : "false"); return;
    case CF_INTS: case CF_I64S: {
        int cnt = *(const int *)((const char *)cfg + f->cnt_off);
        size_t k = (size_t)snprintf(buf, n, "[");
        for (int i = 0; i < cnt && k + 24 < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
                                  f->type == CF_INTS ? (long long)((const int *)x)[i] : (long long)((const int64_t *)x)[i]);
        snprintf(buf + k, n - k, "%s]", k + 24 >= n ? ",..." : "");
        return;
    }
    }
}

static void check_config(vctx *v) {
    vcheck *c = vc_begin(v, "C1", "config.json");
    vckpt *k = &v->m;
    if (!k->config) { vc_issue(c, VS_FAIL, "%s", k->config_err); return; }
    if (!k->cfg_ok) vc_issue(c, VS_FAIL, "%s", k->cfg_err);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(k->config, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "deepseek_v41"))
        vc_issue(c, VS_FAIL, "model_type: expected \"deepseek_v41\", found %s", cJSON_IsString(mt) ? mt->valuestring : "none");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(k->config, "quantization_config");
    const cJSON *qm = q ? cJSON_GetObjectItemCaseSensitive(q, "quant_method") : NULL;
    const cJSON *qt = q ? cJSON_GetObjectItemCaseSensitive(q, "model_quant_type") : NULL;
    bool w4a8 = cJSON_IsString(qm) && !strcmp(qm->valuestring, "ascend") && cJSON_IsString(qt) && !strcmp(qt->valuestring, "W4A8_DYNAMIC");
    bool fp8 = cJSON_IsString(qm) && !strcmp(qm->valuestring, "fp8");
    if (!w4a8 && !fp8)
        vc_issue(c, VS_FAIL, "quantization_config: expected {\"quant_method\":\"ascend\",\"model_quant_type\":\"W4A8_DYNAMIC\"} or the official fp8 form");
    if (!k->cfg_ok) return;
    /* Engram layers must be configured when Engram tensors exist (an empty list once crashed a loader). */
    bool engram_tensors = false;
    for (int i = 0; i < k->n_names && !engram_tensors; i++) engram_tensors = v_is_engram(k->names[i].name);
    if (k->cfg.n_engram == 0 && engram_tensors)
        vc_issue(c, VS_FAIL, "engram_layer_ids is empty but the checkpoint holds Engram tensors");
    if (v->profile) {
        ds_config ref;
        ds_config_v41_flash(&ref);
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(k->config, "text_config");
        const cJSON *cr = cJSON_GetObjectItemCaseSensitive(tc ? tc : k->config, "compress_ratios");
        if (cJSON_GetArraySize(cr) != 43)
            vc_issue(c, VS_FAIL, "compress_ratios: expected 43 entries (release profile), found %d", cJSON_GetArraySize(cr));
        if (k->cfg.max_pos != 1048576)
            vc_issue(c, VS_FAIL, "max_position_embeddings: expected 1048576 (release profile), found %lld (a mis-assembled directory?)",
                     (long long)k->cfg.max_pos);
        if (k->cfg.n_engram != 2 || k->cfg.engram_layers[0] != 1 || k->cfg.engram_layers[1] != 14)
            vc_issue(c, VS_FAIL, "engram_layer_ids: expected [1, 14] (release profile)");
        for (int i = 0; i < ds_cf_n_fields; i++)
            if (!field_equal(&ds_cf_fields[i], &k->cfg, &ref)) {
                char have[96], want[96];
                field_str(&ds_cf_fields[i], &k->cfg, have, sizeof have);
                field_str(&ds_cf_fields[i], &ref, want, sizeof want);
                vc_issue(c, VS_FAIL, "%s: expected %s (release profile), found %s", ds_cf_fields[i].hf, want, have);
            }
        if (!w4a8) vc_issue(c, VS_FAIL, "quantization_config: the release profile requires the W4A8 form");
    }
    vc_note(c, "%s, %d layers + %d draft stages, D %d, %d experts, %d Engram layers%s", w4a8 ? "W4A8 release" : "official FP8",
            k->cfg.n_layers, k->cfg.n_mtp_layers, k->cfg.dim, k->cfg.n_experts, k->cfg.n_engram,
            v->profile ? ", V4.1-Flash profile values" : "");
}

/* ------------------------------------------------------------------------------------------ */
/* LOAD: the loader's own checklist (CHECKPOINT.md §15, level full)                             */

/* Checks 19 and 24 need Engram math that io cannot depend on; the verifier supplies it. */
static int engram_extra_check(const struct ds_checkpoint *ck, void *ctx, ds_error *err) {
    const ds_config *cfg = &ck->cfg;
    if (cfg->n_engram == 0) return 0;
    ds_engram_consts ec;
    if (ds_engram_consts_init(&ec, cfg, err) != 0) return -1;
    for (int e = 0; e < cfg->n_engram; e++) {
        if (ec.prime_sum[e] != cfg->engram_rows[e])
            return ds_fail(err, "E_ENGRAM_PRIME_SUM", "E_ENGRAM_PRIME_SUM: %s/config.json: engram_num_embeddings[%d]: expected %lld (sum of the layer's primes), found %lld",
                           ck->dir, e, (long long)ec.prime_sum[e], (long long)cfg->engram_rows[e]);
        for (int s = 0; cfg->has_engram_multipliers && s < cfg->engram_max_ngram; s++)
            if (cfg->engram_multipliers[e][s] != ec.mult[e][s])
                return ds_fail(err, "E_ENGRAM_MULTIPLIERS", "E_ENGRAM_MULTIPLIERS: %s/config.json: engram_hash_multipliers[%d][%d]: expected %lld, found %lld",
                               ck->dir, e, s, (long long)ec.mult[e][s], (long long)cfg->engram_multipliers[e][s]);
    }
    return 0;
}

static void check_loader(vctx *v) {
    vcheck *c = vc_begin(v, "LOAD", "loader checklist (every check the loader makes, full)");
    if (!v->m.cfg_ok) { vc_issue(c, VS_SKIP, "config did not load"); return; }
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.full = true;
    o.need_draft = v->m.cfg.n_mtp_layers > 0;
    o.need_engram = !v->m.engram_need;   /* tables awaiting reassembly are F1's NEED, not a loader failure */
    o.extra_check = engram_extra_check;
    ds_checkpoint *ck = NULL;
    ds_error err;
    ds_error_clear(&err);
    int saved = ds_log_level();
    ds_log_set_level(DS_LOG_ERROR);   /* warnings go into the report, not onto stderr */
    int rc = ds_ckpt_open(v->m.dir, &o, &ck, &err);
    ds_log_set_level(saved);
    if (rc != 0) {
        vc_issue(c, VS_FAIL, "%s", err.msg);
        return;
    }
    for (int i = 0; i < ck->n_warnings; i++) vc_issue(c, VS_WARN, "%s", ck->warnings[i]);
    vc_note(c, "all checks passed (%d tensors resolved%s)", ck->n_names, v->m.engram_need ? "; Engram tables skipped until reassembled" : "");
    ds_ckpt_close(ck);
}

/* ------------------------------------------------------------------------------------------ */
/* I1: index                                                                                    */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void check_index(vctx *v) {
    vcheck *c = vc_begin(v, "I1", "index JSON");
    vckpt *k = &v->m;
    if (!k->index) { vc_issue(c, VS_FAIL, "%s", k->index_err); return; }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(k->index, "weight_map");
    if (!cJSON_IsObject(wm)) { vc_issue(c, VS_FAIL, "%s: weight_map: expected an object", V_INDEX_FILE); return; }
    int n = cJSON_GetArraySize(wm), i = 0;
    const char **keys = ds_xcalloc((size_t)(n ? n : 1), sizeof *keys);
    for (const cJSON *it = wm->child; it; it = it->next) {
        keys[i++] = it->string;
        if (!cJSON_IsString(it)) { vc_issue(c, VS_FAIL, "weight_map[%s]: expected a file name", it->string); continue; }
        const char *rel = it->valuestring;
        if (!rel[0] || rel[0] == '/' || strstr(rel, "..")) {
            vc_issue(c, VS_FAIL, "weight_map[%s] = \"%s\": absolute or '..' paths are not allowed", it->string, rel);
            continue;
        }
        int fi = vk_file(k, rel);
        vfile *f = &k->files[fi];
        if (f->need) continue;   /* F1 reports NEED */
        if (f->missing) vc_issue(c, VS_FAIL, "weight_map[%s] -> %s: file missing", it->string, rel);
        else if (!f->st) vc_issue(c, VS_FAIL, "weight_map[%s] -> %s: header unreadable (see H1)", it->string, rel);
        else if (!ds_st_find(f->st, it->string)) vc_issue(c, VS_FAIL, "%s is mapped to %s but that file's header does not hold it", it->string, rel);
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_str);
    for (i = 1; i < n; i++)
        if (!strcmp(keys[i], keys[i - 1])) vc_issue(c, VS_FAIL, "weight_map lists %s twice", keys[i]);
    free(keys);
    /* A tensor held by two index-referenced files is ambiguous, except a [1,1] placeholder that
     * the index overrides (the Engram embed names in engram_extra, CHECKPOINT.md §4). */
    int n_ref = 0;
    for (int f = 0; f < k->n_files; f++) {
        const ds_stfile *st = k->files[f].st;
        if (!st || !k->files[f].index_target) continue;
        n_ref++;
        for (int t = 0; t < st->n_tensors; t++) {
            const ds_tensor *x = &st->tensors[t];
            const vname *nm = vk_find(k, x->name);
            if (!nm || !nm->indexed || nm->file == f) continue;
            bool placeholder = x->ndim == 2 && x->shape[0] == 1 && x->shape[1] == 1;
            if (!placeholder) vc_issue(c, VS_FAIL, "%s appears in %s and in %s", x->name, k->files[nm->file].rel, k->files[f].rel);
        }
    }
    /* Trunk shards that the index never names. */
    DIR *d = opendir(k->dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "quant_model_weights-", 20) || !strstr(de->d_name, ".safetensors")) continue;
        bool ref = false;
        for (int f = 0; f < k->n_files && !ref; f++) ref = k->files[f].index_target && !strcmp(k->files[f].rel, de->d_name);
        if (!ref) vc_issue(c, VS_WARN, "%s is not referenced by the index", de->d_name);
    }
    if (d) closedir(d);
    vc_note(c, "%d entries in %d files", n, n_ref);
}

/* ------------------------------------------------------------------------------------------ */
/* H1: safetensors headers                                                                      */

static void check_headers(vctx *v) {
    vcheck *c = vc_begin(v, "H1", "safetensors headers");
    vckpt *k = &v->m;
    const uint32_t allowed = DS_DT_BIT(DS_DT_I8) | DS_DT_BIT(DS_DT_U8) | DS_DT_BIT(DS_DT_BF16) | DS_DT_BIT(DS_DT_F16) |
                             DS_DT_BIT(DS_DT_F32) | DS_DT_BIT(DS_DT_F8_E4M3) | DS_DT_BIT(DS_DT_F8_E8M0) |
                             DS_DT_BIT(DS_DT_I32) | DS_DT_BIT(DS_DT_I64) | DS_DT_BIT(DS_DT_F4);   /* F4: official MXFP4 experts */
    int nf = 0;
    int64_t nt = 0;
    for (int f = 0; f < k->n_files; f++) {
        vfile *vf = &k->files[f];
        if (vf->missing) continue;
        if (!vf->st) { vc_issue(c, VS_FAIL, "%s", vf->err); continue; }
        nf++;
        const ds_stfile *st = vf->st;
        uint64_t last = 0;
        for (int t = 0; t < st->n_tensors; t++) {
            const ds_tensor *x = &st->tensors[t];
            nt++;
            if (!(allowed & DS_DT_BIT(x->dtype)))
                vc_issue(c, VS_FAIL, "%s: %s: dtype %s is not allowed in a checkpoint", vf->rel, x->name, ds_dtype_name(x->dtype));
            if (x->begin + x->nbytes > last) last = x->begin + x->nbytes;
        }
        if (st->file_size != st->data_start + last)
            vc_issue(c, VS_FAIL, "%s: file size %llu, expected 8 + header %llu + data %llu = %llu", vf->rel, (unsigned long long)st->file_size,
                     (unsigned long long)st->header_len, (unsigned long long)last, (unsigned long long)(st->data_start + last));
        for (int w = 0; w < st->n_warnings; w++) vc_issue(c, VS_WARN, "%s", st->warnings[w]);
    }
    vc_note(c, "%d files, %lld tensors", nf, (long long)nt);
}

/* ------------------------------------------------------------------------------------------ */
/* N1: counts                                                                                   */

ds_label v_name_label(const vckpt *k, const vname *n) {
    const char *l = vk_label(k, n->name);
    if (l) return ds_label_parse(l);
    if (v_is_engram(n->name) && strstr(n->name, ".engram.embed.")) return DS_LABEL_ENGRAM;
    return ds_dtype_is_float(n->t->dtype) ? DS_LABEL_FLOAT : DS_LABEL_NONE;
}

static void check_counts(vctx *v) {
    vcheck *c = vc_begin(v, "N1", "tensor counts");
    vckpt *k = &v->m;
    int64_t trunk[DS_LABEL_ENGRAM + 1] = {0}, draft = 0, vision = 0, engram = 0, vision_bytes = 0, vision_nonbf16 = 0;
    for (int i = 0; i < k->n_names; i++) {
        const vname *n = &k->names[i];
        if (v_is_draft(n->name)) draft++;
        else if (v_is_vision(n->name)) {
            vision++;
            vision_bytes += (int64_t)n->t->nbytes;
            vision_nonbf16 += n->t->dtype != DS_DT_BF16;
        } else if (v_is_engram(n->name)) engram++;
        else trunk[v_name_label(k, n)]++;
    }
    int64_t tt = trunk[DS_LABEL_W4A8] + trunk[DS_LABEL_W8A8] + trunk[DS_LABEL_FLOAT] + trunk[DS_LABEL_NONE] + trunk[DS_LABEL_OTHER];
    char brk[256];
    snprintf(brk, sizeof brk, "trunk %lld = W4A8 %lld + W8A8 %lld + FLOAT %lld%s; draft %lld; vision %lld; Engram %lld", (long long)tt,
             (long long)trunk[DS_LABEL_W4A8], (long long)trunk[DS_LABEL_W8A8], (long long)trunk[DS_LABEL_FLOAT],
             trunk[DS_LABEL_NONE] + trunk[DS_LABEL_OTHER] ? " + other" : "", (long long)draft, (long long)vision, (long long)engram);
    if (v->m.cfg_ok && v->m.cfg.format == DS_FMT_W4A8) {
        ds_plan_counts pc;
        ds_error e;
        if (ds_plan_count(&k->cfg, NULL, &pc, &e) == 0) {
            const int64_t *pt = pc.by_file_label[DS_PF_TRUNK];
            if (pt[DS_LABEL_W4A8] != trunk[DS_LABEL_W4A8] || pt[DS_LABEL_W8A8] != trunk[DS_LABEL_W8A8] || pt[DS_LABEL_FLOAT] != trunk[DS_LABEL_FLOAT] ||
                trunk[DS_LABEL_NONE] + trunk[DS_LABEL_OTHER])
                vc_issue(c, VS_FAIL, "%s; the config requires trunk W4A8 %lld + W8A8 %lld + FLOAT %lld", brk, (long long)pt[DS_LABEL_W4A8],
                         (long long)pt[DS_LABEL_W8A8], (long long)pt[DS_LABEL_FLOAT]);
            int64_t pd = 0, flex = 0;
            for (int l = 0; l <= DS_LABEL_ENGRAM; l++) pd += pc.by_file_label[DS_PF_DRAFT][l] + pc.by_file_label[DS_PF_DRAFT_VOCAB][l];
            for (int64_t i = 0; v->plan_ok && i < v->plan.n; i++) flex += v->plan.t[i].flex_w8a8;
            /* options of the mtpq manifest may store flexible draft linears as W8A8 (+2 tensors each) */
            if (draft < pd || draft > pd + 2 * flex)
                vc_issue(c, VS_FAIL, "draft: %lld tensors, the config requires %lld (up to %lld with W8A8 options)", (long long)draft, (long long)pd,
                         (long long)(pd + 2 * flex));
            int64_t pe = 0;
            for (int l = 0; l <= DS_LABEL_ENGRAM; l++) pe += pc.by_file_label[DS_PF_ENGRAM_TABLE][l] + pc.by_file_label[DS_PF_ENGRAM_EXTRA][l];
            if (!k->engram_need && engram != pe)
                vc_issue(c, VS_FAIL, "Engram: %lld tensors, the config requires %lld", (long long)engram, (long long)pe);
        }
    }
    if (v->profile) {
        if (tt != 185734 || trunk[DS_LABEL_W4A8] != 184320 || trunk[DS_LABEL_W8A8] != 744 || trunk[DS_LABEL_FLOAT] != 670)
            vc_issue(c, VS_FAIL, "%s; release profile: trunk 185,734 = 184,320 + 744 + 670", brk);
        if (tt + draft + vision != 187226)
            vc_issue(c, VS_FAIL, "trunk + draft + vision = %lld; release profile: 187,226", (long long)(tt + draft + vision));
        if (vision && (vision != 266 || vision_nonbf16 || vision_bytes != 970536960))
            vc_issue(c, VS_FAIL, "vision: %lld tensors (%lld not BF16), %lld bytes; release profile: 266 BF16 tensors, 970,536,960 bytes",
                     (long long)vision, (long long)vision_nonbf16, (long long)vision_bytes);
    }
    vc_note(c, "%s", brk);
}

/* ------------------------------------------------------------------------------------------ */
/* L1: quant_model_description.json                                                             */

static void check_labels(vctx *v) {
    vcheck *c = vc_begin(v, "L1", "quant description labels");
    vckpt *k = &v->m;
    if (!k->desc) { vc_issue(c, VS_FAIL, "%s", k->desc_err); return; }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(k->desc, "version");
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(k->desc, "group_size");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(k->desc, "metadata");
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "1.0.0")) vc_issue(c, VS_FAIL, "version: expected \"1.0.0\"");
    if (!cJSON_IsNumber(gs) || gs->valuedouble != 0) vc_issue(c, VS_FAIL, "group_size: expected 0");
    if (md && !cJSON_IsObject(md)) vc_issue(c, VS_FAIL, "metadata: expected an object");
    else if (md && md->child) vc_issue(c, VS_WARN, "metadata: expected {}, found entries");
    const cJSON *rot = cJSON_GetObjectItemCaseSensitive(k->desc, "optional");
    rot = rot ? cJSON_GetObjectItemCaseSensitive(rot, "quarot") : NULL;
    rot = rot ? cJSON_GetObjectItemCaseSensitive(rot, "rotation_map") : NULL;
    rot = rot ? cJSON_GetObjectItemCaseSensitive(rot, "global_rotation") : NULL;
    if (rot) {
        char *p = cJSON_IsString(rot) ? ds_path_join(k->dir, rot->valuestring) : NULL;
        if (!p || !ds_file_exists(p)) vc_issue(c, VS_FAIL, "optional.quarot.rotation_map.global_rotation names a file that does not exist");
        free(p);
    }
    int64_t labelled = 0;
    for (int i = 0; i < k->n_names; i++) {
        const vname *n = &k->names[i];
        const char *l = vk_label(k, n->name);
        if (!l) continue;
        labelled++;
        ds_label lb = ds_label_parse(l);
        if (lb == DS_LABEL_OTHER) { vc_issue(c, VS_FAIL, "%s: label \"%s\" is not W4A8_DYNAMIC, W8A8_DYNAMIC or FLOAT", n->name, l); continue; }
        size_t len = strlen(n->name);
        if ((lb != DS_LABEL_W4A8 && lb != DS_LABEL_W8A8) || len < 7 || strcmp(n->name + len - 7, ".weight")) continue;
        const char *sib4[] = {"weight_scale", "weight_offset", "scale_bias"};
        int nsib = lb == DS_LABEL_W4A8 ? 3 : 2;
        for (int s = 0; s < nsib; s++) {
            char sn[256];
            snprintf(sn, sizeof sn, "%.*s.%s", (int)(len - 7), n->name, sib4[s]);
            const char *sl = vk_label(k, sn);
            if (!vk_find(k, sn)) vc_issue(c, v_is_draft(n->name) ? VS_WARN : VS_FAIL, "%s (%s) has no %s", n->name, l, sn);
            else if (sl && strcmp(sl, l)) vc_issue(c, VS_FAIL, "%s is %s but its %s is %s", n->name, l, sib4[s], sl);
        }
    }
    /* Labels follow the plan of TOOLS.md §3.2 (trunk: FAIL; draft: detected format wins, WARN). */
    for (int64_t i = 0; v->plan_ok && i < v->plan.n; i++) {
        const ds_plan_tensor *t = &v->plan.t[i];
        if (t->file != DS_PF_TRUNK && t->file != DS_PF_DRAFT) continue;
        const vname *n = vk_find(k, t->name);
        if (!n) continue;   /* S1 reports missing tensors */
        const char *l = vk_label(k, t->name);
        ds_label have = l ? ds_label_parse(l) : (ds_dtype_is_float(n->t->dtype) ? DS_LABEL_FLOAT : DS_LABEL_NONE);
        if (have == t->label || (t->flex_w8a8 && have == DS_LABEL_W8A8)) continue;
        vc_issue(c, t->file == DS_PF_TRUNK ? VS_FAIL : VS_WARN, "%s: label %s, the plan says %s", t->name, l ? l : "(none)", ds_label_name(t->label));
    }
    vc_note(c, "%lld labelled tensors present (description lists %d names)", (long long)labelled, k->n_desc);
}

/* ------------------------------------------------------------------------------------------ */
/* Driver, report, JSON                                                                         */

int ds_verify_run(const ds_verify_opts *o) {
    struct stat st;
    if (stat(o->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("verify: %s: %s\n", o->dir, errno == ENOENT ? "no such directory" : "not a directory");
        return DS_EXIT_MISSING;
    }
    char started[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    vctx *v = ds_xcalloc(1, sizeof *v);
    v->o = o;
    vk_load(&v->m, o->dir);
    v->profile = o->profile == DS_PROFILE_V41 || (o->profile == DS_PROFILE_AUTO && v->m.cfg_ok && ds_config_is_v41_flash(&v->m.cfg));
    if (v->m.cfg_ok && v->m.cfg.format == DS_FMT_W4A8) {
        ds_error e;
        v->plan_ok = ds_plan_build(&v->m.cfg, NULL, &v->plan, &e) == 0;
    }
    if (v->m.cfg_ok && v->m.cfg.format == DS_FMT_FP8) {   /* official layout: its own rows (verify_official.c) */
        v_check_official(v, check_config, check_loader, check_index, check_headers);
    } else {
        check_files(v);
        check_config(v);
        check_loader(v);
        check_index(v);
        check_headers(v);
        check_counts(v);
        check_labels(v);
        v_check_shapes(v);
        v_check_rotation(v);
        v_check_engram(v);
    }
    if (o->deep) v_check_deep(v);
    if (o->compare_dir) v_check_compare(v);

    printf("verify: %s (%s)\n", o->dir, v->profile ? "release profile v41-flash-w4a8 on top of config-derived checks" : "checks derived from config.json");
    int n_failed = 0, n_need = 0, n_warn = 0;
    for (int i = 0; i < v->n_checks; i++) {
        const vcheck *c = &v->checks[i];
        n_failed += c->st == VS_FAIL;
        n_need += c->st == VS_NEED;
        n_warn += c->n_warn;
        char more[48] = "";
        if (c->n_issues > c->n_shown && c->n_issues > 0) snprintf(more, sizeof more, " (+%d more)", c->n_issues - c->n_shown);
        printf("  %-4s  %-4s  %s: %s%s\n", c->id, v_status_name(c->st), c->title, c->detail, more);
    }
    const char *verdict = n_failed ? "FAIL" : n_need ? "NEED" : "PASS";
    if (n_failed) printf("verify: FAIL (%d of %d checks failed, warnings %d)\n", n_failed, v->n_checks, n_warn);
    else if (n_need) printf("verify: NEED (reassembly required first; checks %d, warnings %d)\n", v->n_checks, n_warn);
    else printf("verify: PASS (checks %d, warnings %d)\n", v->n_checks, n_warn);
    int rc = n_failed ? DS_EXIT_CHECK : n_need ? DS_EXIT_NEED : DS_EXIT_OK;
    if (o->json_out && v_write_json(v, verdict, v->n_checks, n_failed, n_warn, started) != 0) rc = ds_exit_merge(rc, DS_EXIT_IO);
    ds_plan_free(&v->plan);
    vk_free(&v->m);
    free(v);
    fflush(stdout);
    return rc;
}
