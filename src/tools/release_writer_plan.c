/* Release planning: label assignment (TOOLS.md §3.2), shard assignment, per-file layout and
 * headers, and the plan's JSON form.  Everything here is computed from names, dtypes and shapes
 * only, so it runs in milliseconds even for the 185k-tensor release and fixes every byte offset
 * before the first weight is read (see release_writer.h for the layout rules). */
#define _GNU_SOURCE
#include "tools/release_writer.h"
#include "io/config.h"
#include "io/tensor_plan.h"
#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ds_rw_opts_default(ds_rw_opts *o) {
    memset(o, 0, sizeof *o);
    o->ssz_steps = DS_SSZ_STEPS_DEFAULT;
    o->shard_bytes = (uint64_t)4 << 30;
}

/* s == prefix <digits> suffix exactly; *num receives the digits' value. */
static bool match_num(const char *s, const char *prefix, const char *suffix, int *num) {
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl)) return false;
    s += pl;
    if (*s < '0' || *s > '9') return false;
    long v = 0;
    while (*s >= '0' && *s <= '9') { v = v * 10 + (*s - '0'); if (v > 1000000) return false; s++; }
    if (strcmp(s, suffix)) return false;
    if (num) *num = (int)v;
    return true;
}

/* Split "layers.N.rest" / "mtp.N.rest": returns rest (or NULL), sets *draft and *idx. */
static const char *layer_rest(const char *name, bool *draft, int *idx) {
    const char *p;
    if (!strncmp(name, "layers.", 7)) { p = name + 7; *draft = false; }
    else if (!strncmp(name, "mtp.", 4)) { p = name + 4; *draft = true; }
    else return NULL;
    if (*p < '0' || *p > '9') return NULL;
    int v = 0;
    while (*p >= '0' && *p <= '9') { v = v * 10 + (*p - '0'); if (v > 100000) return NULL; p++; }
    if (*p != '.') return NULL;
    *idx = v;
    return p + 1;
}

const char *ds_rw_label_for(const ds_rw_opts *o, const char *name, int n_mtp, ds_qkind *kind) {
    bool draft = false;
    int li = -1;
    const char *r = layer_rest(name, &draft, &li);
    *kind = DS_QK_FLOAT;
    if (!r) return DS_RW_FLOAT;
    for (int w = 1; w <= 3; w++) {
        char sfx[32];
        snprintf(sfx, sizeof sfx, ".w%d.weight", w);
        if (match_num(r, "ffn.experts.", sfx, NULL)) { *kind = DS_QK_W4A8; return DS_RW_W4A8; }
    }
    static const char *const w8[] = {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.indexer.wq_b.weight",
                                     "ffn.shared_experts.w1.weight", "ffn.shared_experts.w2.weight", "ffn.shared_experts.w3.weight"};
    for (size_t i = 0; i < DS_ARRAY_LEN(w8); i++)
        if (!strcmp(r, w8[i])) { *kind = DS_QK_W8A8; return DS_RW_W8A8; }
    if (!draft && !strcmp(r, "engram.embed.weight")) { *kind = DS_QK_ENGRAM; return NULL; }
    if (draft) {
        if (o->aggressive && (!strcmp(r, "attn.wo_a.weight") || !strcmp(r, "attn.wo_b.weight"))) { *kind = DS_QK_W8A8; return DS_RW_W8A8; }
        if (o->quant_main_proj && !strcmp(r, "main_proj.weight")) { *kind = DS_QK_W8A8; return DS_RW_W8A8; }
        if (o->quant_vocab && ((li == 0 && !strcmp(r, "embed.weight")) || (li == n_mtp - 1 && !strcmp(r, "head.weight")))) {
            *kind = DS_QK_W8A8;
            return DS_RW_W8A8;
        }
    }
    return DS_RW_FLOAT;
}

static bool is_engram_extra(const char *name) {
    bool draft;
    int li;
    const char *r = layer_rest(name, &draft, &li);
    return r && !draft && (!strcmp(r, "engram.wkv.weight") || !strcmp(r, "engram.q_weight") || !strcmp(r, "engram.k_weight"));
}
static bool is_vision(const char *name) {
    return !strncmp(name, "vision.", 7) || !strncmp(name, "aligner.", 8) || !strncmp(name, "image_", 6);
}

/* ------------------------------------------------------------------------------------------ */
/* Plan construction                                                                          */

static int add_tensor(ds_rw_plan *p, const char *name, ds_dtype dt, int ndim, const int64_t *shape, const char *label, bool in_index) {
    if (p->n_tensors == p->cap_tensors) {
        p->cap_tensors = p->cap_tensors ? 2 * p->cap_tensors : 256;
        p->tensors = ds_xrealloc(p->tensors, sizeof *p->tensors * (size_t)p->cap_tensors);
    }
    ds_rw_tensor *t = &p->tensors[p->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = ds_xstrdup(name);
    t->dtype = dt;
    t->ndim = ndim;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) { t->shape[i] = shape[i]; numel *= (uint64_t)shape[i]; }
    t->nbytes = numel * (uint64_t)ds_dtype_size(dt);
    t->label = label;
    t->in_index = in_index;
    t->file = -1;
    return p->n_tensors++;
}

static ds_rw_group *add_group(ds_rw_plan *p, int src, ds_qkind kind) {
    if (p->n_groups == p->cap_groups) {
        p->cap_groups = p->cap_groups ? 2 * p->cap_groups : 256;
        p->groups = ds_xrealloc(p->groups, sizeof *p->groups * (size_t)p->cap_groups);
    }
    ds_rw_group *g = &p->groups[p->n_groups++];
    memset(g, 0, sizeof *g);
    g->src = src;
    g->kind = kind;
    g->unit = -1;
    g->min_exp = 1000;
    g->max_exp = -1000;
    return g;
}

/* Create the output tensors of one source tensor under output name `oname`. */
static int plan_group(ds_rw_plan *p, const ds_fsrc *src, int si, const char *oname, ds_qkind kind, const char *label, ds_error *err) {
    const ds_fsrc_tensor *st = &src->t[si];
    ds_rw_group *g = add_group(p, si, kind);
    g->src_bytes = st->nbytes;
    if (kind == DS_QK_FLOAT) {
        /* the draft vocabulary copies are BF16 whatever the trunk tensor's dtype (CHECKPOINT.md §11:
         * the W4A8 head is F32, mtp.{S-1}.head is BF16) */
        ds_dtype dt = strcmp(oname, st->name) && !strncmp(oname, "mtp.", 4) ? DS_DT_BF16 : st->dtype;
        g->out[g->n_out++] = add_tensor(p, oname, dt, st->ndim, st->shape, label, true);
        return 0;
    }
    if (st->ndim != 2 || st->shape[0] <= 0 || st->shape[1] <= 0)
        return ds_fail(err, "E_SRC_FORMAT", "%s: expected a 2-D [out, in] weight for %s, found %d dimensions",
                       st->name, label ? label : "the Engram table", st->ndim);
    int64_t out = st->shape[0], in = st->shape[1];
    size_t bl = strlen(oname);
    char base[512];
    if (kind == DS_QK_ENGRAM) {
        if (in % 32)
            return ds_fail(err, "E_SRC_FORMAT", "%s: expected an Engram row width that is a multiple of 32, found %lld", st->name, (long long)in);
        snprintf(base, sizeof base, "%.*s", (int)(bl - strlen(".weight")), oname);
        char sname[560];
        snprintf(sname, sizeof sname, "%s.scale", base);
        int64_t ws[2] = {out, in}, ss[2] = {out, in / 32};
        g->out[g->n_out++] = add_tensor(p, oname, DS_DT_I8, 2, ws, NULL, true);
        g->out[g->n_out++] = add_tensor(p, sname, DS_DT_F32, 2, ss, NULL, true);
        return 0;
    }
    if (bl < 8 || strcmp(oname + bl - 7, ".weight"))
        return ds_fail(err, "E_SRC_FORMAT", "%s: expected a quantized linear's name to end in .weight", oname);
    snprintf(base, sizeof base, "%.*s", (int)(bl - 7), oname);
    char nm[600];
    int64_t col1[2] = {out, 1};
    if (kind == DS_QK_W4A8) {
        int64_t ws[2] = {(out + 1) / 2, in};
        g->out[g->n_out++] = add_tensor(p, oname, DS_DT_I8, 2, ws, label, true);
    } else {
        int64_t ws[2] = {out, in};
        g->out[g->n_out++] = add_tensor(p, oname, DS_DT_I8, 2, ws, label, true);
    }
    snprintf(nm, sizeof nm, "%s.weight_scale", base);
    g->out[g->n_out++] = add_tensor(p, nm, DS_DT_F32, 2, col1, label, true);
    snprintf(nm, sizeof nm, "%s.weight_offset", base);
    g->out[g->n_out++] = add_tensor(p, nm, DS_DT_F32, 2, col1, label, true);
    if (kind == DS_QK_W4A8) {
        bool w2 = bl >= 10 && !strcmp(oname + bl - 10, ".w2.weight");
        g->sb_chunks = w2 ? DS_SCALE_BIAS_W2_CHUNKS : 1;
        if (g->sb_chunks > in) g->sb_chunks = (int)in;
        int64_t sbs[2] = {out, g->sb_chunks};
        snprintf(nm, sizeof nm, "%s.scale_bias", base);
        g->out[g->n_out++] = add_tensor(p, nm, DS_DT_F32, 2, sbs, label, true);
    }
    return 0;
}

static ds_rw_file *add_file(ds_rw_plan *p, const char *rel, ds_rfile_kind kind, int unit) {
    if (p->n_files == p->cap_files) {
        p->cap_files = p->cap_files ? 2 * p->cap_files : 16;
        p->files = ds_xrealloc(p->files, sizeof *p->files * (size_t)p->cap_files);
    }
    ds_rw_file *f = &p->files[p->n_files++];
    memset(f, 0, sizeof *f);
    f->relpath = ds_xstrdup(rel);
    f->kind = kind;
    f->unit = unit;
    return f;
}

static ds_rfile_kind group_home(const ds_rw_plan *p, const ds_rw_group *g) {
    const char *name = p->tensors[g->out[0]].name;
    if (p->opts.float_export) return DS_RF_FLOAT;
    if (g->kind == DS_QK_ENGRAM) return DS_RF_ENGRAM_W;
    if ((g->kind == DS_QK_ZERO && strstr(name, ".engram.")) || is_engram_extra(name)) return DS_RF_EXTRA;
    if (is_vision(name)) return DS_RF_VISION;
    if (!strncmp(name, "mtp.", 4)) return DS_RF_DRAFT;
    return DS_RF_TRUNK;
}

static uint64_t group_out_bytes(const ds_rw_plan *p, const ds_rw_group *g) {
    uint64_t b = 0;
    for (int i = 0; i < g->n_out; i++) b += p->tensors[g->out[i]].nbytes;
    return b;
}

/* qsort_r comparators over index arrays into the plan (ctx = the plan) */
static int cmp_group_name(const void *a, const void *b, void *ctx) {
    const ds_rw_plan *p = ctx;
    const ds_rw_group *x = &p->groups[*(const int *)a], *y = &p->groups[*(const int *)b];
    return strcmp(p->tensors[x->out[0]].name, p->tensors[y->out[0]].name);
}

/* Assign groups of one kind to numbered shards: "<prefix>-%05d-of-%05d.safetensors". */
static void plan_shards(ds_rw_plan *p, const int *order, int n_order, ds_rfile_kind kind, const char *prefix, int *count) {
    int first_file = p->n_files, n_shards = 0;
    uint64_t cur = 0;
    for (int k = 0; k < n_order; k++) {
        ds_rw_group *g = &p->groups[order[k]];
        if (group_home(p, g) != kind) continue;
        uint64_t b = group_out_bytes(p, g);
        if (n_shards == 0 || (cur > 0 && cur + b > p->opts.shard_bytes)) {
            add_file(p, "", kind, p->n_units++);
            n_shards++;
            cur = 0;
        }
        cur += b;
        ds_rw_file *f = &p->files[p->n_files - 1];
        g->unit = f->unit;
        for (int i = 0; i < g->n_out; i++) p->tensors[g->out[i]].file = p->n_files - 1;
    }
    for (int s = 0; s < n_shards; s++) {
        char rel[256];
        snprintf(rel, sizeof rel, "%s-%05d-of-%05d.safetensors", prefix, s + 1, n_shards);
        free(p->files[first_file + s].relpath);
        p->files[first_file + s].relpath = ds_xstrdup(rel);
    }
    *count = n_shards;
}

/* ------------------------------------------------------------------------------------------ */
/* Headers                                                                                    */

typedef struct { char *p; size_t n, cap; } sbuf;
static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->p = ds_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char t[2] = {'\\', (char)c}; sb_put(b, t, 2); }
        else if (c < 0x20) { char t[8]; snprintf(t, sizeof t, "\\u%04x", c); sb_str(b, t); }
        else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, "\"", 1);
}

static int cmp_layout(const void *a, const void *b, void *ctx) {
    const ds_rw_plan *p = ctx;
    const ds_rw_tensor *x = &p->tensors[*(const int *)a], *y = &p->tensors[*(const int *)b];
    int sx = ds_dtype_size(x->dtype), sy = ds_dtype_size(y->dtype);
    if (sx != sy) return sy - sx;
    return strcmp(x->name, y->name);
}
static int cmp_name(const void *a, const void *b, void *ctx) {
    const ds_rw_plan *p = ctx;
    return strcmp(p->tensors[*(const int *)a].name, p->tensors[*(const int *)b].name);
}

static int layout_file(ds_rw_plan *p, int fi, ds_error *err) {
    ds_rw_file *f = &p->files[fi];
    f->n_tensors = 0;
    for (int t = 0; t < p->n_tensors; t++)
        if (p->tensors[t].file == fi) f->n_tensors++;
    f->tensors = ds_xmalloc(sizeof(int) * (size_t)(f->n_tensors ? f->n_tensors : 1));
    int *lay = ds_xmalloc(sizeof(int) * (size_t)(f->n_tensors ? f->n_tensors : 1));
    int k = 0;
    for (int t = 0; t < p->n_tensors; t++)
        if (p->tensors[t].file == fi) { f->tensors[k] = t; lay[k] = t; k++; }
    qsort_r(f->tensors, (size_t)f->n_tensors, sizeof(int), cmp_name, p);
    qsort_r(lay, (size_t)f->n_tensors, sizeof(int), cmp_layout, p);
    uint64_t off = 0; /* data offsets relative to the data section, in layout order */
    for (int i = 0; i < f->n_tensors; i++) { p->tensors[lay[i]].offset = off; off += p->tensors[lay[i]].nbytes; }
    free(lay);
    for (int i = 1; i < f->n_tensors; i++)
        if (!strcmp(p->tensors[f->tensors[i]].name, p->tensors[f->tensors[i - 1]].name)) {
            return ds_fail(err, "E_SRC_FORMAT", "%s: %s: expected unique tensor names in one file, found a duplicate",
                           f->relpath, p->tensors[f->tensors[i]].name);
        }
    sbuf hb = {0};
    bool engram = f->kind == DS_RF_ENGRAM_W || f->kind == DS_RF_ENGRAM_S;
    sb_str(&hb, engram ? "{" : "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < f->n_tensors; i++) {
        int t = f->tensors[i];
        const ds_rw_tensor *tt = &p->tensors[t];
        if (i || !engram) sb_str(&hb, ",");
        sb_json_str(&hb, tt->name);
        char tmp[160];
        snprintf(tmp, sizeof tmp, ":{\"dtype\":\"%s\",\"shape\":[", ds_dtype_name(tt->dtype));
        sb_str(&hb, tmp);
        for (int d = 0; d < tt->ndim; d++) {
            snprintf(tmp, sizeof tmp, "%s%" PRId64, d ? "," : "", tt->shape[d]);
            sb_str(&hb, tmp);
        }
        snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", tt->offset, tt->offset + tt->nbytes);
        sb_str(&hb, tmp);
    }
    sb_str(&hb, "}");
    uint64_t hlen = hb.n;
    if (engram) {
        if (hlen > DS_ENGRAM_HEADER_SIZE) {
            free(hb.p);
            return ds_fail(err, "E_SRC_FORMAT", "%s: expected an Engram table header of at most %d bytes, found %" PRIu64,
                           f->relpath, DS_ENGRAM_HEADER_SIZE, hlen);
        }
        hlen = DS_ENGRAM_HEADER_SIZE;
    } else {
        hlen = (hlen + 8 + 7) / 8 * 8 - 8;
    }
    while (hb.n < hlen) sb_put(&hb, " ", 1);
    f->header = hb.p;
    f->header_len = hlen;
    f->size = 8 + hlen + off;
    for (int i = 0; i < f->n_tensors; i++) p->tensors[f->tensors[i]].offset += 8 + hlen;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

void ds_rw_plan_free(ds_rw_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_tensors; i++) free(p->tensors[i].name);
    for (int i = 0; i < p->n_files; i++) { free(p->files[i].relpath); free(p->files[i].tensors); free(p->files[i].header); }
    free(p->tensors); free(p->groups); free(p->files);
    free(p);
}

static int check_profile(const ds_rw_plan *p, ds_error *err) {
    const ds_config *c = &p->cfg;
    if (p->opts.float_export || !ds_config_is_v41_flash(c)) return 0;
    if (c->max_pos != 1048576)
        return ds_fail(err, "E_CONFIG_MAXPOS", "config.json: max_position_embeddings: expected 1048576 for the V4.1-Flash release, found %lld",
                       (long long)c->max_pos);
    if (c->n_engram != 2 || c->engram_layers[0] != 1 || c->engram_layers[1] != 14)
        return ds_fail(err, "E_CONFIG", "config.json: engram_layer_ids: expected [1, 14] for the V4.1-Flash release");
    return 0;
}

/* The release must contain every tensor the loader's plan requires (io/tensor_plan.h), with an
 * accepted dtype and the planned shape, so a quantize run can never produce a checkpoint the
 * engine refuses.  A FLOAT tensor whose float dtype the release does not accept is converted to
 * the planned one (e.g. an official BF16 ratio-2 compressor widened to the release's F32, an F32
 * wo_a rounded to BF16) and the conversion is reported; shapes and non-float dtypes are never
 * adjusted.  Draft linears that options move to W8A8 (flex) are checked by name only.  Source
 * tensors the plan does not know (vision aside) are reported too: the engine will not use them. */
typedef struct {
    ds_rw_plan *p;
    int *idx, n;
    ds_error *err;
    char *seen;          /* [n_tensors] planned */
    int converted;
    char first_conv[160];
} cover_ctx;

static ds_rw_tensor *cover_find(const cover_ctx *c, const char *name) {
    int lo = 0, hi = c->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        ds_rw_tensor *t = &c->p->tensors[c->idx[mid]];
        int k = strcmp(t->name, name);
        if (!k) return t;
        if (k < 0) lo = mid + 1; else hi = mid - 1;
    }
    return NULL;
}
static int cover_cb(const ds_plan_tensor *t, void *ctx) {
    cover_ctx *c = ctx;
    if (t->part == DS_PP_ROTATION) return 0;
    ds_rw_tensor *w = cover_find(c, t->name);
    if (!w && t->alias[0]) w = cover_find(c, t->alias);
    if (!w) {
        ds_fail(c->err, "E_TENSOR_MISSING", "%s: expected in the source (the release requires it), found none", t->name);
        return 1;
    }
    c->seen[w - c->p->tensors] = 1;
    if (t->flex_w8a8 && w->dtype == DS_DT_I8) return 0;
    bool shape_ok = w->ndim == t->ndim;
    for (int d = 0; shape_ok && d < t->ndim; d++) shape_ok = w->shape[d] == t->shape[d];
    bool dtype_ok = (t->dtype_mask & DS_DT_BIT(w->dtype)) != 0;
    bool convertible = t->part == DS_PP_FLOAT && ds_dtype_is_float(w->dtype) && ds_dtype_is_float(t->dtype);
    if (shape_ok && !dtype_ok && convertible) {
        if (!c->converted++)
            snprintf(c->first_conv, sizeof c->first_conv, "%s %s -> %s", t->name, ds_dtype_name(w->dtype), ds_dtype_name(t->dtype));
        w->dtype = t->dtype;
        uint64_t numel = 1;
        for (int d = 0; d < w->ndim; d++) numel *= (uint64_t)w->shape[d];
        w->nbytes = numel * (uint64_t)ds_dtype_size(w->dtype);
        return 0;
    }
    if (!shape_ok || !dtype_ok) {
        ds_fail(c->err, shape_ok ? "E_DTYPE_MISMATCH" : "E_SHAPE_MISMATCH",
                "%s: expected %s [%lld, %lld] (%d-D) for the release, found %s with %d dimensions [%lld, %lld]", t->name,
                ds_dtype_name(t->dtype), (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0), t->ndim,
                ds_dtype_name(w->dtype), w->ndim, (long long)w->shape[0], (long long)(w->ndim > 1 ? w->shape[1] : 0));
        return 1;
    }
    return 0;
}
static int check_coverage(ds_rw_plan *p, ds_error *err) {
    cover_ctx c = {.p = p, .idx = ds_xmalloc(sizeof(int) * (size_t)(p->n_tensors + 1)), .err = err,
                   .seen = ds_xcalloc((size_t)p->n_tensors + 1, 1)};
    for (int t = 0; t < p->n_tensors; t++)
        if (p->tensors[t].in_index) c.idx[c.n++] = t;
    qsort_r(c.idx, (size_t)c.n, sizeof(int), cmp_name, (void *)p);
    ds_config pc = p->cfg;
    pc.format = DS_FMT_W4A8;
    ds_plan_opts o;
    ds_plan_opts_default(&o, &pc);
    o.rotation = false;
    o.draft_vocab = pc.n_mtp_layers > 0;
    int rc = ds_plan_foreach(&pc, &o, cover_cb, &c, err);
    if (!rc && !p->opts.quiet) {
        if (c.converted)
            fprintf(stderr, "quantize: %d FLOAT tensor(s) converted to the dtype the release requires (first: %s)\n", c.converted, c.first_conv);
        int unknown = 0;
        const char *first = NULL;
        for (int k = 0; k < c.n; k++) {
            const ds_rw_tensor *t = &p->tensors[c.idx[k]];
            bool scale_part = strstr(t->name, ".weight_scale") || strstr(t->name, ".weight_offset") || strstr(t->name, ".scale_bias") ||
                              strstr(t->name, ".engram.embed.scale");
            if (c.seen[c.idx[k]] || scale_part || is_vision(t->name)) continue;
            if (!unknown++) first = t->name;
        }
        if (unknown) fprintf(stderr, "quantize: WARN %d source tensor(s) are not used by the engine's plan (first: %s); written as FLOAT\n", unknown, first);
    }
    free(c.idx);
    free(c.seen);
    return rc ? -1 : 0;
}

int ds_rw_plan_build(ds_fsrc *src, const ds_rw_opts *opts, ds_rw_plan **out, ds_error *err) {
    *out = NULL;
    ds_rw_plan *p = ds_xcalloc(1, sizeof *p);
    p->opts = *opts;
    if (p->opts.int4_minmax) p->opts.ssz_steps = 1;
    if (p->opts.ssz_steps < 1 || p->opts.ssz_steps > DS_SSZ_STEPS_MAX) {
        ds_fail(err, "E_USAGE", "--ssz-steps: expected 1..%d, found %d", DS_SSZ_STEPS_MAX, p->opts.ssz_steps);
        goto fail;
    }
    if (p->opts.shard_bytes == 0) p->opts.shard_bytes = (uint64_t)4 << 30;
    if (ds_config_parse(src->config_json, "config.json", &p->cfg, err) || ds_config_validate(&p->cfg, "config.json", err)) goto fail;
    if (check_profile(p, err)) goto fail;
    const int n_mtp = p->cfg.n_mtp_layers;
    if (src->has_rotation && !src->rot.identity && src->n > 0) {
        int e = ds_fsrc_find(src, "embed.weight");
        if (e >= 0 && src->t[e].cols != p->cfg.dim) {
            ds_fail(err, "E_QUAROT_MISSING", "optional/quarot.safetensors: expected a rotation for hidden size %d, found embed.weight width %lld",
                    p->cfg.dim, (long long)src->t[e].cols);
            goto fail;
        }
    }
    for (int i = 0; i < src->n; i++) {
        const char *name = src->t[i].name;
        ds_qkind kind;
        const char *label = ds_rw_label_for(&p->opts, name, n_mtp, &kind);
        if (p->opts.float_export) { kind = DS_QK_FLOAT; label = NULL; }
        size_t nl = strlen(name);
        if (!p->opts.float_export && nl > 6 && (!strcmp(name + nl - 6, ".scale") || strstr(name, ".weight_scale"))) {
            ds_fail(err, "E_SRC_FORMAT", "%s: expected a float source without quantization scales, found a scale tensor "
                    "(an already quantized or FP8 checkpoint is not a valid --src)", name);
            goto fail;
        }
        if (plan_group(p, src, i, name, kind, label, err)) goto fail;
    }
    p->n_src_used = src->n;
    /* un-rotated draft vocabulary (TOOLS.md §3.3 fold 4; CHECKPOINT.md §11) */
    if (!p->opts.float_export && n_mtp > 0) {
        char hname[64];
        snprintf(hname, sizeof hname, "mtp.%d.head.weight", n_mtp - 1);
        const char *need[2] = {"mtp.0.embed.weight", hname}, *from[2] = {"embed.weight", "head.weight"};
        for (int k = 0; k < 2; k++) {
            if (ds_fsrc_find(src, need[k]) >= 0) continue;
            if (src->has_rotation && !src->rot.identity) {
                ds_fail(err, "E_DRAFT_VOCAB_MISSING", "%s: expected the un-rotated draft vocabulary in a rotated source, found none "
                        "(copying the rotated %s would silently break speculation)", need[k], from[k]);
                goto fail;
            }
            int si = ds_fsrc_find(src, from[k]);
            if (si < 0) {
                ds_fail(err, "E_TENSOR_MISSING", "%s: expected in the source to build %s, found none", from[k], need[k]);
                goto fail;
            }
            ds_qkind kind;
            const char *label = ds_rw_label_for(&p->opts, need[k], n_mtp, &kind);
            if (plan_group(p, src, si, need[k], kind, label, err)) goto fail;
            p->add_draft_vocab = true;
        }
    }
    /* A text-only source (e.g. a model trained without the vision tower) has no vision router bias:
     * the release requires `ffn.gate.bias_vl` on every MoE layer, and zeros route image rows exactly
     * like text rows, which is what such a model was trained to do. */
    if (!p->opts.float_export)
        for (int l = 0; l < p->cfg.n_layers + n_mtp; l++) {
            char nm[96];
            snprintf(nm, sizeof nm, "%s.%d.ffn.gate.bias_vl", l < p->cfg.n_layers ? "layers" : "mtp",
                     l < p->cfg.n_layers ? l : l - p->cfg.n_layers);
            if (ds_fsrc_find(src, nm) >= 0) continue;
            int E = l < p->cfg.n_layers ? p->cfg.n_experts : p->cfg.dspark_n_experts;
            int64_t shp[1] = {E};
            ds_rw_group *g = add_group(p, -1, DS_QK_ZERO);
            g->out[g->n_out++] = add_tensor(p, nm, DS_DT_F32, 1, shp, NULL, true);
            if (!p->opts.quiet && l == 0) fprintf(stderr, "quantize: the source has no ffn.gate.bias_vl; writing zeros (text-only model)\n");
        }
    /* [1,1] placeholders of engram_extra (CHECKPOINT.md §1: shadowed by the index) */
    if (!p->opts.float_export)
        for (int e = 0; e < p->cfg.n_engram; e++) {
            char nm[96];
            snprintf(nm, sizeof nm, "layers.%d.engram.embed.weight", p->cfg.engram_layers[e]);
            if (ds_fsrc_find(src, nm) < 0) continue;
            int64_t one[2] = {1, 1};
            for (int k = 0; k < 2; k++) {
                snprintf(nm, sizeof nm, "layers.%d.engram.embed.%s", p->cfg.engram_layers[e], k ? "scale" : "weight");
                ds_rw_group *g = add_group(p, -1, DS_QK_ZERO);
                g->out[g->n_out++] = add_tensor(p, nm, DS_DT_F32, 2, one, NULL, false);
            }
        }
    if (!p->opts.float_export && check_coverage(p, err)) goto fail;
    /* files */
    int *order = ds_xmalloc(sizeof(int) * (size_t)(p->n_groups ? p->n_groups : 1));
    for (int i = 0; i < p->n_groups; i++) order[i] = i;
    qsort_r(order, (size_t)p->n_groups, sizeof(int), cmp_group_name, p);
    if (p->opts.float_export) {
        plan_shards(p, order, p->n_groups, DS_RF_FLOAT, "model", &p->n_trunk);
    } else {
        plan_shards(p, order, p->n_groups, DS_RF_TRUNK, "quant_model_weights", &p->n_trunk);
        plan_shards(p, order, p->n_groups, DS_RF_DRAFT, "mtpq", &p->n_draft);
        int extra = -1, vision = -1;
        for (int k = 0; k < p->n_groups; k++) {
            ds_rw_group *g = &p->groups[order[k]];
            ds_rfile_kind h = group_home(p, g);
            if (h == DS_RF_EXTRA || h == DS_RF_VISION) {
                int *slot = h == DS_RF_EXTRA ? &extra : &vision;
                if (*slot < 0) {
                    add_file(p, h == DS_RF_EXTRA ? DS_ENGRAM_EXTRA : DS_VISION_FILE, h, p->n_units++);
                    *slot = p->n_files - 1;
                }
                g->unit = p->files[*slot].unit;
                for (int i = 0; i < g->n_out; i++) p->tensors[g->out[i]].file = *slot;
            } else if (h == DS_RF_ENGRAM_W) {
                /* name: layers_{L}_engram_embed.{weight,scale}.safetensors */
                const char *nm = p->tensors[g->out[0]].name;
                int L = -1;
                match_num(nm, "layers.", ".engram.embed.weight", &L);
                char rel[128];
                int unit = p->n_units++;
                snprintf(rel, sizeof rel, "engram_int8/layers_%d_engram_embed.weight.safetensors", L);
                add_file(p, rel, DS_RF_ENGRAM_W, unit);
                p->tensors[g->out[0]].file = p->n_files - 1;
                snprintf(rel, sizeof rel, "engram_int8/layers_%d_engram_embed.scale.safetensors", L);
                add_file(p, rel, DS_RF_ENGRAM_S, unit);
                p->tensors[g->out[1]].file = p->n_files - 1;
                g->unit = unit;
            }
        }
    }
    free(order);
    for (int fi = 0; fi < p->n_files; fi++)
        if (layout_file(p, fi, err)) goto fail;
    *out = p;
    return 0;
fail:
    ds_rw_plan_free(p);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */

static cJSON *shape_json(int ndim, const int64_t *shape) {
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[d]));
    return a;
}

char *ds_rw_plan_json(const ds_rw_plan *p, const ds_fsrc *src) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "v41-quant-plan/1");
    cJSON_AddStringToObject(j, "tool_version", DS_TOOL_VERSION);
    cJSON_AddStringToObject(j, "src", p->opts.src_label ? p->opts.src_label : "");
    cJSON *o = cJSON_AddObjectToObject(j, "options");
    cJSON_AddBoolToObject(o, "float_export", p->opts.float_export);
    cJSON_AddStringToObject(o, "plan", p->opts.aggressive ? "aggressive" : "default");
    cJSON_AddStringToObject(o, "int4_search", p->opts.ssz_steps == 1 ? "minmax" : "ssz");
    cJSON_AddNumberToObject(o, "ssz_steps", p->opts.ssz_steps);
    cJSON_AddBoolToObject(o, "quant_main_proj", p->opts.quant_main_proj);
    cJSON_AddBoolToObject(o, "quant_vocab", p->opts.quant_vocab);
    cJSON_AddNumberToObject(o, "shard_bytes", (double)p->opts.shard_bytes);
    cJSON_AddNumberToObject(o, "split_engram_bytes", (double)p->opts.split_engram);
    cJSON_AddBoolToObject(o, "split_only", p->opts.split_only);
    cJSON_AddBoolToObject(o, "rotation", src->has_rotation && !src->rot.identity);
    cJSON *srcs = cJSON_AddArrayToObject(j, "source_tensors");
    for (int i = 0; i < src->n; i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateString(src->t[i].name));
        cJSON_AddItemToArray(e, cJSON_CreateString(ds_dtype_name(src->t[i].dtype)));
        cJSON_AddItemToArray(e, shape_json(src->t[i].ndim, src->t[i].shape));
        cJSON_AddItemToArray(srcs, e);
    }
    cJSON *files = cJSON_AddArrayToObject(j, "files");
    for (int fi = 0; fi < p->n_files; fi++) {
        const ds_rw_file *f = &p->files[fi];
        cJSON *fj = cJSON_CreateObject();
        cJSON_AddStringToObject(fj, "path", f->relpath);
        cJSON_AddNumberToObject(fj, "size", (double)f->size);
        cJSON *ts = cJSON_AddArrayToObject(fj, "tensors");
        for (int k = 0; k < f->n_tensors; k++) {
            const ds_rw_tensor *t = &p->tensors[f->tensors[k]];
            cJSON *tj = cJSON_CreateObject();
            cJSON_AddStringToObject(tj, "name", t->name);
            cJSON_AddStringToObject(tj, "dtype", ds_dtype_name(t->dtype));
            cJSON_AddItemToObject(tj, "shape", shape_json(t->ndim, t->shape));
            if (t->label) cJSON_AddStringToObject(tj, "label", t->label);
            cJSON_AddNumberToObject(tj, "offset", (double)t->offset);
            cJSON_AddItemToArray(ts, tj);
        }
        cJSON_AddItemToArray(files, fj);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    size_t n = strlen(s);
    char *r = ds_xmalloc(n + 2);
    memcpy(r, s, n);
    r[n] = '\n';
    r[n + 1] = 0;
    free(s);
    return r;
}
