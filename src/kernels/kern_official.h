/* Private contract of the official-format kernels (official.c and its per-ISA block-sum files).
 *
 * MXFP4 linears (CHECKPOINT.md §14) run as an integer path: an E2M1 code times 2 is an integer in
 * [-12, 12], so with per-row int8 activations q the products of one 32-input block sum exactly in
 * int32 (|sum| <= 32·12·127).  The block's power-of-two scale 2^(e-127) and the 1/2 of the doubled
 * codes fold into one exact float64 factor 2^(e-128).  The contract every path meets bit for bit:
 *     bsum[b] = Σ_{i in block b} 2·e2m1(code[o][i]) · q[i]                  (int32, exact)
 *     acc     = Σ_b bsum[b] · 2^(e[o][b] - 128)    in float64, b ascending   (fixed order)
 *     y[o]    = (float)(acc · (double)s_x)
 * Only bsum is computed by ISA-specific code; it is an exact integer, so the paths agree.
 *
 * The activations are laid out per 32-block as 16 even inputs (xe) and 16 odd inputs (xo), so the
 * low and high nibbles of 16 code bytes meet their activations with no shuffles. */
#ifndef DS_KERNELS_OFFICIAL_H
#define DS_KERNELS_OFFICIAL_H
#include "kernels/kern_internal.h"

/* Block sums of one output row: codes [nb·16] (row o of the packed weight), xe / xo [nb·16]. */
typedef void (*ds_mx_bsum_fn)(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
void ds_mx_bsum_ref(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
void ds_mx_bsum_avx2(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);
void ds_mx_bsum_avx512(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum);

/* |2·e2m1(c)| for c = 0..15 (sign in bit 3). */
#define DS_MX_MAG_LUT 0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12

/* Tests: the MXFP4 forward on already quantized rows with an explicit block-sum function. */
void ds_mx_forward_q_with(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y, ds_mx_bsum_fn fn);
/* Tests: the fast-tier FP8 forward with explicit ops (NULL = the scalar fast order). */
void ds_fp8_forward_fast_with(const ds_linear *L, const ds_kern_ops *o, int use_dot, const ds_bf16 *x, int n, float *y);

#endif
