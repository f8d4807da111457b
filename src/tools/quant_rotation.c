/* QuaRot folds by a signed Hadamard block (see quant_rotation.h for the algebra and why FWHT). */
#include "tools/quant_rotation.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ds_rot32_identity(ds_rot32 *r) {
    memset(r, 0, sizeof *r);
    r->identity = true;
    for (int i = 0; i < DS_ROT_BLOCK; i++) {
        r->sign[i] = 1;
        r->B[i * DS_ROT_BLOCK + i] = 1.0f;
    }
}

static int popcount5(int x) { return __builtin_popcount((unsigned)x & 31u); }

void ds_rot32_hadamard(ds_rot32 *r, const int8_t sign[DS_ROT_BLOCK]) {
    memset(r, 0, sizeof *r);
    const float c = (float)(1.0 / sqrt((double)DS_ROT_BLOCK));
    for (int j = 0; j < DS_ROT_BLOCK; j++) {
        r->sign[j] = sign[j] < 0 ? -1 : 1;
        for (int i = 0; i < DS_ROT_BLOCK; i++) {
            int h = (popcount5(i & j) & 1) ? -1 : 1;
            r->B[j * DS_ROT_BLOCK + i] = (float)(r->sign[j] * h) * c;
        }
    }
}

void ds_rot32_apply(const ds_rot32 *r, const double *v, double *out) {
    if (r->identity) {
        memcpy(out, v, sizeof(double) * DS_ROT_BLOCK);
        return;
    }
    double x[DS_ROT_BLOCK];
    for (int j = 0; j < DS_ROT_BLOCK; j++) x[j] = r->sign[j] < 0 ? -v[j] : v[j];
    for (int h = 1; h < DS_ROT_BLOCK; h <<= 1)
        for (int i = 0; i < DS_ROT_BLOCK; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                double a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const double c = (double)(float)(1.0 / sqrt((double)DS_ROT_BLOCK));
    for (int i = 0; i < DS_ROT_BLOCK; i++) out[i] = x[i] * c;
}

/* Both folds below run the same five butterfly stages as ds_rot32_apply, arranged so that the
 * inner loops are element-wise over contiguous float64 arrays (vectorizable): the right fold
 * transforms each 32-block of a row in place, the left fold combines whole rows. */
void ds_rot32_fold_row(const ds_rot32 *r, const float *in, float *out, int64_t n) {
    if (r->identity) {
        if (out != in) memmove(out, in, sizeof(float) * (size_t)n);
        return;
    }
    const double c = (double)(float)(1.0 / sqrt((double)DS_ROT_BLOCK));
    double x[DS_ROT_BLOCK];
    for (int64_t b = 0; b + DS_ROT_BLOCK <= n; b += DS_ROT_BLOCK) {
        for (int j = 0; j < DS_ROT_BLOCK; j++) x[j] = r->sign[j] < 0 ? -(double)in[b + j] : (double)in[b + j];
        for (int h = 1; h < DS_ROT_BLOCK; h <<= 1)
            for (int i = 0; i < DS_ROT_BLOCK; i += 2 * h)
#pragma omp simd
                for (int j = i; j < i + h; j++) {
                    double u = x[j], v = x[j + h];
                    x[j] = u + v;
                    x[j + h] = u - v;
                }
        for (int j = 0; j < DS_ROT_BLOCK; j++) out[b + j] = (float)(x[j] * c);
    }
}

void ds_rot32_fold_rows32(const ds_rot32 *r, float *rows, int64_t n) {
    if (r->identity) return;
    const double c = (double)(float)(1.0 / sqrt((double)DS_ROT_BLOCK));
    double *x = ds_xmalloc(sizeof(double) * (size_t)n * DS_ROT_BLOCK);
    for (int j = 0; j < DS_ROT_BLOCK; j++) {
        const float *src = rows + (size_t)j * (size_t)n;
        double *d = x + (size_t)j * (size_t)n;
        const double sg = r->sign[j] < 0 ? -1.0 : 1.0;
#pragma omp simd
        for (int64_t k = 0; k < n; k++) d[k] = sg * (double)src[k];
    }
    for (int h = 1; h < DS_ROT_BLOCK; h <<= 1)
        for (int i = 0; i < DS_ROT_BLOCK; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                double *u = x + (size_t)j * (size_t)n, *v = x + (size_t)(j + h) * (size_t)n;
#pragma omp simd
                for (int64_t k = 0; k < n; k++) {
                    double a = u[k], b = v[k];
                    u[k] = a + b;
                    v[k] = a - b;
                }
            }
    for (int j = 0; j < DS_ROT_BLOCK; j++) {
        float *d = rows + (size_t)j * (size_t)n;
        const double *src = x + (size_t)j * (size_t)n;
#pragma omp simd
        for (int64_t k = 0; k < n; k++) d[k] = (float)(src[k] * c);
    }
    free(x);
}

void ds_rot32_global(const ds_rot32 *r, int64_t D, float *out) {
    memset(out, 0, sizeof(float) * (size_t)D * (size_t)D);
    for (int64_t b = 0; b < D; b += DS_ROT_BLOCK)
        for (int j = 0; j < DS_ROT_BLOCK; j++)
            memcpy(out + (size_t)(b + j) * (size_t)D + (size_t)b, r->B + j * DS_ROT_BLOCK,
                   sizeof(float) * DS_ROT_BLOCK);
}

int ds_rot32_from_global(const float *g, int64_t D, ds_rot32 *r, const char *where, ds_error *err) {
    if (D <= 0 || D % DS_ROT_BLOCK)
        return ds_fail(err, "E_QUAROT_NOT_BLOCK_DIAGONAL", "%s: global_rotation: expected a size that is a multiple of 32, found %lld",
                       where, (long long)D);
    memset(r, 0, sizeof *r);
    for (int j = 0; j < DS_ROT_BLOCK; j++)
        for (int i = 0; i < DS_ROT_BLOCK; i++) r->B[j * DS_ROT_BLOCK + i] = g[(size_t)j * (size_t)D + (size_t)i];
    for (int64_t row = 0; row < D; row++) {
        int64_t blk = row / DS_ROT_BLOCK;
        for (int64_t col = 0; col < D; col++) {
            float v = g[(size_t)row * (size_t)D + (size_t)col];
            if (col / DS_ROT_BLOCK == blk) {
                float ref = r->B[(row % DS_ROT_BLOCK) * DS_ROT_BLOCK + col % DS_ROT_BLOCK];
                if (!(fabsf(v - ref) <= 1e-6f))
                    return ds_fail(err, "E_QUAROT_NOT_BLOCK_DIAGONAL",
                                   "%s: global_rotation[%lld][%lld]: expected the repeated 32x32 block value %.9g, found %.9g",
                                   where, (long long)row, (long long)col, ref, v);
            } else if (!(fabsf(v) <= 1e-6f)) {
                return ds_fail(err, "E_QUAROT_NOT_BLOCK_DIAGONAL",
                               "%s: global_rotation[%lld][%lld]: expected 0 outside the diagonal blocks, found %.9g",
                               where, (long long)row, (long long)col, v);
            }
        }
    }
    bool ident = true;
    for (int a = 0; a < DS_ROT_BLOCK; a++)
        for (int b = 0; b < DS_ROT_BLOCK; b++) {
            double s = 0.0;
            for (int k = 0; k < DS_ROT_BLOCK; k++)
                s += (double)r->B[k * DS_ROT_BLOCK + a] * (double)r->B[k * DS_ROT_BLOCK + b];
            double want = a == b ? 1.0 : 0.0;
            if (!(fabs(s - want) <= 1e-4))
                return ds_fail(err, "E_QUAROT_NOT_ORTHOGONAL", "%s: global_rotation: expected (B^T B)[%d][%d] = %g within 1e-4, found %.9g",
                               where, a, b, want, s);
            if (r->B[a * DS_ROT_BLOCK + b] != (float)want) ident = false;
        }
    r->identity = ident;
    if (ident)
        for (int i = 0; i < DS_ROT_BLOCK; i++) r->sign[i] = 1;
    return 0;
}
