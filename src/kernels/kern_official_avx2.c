/* MXFP4 block sums on AVX2 (contract in kern_official.h).
 *
 * Two 32-input blocks per ymm register (16 code bytes each, one per 128-bit lane): the nibbles
 * index a byte table of |2·e2m1| (vpshufb), the sign bit negates the matching activation, and
 * vpmaddubsw (unsigned magnitude x signed activation, |pair| <= 3048: no saturation) plus vpmaddwd
 * against ones give four int32 partials per block, summed in integers.  A last odd block runs in
 * one 128-bit lane.  Every value is an exact integer, so the result equals the scalar one. */
#include "kernels/kern_official.h"
#include <math.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

static inline __m256i signed_act(__m256i nib, __m256i x) {
    __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(nib, _mm256_set1_epi8(8)), _mm256_set1_epi8(8));
    return _mm256_sub_epi8(_mm256_xor_si256(x, neg), neg);
}

void ds_mx_bsum_avx2(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum) {
    const __m256i lut = _mm256_setr_epi8(DS_MX_MAG_LUT, DS_MX_MAG_LUT), low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256i c = _mm256_loadu_si256((const __m256i *)(codes + 16 * b));
        __m256i lo = _mm256_and_si256(c, low4), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
        __m256i pe = _mm256_maddubs_epi16(_mm256_shuffle_epi8(lut, lo), signed_act(lo, _mm256_loadu_si256((const __m256i *)(xe + 16 * b))));
        __m256i po = _mm256_maddubs_epi16(_mm256_shuffle_epi8(lut, hi), signed_act(hi, _mm256_loadu_si256((const __m256i *)(xo + 16 * b))));
        __m256i s = _mm256_madd_epi16(_mm256_add_epi16(pe, po), ones);   /* |pe + po| <= 6096 */
        int32_t t[8];
        _mm256_storeu_si256((__m256i *)t, s);
        bsum[b] = t[0] + t[1] + t[2] + t[3];
        bsum[b + 1] = t[4] + t[5] + t[6] + t[7];
    }
    if (b < nb) {
        uint8_t cb[32] = {0};
        int8_t eb[32] = {0}, ob[32] = {0};
        for (int j = 0; j < 16; j++) { cb[j] = codes[16 * b + j]; eb[j] = xe[16 * b + j]; ob[j] = xo[16 * b + j]; }
        __m256i c = _mm256_loadu_si256((const __m256i *)cb);
        __m256i lo = _mm256_and_si256(c, low4), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
        __m256i pe = _mm256_maddubs_epi16(_mm256_shuffle_epi8(lut, lo), signed_act(lo, _mm256_loadu_si256((const __m256i *)eb)));
        __m256i po = _mm256_maddubs_epi16(_mm256_shuffle_epi8(lut, hi), signed_act(hi, _mm256_loadu_si256((const __m256i *)ob)));
        __m256i s = _mm256_madd_epi16(_mm256_add_epi16(pe, po), ones);
        int32_t t[8];
        _mm256_storeu_si256((__m256i *)t, s);
        bsum[b] = t[0] + t[1] + t[2] + t[3];
    }
}
/* One row (contract in kern_official.h): two blocks' totals per step, shifted by their exponent
 * above the row's smallest and added in two int64 lanes (exact, so order-free). */
double ds_mx_row_avx2(const uint8_t *codes, const uint8_t *sc, const int8_t *xe, const int8_t *xo, int nb) {
    int lo, hi;
    ds_mx_exp_range(sc, nb, &lo, &hi);
    if (hi - lo > DS_MX_EXACT_SPREAD) return ds_mx_row_sequential(ds_mx_bsum_avx2, codes, sc, xe, xo, nb);
    const __m256i lut = _mm256_setr_epi8(DS_MX_MAG_LUT, DS_MX_MAG_LUT), low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m128i vlo = _mm_set1_epi64x(lo);
    __m128i acc = _mm_setzero_si128();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256i c = _mm256_loadu_si256((const __m256i *)(codes + 16 * b));
        __m256i l4 = _mm256_and_si256(c, low4), h4 = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
        __m256i pe = _mm256_maddubs_epi16(_mm256_shuffle_epi8(lut, l4), signed_act(l4, _mm256_loadu_si256((const __m256i *)(xe + 16 * b))));
        __m256i po = _mm256_maddubs_epi16(_mm256_shuffle_epi8(lut, h4), signed_act(h4, _mm256_loadu_si256((const __m256i *)(xo + 16 * b))));
        __m256i s = _mm256_madd_epi16(_mm256_add_epi16(pe, po), ones);          /* 4 partials per block */
        __m128i t = _mm_hadd_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        t = _mm_hadd_epi32(t, t);                                                /* [blk b, blk b+1, ...] */
        uint16_t s2;
        memcpy(&s2, sc + b, 2);
        __m128i sh = _mm_sub_epi64(_mm_cvtepu8_epi64(_mm_cvtsi32_si128(s2)), vlo);
        acc = _mm_add_epi64(acc, _mm_sllv_epi64(_mm_cvtepi32_epi64(t), sh));
    }
    int64_t v[2];
    _mm_storeu_si128((__m128i *)v, acc);
    int64_t total = v[0] + v[1];
    if (b < nb) {
        int32_t last;
        ds_mx_bsum_avx2(codes + 16 * b, xe + 16 * b, xo + 16 * b, 1, &last);
        total += (int64_t)last * ((int64_t)1 << (sc[b] - lo));
    }
    return ldexp((double)total, lo - 128);
}
#pragma GCC pop_options
