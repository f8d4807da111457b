/* Mixture of experts of one layer (MODEL.md §2.9) over every row of a step.
 *
 * Why rows are grouped by expert: in a batched step (several decode rows, a prefill chunk) each
 * expert's weights should be streamed once, so the rows routed to expert e are gathered and run
 * through its w1/w3/w2 in one ds_linear_forward each.  The activation quantization of a row is
 * computed once and shared by every expert's w1/w3 (§2.12 allows it; it is deterministic, so the
 * result equals quantizing per expert).  Each row then sums its experts in ascending expert id,
 * shared expert last, in float64 with one rounding (docs/NUMERICS.md "MoE sum"), so the output of
 * a row does not depend on which other rows share the step. */
#include "model/forward.h"
#include "model/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_quant(const ds_linear *L) { return L->fmt == DS_LIN_W8A8 || L->fmt == DS_LIN_W4A8; }

/* SwiGLU body for n rows: a = bf16(silu(clamp g)·clamp v · w), g/v fp32 from bf16 linear outputs. */
static void swiglu(const float *g, const float *v, const float *wrow, int n, int inter, float limit, ds_bf16 *a) {
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < inter; i++) {
            float gg = ds_round_bf16(g[(size_t)r * inter + i]);
            float vv = ds_round_bf16(v[(size_t)r * inter + i]);
            if (limit > 0) {
                if (vv > limit) vv = limit;
                if (vv < -limit) vv = -limit;
                if (gg > limit) gg = limit;
            }
            double sg = (double)gg / (1.0 + exp(-(double)gg));
            float x = (float)(sg * (double)vv);
            if (wrow) x = x * wrow[r];
            a[(size_t)r * inter + i] = ds_f32_to_bf16(x);
        }
    }
}

/* Router of one row: selected experts ascending with their weights. */
static void route(ds_step *st, const ds_layer_weights *w, const float *z, int32_t *sel, float *wt) {
    const ds_config *c = st->c;
    const int E = c->n_experts, k = c->n_active;
    float *s = malloc(sizeof(float) * (size_t)E), *biased = malloc(sizeof(float) * (size_t)E);
    const float temp = (float)c->gate_temp;
    for (int e = 0; e < E; e++) {
        float ze = z[e];
        if (c->gate_temp != 1.0) ze = ze / temp;
        /* sqrtsoftplus, the only score function this engine implements (checked at load) */
        double zd = ze;
        s[e] = (float)sqrt(zd > 20 ? zd : log1p(exp(zd)));
    }
    for (int e = 0; e < E; e++) biased[e] = s[e] + w->gate_bias[e];
    int32_t *heap = malloc(sizeof(int32_t) * (size_t)k);
    float next;
    int n = ds_topk_next(biased, E, k, sel, heap, &next);
    if (n == k && k < E) ds_probe_gap(st->m, 0, biased[sel[k - 1]], next);
    /* ascending expert id fixes the summation order */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && sel[j - 1] > sel[j]; j--) { int32_t t = sel[j]; sel[j] = sel[j - 1]; sel[j - 1] = t; }
    double sum = 0;
    for (int i = 0; i < k; i++) { wt[i] = s[sel[i]]; sum += wt[i]; }
    if (c->norm_topk_prob && k > 1) {
        float den = (float)sum + 1e-20f;
        for (int i = 0; i < k; i++) wt[i] = wt[i] / den;
    }
    const float rs = (float)c->route_scale;
    for (int i = 0; i < k; i++) wt[i] = wt[i] * rs;
    free(heap);
    free(s);
    free(biased);
}

/* All expert linears of the layer quantized (the W4A8/W8A8 release): every w1/w3 of the routed
 * experts and the shared expert run in ONE pool dispatch on the shared quantization of u, then
 * every w2 in a second one.  Each job still streams its expert's weights once over that expert's
 * gathered rows, and the per-row quantization of the SwiGLU output is the one ds_linear_forward
 * would compute (ds_quantize_rows is per row), so the outputs are identical to running the
 * linears one by one; only the number of barriers drops from 3·(k+1) to 2 per layer. */
static void moe_experts_quant(ds_step *st, const ds_layer_weights *w, const int32_t *sel, const float *wt,
                              ds_bf16 *yexp, ds_bf16 *ysh) {
    const ds_config *c = st->c;
    const int N = st->N, D = c->dim, E = c->n_experts, k = c->n_active, I = c->moe_inter;
    const float limit = (float)c->swiglu_limit;
    const int R = N * k;                      /* routed (row, slot) pairs, each in exactly one group */
    int8_t *uq = malloc((size_t)N * D);
    float *us = malloc(sizeof(float) * (size_t)N);
    ds_quantize_rows(st->u, N, D, uq, us);

    /* group rows by expert: group i is expert gid[i], its rows at [goff[i], goff[i+1]) */
    int *gid = malloc(sizeof(int) * (size_t)(E + 1)), *goff = malloc(sizeof(int) * (size_t)(E + 2));
    int *rows = malloc(sizeof(int) * (size_t)R), *slot = malloc(sizeof(int) * (size_t)R);
    float *rw = malloc(sizeof(float) * (size_t)R);
    int ng = 0, nr = 0;
    for (int e = 0; e < E; e++) {
        int start = nr;
        for (int r = 0; r < N; r++)
            for (int j = 0; j < k; j++)
                if (sel[(size_t)r * k + j] == e) { rows[nr] = r; slot[nr] = j; rw[nr] = wt[(size_t)r * k + j]; nr++; }
        if (nr > start) { gid[ng] = e; goff[ng] = start; ng++; }
    }
    goff[ng] = nr;

    int8_t *gq = malloc((size_t)(nr ? nr : 1) * D);
    float *gs = malloc(sizeof(float) * (size_t)(nr ? nr : 1));
    ds_gather_rows_q(uq, us, D, rows, nr, gq, gs);
    /* rows [0, nr) routed in group order, rows [nr, nr + N) the shared expert */
    const int T = nr + N;
    float *g = malloc(sizeof(float) * (size_t)T * I), *v = malloc(sizeof(float) * (size_t)T * I);
    ds_bf16 *a = malloc(sizeof(ds_bf16) * (size_t)T * I);
    int8_t *aq = malloc((size_t)T * I);
    float *as = malloc(sizeof(float) * (size_t)T);
    float *yo = malloc(sizeof(float) * (size_t)T * D);
    ds_linear_job *jobs = malloc(sizeof(ds_linear_job) * (size_t)(2 * ng + 2));

    int nj = 0;
    for (int i = 0; i < ng; i++) {
        int r0 = goff[i], n = goff[i + 1] - r0;
        const int8_t *xq = gq + (size_t)r0 * D;
        jobs[nj++] = (ds_linear_job){&w->w1[gid[i]], xq, gs + r0, n, g + (size_t)r0 * I};
        jobs[nj++] = (ds_linear_job){&w->w3[gid[i]], xq, gs + r0, n, v + (size_t)r0 * I};
    }
    jobs[nj++] = (ds_linear_job){&w->sw1, uq, us, N, g + (size_t)nr * I};
    jobs[nj++] = (ds_linear_job){&w->sw3, uq, us, N, v + (size_t)nr * I};
    ds_linear_forward_q_many(jobs, nj);

    swiglu(g, v, rw, nr, I, limit, a);
    swiglu(g + (size_t)nr * I, v + (size_t)nr * I, NULL, N, I, limit, a + (size_t)nr * I);
    ds_quantize_rows(a, T, I, aq, as);
    nj = 0;
    for (int i = 0; i < ng; i++) {
        int r0 = goff[i], n = goff[i + 1] - r0;
        jobs[nj++] = (ds_linear_job){&w->w2[gid[i]], aq + (size_t)r0 * I, as + r0, n, yo + (size_t)r0 * D};
    }
    jobs[nj++] = (ds_linear_job){&w->sw2, aq + (size_t)nr * I, as + nr, N, yo + (size_t)nr * D};
    ds_linear_forward_q_many(jobs, nj);

    for (int i = 0; i < nr; i++)
        ds_round_rows_bf16(yo + (size_t)i * D, (size_t)D, yexp + ((size_t)rows[i] * k + slot[i]) * D);
    ds_round_rows_bf16(yo + (size_t)nr * D, (size_t)N * D, ysh);
    free(jobs); free(yo); free(as); free(aq); free(a); free(v); free(g);
    free(gs); free(gq); free(rw); free(slot); free(rows); free(goff); free(gid); free(us); free(uq);
}

void ds_moe_layer(ds_step *st, int l) {
    const ds_config *c = st->c;
    const ds_layer_weights *w = &st->m->layers[l];
    const int N = st->N, D = c->dim, E = c->n_experts, k = c->n_active, I = c->moe_inter;
    const float limit = (float)c->swiglu_limit;

    /* routing */
    ds_linear_forward(&w->gate, st->u, N, st->ftmp);
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)N * k);
    float *wt = malloc(sizeof(float) * (size_t)N * k);
    for (int r = 0; r < N; r++) route(st, w, st->ftmp + (size_t)r * E, sel + (size_t)r * k, wt + (size_t)r * k);

    ds_bf16 *yexp = malloc(sizeof(ds_bf16) * (size_t)N * k * D);   /* [row][slot][D] */
    ds_bf16 *ysh = malloc(sizeof(ds_bf16) * (size_t)N * D);
    int all_quant = is_quant(&w->sw1) && is_quant(&w->sw3) && is_quant(&w->sw2);
    for (int e = 0; e < E && all_quant; e++) all_quant = is_quant(&w->w1[e]) && is_quant(&w->w3[e]) && is_quant(&w->w2[e]);
    if (all_quant) {
        moe_experts_quant(st, w, sel, wt, yexp, ysh);
        goto sum_rows;
    }
    {
    /* shared activation quantization of u (w1/w3 of all experts read the same rows) */
    int8_t *uq = NULL;
    float *us = NULL;
    if (is_quant(&w->w1[0])) {
        uq = malloc((size_t)N * D);
        us = malloc(sizeof(float) * (size_t)N);
        ds_quantize_rows(st->u, N, D, uq, us);
    }
    float *g = malloc(sizeof(float) * (size_t)N * I), *v = malloc(sizeof(float) * (size_t)N * I);
    ds_bf16 *a = malloc(sizeof(ds_bf16) * (size_t)N * I);
    float *yo = malloc(sizeof(float) * (size_t)N * D);

    /* shared expert on every row */
    ds_linear_forward(&w->sw1, st->u, N, g);
    ds_linear_forward(&w->sw3, st->u, N, v);
    swiglu(g, v, NULL, N, I, limit, a);
    ds_linear_forward(&w->sw2, a, N, yo);
    ds_round_rows_bf16(yo, (size_t)N * D, ysh);

    /* routed experts, rows grouped per expert */
    int *rows = malloc(sizeof(int) * (size_t)N), *slot = malloc(sizeof(int) * (size_t)N);
    float *rw = malloc(sizeof(float) * (size_t)N);
    int8_t *gq = uq ? malloc((size_t)N * D) : NULL;
    float *gs = uq ? malloc(sizeof(float) * (size_t)N) : NULL;
    ds_bf16 *gu = uq ? NULL : malloc(sizeof(ds_bf16) * (size_t)N * D);
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int r = 0; r < N; r++)
            for (int j = 0; j < k; j++)
                if (sel[(size_t)r * k + j] == e) { rows[n] = r; slot[n] = j; rw[n] = wt[(size_t)r * k + j]; n++; }
        if (!n) continue;
        const ds_linear *w1 = &w->w1[e], *w2 = &w->w2[e], *w3 = &w->w3[e];
        if (uq) {
            ds_gather_rows_q(uq, us, D, rows, n, gq, gs);
            ds_linear_forward_q(w1, gq, gs, n, g);
            ds_linear_forward_q(w3, gq, gs, n, v);
        } else {
            for (int i = 0; i < n; i++) memcpy(gu + (size_t)i * D, st->u + (size_t)rows[i] * D, sizeof(ds_bf16) * (size_t)D);
            ds_linear_forward(w1, gu, n, g);
            ds_linear_forward(w3, gu, n, v);
        }
        swiglu(g, v, rw, n, I, limit, a);
        ds_linear_forward(w2, a, n, yo);
        for (int i = 0; i < n; i++)
            ds_round_rows_bf16(yo + (size_t)i * D, (size_t)D, yexp + ((size_t)rows[i] * k + slot[i]) * D);
    }

    free(rows); free(slot); free(rw); free(gq); free(gs); free(gu);
    free(g); free(v); free(a); free(yo); free(uq); free(us);
    }

sum_rows:;
    /* per row: Σ over selected experts in ascending id, then the shared expert */
    float *tot = malloc(sizeof(float) * (size_t)D);
    for (int r = 0; r < N; r++) {
        for (int d = 0; d < D; d++) {
            double s = 0;
            for (int j = 0; j < k; j++) s += ds_bf16_to_f32(yexp[((size_t)r * k + j) * D + d]);
            s += ds_bf16_to_f32(ysh[(size_t)r * D + d]);
            tot[d] = (float)s;
        }
        ds_probe_bf16(st->m, tot, (size_t)D);
        ds_round_rows_bf16(tot, (size_t)D, st->y + (size_t)r * D);
    }
    free(tot);
    free(yexp); free(ysh); free(sel); free(wt);
}
