/* Kernels of the official FP8/MXFP4 formats (src/kernels/official.c, kern_official_*.c) and the
 * number-format encoders of `mkmodel --format official`.
 *
 * Independent oracles: MXFP4 results are checked against a float64 evaluation written here from
 * the CHECKPOINT.md §14 decode table (weights decoded to values, products summed exactly in long
 * double per block), not from the kernels' integer formulation; every ISA path (AVX2, AVX-512 VNNI
 * natively where the CPU has it, and the AVX-512 source under SIMDe emulation on every host) must
 * equal the scalar path bit for bit.  FP8 linears must equal the BF16 linear of the matrix decoded
 * here, in both tiers, bit for bit.  The encoders are checked against the tie rules the spec lists. */
#include "check.h"
#include "test_kernels_util.h"
#include "kernels/kern_official.h"
#include "tools/mkmodel_official.h"
#include "tools/quant_fp8.h"
#include "base/hugemem.h"
#define DS_AVX512_EMULATE 1
#include "kernels/kern_official_avx512.c"
#include "kernels/kern_official_fp8_avx512.c"
#include <stdio.h>

/* A random MXFP4 linear: codes [out][in/2], scales [out][in/32] in a realistic exponent range. */
typedef struct { ds_linear L; uint8_t *codes, *sc; } mx_lin;

static mx_lin mx_make(int out, int in, int emin, int emax) {
    mx_lin m;
    memset(&m, 0, sizeof m);
    m.codes = malloc((size_t)out * in / 2);
    m.sc = malloc((size_t)out * in / 32);
    for (size_t i = 0; i < (size_t)out * in / 2; i++) m.codes[i] = (uint8_t)tk_rand();
    for (size_t i = 0; i < (size_t)out * in / 32; i++) m.sc[i] = (uint8_t)tk_range(127 + emin, 127 + emax);
    m.L = (ds_linear){.fmt = DS_LIN_MXFP4, .out = out, .in = in, .w = m.codes, .w_e8m0 = m.sc};
    return m;
}

/* The forward through each panel route (scalar, emulated AVX-512, AVX-512 and AVX2 natively where
 * the CPU has them), panels made here; panels holding a row of wide spread fall back to the scalar
 * row function.
 * Each must give `want` bit for bit; returns the number of routes run. */
static int mx_panels_agree(const mx_lin *m, const int8_t *q, const float *s, int n, const float *want, float *got) {
    ds_mx_panels_fn fns[4] = {ds_mx_panels_ref, ds_mx_panels_avx512_emu, ds_kernels_available("avx512-vnni") ? ds_mx_panels_avx512 : NULL,
                              ds_kernels_available("avx2") ? ds_mx_panels_avx2 : NULL};
    ds_linear L = m->L;
    size_t bytes = 0;
    ds_mxpack *P = ds_mx_pack(&L, &bytes);
    CHECK(P && bytes >= (size_t)P->npanels * P->nb * (256 + 16), "pack of [%d, %d]", L.out, L.in);
    L.packed = P;
    L.packed_kind = DS_PACK_KIND_MX;
    int runs = 0;
    for (int f = 0; f < 4; f++) {
        if (!fns[f]) continue;
        tk_poison(got, (size_t)n * L.out);
        ds_mx_forward_q_with(&L, q, s, n, got, ds_mx_row_ref, fns[f]);
        CHECK(!memcmp(want, got, sizeof(float) * n * L.out), "panel route %d out=%d in=%d n=%d differs from scalar", f, L.out, L.in, n);
        runs++;
    }
    ds_huge_free(P);
    return runs;
}

/* Spec-side value of weight (o, i): E2M1 code (low nibble = even input) times 2^(s - 127). */
static double mx_weight(const mx_lin *m, int o, int i) {
    uint8_t b = m->codes[(size_t)o * m->L.in / 2 + i / 2];
    return (double)ds_e2m1_to_f32(i % 2 ? b >> 4 : b & 15) * ldexp(1.0, m->sc[(size_t)o * m->L.in / 32 + i / 32] - 127);
}

TEST(mxfp4_paths_equal_scalar_and_the_decoded_weights) {
    static const int outs[] = {1, 7, 16, 17, 40, 64};
    /* 640 and 1152: 20 and 36 blocks, a whole stretch of 16 scale bytes and a partial one;
     * n up to 19: several groups of DS_MX_ROWS_MAX rows, 40 and 64 outputs: several output blocks */
    static const int ins[] = {32, 64, 96, 128, 160, 224, 512, 640, 1152};
    int runs = 0;
    for (int trial = 0; trial < 48; trial++) {
        int out = outs[tk_range(0, 5)], in = ins[tk_range(0, 8)], n = trial % 4 ? tk_range(1, 9) : tk_range(10, 19);
        mx_lin m = mx_make(out, in, trial % 5 ? -8 : -40, trial % 5 ? 2 : 30);   /* every fifth: wide exponent spread */
        int8_t *q = malloc((size_t)n * in);
        float *s = malloc(sizeof(float) * n);
        for (int i = 0; i < n * in; i++) q[i] = (int8_t)(trial % 7 == 0 ? (i % 2 ? 127 : -127) : tk_range(-127, 127));
        for (int r = 0; r < n; r++) s[r] = (float)tk_range(1, 1000) * 1e-3f;
        float *y0 = malloc(sizeof(float) * n * out), *y1 = malloc(sizeof(float) * n * out);
        ds_mx_forward_q_with(&m.L, q, s, n, y0, ds_mx_row_ref, NULL);
        /* the spec-side value: with scales within 2^10 of each other the float64 sum is exact */
        if (trial % 5)
            for (int r = 0; r < n; r++)
                for (int o = 0; o < out; o++) {
                    double acc = 0;
                    for (int i = 0; i < in; i++) acc += mx_weight(&m, o, i) * q[(size_t)r * in + i];
                    float want = (float)(acc * (double)s[r]);
                    CHECK(memcmp(&want, &y0[(size_t)r * out + o], 4) == 0, "out=%d in=%d r=%d o=%d: %.9g vs %.9g", out, in, r, o,
                          (double)want, (double)y0[(size_t)r * out + o]);
                }
        /* the row functions on the published layout, then the panel routes */
        const int native = ds_kernels_available("avx512-vnni");
        ds_mx_row_fn paths[3] = {ds_mx_row_avx512_emu, ds_kernels_available("avx2") ? ds_mx_row_avx2 : NULL,
                                 native ? ds_mx_row_avx512 : NULL};
        for (int p = 0; p < 3; p++) {
            if (!paths[p]) continue;
            tk_poison(y1, (size_t)n * out);
            ds_mx_forward_q_with(&m.L, q, s, n, y1, paths[p], NULL);
            CHECK(!memcmp(y0, y1, sizeof(float) * n * out), "path %d out=%d in=%d n=%d differs from scalar", p, out, in, n);
            runs++;
        }
        runs += mx_panels_agree(&m, q, s, n, y0, y1);
        free(q); free(s); free(y0); free(y1); free(m.codes); free(m.sc);
    }
    printf("  %d MXFP4 path runs compared (avx2 %s, avx512-vnni %s natively)\n", runs, ds_kernels_available("avx2") ? "yes" : "no",
           ds_kernels_available("avx512-vnni") ? "yes" : "no");
    CHECK(runs >= 80, "only %d runs", runs);
}

/* A MoE-like call of several jobs: w1 / w3 pairs on the same rows share one activation layout,
 * one of a pair with panels of wide spread (16-24 binades: row functions in int32, which read the
 * magnitude and sign planes) and one without, in both orders, beside a job on other rows; every
 * job must equal its own scalar call. */
TEST(mxfp4_jobs_sharing_rows_equal_their_own_calls) {
    enum { IN = 320, OUT = 40, NJ = 5 };
    mx_lin narrow = mx_make(OUT, IN, -8, 2), wide = mx_make(OUT, IN, -12, 12), other = mx_make(24, 2 * IN, -6, 3);
    mx_lin *lins[NJ] = {&narrow, &wide, &wide, &narrow, &other};
    const int rows[NJ] = {3, 3, 5, 5, 2};
    int8_t *q = malloc(8 * 2 * IN);
    float s[8], *want[NJ], *got[NJ];
    int8_t *junk = malloc(8 * IN);
    float *sink = malloc(sizeof(float) * 8 * OUT);
    for (int i = 0; i < 8 * 2 * IN; i++) q[i] = (int8_t)tk_range(-127, 127);
    for (int i = 0; i < 8 * IN; i++) junk[i] = (int8_t)tk_range(-127, 127);
    for (int r = 0; r < 8; r++) s[r] = (float)tk_range(1, 1000) * 1e-3f;
    /* jobs 0-1 on rows [0, 3), jobs 2-3 on rows [3, 8), job 4 on its own rows */
    const int8_t *xq[NJ] = {q, q, q + 3 * IN, q + 3 * IN, q + 8 * IN};
    const float *xs[NJ] = {s, s, s + 3, s + 3, s + 6};
    /* each panel route with a row function that reads the magnitude and sign planes (the
     * emulated AVX-512 one runs on every host) */
    const int v512 = ds_kernels_available("avx512-vnni"), v2 = ds_kernels_available("avx2");
    ds_mx_panels_fn fns[3] = {ds_mx_panels_ref, v512 ? ds_mx_panels_avx512 : NULL, v2 ? ds_mx_panels_avx2 : NULL};
    ds_mx_row_fn rowfns[3] = {ds_mx_row_avx512_emu, v512 ? ds_mx_row_avx512 : NULL, v2 ? ds_mx_row_avx2 : NULL};
    ds_linear L[NJ];
    ds_mxpack *packs[3];
    size_t bytes;
    mx_lin *uniq[3] = {&narrow, &wide, &other};
    for (int u = 0; u < 3; u++) packs[u] = ds_mx_pack(&uniq[u]->L, &bytes);
    CHECK(packs[0]->row_panels == 0 && packs[1]->row_panels > 0, "row panels %d / %d", packs[0]->row_panels, packs[1]->row_panels);
    ds_linear_job jobs[NJ];
    for (int j = 0; j < NJ; j++) {
        const int u = lins[j] == &narrow ? 0 : lins[j] == &wide ? 1 : 2;
        L[j] = lins[j]->L;
        L[j].packed = packs[u];
        L[j].packed_kind = DS_PACK_KIND_MX;
        want[j] = malloc(sizeof(float) * rows[j] * L[j].out);
        got[j] = malloc(sizeof(float) * rows[j] * L[j].out);
        ds_mx_forward_q_with(&lins[j]->L, xq[j], xs[j], rows[j], want[j], ds_mx_row_ref, NULL);
        jobs[j] = (ds_linear_job){&L[j], xq[j], xs[j], rows[j], got[j]};
    }
    int runs = 0;
    for (int f = 0; f < 3; f++) {
        if (!fns[f]) continue;
        for (int j = 0; j < NJ; j++) tk_poison(got[j], (size_t)rows[j] * L[j].out);
        /* other rows through the same scratch first, so no plane of the calls above is left there */
        ds_mx_forward_q_with(&wide.L, junk, s, 8, sink, ds_mx_row_ref, NULL);
        ds_mx_forward_q_many_with(jobs, NJ, rowfns[f], fns[f]);
        for (int j = 0; j < NJ; j++)
            CHECK(!memcmp(want[j], got[j], sizeof(float) * rows[j] * L[j].out), "panel route %d: job %d differs from its own call", f, j);
        runs++;
    }
    CHECK(runs >= 1, "no panel route ran");
    for (int u = 0; u < 3; u++) ds_huge_free(packs[u]);
    for (int j = 0; j < NJ; j++) free(want[j]), free(got[j]);
    free(q); free(junk); free(sink);
    free(narrow.codes); free(narrow.sc); free(wide.codes); free(wide.sc); free(other.codes); free(other.sc);
}

/* A call large enough that its activation layout runs as pool tasks (official.c: from 256 KiB of
 * rows), against the spec-side value of every output. */
TEST(mxfp4_pool_layout_of_a_prefill_sized_call) {
    enum { OUT = 16, IN = 2048, N = 160 };
    mx_lin m = mx_make(OUT, IN, -8, 2);
    int8_t *q = malloc((size_t)N * IN);
    float *s = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N * OUT);
    for (int i = 0; i < N * IN; i++) q[i] = (int8_t)tk_range(-127, 127);
    for (int r = 0; r < N; r++) s[r] = (float)tk_range(1, 1000) * 1e-3f;
    const int native = ds_kernels_available("avx512-vnni");
    ds_mx_row_fn paths[3] = {ds_mx_row_ref, ds_mx_row_avx512_emu, native ? ds_mx_row_avx512 : NULL};
    int bad = 0;
    for (int p = 0; p < 3; p++) {
        if (!paths[p]) continue;
        tk_poison(y, (size_t)N * OUT);
        ds_mx_forward_q_with(&m.L, q, s, N, y, paths[p], NULL);
        for (int r = 0; r < N; r += 7)
            for (int o = 0; o < OUT; o++) {
                double acc = 0;
                for (int i = 0; i < IN; i++) acc += mx_weight(&m, o, i) * q[(size_t)r * IN + i];
                const float want = (float)(acc * (double)s[r]);
                bad += memcmp(&want, &y[(size_t)r * OUT + o], 4) != 0;
            }
    }
    CHECK(bad == 0, "%d outputs differ from the spec-side value", bad);
    float *y0 = malloc(sizeof(float) * N * OUT);
    ds_mx_forward_q_with(&m.L, q, s, N, y0, ds_mx_row_ref, NULL);
    CHECK(mx_panels_agree(&m, q, s, N, y0, y) >= 2, "panel routes");
    free(y0);
    free(q); free(s); free(y); free(m.codes); free(m.sc);
}

/* Codes of the largest magnitude (12 as 2·e2m1), positive or negative by case. */
static int o_sign_codes(size_t k) { return k % 3 ? 0x77 : 0xFF; }

TEST(mxfp4_exponent_spread_boundary) {
    /* spread 37: the exact sum rounded once (checked with a 128-bit integer sum written here);
     * spread 38: the ascending float64 order; every path equal to the scalar one in both */
    /* spreads 14-18: the SIMD paths' int32 lanes at their overflow limit (largest codes, |q| = 127,
     * every block but one at the top exponent: the int32 route up to 16 (AVX-512) / 15 (AVX2),
     * the int64 one above) */
    static const int spreads[] = {14, 15, 16, 17, 18, 36, 37, 38, 39};
    for (size_t k = 0; k < DS_ARRAY_LEN(spreads); k++) {
        const int spread = spreads[k], extreme = spread < 30;
        mx_lin m = mx_make(8, 256, 0, 0);
        for (int o = 0; o < 8; o++)
            for (int b = 0; b < 8; b++)
                m.sc[o * 8 + b] = (uint8_t)(90 + (extreme ? (b == o % 8 ? 0 : spread) : b == 3 ? spread : b % 3));
        if (extreme) memset(m.codes, o_sign_codes(k), (size_t)8 * 128);
        int8_t q[256];
        float s = 0.37f, y0[8], y1[8];
        for (int i = 0; i < 256; i++) q[i] = (int8_t)(extreme ? (k % 2 ? -127 : 127) : tk_range(-127, 127));
        ds_mx_forward_q_with(&m.L, q, &s, 1, y0, ds_mx_row_ref, NULL);
        if (spread <= DS_MX_EXACT_SPREAD)
            for (int o = 0; o < 8; o++) {
                __int128 tot = 0;
                for (int i = 0; i < 256; i++) {
                    uint8_t byte = m.codes[o * 128 + i / 2];
                    int c = i % 2 ? byte >> 4 : byte & 15, v2 = (int)(2 * ds_e2m1_to_f32((uint8_t)c));
                    tot += (__int128)v2 * q[i] * ((__int128)1 << (m.sc[o * 8 + i / 32] - 90));
                }
                float want = (float)(ldexp((double)(int64_t)tot, 90 - 128) * (double)s);
                CHECK(memcmp(&want, &y0[o], 4) == 0, "spread %d row %d: %.9g vs %.9g", spread, o, (double)want, (double)y0[o]);
            }
        ds_mx_row_fn paths[3] = {ds_mx_row_avx512_emu, ds_kernels_available("avx2") ? ds_mx_row_avx2 : NULL,
                                 ds_kernels_available("avx512-vnni") ? ds_mx_row_avx512 : NULL};
        for (int p = 0; p < 3; p++) {
            if (!paths[p]) continue;
            ds_mx_forward_q_with(&m.L, q, &s, 1, y1, paths[p], NULL);
            CHECK(!memcmp(y0, y1, sizeof y0), "spread %d path %d differs", spread, p);
        }
        /* panels: spread 14 and 15 in stretches of 2 and 1 blocks, wider ones by the row function */
        CHECK(ds_mx_panel_chunk(8, spread) == (spread == 14 ? 2 : spread == 15 ? 1 : 0), "spread %d: chunk %d", spread, ds_mx_panel_chunk(8, spread));
        CHECK(mx_panels_agree(&m, q, &s, 1, y0, y1) >= 2, "panel routes");
        free(m.codes); free(m.sc);
    }
}

/* Activation rows walk several panels side by side, from equal parts of the range (AVX2: panel i
 * beside h + i for one row; AVX-512: i, q + i, ..., 5q + i for one row, 4 parts for two, 3 for three,
 * halves i, q + i from four rows on), so each weight stream runs on into its next panel.  A group's int32 stretches must be the shortest
 * of its panels' (a panel of spread 15 at its overflow limit beside panels of spread 0, at every
 * place in the group), a panel of wide spread goes to the row function wherever it sits, half
 * panels and the panels left over run alone.  Every route equals the scalar row function bit for bit. */
TEST(mxfp4_few_row_panel_groups_keep_each_panels_stretch) {
    /* per panel: 0 = spread 0, 15 / 14 = at the int32 limit (AVX2 stretches of 1 / 2 blocks),
     * 39 = row function; the last panel of an odd `out` / 16 is a half one */
    static const struct { int out, spread[16]; } cases[] = {
        {88, {0, 14, 39, 15, 0, 0}},                  /* AVX2 pairs (0,3) (1,4), (2,5) alone */
        {88, {15, 0, 0, 0, 39, 0}},                   /* the limit first; row function second */
        {112, {0, 0, 0, 15, 0, 0, 0}},                /* odd: panel 6 left over */
        {128, {0, 0, 15, 0, 0, 0, 0, 0}},             /* AVX-512 groups (0,2,4,6) (1,3,5,7) */
        {152, {0, 0, 0, 15, 39, 0, 0, 0, 0, 0}},      /* a row-function panel inside a group; 8, 9 left */
        {256, {0, 0, 0, 0, 0, 0, 0, 0, 0, 15}},       /* the limit third in group (1,5,9,13); one row: last in (1,3,..,11) */
        {96, {0, 0, 0, 0, 0, 15}},                    /* one row, 6 parts: the limit last in the group */
        {200, {0, 0, 0, 0, 39, 0, 0, 0, 0, 15, 0, 0, 0}}, /* 6 parts of 2: row function fifth in (0,..,10), limit in (1,..,11) */
    };
    for (size_t k = 0; k < DS_ARRAY_LEN(cases); k++) {
        const int out = cases[k].out;
        mx_lin m = mx_make(out, 256, 0, 0);   /* 8 blocks */
        memset(m.codes, 0x77, (size_t)out * 128);   /* the largest magnitude, as the boundary test */
        for (int o = 0; o < out; o++) {
            const int spread = cases[k].spread[o / 16];
            for (int b = 0; b < 8; b++)
                m.sc[o * 8 + b] = (uint8_t)(90 + (spread == 39 ? (b == 3 ? 39 : 0) : b == o % 8 ? 0 : spread));
        }
        int8_t q[8 * 256];
        float s[8] = {0.37f, 0.11f, 0.23f, 0.5f, 0.07f, 0.91f, 0.13f, 0.29f}, y0[8 * 256], y1[8 * 256];
        for (int i = 0; i < 8 * 256; i++) q[i] = 127;
        for (int n = 1; n <= 8; n++) {   /* 3 rows: thirds; 4-8: halves, in row tiles of up to 6 */
            ds_mx_forward_q_with(&m.L, q, s, n, y0, ds_mx_row_ref, NULL);
            CHECK(mx_panels_agree(&m, q, s, n, y0, y1) >= 2, "case %zu, %d rows: panel routes", k, n);
        }
        free(m.codes); free(m.sc);
    }
}

TEST(mxfp4_forward_quantizes_rows_like_w4a8) {
    /* ds_linear_forward on bf16 rows = ds_quantize_rows then the integer path, on every kernel path */
    mx_lin m = mx_make(33, 128, -6, 0);
    const int n = 3;
    ds_bf16 *x = malloc(sizeof(ds_bf16) * n * 128);
    tk_fill_bf16(x, (size_t)n * 128, 2.0f);
    int8_t q[3 * 128];
    float s[3], want[3 * 33], got[3 * 33];
    ds_ref_quantize_rows(x, n, 128, q, s);
    ds_mx_forward_q_with(&m.L, q, s, n, want, ds_mx_row_ref, NULL);
    const char *names[3] = {"reference", "avx2", "avx512-vnni"};
    ds_error err;
    for (int p = 0; p < 3; p++) {
        if (!ds_kernels_available(names[p])) continue;
        CHECK(ds_kernels_select(names[p], &err) == 0, "select %s", names[p]);
        tk_poison(got, 3 * 33);
        ds_linear_forward(&m.L, x, n, got);
        CHECK(!memcmp(want, got, sizeof want), "%s differs", names[p]);
    }
    ds_kernels_select("auto", &err);
    CHECK(!ds_kernels_available("avx2") || m.L.packed_kind == DS_PACK_KIND_MX, "the SIMD paths made their panels");
    ds_linear_release(&m.L);
    free(x); free(m.codes); free(m.sc);
}

/* A random FP8 linear and its decoded BF16 copy (exact). */
typedef struct { ds_linear L, B; uint8_t *codes, *sc; ds_bf16 *dec; } fp8_lin;

static fp8_lin fp8_make(int out, int in, ds_numerics nm, int emin) {
    fp8_lin f;
    const int sc_cols = (in + 31) / 32;
    f.codes = malloc((size_t)out * in);
    f.sc = malloc((size_t)((out + 31) / 32) * sc_cols);
    f.dec = malloc(sizeof(ds_bf16) * (size_t)out * in);
    for (size_t i = 0; i < (size_t)out * in; i++) {
        uint8_t c = (uint8_t)tk_rand();
        f.codes[i] = (c & 0x7f) == 0x7f ? 0x7e : c;   /* no NaN codes (the loader refuses them) */
    }
    for (size_t i = 0; i < (size_t)((out + 31) / 32) * sc_cols; i++) f.sc[i] = (uint8_t)tk_range(127 + emin, 127 - 4);
    for (int o = 0; o < out; o++)
        for (int i = 0; i < in; i++) {
            float v = ldexpf(ds_e4m3_to_f32(f.codes[(size_t)o * in + i]), f.sc[(size_t)(o / 32) * sc_cols + i / 32] - 127);
            f.dec[(size_t)o * in + i] = ds_f32_to_bf16(v);
            CHECK(ds_bf16_to_f32(f.dec[(size_t)o * in + i]) == v, "decoded FP8 value not exact in bf16");
        }
    f.L = (ds_linear){.fmt = DS_LIN_FP8, .out = out, .in = in, .w = f.codes, .w_e8m0 = f.sc, .numerics = nm};
    f.B = (ds_linear){.fmt = DS_LIN_BF16, .out = out, .in = in, .w = f.dec, .numerics = nm};
    return f;
}

TEST(fp8_linears_equal_the_bf16_linear_of_the_decoded_matrix) {
    static const int outs[] = {1, 16, 31, 33, 70};
    static const int ins[] = {1, 31, 32, 33, 100, 256};
    const char *names[3] = {"reference", "avx2", "avx512-vnni"};
    ds_error err;
    int runs = 0;
    for (int trial = 0; trial < 24; trial++) {
        ds_numerics nm = trial % 2 ? DS_NUMERICS_FAST : DS_NUMERICS_EXACT;
        int out = outs[tk_range(0, 4)], in = ins[tk_range(0, 5)], n = tk_range(1, 5);
        fp8_lin f = fp8_make(out, in, nm, trial % 3 ? -12 : -60);   /* every third: weights below 2^-50 (flushed in the fast tier) */
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x, (size_t)n * in, 1.0f);
        float *want = malloc(sizeof(float) * n * out), *got = malloc(sizeof(float) * n * out);
        ds_ref_linear_f(&f.B, x, n, want);    /* the scalar order of that tier */
        for (int p = 0; p < 3; p++) {
            if (!ds_kernels_available(names[p])) continue;
            for (int dot = 0; dot < (p == 2 ? 2 : 1); dot++) {
                CHECK(ds_kernels_select(names[p], &err) == 0, "select %s", names[p]);
                int prev = ds_kernels_allow_bf16dot(dot || p != 2);
                tk_poison(got, (size_t)n * out);
                ds_linear_forward(&f.L, x, n, got);
                ds_kernels_allow_bf16dot(prev);
                CHECK(!memcmp(want, got, sizeof(float) * n * out), "%s%s %s out=%d in=%d n=%d differs", names[p], dot ? "+dot" : "",
                      ds_numerics_name(nm), out, in, n);
                runs++;
            }
        }
        ds_kernels_select("auto", &err);
        free(x); free(want); free(got); free(f.codes); free(f.sc); free(f.dec);
    }
    printf("  %d FP8 runs compared\n", runs);
    CHECK(runs >= 24, "only %d runs", runs);
}

/* Scale byte s for scale tile (t, b), its codes kept finite under it (scales above 200 keep the
 * code exponent <= 4, so that no value or sum overflows) and their decoded values. */
static void fp8_set_scale(fp8_lin *f, int out, int in, int t, int b, uint8_t s) {
    f->sc[t * ((in + 31) / 32) + b] = s;
    for (int o = 32 * t; o < DS_MIN(out, 32 * t + 32); o++)
        for (int i = 32 * b; i < DS_MIN(in, 32 * b + 32); i++) {
            uint8_t *c = &f->codes[(size_t)o * in + i];
            if (s > 200 && ((*c >> 3) & 15) > 4) *c &= 0xa7;   /* exponent field <= 4 */
            float v = ldexpf(ds_e4m3_to_f32(*c), s - 127);
            f->dec[(size_t)o * in + i] = ds_f32_to_bf16(v);
        }
}

/* Block scales of an FP8 linear across the in-register decode's safe range and both sides of it. */
static void fp8_rescale(fp8_lin *f, int out, int in, int trial) {
    static const uint8_t edge[] = {0, 40, 76, 85, 86, 87, 246, 247, 250, 254};
    for (int t = 0; t < (out + 31) / 32; t++)
        for (int b = 0; b < (in + 31) / 32; b++)
            fp8_set_scale(f, out, in, t, b, trial % 2 ? edge[tk_range(0, (int)DS_ARRAY_LEN(edge) - 1)] : (uint8_t)tk_range(110, 130));
}

/* The AVX2 one-row tile takes rows a quarter of the range apart, so from different scale tiles:
 * its in-register stretch must end at the shortest of the four rows' in-range prefixes (a scale
 * out of the in-register range in the first, second or last row's tile), and each row must use
 * its own tile's scales. */
TEST(fp8_one_row_tiles_across_scale_tiles_equal_the_fast_order) {
    static const int short_tile[] = {0, 1, 3};   /* the tile whose block 3 is out of range */
    for (size_t k = 0; k < DS_ARRAY_LEN(short_tile); k++) {
        fp8_lin f = fp8_make(128, 256, DS_NUMERICS_FAST, -12);
        for (int t = 0; t < 4; t++)
            for (int b = 0; b < 8; b++) fp8_set_scale(&f, 128, 256, t, b, (uint8_t)(112 + 3 * t + b));
        fp8_set_scale(&f, 128, 256, short_tile[k], 3, 250);
        ds_bf16 x[256];
        tk_fill_bf16(x, 256, 1.0f);
        float want[128], got[128];
        ds_ref_linear_f(&f.B, x, 1, want);
        int runs = 0;
        for (int p = 0; p < 2; p++) {
            const ds_fp8_ff_fn fn = p ? (ds_kernels_available("avx512-vnni") ? ds_fp8_ff_avx512 : NULL)
                                      : (ds_kernels_available("avx2") ? ds_fp8_ff_avx2 : NULL);
            if (!fn) continue;
            void *buf = malloc(sizeof(float) * (256 + 32));
            ds_ffact X;
            ds_ff_prepare_act(DS_FF_BF16_FMA, 0, x, 1, 256, buf, &X);
            tk_poison(got, 128);
            fn(&f.L, &X, 0, 128, got, 128);
            CHECK(!memcmp(want, got, sizeof want), "path %d, tile %d short: differs from the fast order", p, short_tile[k]);
            free(buf);
            runs++;
        }
        CHECK(runs >= 1, "no FP8 one-row path ran");
        ds_linear_release(&f.L);
        free(f.codes); free(f.sc); free(f.dec);
    }
}

/* Most scale tiles made plain (every zero-exponent code given exponent 1, its decoded value
 * updated), then the kernel map of plain tiles made: the AVX-512 decode (native and emulated)
 * takes its short step in those tiles and the full one in the rest.  Adds the map's plain and
 * other tiles to *plain / *other. */
static void fp8_plain_tiles(fp8_lin *f, int out, int in, int *plain, int *other) {
    const int sc_cols = (in + 31) / 32;
    for (int t = 0; t < (out + 31) / 32; t++)
        for (int b = 0; b < sc_cols; b++) {
            if (tk_range(0, 2) == 0) continue;
            for (int o = 32 * t; o < DS_MIN(out, 32 * t + 32); o++)
                for (int i = 32 * b; i < DS_MIN(in, 32 * b + 32); i++) {
                    uint8_t *c = &f->codes[(size_t)o * in + i];
                    if (*c & 0x78) continue;
                    *c |= 0x08;
                    f->dec[(size_t)o * in + i] = ds_f32_to_bf16(ldexpf(ds_e4m3_to_f32(*c), f->sc[t * sc_cols + b] - 127));
                }
        }
    ds_error err;
    if (ds_kernels_available("avx2")) {   /* a path whose decode does not read the map makes none */
        ds_kernels_select("avx2", &err);
        ds_linear_prepare(&f->L);
        CHECK(!f->L.packed, "the avx2 path made a plain-tile map it never reads");
        ds_linear_release(&f->L);
    }
    ds_kernels_select("auto", &err);
    ds_linear_prepare(&f->L);
    /* made at load only where the active path reads it (the AVX-512 decode) */
    const int reads_map = !strcmp(ds_kernels_active(), "avx512-vnni");
    CHECK(reads_map == (f->L.packed != NULL), "path %s: plain-tile map made %d, expected %d", ds_kernels_active(),
          f->L.packed != NULL, reads_map);
    ds_fp8_ensure_plain_map(&f->L);   /* the emulated AVX-512 decode reads it on every host */
    CHECK(f->L.packed_kind == DS_PACK_KIND_FP8_PLAIN && f->L.packed, "no plain-tile map made for FP8 [%d, %d]", out, in);
    if (!f->L.packed) return;
    CHECK(!ds_linear_streams_packed(&f->L), "the plain-tile map counted as the streamed weights");
    for (int k = 0; k < (out + 31) / 32 * sc_cols; k++) {
        const uint8_t m = ((const uint8_t *)f->L.packed)[k];
        int want = 1;   /* the map against the codes, tile by tile */
        for (int o = 32 * (k / sc_cols); o < DS_MIN(out, 32 * (k / sc_cols) + 32); o++)
            for (int i = 32 * (k % sc_cols); i < DS_MIN(in, 32 * (k % sc_cols) + 32); i++) want &= (f->codes[(size_t)o * in + i] & 0x78) != 0;
        CHECK(m == want, "plain-tile map entry %d is %d, the codes say %d", k, m, want);
        *(m ? plain : other) += 1;
    }
}

TEST(fp8_inreg_decode_equals_the_fast_bf16_order_on_every_path) {
    /* the in-register kernels (AVX2, AVX-512 natively, the AVX-512 source under SIMDe) against the
     * scalar fast order on the decoded matrix; shapes with tails, several rows, scales at the
     * edges of the in-register range (blocks outside it take the scalar rule) */
    static const int outs[] = {1, 4, 33, 64, 70};
    /* 1100, 2080 and 4160: long rows with a partial last block; 2080 and 4160 span two and three
     * of the AVX-512 blocked kernel's 2,048-input blocks (partial sums parked between them) */
    static const int ins[] = {32, 64, 96, 100, 256, 288, 1100, 2080, 4160};
    int runs = 0, plain = 0, other = 0;
    for (int trial = 0; trial < 30; trial++) {
        /* n up to 24: the AVX-512 path's 2 x 8 tiles from 5 rows (equal heights: 9 = 5 + 4, 12 = 6 + 6,
         * 20 = 7 + 7 + 6); the blocked kernels' row tiles of 4 and their 6-, 4- and 1-row output
         * groups at every count; 100 rows: past the 96-row chunk of the AVX-512 blocked kernel */
        int out = outs[tk_range(0, 4)], in = ins[tk_range(0, 8)];
        int n = trial == 29 ? 100 : trial % 3 == 2 ? tk_range(7, 24) : tk_range(1, 6);
        fp8_lin f = fp8_make(out, in, DS_NUMERICS_FAST, -12);
        fp8_rescale(&f, out, in, trial);
        if (trial % 3 != 1) fp8_plain_tiles(&f, out, in, &plain, &other);
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x, (size_t)n * in, 1.0f);
        float *want = malloc(sizeof(float) * n * out), *got = malloc(sizeof(float) * n * out);
        void *buf = malloc(sizeof(float) * (size_t)n * (size_t)(((in + 31) & ~31) + 32));
        ds_ref_linear_f(&f.B, x, n, want);
        /* the AVX2 blocked kernel (one decode per block of codes, from 5 rows in the dispatcher) in
         * both activation layouts: the plain one and the gathered halves it is given */
        static const char *names[8] = {"avx512 emulated", "avx2", "avx512-vnni", "avx512-vnni", "avx2 blocked", "avx2 blocked halves",
                                       "avx512 blocked emulated", "avx512-vnni blocked"};
        const int avx2 = ds_kernels_available("avx2"), avx512 = ds_kernels_available("avx512-vnni");
        ds_fp8_ff_fn fns[8] = {ds_fp8_ff_avx512_emu, avx2 ? ds_fp8_ff_avx2 : NULL, avx512 ? ds_fp8_ff_avx512 : NULL, NULL,
                               avx2 ? ds_fp8_ff_blocked_avx2 : NULL, avx2 ? ds_fp8_ff_blocked_avx2 : NULL,
                               ds_fp8_ff_blocked_avx512_emu, avx512 ? ds_fp8_ff_blocked_avx512 : NULL};
        for (int p = 0; p < 8; p++)
            for (int kind = DS_FF_BF16_FMA; kind <= DS_FF_BF16_DOT; kind++) {
                const int native_dot = p == 2 || p == 7;   /* vdpbf16ps itself: only where it rounds as specified */
                if (!fns[p] || (kind == DS_FF_BF16_DOT && (p == 1 || p == 4 || p == 5 || (native_dot && !ds_avx512_bf16dot_matches()))))
                    continue;
                ds_ffact X;
                ds_ff_prepare_act(kind, p == 5, x, n, in, buf, &X);
                tk_poison(got, (size_t)n * out);
                fns[p](&f.L, &X, 0, out, got, out);
                CHECK(!memcmp(want, got, sizeof(float) * n * out), "%s %s out=%d in=%d n=%d differs", names[p],
                      kind == DS_FF_BF16_DOT ? "vdpbf16ps" : "fma", out, in, n);
                runs++;
            }
        ds_linear_release(&f.L);
        free(x); free(want); free(got); free(buf); free(f.codes); free(f.sc); free(f.dec);
    }
    printf("  %d in-register and blocked FP8 runs compared (%d plain scale tiles, %d with zero or subnormal codes)\n", runs,
           plain, other);
    CHECK(runs >= 90, "only %d runs", runs);
    CHECK(plain >= 20 && other >= 20, "plain / other tiles %d / %d: both decode steps must be exercised", plain, other);
}

TEST(fp8_forward_same_bits_with_and_without_the_inreg_path) {
    /* the dispatcher's two fast routes (in-register decode, 16-row tiles) on the active path */
    fp8_lin f = fp8_make(96, 320, DS_NUMERICS_FAST, -12);
    fp8_rescale(&f, 96, 320, 1);
    for (int n = 1; n <= 39; n += 19) {   /* 39: past the in-register limit of every path */
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * 320);
        tk_fill_bf16(x, (size_t)n * 320, 1.0f);
        float *a = malloc(sizeof(float) * n * 96), *b = malloc(sizeof(float) * n * 96);
        int prev = ds_fp8_inreg_allow(1);
        ds_linear_forward(&f.L, x, n, a);
        ds_fp8_inreg_allow(0);
        ds_linear_forward(&f.L, x, n, b);
        ds_fp8_inreg_allow(prev);
        CHECK(!memcmp(a, b, sizeof(float) * n * 96), "n=%d: in-register and tile routes differ", n);
        free(x); free(a); free(b);
    }
    free(f.codes); free(f.sc); free(f.dec);
}

TEST(fp8_decode_paths_equal_scalar_on_every_code) {
    /* all 256 codes (NaN codes included: the loader refuses them, the decode must still agree) at
     * scales that exercise the 2^-50 flush, the subnormal scale byte 0 and large exponents */
    static const uint8_t scales[] = {0, 1, 60, 70, 77, 80, 119, 127, 135, 200, 254};
    uint8_t codes[256 + 24];
    for (int i = 0; i < 256 + 24; i++) codes[i] = (uint8_t)(i < 256 ? (uint64_t)i : tk_rand());
    for (size_t k = 0; k < DS_ARRAY_LEN(scales); k++) {
        uint8_t sc[9];
        for (int b = 0; b < 9; b++) sc[b] = scales[(k + (size_t)b) % DS_ARRAY_LEN(scales)];
        ds_bf16 want[280], got[280];
        ds_fp8_decode_ref(codes, sc, 280, want);
        for (int i = 0; i < 256; i++) {   /* the rule itself: value = e4m3 · 2^(s-127), bf16-exact, flushed */
            float v = ldexpf(ds_e4m3_to_f32(codes[i]), sc[i / 32] - 127);
            if (isnan(v) || isinf(v) || fabsf(v) < 0x1p-50f) continue;
            CHECK(ds_bf16_to_f32(want[i]) == v, "code 0x%02X scale %d: %g vs %g", codes[i], sc[i / 32], (double)ds_bf16_to_f32(want[i]), (double)v);
        }
        if (ds_kernels_available("avx2")) {
            ds_fp8_decode_avx2(codes, sc, 280, got);
            CHECK(!memcmp(want, got, sizeof want), "avx2 decode differs at scale set %zu", k);
        }
        if (ds_kernels_available("avx512-vnni")) {
            ds_fp8_decode_avx512(codes, sc, 280, got);
            CHECK(!memcmp(want, got, sizeof want), "avx512 decode differs at scale set %zu", k);
        }
    }
}

TEST(encoders_round_trip_and_follow_the_spec_ties) {
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f || c == 0x80) continue;   /* NaN codes; -0 encodes as +0 */
        CHECK(ds_mk_e4m3_encode(ds_e4m3_to_f32((uint8_t)c)) == c, "E4M3 code 0x%02X does not round-trip", c);
    }
    for (int c = 0; c < 16; c++)
        if (c != 8) CHECK(ds_mk_e2m1_encode(ds_e2m1_to_f32((uint8_t)c)) == c, "E2M1 code %d does not round-trip", c);
    /* CHECKPOINT.md §14: ties 0.25, 1.25, 2.5, 5 go down; 0.75, 1.75, 3.5 go up; saturate to ±6 */
    static const float tie[7] = {0.25f, 1.25f, 2.5f, 5.f, 0.75f, 1.75f, 3.5f};
    static const float to[7] = {0.f, 1.f, 2.f, 4.f, 1.f, 2.f, 4.f};
    for (int k = 0; k < 7; k++) {
        CHECK(ds_e2m1_to_f32(ds_mk_e2m1_encode(tie[k])) == to[k], "E2M1 tie %g", (double)tie[k]);
        CHECK(ds_e2m1_to_f32(ds_mk_e2m1_encode(-tie[k])) == -to[k], "E2M1 tie -%g", (double)tie[k]);
    }
    CHECK(ds_e2m1_to_f32(ds_mk_e2m1_encode(100.f)) == 6.f, "E2M1 saturation");
    CHECK(ds_e4m3_to_f32(ds_mk_e4m3_encode(1000.f)) == 448.f && ds_e4m3_to_f32(ds_mk_e4m3_encode(-1000.f)) == -448.f, "E4M3 saturation");
    /* E4M3 ties to even mantissa: 1 + 1/16 lies between 1 (m=0) and 1.125 (m=1) -> 1; 1 + 3/16 -> 1.25 */
    CHECK(ds_e4m3_to_f32(ds_mk_e4m3_encode(1.0625f)) == 1.0f && ds_e4m3_to_f32(ds_mk_e4m3_encode(1.1875f)) == 1.25f, "E4M3 ties");
    CHECK(ds_e4m3_to_f32(ds_mk_e4m3_encode(ldexpf(1.f, -10))) == 0.f, "E4M3: half the smallest subnormal ties to 0");
    /* E8M0: the smallest power of two p with amax / p <= max */
    CHECK(ds_mk_e8m0_for(448.f, 448.f) == 127 && ds_mk_e8m0_for(449.f, 448.f) == 128 && ds_mk_e8m0_for(6.f, 6.f) == 127, "E8M0 exact");
    CHECK(ds_mk_e8m0_for(3.f, 6.f) == 126 && ds_mk_e8m0_for(3.1f, 6.f) == 127 && ds_mk_e8m0_for(0.f, 6.f) == 127, "E8M0 choice");
}

RUN_ALL()
