/* The float64 reductions of the reference path (ops.h): a scalar version and an AVX2 version with
 * the same evaluation order, so results are identical bits whichever runs.
 *
 * Why bother: attention scores, index scores and hyper-connection mixes are float64 dot products
 * of 128..20480 elements (docs/NUMERICS.md rule 2), and in scalar code they dominate a step of a
 * small model.  The AVX2 path keeps eight float64 lanes in two registers — lane j sums the elements
 * i ≡ j (mod 8) — and combines them in the fixed tree of ops.h; products are formed exactly
 * (bf16·bf16 in fp32, fp32·bf16 in float64) and no fused multiply-add is used, so every lane sees
 * the same roundings as the scalar code. */
#include "model/ops.h"
#include <immintrin.h>
#include <stdlib.h>

static double combine8(const double l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static double dot_bb_scalar(const ds_bf16 *a, const ds_bf16 *b, int n) {
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] += (double)(ds_bf16_to_f32(a[i + j]) * ds_bf16_to_f32(b[i + j]));
    double s = combine8(l);
    for (; i < n; i++) s += (double)(ds_bf16_to_f32(a[i]) * ds_bf16_to_f32(b[i]));
    return s;
}

static double dot_fb_scalar(const float *a, const ds_bf16 *b, int n) {
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) l[j] += (double)a[i + j] * (double)ds_bf16_to_f32(b[i + j]);
    double s = combine8(l);
    for (; i < n; i++) s += (double)a[i] * (double)ds_bf16_to_f32(b[i]);
    return s;
}

static void axpy_scalar(double *acc, float p, const ds_bf16 *k, int n) {
    const double pd = p;
    for (int i = 0; i < n; i++) acc[i] += pd * (double)ds_bf16_to_f32(k[i]);
}

/* ---- AVX2 ---- */

__attribute__((target("avx2"))) static inline __m256 bf16x8(const ds_bf16 *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) static double hsum8(__m256d lo, __m256d hi) {
    /* lo holds lanes 0..3, hi lanes 4..7: t = (l0+l4, l1+l5, l2+l6, l3+l7) */
    __m256d t = _mm256_add_pd(lo, hi);
    __m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));   /* (t0+t2, t1+t3) */
    return _mm_cvtsd_f64(u) + _mm_cvtsd_f64(_mm_unpackhi_pd(u, u));
}

__attribute__((target("avx2"))) static double dot_bb_avx2(const ds_bf16 *a, const ds_bf16 *b, int n) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pr = _mm256_mul_ps(bf16x8(a + i), bf16x8(b + i));          /* exact: 8-bit mantissas */
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(pr)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(pr, 1)));
    }
    double s = hsum8(lo, hi);
    for (; i < n; i++) s += (double)(ds_bf16_to_f32(a[i]) * ds_bf16_to_f32(b[i]));
    return s;
}

__attribute__((target("avx2"))) static double dot_fb_avx2(const float *a, const ds_bf16 *b, int n) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 av = _mm256_loadu_ps(a + i), bv = bf16x8(b + i);
        __m256d plo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(av)), _mm256_cvtps_pd(_mm256_castps256_ps128(bv)));
        __m256d phi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(av, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(bv, 1)));
        lo = _mm256_add_pd(lo, plo);
        hi = _mm256_add_pd(hi, phi);
    }
    double s = hsum8(lo, hi);
    for (; i < n; i++) s += (double)a[i] * (double)ds_bf16_to_f32(b[i]);
    return s;
}

__attribute__((target("avx2"))) static void axpy_avx2(double *acc, float p, const ds_bf16 *k, int n) {
    const __m256d pd = _mm256_set1_pd((double)p);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 kv = bf16x8(k + i);
        __m256d a0 = _mm256_loadu_pd(acc + i), a1 = _mm256_loadu_pd(acc + i + 4);
        a0 = _mm256_add_pd(a0, _mm256_mul_pd(pd, _mm256_cvtps_pd(_mm256_castps256_ps128(kv))));
        a1 = _mm256_add_pd(a1, _mm256_mul_pd(pd, _mm256_cvtps_pd(_mm256_extractf128_ps(kv, 1))));
        _mm256_storeu_pd(acc + i, a0);
        _mm256_storeu_pd(acc + i + 4, a1);
    }
    for (; i < n; i++) acc[i] += (double)p * (double)ds_bf16_to_f32(k[i]);
}

/* ---- dispatch (decided once at start-up; DSFLASH_MODEL_SIMD=0 forces the scalar code) ---- */

static int use_avx2;
__attribute__((constructor)) static void pick_path(void) {
    const char *e = getenv("DSFLASH_MODEL_SIMD");
    __builtin_cpu_init();
    use_avx2 = !(e && e[0] == '0') && __builtin_cpu_supports("avx2");
}

double ds_dot_bb(const ds_bf16 *a, const ds_bf16 *b, int n) { return use_avx2 ? dot_bb_avx2(a, b, n) : dot_bb_scalar(a, b, n); }
double ds_dot_fb(const float *a, const ds_bf16 *b, int n) { return use_avx2 ? dot_fb_avx2(a, b, n) : dot_fb_scalar(a, b, n); }
void ds_axpy_bf16(double *acc, float p, const ds_bf16 *k, int n) {
    if (use_avx2) axpy_avx2(acc, p, k, n);
    else axpy_scalar(acc, p, k, n);
}

double ds_dot_bb_path(int simd, const ds_bf16 *a, const ds_bf16 *b, int n) {
    return simd && __builtin_cpu_supports("avx2") ? dot_bb_avx2(a, b, n) : dot_bb_scalar(a, b, n);
}
double ds_dot_fb_path(int simd, const float *a, const ds_bf16 *b, int n) {
    return simd && __builtin_cpu_supports("avx2") ? dot_fb_avx2(a, b, n) : dot_fb_scalar(a, b, n);
}
void ds_axpy_bf16_path(int simd, double *acc, float p, const ds_bf16 *k, int n) {
    if (simd && __builtin_cpu_supports("avx2")) axpy_avx2(acc, p, k, n);
    else axpy_scalar(acc, p, k, n);
}
