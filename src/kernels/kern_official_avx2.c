/* MXFP4 on AVX2 (contract in kern_official.h): row functions on the published layout, and the
 * panel route (end of file) for linears repacked into 16-row panels.
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
/* The 8 int32 partials of two blocks on the int32 route: the activation's sign moved onto the
 * weight (code ^ 8), the signed |2·e2m1| by vpshufb, vpmaddubsw of |x| (unsigned) against it
 * (|pair| <= 3048), the two nibble sets added (<= 6096) and paired by vpmaddwd — lane 4k+m holds
 * partial m of block k, 8 products. */
static inline __attribute__((always_inline)) __m256i pair_lanes(const uint8_t *codes, const ds_mx_act *a, int b) {
    const __m256i lut = _mm256_setr_epi8(DS_MX_SIGNED_LUT, DS_MX_SIGNED_LUT), low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256i c = _mm256_loadu_si256((const __m256i *)(codes + 16 * b));
    __m256i l4 = _mm256_xor_si256(_mm256_and_si256(c, low4), _mm256_loadu_si256((const __m256i *)(a->se + 16 * b)));
    __m256i h4 = _mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), low4), _mm256_loadu_si256((const __m256i *)(a->so + 16 * b)));
    __m256i pe = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(a->ae + 16 * b)), _mm256_shuffle_epi8(lut, l4));
    __m256i po = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(a->ao + 16 * b)), _mm256_shuffle_epi8(lut, h4));
    return _mm256_madd_epi16(_mm256_add_epi16(pe, po), ones);
}

/* int32 route (ds_mx_int32_ok; every trained row): lanes shifted by their block's exponent above
 * the row's smallest (the shifts of 8 blocks from one widening of 8 scale bytes and a lane permute
 * per pair) and added in int32 without overflow, then summed in int64: the exact total.  An odd
 * last block goes through the scalar block sum. */
static double row_int32(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb, int lo) {
    const __m256i vlo = _mm256_set1_epi32(lo);
    __m256i acc = _mm256_setzero_si256();
    int b = 0;
    for (; b + 8 <= nb; b += 8) {
        long long s8;
        memcpy(&s8, sc + b, 8);
        __m256i sh = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(s8)), vlo);
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            const __m256i idx = _mm256_setr_epi32(2 * g, 2 * g, 2 * g, 2 * g, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1);
            acc = _mm256_add_epi32(acc, _mm256_sllv_epi32(pair_lanes(codes, a, b + 2 * g), _mm256_permutevar8x32_epi32(sh, idx)));
        }
    }
    for (; b + 2 <= nb; b += 2) {
        __m256i sh = _mm256_setr_epi32(sc[b] - lo, sc[b] - lo, sc[b] - lo, sc[b] - lo, sc[b + 1] - lo, sc[b + 1] - lo, sc[b + 1] - lo,
                                       sc[b + 1] - lo);
        acc = _mm256_add_epi32(acc, _mm256_sllv_epi32(pair_lanes(codes, a, b), sh));
    }
    int32_t v[8];
    _mm256_storeu_si256((__m256i *)v, acc);
    int64_t total = 0;
    for (int i = 0; i < 8; i++) total += v[i];
    if (b < nb) {
        int32_t last;
        ds_mx_bsum_avx2(codes + 16 * b, a->xe + 16 * b, a->xo + 16 * b, 1, &last);
        total += (int64_t)last * ((int64_t)1 << (sc[b] - lo));
    }
    return ds_mx_scale_total(total, lo);
}

/* One row (contract in kern_official.h): the int32 route where its lanes cannot overflow, else two
 * blocks' totals per step, shifted by their exponent above the row's smallest and added in two
 * int64 lanes (exact, so order-free). */
double ds_mx_row_avx2(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb) {
    const int8_t *xe = a->xe, *xo = a->xo;
    int lo, hi;
    ds_mx_exp_range(sc, nb, &lo, &hi);
    if (hi - lo > DS_MX_EXACT_SPREAD) return ds_mx_row_sequential(ds_mx_bsum_avx2, codes, sc, xe, xo, nb);
    if (ds_mx_int32_ok((nb + 1) / 2, hi - lo)) return row_int32(codes, sc, a, nb, lo);
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
    return ds_mx_scale_total(total, lo);
}
/* FP8 fast-tier decode, 8 codes per step (the rule of ds_fp8_bf16_one, lane by lane). */
void ds_fp8_decode_avx2(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst) {
    const __m256i m7f = _mm256_set1_epi32(0x7f), bias = _mm256_set1_epi32(120 << 23), m7 = _mm256_set1_epi32(7);
    const __m256i m78 = _mm256_set1_epi32(0x78), m80 = _mm256_set1_epi32(0x80), mff = _mm256_set1_epi32(0xff);
    const __m256i below = _mm256_set1_epi32(DS_FF_MIN_EXP_FIELD - 1), zero = _mm256_setzero_si256();
    int i = 0;
    for (; i + 8 <= in; i += 8) {
        long long q8;
        memcpy(&q8, codes + i, 8);
        __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(q8));
        __m256 vn = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(c, m7f), 20), bias));
        __m256 vs = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, m7)), _mm256_set1_ps(0x1p-9f));
        __m256i isn = _mm256_cmpeq_epi32(_mm256_and_si256(c, m78), zero);          /* all ones: subnormal code */
        __m256 v = _mm256_mul_ps(_mm256_blendv_ps(vn, vs, _mm256_castsi256_ps(isn)), _mm256_set1_ps(ds_fp8_scale_f(sc[i / 32])));
        __m256i r = _mm256_or_si256(_mm256_castps_si256(v), _mm256_slli_epi32(_mm256_and_si256(c, m80), 24));
        __m256i h = _mm256_srli_epi32(r, 16);
        __m256i keep = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 7), mff), below);
        h = _mm256_and_si256(h, keep);
        __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));   /* values < 2^16 */
        _mm_storeu_si128((__m128i *)(dst + i), packed);
    }
    for (; i < in; i++) dst[i] = ds_fp8_bf16_one(codes[i], ds_fp8_scale_f(sc[i / 32]));
}
/* One MXFP4 row as flushed bf16 (the fast tier with E4M3 activations; the rule of ds_mx_decode_bf16).
 * The 16 code bytes of a block give its 32 nibbles in input order (low nibble = even input); each
 * nibble's bf16 word for e2m1 comes from two byte tables (-0 as +0, as the flush leaves it), and a
 * nonzero word gets s-127 added to its exponent field.  The nonzero e2m1 values have exponent fields
 * 126..129, so for s in [78, 252] every result is a normal bf16 >= 2^-50 and below infinity: the
 * same word as the scalar rule.  Other blocks go through the scalar rule. */
void ds_mx_decode_bf16_avx2(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst) {
    const __m128i lo_tab = _mm_setr_epi8(0, 0, (char)0x80, (char)0xc0, 0, 0x40, (char)0x80, (char)0xc0,
                                         0, 0, (char)0x80, (char)0xc0, 0, 0x40, (char)0x80, (char)0xc0);
    const __m128i hi_tab = _mm_setr_epi8(0, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40,
                                         0, (char)0xbf, (char)0xbf, (char)0xbf, (char)0xc0, (char)0xc0, (char)0xc0, (char)0xc0);
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m256i mag = _mm256_set1_epi16(0x7fff);
    for (int b = 0; b < in / 32; b++) {
        const uint8_t s = sc[b];
        if (s < 78 || s > 252) {
            ds_mx_decode_bf16(codes + 16 * b, sc + b, 32, dst + 32 * b);
            continue;
        }
        const __m256i add = _mm256_set1_epi16((short)((s - 127) * 128));
        __m128i c = _mm_loadu_si128((const __m128i *)(codes + 16 * b));
        __m128i lo = _mm_and_si128(c, nib), hi = _mm_and_si128(_mm_srli_epi16(c, 4), nib);
        __m128i n[2] = {_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)};   /* inputs 0-15, 16-31 */
        for (int h = 0; h < 2; h++) {
            __m128i wl = _mm_shuffle_epi8(lo_tab, n[h]), wh = _mm_shuffle_epi8(hi_tab, n[h]);
            __m256i w = _mm256_set_m128i(_mm_unpackhi_epi8(wl, wh), _mm_unpacklo_epi8(wl, wh));
            __m256i zero = _mm256_cmpeq_epi16(_mm256_and_si256(w, mag), _mm256_setzero_si256());
            w = _mm256_add_epi16(w, _mm256_andnot_si256(zero, add));
            _mm256_storeu_si256((__m256i *)(dst + 32 * b + 16 * h), w);
        }
    }
}

/* ---- panels (layout and contract in kern_official.h) ----
 * A ymm holds half a panel (8 output rows: the first or the second 32 bytes of each tile).  The
 * unsigned weights (0..24) meet the signed activations in vpmaddubsw (|pair| <= 6096), the low and
 * high nibbles' pairs are added in int16 (|.| <= 12192) and vpmaddwd against ones gives each lane
 * its 8 products, added to the block's start -12·Σx; then the lane's block shift, int32 stretches
 * of at most `chunk` blocks, summed in int64.  Up to 4 activation rows per tile: 4 stretch and 4
 * block accumulators, the two decoded halves and 3 constants fill 15 of the 16 registers. */
#define MXP2_NR 4
#define MXP2_NP 2   /* panels one row walks at once (mxp2_one_row) */
#define MXP2_AI static inline __attribute__((always_inline))
#define MXP2_UNROLL _Pragma("GCC unroll 4")   /* every index of the register arrays a constant */
/* One or two rows take both halves of a panel in one pass, so each 64-byte line of tiles is used
 * whole when it arrives (the stream the prefetchers see is one line per line used), and prefetch
 * ahead into L2 as the other streaming kernels (decision 145); with more rows the halves are
 * separate passes (the registers) and the second reads the panel back from L2. */
#define MXP2_PREFETCH 1024

MXP2_AI void mxp2_stretch(const ds_mxpack *P, int p, int dp, const int NP, int half0, const int NH, const int NR,
                          const uint8_t *const *xr, size_t part, size_t init, int b0, int b1, __m256i a[MXP2_NP][2][MXP2_NR]) {
    const __m256i lut = _mm256_setr_epi8(DS_MX_U12_LUT, DS_MX_U12_LUT), low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const uint8_t *tp[MXP2_NP];
    MXP2_UNROLL
    for (int j = 0; j < NP; j++) {
        tp[j] = ds_mx_panel(P, p + j * dp);
        MXP2_UNROLL
        for (int h = 0; h < NH; h++)
            MXP2_UNROLL
            for (int i = 0; i < NR; i++) a[j][h][i] = _mm256_setzero_si256();
    }
    for (int b = b0; b < b1; b++) {
        __m256i blk[MXP2_NP][2][MXP2_NR];
        MXP2_UNROLL
        for (int i = 0; i < NR; i++) {
            int32_t v;
            memcpy(&v, xr[i] + init + 4 * (size_t)b, 4);
            MXP2_UNROLL
            for (int j = 0; j < NP; j++) blk[j][0][i] = blk[j][1][i] = _mm256_set1_epi32(v);
        }
        MXP2_UNROLL
        for (int t = 0; t < 4; t++) {
            const size_t off = ds_mx_tiles_off(b) + 64 * (size_t)t + 32 * (size_t)half0, xo = 16 * (size_t)b + 4 * (size_t)t;
            MXP2_UNROLL
            for (int j = 0; j < NP; j++) {
                if (NH == 2) _mm_prefetch((const char *)(tp[j] + off + MXP2_PREFETCH), _MM_HINT_T1);
                MXP2_UNROLL
                for (int h = 0; h < NH; h++) {
                    const __m256i w = _mm256_loadu_si256((const __m256i *)(tp[j] + off + 32 * (size_t)h));
                    const __m256i wl = _mm256_shuffle_epi8(lut, _mm256_and_si256(w, low4));
                    const __m256i wh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(w, 4), low4));
                    MXP2_UNROLL
                    for (int i = 0; i < NR; i++) {
                        int32_t e4, o4;
                        memcpy(&e4, xr[i] + xo, 4);
                        memcpy(&o4, xr[i] + part + xo, 4);
                        const __m256i pr = _mm256_add_epi16(_mm256_maddubs_epi16(wl, _mm256_set1_epi32(e4)),
                                                            _mm256_maddubs_epi16(wh, _mm256_set1_epi32(o4)));
                        blk[j][h][i] = _mm256_add_epi32(blk[j][h][i], _mm256_madd_epi16(pr, ones));
                    }
                }
            }
        }
        MXP2_UNROLL
        for (int j = 0; j < NP; j++)
            MXP2_UNROLL
            for (int h = 0; h < NH; h++) {
                long long s8;
                memcpy(&s8, tp[j] + ds_mx_shifts_off(b) + 8 * (size_t)(half0 + h), 8);
                const __m256i sh = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(s8));
                MXP2_UNROLL
                for (int i = 0; i < NR; i++) a[j][h][i] = _mm256_add_epi32(a[j][h][i], _mm256_sllv_epi32(blk[j][h][i], sh));
            }
    }
}

/* Halves [half0, half0 + NH) of panels [p, p + NP) for NR rows: stretch by stretch (the shortest
 * of the panels' stretches, so none can overflow; the int64 totals are exact however the blocks
 * are cut), then y = (float)(total · 2^(lo−128) · xs). */
MXP2_AI void mxp2_tile(const ds_mxpack *P, int p, int dp, const int NP, int half0, const int NH, const int NR,
                       const uint8_t *const *xr, size_t part, size_t init, const float *xs, float *const *yr) {
    int F = P->chunk[p];
    for (int j = 1; j < NP; j++) F = DS_MIN(F, P->chunk[p + j * dp]);
    int64_t tot[MXP2_NP][2][MXP2_NR][8] = {{{{0}}}};
    for (int b0 = 0; b0 < P->nb; b0 += F) {
        __m256i a[MXP2_NP][2][MXP2_NR];
        mxp2_stretch(P, p, dp, NP, half0, NH, NR, xr, part, init, b0, DS_MIN(P->nb, b0 + F), a);
        for (int j = 0; j < NP; j++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < NR; i++) {
                    int32_t v[8];
                    _mm256_storeu_si256((__m256i *)v, a[j][h][i]);
                    for (int l = 0; l < 8; l++) tot[j][h][i][l] += v[l];
                }
    }
    for (int j = 0; j < NP; j++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < NR; i++)
                for (int l = 0; l < 8; l++) {
                    const int o = 16 * (p + j * dp) + 8 * (half0 + h) + l;
                    if (o < P->out) yr[i][o] = (float)(ds_mx_scale_total(tot[j][h][i][l], P->lo[o]) * (double)xs[i]);
                }
}

/* Rows [r, r + nr) of panel p: both halves at once for one or two rows, else half by half in
 * tiles of up to 4 rows. */
static void mxp2_panel_rows(const ds_mxpack *P, int p, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                            const float *xs, int r, int nr, float *y, int ystride) {
    const uint8_t *xr[MXP2_NR];
    float *yr[MXP2_NR];
    for (int i = 0; i < nr; i++) xr[i] = act + (size_t)(r + i) * rowstride, yr[i] = y + (size_t)(r + i) * ystride;
    const int two_halves = 16 * p + 8 < P->out;
    if (nr <= 2 && two_halves) {
        if (nr == 2) mxp2_tile(P, p, 0, 1, 0, 2, 2, xr, part, init, xs + r, yr);
        else mxp2_tile(P, p, 0, 1, 0, 2, 1, xr, part, init, xs + r, yr);
        return;
    }
    for (int half = 0; half < 1 + two_halves; half++) switch (nr) {
        case 4: mxp2_tile(P, p, 0, 1, half, 1, 4, xr, part, init, xs + r, yr); break;
        case 3: mxp2_tile(P, p, 0, 1, half, 1, 3, xr, part, init, xs + r, yr); break;
        case 2: mxp2_tile(P, p, 0, 1, half, 1, 2, xr, part, init, xs + r, yr); break;
        default: mxp2_tile(P, p, 0, 1, half, 1, 1, xr, part, init, xs + r, yr); break;
        }
}

/* One activation row against panels [p0, p1): the first and the second half of the range walked
 * side by side, panel p0 + i beside panel p0 + h + i, so a thread keeps two weight streams in flight
 * and each stream runs on into its next panel as one sequential read (pairs of neighbouring panels
 * started the second stream cold at every pair: 0.9x on 6 KiB panels; decision 181).  A pair
 * needs both panels on the int32 route with both halves; other panels, and the last of an odd
 * range, run alone. */
static void mxp2_one_row(const ds_mxpack *P, const uint8_t *act, size_t part, size_t init, const float *xs, int p0,
                         int p1, float *y) {
    const uint8_t *xr[1] = {act};
    float *yr[1] = {y};
    const int h = (p1 - p0) / 2;
    for (int a = p0; a < p0 + h; a++) {
        const int b = a + h;
        if (P->chunk[a] && P->chunk[b] && 16 * b + 8 < P->out) {
            mxp2_tile(P, a, h, 2, 0, 2, 1, xr, part, init, xs, yr);
            continue;
        }
        if (P->chunk[a]) mxp2_panel_rows(P, a, act, 0, part, init, xs, 0, 1, y, 0);
        if (P->chunk[b]) mxp2_panel_rows(P, b, act, 0, part, init, xs, 0, 1, y, 0);
    }
    if ((p1 - p0) % 2 && P->chunk[p1 - 1]) mxp2_panel_rows(P, p1 - 1, act, 0, part, init, xs, 0, 1, y, 0);
}

/* Panels [p0, p1) for rows [0, n): rows in chunks whose activations stay in L2 (as the AVX-512
 * route); one row walks two panels at once (mxp2_one_row), more rows each panel against tiles of
 * up to 4 rows; panels of chunk 0 are skipped. */
enum { MXP2_CHUNK_BYTES = 256 << 10 };
void ds_mx_panels_avx2(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                       const float *xs, int n, int p0, int p1, float *y, int ystride) {
    const int per_row = (int)DS_MAX((size_t)1, (size_t)P->nb * 36), chunk = DS_MAX(MXP2_NR, MXP2_CHUNK_BYTES / per_row / MXP2_NR * MXP2_NR);
    for (int c0 = 0; c0 < n; c0 += chunk) {
        const int c1 = DS_MIN(n, c0 + chunk);
        if (c1 - c0 == 1) {
            mxp2_one_row(P, act + (size_t)c0 * rowstride, part, init, xs + c0, p0, p1, y + (size_t)c0 * ystride);
            continue;
        }
        for (int p = p0; p < p1; p++) {
            if (!P->chunk[p]) continue;
            for (int r = c0; r < c1; r += MXP2_NR)
                mxp2_panel_rows(P, p, act, rowstride, part, init, xs, r, DS_MIN(MXP2_NR, c1 - r), y, ystride);
        }
    }
}

#pragma GCC pop_options
