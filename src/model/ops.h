/* Small numeric building blocks of the reference forward pass, each written exactly as
 * docs/NUMERICS.md evaluates it: reductions accumulate in float64 from the exact values of their
 * operands and round once to fp32; transcendentals are evaluated in float64 and rounded once; plain
 * fp32 arithmetic is plain C float arithmetic (the build uses -ffp-contract=off, so no FMA).
 *
 * Why float64 reductions: a one-ulp fp32 difference next to a bf16 boundary moves a stored value by
 * 2^-8, which an independent oracle cannot match at 1e-4.  Every routine here has a fixed evaluation
 * order that does not depend on batching, chunking or threads, which is what makes chunked prefill,
 * decode and batched steps bit-identical (MODEL.md §6.4). */
#ifndef DS_MODEL_OPS_H
#define DS_MODEL_OPS_H
#include <math.h>
#include <stdint.h>
#include "base/bf16.h"
#include "kernels/kernels.h"

/* Float64 reductions with one fixed evaluation order on every CPU: eight partial sums (element i
 * goes to lane i mod 8), combined as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the n mod 8 tail
 * in index order.  Products are exact in float64.  The AVX2 versions (ops_simd.c) follow exactly
 * this order, so both give the same bits; the choice is made once from the CPU features. */
double ds_dot_bb(const ds_bf16 *a, const ds_bf16 *b, int n);      /* Σ f64(a)·f64(b), bf16 · bf16 */
double ds_dot_fb(const float *a, const ds_bf16 *b, int n);        /* Σ f64(a)·f64(b), fp32 · bf16 */
/* acc[i] += f64(p)·f64(k[i]) (element-wise, no reassociation: identical on every path). */
void ds_axpy_bf16(double *acc, float p, const ds_bf16 *k, int n);

/* Tests: whether the AVX2 path is in use, and each path explicitly (simd = 0: scalar). */
double ds_dot_bb_path(int simd, const ds_bf16 *a, const ds_bf16 *b, int n);
double ds_dot_fb_path(int simd, const float *a, const ds_bf16 *b, int n);
void ds_axpy_bf16_path(int simd, double *acc, float p, const ds_bf16 *k, int n);

/* fp32(Σ f64(x)²) of a bf16 vector. */
static inline float ds_sumsq_b(const ds_bf16 *x, int n) { return (float)ds_dot_bb(x, x, n); }

static inline double ds_sigmoid64(double z) { return 1.0 / (1.0 + exp(-z)); }

/* rmsnorm(x, w) = bf16(fp32(fp32(x·rs)·w)), rs = fp32(1/sqrt(f64(ss)/n + eps)) (MODEL.md §2.4). */
void ds_rmsnorm_bf16(const ds_bf16 *x, const float *w, int n, double eps, ds_bf16 *y);

/* y = bf16(W·x) for n rows, through the kernel interface; tmp must hold n·out floats. */
void ds_linear_bf16(const ds_linear *L, const ds_bf16 *x, int n, float *tmp, ds_bf16 *y);

/* Round an fp32 array to bf16. */
void ds_round_rows_bf16(const float *x, size_t n, ds_bf16 *y);

/* Official-release number formats (CHECKPOINT.md §14): E4M3 (FN, NaN for 0x7F/0xFF), E2M1 nibble
 * (bit 3 sign), E8M0 exponent byte 2^(b-127) (NaN for 255). */
float ds_e4m3_value(uint8_t b);
float ds_e2m1_value(int nibble);
float ds_e8m0_value(uint8_t b);

/* Top-k selection, ties toward the lower index: writes the indices of the k largest of
 * score[0..n-1] in descending score order (lower index first among equal scores).  Entries equal to
 * -INFINITY are never selected; returns the number selected (<= k).  heap_tmp: k ints. */
int ds_topk(const float *score, int64_t n, int k, int32_t *out, int32_t *heap_tmp);

/* Same over the order key (score desc, index asc) but also reports the (k+1)-th best score in
 * *next (-INFINITY if none), for margin statistics. */
int ds_topk_next(const float *score, int64_t n, int k, int32_t *out, int32_t *heap_tmp, float *next);

/* The same k entries as ds_topk_next, written in ascending index order (where the indexer wants
 * them), with the k-th best score in *kth (when any is selected) and the (k+1)-th in *next.  A
 * radix selection on the scores' order keys (a pass per byte and one to write) in place of the
 * heap and its sort up to 16,384 scores; more scores, or a NaN, go to the heap. */
int ds_topk_set(const float *score, int64_t n, int k, int32_t *out, int32_t *heap_tmp, float *kth, float *next);

#endif
