/* AVX-512 VNNI kernel path.
 *
 * Integer kernels: one zmm register holds one 64-byte tile of the shared layout (16 output rows x
 * 4 inputs for int8, x 8 inputs for int4), and VPDPBUSD against 4 broadcast activation bytes adds
 * 4 exact u8 x s8 products into each of the 16 int32 lanes.  VPDPBUSD needs one unsigned operand:
 *   W8A8: the activations, biased to x+128 (0..255); the weights stay signed; the bias adds
 *         128*Σ_i W[o][i], removed with the per-row sums stored at repack;
 *   W4A8: the weights, stored as w+8 (0..15); the activations stay signed; the bias adds 8*Σx.
 * Sums stay below 2^31 for every shape here (CHECKPOINT.md §7), and int32 wraps exactly anyway,
 * so outputs are bit-identical to the scalar reference.  Calls of 1 to 8 rows (decode, a verify
 * step, one expert's rows in a batched decode step) walk 4 panels at once (W4A8: 6 at 1-2 rows,
 * 3 at 5-8), taken from equal parts of the range so each stream reads on sequentially, over the
 * whole input, every row's accumulators in registers, so each weight byte is read once for all
 * rows (q_small); more rows keep 2 panels x 12 activation rows = 24 accumulators in
 * registers and are cache-blocked (q_panels): row chunks stay in L2, input blocks of a panel pair
 * stay in L1 while every row tile of the chunk runs against them.
 * Float kernels: weights widened to float64 and FMA'd with exact float64 activations, 2 x 8 lanes
 * per output row, combined in a fixed order (batch and thread invariant).  Fast-tier float kernels
 * (kern_avx512_fast.c) accumulate in fp32 in the blocked order of kernels.h, with vdpbf16ps for
 * BF16 where the CPU has it.
 *
 * The file is compiled twice: normally (AVX-512 target pragma, real intrinsics), and by the unit
 * test test_kernels_avx512_emu.c with DS_AVX512_EMULATE defined, where SIMDe supplies portable
 * implementations of the same intrinsics, so hosts without AVX-512 still check this code's
 * arithmetic bit for bit against the reference (it includes kern_avx512_fast.c too). */
#include "kernels/kern_avx512_pre.h"

static inline int32_t ld4(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }

AI void store16(__m512i acc, float sx, const float *scale, int o0, int out, float *yrow) {
    __m512 sc = _mm512_mul_ps(_mm512_set1_ps(sx), _mm512_loadu_ps(scale + o0));
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), sc);
    if (o0 + 16 <= out) _mm512_storeu_ps(yrow + o0, v);
    else if (o0 < out) _mm512_mask_storeu_ps(yrow + o0, (__mmask16)((1u << (out - o0)) - 1u), v);
}

/* The few-row product and the first row tile of each input block of the many-row product (PF = 1
 * below) prefetch DS_Q_PREFETCH (kern_internal.h) ahead in each panel.  Near a panel's end that
 * distance would land in the next panel, which the same tile streams already; there it goes to
 * the same offset of the panel NP further on instead, the one this panel's stream continues in
 * the next panel group, so every stream of that group starts warm (decision 174, as the AVX2
 * path's decision 155).  The hint is non-temporal (DS_Q_HINT, kern_internal.h). */

/* VPDPBUSD through a tied asm operand: GCC 12 keeps an array of intrinsic accumulators poorly (a
 * register copy per instruction plus stack spills inside the k loop); "+v" keeps each accumulator
 * in its register (measured +25-35% on W8A8 with many rows).  Not volatile, so still scheduled
 * freely.  (A {1to16} memory-broadcast operand for W4A8 was measured slower on this path's hosts
 * than one register broadcast shared by both panels.)  The emulated build runs the intrinsic. */
#ifndef DS_AVX512_EMULATE
AI __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}
#else
#define dpbusd(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#endif
#define DS_Q_NR 12 /* rows per micro-tile: 2 panels x 12 rows = 24 accumulators */
#define DS_Q_NP_MAX 6 /* panels side by side at most (W4A8 at 1-2 rows, q_small) */

/* Input steps [s0, s1) of a micro-tile.  Tiles that do not cover the whole input start from and
 * park their int32 partial sums in `part` (row r at part + (r - r0) * 32 ints: 2 panels x 16);
 * int32 sums are exact, so splitting the inputs changes no bit. */
typedef struct { int s0, s1, first, last, r0; int32_t *part; } qrange;

AI void acc_init(__m512i acc[DS_Q_NP_MAX][12], const int NP, const int NR, const qrange *K, int r) {
UNROLL12
    for (int j = 0; j < NP; j++)
UNROLL12
        for (int i = 0; i < NR; i++)
            acc[j][i] = K->first ? _mm512_setzero_si512()
                                 : _mm512_load_si512((const void *)(K->part + (size_t)(r - K->r0 + i) * 32 + 16 * j));
}

/* Returns 1 when the partial sums were parked (more input blocks follow). */
AI int acc_park(__m512i acc[DS_Q_NP_MAX][12], const int NP, const int NR, const qrange *K, int r) {
    if (K->last) return 0;
UNROLL12
    for (int j = 0; j < NP; j++)
UNROLL12
        for (int i = 0; i < NR; i++)
            _mm512_store_si512((void *)(K->part + (size_t)(r - K->r0 + i) * 32 + 16 * j), acc[j][i]);
    return 1;
}

/* Prefetch offsets (above): DS_Q_PREFETCH ahead in each panel up to input step pf_near, then the
 * same offset in the panel NP further on.  Only addresses of prefetches change: no output bit. */
AI int pf_near(const ds_packed *P) { return (int)(((long)P->ksteps * DS_TILE_BYTES - DS_Q_PREFETCH) / DS_TILE_BYTES); }
AI size_t pf_far(const ds_packed *P, int NP) { return DS_Q_PREFETCH + (size_t)(NP - 1) * P->panel_bytes; }

/* One micro-tile: NP panels (16 outputs each) x NR activation rows, NP*NR accumulators held in
 * registers over the whole input range (2 x 12 = 24 of the 32 zmm, plus the weight tiles). */
AI void w8_block(const ds_packed *P, const ds_qact *X, int p, int dp, int r, const int NP, const int NR,
                 const qrange *K, float *y, int ystride, const int PF) {
    __m512i acc[DS_Q_NP_MAX][12];
    acc_init(acc, NP, NR, K, r);
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    const uint8_t *xr = X->qu + (size_t)r * X->kpad;
    const size_t kpad = (size_t)X->kpad;
    /* two steps per iteration where the registers allow (as W4A8's one step of 8 inputs): with 4
     * inputs per step the loop's own work (the row pointers, which GCC parks in vector registers)
     * took as long as its VPDPBUSDs; int32 sums are exact, so no bit moves */
    const int two = NP * NR + 2 * NP + 2 <= 32;
    int s = K->s0;
    for (int seg = 0; seg < 2; seg++) {
        const int send = seg ? K->s1 : DS_MIN(K->s1, pf_near(P));
        const size_t pf = seg && dp == 1 ? pf_far(P, NP) : DS_Q_PREFETCH;
        for (; two && s + 2 <= send; s += 2) {
            __m512i w0[DS_Q_NP_MAX], w1[DS_Q_NP_MAX];
UNROLL12
            for (int j = 0; j < NP; j++) {
                const uint8_t *t = wp + (size_t)j * dp * P->panel_bytes + (size_t)s * DS_TILE_BYTES;
                if (PF) {
                    _mm_prefetch((const char *)(t + pf), DS_Q_HINT);
                    _mm_prefetch((const char *)(t + DS_TILE_BYTES + pf), DS_Q_HINT);
                }
                w0[j] = _mm512_load_si512((const void *)t);
                w1[j] = _mm512_load_si512((const void *)(t + DS_TILE_BYTES));
            }
UNROLL12
            for (int i = 0; i < NR; i++) {
                const uint8_t *xs = xr + (size_t)i * kpad + 4 * (size_t)s;
                __m512i x0 = _mm512_set1_epi32(ld4(xs)), x1 = _mm512_set1_epi32(ld4(xs + 4));
UNROLL12
                for (int j = 0; j < NP; j++) {
                    acc[j][i] = dpbusd(acc[j][i], x0, w0[j]);
                    acc[j][i] = dpbusd(acc[j][i], x1, w1[j]);
                }
            }
        }
        for (; s < send; s++) {
            __m512i w[DS_Q_NP_MAX];
UNROLL12
            for (int j = 0; j < NP; j++) {
                const uint8_t *t = wp + (size_t)j * dp * P->panel_bytes + (size_t)s * DS_TILE_BYTES;
                if (PF) _mm_prefetch((const char *)(t + pf), DS_Q_HINT);
                w[j] = _mm512_load_si512((const void *)t);
            }
UNROLL12
            for (int i = 0; i < NR; i++) {
                __m512i xb = _mm512_set1_epi32(ld4(xr + (size_t)i * kpad + 4 * (size_t)s));
UNROLL12
                for (int j = 0; j < NP; j++) acc[j][i] = dpbusd(acc[j][i], xb, w[j]);
            }
        }
    }
    if (acc_park(acc, NP, NR, K, r)) return;
UNROLL12
    for (int j = 0; j < NP; j++) {
        int o0 = (p + j * dp) * DS_PANEL_ROWS;
        __m512i bias = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(P->wsum + o0)), 7);
UNROLL12
        for (int i = 0; i < NR; i++)
            store16(_mm512_sub_epi32(acc[j][i], bias), X->s[r + i], P->scale, o0, P->out,
                    y + (size_t)(r + i) * ystride);
    }
}

AI void w4_block(const ds_packed *P, const ds_qact *X, int p, int dp, int r, const int NP, const int NR,
                 const qrange *K, float *y, int ystride, const int PF) {
    __m512i acc[DS_Q_NP_MAX][12];
    const __m512i m0f = _mm512_set1_epi8(0x0f);
    acc_init(acc, NP, NR, K, r);
    const uint8_t *wp = P->tiles + (size_t)p * P->panel_bytes;
    const int8_t *xr = X->q + (size_t)r * X->kpad;
    const size_t kpad = (size_t)X->kpad;
    int s = K->s0;
    for (int seg = 0; seg < 2; seg++) {
        const int send = seg ? K->s1 : DS_MIN(K->s1, pf_near(P));
        const size_t pf = seg && dp == 1 ? pf_far(P, NP) : DS_Q_PREFETCH;
        for (; s < send; s++) {
            __m512i lo[DS_Q_NP_MAX], hi[DS_Q_NP_MAX];
UNROLL12
            for (int j = 0; j < NP; j++) {
                const uint8_t *t = wp + (size_t)j * dp * P->panel_bytes + (size_t)s * DS_TILE_BYTES;
                if (PF) _mm_prefetch((const char *)(t + pf), DS_Q_HINT);
                __m512i w = _mm512_load_si512((const void *)t);
                lo[j] = _mm512_and_si512(w, m0f);
                hi[j] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m0f);
            }
UNROLL12
            for (int i = 0; i < NR; i++) {
                const int8_t *xs = xr + (size_t)i * kpad + 8 * (size_t)s;
                __m512i x0 = _mm512_set1_epi32(ld4(xs)), x1 = _mm512_set1_epi32(ld4(xs + 4));
UNROLL12
                for (int j = 0; j < NP; j++) {
                    acc[j][i] = dpbusd(acc[j][i], lo[j], x0);
                    acc[j][i] = dpbusd(acc[j][i], hi[j], x1);
                }
            }
        }
    }
    if (acc_park(acc, NP, NR, K, r)) return;
UNROLL12
    for (int i = 0; i < NR; i++) {
        __m512i bias = _mm512_set1_epi32(8 * X->xsum[r + i]);
UNROLL12
        for (int j = 0; j < NP; j++)
            store16(_mm512_sub_epi32(acc[j][i], bias), X->s[r + i], P->scale, (p + j * dp) * DS_PANEL_ROWS,
                    P->out, y + (size_t)(r + i) * ystride);
    }
}

/* Rows [r0, r1) of one panel group over one input block: blocks of 12, then the remainder as one
 * exact-height tile (the block's weights stay in L1 between the row blocks; a 6-row verify step is
 * one 6-row tile, not 4 + 2).  The first tile is the one that brings the block's weights in from
 * memory: it prefetches ahead (into L2, as q_small does), the later tiles find them in L1
 * (decision 162: 1.1-1.4x on a matrix streamed from memory at 12-32 rows; no effect in cache). */
#define ROW_BLOCKS(FN, NP)                                                                       \
    do {                                                                                         \
        int r = r0;                                                                              \
        if (r + DS_Q_NR <= r1) FN(P, X, p, dp, r, NP, DS_Q_NR, K, y, ystride, 1), r += DS_Q_NR;   \
        for (; r + DS_Q_NR <= r1; r += DS_Q_NR) FN(P, X, p, dp, r, NP, DS_Q_NR, K, y, ystride, 0); \
        const int first = r == r0;                                                               \
        switch (r1 - r) {                                                                        \
        case 11: FN(P, X, p, dp, r, NP, 11, K, y, ystride, first); break;                         \
        case 10: FN(P, X, p, dp, r, NP, 10, K, y, ystride, first); break;                         \
        case 9: FN(P, X, p, dp, r, NP, 9, K, y, ystride, first); break;                           \
        case 8: FN(P, X, p, dp, r, NP, 8, K, y, ystride, first); break;                           \
        case 7: FN(P, X, p, dp, r, NP, 7, K, y, ystride, first); break;                           \
        case 6: FN(P, X, p, dp, r, NP, 6, K, y, ystride, first); break;                           \
        case 5: FN(P, X, p, dp, r, NP, 5, K, y, ystride, first); break;                           \
        case 4: FN(P, X, p, dp, r, NP, 4, K, y, ystride, first); break;                           \
        case 3: FN(P, X, p, dp, r, NP, 3, K, y, ystride, first); break;                           \
        case 2: FN(P, X, p, dp, r, NP, 2, K, y, ystride, first); break;                           \
        case 1: FN(P, X, p, dp, r, NP, 1, K, y, ystride, first); break;                           \
        default: break;                                                                          \
        }                                                                                        \
    } while (0)

static void w8_rows(const ds_packed *P, const ds_qact *X, int r0, int r1, int p, int dp, int np, const qrange *K,
                    float *y, int ystride) {
    if (np == 2) ROW_BLOCKS(w8_block, 2);
    else ROW_BLOCKS(w8_block, 1);
}

static void w4_rows(const ds_packed *P, const ds_qact *X, int r0, int r1, int p, int dp, int np, const qrange *K,
                    float *y, int ystride) {
    if (np == 2) ROW_BLOCKS(w4_block, 2);
    else ROW_BLOCKS(w4_block, 1);
}

/* Few rows (1 to DS_Q_SMALL: a decode row, a verify step, one expert's share of a batched decode
 * step): the whole input range in one pass, so each weight byte is read once for every row, with
 * SMALL_NP(n) panels side by side so that all n x NP accumulators stay in registers and there are
 * enough independent VPDPBUSD chains to hide its latency.  Several weight streams at once also
 * keep the hardware prefetchers ahead (a matrix-vector product has nothing else to reuse).
 * W4A8 at 1-2 rows walks 6 panels, not 4 (decision 178): a W4A8 tile holds twice the inputs of a
 * W8A8 one and needs the nibble unpack, so each stream is consumed more slowly, and 6 streams keep
 * more lines in flight: expert matrices [768, 2048] x 2 rows 1.07-1.13x, x 1 1.01-1.05x; W8A8
 * with 6 or 8 panels ran 0.86-1.04x and keeps 4; 3-4 rows with 5-6 panels ran 0.83-1.06x. */
#define DS_Q_SMALL 8
#ifndef SMALL_NP
#define SMALL_NP(n, w8) ((w8) ? 4 : (n) <= 2 ? 6 : (n) <= 4 ? 4 : 3)
#endif
#define SMALL_CASE(FN, NP, NR) case NR: FN(P, X, p, dp, r0, NP, NR, &K, y, ystride, 1); break
#define SMALL_TILES(FN, NP)                                                                      \
    do {                                                                                         \
        switch (n) {                                                                             \
            SMALL_CASE(FN, NP, 1); SMALL_CASE(FN, NP, 2); SMALL_CASE(FN, NP, 3);                 \
            SMALL_CASE(FN, NP, 4); SMALL_CASE(FN, NP, 5); SMALL_CASE(FN, NP, 6);                 \
            SMALL_CASE(FN, NP, 7); SMALL_CASE(FN, NP, 8);                                        \
        default: break;                                                                          \
        }                                                                                        \
    } while (0)
/* 5-6 panels: W4A8 at 1-2 rows only (SMALL_NP) */
#define SMALL_WIDE(FN, NP)                                                                       \
    do {                                                                                         \
        if (n == 1) FN(P, X, p, dp, r0, NP, 1, &K, y, ystride, 1);                               \
        else FN(P, X, p, dp, r0, NP, 2, &K, y, ystride, 1);                                      \
    } while (0)
/* One group of np panels, p + j·dp for j < np, against rows [r0, r0 + n). */
static void small_group(const ds_packed *P, const ds_qact *X, const qrange *Kr, int r0, int n, int p, int dp, int np,
                        float *y, int ystride) {
    const qrange K = *Kr;
    switch (np * 2 + (P->fmt == DS_LIN_W8A8)) {
    case 12: SMALL_WIDE(w4_block, 6); break;   /* W4A8, 1-2 rows */
    case 10: SMALL_WIDE(w4_block, 5); break;
    case 8: SMALL_TILES(w4_block, 4); break;
    case 9: SMALL_TILES(w8_block, 4); break;
    case 6: SMALL_TILES(w4_block, 3); break;
    case 7: SMALL_TILES(w8_block, 3); break;
    case 4: SMALL_TILES(w4_block, 2); break;
    case 5: SMALL_TILES(w8_block, 2); break;
    case 2: SMALL_TILES(w4_block, 1); break;
    default: SMALL_TILES(w8_block, 1); break;
    }
}

/* The range cut in NP equal parts walked side by side (panel p0 + i beside p0 + q + i, ...), so
 * each weight stream runs on into its next panel as one sequential read the hardware prefetchers
 * follow (neighbouring panels, even with the prefetch aimed at each stream's next panel, began
 * NP - 1 streams cold at every group; decision 181); the < NP panels left over as neighbours. */
static void q_small(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                    int ystride) {
    const qrange K = {0, P->ksteps, 1, 1, r0, NULL};
    const int n = r1 - r0, NP = SMALL_NP(n, P->fmt == DS_LIN_W8A8), q = (p1 - p0) / NP;
    for (int a = p0; a < p0 + q; a++) small_group(P, X, &K, r0, n, a, q, NP, y, ystride);
    for (int p = p0 + NP * q; p < p1;) {
        const int np = DS_MIN(NP, p1 - p);
        small_group(P, X, &K, r0, n, p, 1, np, y, ystride);
        p += np;
    }
}

/* Cache blocking of the many-row product (the single-row product walks 4 panels at once over the
 * whole input: 4 weight streams, nothing to reuse).  Activation rows go in chunks of <=
 * DS_Q_CHUNK_BYTES that stay in L2 while every panel pair of the range streams past once per chunk;
 * inside a chunk, a panel pair's inputs go in blocks of DS_Q_KBLOCK bytes of weights that stay in
 * L1 while every 12-row tile of the chunk runs against them, partial sums parked in between. */
#ifndef DS_Q_CHUNK_BYTES
#define DS_Q_CHUNK_BYTES ((size_t)512 << 10)
#endif
#ifndef DS_Q_KBLOCK
#define DS_Q_KBLOCK ((size_t)16 << 10)
#endif
enum { Q_CHUNK_MAX = 192 };
static void q_panels(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                     int ystride) {
    _Alignas(64) int32_t part[Q_CHUNK_MAX * 32];
    const int w8 = P->fmt == DS_LIN_W8A8;
    if (r1 - r0 <= DS_Q_SMALL) {
        q_small(P, X, r0, r1, p0, p1, y, ystride);
        return;
    }
    const int chunk = DS_MAX(12, DS_MIN(Q_CHUNK_MAX, (int)(DS_Q_CHUNK_BYTES / (size_t)X->kpad) / 12 * 12));
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        const int c1 = DS_MIN(r1, c0 + chunk);
        /* steps per input block (2 panels); one block when the chunk is a single tile: nothing to reuse */
        const int kb = c1 - c0 <= DS_Q_NR ? P->ksteps : DS_MAX(1, (int)(DS_Q_KBLOCK / (2 * DS_TILE_BYTES)));
        /* panel pairs (a, a + q) from the two halves of the range: each stream runs on into its
         * next panel, none starts cold at a pair (as q_small, decision 181); an odd last panel alone */
        const int q = (p1 - p0) / 2;
        for (int a = p0; a < p1;) {
            const int paired = a < p0 + q, np = paired ? 2 : 1, dp = paired ? q : 1;
            for (int s0 = 0; s0 < P->ksteps; s0 += kb) {
                const int s1 = DS_MIN(P->ksteps, s0 + kb);
                qrange K = {s0, s1, s0 == 0, s1 == P->ksteps, c0, part};
                (w8 ? w8_rows : w4_rows)(P, X, c0, c1, a, dp, np, &K, y, ystride);
            }
            a = paired && a + 1 == p0 + q ? p0 + 2 * q : a + 1;
        }
    }
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
    .fp8_plain_map = 1,
    .q_panels = q_panels,
    .f_rows = f_rows,
    .quantize_row = DS_QUANTIZE_ROW,
    .ff_rows = DS_AVX512_FAST(ff_rows),
    .ff_dot = DS_AVX512_FAST(ff_dot),
    .pair_scores8 = DS_AVX512_FAST(pair_scores8),
};
