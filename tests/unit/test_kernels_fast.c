/* Fast-tier float linears (BF16 / F32 weights, fp32 blocked order of kernels.h).
 * Oracles: (1) hand-worked cases whose result depends on the order, the pair order and the flush
 * rule; (2) a long-double dot product bounding the fp32 error of the scalar reference; (3) the
 * vdpbf16ps instruction itself, where this CPU has it, against the scalar reference; then every
 * SIMD path (AVX2, AVX-512 FMA, AVX-512 vdpbf16ps) against the scalar reference bit for bit on
 * row counts 1..40 with odd sizes and tails, batch / row-position / thread-count invariance, and
 * the flushed copy of a matrix that holds tiny values.  Also the quantized families on rows 1..40
 * against the independent int64 oracle of test_kernels_util.h. */
#include "check.h"
#include "test_kernels_util.h"
#include "kernels/kern_internal.h"
#include "base/threadpool.h"
#include "base/hugemem.h"
#include <stdio.h>

static ds_bf16 bf(float v) { return ds_f32_to_bf16(v); }

static tk_lin fast_lin(ds_lin_fmt fmt, int out, int in) {
    tk_lin t = tk_make(fmt, out, in);
    t.L.numerics = DS_NUMERICS_FAST;
    return t;
}

TEST(reference_follows_the_documented_order) {
    /* lane 0 of BF16: block 0 gives odd 2^-23 then even 1 -> 1 + 2^-23; block 1 adds odd 2^-24 then
     * even 1.5 * 2^-23, one rounding each: 1 + 2^-21.  (Even first would give 1 + 2^-22, a single
     * rounding 1 + 3 * 2^-23 — which the float64 exact tier gives.) */
    ds_bf16 w[64] = {0}, x[64];
    w[0] = bf(1.f); w[1] = bf(0x1p-23f); w[32] = bf(0x1.8p-23f); w[33] = bf(0x1p-24f);
    for (int i = 0; i < 64; i++) x[i] = bf(1.f);
    ds_linear L = {.fmt = DS_LIN_BF16, .out = 1, .in = 64, .w = w, .numerics = DS_NUMERICS_FAST};
    float y;
    ds_ref_linear_f(&L, x, 1, &y);
    CHECK(y == 1.f + 0x1p-21f, "fast order gives %a", y);
    L.numerics = DS_NUMERICS_EXACT;
    ds_ref_linear_f(&L, x, 1, &y);
    CHECK(y == 1.f + 0x3p-23f, "exact tier gives %a", y);
    /* the same block on every path (vdpbf16ps included where present) */
    L.numerics = DS_NUMERICS_FAST;
    static const char *paths[] = {"avx2", "avx512-vnni"};
    for (int p = 0; p < 2; p++) {
        if (!ds_kernels_available(paths[p])) continue;
        ds_kernels_select(paths[p], NULL);
        y = NAN;
        ds_linear_forward(&L, x, 1, &y);
        CHECK(y == 1.f + 0x1p-21f, "%s gives %a", paths[p], y);
    }
    ds_linear_release(&L); /* the load-time header made on first use */
    ds_kernels_select("auto", NULL);
    float a[16];
    for (int j = 0; j < 16; j++) a[j] = 0.f;
    a[0] = 1.f; a[8] = 0x1p-24f; a[4] = 0x1p-24f; a[12] = 0x1p-24f;
    /* h0 = 1 + 2^-24 -> 1; h4 = 2^-23; q0 = 1 + 2^-23 exactly */
    CHECK(ds_ff_reduce16(a) == 1.f + 0x1p-23f, "tree gives %a", ds_ff_reduce16(a));
    /* flush rule: 2^-51 counts as 0, 2^-50 does not */
    CHECK(ds_ff_bf16_value(bf(0x1p-51f)) == 0.f && ds_ff_bf16_value(bf(0x1p-50f)) == 0x1p-50f);
    CHECK(ds_ff_bf16_value(bf(-0x1p-130f)) == 0.f, "subnormal flushed");
    /* F32 blocks of 16: lane 0 takes elements 0 and 16 */
    float wf[17];
    ds_bf16 xf[17];
    for (int i = 0; i < 17; i++) { wf[i] = 0.f; xf[i] = bf(1.f); }
    wf[0] = 1.f; wf[16] = 0x1p-24f; wf[8] = 0x1p-24f;
    ds_linear F = {.fmt = DS_LIN_F32, .out = 1, .in = 17, .w = wf, .numerics = DS_NUMERICS_FAST};
    ds_ref_linear_f(&F, xf, 1, &y);
    /* lane 0: 1 + 2^-24 -> 1; lane 8: 2^-24; h0 = 1 + 2^-24 -> 1 */
    CHECK(y == 1.f, "f32 fast gives %a", y);
}

TEST(reference_error_is_within_fp32_bound) {
    double worst = 0;
    for (int trial = 0; trial < 40; trial++) {
        ds_lin_fmt fmt = trial % 2 ? DS_LIN_F32 : DS_LIN_BF16;
        int out = tk_range(1, 20), in = tk_range(1, 700), n = tk_range(1, 3);
        tk_lin t = fast_lin(fmt, out, in);
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x, (size_t)n * in, 1.f);
        float *y = malloc(sizeof(float) * n * out);
        ds_ref_linear_f(&t.L, x, n, y);
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                double mag;
                float e = tk_oracle_f(&t, x + (size_t)r * in, o, &mag);
                /* each lane sums <= in/16 + 1 terms, then 4 tree levels: gamma bound */
                double bound = (in / 16.0 + 6) * 0x1p-24 * mag + 1e-30;
                double d = fabs((double)y[(size_t)r * out + o] - e);
                CHECK(d <= bound, "fmt %d in %d: |diff| %g > bound %g", fmt, in, d, bound);
                if (mag > 0 && d / mag > worst) worst = d / mag;
            }
        free(x); free(y);
        tk_free(&t);
    }
    printf("  worst |fast - exact| / sum|w*x| = %.3g\n", worst);
}

/* Which SIMD variants this CPU runs: avx2, avx512 with FMA, avx512 with vdpbf16ps. */
typedef struct { const char *path; int dot; } variant;
static const variant k_var[] = {{"avx2", 0}, {"avx512-vnni", 0}, {"avx512-vnni", 1}};

static int select_variant(const variant *v) {
    if (!ds_kernels_available(v->path)) return 0;
    ds_kernels_select(v->path, NULL);
    ds_kernels_allow_bf16dot(v->dot);
    if (v->dot && !strstr(ds_kernels_reason(), "via vdpbf16ps")) return 0;
    return 1;
}

static int forward_equals_reference(tk_lin *t, const ds_bf16 *x, int n, int prepare) {
    int out = t->L.out;
    float *y = malloc(sizeof(float) * n * out), *yr = malloc(sizeof(float) * n * out);
    tk_poison(y, (size_t)n * out);
    tk_poison(yr, (size_t)n * out);
    ds_ref_linear_f(&t->L, x, n, yr);
    if (prepare) ds_linear_prepare(&t->L);
    ds_linear_forward(&t->L, x, n, y);
    int bad = 0;
    for (size_t i = 0; i < (size_t)n * out; i++) bad += memcmp(&y[i], &yr[i], 4) != 0;
    free(y); free(yr);
    return bad;
}

/* A BF16 (f = 0) or F32 linear of `out` x 517 inputs on n rows of values around 1 equals the
 * reference bit for bit. */
static int shape_equals_reference(int f, int out, int n, int prepare) {
    tk_lin t = fast_lin(f ? DS_LIN_F32 : DS_LIN_BF16, out, 517);
    ds_bf16 *x = malloc(sizeof(ds_bf16) * n * 517);
    tk_fill_bf16(x, (size_t)n * 517, 1.f);
    const int bad = forward_equals_reference(&t, x, n, prepare);
    free(x);
    tk_free(&t);
    return bad == 0;
}

TEST(every_path_equals_reference_bit_for_bit) {
    static const int ins[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 255, 513, 1037};
    int ran = 0;
    for (size_t v = 0; v < DS_ARRAY_LEN(k_var); v++) {
        if (!select_variant(&k_var[v])) {
            printf("  (%s%s not runnable on this CPU: not run here)\n", k_var[v].path, k_var[v].dot ? "+vdpbf16ps" : "");
            continue;
        }
        int runs = 0;
        for (int n = 1; n <= 40; n++)
            for (int f = 0; f < 2; f++) {
                ds_lin_fmt fmt = f ? DS_LIN_F32 : DS_LIN_BF16;
                int out = tk_range(1, 23), in = ins[tk_range(0, DS_ARRAY_LEN(ins) - 1)];
                tk_lin t = fast_lin(fmt, out, in);
                ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
                tk_fill_bf16(x, (size_t)n * in, n % 3 ? 1.f : 300.f);
                int bad = forward_equals_reference(&t, x, n, n & 1);
                CHECK(bad == 0, "%s dot=%d fmt %d out=%d in=%d n=%d: %d outputs differ", k_var[v].path, k_var[v].dot,
                      fmt, out, in, n, bad);
                runs++;
                free(x);
                tk_free(&t);
            }
        /* every few-row tile shape (8 x 1..3, 6 x 4, 4 x 5..6 outputs x rows) with output tails
         * of each width and an input tail */
        for (int n = 1; n <= 6; n++)
            for (int f = 0; f < 2; f++)
                for (int oi = 0; oi < 3; oi++) {
                    static const int outs[] = {7, 29, 47};
                    CHECK(shape_equals_reference(f, outs[oi], n, oi & 1), "%s dot=%d fmt %d: few-row tile out=%d n=%d",
                          k_var[v].path, k_var[v].dot, f, outs[oi], n);
                    runs++;
                }
        /* task ranges whose last 1-3 outputs follow a 6-output group (45 and 62 outputs over one
         * or two threads: 6 + 3, 6 + 2, 60 + 2): the blocked path runs them as a 4-output group
         * that ends at the range's end and computes its first outputs again */
        for (int n = 7; n <= 33; n += 26)
            for (int f = 0; f < 2; f++)
                for (int oi = 0; oi < 2; oi++) {
                    static const int outs[] = {45, 62};
                    CHECK(shape_equals_reference(f, outs[oi], n, oi & 1), "%s dot=%d fmt %d: out=%d n=%d (tail group)",
                          k_var[v].path, k_var[v].dot, f, outs[oi], n);
                    runs++;
                }
        /* long rows (several input blocks per tile, partial lanes saved between them), more rows
         * than one activation chunk holds, and 97 outputs: 16 per task, so the 6-output groups of
         * the blocked path run beside a 4-output one; then 200 rows of 1000 inputs, split into
         * input blocks by the 6-output groups only (the chunk of rows must still fit `part`) */
        static const int long_in[] = {4133, 1000}, long_n[] = {101, 200};
        for (int s = 0; s < 2; s++)
            for (int f = 0; f < 2; f++) {
                const int in = long_in[s], n = long_n[s];
                tk_lin t = fast_lin(f ? DS_LIN_F32 : DS_LIN_BF16, 97, in);
                ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
                tk_fill_bf16(x, (size_t)n * in, 1.f);
                CHECK(forward_equals_reference(&t, x, n, 1) == 0, "%s dot=%d fmt %d: 97 x %d inputs x %d rows",
                      k_var[v].path, k_var[v].dot, f, in, n);
                free(x);
                tk_free(&t);
                runs++;
            }
        printf("  %s%s: %d linears (n = 1..40, 101, 200) bit-identical to the reference\n", k_var[v].path,
               k_var[v].dot ? "+vdpbf16ps" : "", runs);
        ran++;
    }
    CHECK(ran >= 1, "no SIMD path ran");
    ds_kernels_allow_bf16dot(1);
    ds_kernels_select("auto", NULL);
}

/* The AVX2 multi-row kernel reads either activation layout: the plain one and the gathered
 * halves (what the dispatcher gives it from two rows on); both against the scalar reference, with
 * input tails, several input blocks (2085 > 1024 inputs), output groups of 4 and of 1, and a
 * matrix past 4 MiB (the weight prefetch on); BF16 on both sides of the row count where its tiles
 * stop splitting the bf16 words in registers and widen each block instead. */
TEST(avx2_multirow_reads_both_layouts) {
    if (!ds_kernels_available("avx2")) {
        printf("  (avx2 not runnable on this CPU: not run here)\n");
        return;
    }
    /* BF16 below 24 rows splits its words in registers, from 24 on widens each block: both sides */
    static const int ins[] = {17, 100, 1037, 2085}, ns[] = {2, 3, 7, 16, 23, 24, 97};
    int runs = 0;
    for (int f = 0; f < 2; f++)
        for (int ii = 0; ii < 4; ii++)
            for (int ni = 0; ni < (int)DS_ARRAY_LEN(ns); ni++) {
                const int in = ins[ii], n = ns[ni], out = ii == 3 && ni == 1 ? 1100 : 4 * ni + 3;
                tk_lin t = fast_lin(f ? DS_LIN_F32 : DS_LIN_BF16, out, in);
                ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
                tk_fill_bf16(x, (size_t)n * in, 1.f);
                float *y = malloc(sizeof(float) * n * out), *yr = malloc(sizeof(float) * n * out);
                void *buf = malloc(sizeof(float) * (size_t)n * (((in + 31) & ~31) + 32));
                ds_ref_linear_f(&t.L, x, n, yr);
                size_t bytes;
                ds_ffw *W = ds_ff_pack(&t.L, &bytes);
                for (int halves = 0; halves < 2; halves++) {
                    ds_ffact X;
                    ds_ff_prepare_act(f ? DS_FF_F32 : DS_FF_BF16_FMA, halves, x, n, in, buf, &X);
                    CHECK(X.halves == halves, "layout flag %d not kept", halves);
                    tk_poison(y, (size_t)n * out);
                    ds_kern_avx2.ff_rows(W, &X, 0, out, y, out);
                    CHECK(!memcmp(y, yr, sizeof(float) * n * out), "fmt %d halves %d out=%d in=%d n=%d differs", f,
                          halves, out, in, n);
                    runs++;
                }
                ds_huge_free(W);
                free(x); free(y); free(yr); free(buf);
                tk_free(&t);
            }
    printf("  avx2 multi-row: %d calls, both layouts, bit-identical to the reference\n", runs);
}

TEST(rows_threads_and_batches_do_not_change_bits) {
    for (size_t v = 0; v < DS_ARRAY_LEN(k_var) + 1; v++) {
        if (v < DS_ARRAY_LEN(k_var)) { if (!select_variant(&k_var[v])) continue; }
        else ds_kernels_select("reference", NULL);
        for (int f = 0; f < 2; f++) {
            int out = 37, in = 333, n = 40;
            tk_lin t = fast_lin(f ? DS_LIN_F32 : DS_LIN_BF16, out, in);
            ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
            tk_fill_bf16(x, (size_t)n * in, 1.f);
            float *y1 = malloc(sizeof(float) * n * out), *yt = malloc(sizeof(float) * n * out);
            ds_pool_init(1);
            ds_linear_forward(&t.L, x, n, y1);
            for (int th = 2; th <= 4; th++) {
                ds_pool_init(th);
                tk_poison(yt, (size_t)n * out);
                ds_linear_forward(&t.L, x, n, yt);
                CHECK(!memcmp(y1, yt, sizeof(float) * n * out), "%s fmt %d: %d threads differ", ds_kernels_active(), f, th);
            }
            for (int r = 0; r < n; r++) { /* each row alone */
                tk_poison(yt, out);
                ds_linear_forward(&t.L, x + (size_t)r * in, 1, yt);
                CHECK(!memcmp(yt, y1 + (size_t)r * out, sizeof(float) * out), "%s fmt %d row %d alone", ds_kernels_active(), f, r);
            }
            for (int r0 = 1; r0 + 13 <= n; r0 += 11) { /* inside sub-batches at other positions */
                tk_poison(yt, (size_t)13 * out);
                ds_linear_forward(&t.L, x + (size_t)r0 * in, 13, yt);
                CHECK(!memcmp(yt, y1 + (size_t)r0 * out, sizeof(float) * 13 * out), "sub-batch at %d", r0);
            }
            free(x); free(y1); free(yt);
            tk_free(&t);
        }
    }
    ds_pool_init(2);
    ds_kernels_allow_bf16dot(1);
    ds_kernels_select("auto", NULL);
}

TEST(tiny_values_are_flushed_identically) {
    int ran = 0;
    for (size_t v = 0; v < DS_ARRAY_LEN(k_var); v++) {
        if (!select_variant(&k_var[v])) continue;
        int out = 9, in = 77, n = 5;
        tk_lin t = fast_lin(DS_LIN_BF16, out, in);
        ds_bf16 *w = t.w, *x = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x, (size_t)n * in, 1.f);
        /* subnormal and tiny weights and activations, and products that would underflow */
        for (int i = 0; i < out * in; i += 7) w[i] = bf(i % 2 ? 0x1p-130f : -0x1p-60f);
        for (int i = 0; i < n * in; i += 5) x[i] = bf(i % 2 ? 0x1p-49f : -0x1p-127f);
        for (int i = 0; i < in; i++) { w[i] = bf(0x1p-45f); x[i] = bf(0x1p-45f); } /* row 0 x out 0: tiny sums */
        size_t bytes = ds_linear_prepare(&t.L);
        CHECK(bytes >= sizeof(ds_bf16) * (size_t)out * in, "flushed copy made (%zu bytes)", bytes);
        CHECK(forward_equals_reference(&t, x, n, 0) == 0, "%s dot=%d: tiny values", k_var[v].path, k_var[v].dot);
        float y0[9];
        ds_linear_forward(&t.L, x, 1, y0); /* out 0 of row 0: 77 x 2^-90 */
        CHECK(y0[0] == 77 * 0x1p-90f, "tiny products kept exactly: %a", y0[0]);
        free(x);
        tk_free(&t);
        /* every fast-tier float linear is copied at load (2 MiB pages, DECISIONS 110): exactly the
         * matrix plus a 64-byte header, BF16 and F32 alike, and the copy computes what the
         * published matrix does */
        tk_lin u = fast_lin(DS_LIN_BF16, out, in), f = fast_lin(DS_LIN_F32, out, in);
        for (int i = 0; i < out * in; i++) if (!(((ds_bf16 *)u.w)[i] & 0x7fff)) ((ds_bf16 *)u.w)[i] = bf(0.5f);
        CHECK(ds_linear_prepare(&u.L) == 64 + sizeof(ds_bf16) * (size_t)out * in, "BF16 copy: matrix + header");
        CHECK(ds_linear_prepare(&f.L) == 64 + sizeof(float) * (size_t)out * in, "F32 copy: matrix + header");
        ds_bf16 *x2 = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x2, (size_t)n * in, 1.f);
        CHECK(forward_equals_reference(&u, x2, n, 0) == 0, "%s: BF16 copy", k_var[v].path);
        CHECK(forward_equals_reference(&f, x2, n, 0) == 0, "%s: F32 copy", k_var[v].path);
        free(x2);
        tk_free(&u);
        tk_free(&f);
        ran++;
    }
    CHECK(ran >= 1, "no SIMD path ran");
    ds_kernels_allow_bf16dot(1);
    ds_kernels_select("auto", NULL);
}

TEST(non_finite_results_stay_non_finite) {
    for (size_t v = 0; v < DS_ARRAY_LEN(k_var); v++) {
        if (!select_variant(&k_var[v])) continue;
        tk_lin t = fast_lin(DS_LIN_BF16, 3, 40);
        ((ds_bf16 *)t.w)[5] = 0x7f80;            /* +inf weight in output 0 */
        ((ds_bf16 *)t.w)[40 + 6] = 0x7f7f;       /* huge weight in output 1 */
        ((ds_bf16 *)t.w)[80 + 6] = 0;            /* output 2 stays finite */
        ds_bf16 x[40];
        for (int i = 0; i < 40; i++) x[i] = bf(i == 6 ? 3e38f : 1.f);
        float y[3], yr[3];
        ds_ref_linear_f(&t.L, x, 1, yr);
        ds_linear_forward(&t.L, x, 1, y);
        for (int o = 0; o < 3; o++)
            CHECK(isfinite(y[o]) == isfinite(yr[o]) && (!isfinite(y[o]) || y[o] == yr[o]), "out %d: %g vs %g", o, y[o], yr[o]);
        CHECK(!isfinite(yr[0]) && !isfinite(yr[1]) && isfinite(yr[2]));
        tk_free(&t);
    }
    ds_kernels_allow_bf16dot(1);
    ds_kernels_select("auto", NULL);
}

TEST(exact_tier_is_untouched) {
    /* the same linear in the exact tier still matches the float64 contract */
    tk_lin t = tk_make(DS_LIN_BF16, 5, 300);
    ds_bf16 x[300];
    tk_fill_bf16(x, 300, 1.f);
    float y[5];
    ds_kernels_select("auto", NULL);
    ds_linear_forward(&t.L, x, 1, y);
    for (int o = 0; o < 5; o++) {
        double mag;
        float e = tk_oracle_f(&t, x, o, &mag);
        CHECK(fabs((double)y[o] - e) <= 1e-6 * mag + 1e-30, "exact tier out %d", o);
    }
    tk_free(&t);
}

/* The quantized families too, on every path: rows 1..40 bit-identical to the independent
 * int64 oracle, and each row of an n-row call equal to the same row run alone. */
TEST(quantized_rows_1_to_40_every_path_and_alone) {
    static const char *paths[] = {"reference", "avx2", "avx512-vnni"};
    for (size_t p = 0; p < DS_ARRAY_LEN(paths); p++) {
        if (!ds_kernels_available(paths[p])) { printf("  (%s not runnable here)\n", paths[p]); continue; }
        ds_kernels_select(paths[p], NULL);
        int runs = 0;
        for (int n = 1; n <= 40; n++) {
            ds_lin_fmt fmt = n % 2 ? DS_LIN_W4A8 : DS_LIN_W8A8;
            int out = 17 + 16 * (n % 3) + (n % 5), in = n % 4 == 0 ? 64 : 37 + 31 * (n % 7);
            tk_lin t = tk_make(fmt, out, in);
            if (n % 3 == 0) ds_linear_prepare(&t.L);
            int8_t *q = malloc((size_t)n * in);
            float *s = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n * out), *y1 = malloc(sizeof(float) * out);
            for (int i = 0; i < n * in; i++) q[i] = (int8_t)tk_range(-127, 127);
            for (int r = 0; r < n; r++) s[r] = (float)tk_range(1, 1000) * 1e-3f;
            tk_poison(y, (size_t)n * out);
            ds_linear_forward_q(&t.L, q, s, n, y);
            int bad = 0, alone = 0;
            for (int r = 0; r < n; r++) {
                for (int o = 0; o < out; o++) {
                    float e = tk_oracle_q(&t, q + (size_t)r * in, s[r], o);
                    bad += memcmp(&e, &y[(size_t)r * out + o], 4) != 0;
                }
                tk_poison(y1, out);
                ds_linear_forward_q(&t.L, q + (size_t)r * in, s + r, 1, y1);
                alone += memcmp(y1, y + (size_t)r * out, sizeof(float) * out) != 0;
            }
            CHECK(bad == 0 && alone == 0, "%s fmt %d n=%d out=%d in=%d: %d differ from the oracle, %d rows differ alone",
                  paths[p], fmt, n, out, in, bad, alone);
            runs++;
            free(q); free(s); free(y); free(y1);
            tk_free(&t);
        }
        printf("  %s: %d quantized linears (n = 1..40) equal the oracle, rows alone equal rows in the batch\n", paths[p], runs);
    }
    ds_kernels_select("auto", NULL);
}

int main(int argc, char **argv) {
    ds_log_set_level(DS_LOG_WARN);
    ds_pool_init(2);
    int rc = ds_test_main(argc, argv);
    ds_pool_shutdown();
    return rc;
}
