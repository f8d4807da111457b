/* FP8 E4M3 fast-tier linears on AVX2 with the weights decoded in registers: the order of
 * kern_official_fp8_avx512.c (the fast BF16 order on the decoded matrix), but the codes decode
 * straight to fp32 (below): AVX2 has no bf16 product, so a bf16 word would only be widened again.
 * The 16 fp32 lanes of the order sit in two ymm (lanes 0-7: inputs 0-15 of a block, lanes 8-15:
 * inputs 16-31), each lane the odd element first, then the even one, as the AVX2 BF16 kernel does. */
#include "kernels/kern_official.h"
#include <stdint.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#define AI static inline __attribute__((always_inline))
#define UNROLL4 _Pragma("GCC unroll 4")

/* Block scales decoded in registers here: the AVX-512 file's safe range cut at 134, where 2^(s-7)
 * is still an fp32 (larger block scales never occur in a trained release; they take the scalar
 * rule).  In it, the code's low seven bits shifted to bits 20-26 of an fp32 with its sign in bit
 * 31 are the code's value times 2^-120 (a subnormal code gives an fp32 subnormal of the same
 * ratio), and one multiply by 2^(s-7) gives value · 2^(s-127) exactly: the result is a normal
 * number >= 2^-50 with at most four significant bits, i.e. the very bf16 the scalar rule gives,
 * already widened.  Five integer operations and two multiplies per 16 codes, where decoding to
 * bf16 words and splitting them took fifteen. */
#define FP8_AVX2_INREG_SMAX 134

/* 16 codes (inputs 2l and 2l+1 in the word l) -> the odd and the even weights of the 8 lanes. */
AI void fp8_decode16_f32(const uint8_t *codes, __m256 g, __m256 *wo, __m256 *we) {
    const __m256i d = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)codes));   /* sign of the odd code in 16-31 */
    const __m256i keep = _mm256_set1_epi32((int)0x87f00000u);
    const __m256i odd = _mm256_and_si256(_mm256_slli_epi32(d, 12), keep);
    const __m256i even = _mm256_and_si256(_mm256_srai_epi32(_mm256_slli_epi32(d, 24), 4), keep);
    *wo = _mm256_mul_ps(_mm256_castsi256_ps(odd), g);
    *we = _mm256_mul_ps(_mm256_castsi256_ps(even), g);
}

AI float fp8_reduce2(__m256 lo, __m256 hi) {   /* the lane tree of kernels.h */
    __m256 h = _mm256_add_ps(lo, hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

/* Half h (inputs 16h..16h+15) of block b for RO rows as odd and even fp32 weights, in registers
 * (scale byte s in range, block whole). */
AI void fp8_half_inreg(const uint8_t *row0, size_t in, int b, int h, uint8_t s, const int RO, __m256 wo[4], __m256 we[4]) {
    const uint32_t gbits = (uint32_t)(s + 120) << 23;   /* 2^(s-7) */
    float gf;
    memcpy(&gf, &gbits, sizeof gf);
    const __m256 g = _mm256_set1_ps(gf);
    UNROLL4
    for (int j = 0; j < RO; j++) {
        if (h == 0) _mm_prefetch((const char *)(row0 + (size_t)(j + 8) * in + b), _MM_HINT_T0);   /* two 4-row groups ahead */
        fp8_decode16_f32(row0 + (size_t)j * in + b + 16 * h, g, &wo[j], &we[j]);
    }
}

/* The same weights through ds_fp8_bf16_one: any scale, a partial last block. */
static void fp8_half_scalar(const uint8_t *row0, size_t in, int b, int h, uint8_t s, int RO, __m256 wo[4], __m256 we[4]) {
    const float f = ds_fp8_scale_f(s);
    const int lo = b + 16 * h, cnt = (int)DS_MAX(0, DS_MIN(16, (int)in - lo));
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (int j = 0; j < RO; j++) {
        ds_bf16 tmp[16] = {0};
        for (int i = 0; i < cnt; i++) tmp[i] = ds_fp8_bf16_one(row0[(size_t)j * in + lo + i], f);
        const __m256i w = _mm256_loadu_si256((const __m256i *)tmp);
        wo[j] = _mm256_castsi256_ps(_mm256_and_si256(w, hi));
        we[j] = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
}

void ds_fp8_widen_f32_avx2(const ds_ffw *W, int o, int RO, int k0, int k1, float *dst, int dstride) {
    const int scc = (W->in + 31) / 32, whole = W->in & ~31;
    for (int j = 0; j < RO; j++) {
        const uint8_t *row = (const uint8_t *)W->w + (size_t)(o + j) * (size_t)W->in;
        const uint8_t *srow = W->e8m0 + (size_t)((o + j) / 32) * scc;
        float *d = dst + (size_t)j * dstride;
        for (int b = k0; b < k1; b += 32, d += 32) {
            const uint8_t s = srow[b / 32];
            if (b < whole && s >= DS_FP8_SAFE_SMIN && s <= FP8_AVX2_INREG_SMAX) {
                const uint32_t gbits = (uint32_t)(s + 120) << 23;   /* 2^(s-7), as fp8_half_inreg */
                float gf;
                memcpy(&gf, &gbits, sizeof gf);
                const __m256 g = _mm256_set1_ps(gf);
                for (int h = 0; h < 2; h++) {
                    __m256 wo, we;
                    fp8_decode16_f32(row + b + 16 * h, g, &wo, &we);
                    _mm256_storeu_ps(d + 8 * h, wo);
                    _mm256_storeu_ps(d + 16 + 8 * h, we);
                }
                continue;
            }
            const float f = ds_fp8_scale_f(s);   /* any scale, a partial last block: the scalar rule */
            for (int i = 0; i < 32; i++) {
                const ds_bf16 v = b + i < W->in ? ds_fp8_bf16_one(row[b + i], f) : 0;
                const int h = i / 16, l = (i % 16) / 2;
                d[(i & 1 ? 0 : 16) + 8 * h + l] = ds_bf16_to_f32(v);
            }
        }
    }
}

/* acc[j][i] += half h of block b: RO weight rows x RR activation rows (layout DS_FF_BF16_FMA). */
AI void fp8_half_fma(const ds_ffact *X, int r, int b, int h, const int RO, const int RR, const __m256 wo[4],
                     const __m256 we[4], __m256 acc[4][2]) {
    UNROLL4
    for (int i = 0; i < RR; i++) {
        const float *xf = (const float *)X->x + (size_t)(r + i) * X->stride + b;
        const __m256 xo = _mm256_loadu_ps(xf + 8 * h), xe = _mm256_loadu_ps(xf + 16 + 8 * h);
        UNROLL4
        for (int j = 0; j < RO; j++) acc[j][i] = _mm256_fmadd_ps(we[j], xe, _mm256_fmadd_ps(wo[j], xo, acc[j][i]));
    }
}

/* Inputs [0, end) of the output rows of o's scale tile: the leading whole blocks whose scales are
 * in range (one scan per 32 output rows, shared by every tile of them). */
static int fp8_inreg_prefix(const ds_linear *L, int o) {
    const int scc = (L->in + 31) / 32, whole = L->in & ~31;
    const uint8_t *srow = L->w_e8m0 + (size_t)(o / 32) * scc;
    int end = 0;
    while (end < whole && srow[end / 32] >= DS_FP8_SAFE_SMIN && srow[end / 32] <= FP8_AVX2_INREG_SMAX) end += 32;
    return end;
}

static void fp8_prefix_of(const ds_linear *L, int o, int *group, int *end) {
    if (*group != o / 32) *group = o / 32, *end = fp8_inreg_prefix(L, o);
}

/* RO output rows (one scale tile) x RR activation rows.  The blocks before fast_end run a loop
 * with nothing else in it (a fallback inside the loop cost the registers of the accumulators: 1.4x
 * slower); the rest, if any, takes the block-by-block choice. */
AI void fp8_tile2(const ds_linear *L, const ds_ffact *X, int o, int r, const int RO, const int RR, int fast_end, float *y,
                  int ystride) {
    __m256 a0[4][2], a1[4][2];   /* the two halves' accumulators */
    UNROLL4
    for (int j = 0; j < RO; j++)
        UNROLL4
        for (int i = 0; i < RR; i++) a0[j][i] = a1[j][i] = _mm256_setzero_ps();
    const size_t in = (size_t)L->in;
    const int scc = (L->in + 31) / 32, whole = L->in & ~31;
    const uint8_t *row0 = (const uint8_t *)L->w + (size_t)o * in, *srow = L->w_e8m0 + (size_t)(o / 32) * scc;
    __m256 wo[4], we[4];
    for (int b = 0; b < fast_end; b += 32) {
        fp8_half_inreg(row0, in, b, 0, srow[b / 32], RO, wo, we);
        fp8_half_fma(X, r, b, 0, RO, RR, wo, we, a0);
        fp8_half_inreg(row0, in, b, 1, srow[b / 32], RO, wo, we);
        fp8_half_fma(X, r, b, 1, RO, RR, wo, we, a1);
    }
    for (int b = fast_end; b < X->kpad; b += 32) {
        const uint8_t s = srow[b / 32];
        const int inreg = b < whole && s >= DS_FP8_SAFE_SMIN && s <= FP8_AVX2_INREG_SMAX;
        for (int h = 0; h < 2; h++) {
            if (inreg) fp8_half_inreg(row0, in, b, h, s, RO, wo, we);
            else fp8_half_scalar(row0, in, b, h, s, RO, wo, we);
            fp8_half_fma(X, r, b, h, RO, RR, wo, we, h ? a1 : a0);
        }
    }
    UNROLL4
    for (int i = 0; i < RR; i++)
        UNROLL4
        for (int j = 0; j < RO; j++) y[(size_t)(r + i) * ystride + o + j] = fp8_reduce2(a0[j][i], a1[j][i]);
}

/* Half h of block b of one row (codes at row, scale byte s) as odd and even fp32 weights: in
 * registers where the scale is in range and the block whole, else by the scalar rule. */
AI void fp8_half_row(const uint8_t *row, size_t in, int b, int h, uint8_t s, int inreg, __m256 *wo, __m256 *we) {
    if (inreg) {
        const uint32_t gbits = (uint32_t)(s + 120) << 23;   /* 2^(s-7), as fp8_half_inreg */
        float gf;
        memcpy(&gf, &gbits, sizeof gf);
        fp8_decode16_f32(row + b + 16 * h, _mm256_set1_ps(gf), wo, we);
        return;
    }
    __m256 o4[4], e4[4];
    fp8_half_scalar(row, in, b, h, s, 1, o4, e4);
    *wo = o4[0];
    *we = e4[0];
}

/* One activation row against output rows o + j·dr (j < 4), rows of different scale tiles: each row
 * its own scale byte per block.  Blocks before fast_end (the shortest of the four rows' in-range
 * prefixes) decode in registers with nothing else in the loop; the rest block by block.  Each
 * row's codes stream on sequentially (prefetched 1 KiB ahead, running into its own next row). */
static void fp8_tile_parts(const ds_linear *L, const ds_ffact *X, int o, int dr, int fast_end, float *y) {
    __m256 a0[4], a1[4];
    const size_t in = (size_t)L->in;
    const int scc = (L->in + 31) / 32, whole = L->in & ~31;
    const uint8_t *row[4], *srow[4];
    UNROLL4
    for (int j = 0; j < 4; j++) {
        a0[j] = a1[j] = _mm256_setzero_ps();
        row[j] = (const uint8_t *)L->w + (size_t)(o + j * dr) * in;
        srow[j] = L->w_e8m0 + (size_t)((o + j * dr) / 32) * scc;
    }
    const float *xf = (const float *)X->x;
    for (int b = 0; b < fast_end; b += 32) {
        UNROLL4
        for (int j = 0; j < 4; j++) {
            _mm_prefetch((const char *)(row[j] + b + 1024), _MM_HINT_T0);
            const uint32_t gbits = (uint32_t)(srow[j][b / 32] + 120) << 23;
            float gf;
            memcpy(&gf, &gbits, sizeof gf);
            const __m256 g = _mm256_set1_ps(gf);
            __m256 wo, we;
            fp8_decode16_f32(row[j] + b, g, &wo, &we);
            a0[j] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xf + b + 16), _mm256_fmadd_ps(wo, _mm256_loadu_ps(xf + b), a0[j]));
            fp8_decode16_f32(row[j] + b + 16, g, &wo, &we);
            a1[j] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xf + b + 24), _mm256_fmadd_ps(wo, _mm256_loadu_ps(xf + b + 8), a1[j]));
        }
    }
    for (int b = fast_end; b < X->kpad; b += 32)
        for (int j = 0; j < 4; j++) {
            const uint8_t s = srow[j][b / 32];
            const int inreg = b < whole && s >= DS_FP8_SAFE_SMIN && s <= FP8_AVX2_INREG_SMAX;
            for (int h = 0; h < 2; h++) {
                __m256 wo, we;
                fp8_half_row(row[j], in, b, h, s, inreg, &wo, &we);
                __m256 *acc = h ? &a1[j] : &a0[j];
                *acc = _mm256_fmadd_ps(we, _mm256_loadu_ps(xf + b + 16 + 8 * h), _mm256_fmadd_ps(wo, _mm256_loadu_ps(xf + b + 8 * h), *acc));
            }
        }
    UNROLL4
    for (int j = 0; j < 4; j++) y[o + j * dr] = fp8_reduce2(a0[j], a1[j]);
}

/* One activation row: tiles of 4 output rows from the four quarters of the range (decision 184),
 * so each row's codes stream on sequentially into its own next row (4 neighbouring rows of one
 * scale tile began three streams cold at every tile); the rows left over one by one. */
static void fp8_one_row(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y) {
    const int q = (o1 - o0) / 4;
    int group[4] = {-1, -1, -1, -1}, end[4] = {0, 0, 0, 0};
    for (int a = o0; a < o0 + q; a++) {
        int fast_end = INT32_MAX;
        for (int j = 0; j < 4; j++) {
            fp8_prefix_of(L, a + j * q, &group[j], &end[j]);
            fast_end = DS_MIN(fast_end, end[j]);
        }
        fp8_tile_parts(L, X, a, q, fast_end, y);
    }
    int g = -1, e = 0;
    for (int o = o0 + 4 * q; o < o1; o++) {
        fp8_prefix_of(L, o, &g, &e);
        fp8_tile2(L, X, o, 0, 1, 1, e, y, 0);
    }
}

/* Several activation rows: 2 x 2 tiles, so the accumulators and weight halves fit the 16 ymm
 * registers. */
void ds_fp8_ff_avx2(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    if (X->n == 1) {
        fp8_one_row(L, X, o0, o1, y);
        return;
    }
    int o = o0, group = -1, end = 0;   /* the prefix of scale-tile row `group` */
    for (; o + 2 <= o1 && o / 32 == (o + 1) / 32; o += 2) {
        fp8_prefix_of(L, o, &group, &end);
        int r = 0;
        for (; r + 2 <= X->n; r += 2) fp8_tile2(L, X, o, r, 2, 2, end, y, ystride);
        if (r < X->n) fp8_tile2(L, X, o, r, 2, 1, end, y, ystride);
    }
    for (; o < o1; o++) {
        fp8_prefix_of(L, o, &group, &end);
        for (int r = 0; r < X->n; r++) fp8_tile2(L, X, o, r, 1, 1, end, y, ystride);
    }
}
#pragma GCC pop_options
