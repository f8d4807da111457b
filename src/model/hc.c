/* mHC mixes, Sinkhorn, collapse and expand (see hc.h).  Every line mirrors one row of the
 * "hc_mixes"/"Sinkhorn"/"collapse"/"expand" entries of docs/NUMERICS.md. */
#include "model/hc.h"
#include "model/ops.h"
#include <math.h>

void ds_hc_sinkhorn(float *C, int hc, int iters, float eps) {
    /* row softmax, then + eps */
    for (int i = 0; i < hc; i++) {
        float *r = C + i * hc;
        float mx = r[0];
        for (int j = 1; j < hc; j++) if (r[j] > mx) mx = r[j];
        double den = 0;
        for (int j = 0; j < hc; j++) {
            float d = r[j] - mx;
            r[j] = (float)exp((double)d);
            den += r[j];
        }
        float fden = (float)den;
        for (int j = 0; j < hc; j++) r[j] = r[j] / fden + eps;
    }
    /* column normalization */
    for (int j = 0; j < hc; j++) {
        double s = 0;
        for (int i = 0; i < hc; i++) s += C[i * hc + j];
        float t = (float)s + eps;
        for (int i = 0; i < hc; i++) C[i * hc + j] /= t;
    }
    for (int it = 1; it < iters; it++) {
        for (int i = 0; i < hc; i++) {
            double s = 0;
            for (int j = 0; j < hc; j++) s += C[i * hc + j];
            float t = (float)s + eps;
            for (int j = 0; j < hc; j++) C[i * hc + j] /= t;
        }
        for (int j = 0; j < hc; j++) {
            double s = 0;
            for (int i = 0; i < hc; i++) s += C[i * hc + j];
            float t = (float)s + eps;
            for (int i = 0; i < hc; i++) C[i * hc + j] /= t;
        }
    }
}

float ds_hc_mix_dot(const ds_hc_params *p, const ds_bf16 *X, int i) {
    const int n = p->hc * p->dim;
    return (float)ds_dot_fb(p->fn + (size_t)i * n, X, n);
}

void ds_hc_mixes_from_dots(const ds_hc_params *p, const ds_bf16 *X, const float *dots, ds_hc_mix *out) {
    const int hc = p->hc, n = hc * p->dim, nmix = (2 + hc) * hc;
    float ss = ds_sumsq_b(X, n);
    float rs = (float)(1.0 / sqrt((double)ss / n + p->norm_eps));
    float m[(2 + DS_HC_MAX) * DS_HC_MAX];
    for (int i = 0; i < nmix; i++) m[i] = dots[i] * rs;
    const float s0 = p->scale[0], s1 = p->scale[1], s2 = p->scale[2];
    for (int k = 0; k < hc; k++) {
        float z = m[k] * s0 + p->base[k];
        out->pre[k] = (float)ds_sigmoid64((double)z) + p->hc_eps;
        float z2 = m[hc + k] * s1 + p->base[hc + k];
        out->post[k] = (float)(2.0 * ds_sigmoid64((double)z2));
    }
    for (int i = 0; i < hc * hc; i++) out->comb[i] = m[2 * hc + i] * s2 + p->base[2 * hc + i];
    ds_hc_sinkhorn(out->comb, hc, p->iters, p->hc_eps);
}

void ds_hc_mixes(const ds_hc_params *p, const ds_bf16 *X, ds_hc_mix *out) {
    float dots[(2 + DS_HC_MAX) * DS_HC_MAX];
    for (int i = 0; i < (2 + p->hc) * p->hc; i++) dots[i] = ds_hc_mix_dot(p, X, i);
    ds_hc_mixes_from_dots(p, X, dots, out);
}

void ds_hc_collapse(const ds_bf16 *X, const float *w, int hc, int dim, ds_bf16 *y) {
    for (int d = 0; d < dim; d++) {
        double s = 0;
        for (int k = 0; k < hc; k++) s += (double)w[k] * ds_bf16_to_f32(X[(size_t)k * dim + d]);
        y[d] = ds_f32_to_bf16((float)s);
    }
}

void ds_hc_expand(const ds_bf16 *y, const ds_bf16 *R, const ds_hc_mix *mx, int hc, int dim, ds_bf16 *X) {
    for (int j = 0; j < hc; j++) {
        ds_bf16 *xj = X + (size_t)j * dim;
        for (int d = 0; d < dim; d++) {
            double s = (double)mx->post[j] * ds_bf16_to_f32(y[d]);
            for (int i = 0; i < hc; i++) s += (double)mx->comb[i * hc + j] * ds_bf16_to_f32(R[(size_t)i * dim + d]);
            xj[d] = ds_f32_to_bf16((float)s);
        }
    }
}
