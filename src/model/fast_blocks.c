/* Fast-tier cores of attention, the indexer, compressor pooling and the Engram gate (see
 * fast_ops.h; docs/NUMERICS.md "Fast tier").
 *
 * Why they are separate from the sublayer files: the sublayers keep one code path for gathering
 * keys, rows and pages (shared by both tiers, so both see the same operands in the same order) and
 * branch once per task on the model's tier into either the float64 reference lines or these fp32
 * routines.  Every sum here has an order fixed by the source: the 32-lane order of fast_ops.c over
 * a vector, or index order over keys / group members with the update vectorized across channels. */
#include "model/fast_ops.h"
#include <math.h>

void ds_attn_head_fast(const ds_bf16 *q, const ds_bf16 *const *keys, int nk, float sink, float scale, int dh, float *sc,
                       float *acc, ds_bf16 *o) {
    float mx = sink;
    for (int i = 0; i < nk; i++) {
        sc[i] = ds_fdot_bb_pair(q, keys[i], dh) * scale;
        if (sc[i] > mx) mx = sc[i];
    }
    ds_fexp_sub(sc, mx, nk);
    const float den = ds_fsum(sc, nk) + ds_fexp(sink - mx);
    for (int d = 0; d < dh; d++) acc[d] = 0.0f;
    for (int i = 0; i < nk; i++) ds_faxpy_bf16(acc, sc[i] / den, keys[i], dh);
#pragma omp simd
    for (int d = 0; d < dh; d++) o[d] = ds_f32_to_bf16(acc[d]);
}

float ds_index_score_fast(const ds_bf16 *qi, const float *w, const ds_bf16 *k, int nh, int di) {
    float l[DS_FAST_LANES] = {0};
    for (int h = 0; h < nh; h++) {
        const float d = ds_fdot_bb(qi + (size_t)h * di, k, di);
        l[h % DS_FAST_LANES] = l[h % DS_FAST_LANES] + w[h] * (d > 0.0f ? d : 0.0f);
    }
    return ds_ftree(l);
}

void ds_pool_group_fast(const float *const *a, const float *const *g, int r, int dh, ds_bf16 *pooled) {
    enum { CB = 64, RMAX = 32 };
    float mx[CB], den[CB], acc[CB], e[RMAX][CB];
    for (int c0 = 0; c0 < dh; c0 += CB) {
        const int nb = dh - c0 < CB ? dh - c0 : CB;
        for (int c = 0; c < nb; c++) mx[c] = g[0][c0 + c];
        for (int t = 1; t < r; t++)
#pragma omp simd
            for (int c = 0; c < nb; c++) mx[c] = g[t][c0 + c] > mx[c] ? g[t][c0 + c] : mx[c];
        for (int c = 0; c < nb; c++) den[c] = 0.0f, acc[c] = 0.0f;
        for (int t = 0; t < r; t++) {
            float *et = e[t % RMAX];
            for (int c = 0; c < nb; c++) et[c] = g[t][c0 + c] - mx[c];
            ds_fexp_sub(et, 0.0f, nb);
            for (int c = 0; c < nb; c++) den[c] = den[c] + et[c];
        }
        for (int t = 0; t < r; t++)
#pragma omp simd
            for (int c = 0; c < nb; c++) acc[c] = acc[c] + (e[t % RMAX][c] / den[c]) * a[t][c0 + c];
        for (int c = 0; c < nb; c++) pooled[c0 + c] = ds_f32_to_bf16(acc[c]);
    }
}

float ds_fdot3_fff(const float *a, const float *b, const float *c, int n) {
    float l[DS_FAST_LANES] = {0};
    int i = 0;
    for (; i + DS_FAST_LANES <= n; i += DS_FAST_LANES)
        for (int j = 0; j < DS_FAST_LANES; j++) l[j] = l[j] + (a[i + j] * b[i + j]) * c[i + j];
    for (int j = 0; i + j < n; j++) l[j] = l[j] + (a[i + j] * b[i + j]) * c[i + j];
    return ds_ftree(l);
}
