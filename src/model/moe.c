/* Mixture of experts of one layer (MODEL.md §2.9) over every row of a step.
 *
 * Why rows are grouped by expert: in a batched step (several decode rows, a prefill chunk) each
 * expert's weights should be streamed once, so the (row, slot) pairs routed to expert e are
 * grouped by the kernels' counting sort (ds_moe_group_rows_into, O(rows·k + E)), gathered, and run
 * through its w1/w3/w2 once over all of them.  With quantized experts (the W4A8/W8A8 release, and
 * the official layout's MXFP4 experts under its default int8 activations) the
 * activation quantization of a row is computed once and shared by every expert's w1/w3 (§2.12
 * allows it; it is deterministic, so the result equals quantizing per expert), and all experts'
 * w1/w3 plus the shared expert run in ONE pool dispatch, then all w2 in a second one.
 *
 * Numerics (docs/NUMERICS.md rows "router", "SwiGLU", "MoE sum"): the exact tier evaluates the
 * score function, SwiGLU and the per-row sum in float64 with one rounding, bit-identical to the
 * NumPy oracle.  The fast tier does the same arithmetic in fp32: scores sqrtf(softplus) in fp32,
 * the top-k weight sum in fp32 in ascending expert id, SwiGLU in fp32, and the per-row sum in fp32
 * over the experts in ascending id with the shared expert last.  In both tiers every row is
 * computed from its own values in a fixed order, so its result does not depend on which other
 * rows share the step, on their order or on the thread count (pool tasks are whole rows). */
#include "model/forward.h"
#include "model/ops.h"
#include "model/swiglu_fast.h"
#include "base/clones.h"
#include "base/threadpool.h"
#include "base/phase_prof.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Linears that take the shared per-row int8 quantization: W8A8/W4A8, and MXFP4 experts of the
 * official layout under its default activations. */
static int is_quant(const ds_linear *L) {
    return L->fmt == DS_LIN_W8A8 || L->fmt == DS_LIN_W4A8 || (L->fmt == DS_LIN_MXFP4 && !L->act_e4m3);
}

typedef struct moe_ctx {
    ds_step *st;
    const ds_layer_weights *w;
    int fast;                     /* DS_NUMERICS_FAST */
    int N, D, E, k, I, T;         /* rows, dim, experts, active, inter, routed pairs + N */
    /* routing */
    int32_t *sel;                 /* [N][k] selected experts, ascending id */
    float *wt;                    /* [N][k] their weights */
    float *sc;                    /* [threads][2E] scores and biased scores */
    int32_t *heap;                /* [threads][k] */
    /* grouping: routed pair p in [0, nr) is idx[p] = row·k + slot; rows [nr, nr + N) = shared */
    int nr;
    const int *idx;               /* [nr] */
    int *pos;                     /* [N][k] position p of (row, slot) in the grouped order */
    float *rw;                    /* [T] routing weight of each grouped row (1 unused for shared) */
    /* expert activations */
    const float *g, *v;           /* [T][I] w1 / w3 outputs */
    ds_bf16 *a;                   /* [T][I] SwiGLU */
    int8_t *aq;                   /* [T][I] its quantization (quantized w2), else NULL */
    float *as;                    /* [T] */
    const float *yo;              /* [T][D] w2 outputs */
    double *acc;                  /* [threads][D] per-row sum accumulator (exact tier) */
    float *tot;                   /* [threads][D] per-row sum (fp32) */
    int e0, e1;                   /* routed experts this rank computes (dist/dist.h; all when alone) */
} moe_ctx;

/* ---- routing ---- */

/* Router of one row (MODEL.md §2.9): scores, top-k on the biased scores, weights ascending id. */
static void route_task(void *vctx, int r, int thread) {
    moe_ctx *x = vctx;
    const ds_config *c = x->st->c;
    const int E = x->E, k = x->k;
    const float *z = x->st->ftmp + (size_t)r * E;
    float *s = x->sc + (size_t)thread * 2 * E, *biased = s + E;
    int32_t *sel = x->sel + (size_t)r * k, *heap = x->heap + (size_t)thread * k;
    float *wt = x->wt + (size_t)r * k;
    const float temp = (float)c->gate_temp;
    /* sqrtsoftplus, the only score function this engine implements (checked at load) */
    if (x->fast) {
        for (int e = 0; e < E; e++) {
            float ze = c->gate_temp != 1.0 ? z[e] / temp : z[e];
            s[e] = sqrtf(ze > 20.0f ? ze : log1pf(expf(ze)));
        }
    } else {
        for (int e = 0; e < E; e++) {
            float ze = z[e];
            if (c->gate_temp != 1.0) ze = ze / temp;
            double zd = ze;
            s[e] = (float)sqrt(zd > 20 ? zd : log1p(exp(zd)));
        }
    }
    for (int e = 0; e < E; e++) biased[e] = s[e] + x->w->gate_bias[e];
    float next;
    int n = ds_topk_next(biased, E, k, sel, heap, &next);
    if (n == k && k < E) ds_probe_gap(x->st->m, 0, biased[sel[k - 1]], next);
    /* ascending expert id fixes every later summation order */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && sel[j - 1] > sel[j]; j--) { int32_t t = sel[j]; sel[j] = sel[j - 1]; sel[j - 1] = t; }
    float den;
    if (x->fast) {
        float sum = 0;
        for (int i = 0; i < k; i++) { wt[i] = s[sel[i]]; sum += wt[i]; }
        den = sum + 1e-20f;
    } else {
        double sum = 0;
        for (int i = 0; i < k; i++) { wt[i] = s[sel[i]]; sum += wt[i]; }
        den = (float)sum + 1e-20f;
    }
    if (c->norm_topk_prob && k > 1)
        for (int i = 0; i < k; i++) wt[i] = wt[i] / den;
    const float rs = (float)c->route_scale;
    for (int i = 0; i < k; i++) wt[i] = wt[i] * rs;
}

/* ---- SwiGLU (+ the per-row quantization w2 reads), one grouped row per task ---- */

static void swiglu_task(void *vctx, int t, int thread) {
    (void)thread;
    moe_ctx *x = vctx;
    const int I = x->I;
    const float limit = (float)x->st->c->swiglu_limit;
    const float *g = x->g + (size_t)t * I, *v = x->v + (size_t)t * I;
    ds_bf16 *a = x->a + (size_t)t * I;
    const int routed = t < x->nr;
    const float w = routed ? x->rw[t] : 1.0f;
    if (x->fast) {
        ds_swiglu_row_fast(g, v, I, limit, w, routed, a);
    } else {
        for (int i = 0; i < I; i++) {
            float gg, vv;
            ds_swiglu_inputs(g[i], v[i], limit, &gg, &vv);
            double sg = (double)gg / (1.0 + exp(-(double)gg));
            float y = (float)(sg * (double)vv);
            if (routed) y = y * w;
            a[i] = ds_f32_to_bf16(y);
        }
    }
    if (x->aq) ds_quantize_rows(a, 1, I, x->aq + (size_t)t * I, x->as + t);
}

/* ---- per-row sum: selected experts in ascending id, then the shared expert ---- */

/* tot[d] += bf16(y[d]) for every d: one addition per element, so vectorizing keeps every bit */
DS_CLONES static void add_rounded(float *tot, const float *y, int D) {
#pragma omp simd
    for (int d = 0; d < D; d++) tot[d] += ds_round_bf16(y[d]);
}

static void sum_task(void *vctx, int r, int thread) {
    moe_ctx *x = vctx;
    ds_step *st = x->st;
    const int D = x->D, k = x->k;
    const int *pos = x->pos + (size_t)r * k;
    const float *ysh = x->yo + (size_t)(x->nr + r) * D;
    float *tot = x->tot + (size_t)thread * D;
    if (x->fast) {
        for (int d = 0; d < D; d++) tot[d] = 0.0f;
        for (int j = 0; j < k; j++) {
            const float *ye = x->yo + (size_t)pos[j] * D;
            add_rounded(tot, ye, D);
        }
        add_rounded(tot, ysh, D);
    } else {
        double *acc = x->acc + (size_t)thread * D;
        for (int d = 0; d < D; d++) acc[d] = 0.0;
        for (int j = 0; j < k; j++) {
            const float *ye = x->yo + (size_t)pos[j] * D;
            for (int d = 0; d < D; d++) acc[d] += (double)ds_round_bf16(ye[d]);
        }
        for (int d = 0; d < D; d++) tot[d] = (float)(acc[d] + (double)ds_round_bf16(ysh[d]));
    }
    ds_probe_bf16(st->m, tot, (size_t)D);
    ds_round_rows_bf16(tot, (size_t)D, st->y + (size_t)r * D);
}

/* ---- expert linears ---- */

/* Quantized routed experts: w1/w3 of every routed expert (and of the shared expert when it is
 * quantized too) in one dispatch on the shared quantization of u, then every w2 in a second one
 * (outputs identical to running the linears one by one; the per-row quantization of the SwiGLU
 * output is ds_quantize_rows').  A float shared expert (FP8 in the official layout) runs beside
 * them on the bf16 rows. */
static void experts_quant(moe_ctx *x, const int *off, float *g, float *v, float *yo) {
    ds_step *st = x->st;
    ds_arena *ar = st->arena;
    const ds_layer_weights *w = x->w;
    const int N = x->N, D = x->D, E = x->E, I = x->I, nr = x->nr;
    int8_t *uq = DS_ARENA_NEW(ar, int8_t, (size_t)N * D);
    float *us = DS_ARENA_NEW(ar, float, N);
    ds_quantize_rows(st->u, N, D, uq, us);
    int8_t *gq = DS_ARENA_NEW(ar, int8_t, (size_t)nr * D);
    float *gs = DS_ARENA_NEW(ar, float, nr);
    int *rows = DS_ARENA_NEW(ar, int, nr);
    for (int p = 0; p < nr; p++) rows[p] = x->idx[p] / x->k;
    ds_gather_rows_q(uq, us, D, rows, nr, gq, gs);
    ds_linear_job *jobs = DS_ARENA_NEW(ar, ds_linear_job, 2 * E + 2);
    int nj = 0;
    for (int e = x->e0; e < x->e1; e++) {
        int r0 = off[e], n = off[e + 1] - r0;
        if (!n) continue;
        const int8_t *xq = gq + (size_t)r0 * D;
        jobs[nj++] = (ds_linear_job){&w->w1[e], xq, gs + r0, n, g + (size_t)r0 * I};
        jobs[nj++] = (ds_linear_job){&w->w3[e], xq, gs + r0, n, v + (size_t)r0 * I};
    }
    const int shared_q = is_quant(&w->sw1) && is_quant(&w->sw3) && is_quant(&w->sw2);
    if (shared_q) {
        jobs[nj++] = (ds_linear_job){&w->sw1, uq, us, N, g + (size_t)nr * I};
        jobs[nj++] = (ds_linear_job){&w->sw3, uq, us, N, v + (size_t)nr * I};
    }
    ds_linear_forward_q_many(jobs, nj);
    if (!shared_q) {
        ds_linear_forward(&w->sw1, st->u, N, g + (size_t)nr * I);
        ds_linear_forward(&w->sw3, st->u, N, v + (size_t)nr * I);
    }

    x->aq = DS_ARENA_NEW(ar, int8_t, (size_t)x->T * I);
    x->as = DS_ARENA_NEW(ar, float, x->T);
    ds_pool_run(x->T, swiglu_task, x);

    nj = 0;
    for (int e = x->e0; e < x->e1; e++) {
        int r0 = off[e], n = off[e + 1] - r0;
        if (n) jobs[nj++] = (ds_linear_job){&w->w2[e], x->aq + (size_t)r0 * I, x->as + r0, n, yo + (size_t)r0 * D};
    }
    if (shared_q) jobs[nj++] = (ds_linear_job){&w->sw2, x->aq + (size_t)nr * I, x->as + nr, N, yo + (size_t)nr * D};
    ds_linear_forward_q_many(jobs, nj);
    if (!shared_q) ds_linear_forward(&w->sw2, x->a + (size_t)nr * I, N, yo + (size_t)nr * D);
}

/* Float (or mixed) experts: the same grouping, one forward per expert linear. */
static void experts_float(moe_ctx *x, const int *off, float *g, float *v, float *yo) {
    ds_step *st = x->st;
    const ds_layer_weights *w = x->w;
    const int N = x->N, D = x->D, I = x->I, nr = x->nr;
    ds_bf16 *gu = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)nr * D);
    for (int p = 0; p < nr; p++)
        memcpy(gu + (size_t)p * D, st->u + (size_t)(x->idx[p] / x->k) * D, sizeof(ds_bf16) * (size_t)D);
    for (int e = x->e0; e < x->e1; e++) {
        int r0 = off[e], n = off[e + 1] - r0;
        if (!n) continue;
        ds_linear_forward(&w->w1[e], gu + (size_t)r0 * D, n, g + (size_t)r0 * I);
        ds_linear_forward(&w->w3[e], gu + (size_t)r0 * D, n, v + (size_t)r0 * I);
    }
    ds_linear_forward(&w->sw1, st->u, N, g + (size_t)nr * I);
    ds_linear_forward(&w->sw3, st->u, N, v + (size_t)nr * I);
    x->aq = NULL;
    ds_pool_run(x->T, swiglu_task, x);
    for (int e = x->e0; e < x->e1; e++) {
        int r0 = off[e], n = off[e + 1] - r0;
        if (n) ds_linear_forward(&w->w2[e], x->a + (size_t)r0 * I, n, yo + (size_t)r0 * D);
    }
    ds_linear_forward(&w->sw2, x->a + (size_t)nr * I, N, yo + (size_t)nr * D);
}

/* Expert parallel, fast reduce mode: each rank sums its experts (rank 0 adds the shared expert) in
 * fp32 and the partials are summed by MPI_Allreduce (order depends on R, SERVING.md §14). */
static void sum_fast_allreduce(moe_ctx *x) {
    ds_step *st = x->st;
    const int D = x->D, k = x->k;
    float *tot = DS_ARENA_NEW(st->arena, float, (size_t)x->N * D);
    for (int r = 0; r < x->N; r++) {
        float *t = tot + (size_t)r * D;
        for (int d = 0; d < D; d++) t[d] = 0.0f;
        for (int j = 0; j < k; j++) {
            const int e = x->sel[(size_t)r * k + j];
            if (e < x->e0 || e >= x->e1) continue;
            const float *ye = x->yo + (size_t)x->pos[(size_t)r * k + j] * D;
            add_rounded(t, ye, D);
        }
        if (st->m->shard.rank == 0)
            add_rounded(t, x->yo + (size_t)(x->nr + r) * D, D);
    }
    ds_dist_allreduce_f32(tot, (size_t)x->N * D);
    ds_round_rows_bf16(tot, (size_t)x->N * D, st->y);
}

static int routed_quant(const ds_layer_weights *w, int E) {
    int q = 1;
    for (int e = 0; e < E && q; e++) q = is_quant(&w->w1[e]) && is_quant(&w->w3[e]) && is_quant(&w->w2[e]);
    return q;
}

void ds_moe_layer(ds_step *st, int l) {
    const ds_config *c = st->c;
    ds_arena *ar = st->arena;
    ds_arena_mark mk = ds_arena_mark_get(ar);
    const int threads = ds_pool_threads();
    moe_ctx x = {.st = st, .w = &st->m->layers[l], .fast = st->m->numerics == DS_NUMERICS_FAST, .N = st->N,
                 .D = c->dim, .E = c->n_experts, .k = c->n_active, .I = c->moe_inter};
    const int N = x.N, k = x.k, E = x.E;
    const ds_shard *sh = &st->m->shard;
    const int split = sh->size > 1 && sh->expert_parallel && l < c->n_layers;
    x.e0 = split ? sh->e0 : 0;
    x.e1 = split ? sh->e1 : E;
    x.nr = N * k;
    x.T = x.nr + N;

    /* routing: fp32 logits of the gate linear, then one task per row */
    ds_prof_push(DS_PH_MOE_GATE);
    ds_linear_forward(&x.w->gate, st->u, N, st->ftmp);
    x.sel = DS_ARENA_NEW(ar, int32_t, (size_t)N * k);
    x.wt = DS_ARENA_NEW(ar, float, (size_t)N * k);
    x.sc = DS_ARENA_NEW(ar, float, (size_t)threads * 2 * E);
    x.heap = DS_ARENA_NEW(ar, int32_t, (size_t)threads * k);
    ds_pool_run(N, route_task, &x);

    /* grouping: every (row, slot) pair lands in exactly one expert's slice */
    int *off = DS_ARENA_NEW(ar, int, E + 1), *idx = DS_ARENA_NEW(ar, int, x.nr);
    ds_error err = {{0}, {0}};
    if (ds_moe_group_rows_into(x.sel, N, k, E, off, idx, &err) < 0) {
        /* the router only returns ids in [0, E): a failure here is a bug, never input */
        ds_log(DS_LOG_ERROR, "MoE layer %d: %s", l, err.msg);
        abort();
    }
    x.idx = idx;
    x.pos = DS_ARENA_NEW(ar, int, x.nr);
    x.rw = DS_ARENA_NEW(ar, float, x.nr);
    for (int p = 0; p < x.nr; p++) {
        x.pos[idx[p]] = p;
        x.rw[p] = x.wt[idx[p]];
    }

    ds_prof_pop();
    ds_prof_push(DS_PH_MOE_EXPERTS);
    float *g = DS_ARENA_NEW(ar, float, (size_t)x.T * x.I), *v = DS_ARENA_NEW(ar, float, (size_t)x.T * x.I);
    float *yo = DS_ARENA_NEW(ar, float, (size_t)x.T * x.D);
    x.g = g;
    x.v = v;
    x.a = DS_ARENA_NEW(ar, ds_bf16, (size_t)x.T * x.I);
    x.yo = yo;
    if (routed_quant(x.w, E)) experts_quant(&x, off, g, v, yo);
    else experts_float(&x, off, g, v, yo);
    if (split && sh->mode == DS_REDUCE_FAST) {
        sum_fast_allreduce(&x);
        ds_arena_release(ar, mk);
        return;
    }
    if (split) {
        /* the w2 outputs are grouped by expert, so rank r's rows are one run: gather them (each value
         * is the single-process one) and sum every row in the single-process order below */
        int bounds[257], lo = 0, hi = 0;
        for (int q = 0; q < sh->size && q < 256; q++) {
            ds_split_range(E, 1, sh->size, q, &lo, &hi);
            bounds[q] = off[lo];
        }
        bounds[sh->size] = off[hi];   /* hi of the last rank is E */
        ds_dist_gather_rows(yo, bounds, sizeof(float) * (size_t)x.D);
    }

    ds_prof_pop();
    ds_prof_push(DS_PH_MOE_SUM);
    x.acc = DS_ARENA_NEW(ar, double, (size_t)threads * x.D);
    x.tot = DS_ARENA_NEW(ar, float, (size_t)threads * x.D);
    ds_pool_run(N, sum_task, &x);
    ds_arena_release(ar, mk);
    ds_prof_pop();
}
