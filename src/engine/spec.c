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

/* ---- what speculation costs on this host ---- */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The prompt of the measurement: ids spread over the vocabulary (no tokenizer needed; the costs of
 * a step do not depend on what the ids say, only on how many rows and experts it touches). */
static void cost_prompt(const ds_model *m, int32_t *ids, int n) {
    const uint32_t V = (uint32_t)m->cfg.vocab_size;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(16u + (uint32_t)(i * 2654435761u) % (V / 2u));
}

int ds_spec_measure_cost(ds_model *m, int K, int reps, ds_spec_cost *out, ds_error *err) {
    enum { PROMPT = 32, MAX_REPS = 16 };
    memset(out, 0, sizeof *out);
    if (!m->draft) return ds_fail(err, "E_INVALID_ARG", "speculation cost: the model has no draft loaded");
    if (K < 1 || K > m->draft->block) return ds_fail(err, "E_INVALID_ARG", "speculation cost: expected K in 1..%d, found %d", m->draft->block, K);
    reps = DS_MAX(1, DS_MIN(MAX_REPS, reps));
    const int V = m->cfg.vocab_size;
    uint8_t *masked = ds_xcalloc((size_t)V, 1);
    masked[m->cfg.dspark_noise_id] = 1;
    float *lg = ds_amalloc(sizeof(float) * (size_t)V);
    int32_t prompt[PROMPT];
    cost_prompt(m, prompt, PROMPT);
    ds_seq *plain = ds_seq_new(m), *spec = ds_seq_new(m);
    double tp[MAX_REPS + 1], ts[MAX_REPS + 1];
    char eb[512];
    int rc = plain && spec ? 0 : ds_fail(err, "E_SEQ", "speculation cost: cannot create a sequence");
    int32_t next_plain = 0, anchor = 0, outs[DS_DRAFT_MAX_BLOCK + 1];
    if (!rc && ds_seq_step_greedy(m, plain, prompt, PROMPT, &next_plain, 1, masked, eb, sizeof eb) < 0)
        rc = ds_fail(err, "E_STEP", "speculation cost: %s", eb);
    if (!rc && ds_spec_prefill(m, spec, prompt, PROMPT, 0, lg, err) < 0) rc = -1;
    if (!rc) ds_spec_accept_greedy(lg, V, masked, NULL, 0, &anchor);
    /* a first step of each kind warms caches and pages, then plain and speculative steps alternate
     * so that a change of the host's speed during the measurement meets both alike */
    for (int i = 0; i <= reps && !rc; i++) {
        const int32_t tok = next_plain >= 0 ? next_plain : prompt[i % PROMPT];   /* -1: a non-finite row; any id goes on */
        double t0 = ds_now();
        if (ds_seq_step_greedy(m, plain, &tok, 1, &next_plain, 1, masked, eb, sizeof eb) < 0)
            rc = ds_fail(err, "E_STEP", "speculation cost: %s", eb);
        double t1 = ds_now();
        int acc = rc ? -1 : ds_spec_greedy_step(m, spec, anchor, K, masked, outs, NULL, err);
        if (acc < 0) rc = -1;
        else anchor = outs[acc];
        tp[i] = t1 - t0;
        ts[i] = ds_now() - t1;
    }
    ds_seq_free(plain);
    ds_seq_free(spec);
    ds_afree(lg);
    free(masked);
    if (rc) return -1;
    qsort(tp + 1, (size_t)reps, sizeof(double), cmp_double);
    qsort(ts + 1, (size_t)reps, sizeof(double), cmp_double);
    out->reps = reps;
    out->plain_s = tp[1 + reps / 2];
    out->spec_s = ts[1 + reps / 2];
    out->break_even = out->spec_s / out->plain_s;
    return 0;
}

double ds_spec_min_accept(const ds_spec_cost *c, int K) {
    if (!(c->break_even > 0.0) || c->break_even >= (double)(K + 1)) return 0.0;
    return DS_MAX(1.5, c->break_even);
}
