/* mkmodel's synthetic source: determinism, row-range independence, the tensor set (from the io
 * tensor plan), the QuaRot fold assignment of MODEL.md §3 checked against a direct float64 product
 * by the stored block, and the structured initializations (hc base, --smooth gate-bias tiers). */
#include "check.h"
#include "base/bf16.h"
#include "io/tensor_plan.h"
#include "tools/mkmodel.h"
#include <math.h>

static ds_config tiny_cfg(void) {
    ds_config c;
    if (ds_config_preset("tiny", &c)) { fprintf(stderr, "tiny preset unavailable\n"); exit(2); }
    return c;
}

static ds_fsrc *source(uint64_t seed, bool smooth, bool identity) {
    ds_config c = tiny_cfg();
    ds_fsrc *s = NULL;
    ds_error err = {0};
    if (ds_mk_source_new(&c, seed, smooth, identity, &s, &err)) { fprintf(stderr, "source: %s\n", err.msg); exit(2); }
    return s;
}

static float *read_all(ds_fsrc *s, const char *name, int64_t *rows, int64_t *cols) {
    int i = ds_fsrc_find(s, name);
    if (i < 0) return NULL;
    *rows = s->t[i].rows;
    *cols = s->t[i].cols;
    float *f = ds_xmalloc(sizeof(float) * (size_t)(*rows * *cols));
    ds_error err;
    s->read_f32(s, i, 0, *rows, f, &err);
    return f;
}

TEST(tensor_set_follows_the_io_plan) {
    ds_fsrc *s = source(1, false, false);
    ds_config c = tiny_cfg();
    ds_plan p;
    ds_error err = {0};
    CHECK(ds_plan_build(&c, NULL, &p, &err) == 0, "%s", err.msg);
    int want = 0, found = 0;
    for (int64_t k = 0; k < p.n; k++) {
        const ds_plan_tensor *t = &p.t[k];
        if (t->part != DS_PP_FLOAT && t->part != DS_PP_WEIGHT && t->part != DS_PP_ENGRAM_CODES) continue;
        want++;
        int i = ds_fsrc_find(s, t->name);
        CHECK(i >= 0, "%s missing from the source", t->name);
        if (i < 0) continue;
        found++;
        if (t->part == DS_PP_WEIGHT) {
            CHECK(s->t[i].dtype == DS_DT_BF16 && s->t[i].rows == t->out && s->t[i].cols == t->in, "%s: float [out, in]", t->name);
        } else if (t->part == DS_PP_FLOAT) {
            CHECK(s->t[i].dtype == t->dtype && s->t[i].ndim == t->ndim && s->t[i].shape[0] == t->shape[0], "%s: dtype/shape", t->name);
        }
    }
    CHECK(found == want && s->n == want, "source has %d tensors, plan float view %d", s->n, want);
    CHECK(ds_fsrc_find(s, "mtp.0.embed.weight") >= 0 && ds_fsrc_find(s, "mtp.2.head.weight") >= 0, "draft vocabulary present");
    ds_plan_free(&p);
    ds_fsrc_free(s);
}

TEST(deterministic_and_independent_of_row_ranges) {
    ds_fsrc *a = source(7, false, false), *b = source(7, false, false), *c = source(8, false, false);
    const char *names[] = {"embed.weight", "layers.3.attn.wo_b.weight", "layers.1.engram.wkv.weight", "layers.2.hc_ffn_fn",
                           "layers.5.ffn.experts.3.w2.weight", "layers.1.engram.embed.weight"};
    for (size_t n = 0; n < DS_ARRAY_LEN(names); n++) {
        int64_t rows, cols;
        float *fa = read_all(a, names[n], &rows, &cols), *fb = read_all(b, names[n], &rows, &cols);
        float *fc = read_all(c, names[n], &rows, &cols);
        CHECK(fa && fb && fc, "%s readable", names[n]);
        if (!fa || !fb || !fc) continue;
        CHECK(!memcmp(fa, fb, sizeof(float) * (size_t)(rows * cols)), "%s: same seed, same values", names[n]);
        CHECK(memcmp(fa, fc, sizeof(float) * (size_t)(rows * cols)) != 0, "%s: another seed, other values", names[n]);
        /* odd-sized chunks that cut through 32-row fold blocks give the same rows */
        int i = ds_fsrc_find(a, names[n]);
        float *part = ds_xmalloc(sizeof(float) * (size_t)(7 * cols));
        int bad = 0;
        ds_error err;
        for (int64_t r0 = 0; r0 < rows; r0 += 7) {
            int64_t r1 = r0 + 7 < rows ? r0 + 7 : rows;
            a->read_f32(a, i, r0, r1, part, &err);
            bad += memcmp(part, fa + r0 * cols, sizeof(float) * (size_t)((r1 - r0) * cols)) != 0;
        }
        CHECK(bad == 0, "%s: %d chunks differ from the whole read", names[n], bad);
        /* raw bytes are the stored dtype of the same values */
        void *raw = ds_xmalloc((size_t)a->t[i].nbytes);
        a->read_raw(a, i, 0, rows, raw, &err);
        float *w = ds_xmalloc(sizeof(float) * (size_t)(rows * cols));
        ds_widen_to_f32(a->t[i].dtype, raw, rows * cols, w);
        CHECK(!memcmp(w, fa, sizeof(float) * (size_t)(rows * cols)), "%s: raw and f32 reads agree", names[n]);
        free(raw); free(w); free(part); free(fa); free(fb); free(fc);
    }
    ds_fsrc_free(a); ds_fsrc_free(b); ds_fsrc_free(c);
}

/* Rotated value versus the unrotated stream folded by a direct product with the stored block. */
static int fold_mismatches(ds_fsrc *rot, const char *name, int mode /* 1 right, 2 left, 3 left value rows */) {
    int i = ds_fsrc_find(rot, name);
    ds_config cfg = tiny_cfg();
    const ds_fsrc_tensor *t = &rot->t[i];
    ds_mk_spec sp;
    ds_mk_spec_for(&cfg, name, t->rows, t->cols, false, &sp);
    float *u = ds_xmalloc(sizeof(float) * (size_t)(t->rows * t->cols));
    ds_mk_gen_rows(&cfg, &sp, ds_mk_tensor_seed(11, sp.seed_name), 11, 0, t->rows, t->cols, u);
    if (sp.norm_fold[0]) { /* a reader of a residual norm: W·diag(w) before the rotation */
        ds_mk_spec ns;
        ds_mk_spec_for(&cfg, sp.norm_fold, 1, t->cols, false, &ns);
        float *w = ds_xmalloc(sizeof(float) * (size_t)t->cols);
        ds_mk_gen_rows(&cfg, &ns, ds_mk_tensor_seed(11, ns.seed_name), 11, 0, 1, t->cols, w);
        for (int64_t a = 0; a < t->rows; a++)
            for (int64_t c = 0; c < t->cols; c++) u[a * t->cols + c] *= w[c];
        free(w);
    }
    int64_t rows, cols;
    float *r = read_all(rot, name, &rows, &cols);
    const float *B = rot->rot.B;
    int bad = 0;
    int64_t v0 = (int64_t)cfg.hc_mult * cfg.dim, v1 = v0 + cfg.dim;
    for (int64_t a = 0; a < rows; a++)
        for (int64_t c = 0; c < cols; c++) {
            double s = 0;
            if (mode == 1) {
                int64_t b = c / 32 * 32;
                for (int j = 0; j < 32; j++) s += (double)u[a * cols + b + j] * B[j * 32 + (c - b)];
            } else if (mode == 2 || (mode == 3 && a >= v0 && a < v1)) {
                int64_t b = a / 32 * 32;
                for (int j = 0; j < 32; j++) s += (double)B[j * 32 + (a - b)] * u[(b + j) * cols + c];
            } else {
                s = u[a * cols + c];
            }
            float want = t->dtype == DS_DT_BF16 ? ds_round_bf16((float)s) : (float)s;
            float got = r[a * cols + c];
            float tol = t->dtype == DS_DT_BF16 ? fabsf(want) * (1.0f / 128) : fabsf(want) * 1e-6f;
            if (!(fabsf(got - want) <= tol + 1e-30f)) bad++;
        }
    free(u); free(r);
    return bad;
}

TEST(quarot_folds_follow_model_md_section_3) {
    ds_fsrc *rot = source(11, false, false), *id = source(11, false, true);
    CHECK(!rot->rot.identity && id->rot.identity, "rotation kinds");
    CHECK(fold_mismatches(rot, "head.weight", 1) == 0, "head right-folded");
    CHECK(fold_mismatches(rot, "layers.2.attn.compressor.wkv.weight", 1) == 0, "ratio-2 compressor (F32) right-folded");
    CHECK(fold_mismatches(rot, "layers.0.hc_attn_fn", 1) == 0, "hc_attn_fn right-folded per copy");
    CHECK(fold_mismatches(rot, "layers.1.ffn.experts.2.w1.weight", 1) == 0, "routed w1 right-folded");
    CHECK(fold_mismatches(rot, "mtp.0.main_proj.weight", 1) == 0, "draft main_proj right-folded per target copy");
    CHECK(fold_mismatches(rot, "layers.3.attn.wo_b.weight", 2) == 0, "wo_b left-folded");
    CHECK(fold_mismatches(rot, "layers.4.ffn.shared_experts.w2.weight", 2) == 0, "shared w2 left-folded");
    CHECK(fold_mismatches(rot, "layers.2.engram.wkv.weight", 3) == 0, "Engram value rows left-folded, key rows not");
    /* not rotated: identical in both sources */
    const char *same[] = {"mtp.1.attn.wq_a.weight", "mtp.0.hc_attn_fn", "layers.0.attn.wq_b.weight", "layers.0.attn.wo_a.weight",
                          "layers.1.engram.q_weight", "layers.2.attn.indexer.wk.weight", "mtp.0.embed.weight", "mtp.2.head.weight",
                          "layers.1.engram.embed.weight"};
    for (size_t k = 0; k < DS_ARRAY_LEN(same); k++) {
        int64_t rows, cols;
        float *a = read_all(rot, same[k], &rows, &cols), *b = read_all(id, same[k], &rows, &cols);
        CHECK(a && b && !memcmp(a, b, sizeof(float) * (size_t)(rows * cols)), "%s is not rotated", same[k]);
        free(a); free(b);
    }
    /* the draft vocabulary is the un-rotated trunk vocabulary (bf16 of the same stream) */
    int64_t rows, cols;
    float *e_id = read_all(id, "embed.weight", &rows, &cols), *e_mtp = read_all(rot, "mtp.0.embed.weight", &rows, &cols);
    float *e_rot = read_all(rot, "embed.weight", &rows, &cols);
    CHECK(!memcmp(e_id, e_mtp, sizeof(float) * (size_t)(rows * cols)), "mtp.0.embed = un-rotated embed");
    CHECK(memcmp(e_rot, e_mtp, sizeof(float) * (size_t)(rows * cols)) != 0, "trunk embed is rotated");
    free(e_id); free(e_mtp); free(e_rot);
    ds_fsrc_free(rot); ds_fsrc_free(id);
}

TEST(residual_norms_are_folded_into_their_readers) {
    ds_fsrc *s = source(5, false, false);
    ds_config c = tiny_cfg();
    const char *ones[] = {"norm.weight", "layers.0.attn_norm.weight", "layers.7.ffn_norm.weight"};
    for (size_t k = 0; k < DS_ARRAY_LEN(ones); k++) {
        int64_t rows, cols;
        float *w = read_all(s, ones[k], &rows, &cols);
        int bad = 0;
        for (int64_t i = 0; w && i < cols; i++) bad += w[i] != 1.0f;
        CHECK(w && bad == 0, "%s stored as ones (%d values differ)", ones[k], bad);
        free(w);
    }
    ds_mk_spec sp;
    const char *readers[][2] = {{"head.weight", "norm.weight"}, {"layers.2.attn.wq_a.weight", "layers.2.attn_norm.weight"},
                                {"layers.2.attn.compressor.wgate.weight", "layers.2.attn_norm.weight"},
                                {"layers.3.ffn.gate.weight", "layers.3.ffn_norm.weight"},
                                {"layers.3.ffn.experts.1.w3.weight", "layers.3.ffn_norm.weight"},
                                {"layers.3.ffn.shared_experts.w1.weight", "layers.3.ffn_norm.weight"}};
    for (size_t k = 0; k < DS_ARRAY_LEN(readers); k++) {
        ds_mk_spec_for(&c, readers[k][0], 2, 2, false, &sp);
        CHECK(!strcmp(sp.norm_fold, readers[k][1]), "%s folds %s, found '%s'", readers[k][0], readers[k][1], sp.norm_fold);
    }
    const char *not_readers[] = {"layers.3.ffn.experts.1.w2.weight", "layers.3.attn.wo_b.weight", "mtp.0.attn.wq_a.weight",
                                 "mtp.2.head.weight", "layers.1.engram.wkv.weight"};
    for (size_t k = 0; k < DS_ARRAY_LEN(not_readers); k++) {
        ds_mk_spec_for(&c, not_readers[k], 2, 2, false, &sp);
        CHECK(!sp.norm_fold[0], "%s must not fold a norm (found %s)", not_readers[k], sp.norm_fold);
    }
    ds_mk_spec_for(&c, "mtp.0.attn_norm.weight", 1, 128, false, &sp);
    CHECK(!sp.folded_norm, "draft norms keep their weights (the draft is not rotated)");
    ds_fsrc_free(s);
}

TEST(structured_initializations) {
    ds_fsrc *s = source(3, true, false);
    ds_config c = tiny_cfg();
    int64_t rows, cols;
    float *base = read_all(s, "layers.0.hc_attn_base", &rows, &cols);
    CHECK(base && cols == (2 + c.hc_mult) * c.hc_mult, "hc base shape");
    for (int k = 0; base && k < c.hc_mult; k++) {
        double pre = 1.0 / (1.0 + exp(-(double)base[k]));
        CHECK(fabs(pre - 1.0 / c.hc_mult) < 0.1, "pre[%d] = %g near 1/HC", k, pre);
    }
    free(base);
    for (int l = 0; l < c.n_layers + c.n_mtp_layers; l++) {
        char nb[64], nv[64];
        snprintf(nb, sizeof nb, l < c.n_layers ? "layers.%d.ffn.gate.bias" : "mtp.%d.ffn.gate.bias", l < c.n_layers ? l : l - c.n_layers);
        snprintf(nv, sizeof nv, "%s_vl", nb);
        float *b = read_all(s, nb, &rows, &cols), *v = read_all(s, nv, &rows, &cols);
        CHECK(b && v, "%s present", nb);
        if (!b || !v) continue;
        int seen[512] = {0}, ok = 1;
        for (int64_t e = 0; e < cols; e++) {
            int t = (int)b[e];
            ok &= b[e] == (float)t && t >= 0 && t < cols && !seen[t];
            if (t >= 0 && t < 512) seen[t] = 1;
        }
        CHECK(ok, "%s is a permutation of the tiers 0..E-1", nb);
        CHECK(!memcmp(b, v, sizeof(float) * (size_t)cols), "%s: bias_vl uses the same tiers", nb);
        free(b); free(v);
    }
    ds_fsrc_free(s);
}

RUN_ALL()
