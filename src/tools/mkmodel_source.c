/* mkmodel's synthetic float source (the ds_fsrc of quant_source.h).
 *
 * The tensor list is the io module's tensor plan (io/tensor_plan.h) seen from the float side: a
 * quantized linear contributes its float `X.weight` [out, in] (BF16), an Engram table its float
 * rows (BF16), every FLOAT tensor itself with the release dtype; quantization scales and the
 * rotation file are not source tensors.  Driving the list from that plan is what keeps mkmodel,
 * the loader and the verifier in agreement about what a checkpoint contains.
 *
 * A read of rows [r0, r1) generates exactly those rows (left folds need the whole 32-row blocks
 * around them, which are generated and discarded), folds the rotation, and rounds to the stored
 * dtype, so read_f32 returns precisely what the --float-out file would hold. */
#include "tools/mkmodel.h"
#include "base/bf16.h"
#include "base/fsutil.h"
#include "io/tensor_plan.h"
#include "tools/release_writer.h"
#include "tokenizer/release_tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mk_impl {
    ds_config cfg;
    uint64_t seed;
    ds_mk_spec *spec;      /* [n] parallel to s->t */
    uint64_t *tseed;       /* [n] stream seed of each tensor */
} mk_impl;

/* Unrotated rows: the tensor's own stream, a folded norm's ones, or a norm reader's columns scaled
 * by the (original) weights of that norm. */
static void gen_unrotated(mk_impl *m, const ds_mk_spec *sp, uint64_t tseed, int64_t r0, int64_t r1, int64_t cols, float *out) {
    if (sp->folded_norm) {
        for (int64_t k = 0; k < (r1 - r0) * cols; k++) out[k] = 1.0f;
        return;
    }
    ds_mk_gen_rows(&m->cfg, sp, tseed, m->seed, r0, r1, cols, out);
    if (sp->norm_fold[0]) {
        ds_mk_spec ns;
        ds_mk_spec_for(&m->cfg, sp->norm_fold, 1, cols, false, &ns);
        ns.folded_norm = false;
        float *w = ds_xmalloc(sizeof(float) * (size_t)cols);
        ds_mk_gen_rows(&m->cfg, &ns, ds_mk_tensor_seed(m->seed, ns.seed_name), m->seed, 0, 1, cols, w);
        for (int64_t r = 0; r < r1 - r0; r++)
            for (int64_t c = 0; c < cols; c++) out[r * cols + c] *= w[c];
        free(w);
    }
}

static int gen_f32(ds_fsrc *s, int i, int64_t r0, int64_t r1, float *out) {
    mk_impl *m = s->impl;
    const ds_fsrc_tensor *t = &s->t[i];
    const ds_mk_spec *sp = &m->spec[i];
    const int64_t cols = t->cols;
    const ds_rot32 *rot = &s->rot;
    bool left = false;
    int64_t fr0 = 0, fr1 = 0; /* rows that are left-folded */
    if (!rot->identity && sp->fold == DS_MK_FOLD_LEFT) { left = true; fr0 = 0; fr1 = t->rows; }
    if (!rot->identity && sp->fold == DS_MK_FOLD_LEFT_VALUE) {
        fr0 = (int64_t)m->cfg.hc_mult * m->cfg.dim;
        fr1 = fr0 + m->cfg.dim;
        left = r1 > fr0 && r0 < fr1;
    }
    if (left) {
        int64_t b0 = r0 < fr0 ? r0 : fr0 + (r0 - fr0) / DS_ROT_BLOCK * DS_ROT_BLOCK;
        int64_t b1 = r1 > fr1 ? r1 : fr0 + (r1 - fr0 + DS_ROT_BLOCK - 1) / DS_ROT_BLOCK * DS_ROT_BLOCK;
        if (b1 > t->rows) b1 = t->rows;
        float *tmp = ds_xmalloc(sizeof(float) * (size_t)((b1 - b0) * cols));
        gen_unrotated(m, sp, m->tseed[i], b0, b1, cols, tmp);
        for (int64_t b = DS_MAX(b0, fr0); b + DS_ROT_BLOCK <= DS_MIN(b1, fr1); b += DS_ROT_BLOCK)
            ds_rot32_fold_rows32(rot, tmp + (b - b0) * cols, cols);
        memcpy(out, tmp + (r0 - b0) * cols, sizeof(float) * (size_t)((r1 - r0) * cols));
        free(tmp);
    } else {
        gen_unrotated(m, sp, m->tseed[i], r0, r1, cols, out);
        if (!rot->identity && sp->fold == DS_MK_FOLD_RIGHT)
            for (int64_t r = 0; r < r1 - r0; r++) ds_rot32_fold_row(rot, out + r * cols, out + r * cols, cols);
    }
    return 0;
}

static int mk_read_f32(ds_fsrc *s, int i, int64_t r0, int64_t r1, float *out, ds_error *err) {
    gen_f32(s, i, r0, r1, out);
    if (s->t[i].dtype == DS_DT_BF16) {
        int64_t n = (r1 - r0) * s->t[i].cols;
        for (int64_t k = 0; k < n; k++) out[k] = ds_round_bf16(out[k]);
    }
    (void)err;
    return 0;
}

static int mk_read_raw(ds_fsrc *s, int i, int64_t r0, int64_t r1, void *out, ds_error *err) {
    int64_t n = (r1 - r0) * s->t[i].cols;
    float *f = ds_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    gen_f32(s, i, r0, r1, f);
    ds_narrow_from_f32(s->t[i].dtype, f, n, out);
    free(f);
    (void)err;
    return 0;
}

/* tokenizer.json / tokenizer_config.json, and for configs that name one, the Engram token map
 * (class(v) = v mod V_c, the fixture map of MODEL.md §8). */
static int mk_write_aux(ds_fsrc *s, const char *dst, ds_error *err) {
    mk_impl *m = s->impl;
    const ds_config *c = &m->cfg;
    const char *base = ds_tokenizer_default_base();
    if (!base)
        return ds_fail(err, "E_MISSING_FILE", "tokenizer base: expected the DeepSeek tokenizer.json that scripts/install-deps.sh fetches "
                       "(or $DSFLASH_TOKENIZER_BASE), found none; mkmodel does not fake a tokenizer");
    if (ds_tokenizer_write_release(base, c->vocab_size, c->dspark_noise_id, c->image_token_id, dst, err)) return -1;
    if (c->engram_token_map_file[0]) {
        uint32_t *map = ds_xmalloc(sizeof(uint32_t) * (size_t)c->vocab_size);
        uint8_t *bytes = ds_xmalloc(4 * (size_t)c->vocab_size);
        for (int v = 0; v < c->vocab_size; v++) {
            map[v] = (uint32_t)(v % c->engram_classes);
            for (int k = 0; k < 4; k++) bytes[4 * v + k] = (uint8_t)(map[v] >> (8 * k));
        }
        char *path = ds_path_join(dst, c->engram_token_map_file);
        int rc = ds_write_file_atomic(path, bytes, 4 * (size_t)c->vocab_size, err);
        free(path); free(map); free(bytes);
        if (rc) return -1;
    }
    return 0;
}

static void mk_destroy(ds_fsrc *s) {
    mk_impl *m = s->impl;
    if (!m) return;
    free(m->spec);
    free(m->tseed);
    free(m);
}

typedef struct { ds_fsrc *s; int cap; } list_ctx;

static void push(list_ctx *L, const char *name, ds_dtype dt, int ndim, const int64_t *shape) {
    ds_fsrc *s = L->s;
    if (s->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        s->t = ds_xrealloc(s->t, sizeof *s->t * (size_t)L->cap);
    }
    ds_fsrc_tensor_init(&s->t[s->n++], name, dt, ndim, shape);
}

static int plan_cb(const ds_plan_tensor *t, void *ctx) {
    list_ctx *L = ctx;
    switch (t->part) {
    case DS_PP_FLOAT:
        push(L, t->name, t->dtype, t->ndim, t->shape);
        break;
    case DS_PP_WEIGHT: {
        int64_t sh[2] = {t->out, t->in};
        push(L, t->name, DS_DT_BF16, 2, sh);
        break;
    }
    case DS_PP_ENGRAM_CODES:
        push(L, t->name, DS_DT_BF16, t->ndim, t->shape);
        break;
    default: /* scales, offsets, scale_bias, Engram scales, rotation: produced by the writer */
        break;
    }
    return 0;
}

int ds_mk_source_new(const ds_config *cfg_in, uint64_t seed, bool smooth, bool identity_rotation, ds_fsrc **out, ds_error *err) {
    *out = NULL;
    ds_fsrc *s = ds_xcalloc(1, sizeof *s);
    mk_impl *m = ds_xcalloc(1, sizeof *m);
    s->impl = m;
    s->destroy = mk_destroy;
    s->read_f32 = mk_read_f32;
    s->read_raw = mk_read_raw;
    s->write_aux = mk_write_aux;
    m->cfg = *cfg_in;
    m->seed = seed;
    ds_config plan_cfg = *cfg_in;
    plan_cfg.format = DS_FMT_W4A8;
    ds_plan_opts po;
    ds_plan_opts_default(&po, &plan_cfg);
    po.rotation = false;
    po.draft_vocab = plan_cfg.n_mtp_layers > 0;
    list_ctx L = {s, 0};
    if (ds_plan_foreach(&plan_cfg, &po, plan_cb, &L, err) < 0) { ds_fsrc_free(s); return -1; }
    ds_fsrc_sort(s);
    m->spec = ds_xcalloc((size_t)(s->n ? s->n : 1), sizeof *m->spec);
    m->tseed = ds_xcalloc((size_t)(s->n ? s->n : 1), sizeof *m->tseed);
    for (int i = 0; i < s->n; i++) {
        ds_mk_spec_for(&m->cfg, s->t[i].name, s->t[i].rows, s->t[i].cols, smooth, &m->spec[i]);
        m->tseed[i] = ds_mk_tensor_seed(seed, m->spec[i].seed_name);
    }
    /* the rotation: a normalized Hadamard block with random row signs (MODEL.md §8) */
    s->has_rotation = true;
    if (identity_rotation) {
        ds_rot32_identity(&s->rot);
    } else {
        uint64_t st = ds_mk_tensor_seed(seed, "quarot.signs");
        int8_t sign[DS_ROT_BLOCK];
        uint64_t bits = ds_mk_mix(&st);
        for (int i = 0; i < DS_ROT_BLOCK; i++) sign[i] = (bits >> i) & 1 ? -1 : 1;
        ds_rot32_hadamard(&s->rot, sign);
    }
    /* the float model's config.json: the preset's text without quantization_config */
    char *full = ds_config_to_json(&m->cfg);
    s->config_json = ds_rw_config_text(full, true, err);
    free(full);
    if (!s->config_json) { ds_fsrc_free(s); return -1; }
    char label[128];
    snprintf(label, sizeof label, "mkmodel:seed=%llu%s", (unsigned long long)seed, smooth ? ":smooth" : "");
    s->label = ds_xstrdup(label);
    *out = s;
    return 0;
}
