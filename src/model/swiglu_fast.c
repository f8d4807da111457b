/* The fast tier's SwiGLU rows (MoE experts), eight values per step on AVX-512 and AVX2.
 *
 * Why this file: a batched decode step computes the SwiGLU of every (row, expert) pair, ~86,000
 * values per layer at 16 streams and 2.75 million in a 512-token prefill chunk, and the plain loop
 * spent ~7 ns per value, most of it in a scalar expf call: 4% of a 16-stream step.  The fast tier's
 * bits must not move (docs/NUMERICS.md), and its SwiGLU has always used libm's expf, so the vector
 * path computes expf the way glibc's x86-64 (FMA) build does: x·32/ln 2 = k + r in float64 by the
 * round-to-integer shift trick, 2^(k/32) from a 32-entry table, a cubic in r, one rounding to float.
 * Both vector paths were checked equal to libm's expf on all 2^32 inputs (0 differ), and the unit test
 * compares it with expf on a million values and every special case each run, on each path.  AVX-512
 * and AVX2 (+FMA) paths; elsewhere, and in sanitizer builds, the rows run the scalar loop with libm's
 * expf: the same bits. */
#include "model/swiglu_fast.h"
#include <math.h>
#include <string.h>

/* One output value, as the scalar loop has always computed it (the fast branch of moe.c). */
static inline ds_bf16 swiglu_one(float g, float v, float limit, float w, int weighted) {
    float gg, vv;
    ds_swiglu_inputs(g, v, limit, &gg, &vv);
    float y = gg / (1.0f + expf(-gg)) * vv;
    if (weighted) y = y * w;
    return ds_f32_to_bf16(y);
}

static void swiglu_scalar(const float *g, const float *v, int n, float limit, float w, int weighted, ds_bf16 *a) {
    for (int i = 0; i < n; i++) a[i] = swiglu_one(g[i], v[i], limit, w, weighted);
}

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
#include <immintrin.h>
#define SW_VECTOR 1
#define T512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#define T256 __attribute__((target("avx2,fma")))

/* 2^(i/32) rounded to double, minus i << 47 in the bit pattern: adding k << 47 for k = 32q + i then
 * gives 2^(k/32) (the exponent field gains q).  Derived with 80-digit decimal arithmetic. */
static const uint64_t k_exp2_32[32] __attribute__((aligned(64))) = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

#define EXP_INV_LN2_32 0x1.71547652b82fep+5   /* 32 / ln 2 */
#define EXP_SHIFT 0x1.8p52                    /* adding it rounds to an integer (ties to even) */
#define EXP_C0 0x1.c6af84b912394p-20          /* cubic in r for 2^(r/32) - 1 */
#define EXP_C1 0x1.ebfce50fac4f3p-13
#define EXP_C2 0x1.62e42ff0c52d6p-6
#define EXP_OVER 0x1.62e42ep6f                /* above: +inf */
#define EXP_UNDER -0x1.9fe368p6f              /* below: +0 */

/* overflow, underflow and NaN of eight values, as libm (the main path's value is discarded there) */
T256 static inline __m256 exp_specials(__m256 x, __m256 f) {
    f = _mm256_blendv_ps(f, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_OVER), _CMP_GT_OQ));
    f = _mm256_blendv_ps(f, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_UNDER), _CMP_LT_OQ));
    return _mm256_blendv_ps(f, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* AVX-512: eight values as one zmm of doubles; the table from registers (two 16-entry permutes). */
T512 static inline __m256 expf8_512(__m256 x) {
    const __m512d xd = _mm512_cvtps_pd(x), inv = _mm512_set1_pd(EXP_INV_LN2_32), sh = _mm512_set1_pd(EXP_SHIFT);
    const __m512d kd0 = _mm512_fmadd_pd(inv, xd, sh);
    const __m512d kd = _mm512_sub_pd(kd0, sh);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);      /* fma(inv, x, -kd) */
    const __m512i ki = _mm512_castpd_si512(kd0);
    const __m512i t0 = _mm512_load_si512(k_exp2_32), t1 = _mm512_load_si512(k_exp2_32 + 8);
    const __m512i t2 = _mm512_load_si512(k_exp2_32 + 16), t3 = _mm512_load_si512(k_exp2_32 + 24);
    const __m512i lo = _mm512_permutex2var_epi64(t0, ki, t1), hi = _mm512_permutex2var_epi64(t2, ki, t3);
    const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i tab = _mm512_mask_blend_epi64(upper, lo, hi);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(tab, _mm512_slli_epi64(ki, 47)));
    const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(EXP_C0), r, _mm512_set1_pd(EXP_C1));
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(EXP_C2), r, _mm512_set1_pd(1.0));
    y = _mm512_mul_pd(_mm512_fmadd_pd(p, _mm512_mul_pd(r, r), y), s);
    return exp_specials(x, _mm512_cvtpd_ps(y));
}

/* AVX2: two halves of four doubles; the table by a gather. */
T256 static inline __m128 expf4_256(__m128 x) {
    const __m256d xd = _mm256_cvtps_pd(x), inv = _mm256_set1_pd(EXP_INV_LN2_32), sh = _mm256_set1_pd(EXP_SHIFT);
    const __m256d kd0 = _mm256_fmadd_pd(inv, xd, sh);
    const __m256d kd = _mm256_sub_pd(kd0, sh);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i ki = _mm256_castpd_si256(kd0);
    const __m256i tab = _mm256_i64gather_epi64((const long long *)k_exp2_32, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(tab, _mm256_slli_epi64(ki, 47)));
    const __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(EXP_C0), r, _mm256_set1_pd(EXP_C1));
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(EXP_C2), r, _mm256_set1_pd(1.0));
    y = _mm256_mul_pd(_mm256_fmadd_pd(p, _mm256_mul_pd(r, r), y), s);
    return _mm256_cvtpd_ps(y);
}
T256 static inline __m256 expf8_256(__m256 x) {
    const __m256 f = _mm256_set_m128(expf4_256(_mm256_extractf128_ps(x, 1)), expf4_256(_mm256_castps256_ps128(x)));
    return exp_specials(x, f);
}

/* fp32 -> bf16 bits as ds_f32_to_bf16 (round to nearest even, NaN quieted), one per 32-bit lane. */
T256 static inline __m256i bf16_bits8(__m256 y) {
    const __m256i u = _mm256_castps_si256(y);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, nan);
}

/* The value a bf16 store keeps, and the eight 16-bit codes packed in order (AVX2: values <= 0xffff
 * pack unsaturated; the permute undoes the per-128-bit-lane order of the pack). */
#define ROUND_BF16_8(v) _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits8(v), 16))
T256 static inline __m128i pack8_256(__m256i b) {
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08));
}
T512 static inline __m128i pack8_512(__m256i b) { return _mm256_cvtepi32_epi16(b); }

/* SwiGLU of eight values, then the rows; the scalar comparisons as selects (a NaN passes through). */
#define SW_DEFINE(SUF, TARGET, EXPF8, PACK8)                                                               \
    TARGET static inline __m128i swiglu8_##SUF(__m256 g, __m256 v, float limit, float w, int weighted) {   \
        __m256 gg = ROUND_BF16_8(g), vv = ROUND_BF16_8(v);                                                \
        if (limit > 0) {                                                                                  \
            const __m256 lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit);                      \
            vv = _mm256_blendv_ps(vv, lim, _mm256_cmp_ps(vv, lim, _CMP_GT_OQ));                           \
            vv = _mm256_blendv_ps(vv, nlim, _mm256_cmp_ps(vv, nlim, _CMP_LT_OQ));                         \
            gg = _mm256_blendv_ps(gg, lim, _mm256_cmp_ps(gg, lim, _CMP_GT_OQ));                           \
        }                                                                                                 \
        const __m256 e = EXPF8(_mm256_xor_ps(gg, _mm256_set1_ps(-0.0f)));                                 \
        __m256 y = _mm256_mul_ps(_mm256_div_ps(gg, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), vv);          \
        if (weighted) y = _mm256_mul_ps(y, _mm256_set1_ps(w));                                            \
        return PACK8(bf16_bits8(y));                                                                      \
    }                                                                                                     \
    TARGET static void swiglu_rows_##SUF(const float *g, const float *v, int n, float limit, float w,       \
                                         int weighted, ds_bf16 *a) {                                      \
        int i = 0;                                                                                        \
        for (; i + 8 <= n; i += 8)                                                                        \
            _mm_storeu_si128((__m128i *)(a + i),                                                          \
                             swiglu8_##SUF(_mm256_loadu_ps(g + i), _mm256_loadu_ps(v + i), limit, w, weighted)); \
        swiglu_scalar(g + i, v + i, n - i, limit, w, weighted, a + i);                                    \
    }                                                                                                     \
    TARGET static float expf_one_##SUF(float x) {                                                         \
        float out[8];                                                                                     \
        _mm256_storeu_ps(out, EXPF8(_mm256_set1_ps(x)));                                                  \
        return out[0];                                                                                    \
    }
SW_DEFINE(512, T512, expf8_512, pack8_512)
SW_DEFINE(256, T256, expf8_256, pack8_256)
#else
#define SW_VECTOR 0
#endif

int ds_swiglu_path_available(int path) {
    if (path == DS_SWIGLU_SCALAR) return 1;
#if SW_VECTOR
    if (path == DS_SWIGLU_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (path == DS_SWIGLU_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
#endif
    return 0;
}

static int g_forced = -1;   /* tests may force a path; -1: the best this CPU has */

int ds_swiglu_force_path(int path) {
    const int prev = g_forced;
    g_forced = path;
    return prev;
}

#if SW_VECTOR
static int active_path(void) {
    if (g_forced >= 0) return ds_swiglu_path_available(g_forced) ? g_forced : DS_SWIGLU_SCALAR;
    return ds_swiglu_path_available(DS_SWIGLU_AVX512) ? DS_SWIGLU_AVX512
         : ds_swiglu_path_available(DS_SWIGLU_AVX2)   ? DS_SWIGLU_AVX2
                                                      : DS_SWIGLU_SCALAR;
}
#endif

float ds_swiglu_expf(float x) {
#if SW_VECTOR
    switch (active_path()) {
    case DS_SWIGLU_AVX512: return expf_one_512(x);
    case DS_SWIGLU_AVX2: return expf_one_256(x);
    default: break;
    }
#endif
    return expf(x);
}

void ds_swiglu_row_fast(const float *g, const float *v, int n, float limit, float w, int weighted, ds_bf16 *a) {
#if SW_VECTOR
    switch (active_path()) {
    case DS_SWIGLU_AVX512: swiglu_rows_512(g, v, n, limit, w, weighted, a); return;
    case DS_SWIGLU_AVX2: swiglu_rows_256(g, v, n, limit, w, weighted, a); return;
    default: break;
    }
#endif
    swiglu_scalar(g, v, n, limit, w, weighted, a);
}
