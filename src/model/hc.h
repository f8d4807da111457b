/* Hyper-connections (mHC, MODEL.md §2.3): the per-site mixes with the truncated Sinkhorn, and the
 * collapse/expand of the HC residual copies.
 *
 * Why a module of its own: the lagged pre-mix of V4.1 (the collapse of a site uses the `pre` of the
 * previous site) is easy to get subtly wrong, so the mixes are computed by one function with the
 * exact rounding sequence of docs/NUMERICS.md ("hc_mixes", "Sinkhorn") and the block code only
 * wires pre/post/comb between sites.  All routines work on one row; callers parallelize over rows. */
#ifndef DS_MODEL_HC_H
#define DS_MODEL_HC_H
#include "base/bf16.h"

#define DS_HC_MAX 8              /* HC upper bound (V4.1-Flash: 4) */

typedef struct ds_hc_mix {
    float pre[DS_HC_MAX];                 /* [HC] collapse weights for the NEXT site */
    float post[DS_HC_MAX];                /* [HC] weight of the sublayer output per copy */
    float comb[DS_HC_MAX * DS_HC_MAX];    /* [HC][HC] C[i][j]: source copy i -> destination j */
} ds_hc_mix;

typedef struct ds_hc_params {
    int hc, dim;            /* HC copies of width D */
    int iters;              /* hc_sinkhorn_iters */
    float hc_eps;           /* fp32 hc_eps */
    double norm_eps;        /* RMS statistic epsilon */
    const float *fn;        /* [(2+HC)·HC][HC·D] */
    const float *base;      /* [(2+HC)·HC] */
    const float *scale;     /* [3] */
} ds_hc_params;

/* Mixes of one row X[HC][D] (bf16, contiguous copies). */
void ds_hc_mixes(const ds_hc_params *p, const ds_bf16 *X, ds_hc_mix *out);
/* The same in two parts, so the (2+HC)·HC long dot products of a row can run as separate tasks:
 * dot i = fp32(Σ_j f64(fn[i][j])·f64(X[j])), then the mixes from all of them. */
float ds_hc_mix_dot(const ds_hc_params *p, const ds_bf16 *X, int i);
void ds_hc_mixes_from_dots(const ds_hc_params *p, const ds_bf16 *X, const float *dots, ds_hc_mix *out);
/* The truncated Sinkhorn on C[hc][hc] in place (exposed for tests). */
void ds_hc_sinkhorn(float *C, int hc, int iters, float eps);
/* y = bf16(Σ_k w[k]·X[k]) */
void ds_hc_collapse(const ds_bf16 *X, const float *w, int hc, int dim, ds_bf16 *y);
/* X[j] = bf16(post[j]·y + Σ_i C[i][j]·R[i]) for every copy j; X may alias R only if R was copied
 * (the caller passes the saved residual R and a separate destination). */
void ds_hc_expand(const ds_bf16 *y, const ds_bf16 *R, const ds_hc_mix *mx, int hc, int dim, ds_bf16 *X);

#endif
