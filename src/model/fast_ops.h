/* The `fast` numerics tier of the model's float math (docs/NUMERICS.md "Fast tier"), and one
 * dispatcher per building block that picks the tier of the model.
 *
 * Why a second set of routines: the exact tier (ops.h, hc.h, rope.h) accumulates every reduction in
 * float64 so that it equals the NumPy oracle bit for bit; that is the right reference and the wrong
 * serving path (float64 halves the SIMD width and blocks vectorization).  The fast tier keeps fp32
 * throughout: every reduction uses 32 fp32 partial sums (element i goes to lane i mod 32, the tail
 * included) combined by the fixed tree (l[j] += l[j+16], then +8, +4, +2, +1; 32 lanes keep two
 * AVX-512 or four AVX2 accumulators in flight) — except the attention scores, which use the pair
 * order of vdpbf16ps (ds_fdot_bb_pair) so that AVX512-BF16 hosts run them on that instruction —,
 * sums over keys, copies or group members run in their index order, and exp is our own fp32
 * routine (ds_fexp) made of plain fp32 operations.  The order is fixed by the source and no fused
 * multiply-add is allowed (-ffp-contract=off), so the compiler may vectorize across lanes (and does,
 * for SSE2, AVX2 and AVX-512 clones) without changing a single bit: results are identical on every
 * x86-64 host, for every batch, chunking and thread count.  The exact routines are untouched; callers
 * branch once per function on the model's tier (the *_t dispatchers below). */
#ifndef DS_MODEL_FAST_OPS_H
#define DS_MODEL_FAST_OPS_H
#include <stdint.h>
#include "base/bf16.h"
#include "kernels/kernels.h"
#include "model/hc.h"
#include "model/ops.h"
#include "model/rope.h"

/* ---- fp32 reductions in the fixed 32-lane order ---- */
#define DS_FAST_LANES 32
/* The fixed tree over the lanes: l[j] += l[j+16], then +8, +4, +2, +1; returns l[0]. */
static inline float ds_ftree(float *l) {
    /* each level written out, so the compiler keeps the halves in vector registers */
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) l[j] = l[j] + l[j + 16];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) l[j] = l[j] + l[j + 8];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) l[j] = l[j] + l[j + 4];
    l[0] = l[0] + l[2];
    l[1] = l[1] + l[3];
    return l[0] + l[1];
}
/* Width of the fast tier's tiles (attn_tile.c, index_tile.c, the mHC mix dots): 16-wide vectors
 * where the CPU has AVX-512 (x86-64-v4: the clone the loader picks), else 8-wide attention and
 * indexer tiles and one ds_fdot_fb per mix dot, because GCC keeps 64-byte vector values in memory when the target has no 512-bit
 * registers (the 16-wide tiles ran 8-20x slower in the AVX2 clone).  The same bits either way;
 * ds_fast_tile_width(1) forces the narrow routes, 2 the wide ones, 0 goes back to the CPU's choice
 * (tests run both on every host). */
int ds_fast_wide_tiles(void);
void ds_fast_tile_width(int width);
float ds_fdot_bb(const ds_bf16 *a, const ds_bf16 *b, int n);      /* Σ a·b (products exact in fp32) */
/* Σ a·b in the pair order of the attention scores (docs/NUMERICS.md): operands below 2^-50 count as
 * 0; per block of 32 elements, lane j (of 16, from +0) adds the product of elements 2j+1, then that
 * of 2j (products exact in fp32); a partial last block is padded with zeros; the lanes are then
 * combined as l[j] + l[j+8], +4, +2, +1.  It is what vdpbf16ps computes, so AVX512-BF16 hosts run
 * it on that instruction (ds_fast_pair_scores8) and every other host gets the same bits. */
float ds_fdot_bb_pair(const ds_bf16 *a, const ds_bf16 *b, int n);
float ds_fdot_fb(const float *a, const ds_bf16 *b, int n);        /* Σ fp32(a·b) */
/* o[i] = ds_fdot_fb(B + 32·i, x, 32) for i < 32 (the same bits), given Bt = Bᵀ (Bt[32·j + i] =
 * B[32·i + j]): the 32 dots of a 32×32 block rotation at once, vectorized across i. */
void ds_frot32_fb(const float *Bt, const ds_bf16 *x, float *o);
float ds_fdot_ff(const float *a, const float *b, int n);          /* Σ fp32(a·b) */
float ds_fsum(const float *a, int n);                             /* Σ a */
float ds_fdot3_fff(const float *a, const float *b, const float *c, int n); /* Σ fp32(fp32(a·b)·c) */
/* acc[i] = acc[i] + fp32(p·k[i]) (element-wise: the order over calls is the caller's). */
void ds_faxpy_bf16(float *acc, float p, const ds_bf16 *k, int n);

/* exp in fp32 from plain fp32 operations (Cody–Waite reduction, degree-7 polynomial, ≤ 2 ulp);
 * 0 below -87, clamped at 88.  Identical bits on every host (no libm, no FMA). */
float ds_fexp(float x);
/* x[i] = ds_fexp(x[i] - sub) for i < n. */
void ds_fexp_sub(float *x, float sub, int n);
static inline float ds_fsigmoid(float z) { return 1.0f / (1.0f + ds_fexp(-z)); }

/* ---- fast versions of the model's building blocks (same arguments as the exact ones) ---- */
void ds_rmsnorm_bf16_fast(const ds_bf16 *x, const float *w, int n, double eps, ds_bf16 *y);
void ds_rope_apply_fast(ds_bf16 *v, int len, int rd, const float *cs, int inverse);
/* Mix dots i0 .. i0+ni-1 of rows X[0 .. nr) (ni <= 2, nr <= 4; rows HC·D apart) into dots[r·nmix + i]:
 * dot = ds_fdot_fb(fn + i·HC·D, X_r, HC·D) bit for bit, with each weight chunk loaded once for every
 * row and each activation chunk once for both mixes (the dots of a step re-read a site's fn once per
 * 4 rows, not once per row). */
void ds_hc_mix_dots_fast(const ds_hc_params *p, const ds_bf16 *X, int nr, int i0, int ni, float *dots);
void ds_hc_mixes_from_dots_fast(const ds_hc_params *p, const ds_bf16 *X, const float *dots, ds_hc_mix *out);
void ds_hc_sinkhorn_fast(float *C, int hc, int iters, float eps);
void ds_hc_collapse_fast(const ds_bf16 *X, const float *w, int hc, int dim, ds_bf16 *y);
/* R may be X itself: the fast expand reads every source of a channel before writing it (the site
 * exit then needs no copy of X). */
void ds_hc_expand_fast(const ds_bf16 *y, const ds_bf16 *R, const ds_hc_mix *mx, int hc, int dim, ds_bf16 *X);

/* ---- fast cores of the sublayers (fast_blocks.c) ---- */
/* One attention head of one row: s_k = fp32(q·k)·scale, m = max(max s_k, sink), e_k = ds_fexp(s_k − m),
 * den = Σ e_k (32-lane order) + ds_fexp(sink − m), o = bf16(Σ_k fp32(e_k/den)·k) summed in key order.
 * sc: nk floats, acc: dh floats (scratch). */
void ds_attn_head_fast(const ds_bf16 *q, const ds_bf16 *const *keys, int nk, float sink, float scale, int dh, float *sc,
                       float *acc, ds_bf16 *o);
/* Index score of one entry: Σ_h w[h]·max(0, qi[h]·k) (32-lane order over heads). */
float ds_index_score_fast(const ds_bf16 *qi, const float *w, const ds_bf16 *k, int nh, int di);
/* The same scores for n <= 16 keys at once (index_tile.c), bit for bit.  ds_index_query_prep widens
 * the row's query and weights once, padded with zeros: qf [up(nh,16)][up(di,32)] floats, wp up(nh,16);
 * kf is scratch of up(di,32) floats (at least 16). */
#define DS_INDEX_TILE_KEYS 16
void ds_index_query_prep(const ds_bf16 *qi, const float *w, int nh, int di, float *qf, float *wp);
void ds_index_scores_fast(const float *qf, const float *wp, int nh, int di, const ds_bf16 *const *keys, int n,
                          float *kf, float *out);
/* Softmax-weighted pooling of a ratio-r group per channel (members in position order), as bf16. */
void ds_pool_group_fast(const float *const *a, const float *const *g, int r, int dh, ds_bf16 *pooled);

/* ---- tier dispatchers ---- */
static inline void ds_rmsnorm_t(ds_numerics t, const ds_bf16 *x, const float *w, int n, double eps, ds_bf16 *y) {
    if (t == DS_NUMERICS_FAST) ds_rmsnorm_bf16_fast(x, w, n, eps, y);
    else ds_rmsnorm_bf16(x, w, n, eps, y);
}
static inline void ds_rope_apply_t(ds_numerics t, ds_bf16 *v, int len, int rd, const float *cs, int inverse) {
    if (t == DS_NUMERICS_FAST) ds_rope_apply_fast(v, len, rd, cs, inverse);
    else ds_rope_apply(v, len, rd, cs, inverse);
}
static inline void ds_hc_mixes_from_dots_t(ds_numerics t, const ds_hc_params *p, const ds_bf16 *X, const float *dots,
                                           ds_hc_mix *out) {
    if (t == DS_NUMERICS_FAST) ds_hc_mixes_from_dots_fast(p, X, dots, out);
    else ds_hc_mixes_from_dots(p, X, dots, out);
}
static inline void ds_hc_collapse_t(ds_numerics t, const ds_bf16 *X, const float *w, int hc, int dim, ds_bf16 *y) {
    if (t == DS_NUMERICS_FAST) ds_hc_collapse_fast(X, w, hc, dim, y);
    else ds_hc_collapse(X, w, hc, dim, y);
}
static inline void ds_hc_expand_t(ds_numerics t, const ds_bf16 *y, const ds_bf16 *R, const ds_hc_mix *mx, int hc, int dim,
                                  ds_bf16 *X) {
    if (t == DS_NUMERICS_FAST) ds_hc_expand_fast(y, R, mx, hc, dim, X);
    else ds_hc_expand(y, R, mx, hc, dim, X);
}

#endif
