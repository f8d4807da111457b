/* Scalar reference kernels: the plain transcription of MODEL.md §2.12 and docs/NUMERICS.md that
 * every optimized path must match (bit for bit on the integer paths).  Kept deliberately simple
 * and obviously right: one output at a time, inputs in index order, no tiles, no packing.  The
 * float path accumulates in float64 (NUMERICS rule 2): bf16·bf16 and fp32·bf16 products are exact
 * in float64, and the sum is rounded once to fp32. */
#include "kernels/kernels.h"
#include "kernels/kern_internal.h"
#include <math.h>

static void quantize_row(const ds_bf16 *xr, int k, int8_t *qr, float *s) {
    float amax = 0.f;
    for (int i = 0; i < k; i++) {
        float a = fabsf(ds_bf16_to_f32(xr[i]));
        if (a > amax) amax = a;
    }
    float sx = amax / 127.0f;
    *s = sx;
    if (amax == 0.f) {
        for (int i = 0; i < k; i++) qr[i] = 0;
        return;
    }
    for (int i = 0; i < k; i++) {
        float v = rintf(ds_bf16_to_f32(xr[i]) / sx); /* rint = round-half-even in default mode */
        if (v > 127.f) v = 127.f;
        if (v < -127.f) v = -127.f;
        qr[i] = (int8_t)v;
    }
}

void ds_ref_quantize_rows(const ds_bf16 *x, int n, int k, int8_t *q, float *s) {
    for (int r = 0; r < n; r++) quantize_row(x + (size_t)r * k, k, q + (size_t)r * k, s + r);
}

void ds_ref_linear_q_rows(const ds_linear *L, const int8_t *xq, const float *xs, int n, int o0, int o1,
                          float *y) {
    const int in = L->in, out = L->out;
    const int8_t *w = (const int8_t *)L->w;
    for (int r = 0; r < n; r++) {
        const int8_t *q = xq + (size_t)r * in;
        float *yr = y + (size_t)r * out;
        for (int o = o0; o < o1; o++) {
            int32_t acc = 0;
            if (L->fmt == DS_LIN_W8A8) {
                const int8_t *wr = w + (size_t)o * in;
                for (int i = 0; i < in; i++) acc += (int32_t)q[i] * (int32_t)wr[i];
            } else {
                for (int i = 0; i < in; i++) acc += (int32_t)q[i] * ds_w4_code(w, in, o, i);
            }
            yr[o] = (float)acc * (xs[r] * L->w_scale[o]);
        }
    }
}

void ds_ref_linear_f_rows(const ds_linear *L, const ds_bf16 *x, int n, int o0, int o1, float *y) {
    const int in = L->in, out = L->out;
    for (int r = 0; r < n; r++) {
        const ds_bf16 *xr = x + (size_t)r * in;
        float *yr = y + (size_t)r * out;
        for (int o = o0; o < o1; o++) {
            double acc = 0.0;
            if (L->fmt == DS_LIN_BF16) {
                const ds_bf16 *wr = (const ds_bf16 *)L->w + (size_t)o * in;
                for (int i = 0; i < in; i++)
                    acc += (double)ds_bf16_to_f32(wr[i]) * (double)ds_bf16_to_f32(xr[i]);
            } else {
                const float *wr = (const float *)L->w + (size_t)o * in;
                for (int i = 0; i < in; i++) acc += (double)wr[i] * (double)ds_bf16_to_f32(xr[i]);
            }
            yr[o] = (float)acc;
        }
    }
}

void ds_ref_linear_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y) {
    ds_ref_linear_q_rows(L, xq, xs, n, 0, L->out, y);
}

void ds_ref_linear_f(const ds_linear *L, const ds_bf16 *x, int n, float *y) {
    ds_ref_linear_f_rows(L, x, n, 0, L->out, y);
}
