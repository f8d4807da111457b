/* Scalar reference kernels: the plain transcription of MODEL.md §2.12 and docs/NUMERICS.md that
 * every optimized path must match (bit for bit on the integer paths).  Kept deliberately simple
 * and obviously right: one output at a time, inputs in index order, no tiles, no packing.  The
 * exact-tier float path accumulates in float64 (NUMERICS rule 2): bf16·bf16 and fp32·bf16 products
 * are exact in float64, and the sum is rounded once to fp32.  The fast-tier float path spells out
 * the blocked fp32 order of kernels.h lane by lane with fmaf (one rounding per product-add, as an
 * FMA or vdpbf16ps step does), reading the published weights directly. */
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

/* ---- fast tier: the blocked fp32 order of kernels.h, written out one lane at a time ---- */

/* |v| < 2^-50 (bf16 exponent field below 127 - 50) counts as 0 in fast BF16 linears. */
float ds_ff_bf16_value(ds_bf16 v) {
    return ((v >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0.f : ds_bf16_to_f32(v);
}

float ds_ff_reduce16(const float a[16]) {
    float h[8], q[4], d[2];
    for (int j = 0; j < 8; j++) h[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++) q[j] = h[j] + h[j + 4];
    for (int j = 0; j < 2; j++) d[j] = q[j] + q[j + 2];
    return d[0] + d[1];
}

static float ff_dot_bf16(const ds_bf16 *w, const ds_bf16 *x, int in) {
    float a[16] = {0};
    for (int b = 0; b < in; b += 32)
        for (int j = 0; j < 16; j++) {
            int i1 = b + 2 * j + 1, i0 = b + 2 * j; /* past `in`: the zero padding */
            float w1 = i1 < in ? ds_ff_bf16_value(w[i1]) : 0.f, x1 = i1 < in ? ds_ff_bf16_value(x[i1]) : 0.f;
            float w0 = i0 < in ? ds_ff_bf16_value(w[i0]) : 0.f, x0 = i0 < in ? ds_ff_bf16_value(x[i0]) : 0.f;
            a[j] = fmaf(w1, x1, a[j]);
            a[j] = fmaf(w0, x0, a[j]);
        }
    return ds_ff_reduce16(a);
}

static float ff_dot_f32(const float *w, const ds_bf16 *x, int in) {
    float a[16] = {0};
    for (int b = 0; b < in; b += 16)
        for (int j = 0; j < 16; j++) {
            int i = b + j;
            a[j] = fmaf(i < in ? w[i] : 0.f, i < in ? ds_bf16_to_f32(x[i]) : 0.f, a[j]);
        }
    return ds_ff_reduce16(a);
}

static void ref_linear_ff_rows(const ds_linear *L, const ds_bf16 *x, int n, int o0, int o1, float *y) {
    const int in = L->in, out = L->out;
    for (int r = 0; r < n; r++) {
        const ds_bf16 *xr = x + (size_t)r * in;
        for (int o = o0; o < o1; o++)
            y[(size_t)r * out + o] = L->fmt == DS_LIN_BF16
                                         ? ff_dot_bf16((const ds_bf16 *)L->w + (size_t)o * in, xr, in)
                                         : ff_dot_f32((const float *)L->w + (size_t)o * in, xr, in);
    }
}

void ds_ref_linear_f_rows(const ds_linear *L, const ds_bf16 *x, int n, int o0, int o1, float *y) {
    if (L->numerics == DS_NUMERICS_FAST) {
        ref_linear_ff_rows(L, x, n, o0, o1, y);
        return;
    }
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
