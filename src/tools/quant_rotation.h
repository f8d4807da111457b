/* QuaRot fold helpers (MODEL.md §3, TOOLS.md §3.3 "Rotation and smoothing").
 *
 * The release stores R = blockdiag(B, …, B) with one orthogonal 32×32 block B.  Every fold is the
 * same operation on 32-vectors, v ↦ v·B:
 *  - right-multiplication W·R (tensors whose last axis is the residual axis) maps each row's
 *    32-blocks through it;
 *  - left-multiplication Rᵀ·W (linears writing into the residual) maps, for each column, the 32
 *    values of a 32-row block through it, because (RᵀW)[i][c] = Σ_j B[j][i]·W[j][c].
 * Our B is a normalized Sylvester Hadamard matrix with random row signs,
 * B[j][i] = sign[j]·H[j][i]·c with c = fp32(1/√32), so v·B = c · FWHT(v ⊙ sign): five butterfly
 * stages instead of 32 multiply-adds per value, which is what keeps mkmodel's mini model (≈5 G
 * folded weights) within minutes.  The transform runs in float64 and each output is rounded once
 * to fp32; tests compare it with a direct float64 product by the stored B.  The identity block
 * makes every fold an exact copy. */
#ifndef DS_TOOLS_QUANT_ROTATION_H
#define DS_TOOLS_QUANT_ROTATION_H
#include "base/common.h"

#define DS_ROT_BLOCK 32

typedef struct ds_rot32 {
    bool identity;              /* B = I */
    int8_t sign[DS_ROT_BLOCK];  /* ±1 row signs of the Hadamard block */
    float B[DS_ROT_BLOCK * DS_ROT_BLOCK];  /* the stored block, row-major */
} ds_rot32;

void ds_rot32_identity(ds_rot32 *r);
/* Signed normalized Hadamard block from 32 signs (each ±1). */
void ds_rot32_hadamard(ds_rot32 *r, const int8_t sign[DS_ROT_BLOCK]);

/* out = v·B for one 32-vector (float64 in and out). */
void ds_rot32_apply(const ds_rot32 *r, const double *v, double *out);

/* Right fold of one row of n values (n a multiple of 32): out = in·blockdiag(B, …). in == out allowed. */
void ds_rot32_fold_row(const ds_rot32 *r, const float *in, float *out, int64_t n);
/* Left fold of a block of 32 consecutive rows of n columns (row-major, stride n), in place:
 * rows ← Bᵀ·rows. */
void ds_rot32_fold_rows32(const ds_rot32 *r, float *rows, int64_t n);

/* The [D, D] global_rotation, row-major F32 (D a multiple of 32), into out (D·D floats). */
void ds_rot32_global(const ds_rot32 *r, int64_t D, float *out);

/* Check a stored global_rotation as the loader does (MODEL.md §3): block-diagonal with one
 * repeated block (|diff| <= 1e-6, off-diagonal |x| <= 1e-6) and BᵀB = I within 1e-4.  On success
 * fills r->B (and r->identity when B is exactly I; sign is left zero for a general block). */
int ds_rot32_from_global(const float *g, int64_t D, ds_rot32 *r, const char *where, ds_error *err);

#endif
