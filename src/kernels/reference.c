/* Scalar reference kernels: the plain transcription of MODEL.md §2.12 that every optimized path
 * must match (bit for bit on the integer paths).  Kept deliberately simple and obviously right. */
#include "kernels/kernels.h"
#include <math.h>

void ds_quantize_rows(const ds_bf16 *x, int n, int k, int8_t *q, float *s) {
    for (int r = 0; r < n; r++) {
        const ds_bf16 *xr = x + (size_t)r * k;
        int8_t *qr = q + (size_t)r * k;
        float amax = 0.f;
        for (int i = 0; i < k; i++) {
            float a = fabsf(ds_bf16_to_f32(xr[i]));
            if (a > amax) amax = a;
        }
        float sx = amax / 127.0f;
        s[r] = sx;
        if (amax == 0.f) {
            for (int i = 0; i < k; i++) qr[i] = 0;
            continue;
        }
        for (int i = 0; i < k; i++) {
            float v = rintf(ds_bf16_to_f32(xr[i]) / sx); /* rint = round-half-even in default mode */
            if (v > 127.f) v = 127.f;
            if (v < -127.f) v = -127.f;
            qr[i] = (int8_t)v;
        }
    }
}

void ds_ref_linear_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y) {
    const int in = L->in, out = L->out;
    const int8_t *w = (const int8_t *)L->w;
    for (int r = 0; r < n; r++) {
        const int8_t *q = xq + (size_t)r * in;
        float *yr = y + (size_t)r * out;
        for (int o = 0; o < out; o++) {
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

void ds_ref_linear_f(const ds_linear *L, const ds_bf16 *x, int n, float *y) {
    const int in = L->in, out = L->out;
    for (int r = 0; r < n; r++) {
        const ds_bf16 *xr = x + (size_t)r * in;
        float *yr = y + (size_t)r * out;
        for (int o = 0; o < out; o++) {
            float acc = 0.f;
            if (L->fmt == DS_LIN_BF16) {
                const ds_bf16 *wr = (const ds_bf16 *)L->w + (size_t)o * in;
                for (int i = 0; i < in; i++) acc += ds_bf16_to_f32(wr[i]) * ds_bf16_to_f32(xr[i]);
            } else {
                const float *wr = (const float *)L->w + (size_t)o * in;
                for (int i = 0; i < in; i++) acc += wr[i] * ds_bf16_to_f32(xr[i]);
            }
            yr[o] = acc;
        }
    }
}
