/* The value- and plan-level checks of the loader checklist (CHECKPOINT.md §15 items 7, 13–18,
 * 20, 21, 23, 25, 27).
 *
 * Everything is driven by the tensor plan: each planned tensor is looked up (index first, then
 * auxiliary files, aliases), then its dtype, shape and label are compared with the plan, and its
 * values are spot-checked where the specification asks (zero offsets, power-of-two Engram scales,
 * the scale_bias relation at level full).  The plan knows nothing about a particular checkpoint, so
 * detection of optional draft formats (a FLOAT draft linear stored as W8A8 by an mtpq option) is
 * done here from the tensors present, as §11 requires.  Value checks read through the mapping and
 * touch only the bytes they need: basic level reads W8A8 offsets, the first expert's offsets and 64
 * Engram rows per table, so start-up stays fast even for the 290 GB release. */
#define _GNU_SOURCE
#include "io/checkpoint_internal.h"
#include "io/io_util.h"
#include "base/fsutil.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Rotation (checks 17, 18; MODEL.md §3)                                                     */

int ck_check_rotation(ck_state *s, const char *rel, ds_error *err) {
    ds_checkpoint *c = s->c;
    char *full = ds_path_join(c->dir, rel);
    int rc = -1;
    char s1[64], s2[64];
    if (!ds_file_exists(full)) {
        ds_io_fail(err, "E_QUAROT_MISSING", full, NULL, "expected the rotation file of the W4A8 release (%s), found no such file", rel);
        goto out;
    }
    if (ds_st_open(full, &s->rot_file, err)) goto out;
    const ds_tensor *t = ds_st_find(s->rot_file, "global_rotation");
    if (!t) {
        ds_io_fail(err, "E_QUAROT_MISSING", full, "global_rotation", "expected the tensor in the rotation file, found %d other tensors", s->rot_file->n_tensors);
        goto out;
    }
    int64_t D = c->cfg.dim;
    if (t->dtype != DS_DT_F32) {
        ds_io_fail(err, "E_DTYPE_MISMATCH", full, "global_rotation", "expected F32, found %s", ds_dtype_name(t->dtype));
        goto out;
    }
    if (t->ndim != 2 || t->shape[0] != D || t->shape[1] != D) {
        ds_io_fail(err, "E_SHAPE_MISMATCH", full, "global_rotation", "expected [%" PRId64 ", %" PRId64 "], found %s", D, D,
                   ds_io_shape_str(s1, sizeof s1, t->ndim, t->shape));
        goto out;
    }
    const float *R = t->data;
    float B[32 * 32];
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) B[i * 32 + j] = R[(int64_t)i * D + j];
    for (int64_t i = 0; i < D; i++)
        for (int64_t j = 0; j < D; j++) {
            float v = R[i * D + j];
            bool diag = i / 32 == j / 32;
            float ref = diag ? B[(i % 32) * 32 + (j % 32)] : 0.0f;
            if (!(fabsf(v - ref) <= 1e-6f)) {
                ds_io_fail(err, "E_QUAROT_NOT_BLOCK_DIAGONAL", full, "global_rotation",
                           "expected %s (|difference| <= 1e-6), found R[%" PRId64 "][%" PRId64 "] = %.9g%s", diag ? "every diagonal 32x32 block equal to the first" : "0 outside the diagonal blocks",
                           i, j, (double)v, diag ? (snprintf(s2, sizeof s2, " where B has %.9g", (double)ref), s2) : "");
                goto out;
            }
        }
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) {
            double dot = 0;
            for (int k = 0; k < 32; k++) dot += (double)B[k * 32 + i] * B[k * 32 + j];
            double want = i == j ? 1.0 : 0.0;
            if (!(fabs(dot - want) <= 1e-4)) {
                ds_io_fail(err, "E_QUAROT_NOT_ORTHOGONAL", full, "global_rotation", "expected B^T B = I within 1e-4, found element [%d][%d] = %.9g", i, j, dot);
                goto out;
            }
        }
    memcpy(c->rot_block, B, sizeof B);
    c->has_rotation = true;
    c->rotation_path = ds_xstrdup(full);
    rc = 0;
out:
    free(full);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* Plan-driven checks                                                                        */

typedef struct pc {
    ck_state *s;
    ds_error *err;
    int L;
    bool vocab_missing;
    char vocab_missing_name[96];
} pc;

static bool is_draft(const ds_plan_tensor *t, int L) { return t->layer >= L || t->file == DS_PF_DRAFT || t->file == DS_PF_DRAFT_VOCAB; }

static const char *expected_home(const ck_state *s, const ds_plan_tensor *t, char *buf, size_t n) {
    switch (t->file) {
    case DS_PF_ENGRAM_EXTRA: snprintf(buf, n, "%s/engram_extra.safetensors", s->c->dir); break;
    case DS_PF_DRAFT: snprintf(buf, n, "%s/mtpq_manifest.json", s->c->dir); break;
    default: snprintf(buf, n, "%s", s->index_path);
    }
    return buf;
}

static void mask_str(uint32_t mask, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int d = 0; d < DS_DT_COUNT; d++)
        if (mask & DS_DT_BIT(d)) k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? " or " : "", ds_dtype_name((ds_dtype)d));
}

static bool f32_is_zero_all(const ds_tensor *x, int64_t *bad_at, float *bad_v) {
    const float *v = x->data;
    int64_t n = ds_tensor_numel(x);
    for (int64_t i = 0; i < n; i++)
        if (!(v[i] == 0.0f)) { *bad_at = i; *bad_v = v[i]; return false; }
    return true;
}

/* A positive finite exact power of two (normal or subnormal). */
static bool pow2(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (u >> 31) return false;
    uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
    if (e == 0xff) return false;
    if (e) return m == 0;
    return m && !(m & (m - 1));
}

static int check_offsets(pc *p, const ds_plan_tensor *t, const ds_tensor *x) {
    int64_t at;
    float v;
    if (f32_is_zero_all(x, &at, &v)) return 0;
    return ds_io_fail(p->err, "E_OFFSET_NONZERO", x->file->path, x->name,
                      "expected all zeros (symmetric quantization; asymmetric schemes are not implemented), found %.9g at row %" PRId64, (double)v, at);
}

static int check_engram_scale(pc *p, const ds_tensor *x) {
    const ck_state *s = p->s;
    int64_t rows = x->shape[0], G = x->shape[1];
    const float *v = x->data;
    int64_t n = s->o->full ? rows : DS_MIN(rows, (int64_t)(s->o->engram_samples > 1 ? s->o->engram_samples : 2));
    for (int64_t k = 0; k < n; k++) {
        int64_t r = s->o->full || n >= rows ? k : (n > 1 ? k * (rows - 1) / (n - 1) : 0);
        for (int64_t g = 0; g < G; g++) {
            float f = v[r * G + g];
            if (!pow2(f))
                return ds_io_fail(p->err, "E_ENGRAM_SCALE", x->file->path, x->name, "expected positive exact powers of two, found %.9g at row %" PRId64 " group %" PRId64,
                                  (double)f, r, g);
        }
    }
    return 0;
}

/* Check 27 (level full, warning): scale_bias = 8·s_w[o]·Σ_{i in chunk} W[o][i], either sign. */
static void check_scale_bias(pc *p, const ds_plan_tensor *t, const ds_tensor *sb) {
    ck_state *s = p->s;
    char wn[96], sn[96];
    snprintf(wn, sizeof wn, "%s.weight", t->linear);
    snprintf(sn, sizeof sn, "%s.weight_scale", t->linear);
    const ds_tensor *w = ds_ckpt_tensor(s->c, wn), *sc = ds_ckpt_tensor(s->c, sn);
    if (!w || !sc) return;
    int64_t out = t->out, in = t->in, C = sb->shape[1];
    if (C < 1 || in % C) return;
    const int8_t *q = w->data;
    const float *sv = sc->data, *bv = sb->data;
    for (int64_t o = 0; o < out; o++) {
        const int8_t *row = q + (o / 2) * in;
        for (int64_t ch = 0; ch < C; ch++) {
            int64_t sum = 0;
            for (int64_t i = ch * (in / C); i < (ch + 1) * (in / C); i++) {
                int nib = (o & 1) ? ((uint8_t)row[i] >> 4) & 0xf : (uint8_t)row[i] & 0xf;
                sum += nib >= 8 ? nib - 16 : nib;
            }
            double want = 8.0 * (double)sv[o] * (double)sum, got = bv[o * C + ch], tol = 1e-3 * fabs(want) + 1e-12;
            if (fabs(got - want) <= tol || fabs(got + want) <= tol) continue;
            if (s->n_scale_bias_bad++ < 8)
                ck_warn(s->c, "W_SCALE_BIAS: %s: %s: expected 8*s_w*sum(q) = %.9g (or its negation) at row %" PRId64 " chunk %" PRId64 ", found %.9g", sb->file->path,
                        sb->name, want, o, ch, got);
            return;
        }
    }
}

static int check_label(pc *p, const ds_plan_tensor *t, const ds_tensor *x, ds_label want) {
    ck_state *s = p->s;
    const char *dl = ck_desc_label(s, x->name);
    if (!dl && (t->part == DS_PP_SCALE || t->part == DS_PP_OFFSET || t->part == DS_PP_SCALE_BIAS)) {
        char wn[96];
        snprintf(wn, sizeof wn, "%s.weight", t->linear);
        dl = ck_desc_label(s, wn);
    }
    bool draft = is_draft(t, p->L);
    bool by_name = t->file == DS_PF_ENGRAM_TABLE || t->file == DS_PF_ENGRAM_EXTRA;
    if (!dl) {
        if (by_name || (want == DS_LABEL_FLOAT && ds_dtype_is_float(x->dtype))) return 0;
        if (draft) {
            ck_warn(s->c, "W_LABEL_MISSING: %s: %s: expected a label (detected %s), found none", s->desc_path, x->name, ds_label_name(want));
            return 0;
        }
        return ds_io_fail(p->err, "E_LABEL_MISSING", s->desc_path, x->name, "expected a quantization label (unlabelled tensors must be float), found none for a %s tensor",
                          ds_dtype_name(x->dtype));
    }
    ds_label l = ds_label_parse(dl);
    if (l == DS_LABEL_OTHER)
        return ds_io_fail(p->err, "E_LABEL_UNSUPPORTED", s->desc_path, x->name, "expected W4A8_DYNAMIC, W8A8_DYNAMIC or FLOAT, found \"%s\"", dl);
    if (by_name || l == want) return 0;
    if (draft) {
        ck_warn(s->c, "W_LABEL_MISMATCH: %s: %s: expected %s (detected format, which takes precedence for draft tensors), found %s", s->desc_path, x->name,
                ds_label_name(want), dl);
        return 0;
    }
    return ds_io_fail(p->err, "E_LABEL_MISMATCH", s->desc_path, x->name, "expected %s (the format of this tensor in the W4A8 release), found %s", ds_label_name(want), dl);
}

static int check_dtype_shape(pc *p, const ds_plan_tensor *t, const ds_tensor *x, uint32_t mask, int ndim, const int64_t *shape) {
    char s1[96], s2[96];
    bool table = t->part == DS_PP_ENGRAM_CODES || t->part == DS_PP_ENGRAM_SCALE;
    if (!(mask & DS_DT_BIT(x->dtype))) {
        mask_str(mask, s1, sizeof s1);
        return ds_io_fail(p->err, t->part == DS_PP_ENGRAM_SCALE ? "E_ENGRAM_ROWS" : "E_DTYPE_MISMATCH", x->file->path, x->name, "expected %s, found %s", s1,
                          ds_dtype_name(x->dtype));
    }
    bool ok = x->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = x->shape[i] == shape[i];
    if (!ok) {
        ds_io_shape_str(s1, sizeof s1, ndim, shape);
        ds_io_shape_str(s2, sizeof s2, x->ndim, x->shape);
        if (table)
            return ds_io_fail(p->err, "E_ENGRAM_ROWS", x->file->path, x->name, "expected %s (engram_num_embeddings rows), found %s", s1, s2);
        return ds_io_fail(p->err, "E_SHAPE_MISMATCH", x->file->path, x->name, "expected %s%s, found %s", s1,
                          t->label == DS_LABEL_W4A8 && t->part == DS_PP_WEIGHT ? " (int4 packed along the output dimension)" : "", s2);
    }
    return 0;
}

/* A draft FLOAT linear stored as W8A8 by an mtpq option (§11). */
static int check_flex_w8a8(pc *p, const ds_plan_tensor *t, int idx) {
    ck_state *s = p->s;
    ds_checkpoint *c = s->c;
    static const char *sfx[3] = {".weight", ".weight_scale", ".weight_offset"};
    for (int k = 0; k < 3; k++) {
        char n[112];
        snprintf(n, sizeof n, "%s%s", t->linear, sfx[k]);
        int j = ck_find(c, n);
        if (j < 0) {
            char home[600];
            return ds_io_fail(p->err, "E_TENSOR_MISSING", expected_home(s, t, home, sizeof home), n,
                              "expected the W8A8 tensor set (weight, weight_scale, weight_offset) because weight_scale is present, found it absent");
        }
        const ds_tensor *x = c->by_name[j];
        int64_t shape[2] = {t->out, k ? 1 : t->in};
        ds_plan_tensor u = *t;
        u.label = DS_LABEL_W8A8;
        u.part = k == 0 ? DS_PP_WEIGHT : k == 1 ? DS_PP_SCALE : DS_PP_OFFSET;
        if (check_dtype_shape(p, &u, x, DS_DT_BIT(k ? DS_DT_F32 : DS_DT_I8), 2, shape)) return -1;
        if (check_label(p, &u, x, DS_LABEL_W8A8)) return -1;
        if (k == 2 && check_offsets(p, &u, x)) return -1;
        c->detected[j] = DS_LABEL_W8A8;
    }
    (void)idx;
    return 0;
}

static int plan_cb(const ds_plan_tensor *t, void *ctx) {
    pc *p = ctx;
    ck_state *s = p->s;
    ds_checkpoint *c = s->c;
    int idx = ck_find(c, t->name);
    if (idx < 0 && t->alias[0]) idx = ck_find(c, t->alias);
    if (idx < 0) {
        if (t->file == DS_PF_DRAFT_VOCAB) {
            if (!p->vocab_missing) snprintf(p->vocab_missing_name, sizeof p->vocab_missing_name, "%s", t->name);
            p->vocab_missing = true;
            return 0;
        }
        char home[600];
        ds_io_fail(p->err, "E_TENSOR_MISSING", expected_home(s, t, home, sizeof home), t->name,
                   "expected the tensor (%s, required by the config), found it neither in the index nor in the auxiliary files", ds_plan_file_name(t->file));
        return 1;
    }
    const ds_tensor *x = c->by_name[idx];
    if (t->flex_w8a8 && t->linear[0]) {
        char sn[112];
        snprintf(sn, sizeof sn, "%s.weight_scale", t->linear);
        if (ck_find(c, sn) >= 0) return check_flex_w8a8(p, t, idx) ? 1 : 0;
    }
    if (check_dtype_shape(p, t, x, t->dtype_mask, t->ndim, t->shape)) return 1;
    if (check_label(p, t, x, t->label)) return 1;
    if (t->part == DS_PP_OFFSET && (t->label == DS_LABEL_W8A8 || t->expert <= 0 || s->o->full) && check_offsets(p, t, x)) return 1;
    if (t->part == DS_PP_ENGRAM_SCALE && check_engram_scale(p, x)) return 1;
    if (t->part == DS_PP_SCALE_BIAS && s->o->full) check_scale_bias(p, t, x);
    c->detected[idx] = t->label;
    return 0;
}

int ck_check_plan(ck_state *s, ds_error *err) {
    ds_checkpoint *c = s->c;
    ds_plan_opts po;
    ds_plan_opts_default(&po, &c->cfg);
    po.engram = s->need_engram;
    po.draft = s->need_draft;
    po.draft_vocab = s->need_draft && c->has_rotation;
    po.rotation = false;
    pc p = {.s = s, .err = err, .L = c->cfg.n_layers};
    int rc = ds_plan_foreach(&c->cfg, &po, plan_cb, &p, err);
    if (rc) return -1;
    if (p.vocab_missing) {
        if (!s->o->draft_optional)
            return ds_io_fail(err, "E_DRAFT_VOCAB_MISSING", s->index_path, p.vocab_missing_name,
                              "expected the unrotated draft vocabulary in a rotated release (the rotated trunk embed/head would silently collapse acceptance), found it absent");
        snprintf(c->draft_disabled_reason, sizeof c->draft_disabled_reason, "draft vocabulary missing (%s)", p.vocab_missing_name);
        ds_log(DS_LOG_ERROR, "E_DRAFT_VOCAB_MISSING: %s: %s: expected the unrotated draft vocabulary in a rotated release, found it absent; speculation disabled",
               s->index_path, p.vocab_missing_name);
        c->draft_enabled = false;
    }
    if (s->n_scale_bias_bad > 8)
        ck_warn(c, "W_SCALE_BIAS: %s: expected the scale_bias relation on every W4A8 linear, found %d mismatching tensors (first 8 listed)", c->dir, s->n_scale_bias_bad);
    /* Tensors outside the plan keep a label only from the description (FLOAT if float). */
    for (int i = 0; i < c->n_names; i++)
        if (c->detected[i] == DS_LABEL_NONE) {
            const char *dl = ck_desc_label(s, c->by_name[i]->name);
            c->detected[i] = dl ? ds_label_parse(dl) : ds_dtype_is_float(c->by_name[i]->dtype) ? DS_LABEL_FLOAT : DS_LABEL_NONE;
        }
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Check 23 in its map-file form: V little-endian u32 classes, first-seen order, V_c classes.    */

int ck_check_token_map(ck_state *s, ds_error *err) {
    ds_checkpoint *c = s->c;
    if (!c->cfg.engram_token_map_file[0]) return 0; /* computed from the tokenizer: extra_check */
    char *p = ds_path_join(c->dir, c->cfg.engram_token_map_file), *data = NULL;
    size_t len = 0;
    int rc = -1;
    ds_error e;
    if (ds_read_file(p, &data, &len, &e)) { ds_io_fail(err, "E_IO", p, NULL, "expected a readable token map, found %s", e.msg); goto out; }
    int64_t V = c->cfg.vocab_size;
    if ((int64_t)len != V * 4) {
        ds_io_fail(err, "E_TOKEN_MAP_SIZE", p, NULL, "expected %" PRId64 " bytes (vocab_size %" PRId64 " little-endian u32 classes), found %zu", V * 4, V, len);
        goto out;
    }
    const uint8_t *b = (const uint8_t *)data;
    int64_t next = 0;
    for (int64_t v = 0; v < V; v++) {
        uint32_t k = (uint32_t)b[4 * v] | (uint32_t)b[4 * v + 1] << 8 | (uint32_t)b[4 * v + 2] << 16 | (uint32_t)b[4 * v + 3] << 24;
        if (k > next) {
            ds_io_fail(err, "E_TOKEN_MAP_SIZE", p, NULL, "expected classes in first-seen order (id %" PRId64 " may use classes 0..%" PRId64 "), found class %u", v, next, k);
            goto out;
        }
        if (k == next) next++;
    }
    if (next != c->cfg.engram_classes) {
        ds_io_fail(err, "E_TOKEN_MAP_SIZE", p, NULL, "expected engram_compressed_vocab_size = %d classes, found %" PRId64, c->cfg.engram_classes, next);
        goto out;
    }
    rc = 0;
out:
    free(p);
    free(data);
    return rc;
}
