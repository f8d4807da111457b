/* AVX2 kernel path (x86-64 with AVX2 + FMA; no VNNI).
 *
 * Integer kernels read the shared 16-row tile layout (kern_internal.h) as two 8-row halves per
 * tile.  AVX2 has no VPDPBUSD, so products go through VPMADDUBSW (u8 x s8 -> pairs summed in
 * saturating int16) and VPMADDWD against ones (-> int32).  Saturation must never happen or the
 * result would not be exact:
 *   W8A8: |w| <= 128 as the unsigned operand (VPABSB) and sign(x, w) as the signed one (VPSIGNB),
 *         so a pair is at most 2*128*127 = 32512 < 32767;
 *   W4A8: tiles hold w+8 in 0..15, a pair is at most 2*15*127 = 3810, and four k-steps (lo+hi
 *         nibble each) sum to at most 30480 before they are widened, so int16 accumulation over
 *         4 steps is exact; the +8 bias is removed at the end with 8*Σx.
 * Float kernels widen bf16/f32 weights to float64 and use FMA into float64 accumulators (products
 * are exact there), 4 accumulators x 4 lanes per output row, combined in a fixed order, so each
 * row's result depends only on its own data (batch and thread invariant).
 * Fast-tier float kernels (numerics "fast") accumulate in fp32 with FMA in the blocked order of
 * kernels.h, bit-identical to the scalar reference and to the AVX-512 / vdpbf16ps kernels; they
 * live in kern_avx2_fast.c.
 * One activation row (decode) walks 4 panels at once, each step's pairs straight into int32: four
 * weight streams kept the memory busier than two (decision 180).
 * W8A8 multi-row, revisited: every exact AVX2 form costs 4 instructions per 32 multiply-adds
 * (VPSIGNB + VPMADDUBSW + VPMADDWD + VPADDD here; VPMOVSXBW-widened VPMADDWD + VPADDD is the same
 * count), against 2 for W4A8, whose int16 sums cannot saturate; only VNNI removes that.
 * Every function here is compiled for AVX2 through the target pragma; the dispatcher only calls
 * them when CPUID reports AVX2 and FMA. */
#include "kernels/kern_internal.h"
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

static inline int32_t load4(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }


/* DS_Q_PREFETCH ahead in panel j of a tile of NP panels dp apart.  Near a panel's end that
 * distance lands in panel j + 1; for neighbouring panels (dp = 1), which a two-panel tile is
 * already streaming, fetch the same offset of the next tile's panel j instead, so the next tile
 * starts warm (decision 155); panels dp > 1 apart run on into the panel after, their own next. */
AI void q_prefetch(const ds_packed *P, const uint8_t *wp, int j, int s, const int NP, int dp) {
    const size_t off = (size_t)s * DS_TILE_BYTES + DS_Q_PREFETCH;
    const size_t wrap = dp == 1 && off >= P->panel_bytes ? (size_t)(NP - 1) * P->panel_bytes : 0;
    _mm_prefetch((const char *)(wp + (size_t)j * dp * P->panel_bytes + off + wrap), _MM_HINT_T0);
}

/* Scale and store 8 outputs (o0..o0+7) of one row; outputs >= out are dropped. */
AI void store8(__m256i acc, float sx, const float *scale, int o0, int out, float *yrow) {
    __m256 sc = _mm256_mul_ps(_mm256_set1_ps(sx), _mm256_loadu_ps(scale + o0));
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), sc);
    if (o0 + 8 <= out) {
        _mm256_storeu_ps(yrow + o0, v);
    } else if (o0 < out) {
        float tmp[8];
        _mm256_storeu_ps(tmp, v);
        memcpy(yrow + o0, tmp, sizeof(float) * (size_t)(out - o0));
    }
}

/* DS_Q_PREFETCH (kern_internal.h) ahead in each weight panel; on this path, `perf kernels --kernels
 * avx2`, MoE row: +33% at 1 row, +20% at 4, neutral at 2. */
AI void w8_block(const ds_packed *P, const ds_qact *X, int p, int r, const int NP, const int NR,
                 float *y, int ystride) {
    __m256i acc[2][2][4];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 8
            for (int i = 0; i < NR; i++) acc[j][h][i] = _mm256_setzero_si256();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    for (int s = 0; s < P->ksteps; s++) {
        __m256i w[2][2], aw[2][2];
#pragma GCC unroll 8
        for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
            for (int h = 0; h < 2; h++) {
                if (h == 0) q_prefetch(P, wp, j, s, NP, 1);
                w[j][h] = _mm256_load_si256((const __m256i *)(wp + (size_t)j * P->panel_bytes +
                                                              (size_t)s * DS_TILE_BYTES + 32 * h));
                aw[j][h] = _mm256_abs_epi8(w[j][h]);
            }
#pragma GCC unroll 8
        for (int i = 0; i < NR; i++) {
            __m256i xb = _mm256_set1_epi32(load4(X->q + (size_t)(r + i) * X->kpad + 4 * (size_t)s));
#pragma GCC unroll 8
            for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
                for (int h = 0; h < 2; h++) {
                    __m256i t = _mm256_maddubs_epi16(aw[j][h], _mm256_sign_epi8(xb, w[j][h]));
                    acc[j][h][i] = _mm256_add_epi32(acc[j][h][i], _mm256_madd_epi16(t, ones));
                }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++)
#pragma GCC unroll 8
        for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
            for (int h = 0; h < 2; h++)
                store8(acc[j][h][i], X->s[r + i], P->scale, (p + j) * DS_PANEL_ROWS + 8 * h, P->out,
                       y + (size_t)(r + i) * ystride);
}

AI void w4_block(const ds_packed *P, const ds_qact *X, int p, int r, const int NP, const int NR,
                 float *y, int ystride) {
    __m256i acc[2][2][2], a16[2][2][2];
    const __m256i ones = _mm256_set1_epi16(1), m0f = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 8
    for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 8
            for (int i = 0; i < NR; i++) acc[j][h][i] = a16[j][h][i] = _mm256_setzero_si256();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    int s = 0;
    while (s < P->ksteps) {
        int s_end = DS_MIN(P->ksteps, s + 4); /* int16 accumulation is exact over 4 steps */
        for (; s < s_end; s++) {
            __m256i x0[2], x1[2];
#pragma GCC unroll 8
            for (int i = 0; i < NR; i++) {
                const int8_t *xr = X->q + (size_t)(r + i) * X->kpad + 8 * (size_t)s;
                x0[i] = _mm256_set1_epi32(load4(xr));
                x1[i] = _mm256_set1_epi32(load4(xr + 4));
            }
#pragma GCC unroll 8
            for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
                for (int h = 0; h < 2; h++) {
                    if (h == 0) q_prefetch(P, wp, j, s, NP, 1);
                    __m256i w = _mm256_load_si256((const __m256i *)(wp + (size_t)j * P->panel_bytes +
                                                                    (size_t)s * DS_TILE_BYTES + 32 * h));
                    __m256i lo = _mm256_and_si256(w, m0f);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m0f);
#pragma GCC unroll 8
                    for (int i = 0; i < NR; i++) {
                        __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0[i]),
                                                     _mm256_maddubs_epi16(hi, x1[i]));
                        a16[j][h][i] = _mm256_add_epi16(a16[j][h][i], t);
                    }
                }
        }
#pragma GCC unroll 8
        for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 8
                for (int i = 0; i < NR; i++) {
                    acc[j][h][i] = _mm256_add_epi32(acc[j][h][i], _mm256_madd_epi16(a16[j][h][i], ones));
                    a16[j][h][i] = _mm256_setzero_si256();
                }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NR; i++) {
        __m256i bias = _mm256_set1_epi32(8 * X->xsum[r + i]);
#pragma GCC unroll 8
        for (int j = 0; j < NP; j++)
#pragma GCC unroll 8
            for (int h = 0; h < 2; h++)
                store8(_mm256_sub_epi32(acc[j][h][i], bias), X->s[r + i], P->scale,
                       (p + j) * DS_PANEL_ROWS + 8 * h, P->out, y + (size_t)(r + i) * ystride);
    }
}

/* Two activation rows against two panels at once: two weight streams per thread, as the matrix-
 * vector tiles have, where one panel at a time left a 2-row expert matrix at 50-70% of the read
 * bandwidth.  The int16 stage of w4_block is dropped to fit the registers: each step's pairs go
 * straight to int32, the same exact integer sums. */
AI void w4_block2x2(const ds_packed *P, const ds_qact *X, int p, int dp, int r, float *y, int ystride) {
    __m256i acc[2][2][2];
    const __m256i ones = _mm256_set1_epi16(1), m0f = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) acc[j][h][i] = _mm256_setzero_si256();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    for (int s = 0; s < P->ksteps; s++) {
        __m256i x0[2], x1[2];
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            const int8_t *xr = X->q + (size_t)(r + i) * X->kpad + 8 * (size_t)s;
            x0[i] = _mm256_set1_epi32(load4(xr));
            x1[i] = _mm256_set1_epi32(load4(xr + 4));
        }
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                if (h == 0) q_prefetch(P, wp, j, s, 2, dp);
                __m256i w = _mm256_load_si256((const __m256i *)(wp + (size_t)j * dp * P->panel_bytes + (size_t)s * DS_TILE_BYTES + 32 * h));
                __m256i lo = _mm256_and_si256(w, m0f);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m0f);
#pragma GCC unroll 2
                for (int i = 0; i < 2; i++) {
                    __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0[i]), _mm256_maddubs_epi16(hi, x1[i]));
                    acc[j][h][i] = _mm256_add_epi32(acc[j][h][i], _mm256_madd_epi16(t, ones));
                }
            }
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        __m256i bias = _mm256_set1_epi32(8 * X->xsum[r + i]);
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                store8(_mm256_sub_epi32(acc[j][h][i], bias), X->s[r + i], P->scale, (p + j * dp) * DS_PANEL_ROWS + 8 * h, P->out,
                       y + (size_t)(r + i) * ystride);
    }
}

/* One activation row (decode, an expert's single row) against NP = 4 panels at once: four weight
 * streams instead of two, 8 int32 accumulators, each step's weights loaded and used at once, and for
 * W4A8 no int16 stage (its accumulators would not fit the 16 registers beside the int32 ones; each
 * step's pairs go straight to int32: the same exact sums).  Both objects alternated on the same
 * weights, 2 threads, bits equal (decision 180): W8A8 [4608, 5120] x 1 1.33x, [8192, 512] 1.21-1.27x;
 * W4A8 [4608, 5120] 1.01-1.31x, 96 expert matrices [768, 2048] 1.14-1.28x; A/A 0.88-1.05x.
 * The four panels are dp apart (the callers' quarters of the range, decision 181), so each stream
 * runs on into its next panel; neighbouring panels began three streams cold at every tile. */
#define Q_ROW_NP 4
AI void q_block_row(const ds_packed *P, const ds_qact *X, int p, int dp, int r, const int NP, const int W4, float *y,
                    int ystride) {
    __m256i acc[Q_ROW_NP][2];
    const __m256i ones = _mm256_set1_epi16(1), m0f = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int j = 0; j < NP; j++) acc[j][0] = acc[j][1] = _mm256_setzero_si256();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    const int8_t *xr = X->q + (size_t)r * X->kpad;
    for (int s = 0; s < P->ksteps; s++) {
        /* W4A8: inputs 8s..8s+3 against the low nibbles, 8s+4.. the high; W8A8: inputs 4s..4s+3 */
        const __m256i x0 = _mm256_set1_epi32(load4(xr + (W4 ? 8 : 4) * (size_t)s));
        const __m256i x1 = W4 ? _mm256_set1_epi32(load4(xr + 8 * (size_t)s + 4)) : x0;
#pragma GCC unroll 4
        for (int j = 0; j < NP; j++) {
            q_prefetch(P, wp, j, s, NP, dp);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i w = _mm256_load_si256(
                    (const __m256i *)(wp + (size_t)j * dp * P->panel_bytes + (size_t)s * DS_TILE_BYTES + 32 * h));
                const __m256i t = W4 ? _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(w, m0f), x0),
                                                        _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(w, 4), m0f), x1))
                                     : _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x0, w));
                acc[j][h] = _mm256_add_epi32(acc[j][h], _mm256_madd_epi16(t, ones));
            }
        }
    }
    const __m256i bias = _mm256_set1_epi32(W4 ? 8 * X->xsum[r] : 0);   /* W4A8 tiles hold w + 8 */
#pragma GCC unroll 4
    for (int j = 0; j < NP; j++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            store8(_mm256_sub_epi32(acc[j][h], bias), X->s[r], P->scale, (p + j * dp) * DS_PANEL_ROWS + 8 * h, P->out,
                   y + (size_t)r * ystride);
}

/* Three activation rows against one panel (prefill and wide batches): each unpacked weight vector
 * serves three rows instead of two (w4_block), so the nibble unpack is paid once per six
 * multiply pairs instead of four.  The 6 int16 accumulators, the step's four unpacked halves and
 * one row's two activation broadcasts stay in registers; the int32 totals wait in memory (L1) and
 * take the int16 sums every 4 steps: the same exact integer sums as w4_block.  Four rows (8 int16
 * accumulators) spilled and ran 0.75x of two 2-row tiles; three run 1.13x ([4608, 5120] x 32 and
 * x 512, alternated in one binary: 56.5 / 56.9% -> 64.2 / 64.6% of the int8 peak). */
AI void w4_block3(const ds_packed *P, const ds_qact *X, int p, int r, float *y, int ystride) {
    enum { NR = 3 };
    _Alignas(32) int32_t acc[2][NR][8];
    __m256i a16[2][NR];
    const __m256i m0f = _mm256_set1_epi8(0x0f);
    memset(acc, 0, sizeof acc);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
        for (int i = 0; i < NR; i++) a16[h][i] = _mm256_setzero_si256();
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    const int8_t *xq = X->q + (size_t)r * X->kpad;
    for (int s = 0; s < P->ksteps;) {
        const int s_end = DS_MIN(P->ksteps, s + 4); /* int16 accumulation is exact over 4 steps */
        for (; s < s_end; s++) {
            q_prefetch(P, wp, 0, s, 1, 1);
            const __m256i w0 = _mm256_load_si256((const __m256i *)(wp + (size_t)s * DS_TILE_BYTES));
            const __m256i w1 = _mm256_load_si256((const __m256i *)(wp + (size_t)s * DS_TILE_BYTES + 32));
            const __m256i lo0 = _mm256_and_si256(w0, m0f), hi0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), m0f);
            const __m256i lo1 = _mm256_and_si256(w1, m0f), hi1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), m0f);
#pragma GCC unroll 4
            for (int i = 0; i < NR; i++) {
                const int8_t *xr = xq + (size_t)i * X->kpad + 8 * (size_t)s;
                const __m256i x0 = _mm256_set1_epi32(load4(xr)), x1 = _mm256_set1_epi32(load4(xr + 4));
                a16[0][i] = _mm256_add_epi16(a16[0][i], _mm256_add_epi16(_mm256_maddubs_epi16(lo0, x0), _mm256_maddubs_epi16(hi0, x1)));
                a16[1][i] = _mm256_add_epi16(a16[1][i], _mm256_add_epi16(_mm256_maddubs_epi16(lo1, x0), _mm256_maddubs_epi16(hi1, x1)));
            }
        }
        const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
            for (int i = 0; i < NR; i++) {
                __m256i *t = (__m256i *)acc[h][i];
                _mm256_store_si256(t, _mm256_add_epi32(_mm256_load_si256(t), _mm256_madd_epi16(a16[h][i], ones)));
                a16[h][i] = _mm256_setzero_si256();
            }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NR; i++) {
        const __m256i bias = _mm256_set1_epi32(8 * X->xsum[r + i]);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            store8(_mm256_sub_epi32(_mm256_load_si256((const __m256i *)acc[h][i]), bias), X->s[r + i], P->scale,
                   p * DS_PANEL_ROWS + 8 * h, P->out, y + (size_t)(r + i) * ystride);
    }
}

static void w8_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                      int ystride) {
    if (r1 - r0 == 1) { /* matrix-vector: four panels at once (quarters), then two: four or two weight streams */
        const int q = (p1 - p0) / Q_ROW_NP;
        for (int a = p0; a < p0 + q; a++) q_block_row(P, X, a, q, r0, Q_ROW_NP, 0, y, ystride);
        int p = p0 + Q_ROW_NP * q;
        for (; p + 2 <= p1; p += 2) w8_block(P, X, p, r0, 2, 1, y, ystride);
        if (p < p1) w8_block(P, X, p, r0, 1, 1, y, ystride);
        return;
    }
    for (int p = p0; p < p1; p++) {
        int r = r0;
        for (; r + 4 <= r1; r += 4) w8_block(P, X, p, r, 1, 4, y, ystride);
        switch (r1 - r) {
        case 3: w8_block(P, X, p, r, 1, 3, y, ystride); break;
        case 2: w8_block(P, X, p, r, 1, 2, y, ystride); break;
        case 1: w8_block(P, X, p, r, 1, 1, y, ystride); break;
        default: break;
        }
    }
}

static void w4_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                      int ystride) {
    if (r1 - r0 == 1) {
        const int q = (p1 - p0) / Q_ROW_NP;
        for (int a = p0; a < p0 + q; a++) q_block_row(P, X, a, q, r0, Q_ROW_NP, 1, y, ystride);
        int p = p0 + Q_ROW_NP * q;
        for (; p + 2 <= p1; p += 2) w4_block(P, X, p, r0, 2, 1, y, ystride);
        if (p < p1) w4_block(P, X, p, r0, 1, 1, y, ystride);
        return;
    }
    if (r1 - r0 == 2) {   /* two streams per thread for the few-row experts (decision 153), halves */
        const int h = (p1 - p0) / 2;
        for (int a = p0; a < p0 + h; a++) w4_block2x2(P, X, a, h, r0, y, ystride);
        int p = p0 + 2 * h;
        if (p < p1) w4_block(P, X, p, r0, 1, 2, y, ystride);
        return;
    }
    for (int p = p0; p < p1; p++) {
        int r = r0;
        for (; r1 - r >= 3 && r1 - r != 4; r += 3) w4_block3(P, X, p, r, y, ystride);   /* 4 rows: 2 + 2 */
        for (; r + 2 <= r1; r += 2) w4_block(P, X, p, r, 1, 2, y, ystride);
        if (r < r1) w4_block(P, X, p, r, 1, 1, y, ystride);
    }
}

/* Activation rows in chunks of <= 256 KiB, kept in L2 while the panels stream past (see the
 * AVX-512 path). */
static void q_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                     int ystride) {
    const int chunk = DS_MAX(4, (int)(((size_t)256 << 10) / (size_t)X->kpad) & ~3);
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        const int c1 = DS_MIN(r1, c0 + chunk);
        if (P->fmt == DS_LIN_W8A8) w8_panels(P, X, c0, c1, p0, p1, y, ystride);
        else w4_panels(P, X, c0, c1, p0, p1, y, ystride);
    }
}

/* ---- float linears: float64 accumulation ---- */

/* Sixteen weights of row o from column i as four float64 vectors d[k] = W[o][i+4k .. i+4k+3].
 * BF16: interleaving zero words below the bf16 words (in-lane unpack) makes fp32 values without
 * the lane-crossing zero-extension; lane 0 of the unpacks holds columns 0-3 / 4-7 and lane 1
 * columns 8-11 / 12-15, so d[k] holds the same columns as before.  F32: the conversion reads
 * memory directly, with no extract.  The float->float64 conversions are exact either way. */
AI void widen16(const ds_linear *L, const int bf16, int o, int i, __m256d d[4]) {
    if (bf16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)((const ds_bf16 *)L->w + (size_t)o * L->in + i));
        const __m256i z = _mm256_setzero_si256();
        __m256 a = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));   /* cols 0-3 | 8-11 */
        __m256 b = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));   /* cols 4-7 | 12-15 */
        d[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
        d[1] = _mm256_cvtps_pd(_mm256_castps256_ps128(b));
        d[2] = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
        d[3] = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
    } else {
        const float *wr = (const float *)L->w + (size_t)o * L->in + i;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) d[k] = _mm256_cvtps_pd(_mm_loadu_ps(wr + 4 * k));
    }
}

static inline double wval(const ds_linear *L, int o, int i) {
    return L->fmt == DS_LIN_BF16 ? (double)ds_bf16_to_f32(((const ds_bf16 *)L->w)[(size_t)o * L->in + i])
                                 : (double)((const float *)L->w)[(size_t)o * L->in + i];
}

/* RO output rows against one float64 activation row.  Per row: 4 accumulators of 4 lanes, element
 * i of each 16-block goes to accumulator (i/4)%4 lane i%4; combined as ((a0+a1)+(a2+a3)), lanes
 * ((l0+l2)+(l1+l3)), then the tail in index order. */
AI void f_block(const ds_linear *L, const int bf16, const double *xd, int o, const int RO, float *yrow) {
    __m256d acc[2][4];
#pragma GCC unroll 8
    for (int j = 0; j < RO; j++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[j][k] = _mm256_setzero_pd();
    const int in = L->in, k16 = in & ~15;
    const size_t esz = bf16 ? 2 : 4;
    const char *wrow = (const char *)L->w + (size_t)o * (size_t)in * esz;
    for (int i = 0; i < k16; i += 16) {
        __m256d x[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) x[k] = _mm256_loadu_pd(xd + i + 4 * k);
#pragma GCC unroll 8
        for (int j = 0; j < RO; j++) {
            /* 1 KiB (bf16) / 4 KiB (f32) ahead in each weight row: two rows per thread are too few
             * streams for the hardware prefetcher alone to keep memory busy (measured +10-20%
             * GB/s on a GEMV larger than L3; a prefetch past the row end is harmless) */
            _mm_prefetch(wrow + ((size_t)j * in + (size_t)i + (bf16 ? 512 : 1024)) * esz, _MM_HINT_T0);
            __m256d d[4];
            widen16(L, bf16, o + j, i, d);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) acc[j][k] = _mm256_fmadd_pd(d[k], x[k], acc[j][k]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < RO; j++) {
        __m256d v = _mm256_add_pd(_mm256_add_pd(acc[j][0], acc[j][1]), _mm256_add_pd(acc[j][2], acc[j][3]));
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
        double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
        for (int i = k16; i < in; i++) sum += wval(L, o + j, i) * xd[i];
        yrow[o + j] = (float)sum;
    }
}

/* One output row o against RR (1..3) activation rows: the weights are widened to float64 once per
 * 16-block and used for every row, which removes most of the conversion cost when several rows
 * share a step (batched decode, prefill).  Each (o, row) output keeps exactly f_block's
 * accumulator assignment and combination order, so the result is bit-identical to the one-row
 * path: batching cannot change a value. */
AI void f_block_rows(const ds_linear *L, const int bf16, const double *const *xr, int o, const int RR, float *const *yr) {
    __m256d acc[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[r][k] = _mm256_setzero_pd();
    const int in = L->in, k16 = in & ~15;
    const size_t esz = bf16 ? 2 : 4;
    const char *wrow = (const char *)L->w + (size_t)o * (size_t)in * esz;
    for (int i = 0; i < k16; i += 16) {
        _mm_prefetch(wrow + ((size_t)i + (bf16 ? 512 : 1024)) * esz, _MM_HINT_T0);
        __m256d d[4];
        widen16(L, bf16, o, i, d);
#pragma GCC unroll 3
        for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) acc[r][k] = _mm256_fmadd_pd(d[k], _mm256_loadu_pd(xr[r] + i + 4 * k), acc[r][k]);
    }
#pragma GCC unroll 3
    for (int r = 0; r < RR; r++) {
        __m256d v = _mm256_add_pd(_mm256_add_pd(acc[r][0], acc[r][1]), _mm256_add_pd(acc[r][2], acc[r][3]));
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
        double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
        for (int i = k16; i < in; i++) sum += wval(L, o, i) * xr[r][i];
        yr[r][o] = (float)sum;
    }
}

/* Activation rows are taken in blocks of ~256 KiB of float64 so that a block stays in L2 while
 * every output row pair is run against it (a 64-row prefill chunk of a 4096-wide input is 2 MiB of
 * float64, which would otherwise be re-read from L3 for every output pair).  Each output is
 * still one f_block call, so the blocking cannot change a result.  The format is a compile-time
 * constant inside each instance, so the inner loop has no branch. */
AI void f_rows_fmt(const ds_linear *L, const int bf16, const double *xd, int xstride, int n, int o0, int o1,
                   float *y) {
    const int rb = DS_MAX(1, (int)(32768 / DS_MAX(xstride, 1)));
    for (int r0 = 0; r0 < n; r0 += rb) {
        const int r1 = DS_MIN(n, r0 + rb);
        if (r1 - r0 >= 2) {
            /* several rows: widen each weight block once for up to 3 rows */
            for (int o = o0; o < o1; o++)
                for (int r = r0; r < r1; r += 3) {
                    const int rr = DS_MIN(3, r1 - r);
                    const double *xr[3];
                    float *yr[3];
                    for (int t = 0; t < rr; t++) {
                        xr[t] = xd + (size_t)(r + t) * xstride;
                        yr[t] = y + (size_t)(r + t) * L->out;
                    }
                    if (rr == 3) f_block_rows(L, bf16, xr, o, 3, yr);
                    else if (rr == 2) f_block_rows(L, bf16, xr, o, 2, yr);
                    else f_block_rows(L, bf16, xr, o, 1, yr);
                }
            continue;
        }
        int o = o0;
        for (; o + 2 <= o1; o += 2)
            for (int r = r0; r < r1; r++) f_block(L, bf16, xd + (size_t)r * xstride, o, 2, y + (size_t)r * L->out);
        for (; o < o1; o++)
            for (int r = r0; r < r1; r++) f_block(L, bf16, xd + (size_t)r * xstride, o, 1, y + (size_t)r * L->out);
    }
}

static void f_rows(const ds_linear *L, const double *xd, int xstride, int n, int o0, int o1, float *y) {
    if (L->fmt == DS_LIN_BF16) f_rows_fmt(L, 1, xd, xstride, n, o0, o1, y);
    else f_rows_fmt(L, 0, xd, xstride, n, o0, o1, y);
}

/* ---- activation quantization (bit-exact with the scalar reference: IEEE division and
 * round-to-nearest-even are the same operations in vector form) ---- */

AI __m256 bf8_to_ps(const ds_bf16 *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

void ds_avx2_quantize_row(const ds_bf16 *x, int k, int8_t *q, float *s) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    int k8 = k & ~7, i;
    /* max_ps(a, m) returns m when a is NaN, like the scalar `a > amax` test. */
    for (i = 0; i < k8; i += 8) m = _mm256_max_ps(_mm256_and_ps(bf8_to_ps(x + i), absmask), m);
    float lanes[8];
    _mm256_storeu_ps(lanes, m);
    float amax = 0.f;
    for (int l = 0; l < 8; l++) if (lanes[l] > amax) amax = lanes[l];
    for (; i < k; i++) {
        float a = __builtin_fabsf(ds_bf16_to_f32(x[i]));
        if (a > amax) amax = a;
    }
    float sx = amax / 127.0f;
    *s = sx;
    if (amax == 0.f) { memset(q, 0, (size_t)k); return; }
    const __m256 vs = _mm256_set1_ps(sx), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
    int k16 = k & ~15;
    for (i = 0; i < k16; i += 16) {
        __m256 a = _mm256_round_ps(_mm256_div_ps(bf8_to_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 b = _mm256_round_ps(_mm256_div_ps(bf8_to_ps(x + i + 8), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i ia = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(a, hi), lo));
        __m256i ib = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(b, hi), lo));
        __m128i a16 = _mm_packs_epi32(_mm256_castsi256_si128(ia), _mm256_extracti128_si256(ia, 1));
        __m128i b16 = _mm_packs_epi32(_mm256_castsi256_si128(ib), _mm256_extracti128_si256(ib, 1));
        _mm_storeu_si128((__m128i *)(q + i), _mm_packs_epi16(a16, b16));
    }
    for (; i < k; i++) {
        float v = __builtin_rintf(ds_bf16_to_f32(x[i]) / sx);
        if (v > 127.f) v = 127.f;
        if (v < -127.f) v = -127.f;
        q[i] = (int8_t)v;
    }
}

#pragma GCC pop_options

const ds_kern_ops ds_kern_avx2 = {
    .name = "avx2",
    .wants_qu = 0,
    .ff_halves = 1,
    .q_panels = q_panels,
    .f_rows = f_rows,
    .quantize_row = ds_avx2_quantize_row,
    .ff_rows = ds_avx2_ff_rows,
    .ff_dot = NULL,
};
