/* AVX-512 VNNI kernel path.
 *
 * Integer kernels: one zmm register holds one 64-byte tile of the shared layout (16 output rows x
 * 4 inputs for int8, x 8 inputs for int4), and VPDPBUSD against 4 broadcast activation bytes adds
 * 4 exact u8 x s8 products into each of the 16 int32 lanes.  VPDPBUSD needs one unsigned operand:
 *   W8A8: the activations, biased to x+128 (0..255); the weights stay signed; the bias adds
 *         128*Σ_i W[o][i], removed with the per-row sums stored at repack;
 *   W4A8: the weights, stored as w+8 (0..15); the activations stay signed; the bias adds 8*Σx.
 * Sums stay below 2^31 for every shape here (CHECKPOINT.md §7), and int32 wraps exactly anyway,
 * so outputs are bit-identical to the scalar reference.  Matrix-vector calls walk 4 panels at
 * once (4 weight streams); matrix-matrix calls keep 2 panels x 8 activation rows = 16
 * accumulators in registers, re-reading the panel from L1/L2 for each block of 8 rows.
 * Float kernels: weights widened to float64 and FMA'd with exact float64 activations, 2 x 8 lanes
 * per output row, combined in a fixed order (batch and thread invariant).
 *
 * The file is compiled twice: normally (AVX-512 target pragma, real intrinsics), and by the unit
 * test test_kernels_avx512_emu.c with DS_AVX512_EMULATE defined, where SIMDe supplies portable
 * implementations of the same intrinsics, so hosts without AVX-512 still check this code's
 * arithmetic bit for bit against the reference. */
#include "kernels/kern_internal.h"
#include <string.h>

#ifdef DS_AVX512_EMULATE
#pragma GCC optimize("O1")
#pragma GCC diagnostic ignored "-Wpsabi" /* SIMDe passes 64-byte vectors by value */
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define DS_AVX512_OPS ds_kern_avx512_emu
#define DS_QUANTIZE_ROW ds_ref_quantize_row_emu
static void ds_ref_quantize_row_emu(const ds_bf16 *x, int k, int8_t *q, float *s) { ds_ref_quantize_rows(x, 1, k, q, s); }
/* Intrinsics this SIMDe release lacks, written from their documented per-lane semantics. */
typedef simde__mmask16 __mmask16;
static inline simde__m512 emu_cvtepi32_ps(simde__m512i a) {
    int32_t t[16]; float f[16];
    simde_mm512_storeu_si512(t, a);
    for (int i = 0; i < 16; i++) f[i] = (float)t[i]; /* VCVTDQ2PS: round to nearest even */
    return simde_mm512_loadu_ps(f);
}
static inline void emu_mask_storeu_ps(float *p, simde__mmask16 m, simde__m512 v) {
    float f[16];
    simde_mm512_storeu_ps(f, v);
    for (int i = 0; i < 16; i++) if (m & (1u << i)) p[i] = f[i];
}
static inline simde__m512i emu_cvtepu16_epi32(simde__m256i a) {
    uint16_t h[16]; int32_t t[16];
    simde_mm256_storeu_si256((simde__m256i *)h, a);
    for (int i = 0; i < 16; i++) t[i] = h[i];
    return simde_mm512_loadu_si512(t);
}
static inline simde__m512d emu_cvtps_pd(simde__m256 a) {
    float f[8]; double d[8];
    simde_mm256_storeu_ps(f, a);
    for (int i = 0; i < 8; i++) d[i] = f[i]; /* exact widening */
    return simde_mm512_loadu_pd(d);
}
#define _mm512_cvtps_pd emu_cvtps_pd
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_mask_storeu_ps emu_mask_storeu_ps
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include <immintrin.h>
#define DS_AVX512_OPS ds_kern_avx512
#define DS_QUANTIZE_ROW ds_avx2_quantize_row
#endif

#ifdef DS_AVX512_EMULATE
/* Emulated intrinsics are loops; forced inlining and unrolling would make this test translation
 * unit take minutes to compile for no benefit. */
#define AI static inline
#define UNROLL8
#else
#define AI static inline __attribute__((always_inline))
#define UNROLL8 _Pragma("GCC unroll 8")
#endif

static inline int32_t ld4(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }

AI void store16(__m512i acc, float sx, const float *scale, int o0, int out, float *yrow) {
    __m512 sc = _mm512_mul_ps(_mm512_set1_ps(sx), _mm512_loadu_ps(scale + o0));
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), sc);
    if (o0 + 16 <= out) _mm512_storeu_ps(yrow + o0, v);
    else if (o0 < out) _mm512_mask_storeu_ps(yrow + o0, (__mmask16)((1u << (out - o0)) - 1u), v);
}

AI void w8_block(const ds_packed *P, const ds_qact *X, int p, int r, const int NP, const int NR,
                 float *y, int ystride) {
    __m512i acc[4][8];
UNROLL8
    for (int j = 0; j < NP; j++)
UNROLL8
        for (int i = 0; i < NR; i++) acc[j][i] = _mm512_setzero_si512();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    const uint8_t *xr = X->qu + (size_t)r * X->kpad;
    for (int s = 0; s < P->ksteps; s++) {
        __m512i w[4];
UNROLL8
        for (int j = 0; j < NP; j++)
            w[j] = _mm512_load_si512((const void *)(wp + (size_t)j * P->panel_bytes + (size_t)s * DS_TILE_BYTES));
UNROLL8
        for (int i = 0; i < NR; i++) {
            __m512i xb = _mm512_set1_epi32(ld4(xr + (size_t)i * X->kpad + 4 * (size_t)s));
UNROLL8
            for (int j = 0; j < NP; j++) acc[j][i] = _mm512_dpbusd_epi32(acc[j][i], xb, w[j]);
        }
    }
UNROLL8
    for (int j = 0; j < NP; j++) {
        int o0 = (p + j) * DS_PANEL_ROWS;
        __m512i bias = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(P->wsum + o0)), 7);
UNROLL8
        for (int i = 0; i < NR; i++)
            store16(_mm512_sub_epi32(acc[j][i], bias), X->s[r + i], P->scale, o0, P->out,
                    y + (size_t)(r + i) * ystride);
    }
}

AI void w4_block(const ds_packed *P, const ds_qact *X, int p, int r, const int NP, const int NR,
                 float *y, int ystride) {
    __m512i acc[4][8];
    const __m512i m0f = _mm512_set1_epi8(0x0f);
UNROLL8
    for (int j = 0; j < NP; j++)
UNROLL8
        for (int i = 0; i < NR; i++) acc[j][i] = _mm512_setzero_si512();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    const int8_t *xr = X->q + (size_t)r * X->kpad;
    for (int s = 0; s < P->ksteps; s++) {
        __m512i lo[4], hi[4];
UNROLL8
        for (int j = 0; j < NP; j++) {
            __m512i w = _mm512_load_si512((const void *)(wp + (size_t)j * P->panel_bytes + (size_t)s * DS_TILE_BYTES));
            lo[j] = _mm512_and_si512(w, m0f);
            hi[j] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m0f);
        }
UNROLL8
        for (int i = 0; i < NR; i++) {
            const int8_t *xs = xr + (size_t)i * X->kpad + 8 * (size_t)s;
            __m512i x0 = _mm512_set1_epi32(ld4(xs)), x1 = _mm512_set1_epi32(ld4(xs + 4));
UNROLL8
            for (int j = 0; j < NP; j++) {
                acc[j][i] = _mm512_dpbusd_epi32(acc[j][i], lo[j], x0);
                acc[j][i] = _mm512_dpbusd_epi32(acc[j][i], hi[j], x1);
            }
        }
    }
UNROLL8
    for (int i = 0; i < NR; i++) {
        __m512i bias = _mm512_set1_epi32(8 * X->xsum[r + i]);
UNROLL8
        for (int j = 0; j < NP; j++)
            store16(_mm512_sub_epi32(acc[j][i], bias), X->s[r + i], P->scale, (p + j) * DS_PANEL_ROWS,
                    P->out, y + (size_t)(r + i) * ystride);
    }
}

#define ROW_TAIL(FN, NP, r, r1)                                                                  \
    switch ((r1) - (r)) {                                                                        \
    case 7: FN(P, X, p, r, NP, 7, y, ystride); break;                                            \
    case 6: FN(P, X, p, r, NP, 6, y, ystride); break;                                            \
    case 5: FN(P, X, p, r, NP, 5, y, ystride); break;                                            \
    case 4: FN(P, X, p, r, NP, 4, y, ystride); break;                                            \
    case 3: FN(P, X, p, r, NP, 3, y, ystride); break;                                            \
    case 2: FN(P, X, p, r, NP, 2, y, ystride); break;                                            \
    case 1: FN(P, X, p, r, NP, 1, y, ystride); break;                                            \
    default: break;                                                                              \
    }

static void w8_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                      int ystride) {
    int p = p0;
    if (r1 - r0 == 1) {
        for (; p + 4 <= p1; p += 4) w8_block(P, X, p, r0, 4, 1, y, ystride);
        for (; p < p1; p++) w8_block(P, X, p, r0, 1, 1, y, ystride);
        return;
    }
    for (; p + 2 <= p1; p += 2) {
        int r = r0;
        for (; r + 8 <= r1; r += 8) w8_block(P, X, p, r, 2, 8, y, ystride);
        ROW_TAIL(w8_block, 2, r, r1)
    }
    for (; p < p1; p++) {
        int r = r0;
        for (; r + 8 <= r1; r += 8) w8_block(P, X, p, r, 1, 8, y, ystride);
        ROW_TAIL(w8_block, 1, r, r1)
    }
}

static void w4_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                      int ystride) {
    int p = p0;
    if (r1 - r0 == 1) {
        for (; p + 4 <= p1; p += 4) w4_block(P, X, p, r0, 4, 1, y, ystride);
        for (; p < p1; p++) w4_block(P, X, p, r0, 1, 1, y, ystride);
        return;
    }
    for (; p + 2 <= p1; p += 2) {
        int r = r0;
        for (; r + 8 <= r1; r += 8) w4_block(P, X, p, r, 2, 8, y, ystride);
        ROW_TAIL(w4_block, 2, r, r1)
    }
    for (; p < p1; p++) {
        int r = r0;
        for (; r + 8 <= r1; r += 8) w4_block(P, X, p, r, 1, 8, y, ystride);
        ROW_TAIL(w4_block, 1, r, r1)
    }
}

static void q_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                     int ystride) {
    if (P->fmt == DS_LIN_W8A8) w8_panels(P, X, r0, r1, p0, p1, y, ystride);
    else w4_panels(P, X, r0, r1, p0, p1, y, ystride);
}

/* ---- float linears: float64 accumulation ---- */

AI void widen16(const ds_linear *L, int o, int i, __m512d d[2]) {
    if (L->fmt == DS_LIN_BF16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)((const ds_bf16 *)L->w + (size_t)o * L->in + i));
        __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
        d[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
        d[1] = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
    } else {
        const float *wr = (const float *)L->w + (size_t)o * L->in + i;
        d[0] = _mm512_cvtps_pd(_mm256_loadu_ps(wr));
        d[1] = _mm512_cvtps_pd(_mm256_loadu_ps(wr + 8));
    }
}

static inline double wval(const ds_linear *L, int o, int i) {
    return L->fmt == DS_LIN_BF16 ? (double)ds_bf16_to_f32(((const ds_bf16 *)L->w)[(size_t)o * L->in + i])
                                 : (double)((const float *)L->w)[(size_t)o * L->in + i];
}

/* Per row: accumulators a0 (elements 0..7 of each 16-block) and a1 (8..15); combined as a0+a1,
 * then halves 256+256, 128+128, lane0+lane1, then the tail in index order. */
AI void f_block(const ds_linear *L, const double *xd, int o, const int RO, float *yrow) {
    __m512d acc[4][2];
UNROLL8
    for (int j = 0; j < RO; j++) acc[j][0] = acc[j][1] = _mm512_setzero_pd();
    const int in = L->in, k16 = in & ~15;
    for (int i = 0; i < k16; i += 16) {
        __m512d x0 = _mm512_loadu_pd(xd + i), x1 = _mm512_loadu_pd(xd + i + 8);
UNROLL8
        for (int j = 0; j < RO; j++) {
            __m512d d[2];
            widen16(L, o + j, i, d);
            acc[j][0] = _mm512_fmadd_pd(d[0], x0, acc[j][0]);
            acc[j][1] = _mm512_fmadd_pd(d[1], x1, acc[j][1]);
        }
    }
UNROLL8
    for (int j = 0; j < RO; j++) {
        __m512d v = _mm512_add_pd(acc[j][0], acc[j][1]);
        __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
        __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
        double sum = _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
        for (int i = k16; i < in; i++) sum += wval(L, o + j, i) * xd[i];
        yrow[o + j] = (float)sum;
    }
}

/* Activation rows are taken in blocks of ~256 KiB of float64 so that a block stays in L2 while
 * every output row pair is run against it (a 64-row prefill chunk of a 4096-wide input is 2 MiB of
 * float64, which would otherwise be re-read from L3 for every output pair).  Each output is
 * still one f_block call, so the blocking cannot change a result. */
static void f_rows(const ds_linear *L, const double *xd, int xstride, int n, int o0, int o1, float *y) {
    const int rb = DS_MAX(1, (int)(32768 / DS_MAX(xstride, 1)));
    for (int r0 = 0; r0 < n; r0 += rb) {
        const int r1 = DS_MIN(n, r0 + rb);
        int o = o0;
        for (; o + 4 <= o1; o += 4)
            for (int r = r0; r < r1; r++) f_block(L, xd + (size_t)r * xstride, o, 4, y + (size_t)r * L->out);
        for (; o < o1; o++)
            for (int r = r0; r < r1; r++) f_block(L, xd + (size_t)r * xstride, o, 1, y + (size_t)r * L->out);
    }
}

#ifndef DS_AVX512_EMULATE
#pragma GCC pop_options
#endif

const ds_kern_ops DS_AVX512_OPS = {
    .name = "avx512-vnni",
    .wants_qu = 1,
    .q_panels = q_panels,
    .f_rows = f_rows,
    .quantize_row = DS_QUANTIZE_ROW,
};
