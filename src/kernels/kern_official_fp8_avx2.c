/* FP8 E4M3 fast-tier linears on AVX2 with the weights decoded in registers: the decode and the
 * order of kern_official_fp8_avx512.c (see there for why and for the bit-exactness argument), 16
 * codes per ymm.  AVX2 has no vpermw, so the subnormal table T (8 bf16 words, one xmm) is read
 * with vpshufb: word m is bytes 2m and 2m+1, index word m·0x202 + 0x100.  The 16 fp32 lanes of
 * the order sit in two ymm (lanes 0-7: inputs 0-15 of a block, lanes 8-15: inputs 16-31); the
 * high half of each 32-bit word is the odd element, the low half shifted up the even one, odd
 * first, as the AVX2 BF16 kernel does. */
#include "kernels/kern_official.h"
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#define AI static inline __attribute__((always_inline))
#define UNROLL4 _Pragma("GCC unroll 4")

typedef struct { __m256i k, t; } fp8_sreg2;

AI fp8_sreg2 fp8_scale_regs2(uint8_t s, __m256i t0) {
    const __m256i not_zero_entry = _mm256_setr_epi16(0, -1, -1, -1, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1, -1, -1);
    fp8_sreg2 r;
    r.k = _mm256_set1_epi16((short)((s - 7) * 128));
    r.t = _mm256_add_epi16(t0, _mm256_and_si256(_mm256_set1_epi16((short)((s - 127) * 128)), not_zero_entry));
    return r;
}

/* 16 codes -> 16 bf16 words (8 pairs). */
AI __m256i fp8_decode16(const uint8_t *codes, fp8_sreg2 sr) {
    /* sign-extended, so the shift leaves the sign in bit 15 for the mask to keep (the AVX-512
     * decode's rule: code 0x80 gives -0, which changes no sum) */
    __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)codes));
    __m256i v = _mm256_add_epi16(_mm256_and_si256(_mm256_slli_epi16(c, 4), _mm256_set1_epi16((short)0x87f0)), sr.k);
    __m256i idx = _mm256_add_epi16(_mm256_mullo_epi16(_mm256_and_si256(c, _mm256_set1_epi16(7)), _mm256_set1_epi16(0x202)),
                                   _mm256_set1_epi16(0x100));
    __m256i is_sub = _mm256_cmpeq_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x78)), _mm256_setzero_si256());
    v = _mm256_blendv_epi8(v, _mm256_shuffle_epi8(sr.t, idx), is_sub);
    return _mm256_or_si256(v, _mm256_and_si256(c, _mm256_set1_epi16((short)0x8000)));   /* the table's sign */
}

AI float fp8_reduce2(__m256 lo, __m256 hi) {   /* the lane tree of kernels.h */
    __m256 h = _mm256_add_ps(lo, hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

/* Half h (inputs 16h..16h+15) of block b for RO rows: in registers in the safe scale range on a
 * whole block, else through ds_fp8_bf16_one (same words). */
AI void fp8_half_words(const uint8_t *row0, size_t in, int b, int h, uint8_t s, int full, __m256i t0, const int RO, __m256i w[4]) {
    if (full && s >= DS_FP8_SAFE_SMIN && s <= DS_FP8_SAFE_SMAX) {
        fp8_sreg2 sr = fp8_scale_regs2(s, t0);
        UNROLL4
        for (int j = 0; j < RO; j++) {
            if (h == 0) _mm_prefetch((const char *)(row0 + (size_t)(j + 8) * in + b), _MM_HINT_T0);   /* two 4-row groups ahead */
            w[j] = fp8_decode16(row0 + (size_t)j * in + b + 16 * h, sr);
        }
        return;
    }
    const float f = ds_fp8_scale_f(s);
    const int lo = b + 16 * h, cnt = (int)DS_MAX(0, DS_MIN(16, (int)in - lo));
    UNROLL4
    for (int j = 0; j < RO; j++) {
        ds_bf16 tmp[16] = {0};
        for (int i = 0; i < cnt; i++) tmp[i] = ds_fp8_bf16_one(row0[(size_t)j * in + lo + i], f);
        w[j] = _mm256_loadu_si256((const __m256i *)tmp);
    }
}

/* RO output rows (one scale tile) x RR activation rows (layout DS_FF_BF16_FMA). */
AI void fp8_tile2(const ds_linear *L, const ds_ffact *X, int o, int r, const int RO, const int RR, __m256i t0, float *y,
                  int ystride) {
    __m256 acc[4][2][2];
    UNROLL4
    for (int j = 0; j < RO; j++)
        UNROLL4
        for (int i = 0; i < RR; i++) acc[j][i][0] = acc[j][i][1] = _mm256_setzero_ps();
    const size_t in = (size_t)L->in;
    const int scc = (L->in + 31) / 32, whole = L->in & ~31;
    const uint8_t *row0 = (const uint8_t *)L->w + (size_t)o * in, *srow = L->w_e8m0 + (size_t)(o / 32) * scc;
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int b = 0; b < X->kpad; b += 32)
        for (int h = 0; h < 2; h++) {
            __m256i w[4];
            __m256 wo[4], we[4];
            fp8_half_words(row0, in, b, h, srow[b / 32], b < whole, t0, RO, w);
            UNROLL4
            for (int j = 0; j < RO; j++) {
                wo[j] = _mm256_castsi256_ps(_mm256_and_si256(w[j], hi));
                we[j] = _mm256_castsi256_ps(_mm256_slli_epi32(w[j], 16));
            }
            UNROLL4
            for (int i = 0; i < RR; i++) {
                const float *xf = (const float *)X->x + (size_t)(r + i) * X->stride + b;
                __m256 xo = _mm256_loadu_ps(xf + 8 * h), xe = _mm256_loadu_ps(xf + 16 + 8 * h);
                UNROLL4
                for (int j = 0; j < RO; j++)
                    acc[j][i][h] = _mm256_fmadd_ps(we[j], xe, _mm256_fmadd_ps(wo[j], xo, acc[j][i][h]));
            }
        }
    UNROLL4
    for (int i = 0; i < RR; i++)
        UNROLL4
        for (int j = 0; j < RO; j++) y[(size_t)(r + i) * ystride + o + j] = fp8_reduce2(acc[j][i][0], acc[j][i][1]);
}

/* One activation row: 4 output rows (8 accumulators, 8 weight halves); several: 2 x 2 tiles, so
 * the accumulators and weight halves fit the 16 ymm registers. */
void ds_fp8_ff_avx2(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    uint16_t tab[8] = {0};
    for (int m = 1; m < 8; m++) tab[m] = ds_fp8_bf16_one((uint32_t)m, 1.0f);   /* m·2^-9 */
    const __m256i t0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab));
    int o = o0;
    if (X->n == 1) {
        for (; o + 4 <= o1 && o / 32 == (o + 3) / 32; o += 4) fp8_tile2(L, X, o, 0, 4, 1, t0, y, ystride);
    } else {
        for (; o + 2 <= o1 && o / 32 == (o + 1) / 32; o += 2) {
            int r = 0;
            for (; r + 2 <= X->n; r += 2) fp8_tile2(L, X, o, r, 2, 2, t0, y, ystride);
            if (r < X->n) fp8_tile2(L, X, o, r, 2, 1, t0, y, ystride);
        }
    }
    for (; o < o1; o++)
        for (int r = 0; r < X->n; r++) fp8_tile2(L, X, o, r, 1, 1, t0, y, ystride);
}
#pragma GCC pop_options
