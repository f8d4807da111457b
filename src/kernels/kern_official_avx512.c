/* MXFP4 on AVX-512 VNNI (contract in kern_official.h).
 *
 * Row functions on the published layout: four 32-input blocks per zmm register (16 code bytes per
 * 128-bit lane): the nibbles index a byte table of |2·e2m1| (vpshufb), the sign bit negates the
 * matching activation under a mask, and VPDPBUSD (unsigned magnitude x signed activation)
 * accumulates four int32 partials per block, summed in integers; a last partial group goes
 * through a zero-padded copy.  They serve the panels that hold a row of wide exponent spread.
 * The panel route (end of file) runs everything else: 16 output rows per register, each decoded
 * tile shared by up to 6 activation rows.  All exact integers: equal to the scalar path.
 * Compiled twice like kern_avx512.c: natively, and by the unit tests with DS_AVX512_EMULATE where
 * SIMDe supplies the intrinsics (checked on hosts without AVX-512). */
#include "kernels/kern_official.h"
#include <math.h>
#include <string.h>

#ifdef DS_AVX512_EMULATE
#pragma GCC diagnostic ignored "-Wpsabi"
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define DS_MX_BSUM_AVX512 ds_mx_bsum_avx512_emu
#define DS_MX_ROW_AVX512 ds_mx_row_avx512_emu
#define DS_MX_PANELS_AVX512 ds_mx_panels_avx512_emu
static inline __m512i mx_emu_cvtepu8_epi32(__m128i a) {   /* missing from this SIMDe release */
    uint8_t b[16];
    int32_t t[16];
    _mm_storeu_si128((__m128i *)b, a);
    for (int i = 0; i < 16; i++) t[i] = b[i];
    return _mm512_loadu_si512(t);
}
#define MX_CVTEPU8_EPI32 mx_emu_cvtepu8_epi32
#define MX_UNROLL4
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include <immintrin.h>
#define DS_MX_BSUM_AVX512 ds_mx_bsum_avx512
#define DS_MX_ROW_AVX512 ds_mx_row_avx512
#define DS_MX_PANELS_AVX512 ds_mx_panels_avx512
#define MX_CVTEPU8_EPI32 _mm512_cvtepu8_epi32
#define MX_UNROLL4 _Pragma("GCC unroll 4")
#endif

static inline __m512i group_sums(const uint8_t *codes, const int8_t *xe, const int8_t *xo) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(DS_MX_MAG_LUT)), low4 = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8);
    const __m512i zero = _mm512_setzero_si512();
    __m512i c = _mm512_loadu_si512(codes);
    __m512i lo = _mm512_and_si512(c, low4), hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
    __m512i x0 = _mm512_loadu_si512(xe), x1 = _mm512_loadu_si512(xo);
    x0 = _mm512_mask_sub_epi8(x0, _mm512_test_epi8_mask(lo, eight), zero, x0);
    x1 = _mm512_mask_sub_epi8(x1, _mm512_test_epi8_mask(hi, eight), zero, x1);
    __m512i acc = _mm512_dpbusd_epi32(zero, _mm512_shuffle_epi8(lut, lo), x0);
    return _mm512_dpbusd_epi32(acc, _mm512_shuffle_epi8(lut, hi), x1);
}

/* The four block sums of a group, reduced inside the register (lane k's four partials added by two
 * in-lane shuffles) and compressed to the low 128 bits: no store / narrow-reload round trip. */
static inline __m128i group_totals(const uint8_t *codes, const int8_t *xe, const int8_t *xo) {
    __m512i t = group_sums(codes, xe, xo);
#ifdef DS_AVX512_EMULATE   /* this SIMDe release lacks the 512-bit shuffle/compress: the same sums, in C */
    int32_t v[16];
    _mm512_storeu_si512(v, t);
    return _mm_setr_epi32(v[0] + v[1] + v[2] + v[3], v[4] + v[5] + v[6] + v[7], v[8] + v[9] + v[10] + v[11],
                          v[12] + v[13] + v[14] + v[15]);
#else
    t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, (_MM_PERM_ENUM)0x4E));
    t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, (_MM_PERM_ENUM)0xB1));
    return _mm512_castsi512_si128(_mm512_maskz_compress_epi32((__mmask16)0x1111, t));
#endif
}

void DS_MX_BSUM_AVX512(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum) {
    int b = 0;
    for (; b + 4 <= nb; b += 4) _mm_storeu_si128((__m128i *)(bsum + b), group_totals(codes + 16 * b, xe + 16 * b, xo + 16 * b));
    if (b < nb) {
        uint8_t cb[64] = {0};
        int8_t eb[64] = {0}, ob[64] = {0};
        int32_t t[4];
        const size_t bytes = (size_t)(nb - b) * 16;
        memcpy(cb, codes + 16 * b, bytes);
        memcpy(eb, xe + 16 * b, bytes);
        memcpy(ob, xo + 16 * b, bytes);
        _mm_storeu_si128((__m128i *)t, group_totals(cb, eb, ob));
        for (int k = 0; k < nb - b; k++) bsum[b + k] = t[k];
    }
}

/* Software prefetch distance in each panel (row functions: in each row).  Panel tiles of three or
 * more activation rows take 4 KiB: they compute about as long per byte as memory takes to deliver
 * it, and 1 KiB ahead in two streams kept too few lines in flight for memory to overlap the
 * arithmetic (decision 175). */
#ifndef MX_PREFETCH
#define MX_PREFETCH 1024
#endif
#ifndef MX_PREFETCH_MANY
#define MX_PREFETCH_MANY 4096
#endif
/* The 16 int32 partials of one group of four blocks on the int32 route: each activation's sign
 * moved onto its weight (code ^ 8, one ternary-logic op per nibble set), the signed |2·e2m1|
 * looked up by vpshufb, and VPDPBUSD of |x| (unsigned) against it — lane 4k+m holds partial m of
 * block k, 8 products (|.| <= DS_MX_LANE_MAX). */
static inline __attribute__((always_inline)) __m512i group_lanes(const uint8_t *codes, const uint8_t *ae, const uint8_t *ao, const uint8_t *se,
                                  const uint8_t *so) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(DS_MX_SIGNED_LUT)), low4 = _mm512_set1_epi8(15);
    __m512i c = _mm512_loadu_si512(codes);
    __m512i lo = _mm512_ternarylogic_epi32(c, low4, _mm512_loadu_si512(se), 0x6A);   /* (c & 15) ^ se */
    __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 4), low4, _mm512_loadu_si512(so), 0x6A);
    __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(ae), _mm512_shuffle_epi8(lut, lo));
    return _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(ao), _mm512_shuffle_epi8(lut, hi));
}

/* int32 route (ds_mx_int32_ok): each group's lanes shifted by their block's exponent above the
 * row's smallest (vpsllvd; the shifts of 16 blocks come from one widening of 16 scale bytes and a
 * lane permute per group) and added in int32 lanes without overflow; the lanes are then summed
 * in int64 — the exact total, so the same bits as every other route.  A last partial stretch of
 * blocks goes through zero-padded copies (padding scale = the smallest: shift 0 of zero lanes). */
static double row_int32(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb, int lo) {
    const __m512i vlo = _mm512_set1_epi32(lo);
    __m512i idx[4];   /* group g's lanes 4k..4k+3 take the shift of its block k: element 4g + k */
    for (int g = 0; g < 4; g++) idx[g] = _mm512_add_epi32(_mm512_set1_epi32(4 * g), _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    __m512i acc = _mm512_setzero_si512();
    int b = 0;
    for (; b + 16 <= nb; b += 16) {
        __m512i sh = _mm512_sub_epi32(MX_CVTEPU8_EPI32(_mm_loadu_si128((const __m128i *)(sc + b))), vlo);
        MX_UNROLL4
        for (int g = 0; g < 4; g++) {
            const int k = b + 4 * g;
            _mm_prefetch((const char *)(codes + 16 * k + MX_PREFETCH), _MM_HINT_T0);
            __m512i t = group_lanes(codes + 16 * k, a->ae + 16 * k, a->ao + 16 * k, a->se + 16 * k, a->so + 16 * k);
            acc = _mm512_add_epi32(acc, _mm512_sllv_epi32(t, _mm512_permutexvar_epi32(idx[g], sh)));
        }
    }
    if (b < nb) {   /* up to 15 blocks left: padded copies, four blocks at a time */
        uint8_t s16[16], cb[256] = {0}, ae[256] = {0}, ao[256] = {0}, se[256] = {0}, so[256] = {0};
        const size_t bytes = (size_t)(nb - b) * 16;
        memset(s16, lo, sizeof s16);
        memcpy(s16, sc + b, (size_t)(nb - b));
        memcpy(cb, codes + 16 * b, bytes);
        memcpy(ae, a->ae + 16 * b, bytes);
        memcpy(ao, a->ao + 16 * b, bytes);
        memcpy(se, a->se + 16 * b, bytes);
        memcpy(so, a->so + 16 * b, bytes);
        __m512i sh = _mm512_sub_epi32(MX_CVTEPU8_EPI32(_mm_loadu_si128((const __m128i *)s16)), vlo);
        for (int g = 0; 16 * b + 64 * g < 16 * nb; g++) {
            __m512i t = group_lanes(cb + 64 * g, ae + 64 * g, ao + 64 * g, se + 64 * g, so + 64 * g);
            acc = _mm512_add_epi32(acc, _mm512_sllv_epi32(t, _mm512_permutexvar_epi32(idx[g], sh)));
        }
    }
    int32_t v[16];
    _mm512_storeu_si512(v, acc);
    int64_t total = 0;
    for (int i = 0; i < 16; i++) total += v[i];
    return ds_mx_scale_total(total, lo);
}

/* One row (contract in kern_official.h).  The int32 route where its lanes cannot overflow (every
 * trained row: a scale spread of up to ~10 binades); otherwise four blocks' totals per step,
 * shifted by their exponent above the row's smallest and added in four int64 lanes (exact, so
 * order-free); a last partial group through the zero-padded copy (padding scales = the smallest:
 * shift 0 of a zero total). */
double DS_MX_ROW_AVX512(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb) {
    const int8_t *xe = a->xe, *xo = a->xo;
    int lo, hi;
    ds_mx_exp_range(sc, nb, &lo, &hi);
    if (hi - lo > DS_MX_EXACT_SPREAD) return ds_mx_row_sequential(DS_MX_BSUM_AVX512, codes, sc, xe, xo, nb);
    if (ds_mx_int32_ok((nb + 3) / 4, hi - lo)) return row_int32(codes, sc, a, nb, lo);
    const __m256i vlo = _mm256_set1_epi64x(lo);
    __m256i acc = _mm256_setzero_si256();
    int b = 0;
    for (; b + 4 <= nb; b += 4) {
        uint32_t s32;
        memcpy(&s32, sc + b, 4);
        __m256i sh = _mm256_sub_epi64(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)s32)), vlo);
        __m128i tot = group_totals(codes + 16 * b, xe + 16 * b, xo + 16 * b);
        acc = _mm256_add_epi64(acc, _mm256_sllv_epi64(_mm256_cvtepi32_epi64(tot), sh));
    }
    if (b < nb) {   /* a last partial group: zero-padded copies, padding scales = the smallest (shift 0) */
        uint8_t cb[64] = {0}, s4[4] = {(uint8_t)lo, (uint8_t)lo, (uint8_t)lo, (uint8_t)lo};
        int8_t eb[64] = {0}, ob[64] = {0};
        const size_t bytes = (size_t)(nb - b) * 16;
        memcpy(cb, codes + 16 * b, bytes);
        memcpy(eb, xe + 16 * b, bytes);
        memcpy(ob, xo + 16 * b, bytes);
        memcpy(s4, sc + b, (size_t)(nb - b));
        uint32_t s32;
        memcpy(&s32, s4, 4);
        __m256i sh = _mm256_sub_epi64(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128((int)s32)), vlo);
        acc = _mm256_add_epi64(acc, _mm256_sllv_epi64(_mm256_cvtepi32_epi64(group_totals(cb, eb, ob)), sh));
    }
    int64_t v[4];
    _mm256_storeu_si256((__m256i *)v, acc);
    return ds_mx_scale_total(v[0] + v[1] + v[2] + v[3], lo);
}

/* VPDPBUSD through a tied asm operand (as kern_avx512.c: GCC 12 otherwise copies the accumulator
 * before every instruction); the emulated build runs the intrinsic. */
#ifndef DS_AVX512_EMULATE
static inline __attribute__((always_inline)) __m512i mx_dp(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}
#define MX_AI static inline __attribute__((always_inline))
#define MX_UNROLL6 _Pragma("GCC unroll 6")
#else
#define mx_dp(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#define MX_AI static inline
#define MX_UNROLL6
#endif

/* ---- panels (layout and contract in kern_official.h) ---- */
#define MXP_NP 6   /* most panels per tile (one row, mxp_parts) */
#define MXP_NR 6   /* most activation rows per tile */

/* Blocks [b0, b1) of NP panels from p against NR activation rows (xr[i]: row i's xe plane): the
 * int32 lanes of the shifted block sums in a (the caller keeps the stretch within `chunk`). */
MX_AI void mxp_stretch(const ds_mxpack *P, int p, int dp, const int NP, const int NR, const uint8_t *const *xr, size_t part,
                       size_t init, int b0, int b1, __m512i a[MXP_NP][MXP_NR]) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(DS_MX_U12_LUT)), low4 = _mm512_set1_epi8(15);
    const size_t pstride = P->panel_bytes;
    const uint8_t *tp = ds_mx_panel(P, p);
MX_UNROLL6
    for (int j = 0; j < NP; j++)
MX_UNROLL6
        for (int i = 0; i < NR; i++) a[j][i] = _mm512_setzero_si512();
    for (int b = b0; b < b1; b++) {
        __m512i blk[MXP_NP][MXP_NR];
        /* near a panel's end, the same offset of the panel NP further on: the panel this stream
         * continues in (the next panel group), not the next panel, which this tile streams already
         * (decision 174) */
        const size_t ahead = NR <= 2 ? MX_PREFETCH : MX_PREFETCH_MANY;
        const size_t tb = ds_mx_tiles_off(b);
        const size_t pf = dp > 1 || tb + ahead + 192 < pstride ? ahead : ahead + (size_t)(NP - 1) * pstride;
MX_UNROLL6
        for (int i = 0; i < NR; i++) {
            int32_t v;
            memcpy(&v, xr[i] + init + 4 * (size_t)b, 4);
            const __m512i start = _mm512_set1_epi32(v);
MX_UNROLL6
            for (int j = 0; j < NP; j++) blk[j][i] = start;
        }
MX_UNROLL4
        for (int t = 0; t < 4; t++) {
            __m512i wl[MXP_NP], wh[MXP_NP];
            const size_t off = tb + 64 * (size_t)t, xo = 16 * (size_t)b + 4 * (size_t)t;
MX_UNROLL6
            for (int j = 0; j < NP; j++) {
                /* one or two rows (decode, an expert's share of a batched step) stream: non-temporal
                 * as the int8 kernels (DS_Q_HINT; decisions 145, 195); more rows reuse each tile
                 * longer: into L1 */
                if (NR <= 2) _mm_prefetch((const char *)(tp + j * dp * pstride + off + pf), DS_Q_HINT);
                else _mm_prefetch((const char *)(tp + j * dp * pstride + off + pf), _MM_HINT_T0);
                const __m512i w = _mm512_loadu_si512(tp + j * dp * pstride + off);
                wl[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(w, low4));
                wh[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(w, 4), low4));
            }
MX_UNROLL6
            for (int i = 0; i < NR; i++) {
                int32_t e4, o4;   /* one register broadcast per row, shared by the panels (faster here than
                                     a {1to16} memory operand on every VPDPBUSD) */
                memcpy(&e4, xr[i] + xo, 4);
                memcpy(&o4, xr[i] + part + xo, 4);
                const __m512i xe = _mm512_set1_epi32(e4), xod = _mm512_set1_epi32(o4);
MX_UNROLL6
                for (int j = 0; j < NP; j++)
                    blk[j][i] = mx_dp(mx_dp(blk[j][i], wl[j], xe), wh[j], xod);
            }
        }
MX_UNROLL6
        for (int j = 0; j < NP; j++) {
            const __m512i sh = MX_CVTEPU8_EPI32(_mm_loadu_si128((const __m128i *)(tp + j * dp * pstride + ds_mx_shifts_off(b))));
MX_UNROLL6
            for (int i = 0; i < NR; i++) a[j][i] = _mm512_add_epi32(a[j][i], _mm512_sllv_epi32(blk[j][i], sh));
        }
    }
}

/* One tile: NP panels x NR rows over the whole input, stretch by stretch (int32 lanes, summed in
 * int64), then the outputs: y = (float)((double)total · 2^(lo − 128) · (double)xs), the steps of
 * ds_mx_scale_total in vector form natively (VCVTQQ2PD and VCVTPD2PS round to nearest even as the
 * C conversions do), lane by lane in the emulated build (this SIMDe release lacks them). */
#ifndef DS_AVX512_EMULATE
MX_AI void mxp_store(const ds_mxpack *P, int o0, const __m512i t[2], double xsd, float *yrow) {
    const __m512i bias = _mm512_set1_epi64(1023 - 128);
    __m256 f[2];
    for (int h = 0; h < 2; h++) {
        const __m512i lo = _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i *)(P->lo + o0 + 8 * h)));
        const __m512d pw = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(lo, bias), 52));
        f[h] = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_mul_pd(_mm512_cvtepi64_pd(t[h]), pw), _mm512_set1_pd(xsd)));
    }
    const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(f[0]), f[1], 1);
    if (o0 + 16 <= P->out) _mm512_storeu_ps(yrow + o0, v);
    else _mm512_mask_storeu_ps(yrow + o0, (__mmask16)((1u << (P->out - o0)) - 1u), v);
}
#endif
MX_AI void mxp_tile(const ds_mxpack *P, int p, int dp, const int NP, const int NR, const uint8_t *const *xr, size_t part,
                    size_t init, const float *xs, float *const *yr) {
    int F = P->nb;
    for (int j = 0; j < NP; j++) F = DS_MIN(F, P->chunk[p + j * dp]);
#ifndef DS_AVX512_EMULATE
    __m512i t[MXP_NP][MXP_NR][2];
MX_UNROLL6
    for (int j = 0; j < NP; j++)
MX_UNROLL6
        for (int i = 0; i < NR; i++) t[j][i][0] = t[j][i][1] = _mm512_setzero_si512();
    for (int b0 = 0; b0 < P->nb; b0 += F) {
        __m512i a[MXP_NP][MXP_NR];
        mxp_stretch(P, p, dp, NP, NR, xr, part, init, b0, DS_MIN(P->nb, b0 + F), a);
MX_UNROLL6
        for (int j = 0; j < NP; j++)
MX_UNROLL6
            for (int i = 0; i < NR; i++) {
                t[j][i][0] = _mm512_add_epi64(t[j][i][0], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(a[j][i])));
                t[j][i][1] = _mm512_add_epi64(t[j][i][1], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(a[j][i], 1)));
            }
    }
MX_UNROLL6
    for (int j = 0; j < NP; j++)
MX_UNROLL6
        for (int i = 0; i < NR; i++) mxp_store(P, 16 * (p + j * dp), t[j][i], (double)xs[i], yr[i]);
#else
    int64_t tot[MXP_NP][MXP_NR][16];
    memset(tot, 0, sizeof tot);
    for (int b0 = 0; b0 < P->nb; b0 += F) {
        __m512i a[MXP_NP][MXP_NR];
        mxp_stretch(P, p, dp, NP, NR, xr, part, init, b0, DS_MIN(P->nb, b0 + F), a);
        for (int j = 0; j < NP; j++)
            for (int i = 0; i < NR; i++) {
                int32_t v[16];
                _mm512_storeu_si512(v, a[j][i]);
                for (int l = 0; l < 16; l++) tot[j][i][l] += v[l];
            }
    }
    for (int j = 0; j < NP; j++)
        for (int i = 0; i < NR; i++)
            for (int l = 0; l < 16; l++) {
                const int o = 16 * (p + j * dp) + l;
                if (o < P->out) yr[i][o] = (float)(ds_mx_scale_total(tot[j][i][l], P->lo[o]) * (double)xs[i]);
            }
#endif
}

#define MXP_CASE(NP, NR) case (NP) * 8 + (NR): mxp_tile(P, p, dp, NP, NR, xr, part, init, xs + r, yr); break
/* Rows [r0, r1) against panels p + j·dp, j < np (np <= MXP_NP, every chunk > 0): tiles of up to 6 rows. */
static void mxp_rows(const ds_mxpack *P, int p, int dp, int np, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                     const float *xs, int r0, int r1, float *y, int ystride) {
    for (int r = r0; r < r1;) {
        const int nr = DS_MIN(MXP_NR, r1 - r);
        const uint8_t *xr[MXP_NR];
        float *yr[MXP_NR];
        for (int i = 0; i < nr; i++) xr[i] = act + (size_t)(r + i) * rowstride, yr[i] = y + (size_t)(r + i) * ystride;
        switch (np * 8 + nr) {
            MXP_CASE(6, 1); MXP_CASE(4, 1); MXP_CASE(4, 2); MXP_CASE(3, 1); MXP_CASE(3, 2); MXP_CASE(3, 3);
            MXP_CASE(2, 1); MXP_CASE(2, 2); MXP_CASE(2, 3); MXP_CASE(2, 4); MXP_CASE(2, 5); MXP_CASE(2, 6);
            MXP_CASE(1, 1); MXP_CASE(1, 2); MXP_CASE(1, 3); MXP_CASE(1, 4); MXP_CASE(1, 5); MXP_CASE(1, 6);
        default: break;   /* np > 2 only with nr <= 2, or 3 x 3 (below) */
        }
        r += nr;
    }
}

/* Rows [r0, r1) against panels [p0, p1): the range cut in NS equal parts walked side by side (6
 * for one row, 4 for two, 3 for three, 2 from four: the registers), panel p0 + i beside p0 + q + i,
 * p0 + 2q + i, ..., so each weight stream runs on into its next panel as one sequential read, which
 * the hardware prefetchers follow (neighbouring panels, with the prefetch of decision 174 aimed at
 * each stream's next panel, still began the other streams cold at every group: 1.1-1.2x on MoE
 * experts at 1-2 rows, decision 181; 1.14-1.34x at 3-6 rows, decision 193); one row takes 6
 * streams as the W4A8 path does (decision 191).  A group with a panel of chunk 0 runs its other
 * panels one by one.  Returns the first panel not done (the < NS left over). */
static int mxp_parts(const ds_mxpack *P, int p0, int p1, const uint8_t *act, size_t rowstride, size_t part,
                     size_t init, const float *xs, int r0, int r1, float *y, int ystride) {
    const int n = r1 - r0, ns = n == 1 ? 6 : n == 2 ? 4 : n == 3 ? 3 : 2, q = (p1 - p0) / ns;
    for (int a = p0; a < p0 + q; a++) {
        int all = 1;
        for (int j = 0; j < ns; j++) all &= P->chunk[a + j * q] > 0;
        if (all) {
            mxp_rows(P, a, q, ns, act, rowstride, part, init, xs, r0, r1, y, ystride);
            continue;
        }
        for (int j = 0; j < ns; j++)
            if (P->chunk[a + j * q]) mxp_rows(P, a + j * q, 1, 1, act, rowstride, part, init, xs, r0, r1, y, ystride);
    }
    return p0 + ns * q;
}

/* Panels [p0, p1) for rows [0, n): rows in chunks whose activations stay in L2 while every panel
 * group passes; the panels of a group from equal parts of the range (mxp_parts; decisions 181,
 * 191, 193), the few left over as neighbours: 4 for one or two rows, 3 for three (18
 * accumulators), 2 for more (accumulators for 6 rows).  Panels of chunk 0 are skipped. */
enum { MXP_CHUNK_BYTES = 256 << 10 };
void DS_MX_PANELS_AVX512(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                         const float *xs, int n, int p0, int p1, float *y, int ystride) {
    const int per_row = (int)DS_MAX((size_t)1, (size_t)P->nb * 36), chunk = DS_MAX(MXP_NR, MXP_CHUNK_BYTES / per_row / MXP_NR * MXP_NR);
    const int npmax = n <= 2 ? 4 : n == 3 ? 3 : 2;
    for (int c0 = 0; c0 < n; c0 += chunk) {
        const int c1 = DS_MIN(n, c0 + chunk);
        int p = p0;
        p = mxp_parts(P, p0, p1, act, rowstride, part, init, xs, c0, c1, y, ystride);
        while (p < p1) {
            if (!P->chunk[p]) {
                p++;
                continue;
            }
            int np = 1;
            while (np < npmax && p + np < p1 && P->chunk[p + np]) np++;
            mxp_rows(P, p, 1, np, act, rowstride, part, init, xs, c0, c1, y, ystride);
            p += np;
        }
    }
}

#ifndef DS_AVX512_EMULATE
/* FP8 fast-tier decode, 16 codes per step (the rule of ds_fp8_bf16_one, lane by lane: blend of the
 * normal and subnormal forms, one multiply by the block's scale, sign, bf16 truncation, flush).
 * Native only: checked against the scalar rule by the unit tests on AVX-512 hosts and by the
 * serve self-check. */
void ds_fp8_decode_avx512(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst) {
    const __m512i m7f = _mm512_set1_epi32(0x7f), bias = _mm512_set1_epi32(120 << 23), m7 = _mm512_set1_epi32(7);
    const __m512i m78 = _mm512_set1_epi32(0x78), m80 = _mm512_set1_epi32(0x80), mff = _mm512_set1_epi32(0xff);
    const __m512i minexp = _mm512_set1_epi32(DS_FF_MIN_EXP_FIELD);
    int i = 0;
    for (; i + 16 <= in; i += 16) {
        __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + i)));
        __m512 vn = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(c, m7f), 20), bias));
        __m512 vs = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(c, m7)), _mm512_set1_ps(0x1p-9f));
        __m512 v = _mm512_mul_ps(_mm512_mask_blend_ps(_mm512_test_epi32_mask(c, m78), vs, vn), _mm512_set1_ps(ds_fp8_scale_f(sc[i / 32])));
        __m512i r = _mm512_or_si512(_mm512_castps_si512(v), _mm512_slli_epi32(_mm512_and_si512(c, m80), 24));
        __m512i h = _mm512_srli_epi32(r, 16);
        __mmask16 keep = _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_srli_epi32(h, 7), mff), minexp);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(_mm512_maskz_mov_epi32(keep, h)));
    }
    for (; i < in; i++) dst[i] = ds_fp8_bf16_one(codes[i], ds_fp8_scale_f(sc[i / 32]));
}

#pragma GCC pop_options
#endif
