/* AVX-512 fast-tier float kernels: fp32 linears (F32, BF16 via FMA or vdpbf16ps) in the blocked
 * order of kernels.h, and the fast-tier attention scores (vdpbf16ps, 8 query rows x 2 keys).
 *
 * Why a file of its own: these are the register-tiled multi-row kernels of the fast tier, a
 * different design from the integer panels of kern_avx512.c (fp32 lanes per output row, input
 * blocks of ~16 KiB of weights, a prefetch spread over the row tiles).  Compiled twice like
 * kern_avx512.c: natively and, through test_kernels_avx512_emu.c, with DS_AVX512_EMULATE. */
#include "kernels/kern_avx512_pre.h"

/* ---- fast tier float linears: fp32, the blocked order of kernels.h ----
 * Micro-tiles of RO output rows x RR activation rows: each 64-byte weight load (one block of one
 * row) feeds RR accumulators, and activation rows are taken in chunks of <= 512 KiB so they stay
 * in L2 while every weight row of the range streams past them once per chunk (once per call up
 * to 64 rows of 4096).  BF16 runs either vdpbf16ps (DOT: one instruction per block, the pair
 * order built in) or two FMAs per block on the odd / even halves of each 32-bit word (the bf16 of
 * element 2j+1 is the high half of word j, so AND with 0xffff0000 gives it as fp32 and a 16-bit
 * left shift gives element 2j).  All paths do the same IEEE operations in the same order. */

AI float ff_reduce(__m512 a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

/* Copy the partial last block of RO weight rows, zero padded (64 bytes per row). */
static void ff_tail_copy(const ds_ffw *W, int o, int RO, uint8_t *tail) {
    const size_t esz = W->fmt == DS_LIN_BF16 ? 2 : 4, rowb = (size_t)W->in * esz;
    const int full = W->fmt == DS_LIN_BF16 ? (W->in & ~31) : (W->in & ~15);
    memset(tail, 0, 64 * (size_t)RO);
    for (int j = 0; j < RO; j++)
        memcpy(tail + 64 * j, (const uint8_t *)W->w + (size_t)(o + j) * rowb + (size_t)full * esz,
               (size_t)(W->in - full) * esz);
}

/* Row i of rows `stride` bytes apart from p, addressed as (p or p + stride) + stride x {0, 2, 4}:
 * rows 0..5 from two base registers and one index, where 6 precomputed offsets would spill. */
AI const uint8_t *row_at(const uint8_t *p, size_t stride, int i) {
    const uint8_t *p1 = p + stride;
    switch (i) {
    case 0: return p;
    case 1: return p1;
    case 2: return p + 2 * stride;
    case 3: return p1 + 2 * stride;
    case 4: return p + 4 * stride;
    case 5: return p1 + 4 * stride;
    default: return p + (size_t)i * stride;
    }
}

/* One input block of a tile: RO weight vectors w against RR activation rows at xp (rows xrowb
 * bytes apart), into acc[RO][RR] (KIND: DS_FF_F32, DS_FF_BF16_FMA or DS_FF_BF16_DOT). */
AI void ff_step(const __m512i *w, const uint8_t *xp, size_t xrowb, const int RO, const int RR, const int KIND,
                __m512 acc[8][6]) {
    if (KIND == DS_FF_BF16_DOT) {
UNROLL8
        for (int i = 0; i < RR; i++) {
            __m512i xv = _mm512_loadu_si512((const void *)row_at(xp, xrowb, i));
UNROLL8
            for (int j = 0; j < RO; j++) acc[j][i] = DPBF16(acc[j][i], w[j], xv);
        }
    } else if (KIND == DS_FF_BF16_FMA) {
        const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
        __m512 wo[8], we[8];
UNROLL8
        for (int j = 0; j < RO; j++) {
            wo[j] = _mm512_castsi512_ps(_mm512_and_si512(w[j], hi));
            we[j] = _mm512_castsi512_ps(_mm512_slli_epi32(w[j], 16));
        }
UNROLL8
        for (int i = 0; i < RR; i++) {
            const float *xf = (const float *)(xp + (size_t)i * xrowb);
            __m512 xo = _mm512_loadu_ps(xf), xe = _mm512_loadu_ps(xf + 16);
UNROLL8
            for (int j = 0; j < RO; j++) {
                acc[j][i] = _mm512_fmadd_ps(wo[j], xo, acc[j][i]);
                acc[j][i] = _mm512_fmadd_ps(we[j], xe, acc[j][i]);
            }
        }
    } else {
UNROLL8
        for (int i = 0; i < RR; i++) {
            __m512 xv = _mm512_loadu_ps((const float *)row_at(xp, xrowb, i));
UNROLL8
            for (int j = 0; j < RO; j++) acc[j][i] = _mm512_fmadd_ps(_mm512_castsi512_ps(w[j]), xv, acc[j][i]);
        }
    }
}

/* One full input block of RO weight rows (rows rowb bytes apart from w, prefetching `pf` ahead in
 * each) against the activations at xp.  1 KiB ahead in each row; in a row's last KiB that would
 * be row j + 1, which this tile streams already, so the caller passes the same offset of row
 * j + RO, the next tile's (rows are contiguous): every stream of the next tile starts warm
 * (decision 164, as the AVX2 path's decision 155).  The tile's loop carries no per-block
 * bookkeeping (no tail test, no prefetch offset): a decode GEMV is memory-bound and each
 * instruction fewer lets the out-of-order window hold more of the rows' loads (decision 171). */
AI void ff_block(const uint8_t *w, size_t rowb, size_t pf, const uint8_t *xp, size_t xrowb, const int RO, const int RR,
                 const int KIND, __m512 acc[8][6]) {
    __m512i v[8];
UNROLL8
    for (int j = 0; j < RO; j++) {
        /* non-temporal (DS_Q_HINT; decision 195, over L2's 1.01-1.05x); the L2 hint had run the
         * few-row GEMV of the head [129280, 2048] F32 and a [5120, 8192] BF16 at one row
         * 1.4-1.8x faster than the L1 hint (decision 145) */
        _mm_prefetch((const char *)(w + (size_t)j * rowb + pf), DS_Q_HINT);
        v[j] = _mm512_loadu_si512((const void *)(w + (size_t)j * rowb));
    }
    ff_step(v, xp, xrowb, RO, RR, KIND, acc);
}

/* KIND: DS_FF_F32, DS_FF_BF16_FMA or DS_FF_BF16_DOT (compile-time in each instance). */
/* Inputs [k0, k1) of the tile.  Accumulators start at zero when k0 == 0, else from `part` (the
 * lanes saved by the previous input block: saving and reloading a lane changes no bit), and are
 * reduced into y when k1 == kpad, else saved to `part` ([RR][4] vectors of 16 lanes). */
AI void ff_tile(const ds_ffw *W, const ds_ffact *X, int o, int r, const int RO, const int RR, const int KIND,
                int k0, int k1, float *part, float *y, int ystride) {
    __m512 acc[8][6];
UNROLL8
    for (int j = 0; j < RO; j++)
UNROLL8
        for (int i = 0; i < RR; i++)
            acc[j][i] = k0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(part + (size_t)(i * 4 + j) * 16);
    _Alignas(64) uint8_t tail[64 * 8];
    const int step = KIND == DS_FF_F32 ? 16 : 32;
    if (W->in % step && k1 > (W->in & ~(step - 1))) ff_tail_copy(W, o, RO, tail);
    const size_t xesz = KIND == DS_FF_BF16_DOT ? 2 : 4, xrowb = (size_t)X->stride * xesz;
    const uint8_t *xb = (const uint8_t *)X->x + (size_t)r * xrowb;
    const int esz = KIND == DS_FF_F32 ? 4 : 2, full = W->in & ~(step - 1), kend = DS_MIN(k1, full);
    const size_t rowb = (size_t)W->in * (size_t)esz;
    const uint8_t *wb = (const uint8_t *)W->w + (size_t)o * rowb;
    /* the last KiB of each row prefetches the next tile's rows instead (ff_block) */
    const int near = DS_MAX(k0, DS_MIN(kend, W->in - 1024 / esz));
    int b = k0;
    for (; b < near; b += step) ff_block(wb + (size_t)b * esz, rowb, 1024, xb + (size_t)b * xesz, xrowb, RO, RR, KIND, acc);
    for (; b < kend; b += step)
        ff_block(wb + (size_t)b * esz, rowb, 1024 + (size_t)(RO - 1) * rowb, xb + (size_t)b * xesz, xrowb, RO, RR, KIND, acc);
    if (k1 > full) {
        __m512i w[8];
UNROLL8
        for (int j = 0; j < RO; j++) w[j] = _mm512_loadu_si512((const void *)(tail + 64 * j));
        ff_step(w, xb + (size_t)full * xesz, xrowb, RO, RR, KIND, acc);
    }
    if (k1 < X->kpad) {
UNROLL8
        for (int i = 0; i < RR; i++)
UNROLL8
            for (int j = 0; j < RO; j++) _mm512_storeu_ps(part + (size_t)(i * 4 + j) * 16, acc[j][i]);
        return;
    }
UNROLL8
    for (int i = 0; i < RR; i++)
UNROLL8
        for (int j = 0; j < RO; j++) y[(size_t)(r + i) * ystride + o + j] = ff_reduce(acc[j][i]);
}

#define FF_TILE(RO, RR) ff_tile(W, X, o, r, RO, RR, KIND, k0, k1, part + (size_t)(r - c0) * 64, y, ystride)
#define FF_ROWS_TAIL(RO, RRMAX)                                                                  \
    switch (DS_MIN(RRMAX, r1 - r)) {                                                             \
    case 6: FF_TILE(RO, 6); break;                                                               \
    case 5: FF_TILE(RO, 5); break;                                                               \
    case 4: FF_TILE(RO, 4); break;                                                               \
    case 3: FF_TILE(RO, 3); break;                                                               \
    case 2: FF_TILE(RO, 2); break;                                                               \
    default: FF_TILE(RO, 1); break;                                                              \
    }

/* More than ff_few_rows rows: tiles of 4 weight rows x RR activation rows over input blocks of
 * KB, every row tile of the chunk run against one block before the next (ff_rows_kind).  Only the
 * first row tile finds a block's weights new, so the weights of the next block are prefetched
 * meanwhile, spread evenly over every iteration of every row tile of this one (line l: row l & 3,
 * line l >> 2 of it, so the four rows come in together): weights streaming from memory at 16 rows
 * then arrive while the FMAs run instead of stalling the first tile (alternated calls, one
 * thread, [4096,5120] F32 and [5120,8192] BF16-dot from memory: 16 and 32 rows 1.15-1.2x; 8 to
 * 512 rows 1.05-1.25x).  A matrix that fits in the L2 caches skips it: there the prefetches only
 * take L1 room from lines still in use (64 x 2048 F32, 16 rows: 0.9x).  Iterations from
 * `first` the lanes start at zero, else from `part`; at `last` they are reduced into y. */
#define FF_PREFETCH_MIN_BYTES ((size_t)4 << 20)

/* `nit` full blocks from wb (weights of 4 rows) and xb (RR activation rows), then the tail block
 * from `tail` if given.  Prefetch: line positions in 1/65536 steps, `pos` at the start, `rate`
 * per iteration, up to `lend` lines of nb, issued for 4 iterations at a time (the bookkeeping
 * every iteration cost 0-7% at 16-32 rows in alternated calls). */
AI void ffm_tile(const uint8_t *wb, size_t rowb, const uint8_t *xb, size_t xrowb, int nit, const uint8_t *tail,
                 const uint8_t *nb, unsigned pos, unsigned rate, unsigned lend, const int RO, const int RR, const int KIND,
                 int first, int last, float *part, float *y, int ystride) {
    const size_t xstep = KIND == DS_FF_BF16_FMA ? 128 : 64;
    __m512 acc[8][6];
UNROLL8
    for (int j = 0; j < RO; j++)
UNROLL8
        for (int i = 0; i < RR; i++)
            acc[j][i] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(part + (size_t)(i * RO + j) * 16);
    unsigned line = pos >> 16;
    for (int it = 0; it < nit; it++) {
        pos += rate;
        if ((it & 3) == 0 || it == nit - 1)
            for (const unsigned target = DS_MIN((pos + 3 * rate) >> 16, lend); line < target; line++)
                _mm_prefetch((const char *)(nb + (size_t)(line % (unsigned)RO) * rowb + (size_t)(line / (unsigned)RO) * 64),
                             _MM_HINT_T0);
        __m512i w[8];
UNROLL8
        for (int j = 0; j < RO; j++) w[j] = _mm512_loadu_si512((const void *)row_at(wb + (size_t)it * 64, rowb, j));
        ff_step(w, xb + (size_t)it * xstep, xrowb, RO, RR, KIND, acc);
    }
    if (tail) {
        __m512i w[8];
UNROLL8
        for (int j = 0; j < RO; j++) w[j] = _mm512_loadu_si512((const void *)(tail + 64 * j));
        ff_step(w, xb + (size_t)nit * xstep, xrowb, RO, RR, KIND, acc);
    }
    if (!last) {
UNROLL8
        for (int i = 0; i < RR; i++)
UNROLL8
            for (int j = 0; j < RO; j++) _mm512_storeu_ps(part + (size_t)(i * RO + j) * 16, acc[j][i]);
        return;
    }
UNROLL8
    for (int i = 0; i < RR; i++)
UNROLL8
        for (int j = 0; j < RO; j++) y[(size_t)i * ystride + j] = ff_reduce(acc[j][i]);
}

/* Outputs [o, o + RO) of rows [c0, r1) (o + RO <= o1), inputs in blocks of KB; RO x RRMAX
 * accumulators (RRMAX = 24 / RO, 4 for BF16 via FMA at RO = 4). */
AI void ffm_rows(const ds_ffw *W, const ds_ffact *X, int o, int o1, int c0, int r1, int KB, float *part, float *y,
                 int ystride, const int RO, const int KIND) {
    const int RRMAX = KIND == DS_FF_BF16_FMA ? 4 : 24 / RO, step = KIND == DS_FF_F32 ? 16 : 32;
    const size_t esz = KIND == DS_FF_F32 ? 4 : 2, rowb = (size_t)W->in * esz;
    const size_t xrowb = (size_t)X->stride * (KIND == DS_FF_BF16_DOT ? 2 : 4);
    const int full = W->in & ~(step - 1), nrows = r1 - c0, tiles = (nrows + RRMAX - 1) / RRMAX;
    const int prefetch = (size_t)W->out * rowb >= FF_PREFETCH_MIN_BYTES;
    _Alignas(64) uint8_t tailbuf[64 * 8];
    if (full < W->in) ff_tail_copy(W, o, RO, tailbuf);
    const uint8_t *wo = (const uint8_t *)W->w + (size_t)o * rowb;
    for (int k0 = 0; k0 < X->kpad; k0 += KB) {
        const int k1 = DS_MIN(X->kpad, k0 + KB), nit = (DS_MIN(k1, full) - k0) / step;
        const uint8_t *tail = k1 > full ? tailbuf : NULL, *wb = wo + (size_t)k0 * esz;
        const uint8_t *xb = (const uint8_t *)X->x + (size_t)k0 * (KIND == DS_FF_BF16_DOT ? 2 : 4);
        /* the next block: inputs from k1 of these rows, else the first block of the next RO rows */
        const uint8_t *nb = k1 < X->kpad ? wo + (size_t)k1 * esz : o + 2 * RO <= o1 ? wo + (size_t)RO * rowb : NULL;
        const unsigned lend = prefetch && nb ? (unsigned)RO * (unsigned)(((size_t)KB * esz + 63) / 64) : 0;
        const uint64_t iters = (uint64_t)tiles * (uint64_t)nit;
        const unsigned rate = lend && nit ? (unsigned)((((uint64_t)lend << 16) + iters - 1) / iters) : 0;
        for (int t = 0; t < tiles; t++) {
            const int r = c0 + t * RRMAX;
            const unsigned pos = (unsigned)t * (unsigned)nit * rate;
            const uint8_t *xr = xb + (size_t)r * xrowb;
            float *pr = part + (size_t)(r - c0) * RO * 16, *yr = y + (size_t)r * ystride + o;
#define FFM(RR) ffm_tile(wb, rowb, xr, xrowb, nit, tail, nb, pos, rate, lend, RO, RR, KIND, k0 == 0, k1 == X->kpad, pr, yr, ystride)
            switch (DS_MIN(RRMAX, r1 - r)) {
            case 6: if (RRMAX >= 6) FFM(6); break;
            case 5: if (RRMAX >= 5) FFM(5); break;
            case 4: if (RRMAX >= 4) FFM(4); break;
            case 3: FFM(3); break;
            case 2: FFM(2); break;
            default: FFM(1); break;
            }
#undef FFM
        }
    }
}

/* The few-row path: one pass over the weights with every activation row in one register tile of
 * FF_FEW_RO weight rows (8 streams in flight hide more memory latency than 4: alternated runs on
 * mini, 1-row steps 1.07-1.48x faster).  It serves one row (decode), and two for F32; every other
 * call takes the blocked path below, whose prefetch of the next input block spread over the row
 * tiles beat the few-row tiles of 2-6 rows once it had it: in-process alternated calls, 2 threads,
 * bits equal, BF16 [1024,4096] / [2048,2048] / [10240,6144] via vdpbf16ps 1.07-1.42x at 2-6 rows,
 * via FMA 1.09-1.53x; F32 [4096,5120] / [129280,2048] / [1024,2048] / [1024,4096] 0.92-1.01x at 2
 * rows, 0.96-1.21x at 3-4, 1.08-1.27x at 5-6 (decision 173). */
static inline int ff_few_rows(int kind) { return kind == DS_FF_F32 ? 2 : 1; }
#define FF_FEW_RO 8

/* More than ff_few_rows rows: groups of FFM_RO = 6 weight rows x 4 activation rows (24
 * accumulators + 6 weights + 1 activation vector: 31 of the 32 registers) where a block is one
 * vector per row, else 4 x RRMAX.  Every activation vector comes from L2 (the chunk's rows do not
 * fit L1 beside the weights) and serves one FMA per weight row of the group, so 6 rows read a
 * fifth less L2 per FMA than 4 x 6 tiles; 8 x 3 spills the weights and ran 1.5x slower.
 * Alternated calls, 2 threads, medians of 5 (fast path 4 x 6 -> 6 x 4): head [129280, 2048] F32
 * x 16 rows 35.8 -> 33.5 ms, x 32 63.5 -> 53.7 ms; Engram [10240, 6144] BF16 (vdpbf16ps) x 16
 * 4.49 -> 3.73 ms, x 32 7.48 -> 6.96 ms (decision 133). */
#define FFM_RO 6

/* Input block of a group of ro weight rows: about 16 KiB of weights per block, the input split
 * into blocks of equal size (a short last block pays the saving of the lanes for few FMAs). */
static inline int ffm_block(int kpad, int esz, int step, int ro) {
    const int nb = (int)(((size_t)kpad * esz * ro + 16383) / 16384);
    return ((kpad + nb - 1) / nb + step - 1) / step * step;
}

/* RRMAX activation rows per tile: 6 (24 accumulators + 4 weights) where a block is one vector per
 * row, 4 for BF16 via FMA (which also holds the odd and even halves of 4 weight vectors).
 * More than ff_few_rows rows: groups of FFM_RO weight rows (above; the 4-row tiles for BF16 via
 * FMA and for the last outputs of a range), inputs walked in blocks (KB, KB6) so that the group's
 * weight rows of one block (16 KiB) stay in L1 while every row tile of the chunk runs against
 * them; the partial lanes wait in `part` (the lanes' order of operations is unchanged).
 * Few rows (above): the whole input is one block (`part` is never used), each weight row streams
 * from memory once, and the tile takes every row.  Each output's sum keeps its order in every
 * tile shape. */
AI void ff_rows_kind(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride, const int KIND) {
    const int RRMAX = KIND == DS_FF_BF16_FMA ? 4 : 6;
    const size_t rowbytes = (size_t)X->stride * (KIND == DS_FF_BF16_DOT ? 2 : 4);
    const int few = X->n <= ff_few_rows(KIND);
    const int KB = few ? X->kpad : KIND == DS_FF_BF16_DOT ? 2048 : 1024;
    const int KB6 = ffm_block(X->kpad, KIND == DS_FF_F32 ? 4 : 2, KIND == DS_FF_F32 ? 16 : 32, FFM_RO);
    enum { MAXCHUNK = 96 };
    _Alignas(64) float part[MAXCHUNK * FFM_RO * 16];
    /* rows per chunk: their activations (<= 1 MiB) are re-read from L2 for every output tile,
     * while each weight row streams from memory once per chunk */
    int chunk = DS_MAX(RRMAX, (int)(((size_t)1 << 20) / rowbytes) / RRMAX * RRMAX);
    if (KB < X->kpad || (!few && KB6 < X->kpad)) chunk = DS_MIN(chunk, MAXCHUNK); /* lanes wait in `part` */
    for (int c0 = 0; c0 < X->n; c0 += chunk) {
        const int r1 = DS_MIN(X->n, c0 + chunk);
        for (int o = o0; o < o1;) {
            const int ro = few && o + FF_FEW_RO <= o1 ? FF_FEW_RO : o + 4 <= o1 ? 4 : 1;
            if (!few && ro == 1 && o1 - o0 >= 4) {
                /* 1-3 outputs left: one 4-row group ending at o1, its first outputs computed again
                 * (the same bits rewritten by this task; a 1-output tile costs ~2x per product) */
                ffm_rows(W, X, o1 - 4, o1, c0, r1, KB, part, y, ystride, 4, KIND);
                o = o1;
                continue;
            }
            if (!few && ro == 4) {
                if (KIND != DS_FF_BF16_FMA && o + FFM_RO <= o1) {
                    ffm_rows(W, X, o, o1, c0, r1, KB6, part, y, ystride, FFM_RO, KIND);
                    o += FFM_RO;
                } else {
                    ffm_rows(W, X, o, o1, c0, r1, KB, part, y, ystride, 4, KIND);
                    o += 4;
                }
                continue;
            }
            for (int k0 = 0; k0 < X->kpad; k0 += KB) {
                const int k1 = DS_MIN(X->kpad, k0 + KB);
                for (int r = c0; r < r1; r += RRMAX) {
                    if (ro == FF_FEW_RO) { /* few rows: one tile */
                        if (r1 - r == 2) FF_TILE(FF_FEW_RO, 2);
                        else FF_TILE(FF_FEW_RO, 1);
                    } else if (ro == 4) { /* the last outputs of a few-row range */
                        if (r1 - r == 2) FF_TILE(4, 2);
                        else FF_TILE(4, 1);
                    } else FF_ROWS_TAIL(1, RRMAX)
                }
            }
            o += ro;
        }
    }
}

void DS_AVX512_FAST(ff_rows)(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    if (X->kind == DS_FF_F32) ff_rows_kind(W, X, o0, o1, y, ystride, DS_FF_F32);
    else ff_rows_kind(W, X, o0, o1, y, ystride, DS_FF_BF16_FMA);
}

void DS_AVX512_FAST(ff_dot)(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    ff_rows_kind(W, X, o0, o1, y, ystride, DS_FF_BF16_DOT);
}

/* ---- fast-tier attention scores (ds_fast_pair_scores8) ----
 * vdpbf16ps computes exactly the pair order (odd product, then even, into each of 16 lanes) once
 * its operands obey the flush rule, which the queries do already and each key chunk is made to here
 * (one mask per 32 values, shared by the 8 rows).  Two keys per pass: 16 accumulators, each query
 * vector loaded once for both keys.  The 16 dots are then finished together: each level of the
 * order's tree (l[j] + l[j+8], then +4, +2, +1) is one add of two shuffled vectors that holds that
 * level for two, four, eight and sixteen dots at once: 15 adds and 30 shuffles instead of 16
 * separate reductions; every lane adds the same two values the tree adds. */
AI __m512i pair_flush(__m512i k) {
    const __m512i expm = _mm512_set1_epi16(0x7f80), lim = _mm512_set1_epi16(DS_FF_MIN_EXP_FIELD << 7);
    return _mm512_maskz_mov_epi16(_mm512_cmpge_epu16_mask(_mm512_and_si512(k, expm), lim), k);
}

/* 128-bit lanes of a and b as _mm512_shuffle_f32x4 picks them (the integer form: SIMDe has it). */
#define SHUF128(a, b, imm) \
    _mm512_castsi512_ps(_mm512_shuffle_i32x4(_mm512_castps_si512(a), _mm512_castps_si512(b), (imm)))

/* A[i] -> lane i of the result, i < 16, each the tree of its 16 lanes. */
AI __m512 pair_finish16(const __m512 A[16]) {
    __m512 l1[8], l2[4], l3[2];
UNROLL8
    for (int p = 0; p < 8; p++)   /* lanes 0-7: A[2p]'s l[j] + l[j+8]; lanes 8-15: A[2p+1]'s */
        l1[p] = _mm512_add_ps(SHUF128(A[2 * p], A[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              SHUF128(A[2 * p], A[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
UNROLL8
    for (int p = 0; p < 4; p++)   /* 128-bit lane m: A[4p + m]'s + 4 level */
        l2[p] = _mm512_add_ps(SHUF128(l1[2 * p], l1[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                              SHUF128(l1[2 * p], l1[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
UNROLL8
    for (int p = 0; p < 2; p++)   /* lane m: A[8p + m]'s +2 level (2 values), then A[8p + 4 + m]'s */
        l3[p] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * p], l2[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(l2[2 * p], l2[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane m, element t: A[4t + m]'s last level; permuted so that element i is A[i]'s */
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(l3[0], l3[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, y);
}

void DS_AVX512_FAST(pair_scores8)(const ds_bf16 *q, int n, const ds_bf16 *const *keys, int nk, float *out) {
    for (int u = 0; u < nk; u += 2) {
        const ds_bf16 *k0 = keys[u], *k1 = keys[u + 1 < nk ? u + 1 : u];
        /* every loop over A and over the finishing levels fully unrolled, so that A lives in
         * registers: unrolled by 8, GCC kept A in memory, cleared it with `rep stos` and stored
         * and reloaded it for the finish at every key pair (decision 194: 1.39-1.48x) */
        __m512 A[16];
UNROLL16
        for (int i = 0; i < 16; i++) A[i] = _mm512_setzero_ps();
        /* the next pair's keys: each key is its own stream, started cold at every pair otherwise */
        const ds_bf16 *n0 = keys[u + 2 < nk ? u + 2 : u], *n1 = keys[u + 3 < nk ? u + 3 : u];
        for (int b = 0; b < n; b += 32) {
            _mm_prefetch((const char *)(n0 + b), _MM_HINT_T0);
            _mm_prefetch((const char *)(n1 + b), _MM_HINT_T0);
            const __m512i x0 = pair_flush(_mm512_loadu_si512((const void *)(k0 + b)));
            const __m512i x1 = pair_flush(_mm512_loadu_si512((const void *)(k1 + b)));
UNROLL8
            for (int r = 0; r < 8; r++) {
                const __m512i qv = _mm512_loadu_si512((const void *)(q + (size_t)r * n + b));
                A[r] = DPBF16(A[r], qv, x0);
                A[8 + r] = DPBF16(A[8 + r], qv, x1);
            }
        }
        const __m512 y = pair_finish16(A);
        if (u + 1 < nk) _mm512_storeu_ps(out + (size_t)u * 8, y);
        else _mm256_storeu_ps(out + (size_t)u * 8, _mm512_castps512_ps256(y));
    }
}

#ifndef DS_AVX512_EMULATE
/* Whether vdpbf16ps rounds as the fast order says (odd product first, one rounding per product):
 * operands chosen so that the other orders and a single rounding of both products each give a
 * different fp32 result.  Checked once when the path is selected. */
int ds_avx512_bf16dot_matches(void) {
    /* lane 0: (1 + 2^-23) + 2^-24 (odd) + 1.5 * 2^-23 (even) gives 1 + 2^-21 odd first, 1 + 2^-22
     * even first and 1 + 3 * 2^-23 with one rounding; lane 1: single rounding of 1 + 2^-24 + 2^-24
     * gives 1 + 2^-23, sequential gives 1; lanes 2, 3: the same with signs flipped */
    static const float accs[4] = {1.0f + 0x1p-23f, 1.0f, -1.0f - 0x1p-23f, -1.0f};
    static const uint16_t w0[4] = {0x3440, 0x3380, 0xb440, 0xb380}, w1[4] = {0x3380, 0x3380, 0xb380, 0xb380};
    uint16_t wv[32] = {0}, xv[32] = {0};
    float a[16] = {0}, out[16];
    for (int j = 0; j < 4; j++) {
        wv[2 * j] = w0[j];
        wv[2 * j + 1] = w1[j];
        xv[2 * j] = xv[2 * j + 1] = 0x3f80; /* 1.0 */
        a[j] = accs[j];
    }
    _mm512_storeu_ps(out, DPBF16(_mm512_loadu_ps(a), _mm512_loadu_si512(wv), _mm512_loadu_si512(xv)));
    for (int j = 0; j < 16; j++) {
        float e = a[j];
        uint32_t b1 = (uint32_t)wv[2 * j + 1] << 16, b0 = (uint32_t)wv[2 * j] << 16;
        float f1, f0;
        memcpy(&f1, &b1, 4);
        memcpy(&f0, &b0, 4);
        e = fmaf(f1, 1.0f, e);
        e = fmaf(f0, 1.0f, e);
        if (memcmp(&e, &out[j], 4)) return 0;
    }
    return 1;
}
#pragma GCC pop_options
#endif
