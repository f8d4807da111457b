/* FP8 E4M3 fast-tier linears on AVX-512 with the weights decoded in registers (kern_official.h).
 *
 * Why: converting 16 rows to a bf16 tile in memory and then running the BF16 kernel over it costs
 * about one cycle per weight (32-bit lanes, a store and a reload) — at one activation row that is
 * far slower than reading the FP8 bytes, so the matrix-vector case ran at a few percent of the read
 * bandwidth.  Here 32 codes become 32 bf16 words in one register in 7 operations and feed
 * vdpbf16ps (or the FMA pair) directly; nothing is written back and no copy of the matrix exists.
 *
 * The decode (16-bit lanes, block scale s = E8M0 byte of the 32x32 tile):
 *   normal code (exponent field e > 0):  bf16 = ((c & 0x7f) << 4) + ((s - 7) << 7)
 *       (the code's exponent/mantissa bits moved into bf16 position, the bias 120 of
 *        ds_fp8_bf16_one and the scale 2^(s-127) added to the exponent field in one integer add);
 *   subnormal code (e = 0, m = c & 7):   bf16 = T[m], a 32-word vpermw table of m·2^(s-136), T[0] = 0;
 *   sign: bit 15 of the code sign-extended to 16 bits, kept by the mask of the normal form and
 *   OR-ed into the table's value (7 vector operations per 32 codes; 9 when 0x80 was made +0).
 * For s in [DS_FP8_SAFE_SMIN, DS_FP8_SAFE_SMAX] every result is a normal bf16 >= 2^-50 and below
 * infinity, so this equals ds_fp8_bf16_one bit for bit (codes 0x7f/0xff included: both give
 * 480·2^(s-127), the loader refuses them anyway), except code 0x80: -0 here, +0 in the scalar
 * rule.  That cannot move a result bit: the lanes start at +0, and in round-to-nearest a sum of
 * +0 and -0 is +0 and x + (-0) = x, so a lane never holds -0 and a -0 product never changes it.
 * A block whose scale lies outside that range goes through ds_fp8_bf16_one on the stack, lane for
 * lane the same words.
 *
 * Order: per output row and activation row, 16 fp32 lanes accumulate over 32-input blocks
 * ascending (vdpbf16ps: odd product then even; FMA: the same two fmas), then the fixed reduction
 * tree of kernels.h — the fast BF16 order, so results equal the fast BF16 linear of the decoded
 * matrix.  Compiled twice like kern_official_avx512.c: natively, and by the unit tests with
 * DS_AVX512_EMULATE (SIMDe) so that hosts without AVX-512 check the same source. */
#include "kernels/kern_official.h"
#include <math.h>
#include <string.h>

#ifdef DS_AVX512_EMULATE
#pragma GCC diagnostic ignored "-Wpsabi"
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define DS_FP8_FF_AVX512 ds_fp8_ff_avx512_emu
#define DS_FP8_FF_BLOCKED_AVX512 ds_fp8_ff_blocked_avx512_emu
#include "kernels/avx512_emu.h"
#define FP8_DPBF16(acc, w, x) ds_emu_dpbf16((acc), (w), (x))
#define FP8_FMADD ds_emu_fmadd_ps
/* intrinsics this SIMDe release lacks, from their documented per-lane meaning */
typedef simde__mmask32 __mmask32;
static inline __mmask32 fp8_emu_testn_epi16(__m512i a, __m512i b) {   /* SIMDe's test_epi16_mask shifts 1 << 31 in int */
    uint16_t x[32], y[32];
    uint32_t m = 0;
    _mm512_storeu_si512(x, a);
    _mm512_storeu_si512(y, b);
    for (int i = 0; i < 32; i++) m |= (uint32_t)!(x[i] & y[i]) << i;
    return (__mmask32)m;
}
#define FP8_TESTN_EPI16_MASK(a, b) fp8_emu_testn_epi16((a), (b))
#define AI static inline
#define UNROLL4
#define UNROLL8
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#include <immintrin.h>
#define DS_FP8_FF_AVX512 ds_fp8_ff_avx512
#define DS_FP8_FF_BLOCKED_AVX512 ds_fp8_ff_blocked_avx512
/* reached only for X->kind == DS_FF_BF16_DOT, which official.c picks only where CPUID has avx512-bf16 */
#define FP8_DPBF16(acc, w, x) _mm512_dpbf16_ps((acc), (__m512bh)(w), (__m512bh)(x))
#define FP8_FMADD _mm512_fmadd_ps
#define FP8_TESTN_EPI16_MASK(a, b) _mm512_testn_epi16_mask((a), (b))
#define AI static inline __attribute__((always_inline))
#define UNROLL4 _Pragma("GCC unroll 4")
#define UNROLL8 _Pragma("GCC unroll 8")
#endif

#ifndef FP8_PF_ROWS
#define FP8_PF_ROWS 8   /* software prefetch two 4-row groups ahead: the hardware streamer restarts at every group */
#endif
/* The two registers of one block scale: K (normal codes) and the subnormal table T. */
typedef struct { __m512i k, t; } fp8_sreg;

AI fp8_sreg fp8_scale_regs(uint8_t s, __m512i t0) {
    fp8_sreg r;
    r.k = _mm512_set1_epi16((short)((s - 7) * 128));
    r.t = _mm512_mask_add_epi16(t0, (__mmask32)0xfe, t0, _mm512_set1_epi16((short)((s - 127) * 128)));
    return r;
}

/* 32 codes -> 32 bf16 words (pair j of the block in 32-bit word j, as vdpbf16ps reads it). */
AI __m512i fp8_decode32(const uint8_t *codes, fp8_sreg sr) {
    /* sign-extended: bits 8-15 repeat the sign, so after the shift bit 15 is the sign and one mask
     * keeps it with the magnitude bits (the exponent add cannot carry into it in the safe range) */
    const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)codes));
    __m512i v = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(c, 4), _mm512_set1_epi16((short)0x87f0)), sr.k);
    v = _mm512_mask_permutexvar_epi16(v, FP8_TESTN_EPI16_MASK(c, _mm512_set1_epi16(0x78)), c, sr.t);
    return _mm512_ternarylogic_epi32(v, c, _mm512_set1_epi16((short)0x8000), 0xF8);   /* the table's sign: v | (c & 0x8000) */
}

/* The plain-tile map row of the 32-row scale tile holding row o (NULL: not made; decode in full). */
AI const uint8_t *fp8_plain_row(const ds_linear *L, int o) {
    if (L->packed_kind != DS_PACK_KIND_FP8_PLAIN || !L->packed) return NULL;
    return (const uint8_t *)L->packed + (size_t)(o / 32) * (size_t)((L->in + 31) / 32);
}

AI float fp8_reduce(__m512 a) {   /* the lane tree of kernels.h */
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

/* The RO rows' words of block b (row j at row0 + j·rs): in registers when the scale is in the safe
 * range and the block is whole, else through ds_fp8_bf16_one on a zero-padded stack copy (same
 * words).  Each row j prefetches into L2 at row0 + j·rs + pfd: the caller's choice of what it reads next; with
 * LINE_PF only in every other block, one prefetch per 64-byte line (the in-register tiles: their
 * loop holds 8 rows' loads, prefetches and decodes; decision 186: 0.93-1.14x at one row, 1.12-1.17x
 * at two and eight; the blocked decode ran 0.91-0.99x with it and prefetches every block).  The
 * in-register tiles of one or two activation rows (RO = 8) stream with the non-temporal hint of
 * the int8 kernels instead (DS_Q_HINT; decision 195: one row 1.14-1.15x, two 1.02-1.06x; four
 * rows, RO = 4, ran 0.98x with it and keep L2). */
#define FP8_PREFETCH(p)                                                                          \
    do {                                                                                         \
        if (LINE_PF && RO == 8) _mm_prefetch((const char *)(p), DS_Q_HINT);                      \
        else _mm_prefetch((const char *)(p), _MM_HINT_T1);                                       \
    } while (0)
AI void fp8_block_words(const uint8_t *row0, size_t in, size_t rs, int b, size_t pfd, uint8_t s, int full, int plain, __m512i t0, const int RO,
                        const int LINE_PF, __m512i w[8]) {
    if (full && s >= DS_FP8_SAFE_SMIN && s <= DS_FP8_SAFE_SMAX) {
        fp8_sreg sr = fp8_scale_regs(s, t0);
        const int pf_now = !LINE_PF || !(b & 32);
        if (plain) {   /* no zero or subnormal code in this scale tile: the normal form alone (decision 176) */
            UNROLL8
            for (int j = 0; j < RO; j++) {
                if (pf_now) FP8_PREFETCH(row0 + (size_t)j * rs + pfd);
                const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(row0 + (size_t)j * rs + b)));
                w[j] = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(c, 4), _mm512_set1_epi16((short)0x87f0)), sr.k);
            }
            return;
        }
        UNROLL8
        for (int j = 0; j < RO; j++) {
            if (pf_now) FP8_PREFETCH(row0 + (size_t)j * rs + pfd);
            w[j] = fp8_decode32(row0 + (size_t)j * rs + b, sr);
        }
        return;
    }
    const float f = ds_fp8_scale_f(s);
    const int cnt = (int)DS_MIN((size_t)32, in - (size_t)b);
    UNROLL8
    for (int j = 0; j < RO; j++) {
        ds_bf16 tmp[32] = {0};
        for (int i = 0; i < cnt; i++) tmp[i] = ds_fp8_bf16_one(row0[(size_t)j * rs + b + i], f);
        w[j] = _mm512_loadu_si512(tmp);
    }
}

/* One 32-input block at b of RO decoded weight vectors against rows [r, r + RR) of X, into
 * acc[RO][RR]: vdpbf16ps, or the FMA pair on the odd and even halves of each word (the fast BF16
 * order either way).  The same step as ff_step of kern_avx512_fast.c; sharing that one through a
 * header (both acc shapes tried) passed every test but ran this file's blocked kernel at 0.80-0.87x
 * at 16-128 rows in five alternated pairs, so the copy stays. */
AI void fp8_step(const __m512i *w, const ds_ffact *X, int r, int b, const int RO, const int RR, const int DOT,
                 __m512 acc[8][8]) {
    if (DOT) {
        UNROLL8
        for (int i = 0; i < RR; i++) {
            __m512i xv = _mm512_loadu_si512((const ds_bf16 *)X->x + (size_t)(r + i) * X->stride + b);
            UNROLL8
            for (int j = 0; j < RO; j++) acc[j][i] = FP8_DPBF16(acc[j][i], w[j], xv);
        }
        return;
    }
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 wo[8], we[8];
    UNROLL8
    for (int j = 0; j < RO; j++) {
        wo[j] = _mm512_castsi512_ps(_mm512_and_si512(w[j], hi));
        we[j] = _mm512_castsi512_ps(_mm512_slli_epi32(w[j], 16));
    }
    UNROLL8
    for (int i = 0; i < RR; i++) {
        const float *xf = (const float *)X->x + (size_t)(r + i) * X->stride + b;
        __m512 xo = _mm512_loadu_ps(xf), xe = _mm512_loadu_ps(xf + 16);
        UNROLL8
        for (int j = 0; j < RO; j++) acc[j][i] = FP8_FMADD(we[j], xe, FP8_FMADD(wo[j], xo, acc[j][i]));
    }
}

/* RO output rows o + j·dr (all of one 32-row scale tile) x RR activation rows over every input
 * block; each row prefetches the same block pf_rows rows further on: the row its stream reads next. */
AI void fp8_tile(const ds_linear *L, const ds_ffact *X, int o, int dr, int pf_rows, int r, const int RO, const int RR, const int DOT, __m512i t0,
                 float *y, int ystride) {
    __m512 acc[8][8];
    UNROLL8
    for (int j = 0; j < RO; j++)
        UNROLL8
        for (int i = 0; i < RR; i++) acc[j][i] = _mm512_setzero_ps();
    const size_t in = (size_t)L->in;
    const int scc = (L->in + 31) / 32, whole = L->in & ~31;
    const uint8_t *row0 = (const uint8_t *)L->w + (size_t)o * in, *srow = L->w_e8m0 + (size_t)(o / 32) * scc;
    const uint8_t *prow = fp8_plain_row(L, o);
    for (int b = 0; b < X->kpad; b += 32) {
        __m512i w[8];
        /* the row this stream reads next, same block (decision 145) */
        fp8_block_words(row0, in, (size_t)dr * in, b, (size_t)pf_rows * in + (size_t)b, srow[b / 32], b < whole, prow && prow[b / 32], t0,
                        RO, 1, w);
        fp8_step(w, X, r, b, RO, RR, DOT, acc);
    }
    UNROLL8
    for (int i = 0; i < RR; i++)
        UNROLL8
        for (int j = 0; j < RO; j++) y[(size_t)(r + i) * ystride + o + j * dr] = fp8_reduce(acc[j][i]);
}

#define FP8_TILE(RO, RR) fp8_tile(L, X, o, 1, FP8_PF_ROWS, r, RO, RR, DOT, t0, y, ystride)
#define FP8_ROWS(RO)                                    \
    for (int r = 0; r < X->n; r += 4) switch (DS_MIN(4, X->n - r)) { \
        case 4: FP8_TILE(RO, 4); break;                 \
        case 3: FP8_TILE(RO, 3); break;                 \
        case 2: FP8_TILE(RO, 2); break;                 \
        default: FP8_TILE(RO, 1); break;                \
        }

/* Five rows and more: 2 output rows x up to 8 activation rows (tiles of equal height: 12 rows are
 * 6 + 6), so each decoded block serves up to 8 rows (the 4 x 4 tile decodes every weight once per
 * 4 rows, and the decode costs more than the dot products it feeds). */
#define FP8_ROWS_WIDE                                   \
    for (int r = 0, per = (X->n + (X->n + 7) / 8 - 1) / ((X->n + 7) / 8); r < X->n; r += per) \
        switch (DS_MIN(per, X->n - r)) {                \
        case 8: FP8_TILE(2, 8); break;                  \
        case 7: FP8_TILE(2, 7); break;                  \
        case 6: FP8_TILE(2, 6); break;                  \
        case 5: FP8_TILE(2, 5); break;                  \
        case 4: FP8_TILE(2, 4); break;                  \
        case 3: FP8_TILE(2, 3); break;                  \
        case 2: FP8_TILE(2, 2); break;                  \
        default: FP8_TILE(2, 1); break;                 \
        }

AI void fp8_rows_kind(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride, const int DOT) {
    _Alignas(64) uint16_t tab[32] = {0};
    for (int m = 1; m < 8; m++) tab[m] = ds_fp8_bf16_one((uint32_t)m, 1.0f);   /* m·2^-9 */
    const __m512i t0 = _mm512_loadu_si512(tab);
    int o = o0;
    /* one or two rows: 8 weight rows per tile, 8 streams in flight (decision 172: 1.1-1.3x over 4
     * at one row, 1.14-1.2x at two; 8 x 2 accumulators + 8 words).  A whole scale tile runs as 4
     * passes over rows 4 apart (o + i + 4j), so each stream reads 4 neighbouring rows on end and
     * starts cold once per scale tile, not once per pass; the last pass prefetches the next scale
     * tile's first (decision 192).  The words and sums are those of 8 neighbouring rows. */
    if (X->n <= 2)
        for (; o + 8 <= o1 && o / 32 == (o + 7) / 32; o += 8) {
            if (o % 32 || o + 32 > o1) {
                FP8_ROWS(8)
                continue;
            }
            for (int i = 0; i < 4; i++) {
                const int next = i < 3 ? 1 : 32 - 3;   /* rows from this pass's row to the stream's next */
                if (X->n == 1) fp8_tile(L, X, o + i, 4, next, 0, 8, 1, DOT, t0, y, ystride);
                else fp8_tile(L, X, o + i, 4, next, 0, 8, 2, DOT, t0, y, ystride);
            }
            o += 24;
        }
    if (X->n > 4)
        for (; o + 2 <= o1 && o / 32 == (o + 1) / 32; o += 2) FP8_ROWS_WIDE
    for (; o + 4 <= o1 && o / 32 == (o + 3) / 32; o += 4) FP8_ROWS(4)
    for (; o < o1; o++) FP8_ROWS(1)
}

void DS_FP8_FF_AVX512(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    if (X->kind == DS_FF_BF16_DOT) fp8_rows_kind(L, X, o0, o1, y, ystride, 1);
    else fp8_rows_kind(L, X, o0, o1, y, ystride, 0);
}

/* ---- many rows: each block of codes decoded once, in L1, for every row tile ----
 * The in-register tiles above decode every weight once per 8 activation rows; past that count
 * (and already at 16 rows, where the 2 x 8 tiles also read 8 activation vectors from L2 per 16 dot
 * products) the decode and those loads bound the call.  Here FB_RO weight rows x FB_KB inputs are
 * decoded once into bf16 words on the stack (25 KiB: stays in L1), and every row tile of the chunk
 * (FB_RO x 4 accumulators: 6 x 4 with vdpbf16ps, 4 x 4 for the FMA pair, whose odd and even halves
 * of each weight take registers too) runs against them; the lanes wait in `part` between blocks,
 * which changes no bit, so every output keeps the fast BF16 order of the in-register route. */
/* Decision 177: each decode prefetches the codes the next decode reads (the same rows' next
 * block of inputs, or the next row group's first), where it used to prefetch the next row group's
 * same block, which the call reaches only after every remaining block of this group; and blocks
 * of 2,048 inputs instead of 1,024 (a 2,048-input row is one block: no partial sums parked).  From
 * memory, 2 threads, calls alternated in both orders: 2,048-input rows x 12-128 1.04-1.13x, other
 * shapes 0.94-1.09x (within the 0.99-1.08x of an A/A run). */
enum { FB_KB = 2048, FB_WS = FB_KB + 32, FB_RR = 4, FB_MAXCHUNK = 96 };

/* Inputs [k0, k1) of FP8 rows [o, o + RO) as bf16 words into dst (rows FB_WS words apart), each
 * row through its own block scales (a group may straddle two 32-row scale tiles). */
AI void fb_decode(const ds_linear *L, int o, const int RO, int k0, int k1, int kpad, __m512i t0, ds_bf16 *dst) {
    const size_t in = (size_t)L->in;
    /* prefetch what the next decode reads: the same rows' next input block, or after the last one
     * the first block of the next row group */
    const size_t pfn = k1 < kpad ? (size_t)(k1 - k0) : (size_t)RO * in - (size_t)k0;
    const int scc = (L->in + 31) / 32, whole = L->in & ~31;
    /* runs of up to 4 rows inside one 32-row scale tile share each block's scale registers */
    for (int j = 0; j < RO;) {
        const int run = DS_MIN(DS_MIN(4, RO - j), 32 - (o + j) % 32);
        const uint8_t *row = (const uint8_t *)L->w + (size_t)(o + j) * in, *srow = L->w_e8m0 + (size_t)((o + j) / 32) * scc;
        const uint8_t *prow = fp8_plain_row(L, o + j);
        for (int b = k0; b < k1; b += 32) {
            __m512i w[8];
            const int plain = prow && prow[b / 32];
            if (run == 4) fp8_block_words(row, in, in, b, (size_t)b + pfn, srow[b / 32], b < whole, plain, t0, 4, 0, w);
            else if (run == 2) fp8_block_words(row, in, in, b, (size_t)b + pfn, srow[b / 32], b < whole, plain, t0, 2, 0, w);
            else fp8_block_words(row, in, in, b, (size_t)b + pfn, srow[b / 32], b < whole, plain, t0, 1, 0, w);
            for (int i = 0; i < (run == 4 || run == 2 ? run : 1); i++)
                _mm512_storeu_si512(dst + (size_t)(j + i) * FB_WS + (b - k0), w[i]);
        }
        j += run == 4 || run == 2 ? run : 1;
    }
}

/* Rows [r, r + RR) against the decoded block (inputs [k0, k1)): lanes from zero at k0 == 0, else
 * from part; reduced into y at k1 == kpad, else saved to part ([RR][RO] vectors). */
AI void fb_tile(const ds_bf16 *wb, const ds_ffact *X, int o, int r, int k0, int k1, const int RO, const int RR, const int DOT,
                float *part, float *y, int ystride) {
    __m512 acc[8][8];
    UNROLL8
    for (int j = 0; j < RO; j++)
        UNROLL4
        for (int i = 0; i < RR; i++) acc[j][i] = k0 ? _mm512_loadu_ps(part + (size_t)(i * RO + j) * 16) : _mm512_setzero_ps();
    for (int b = k0; b < k1; b += 32) {
        __m512i w[6];
        UNROLL8
        for (int j = 0; j < RO; j++) w[j] = _mm512_loadu_si512(wb + (size_t)j * FB_WS + (b - k0));
        fp8_step(w, X, r, b, RO, RR, DOT, acc);
    }
    if (k1 < X->kpad) {
        UNROLL4
        for (int i = 0; i < RR; i++)
            UNROLL8
            for (int j = 0; j < RO; j++) _mm512_storeu_ps(part + (size_t)(i * RO + j) * 16, acc[j][i]);
        return;
    }
    UNROLL4
    for (int i = 0; i < RR; i++)
        UNROLL8
        for (int j = 0; j < RO; j++) y[(size_t)(r + i) * ystride + o + j] = fp8_reduce(acc[j][i]);
}

/* Outputs [o, o + RO) of rows [c0, r1): block by block, decode then every row tile. */
AI void fb_group(const ds_linear *L, const ds_ffact *X, int o, int c0, int r1, const int RO, const int DOT, __m512i t0,
                 ds_bf16 *wb, float *part, float *y, int ystride) {
    for (int k0 = 0; k0 < X->kpad; k0 += FB_KB) {
        const int k1 = DS_MIN(X->kpad, k0 + FB_KB);
        fb_decode(L, o, RO, k0, k1, X->kpad, t0, wb);
        for (int r = c0; r < r1; r += FB_RR) {
            float *pr = part + (size_t)(r - c0) * RO * 16;
            switch (DS_MIN(FB_RR, r1 - r)) {
            case 4: fb_tile(wb, X, o, r, k0, k1, RO, 4, DOT, pr, y, ystride); break;
            case 3: fb_tile(wb, X, o, r, k0, k1, RO, 3, DOT, pr, y, ystride); break;
            case 2: fb_tile(wb, X, o, r, k0, k1, RO, 2, DOT, pr, y, ystride); break;
            default: fb_tile(wb, X, o, r, k0, k1, RO, 1, DOT, pr, y, ystride); break;
            }
        }
    }
}

AI void fb_rows_kind(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride, const int DOT) {
    _Alignas(64) uint16_t tab[32] = {0};
    for (int m = 1; m < 8; m++) tab[m] = ds_fp8_bf16_one((uint32_t)m, 1.0f);   /* m·2^-9 */
    const __m512i t0 = _mm512_loadu_si512(tab);
    _Alignas(64) ds_bf16 wb[6 * FB_WS];
    _Alignas(64) float part[FB_MAXCHUNK * 6 * 16];
    for (int c0 = 0; c0 < X->n; c0 += FB_MAXCHUNK) {
        const int r1 = DS_MIN(X->n, c0 + FB_MAXCHUNK);
        int o = o0;
        if (DOT)
            for (; o + 6 <= o1; o += 6) fb_group(L, X, o, c0, r1, 6, 1, t0, wb, part, y, ystride);
        for (; o + 4 <= o1; o += 4) fb_group(L, X, o, c0, r1, 4, DOT, t0, wb, part, y, ystride);
        for (; o < o1; o++) fb_group(L, X, o, c0, r1, 1, DOT, t0, wb, part, y, ystride);
    }
}

void DS_FP8_FF_BLOCKED_AVX512(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride) {
    if (X->kind == DS_FF_BF16_DOT) fb_rows_kind(L, X, o0, o1, y, ystride, 1);
    else fb_rows_kind(L, X, o0, o1, y, ystride, 0);
}

#ifndef DS_AVX512_EMULATE
#pragma GCC pop_options
#endif
