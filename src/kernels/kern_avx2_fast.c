/* AVX2 fast-tier float linears (numerics "fast"): F32, BF16 and FP8 weights against fp32
 * activations, accumulated in fp32 with FMA in the blocked order of kernels.h, so every output is
 * bit-identical to the scalar reference and to the AVX-512 / vdpbf16ps kernels whatever the tile.
 *
 * Why a file of their own: one activation row (decode) and many (batched decode, verify, prefill)
 * need different loops over the same arithmetic — a matrix-vector tile streaming four weight rows
 * from memory, and input blocks held in L1 against register tiles of rows — and the integer and
 * float64 kernels of kern_avx2.c share nothing with them but the CPU target.  The dispatcher reaches
 * them through ds_kern_avx2.ff_rows (kern_avx2.c) and, for FP8 from five rows, through
 * ds_fp8_ff_blocked_avx2 (official.c).  Compiled for AVX2 + FMA through the target pragma; only
 * called when CPUID reports both. */
#include "kernels/kern_internal.h"
#include "kernels/kern_official.h"
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* ---- fast tier float linears: fp32, the blocked order of kernels.h ----
 * Each of the 16 lanes of the order is split over two ymm registers (lanes 0-7, 8-15).  BF16
 * blocks are 32 inputs: the low 16 bf16 of a block feed lanes 0-7, the high 16 lanes 8-15; within
 * a 32-bit word the high half (element 2j+1) is taken by an AND with 0xffff0000 and the low half
 * (element 2j) by a 16-bit left shift, odd first, as vdpbf16ps does.  One activation row runs
 * tiles of RO output rows over the whole input (its operands come straight from memory); the
 * blocked tiles further down take two rows and more. */

AI float ff_reduce(__m256 lo, __m256 hi) {
    __m256 h = _mm256_add_ps(lo, hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

static void ff_tail_copy(const ds_ffw *W, int o, int dr, int RO, uint8_t *tail) {
    const size_t esz = W->fmt == DS_LIN_BF16 ? 2 : 4, rowb = (size_t)W->in * esz;
    const int full = W->fmt == DS_LIN_BF16 ? (W->in & ~31) : (W->in & ~15);
    memset(tail, 0, 64 * 4);
    for (int j = 0; j < RO; j++)
        memcpy(tail + 64 * j, (const uint8_t *)W->w + (size_t)(o + j * dr) * rowb + (size_t)full * esz,
               (size_t)(W->in - full) * esz);
}

/* One block of RO weight rows (rows rowb bytes apart from w; `tail` instead when given, no
 * prefetch then) against the one activation row at xr, into acc[RO][2] (the two 8-lane halves).
 * BF16 == 1: 32 bf16 per row, activations in the odd/even fp32 layout; else 16 fp32.  Prefetch
 * `pf` ahead in each row, into L2 (decision 145): 1 KiB, except in a row's last KiB where that
 * distance would land in row j + 1, which this tile is already streaming: there the caller passes
 * the start of the next tile's row j instead (rows are contiguous), so that a tile begins warm
 * (decision 155). */
AI void ff_block(const uint8_t *w, size_t rowb, size_t pf, const uint8_t *tail, const float *xr, const int RO,
                 const int BF16, __m256 acc[4][2]) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 w0[4], w1[4]; /* BF16: odd / even halves; F32: w0 only */
#pragma GCC unroll 4
        for (int j = 0; j < RO; j++) {
            const uint8_t *src = tail ? tail + 64 * j + 32 * h : w + (size_t)j * rowb + 32 * h;
            if (h == 0 && !tail) _mm_prefetch((const char *)(src + pf), _MM_HINT_T1);
            __m256i v = _mm256_loadu_si256((const __m256i *)src);
            if (BF16) {
                w0[j] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
                w1[j] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            } else {
                w0[j] = _mm256_castsi256_ps(v);
            }
        }
        if (BF16) {
            __m256 xo = _mm256_loadu_ps(xr + 8 * h), xe = _mm256_loadu_ps(xr + 8 * h + 16);
#pragma GCC unroll 4
            for (int j = 0; j < RO; j++) acc[j][h] = _mm256_fmadd_ps(w1[j], xe, _mm256_fmadd_ps(w0[j], xo, acc[j][h]));
        } else {
            __m256 xv = _mm256_loadu_ps(xr + 8 * h);
#pragma GCC unroll 4
            for (int j = 0; j < RO; j++) acc[j][h] = _mm256_fmadd_ps(w0[j], xv, acc[j][h]);
        }
    }
}

/* Outputs o + j·dr (j < RO) of the one row of X, the whole input in one pass.  The loops carry no
 * per-block bookkeeping (tail test, prefetch offset): a decode GEMV is memory-bound, and every
 * instruction fewer per block lets the out-of-order window hold more of the rows' loads
 * (decision 171).  Rows dr > 1 apart (ff_rows_fmt's parts) each run on into their own next row,
 * so their prefetch needs no redirection near a row's end. */
AI void ff_tile(const ds_ffw *W, const ds_ffact *X, int o, int dr, const int RO, const int BF16, float *y, int ystride) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int j = 0; j < RO; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    _Alignas(64) uint8_t tail[64 * 4];
    const int step = BF16 ? 32 : 16, full = W->in & ~(step - 1);
    const size_t esz = BF16 ? 2 : 4, rowb = (size_t)W->in * esz;
    const uint8_t *wbase = (const uint8_t *)W->w + (size_t)o * rowb;
    const float *xb = (const float *)X->x;
    const int near = DS_MAX(0, DS_MIN(full, W->in - 1024 / (int)esz));
    int b = 0;
    const size_t rs = (size_t)dr * rowb, far = dr == 1 ? 1024 + (size_t)(RO - 1) * rowb : 1024;
    for (; b < near; b += step) ff_block(wbase + (size_t)b * esz, rs, 1024, NULL, xb + b, RO, BF16, acc);
    for (; b < full; b += step) ff_block(wbase + (size_t)b * esz, rs, far, NULL, xb + b, RO, BF16, acc);
    if (W->in % step) {
        ff_tail_copy(W, o, dr, RO, tail);
        ff_block(NULL, rs, 0, tail, xb + full, RO, BF16, acc);
    }
#pragma GCC unroll 4
    for (int j = 0; j < RO; j++) y[o + j * dr] = ff_reduce(acc[j][0], acc[j][1]);
}

/* ---- fast tier, two or more activation rows: input blocks held in L1 (decision 146) ----
 * Tiles that walked the whole input at once (2 weight rows x 2 activation rows) read every weight
 * and activation vector from L2 for each FMA pair, a tile's weight rows outgrowing L1 long before
 * the input ends: twice what Zen 3's L2 delivers per cycle (F32 [4096, 5120] x 512 rows ran at 38%
 * of the FMA peak, the mini head x 16 at 27-33%).  Here a group of 4 weight rows is walked in input
 * blocks of FFB_KB values (16 KiB of fp32, in L1) and every row tile of the chunk runs against a
 * block before the next block comes in.  The two 8-lane halves of the 16-lane order are separate
 * passes over the block (lanes never mix until the final reduction, so the pass order changes no
 * bit): 4 x 3 accumulators + 3 activation vectors + 1 weight vector are the 16 registers, 12 FMAs
 * per 7 loads.  The activations then stream from L2 one half at a time, which is why the
 * dispatcher lays them out with their halves gathered (ds_ffact.halves): a pass reads whole cache
 * lines instead of every other 32 bytes (x 512 rows 1.15-1.4x).  The lanes wait in `part` between
 * blocks and halves.  A BF16 block of 24 rows or more (an FP8 block always) is first widened into
 * fp32 in the odd / even order of its activation layout (per 32 values the 16 odd ones, then the 16
 * even ones), after which it is exactly an F32 block of twice as many 16-value steps: the widening
 * is paid once per block, not once per row tile; fewer BF16 rows split the words in the row tiles'
 * registers instead (ffbn_tile, decision 151).  6 x 2 tiles (each activation vector serving 6
 * FMAs) measured 0.8x. */
enum { FFB_RO = 4, FFB_RR = 3, FFB_KB = 1024, FFB_WS = 1024 + 16, FFB_MAXCHUNK = 96 };
/* Where a group's weight block comes from: F32 in place, BF16 widened into fp32, BF16 split in the
 * row tiles' registers, FP8 codes decoded into fp32 (ds_fp8_widen_f32_avx2). */
enum { FFB_F32, FFB_BF16, FFB_BF16_REG, FFB_FP8 };

/* The next block's lines a tile fetches (into L2) while it runs: lines [l, l1) of `nb` (rows of
 * rowb bytes, line l in row l % RO at byte (l / RO) * 64, so that the rows come in together), `per`
 * of them each iteration of its loop.  Spread over every iteration of both halves of every row tile
 * rather than issued in a burst before each tile (decision 157): with the bursts a few-row call took
 * about its 1-row memory time plus its compute time instead of the larger of the two (most likely
 * the burst fills the core's queue of outstanding misses and the FMAs behind it wait). */
typedef struct { const uint8_t *nb; size_t rowb; unsigned l, l1, per; } ffb_pf;

AI void ffb_pf_step(ffb_pf *pf, const int RO) {
    for (unsigned k = 0; k < pf->per && pf->l < pf->l1; k++, pf->l++)
        _mm_prefetch((const char *)(pf->nb + (size_t)(pf->l % (unsigned)RO) * pf->rowb + (size_t)(pf->l / (unsigned)RO) * 64),
                     _MM_HINT_T1);
}

/* A row tile's accumulators for half h: zero on the first input block, else the lanes it left in
 * `part` ([RR][RO][2][8]); out: back into `part`, or after the last block and the second half the
 * finished outputs. */
AI void ffb_lanes_in(const float *part, int first, int h, const int RO, const int RR, __m256 acc[FFB_RO][FFB_RR]) {
#pragma GCC unroll 4
    for (int j = 0; j < RO; j++)
#pragma GCC unroll 3
        for (int i = 0; i < RR; i++)
            acc[j][i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(part + (size_t)((i * FFB_RO + j) * 2 + h) * 8);
}

AI void ffb_lanes_out(float *part, int last, int h, const int RO, const int RR, __m256 acc[FFB_RO][FFB_RR], float *y,
                      int ystride) {
#pragma GCC unroll 4
    for (int j = 0; j < RO; j++)
#pragma GCC unroll 3
        for (int i = 0; i < RR; i++) {
            float *p = part + (size_t)((i * FFB_RO + j) * 2) * 8;
            if (last && h == 1) y[(size_t)i * ystride + j] = ff_reduce(_mm256_loadu_ps(p), acc[j][i]);
            else _mm256_storeu_ps(p + 8 * h, acc[j][i]);
        }
}

/* One half (lanes 8h .. 8h+7) of RO outputs x RR rows over `nblk` 16-value steps of w (rows
 * wstride floats apart) and x (rows xstride apart, the half's lanes of step b at x + xstep * b).
 * part: [RR][RO][2][8] lanes. */
AI void ffb_tile(const float *w, size_t wstride, const float *x, size_t xstride, size_t xstep, int nblk, int h,
                 int first, int last, const int RO, const int RR, float *part, float *y, int ystride, ffb_pf pf) {
    __m256 acc[FFB_RO][FFB_RR];
    ffb_lanes_in(part, first, h, RO, RR, acc);
    w += 8 * h;
    for (int b = 0; b < nblk; b++) {
        ffb_pf_step(&pf, RO);
        __m256 xv[FFB_RR];
#pragma GCC unroll 3
        for (int i = 0; i < RR; i++) xv[i] = _mm256_loadu_ps(x + (size_t)i * xstride + xstep * b);
#pragma GCC unroll 4
        for (int j = 0; j < RO; j++) {
            const __m256 wv = _mm256_loadu_ps(w + (size_t)j * wstride + (size_t)16 * b);
#pragma GCC unroll 3
            for (int i = 0; i < RR; i++) acc[j][i] = _mm256_fmadd_ps(wv, xv[i], acc[j][i]);
        }
    }
    ffb_lanes_out(part, last, h, RO, RR, acc, y, ystride);
}

/* The same half-pass straight on bf16 weights (a few rows: decision 151): `nblk` 32-value blocks of
 * w (rows wstride bf16 apart), each split in registers into its odd and even words, then the two
 * 16-value steps of the widened order (odd, then even) against x.  At 3 rows x is read as memory
 * operands (4 x 3 accumulators and two weight halves leave no register); at 2 rows the compiler
 * keeps the four activation vectors in registers, which is why ffb_group prefers 2-row tiles here
 * (decision 160). */
AI void ffbn_tile(const ds_bf16 *w, size_t wstride, const float *x, size_t xstride, size_t xstep, int nblk, int h,
                  int first, int last, const int RO, const int RR, float *part, float *y, int ystride, ffb_pf pf) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[FFB_RO][FFB_RR];
    ffb_lanes_in(part, first, h, RO, RR, acc);
    w += 16 * h;
    for (int b = 0; b < nblk; b++) {
        ffb_pf_step(&pf, RO);
        const float *xo = x + xstep * (size_t)(2 * b), *xe = xo + xstep;
#pragma GCC unroll 4
        for (int j = 0; j < RO; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w + (size_t)j * wstride + (size_t)32 * b));
            const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi)), we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
#pragma GCC unroll 3
            for (int i = 0; i < RR; i++)
                acc[j][i] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xe + (size_t)i * xstride),
                                            _mm256_fmadd_ps(wo, _mm256_loadu_ps(xo + (size_t)i * xstride), acc[j][i]));
        }
    }
    ffb_lanes_out(part, last, h, RO, RR, acc, y, ystride);
}

/* Widen inputs [k0, k1) (multiples of 32) of RO bf16 rows into dst (rows FFB_WS floats apart),
 * per 32 values the 16 odd ones then the 16 even ones; values past `in` are zero. */
static void ffb_widen_bf16(const ds_ffw *W, int o, int RO, int k0, int k1, float *dst) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    const int full = W->in & ~31;
    for (int j = 0; j < RO; j++) {
        const ds_bf16 *src = (const ds_bf16 *)W->w + (size_t)(o + j) * (size_t)W->in;
        float *d = dst + (size_t)j * FFB_WS;
        for (int b = k0; b < k1; b += 32, d += 32) {
            _Alignas(32) ds_bf16 tail[32];
            const ds_bf16 *s = src + b;
            if (b >= full) {
                memset(tail, 0, sizeof tail);
                memcpy(tail, s, sizeof(ds_bf16) * (size_t)(W->in - b));
                s = tail;
            }
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)s), v1 = _mm256_loadu_si256((const __m256i *)(s + 16));
            _mm256_storeu_si256((__m256i *)d, _mm256_and_si256(v0, hi));
            _mm256_storeu_si256((__m256i *)(d + 8), _mm256_and_si256(v1, hi));
            _mm256_storeu_si256((__m256i *)(d + 16), _mm256_slli_epi32(v0, 16));
            _mm256_storeu_si256((__m256i *)(d + 24), _mm256_slli_epi32(v1, 16));
        }
    }
}

/* Inputs [k0, k1) of RO rows of esz-byte weights (F32, or BF16 split in registers): in place,
 * except a block reaching past `in`, copied with zeros into dst (rows FFB_WS elements apart). */
static const void *ffb_plain_block(const ds_ffw *W, size_t esz, int o, int RO, int k0, int k1, void *dst, size_t *wstride) {
    const uint8_t *w = (const uint8_t *)W->w;
    if (k1 <= W->in) {
        *wstride = (size_t)W->in;
        return w + ((size_t)o * W->in + k0) * esz;
    }
    for (int j = 0; j < RO; j++) {
        uint8_t *d = (uint8_t *)dst + (size_t)j * FFB_WS * esz;
        memset(d, 0, esz * (size_t)(k1 - k0));
        memcpy(d, w + ((size_t)(o + j) * W->in + k0) * esz, esz * (size_t)(W->in - k0));
    }
    *wstride = FFB_WS;
    return dst;
}

#define FFB_TILE(RO, RR) ffb_tile(w, wstride, xr, xstride, xstep, nblk, h, first, last, RO, RR, pr, yr, ystride, pf)
#define FFBN_TILE(RO, RR) ffbn_tile(wn, wstride, xr, xstride, xstep, nblk / 2, h, first, last, RO, RR, pr, yr, ystride, pf)

/* Outputs [o, o + RO) of rows [c0, r1) (at most FFB_MAXCHUNK rows); more_rows: outputs from o + RO
 * follow in this call (their first block is prefetched with this group's last). */
AI void ffb_group(const ds_ffw *W, const ds_ffact *X, int o, int c0, int r1, const int RO, const int SRC,
                  int more_rows, float *scratch, float *part, float *y, int ystride) {
    const int NATIVE = SRC == FFB_BF16_REG;
    /* inputs from `full` take the zero-padded copy (a widened block pads itself) */
    const int full = SRC == FFB_F32 ? W->in & ~15 : NATIVE ? W->in & ~31 : W->in;
    /* where the lanes of half h of step s of a row sit: gathered halves or the plain layout */
    const size_t xstride = (size_t)X->stride, xstep = X->halves ? 8 : 16;
    const size_t esz = SRC == FFB_F32 ? 4 : SRC == FFB_FP8 ? 1 : 2, rowb = (size_t)W->in * esz;
    const uint8_t *wo = (const uint8_t *)W->w + (size_t)o * rowb;
    /* weights streaming from memory: the next block is fetched while the row tiles run on this one */
    const int stream = (size_t)W->out * rowb >= ((size_t)4 << 20);
    /* row tiles as even as they go: 16 rows are 3 3 3 3 2 2, not 3 3 3 3 3 1 (a 1-row tile runs
     * 4 FMAs per 5 loads).  Split bf16 (NATIVE) takes 2-row tiles, one 3-row tile first when the
     * count is odd: its 3-row tile reads the activations as memory operands (28 loads per 24 FMAs),
     * the 2-row one keeps them in registers (decision 160) */
    const int nrows = r1 - c0;
    const int threes = !NATIVE ? nrows - 2 * ((nrows + FFB_RR - 1) / FFB_RR) : nrows > 1 ? nrows % 2 : 0;
    const unsigned tiles = !NATIVE ? (unsigned)((nrows + FFB_RR - 1) / FFB_RR)
                                   : nrows == 1 ? 1u : (unsigned)(threes + (nrows - 3 * threes) / 2);
    for (int k0 = 0; k0 < X->kpad;) {
        int k1 = DS_MIN(X->kpad, k0 + FFB_KB);
        if ((SRC == FFB_F32 || NATIVE) && k0 < full && k1 > full) k1 = full;
        size_t wstride = FFB_WS;
        const float *w = NULL;
        const ds_bf16 *wn = NULL;
        if (NATIVE) {
            wn = ffb_plain_block(W, sizeof(ds_bf16), o, RO, k0, k1, scratch, &wstride);
        } else if (SRC == FFB_BF16) {
            ffb_widen_bf16(W, o, RO, k0, k1, scratch);
            w = scratch;
        } else if (SRC == FFB_FP8) {
            ds_fp8_widen_f32_avx2(W, o, RO, k0, k1, scratch, FFB_WS);
            w = scratch;
        } else {
            w = ffb_plain_block(W, sizeof(float), o, RO, k0, k1, scratch, &wstride);
        }
        const uint8_t *nb = k1 < W->in ? wo + (size_t)k1 * esz : more_rows ? wo + (size_t)RO * rowb : NULL;
        const int nlen = nb == NULL ? 0 : k1 < W->in ? DS_MIN(FFB_KB, W->in - k1) : DS_MIN(FFB_KB, W->in);
        const unsigned lines = stream ? (unsigned)RO * (unsigned)(((size_t)nlen * esz + 63) / 64) : 0;
        const int nblk = (k1 - k0) / 16, first = k0 == 0, last = k1 == X->kpad;
        for (int h = 0; h < 2; h++)
            for (unsigned t = 0, r = (unsigned)c0; t < tiles; t++) {
                /* this tile-half's share of the next block's lines, a few per iteration of its loop */
                ffb_pf pf = {.nb = nb, .rowb = rowb};
                if (lines) {
                    const unsigned slot = (unsigned)h * tiles + t, slots = 2 * tiles, iters = (unsigned)(NATIVE ? nblk / 2 : nblk);
                    pf.l = slot * lines / slots;
                    pf.l1 = (slot + 1) * lines / slots;
                    pf.per = iters ? (pf.l1 - pf.l + iters - 1) / iters : pf.l1 - pf.l;
                }
                const float *xr = (const float *)X->x + (size_t)r * xstride +
                                  (X->halves ? (size_t)h * (X->kpad / 2) + (size_t)k0 / 2 : (size_t)k0 + 8 * h);
                float *pr = part + (size_t)(r - (unsigned)c0) * FFB_RO * 16, *yr = y + (size_t)r * ystride + o;
                const int rr = (int)t < threes ? 3 : nrows == 1 ? 1 : 2;
                if (NATIVE && rr == 3) FFBN_TILE(RO, 3);
                else if (NATIVE && rr == 2) FFBN_TILE(RO, 2);
                else if (NATIVE) FFBN_TILE(RO, 1);
                else if (rr == 3) FFB_TILE(RO, 3);
                else if (rr == 2) FFB_TILE(RO, 2);
                else FFB_TILE(RO, 1);
                r += (unsigned)rr;
            }
        k0 = k1;
    }
}
#undef FFB_TILE
#undef FFBN_TILE

static void ffb_rows(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride, const int SRC) {
    _Alignas(64) float scratch[FFB_RO * FFB_WS];
    _Alignas(64) float part[FFB_MAXCHUNK * FFB_RO * 16];
    for (int c0 = 0; c0 < X->n; c0 += FFB_MAXCHUNK) {
        const int r1 = DS_MIN(X->n, c0 + FFB_MAXCHUNK);
        int o = o0;
        for (; o + 4 <= o1; o += 4) ffb_group(W, X, o, c0, r1, 4, SRC, o + 8 <= o1, scratch, part, y, ystride);
        for (; o < o1; o++) ffb_group(W, X, o, c0, r1, 1, SRC, 0, scratch, part, y, ystride);
    }
}

/* BF16 from this many rows widens each block once into fp32 (ffb_tile); below it the row tiles
 * split the bf16 words in registers (ffbn_tile), as the widening costs more than a few rows' FMAs
 * save.  Alternated calls, 2 threads, in-register against widened: [10240, 6144] x 2 / 6 / 16 / 24
 * / 96 / 512 rows 1.9 / 1.35 / 1.2 / 1.09 / 0.91 / 0.91x; [2048, 2048] x 16 / 24 / 96: 1.05 / 0.88
 * / 0.90x.  Against the one-pass 2 x 2 tiles they replaced (2-15 rows), 1.05-1.46x on the mini
 * shapes (decision 151).  F32 has nothing to widen and always takes ffb_tile. */
#define FF_BF16_WIDEN_ROWS 24

/* One activation row (decode): tiles of four weight rows over the whole input, four streams from
 * memory at once, the rows taken from the four quarters of the range so each stream reads on
 * sequentially (decision 183; neighbouring rows began three streams cold at every tile), the few
 * left over as neighbours; more rows: input blocks held in L1 (ffb_rows). */
AI void ff_rows_fmt(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride, const int BF16) {
    if (X->n > 1) {
        ffb_rows(W, X, o0, o1, y, ystride, !BF16 ? FFB_F32 : X->n < FF_BF16_WIDEN_ROWS ? FFB_BF16_REG : FFB_BF16);
        return;
    }
    const int q = (o1 - o0) / 4;
    for (int a = o0; a < o0 + q; a++) ff_tile(W, X, a, q, 4, BF16, y, ystride);
    for (int o = o0 + 4 * q; o < o1; o++) ff_tile(W, X, o, 1, 1, BF16, y, ystride);
}

void ds_avx2_ff_rows(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    if (X->kind == DS_FF_F32) ff_rows_fmt(W, X, o0, o1, y, ystride, 0);
    else ff_rows_fmt(W, X, o0, o1, y, ystride, 1);
}

/* FP8 E4M3 fast tier, two rows and more (the contract of ds_fp8_ff_fn): each block of codes is
 * decoded once into fp32 and every row tile runs on it as on an F32 block. */
void ds_fp8_ff_blocked_avx2(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    const ds_ffw W = {.fmt = DS_LIN_FP8, .out = L->out, .in = L->in, .w = L->w, .e8m0 = L->w_e8m0};
    ffb_rows(&W, X, o0, o1, y, ystride, FFB_FP8);
}

#pragma GCC pop_options
