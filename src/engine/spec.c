/* Verify / accept / commit of speculative decoding (see spec.h for the contract).
 *
 * Why the commit truncates first and writes rings second: the verify step processed K+1 rows, so
 * the sequence's processed length is p0 + K + 1; only p0 + acc + 1 of them are committed (§6.3).
 * Every per-position datum beyond that is invisible once the length moves back, so rollback is the
 * truncation alone; the draft rings are written only for the committed positions, from the aux
 * rows the verify step captured (rejected rows never enter a ring). */
#include "engine/spec.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* First-index argmax over the unmasked ids: ds_draft_argmax (vectorized) has exactly the answer of
 * the scalar "first strictly greater" scan (ties to the lower id, NaN never chosen unless first). */
static int32_t masked_argmax(const float *row, int V, const uint8_t *masked) { return ds_draft_argmax(row, V, masked, -1); }

int ds_spec_accept_greedy(const float *logits, int V, const uint8_t *masked, const int32_t *drafts, int K, int32_t *bonus) {
    int acc = 0;
    while (acc < K && drafts[acc] == masked_argmax(logits + (size_t)acc * V, V, masked)) acc++;
    *bonus = masked_argmax(logits + (size_t)acc * V, V, masked);
    return acc;
}

/* Inverse-CDF draw from a (possibly unnormalized, non-negative) weight vector, float64 sums. */
static int32_t draw(const float *w, const float *sub, int V, double u) {
    double tot = 0;
    for (int v = 0; v < V; v++) {
        double x = sub ? (double)w[v] - (double)sub[v] : (double)w[v];
        if (x > 0) tot += x;
    }
    if (!(tot > 0)) return -1;
    double target = u * tot, run = 0;
    int32_t last = -1;
    for (int v = 0; v < V; v++) {
        double x = sub ? (double)w[v] - (double)sub[v] : (double)w[v];
        if (x <= 0) continue;
        run += x;
        last = v;
        if (run > target) return v;
    }
    return last;
}

int ds_spec_accept_sampled(const float *p, const float *q, int V, const int32_t *drafts, int K, ds_uniform_fn uniform,
                           void *ctx, int32_t *bonus) {
    for (int j = 0; j < K; j++) {
        const float *pj = p + (size_t)j * V, *qj = q + (size_t)j * V;
        const int32_t d = drafts[j];
        double ratio = qj[d] > 0 ? (double)pj[d] / (double)qj[d] : 0.0;
        if (uniform(ctx, j) < ratio) continue;          /* accepted with probability min(1, p/q) */
        int32_t t = draw(pj, qj, V, uniform(ctx, K + j));
        /* p == q exactly leaves no residual mass; then the rejection had probability 0 */
        *bonus = t >= 0 ? t : draw(pj, NULL, V, uniform(ctx, K + j));
        return j;
    }
    *bonus = draw(p + (size_t)K * V, NULL, V, uniform(ctx, 2 * K));
    return K;
}

/* ds_spec_accept_greedy on the rows' greedy ids (-1 for a row that is not finite: bonus -1). */
static int accept_ids(const int32_t *ids, const int32_t *drafts, int K, int32_t *bonus) {
    int acc = 0;
    while (acc < K && ids[acc] >= 0 && drafts[acc] == ids[acc]) acc++;
    *bonus = ids[acc];
    return acc;
}

int ds_spec_prefill(ds_model *m, ds_seq *s, const int32_t *tokens, int n, int chunk, float *last_logits, ds_error *err) {
    const int W = ds_draft_aux_width(m);
    if (!W) return ds_fail(err, "E_INVALID_ARG", "speculative prefill: the model has no draft loaded");
    if (chunk <= 0) chunk = n;
    ds_bf16 *aux = ds_amalloc(sizeof(ds_bf16) * (size_t)chunk * W);
    char eb[512];
    int rc = 0;
    for (int p = 0; p < n && !rc; p += chunk) {
        int k = n - p < chunk ? n - p : chunk;
        int last = p + k == n;
        float *const lg[1] = {last ? last_logits : NULL};
        const int32_t *const tk[1] = {tokens + p};
        int nr[1] = {k}, nl[1] = {last && last_logits ? 1 : 0};
        ds_bf16 *const ax[1] = {aux};
        int64_t p0 = s->len;
        if (ds_batch_step_aux(m, 1, &s, tk, nr, lg, nl, ax, eb, sizeof eb) < 0) rc = ds_fail(err, "E_STEP", "%s", eb);
        else rc = ds_draft_commit(m, s, aux, p0, k, err);
    }
    ds_afree(aux);
    return rc;
}

int ds_spec_commit(ds_model *m, ds_seq *s, int64_t p0, int acc, const ds_bf16 *aux, ds_error *err) {
    if (ds_seq_truncate(s, p0 + acc + 1) < 0)
        return ds_fail(err, "E_ROLLBACK", "speculative rollback to %lld failed", (long long)(p0 + acc + 1));
    return ds_draft_commit(m, s, aux, p0, acc + 1, err);
}

int ds_spec_greedy_step(ds_model *m, ds_seq *s, int32_t anchor, int K, const uint8_t *masked, int32_t *out,
                        const ds_spec_trace *tr, ds_error *err) {
    static const ds_spec_trace none;
    if (!tr) tr = &none;
    float *logits_out = tr->verify_logits;
    const ds_draft *d = m->draft;
    const int V = m->cfg.vocab_size, W = ds_draft_aux_width(m);
    if (!d) return ds_fail(err, "E_INVALID_ARG", "speculative step: the model has no draft loaded");
    if (K < 0 || K > d->block) return ds_fail(err, "E_INVALID_ARG", "speculative step: expected K in 0..%d, found %d", d->block, K);
    int32_t rows[DS_DRAFT_MAX_BLOCK + 1], drafts[DS_DRAFT_MAX_BLOCK];
    rows[0] = anchor;
    if (K > 0) {
        if (ds_draft_propose(m, s, anchor, NULL, NULL, drafts, tr->draft_logits, tr->conf, err) < 0) return -1;
        memcpy(rows + 1, drafts, sizeof(int32_t) * (size_t)K);
        if (tr->drafts) memcpy(tr->drafts, drafts, sizeof(int32_t) * (size_t)d->block);
    }
    /* without a trace of the verify logits the model returns the rows' greedy ids (head_screen.h) */
    float *lg = logits_out;
    int32_t ids[DS_DRAFT_MAX_BLOCK + 1];
    ds_bf16 *aux = ds_amalloc(sizeof(ds_bf16) * (size_t)(K + 1) * W);
    const int64_t p0 = s->len;
    float *const lgs[1] = {lg};
    int32_t *const gi[1] = {ids};
    const int32_t *const tk[1] = {rows};
    int nr[1] = {K + 1}, nl[1] = {K + 1};
    ds_bf16 *const ax[1] = {aux};
    char eb[512];
    int acc = -1;
    if (ds_batch_step_greedy(m, 1, &s, tk, nr, lgs, nl, ax, lg ? NULL : gi, masked, eb, sizeof eb) < 0) {
        ds_fail(err, "E_STEP", "%s", eb);
    } else {
        int32_t bonus;
        acc = lg ? ds_spec_accept_greedy(lg, V, masked, drafts, K, &bonus) : accept_ids(ids, drafts, K, &bonus);
        if (bonus < 0) acc = -1, ds_fail(err, "E_NUMERIC", "speculative step: the verify logits are not finite");
        else if (ds_spec_commit(m, s, p0, acc, aux, err) < 0) acc = -1;
        else {
            memcpy(out, drafts, sizeof(int32_t) * (size_t)acc);
            out[acc] = bonus;
        }
    }
    ds_afree(aux);
    return acc;
}
