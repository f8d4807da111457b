/* Per-row building blocks of the forward pass against independent float64 evaluations written
 * straight from MODEL.md (no shared code with src/model): the truncated Sinkhorn (exact eps
 * placement, 20 iterations, never to convergence), hc_mixes, collapse/expand, RMSNorm, and the
 * top-k rule (ties to the lower index, -inf never chosen). */
#include "check.h"
#include "model/hc.h"
#include "model/ops.h"
#include "tools/quant_fp8.h"
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = 88172645463325252ULL;
static double urand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Sinkhorn in double, literally as MODEL.md §2.3 writes it. */
static void sinkhorn64(double *C, int n, int iters, double eps) {
    for (int i = 0; i < n; i++) {
        double mx = C[i * n];
        for (int j = 1; j < n; j++) mx = fmax(mx, C[i * n + j]);
        double s = 0;
        for (int j = 0; j < n; j++) s += exp(C[i * n + j] - mx);
        for (int j = 0; j < n; j++) C[i * n + j] = exp(C[i * n + j] - mx) / s + eps;
    }
    for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += C[i * n + j];
        for (int i = 0; i < n; i++) C[i * n + j] /= s + eps;
    }
    for (int it = 1; it < iters; it++) {
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int j = 0; j < n; j++) s += C[i * n + j];
            for (int j = 0; j < n; j++) C[i * n + j] /= s + eps;
        }
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += C[i * n + j];
            for (int i = 0; i < n; i++) C[i * n + j] /= s + eps;
        }
    }
}

TEST(sinkhorn_matches_float64_reading) {
    for (int trial = 0; trial < 200; trial++) {
        float C[16];
        double D[16];
        for (int i = 0; i < 16; i++) { C[i] = (float)(urand() * 16 - 8); D[i] = C[i]; }
        ds_hc_sinkhorn(C, 4, 20, 1e-6f);
        sinkhorn64(D, 4, 20, (double)1e-6f);
        for (int i = 0; i < 16; i++) CHECK(fabs(C[i] - D[i]) < 2e-6, "trial %d [%d] %.9g vs %.9g", trial, i, C[i], D[i]);
        /* columns are normalized last: each column sums to ~1 (up to the eps term) */
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int i = 0; i < 4; i++) s += C[i * 4 + j];
            CHECK(fabs(s - 1) < 1e-5, "column %d sums to %.9g", j, s);
        }
    }
}

TEST(sinkhorn_is_truncated_not_converged) {
    /* a very peaked matrix is far from doubly stochastic after 20 iterations: the rows differ
     * measurably from 1, which a run-to-convergence implementation would not show */
    float C[16];
    double D[16];
    for (int i = 0; i < 16; i++) { C[i] = (i == 1 || i == 6) ? 30.0f : (i % 5 == 0 ? 8.0f : -20.0f); D[i] = C[i]; }
    ds_hc_sinkhorn(C, 4, 20, 1e-6f);
    sinkhorn64(D, 4, 20, (double)1e-6f);
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        double s = 0;
        for (int j = 0; j < 4; j++) s += C[i * 4 + j];
        worst = fmax(worst, fabs(s - 1));
    }
    for (int i = 0; i < 16; i++) CHECK(fabs(C[i] - D[i]) < 2e-6, "[%d] %.9g vs %.9g", i, C[i], D[i]);
    CHECK(worst > 1e-4, "row sums off by %.3g", worst);
}

TEST(hc_mixes_collapse_expand) {
    const int HC = 4, D = 64, nm = 24;
    float *fn = malloc(sizeof(float) * nm * HC * D), base[24], scale[3] = {0.7f, -1.3f, 2.1f};
    for (int i = 0; i < nm * HC * D; i++) fn[i] = (float)(urand() - 0.5);
    for (int i = 0; i < nm; i++) base[i] = (float)(urand() - 0.5);
    ds_bf16 X[256], R[256], Y[256], y[64];
    for (int i = 0; i < 256; i++) X[i] = ds_f32_to_bf16((float)(urand() * 4 - 2));
    ds_hc_params p = {HC, D, 20, 1e-6f, 1e-20, fn, base, scale};
    ds_hc_mix mx;
    ds_hc_mixes(&p, X, &mx);
    /* float64 reading of the formulas */
    double ss = 0;
    for (int i = 0; i < 256; i++) ss += (double)ds_bf16_to_f32(X[i]) * ds_bf16_to_f32(X[i]);
    double rs = 1 / sqrt(ss / 256 + 1e-20), m[24];
    for (int i = 0; i < nm; i++) {
        double d = 0;
        for (int j = 0; j < 256; j++) d += (double)fn[i * 256 + j] * ds_bf16_to_f32(X[j]);
        m[i] = d * rs;
    }
    for (int k = 0; k < 4; k++) {
        double pre = 1 / (1 + exp(-(m[k] * scale[0] + base[k]))) + 1e-6;
        double post = 2 / (1 + exp(-(m[4 + k] * scale[1] + base[4 + k])));
        CHECK(fabs(mx.pre[k] - pre) < 1e-6 && fabs(mx.post[k] - post) < 2e-6, "copy %d", k);
    }
    double C[16];
    for (int i = 0; i < 16; i++) C[i] = m[8 + i] * scale[2] + base[8 + i];
    sinkhorn64(C, 4, 20, 1e-6);
    for (int i = 0; i < 16; i++) CHECK(fabs(mx.comb[i] - C[i]) < 1e-5, "comb %d", i);
    /* collapse: bf16 of the weighted sum */
    ds_hc_collapse(X, mx.pre, HC, D, y);
    for (int d = 0; d < D; d++) {
        double s = 0;
        for (int k = 0; k < 4; k++) s += (double)mx.pre[k] * ds_bf16_to_f32(X[k * D + d]);
        CHECK(y[d] == ds_f32_to_bf16((float)s), "collapse %d", d);
    }
    /* expand: Y[j] = bf16(post_j·y + Σ_i C[i][j]·R[i]) */
    memcpy(R, X, sizeof X);
    ds_hc_expand(y, R, &mx, HC, D, Y);
    for (int j = 0; j < 4; j++)
        for (int d = 0; d < D; d++) {
            double s = (double)mx.post[j] * ds_bf16_to_f32(y[d]);
            for (int i = 0; i < 4; i++) s += (double)mx.comb[i * 4 + j] * ds_bf16_to_f32(R[i * D + d]);
            CHECK(Y[j * D + d] == ds_f32_to_bf16((float)s), "expand %d %d", j, d);
        }
    free(fn);
}

TEST(rmsnorm_against_float64) {
    ds_bf16 x[96], y[96];
    float w[96];
    for (int i = 0; i < 96; i++) { x[i] = ds_f32_to_bf16((float)(urand() * 10 - 5)); w[i] = (float)(urand() * 2); }
    ds_rmsnorm_bf16(x, w, 96, 1e-20, y);
    double ss = 0;
    for (int i = 0; i < 96; i++) ss += (double)ds_bf16_to_f32(x[i]) * ds_bf16_to_f32(x[i]);
    double rs = 1 / sqrt(ss / 96 + 1e-20);
    int exact = 0;
    for (int i = 0; i < 96; i++) {
        double want = ds_bf16_to_f32(x[i]) * rs * w[i];
        double got = ds_bf16_to_f32(y[i]);
        CHECK(fabs(got - want) <= fabs(want) * (1.0 / 256) + 1e-30, "%d: %g vs %g", i, got, want);
        exact += y[i] == ds_f32_to_bf16((float)want);
    }
    CHECK(exact >= 94, "bf16 results equal the float64 rounding for %d of 96", exact);
    /* an all-zero row stays zero (eps keeps it finite) */
    memset(x, 0, sizeof x);
    ds_rmsnorm_bf16(x, w, 96, 1e-20, y);
    for (int i = 0; i < 96; i++) CHECK(y[i] == 0);
}

TEST(topk_ties_and_minus_infinity) {
    float s[10] = {1, 5, 5, -INFINITY, 3, 5, 2, -INFINITY, 4, 0};
    int32_t out[10], heap[10];
    float next;
    int n = ds_topk_next(s, 10, 4, out, heap, &next);
    CHECK(n == 4 && out[0] == 1 && out[1] == 2 && out[2] == 5 && out[3] == 8, "%d: %d %d %d %d", n, out[0], out[1], out[2], out[3]);
    CHECK(next == 3, "next %g", next);
    n = ds_topk_next(s, 10, 9, out, heap, &next);
    CHECK(n == 8 && next == -INFINITY, "only finite entries are chosen (%d)", n);
    for (int i = 0; i < n; i++) CHECK(s[out[i]] != -INFINITY);
    /* large random arrays: compare with a selection by repeated scans */
    float *big = malloc(sizeof(float) * 5000);
    int32_t *o2 = malloc(sizeof(int32_t) * 64), *hp = malloc(sizeof(int32_t) * 64);
    for (int i = 0; i < 5000; i++) big[i] = (float)(int)(urand() * 300);   /* many ties */
    n = ds_topk(big, 5000, 64, o2, hp);
    char *used = calloc(5000, 1);
    for (int k = 0; k < 64; k++) {
        int best = -1;
        for (int i = 0; i < 5000; i++)
            if (!used[i] && (best < 0 || big[i] > big[best])) best = i;
        used[best] = 1;
        CHECK(o2[k] == best, "rank %d: %d vs %d", k, o2[k], best);
    }
    free(big); free(o2); free(hp); free(used);
}

TEST(simd_reductions_match_scalar_bits) {
    /* the AVX2 reductions keep the scalar evaluation order: identical results, and within float64
     * rounding of an exact long-double evaluation */
    int lens[6] = {1, 7, 8, 64, 129, 20480};
    ds_bf16 *a = malloc(sizeof(ds_bf16) * 20480), *b = malloc(sizeof(ds_bf16) * 20480);
    float *f = malloc(sizeof(float) * 20480);
    double *acc0 = malloc(sizeof(double) * 20480), *acc1 = malloc(sizeof(double) * 20480);
    for (int i = 0; i < 20480; i++) {
        a[i] = ds_f32_to_bf16((float)(urand() * 8 - 4));
        b[i] = ds_f32_to_bf16((float)(urand() * 2 - 1) * (float)(1 << (i % 7)));
        f[i] = (float)(urand() - 0.5) * 3.0f;
    }
    for (int li = 0; li < 6; li++) {
        int n = lens[li];
        double s0 = ds_dot_bb_path(0, a, b, n), s1 = ds_dot_bb_path(1, a, b, n);
        double t0 = ds_dot_fb_path(0, f, b, n), t1 = ds_dot_fb_path(1, f, b, n);
        CHECK(s0 == s1 && t0 == t1, "n %d: bb %.17g/%.17g fb %.17g/%.17g", n, s0, s1, t0, t1);
        long double e = 0, ef = 0, mag = 0;
        for (int i = 0; i < n; i++) {
            e += (long double)ds_bf16_to_f32(a[i]) * ds_bf16_to_f32(b[i]);
            ef += (long double)f[i] * ds_bf16_to_f32(b[i]);
            mag += fabsl((long double)f[i] * ds_bf16_to_f32(b[i])) + fabsl((long double)ds_bf16_to_f32(a[i]) * ds_bf16_to_f32(b[i]));
        }
        CHECK(fabsl(s0 - e) <= mag * 1e-15L && fabsl(t0 - ef) <= mag * 1e-15L, "n %d accuracy", n);
        for (int i = 0; i < n; i++) acc0[i] = acc1[i] = (double)f[i];
        ds_axpy_bf16_path(0, acc0, 0.37f, b, n);
        ds_axpy_bf16_path(1, acc1, 0.37f, b, n);
        CHECK(!memcmp(acc0, acc1, sizeof(double) * (size_t)n), "axpy n %d", n);
    }
    free(a); free(b); free(f); free(acc0); free(acc1);
}

TEST(official_number_formats_match_the_quantizer_decoders) {
    /* the model's decoders (official FP8/MXFP4 weights, FP8 Engram rows) against the quantizer's
     * independent ones, for every code */
    for (int b = 0; b < 256; b++) {
        float x = ds_e4m3_value((uint8_t)b), y = ds_e4m3_to_f32((uint8_t)b);
        CHECK((isnan(x) && isnan(y)) || (x == y && signbit(x) == signbit(y)), "E4M3 0x%02x: %g vs %g", b, x, y);
        float e = ds_e8m0_value((uint8_t)b), f = ds_e8m0_to_f32((uint8_t)b);
        CHECK((isnan(e) && isnan(f)) || e == f, "E8M0 %d", b);
    }
    CHECK(ds_e4m3_value(0x7e) == 448.0f && ds_e4m3_value(0x01) == ldexpf(1.0f, -9), "max and smallest subnormal");
    const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int n = 0; n < 16; n++) {
        CHECK(ds_e2m1_value(n) == ds_e2m1_to_f32((uint8_t)n), "E2M1 %d", n);
        CHECK(fabsf(ds_e2m1_value(n)) == grid[n & 7] && (n < 8 || n == 8 || ds_e2m1_value(n) < 0), "E2M1 table %d", n);
    }
}

/* fp32 -> bf16 against an oracle in exact double arithmetic: the two bf16 neighbours of the value
 * (2^128 standing for the one past the largest finite), the nearer one, ties to the even mantissa;
 * NaN quieted with its high half kept.  Both the scalar rule and the vectorized row rounding. */
static uint16_t bf16_oracle(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff0000u, sign = u & 0x80000000u;
    if (lo == u) return (uint16_t)(u >> 16);
    float fv, fl;
    memcpy(&fv, &u, 4);
    memcpy(&fl, &lo, 4);
    uint32_t hi = lo + 0x10000u;
    double v = fabs((double)fv), a = fabs((double)fl), b;
    if ((hi & 0x7fffffffu) == 0x7f800000u) b = ldexp(1.0, 128);
    else { float fh; memcpy(&fh, &hi, 4); b = fabs((double)fh); }
    uint32_t pick = v - a < b - v ? lo : v - a > b - v ? hi : ((lo >> 16) & 1 ? hi : lo);
    return (uint16_t)((pick & 0x7fffffffu) >> 16 | sign >> 16);
}

TEST(bf16_rounding_matches_exact_oracle) {
    enum { N = 1 << 20 };
    float *x = malloc(sizeof(float) * N);
    ds_bf16 *y = malloc(sizeof(ds_bf16) * N);
    uint64_t st = 88172645463325252ull;
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                     0xffbfffffu, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x3f808000u, 0x3f818000u,
                                     0x3f807fffu, 0x00008000u, 0x00018000u, 0x80007fffu, 0x00000001u};
    for (int i = 0; i < N; i++) {
        st ^= st << 13; st ^= st >> 7; st ^= st << 17;
        uint32_t u = i < (int)(sizeof edges / 4) ? edges[i] : (uint32_t)(st >> 16);
        if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u;   /* exact ties */
        memcpy(&x[i], &u, 4);
    }
    ds_round_rows_bf16(x, N, y);
    int bad_scalar = 0, bad_rows = 0;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        uint16_t want = bf16_oracle(u);
        bad_scalar += ds_f32_to_bf16(x[i]) != want;
        bad_rows += y[i] != want;
    }
    CHECK(bad_scalar == 0, "%d of %d scalar roundings differ from the oracle", bad_scalar, N);
    CHECK(bad_rows == 0, "%d of %d row roundings differ from the oracle", bad_rows, N);
    free(x);
    free(y);
}


/* ds_topk_set against a selection written here: rank every finite entry by (score desc, index
 * asc) with repeated scans, keep the first k, list them by index; the k-th and (k+1)-th scores. */
static void topk_set_case(const float *s, int n, int k) {
    int32_t *want = malloc(sizeof(int32_t) * (size_t)(k + 1)), *got = malloc(sizeof(int32_t) * (size_t)(k + 1));
    int32_t *heap = malloc(sizeof(int32_t) * (size_t)(k + 1));
    char *used = calloc((size_t)n, 1);
    int m = 0;
    float kth_want = 0, next_want = -INFINITY;
    for (int r = 0; r <= k; r++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (!used[i] && s[i] != -INFINITY && (best < 0 || s[i] > s[best])) best = i;
        if (best < 0) break;
        used[best] = 1;
        if (r == k) { next_want = s[best]; break; }
        want[m++] = best;
        kth_want = s[best];
    }
    for (int i = 1; i < m; i++)   /* by index */
        for (int j = i; j > 0 && want[j - 1] > want[j]; j--) { int32_t t = want[j]; want[j] = want[j - 1]; want[j - 1] = t; }
    float kth = 12345, next = 12345;
    const int got_n = ds_topk_set(s, n, k, got, heap, &kth, &next);
    CHECK(got_n == m, "n %d k %d: %d selected, want %d", n, k, got_n, m);
    for (int i = 0; i < m && i < got_n; i++) CHECK(got[i] == want[i], "n %d k %d: entry %d is %d, want %d", n, k, i, got[i], want[i]);
    if (m > 0) CHECK(kth == kth_want, "n %d k %d: k-th %g, want %g", n, k, kth, kth_want);
    CHECK(next == next_want, "n %d k %d: next %g, want %g", n, k, next, next_want);
    free(want); free(got); free(heap); free(used);
}

TEST(topk_set_matches_ranking) {
    float s[10] = {1, 5, 5, -INFINITY, 3, 5, 2, -INFINITY, 4, 0};
    for (int k = 1; k <= 10; k++) topk_set_case(s, 10, k);
    float z[6] = {-0.0f, 0.0f, -1, 0.0f, -0.0f, 1};   /* -0 and +0 are one score: the lower index wins */
    for (int k = 1; k <= 6; k++) topk_set_case(z, 6, k);
    int n = 20000;
    float *big = malloc(sizeof(float) * (size_t)n);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < n; i++)
            big[i] = round == 0 ? (float)(int)(urand() * 300) - 150          /* many ties, both signs */
                   : round == 1 ? (float)((urand() - 0.5) * 1e-3)            /* one exponent range */
                   : (urand() < 0.3 ? -INFINITY : (float)(urand() * 8));     /* masked entries */
        for (int k = 1; k <= 600; k += 199) topk_set_case(big, n, k);   /* the heap's side of the cut */
        for (int k = 1; k <= 600; k += 199) topk_set_case(big, 16384, k);   /* the radix side */
        topk_set_case(big, 700, 512);
    }
    free(big);
    /* a NaN hands the call to the heap: the same set in index order */
    float q[6] = {3, NAN, 1, 2, 5, 4};
    int32_t out[6], heap[6], ref[6];
    float kth, next;
    const int m = ds_topk_set(q, 6, 3, out, heap, &kth, &next), mr = ds_topk_next(q, 6, 3, ref, heap, NULL);
    CHECK(m == mr, "%d vs %d", m, mr);
    for (int i = 1; i < m; i++) CHECK(out[i - 1] < out[i], "index order");
    for (int i = 0; i < m; i++) {
        int found = 0;
        for (int j = 0; j < mr; j++) found |= out[i] == ref[j];
        CHECK(found, "entry %d of the NaN case is the heap's", out[i]);
    }
}

RUN_ALL()
