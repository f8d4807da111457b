/* Private contract of the official-format kernels (official.c and its per-ISA block-sum files).
 *
 * MXFP4 linears (CHECKPOINT.md §14) run as an integer path: an E2M1 code times 2 is an integer in
 * [-12, 12], so with per-row int8 activations q the products of one 32-input block sum exactly in
 * int32 (|sum| <= 32·12·127 < 2^16).  The block's power-of-two scale 2^(e-127) and the 1/2 of the
 * doubled codes fold into 2^(e-128).  The contract every path meets bit for bit, per output row:
 *     bsum[b] = Σ_{i in block b} 2·e2m1(code[o][i]) · q[i]                        (int32, exact)
 *     spread  = max_b e[o][b] - min_b e[o][b] over the row's scale bytes
 *     spread <= 37: acc = the exact Σ_b bsum[b]·2^(e_b - 128), rounded once to float64: computed
 *                   as the int64 Σ_b bsum[b] << (e_b - e_min) (|term| < 2^53, 2^10 blocks at most:
 *                   no overflow), converted to double (round to nearest even), times 2^(e_min-128);
 *     spread >  37: acc = Σ_b bsum[b]·2^(e_b - 128) in float64 with b ascending (a row whose scales
 *                   span more than 2^37 is not a trained weight, but it must still be deterministic);
 *     y[o]    = (float)(acc · (double)s_x)
 * The exact branch is order-free, so the ISA files accumulate it in SIMD integer lanes.
 *
 * The activations are laid out per 32-block as 16 even inputs (xe) and 16 odd inputs (xo), so the
 * low and high nibbles of 16 code bytes meet their activations with no shuffles. */
#ifndef DS_KERNELS_OFFICIAL_H
#define DS_KERNELS_OFFICIAL_H
#include "kernels/kern_internal.h"
#include <string.h>

/* Block sums of one output row: codes [nb·16] (row o of the packed weight), xe / xo [nb·16]. */
typedef void (*ds_mx_bsum_fn)(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
void ds_mx_bsum_ref(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
void ds_mx_bsum_avx2(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
void ds_mx_bsum_avx512(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
/* One activation row as the row functions read it, each [nb·16] in the even/odd split: the signed
 * codes (xe, xo), their magnitudes (ae, ao) and sign bytes (se, so: 8 where the code is negative,
 * else 0).  The SIMD paths move each activation's sign onto the weight (code ^ 8 flips an E2M1
 * sign), so an unsigned |x| meets a signed weight in one dot-product instruction. */
typedef struct ds_mx_act { const int8_t *xe, *xo; const uint8_t *ae, *ao, *se, *so; } ds_mx_act;
/* acc of one output row (contract above); sc = the row's nb scale bytes. */
typedef double (*ds_mx_row_fn)(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb);
double ds_mx_row_ref(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb);
double ds_mx_row_avx2(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb);
double ds_mx_row_avx512(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb);
/* MXFP4 panels (official_pack.c; the AVX-512 VNNI and AVX2 paths): the codes of 16 output rows side by side, so one
 * zmm lane accumulates one output row and no sum crosses lanes.  Block b of panel p is 4 tiles of
 * 64 bytes; byte 4r + j of tile t is the published byte (16p + r, 16b + 4t + j): its low nibble
 * meets even input 32b + 8t + 2j, its high nibble the odd one after it, so the tiles take the xe /
 * xo activation planes word by word.  A lane adds VPDPBUSD products of the code's |2·e2m1| + 12
 * (unsigned, 0..24) and the signed activation, from -12·Σ(the block's activations): the block sum
 * of the contract, |.| <= DS_MX_BLOCK_MAX, exactly.  It is shifted by e_b − lo of its row and
 * added in int32 over at most `chunk` blocks (no overflow), the chunks in int64: the exact total.
 * Panels holding a row whose spread needs another route (chunk 0) run the row function.
 * In memory a panel is one stream: groups of 4 blocks, each a 64-byte line of the 4 blocks' shifts
 * (16 per block, lane order) followed by the 4 blocks' tiles, so a panel is read as one sequential
 * stream (the shifts as a stream of their own beside each panel cost 6-10% of a decode GEMV,
 * decision 191).  A last partial group keeps its 4 slots; the missing blocks are never read. */
#define DS_PACK_KIND_MX 3
#define DS_MX_BLOCK_MAX 48768   /* 32 · 12 · 127 */
#define DS_MX_GROUP_BYTES 1088  /* 64 (shifts) + 4 · 256 (tiles) */
typedef struct ds_mxpack {
    int out, in, nb, npanels;
    int row_panels;     /* panels of chunk 0: only they read the row functions' activation planes */
    int32_t *chunk;     /* [npanels] blocks per int32 stretch, 0 = the panel runs the row function */
    int32_t *lo;        /* [npanels·16] the row's smallest scale byte (padding rows: 127) */
    size_t panel_bytes; /* ceil(nb / 4) · DS_MX_GROUP_BYTES */
    uint8_t *panels;    /* [npanels][panel_bytes]: the groups above */
} ds_mxpack;
/* Offsets in a panel of block b's 4 tiles (256 bytes) and of its 16 shift bytes (e_b − lo of each row). */
static inline size_t ds_mx_tiles_off(int b) { return (size_t)(b >> 2) * DS_MX_GROUP_BYTES + 64 + (size_t)(b & 3) * 256; }
static inline size_t ds_mx_shifts_off(int b) { return (size_t)(b >> 2) * DS_MX_GROUP_BYTES + (size_t)(b & 3) * 16; }
static inline const uint8_t *ds_mx_panel(const ds_mxpack *P, int p) { return P->panels + (size_t)p * P->panel_bytes; }
/* Blocks an int32 stretch may hold when a panel's largest spread is `spread` (0: none). */
static inline int ds_mx_panel_chunk(int nb, int spread) {
    if (spread > 31) return 0;
    const int64_t per = (int64_t)DS_MX_BLOCK_MAX << spread, k = INT32_MAX / per;
    return (int)(k < nb ? k : nb);
}
ds_mxpack *ds_mx_pack(const ds_linear *L, size_t *bytes);
/* The panels of L, made on first use where not made at load (dispatch.c; thread-safe). */
const ds_mxpack *ds_mx_ensure_pack(const ds_linear *L);
/* Outputs of panels [p0, p1) for activation rows [0, n): row r's planes at act + r·rowstride
 * (xe, then xo `part` bytes further, then the int32 block starts -12·Σ at `init` bytes from xe);
 * y[r·ystride + o] = (float)(acc · xs[r]).  Panels with chunk 0 are skipped (the caller runs them). */
typedef void (*ds_mx_panels_fn)(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                                const float *xs, int n, int p0, int p1, float *y, int ystride);
void ds_mx_panels_avx512(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                         const float *xs, int n, int p0, int p1, float *y, int ystride);
void ds_mx_panels_avx2(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                       const float *xs, int n, int p0, int p1, float *y, int ystride);
void ds_mx_panels_ref(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                      const float *xs, int n, int p0, int p1, float *y, int ystride);
/* |2·e2m1(c)| + 12 for c = 0..15: the panels' unsigned weights */
#define DS_MX_U12_LUT 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0
/* The int32 route of the SIMD paths: one int32 lane sums 8 products per block (|.| <= 8·12·127)
 * for each of `terms` blocks, shifted by <= spread; it is taken only when that cannot overflow. */
#define DS_MX_LANE_MAX 12192
static inline int ds_mx_int32_ok(int terms, int spread) {
    return spread <= 31 && ((int64_t)DS_MX_LANE_MAX * terms << spread) <= INT32_MAX;
}
/* total · 2^(lo − 128), the last step of the exact branch: lo is a scale byte, so the power lies in
 * [2^-128, 2^127] and is built from its exponent bits; the product of the rounded total and it is a
 * normal double (or 0), so exact: the bits of ldexp, without its call. */
static inline double ds_mx_scale_total(int64_t total, int lo) {
    const uint64_t bits = (uint64_t)(lo - 128 + 1023) << 52;
    double p;
    memcpy(&p, &bits, sizeof p);
    return (double)total * p;
}
/* |2·e2m1(c)| with the sign: c = 0..15, code ^ 8 negates. */
#define DS_MX_SIGNED_LUT 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12

#define DS_MX_EXACT_SPREAD 37
/* The wide-spread branch: block sums (computed by fn) summed in float64, b ascending. */
double ds_mx_row_sequential(ds_mx_bsum_fn fn, const uint8_t *codes, const uint8_t *sc, const int8_t *xe, const int8_t *xo, int nb);
/* Smallest and largest scale byte of a row: 16 bytes at a time with SSE2 unsigned min/max (inlined
 * into each ISA file), the tail in C. */
#include <emmintrin.h>
static inline void ds_mx_exp_range(const uint8_t *sc, int nb, int *lo, int *hi) {
    __m128i mn = _mm_set1_epi8((char)0xff), mx = _mm_setzero_si128();
    int b = 0;
    for (; b + 16 <= nb; b += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(sc + b));
        mn = _mm_min_epu8(mn, v);
        mx = _mm_max_epu8(mx, v);
    }
#define DS_MX_FOLD(k) (mn = _mm_min_epu8(mn, _mm_srli_si128(mn, k)), mx = _mm_max_epu8(mx, _mm_srli_si128(mx, k)))
    DS_MX_FOLD(8), DS_MX_FOLD(4), DS_MX_FOLD(2), DS_MX_FOLD(1);
#undef DS_MX_FOLD
    int l = _mm_cvtsi128_si32(mn) & 0xff, h = _mm_cvtsi128_si32(mx) & 0xff;
    for (; b < nb; b++) {
        l = sc[b] < l ? sc[b] : l;
        h = sc[b] > h ? sc[b] : h;
    }
    *lo = l;
    *hi = h;
}

/* |2·e2m1(c)| for c = 0..15 (sign in bit 3). */
#define DS_MX_MAG_LUT 0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12

/* FP8 fast tier: `in` codes of one row (scales: that row's tile-scale row) -> flushed bf16 (the rule
 * of official.c), bit-identical on every path. */
typedef void (*ds_fp8_decode_fn)(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst);
void ds_fp8_decode_ref(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst);
void ds_fp8_decode_avx2(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst);
void ds_fp8_decode_avx512(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst);
/* One code (the scalar rule every path reproduces); f = 2^(s-127). */
static inline ds_bf16 ds_fp8_bf16_one(uint32_t c, float f) {
    uint32_t u = ((c & 0x7f) << 20) + (120u << 23), r;
    float v;
    memcpy(&v, &u, 4);
    v = (c & 0x78 ? v : (float)(c & 7) * 0x1p-9f) * f;
    memcpy(&r, &v, 4);
    r |= (c & 0x80) << 24;
    ds_bf16 h = (ds_bf16)(r >> 16);
    return ((h >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : h;
}
static inline float ds_fp8_scale_f(uint8_t s) {   /* 2^(s-127) as fp32 bits (s = 0: 2^-127, subnormal) */
    uint32_t u = s ? (uint32_t)s << 23 : 0x00400000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* FP8 fast tier with the weights decoded in registers (kern_official_fp8_*.c): outputs [o0,o1) of
 * every row of X (kind DS_FF_BF16_DOT: vdpbf16ps, AVX-512 only; DS_FF_BF16_FMA: FMA), o0 a multiple
 * of 4; the same bits as the decoded tile fed to the fast BF16 kernel.  Block scales in
 * [DS_FP8_SAFE_SMIN, DS_FP8_SAFE_SMAX] decode in registers (every value a normal bf16 >= 2^-50,
 * below infinity); other blocks through ds_fp8_bf16_one. */
#define DS_FP8_SAFE_SMIN 86
#define DS_FP8_SAFE_SMAX 246
/* The kernel-private copy of a fast-tier FP8 linear (made at load where the AVX-512 decode runs,
 * dispatch.c): one byte per 32x32 scale tile, [ceil(out/32)][ceil(in/32)], 1 when none of the tile's codes has a zero exponent
 * field (no zero, no subnormal code).  The AVX-512 decode skips its subnormal step in such tiles
 * (the normal form alone gives every word); trained weights leave almost every tile plain. */
#define DS_PACK_KIND_FP8_PLAIN 4
void *ds_fp8_plain_map(const ds_linear *L, size_t *bytes);
/* Attach that map to L (once; counted in ds_kernels_packed_bytes, freed by ds_linear_release).
 * ds_linear_prepare calls it only where the active path reads the map (AVX-512); the tests of the
 * emulated AVX-512 decode call it on every host. */
void ds_fp8_ensure_plain_map(ds_linear *L);
typedef void (*ds_fp8_ff_fn)(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride);
void ds_fp8_ff_avx2(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride);
/* AVX2 from five activation rows (kern_avx2_fast.c): each block of codes decoded once into fp32, then the
 * blocked F32 row tiles on it; the same bits as the decoded BF16 matrix through the BF16 kernels. */
void ds_fp8_ff_blocked_avx2(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride);
/* Inputs [k0, k1) (multiples of 32, k1 <= kpad) of FP8 rows [o, o + RO) of W as fp32 into dst (rows
 * dstride floats apart): per 32 inputs the 16 odd ones, then the 16 even ones (the widened order of
 * the AVX2 blocked kernel); inputs past `in` are zero. */
void ds_fp8_widen_f32_avx2(const ds_ffw *W, int o, int RO, int k0, int k1, float *dst, int dstride);
void ds_fp8_ff_avx512(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride);
/* AVX-512 from FP8_INREG_MAX_ROWS_AVX512 + 1 rows (official.c): each block of codes of 6 (4) weight rows
 * decoded once into bf16 words in L1 for every row tile; the same bits as ds_fp8_ff_avx512. */
void ds_fp8_ff_blocked_avx512(const ds_linear *L, const ds_ffact *X, int o0, int o1, float *y, int ystride);

/* Tasks over the `out` rows of one official-format linear (official.c): one task for small work or one
 * thread, else up to 4 per thread of whole 16-row tiles; *per = rows per task.  Results never depend on it. */
int ds_official_task_split(int out, double work, int *per);

/* The official activation numerics (official_e4m3.c, `--activations e4m3`). */
int ds_e4m3_block_exp(float amax);   /* kb of a 32-block: 2^kb >= amax/448, amax floored at 1e-4 */
/* One row: units u[k] (E4M3 value · 2^9, signed integers) and block exponents kb[ceil(k/32)]. */
void ds_e4m3_row_units(const ds_bf16 *x, int k, int32_t *u, int16_t *kb);
/* Rows quantized and returned as bf16 (exact): xq = u·2^(kb-9). */
void ds_e4m3_rows_bf16(const ds_bf16 *x, int n, int k, ds_bf16 *xq);
/* acc of one MXFP4 output row on E4M3 units (contract atop official_e4m3.c). */
double ds_mx8_row_ref(const uint8_t *codes, const uint8_t *sc, const int32_t *u, const int16_t *kb, int nb);
/* The exact-tier MXFP4 forward on unquantized rows x (quantizes them itself). */
void ds_mx_e4m3_exact(const ds_linear *L, const ds_bf16 *x, int n, float *y);
/* One MXFP4 weight row [in] as flushed bf16 (the fast tier's tile); codes: the row's in/2 bytes, sc:
 * its in/32 scale bytes.  The AVX2 version (also used on AVX-512 hosts) gives the same words. */
void ds_mx_decode_bf16(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst);
void ds_mx_decode_bf16_avx2(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst);

/* Tests: the MXFP4 forward on already quantized rows with an explicit row function and panel
 * function (NULL: rows one by one on the published layout; else L must hold panels). */
void ds_mx_forward_q_with(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y, ds_mx_row_fn fn,
                          ds_mx_panels_fn panels);
/* Several jobs in one call (a MoE step): jobs on the same rows (w1 and w3) share one layout. */
void ds_mx_forward_q_many_with(const ds_linear_job *jobs, int n_jobs, ds_mx_row_fn fn, ds_mx_panels_fn panels);
/* Tests: the fast-tier FP8 forward with explicit ops (NULL = the scalar fast order). */
void ds_fp8_forward_fast_with(const ds_linear *L, const ds_kern_ops *o, int use_dot, const ds_bf16 *x, int n, float *y);

#endif
