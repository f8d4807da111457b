/* Speculative decoding inside the engine (SERVING.md §8): how many drafts each request verifies,
 * the accept/commit of a verify row set, the draft passes after a step, the acceptance-collapse
 * guard, the §8.4 metrics and the 10-second log line.
 *
 * Why it sits beside engine.c rather than inside it: the scheduler only needs to know that a
 * decode row may carry K drafts (K+1 rows, K+1 logits rows) and that such an item is finished here;
 * everything else — distributions, draws, guard state — is speculation's own business.
 *
 * Lossless by construction.  Greedy requests (temperature 0 or top_k 1): each verify row is
 * sampled with ds_sample_row exactly as a plain decode step would sample that row (same logits
 * bits, MODEL.md §6.4; same history, the accepted drafts included; same output index), and a draft
 * is accepted while it equals that choice, so token ids and logprobs equal the non-speculative
 * run.  Sampled requests: the draft proposes from q (its Markov-corrected logits through the same
 * mask, bias, penalties, temperature and filters, ds_sample_probs) and the verify rows accept with
 * min(1, p/q), replacing the first rejection from normalize(max(0, p − q)) and drawing the bonus
 * from p (§8.3); draws come from the request's counter-based generator keyed by (seed, output
 * index, a tag), so they never depend on the batch.
 *
 * The drafts of a request are valid while drafts_at == n_tokens (a preemption or any other change
 * of the token array invalidates them; the next step then runs a plain row and drafts again). */
#include "engine/engine_internal.h"
#include "engine/spec.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_REQ_STEPS 16
#define GUARD_REQ_OFF_STEPS 64
#define GUARD_GLOBAL_STEPS 256

static bool greedy_req(const ds_req *r) { return r->sp.temperature == 0.0 || r->sp.top_k == 1; }

/* Uniform in (0, 1) from the request's counter-based generator; tags keep the uses apart. */
static double uniform(const ds_req *r, int64_t index, int tag) {
    return exp(-ds_sampler_exp_draw(r->seed, index, -1 - tag));
}

void ds_spec_engine_init(ds_engine *e) {
    e->spec_on = e->cfg.spec_tokens > 0 && e->be->propose && e->be->spec_block > 0;
    e->be->spec_active = e->spec_on;
    atomic_store(&e->g_spec_enabled, e->spec_on ? 1 : 0);
    if (e->spec_on) e->spec_p = ds_xmalloc(sizeof(float) * (size_t)(e->be->spec_block + 1) * (size_t)e->be->vocab);
    e->spec_last_log = e->spec_last_warn = ds_now();
}

void ds_spec_engine_free(ds_engine *e) { free(e->spec_p); }

int ds_spec_schedule_parse(ds_engine_config *cfg, const char *text, ds_error *err) {
    cfg->n_spec_sched = 0;
    const char *p = text;
    while (*p) {
        int lo, hi, k, used = 0;
        if (sscanf(p, "%d-%d:%d%n", &lo, &hi, &k, &used) != 3 || lo < 1 || hi < lo || k < 0)
            return ds_fail(err, "E_CONFIG", "--spec-tokens-per-batch-size \"%s\": expected \"lo-hi:K,...\" with 1 <= lo <= hi, "
                           "K >= 0, found \"%.32s\"", text, p);
        if (k > cfg->spec_tokens)
            return ds_fail(err, "E_CONFIG", "--spec-tokens-per-batch-size: range %d-%d: expected K <= --num-speculative-tokens %d, "
                           "found %d", lo, hi, cfg->spec_tokens, k);
        if (cfg->n_spec_sched == (int)DS_ARRAY_LEN(cfg->spec_sched))
            return ds_fail(err, "E_CONFIG", "--spec-tokens-per-batch-size: expected at most %d ranges", (int)DS_ARRAY_LEN(cfg->spec_sched));
        for (int i = 0; i < cfg->n_spec_sched; i++)
            if (lo <= cfg->spec_sched[i].hi && cfg->spec_sched[i].lo <= hi)
                return ds_fail(err, "E_CONFIG", "--spec-tokens-per-batch-size: range %d-%d overlaps %d-%d", lo, hi,
                               cfg->spec_sched[i].lo, cfg->spec_sched[i].hi);
        cfg->spec_sched[cfg->n_spec_sched].lo = lo;
        cfg->spec_sched[cfg->n_spec_sched].hi = hi;
        cfg->spec_sched[cfg->n_spec_sched++].k = k;
        p += used;
        if (*p == ',') p++;
        else if (*p) return ds_fail(err, "E_CONFIG", "--spec-tokens-per-batch-size \"%s\": unexpected \"%.16s\"", text, p);
    }
    for (int b = 1; b <= cfg->max_num_seqs; b++) {
        bool covered = false;
        for (int i = 0; i < cfg->n_spec_sched && !covered; i++) covered = b >= cfg->spec_sched[i].lo && b <= cfg->spec_sched[i].hi;
        if (!covered)
            return ds_fail(err, "E_CONFIG", "--spec-tokens-per-batch-size: expected ranges covering 1..%d (--max-num-seqs), "
                           "found %d uncovered", cfg->max_num_seqs, b);
    }
    return 0;
}

int ds_spec_k_for(ds_engine *e, ds_req *r, int n_decoding) {
    if (!e->spec_on || r->n_drafts <= 0 || r->drafts_at != r->n_tokens) return 0;
    if (r->sp.prompt_logprobs >= 0 && r->n_plp_done < r->n_prompt) return 0;
    int k = e->cfg.spec_tokens;
    for (int i = 0; i < e->cfg.n_spec_sched; i++)
        if (n_decoding >= e->cfg.spec_sched[i].lo && n_decoding <= e->cfg.spec_sched[i].hi) k = e->cfg.spec_sched[i].k;
    int64_t left = r->sp.max_tokens - (r->n_tokens - r->n_prompt) - 1;   /* the bonus needs room too */
    if (left < k) k = (int)(left > 0 ? left : 0);
    if (r->n_tokens + k >= e->cfg.max_model_len) k = (int)DS_MAX(0, e->cfg.max_model_len - r->n_tokens - 1);
    if (k > r->n_drafts) k = r->n_drafts;
    return k;
}

/* ------------------------------------------------------------------ drafting */

typedef struct pick_ctx {
    ds_engine *e;
    ds_req *r;
} pick_ctx;

static int32_t sample_q(ds_engine *e, ds_req *r, int i, const float *logits);

/* Draft row i: greedy requests take the masked argmax; sampled ones draw from q_i (recorded). */
static int32_t pick(void *vctx, int i, float *logits) {
    pick_ctx *c = vctx;
    ds_engine *e = c->e;
    ds_req *r = c->r;
    const int V = e->be->vocab;
    int32_t t = 0;
    if (greedy_req(r)) {
        t = ds_draft_argmax(logits, V, e->mask ? e->mask->masked : NULL, -1);
    } else {
        t = sample_q(e, r, i, logits);
    }
    r->tokens[r->n_tokens + i] = t;   /* the next row's history (penalties) sees it */
    return t;
}

static int32_t sample_q(ds_engine *e, ds_req *r, int i, const float *logits) {
    const int V = e->be->vocab;
    float *q = r->spec_q + (size_t)i * V;
    ds_sample_history h = {r->tokens, r->n_prompt, r->tokens + r->n_prompt, r->n_tokens - r->n_prompt + i};
    if (ds_sample_probs(logits, V, e->mask, &r->sp, &h, e->ss, q) < 0) {
        memset(q, 0, sizeof(float) * (size_t)V);
        q[0] = 1.0f;   /* a broken draft row proposes id 0 with q = 1: the target rejects it unless p agrees */
        return 0;
    }
    double u = uniform(r, r->n_tokens - r->n_prompt + i, 300 + i), run = 0;
    int32_t last = 0;
    for (int v = 0; v < V; v++) {
        if (q[v] <= 0) continue;
        last = v;
        run += q[v];
        if (run > u) return v;
    }
    return last;
}

/* Get r ready for a draft pass: room beyond n_tokens for the proposals, and q rows when it samples. */
static bool propose_prepare(ds_engine *e, ds_req *r) {
    const int B = e->be->spec_block, V = e->be->vocab;
    r->n_drafts = 0;
    if (r->spec_off > 0 || !r->seq) return false;
    if (!greedy_req(r) && !r->spec_q) r->spec_q = ds_xmalloc(sizeof(float) * (size_t)B * V);
    if (r->n_tokens + B > r->cap_tokens) {
        while (r->n_tokens + B > r->cap_tokens) r->cap_tokens *= 2;
        r->tokens = ds_xrealloc(r->tokens, sizeof(int32_t) * (size_t)r->cap_tokens);
    }
    return true;
}

/* One batched draft pass for the n requests: proposals for the positions after each one's last
 * token (written into r->tokens beyond n_tokens, where the verify row reads them; the pick's
 * history reads drafts 0..i-1 there too, so they are stored as chosen). */
static void propose_batch(ds_engine *e, ds_req *const *reqs, int n) {
    enum { MAXN = 32 };
    const int B = e->be->spec_block;
    void *seqs[MAXN] = {0}, *ctxp[MAXN] = {0};
    pick_ctx ctx[MAXN];
    int32_t anchors[MAXN] = {0}, d[MAXN * 8];
    bool ok[MAXN] = {0};
    if (n <= 0 || n > MAXN) return;
    for (int i = 0; i < n; i++) {
        ctx[i] = (pick_ctx){e, reqs[i]};
        ctxp[i] = greedy_req(reqs[i]) ? NULL : &ctx[i];   /* greedy: the draft's own masked argmax */
        seqs[i] = reqs[i]->seq;
        anchors[i] = reqs[i]->tokens[reqs[i]->n_tokens - 1];
    }
    ds_error err = {{0}, {0}};
    if (e->be->propose(e->be->impl, n, seqs, anchors, pick, ctxp, e->mask ? e->mask->masked : NULL, d, ok, &err) < 0)
        ds_log(DS_LOG_DEBUG, "no drafts this step: %s", err.msg);
    for (int i = 0; i < n; i++) {
        ds_req *r = reqs[i];
        if (!ok[i]) continue;
        memcpy(r->drafts, d + (size_t)i * B, sizeof(int32_t) * (size_t)B);
        memcpy(r->tokens + r->n_tokens, d + (size_t)i * B, sizeof(int32_t) * (size_t)B);
        r->n_drafts = B;
        r->drafts_at = r->n_tokens;
    }
}

/* ------------------------------------------------------------------ guard and metrics */

/* The threshold the per-request guard judges against: the configured one, 1.5 when unset. */
static double guard_threshold(const ds_engine_config *cfg) { return cfg->spec_min_accept > 1.0 ? cfg->spec_min_accept : 1.5; }

int ds_spec_guard_request(const ds_engine_config *cfg, ds_req *r, int acc) {
    if (r->spec_hist_n < GUARD_REQ_STEPS) r->spec_hist[r->spec_hist_n++] = (uint8_t)acc;
    else {
        memmove(r->spec_hist, r->spec_hist + 1, GUARD_REQ_STEPS - 1);
        r->spec_hist[GUARD_REQ_STEPS - 1] = (uint8_t)acc;
    }
    if (cfg->spec_guard == DS_SPEC_GUARD_OFF || r->spec_hist_n < GUARD_REQ_STEPS) return 0;
    int sum = 0;
    for (int i = 0; i < GUARD_REQ_STEPS; i++) sum += r->spec_hist[i];
    /* A = 1 + mean accepted; below the threshold (1.5, or the measured break-even) drafting costs
     * more than it saves.  The sum is an integer, so 1.5 keeps the spec's "2·sum < 16" exactly. */
    if ((double)sum >= (guard_threshold(cfg) - 1.0) * GUARD_REQ_STEPS) {
        r->spec_pauses = 0;
        return 0;
    }
    /* with back-off, a request whose text keeps defeating the draft retries less and less often
     * (64, 128, ... 1024 steps): each retry costs 16 verify steps below the break-even */
    r->spec_off = GUARD_REQ_OFF_STEPS << (cfg->spec_backoff ? DS_MIN(r->spec_pauses, 4) : 0);
    r->spec_pauses++;
    r->spec_hist_n = 0;
    return r->spec_off;
}

static void guard_request(ds_engine *e, ds_req *r, int acc) {
    if (!ds_spec_guard_request(&e->cfg, r, acc)) return;
    if (!r->exclude_metrics) atomic_fetch_add(&e->m->spec_guard_request, 1);
    ds_log(DS_LOG_DEBUG, "request %s: acceptance below %.2f over %d verify steps; drafting off for %d steps", r->id,
           guard_threshold(&e->cfg), GUARD_REQ_STEPS, r->spec_off);
}

static void guard_global(ds_engine *e, int acc) {
    e->spec_ring[e->spec_ring_i] = (uint8_t)acc;
    e->spec_ring_i = (e->spec_ring_i + 1) % GUARD_GLOBAL_STEPS;
    if (e->spec_ring_n < GUARD_GLOBAL_STEPS) e->spec_ring_n++;
    if (e->cfg.spec_guard == DS_SPEC_GUARD_OFF || e->spec_ring_n < GUARD_GLOBAL_STEPS) return;
    int sum = 0;
    for (int i = 0; i < GUARD_GLOBAL_STEPS; i++) sum += e->spec_ring[i];
    double A = 1.0 + (double)sum / GUARD_GLOBAL_STEPS, now = ds_now();
    if (sum == 0) {
        /* a random-weight draft (declared by the checkpoint) is expected to collapse: warn only */
        if (e->cfg.spec_guard == DS_SPEC_GUARD_ON && e->be->spec_trained) {
            ds_log(DS_LOG_ERROR, "draft acceptance is zero: suspect draft misconfiguration (vocabulary rotation, missing "
                                 "attention); speculative decoding disabled until restart");
            e->spec_on = false;
            atomic_store(&e->g_spec_enabled, 0);
            atomic_fetch_add(&e->m->spec_guard_global, 1);
            return;
        }
    }
    if (A < 1.2 && now - e->spec_last_warn >= 60.0) {
        e->spec_last_warn = now;
        ds_log(DS_LOG_WARN, "speculative decoding: mean acceptance length %.2f over the last %d verify steps (below 1.2)", A,
               GUARD_GLOBAL_STEPS);
    }
}

static void log_line(ds_engine *e) {
    double now = ds_now(), dt = now - e->spec_last_log;
    if (dt < 10.0) return;
    uint64_t cur[3 + DS_SPEC_MAX_POS] = {atomic_load(&e->m->spec_drafts), atomic_load(&e->m->spec_draft_tokens),
                                          atomic_load(&e->m->spec_accepted)};
    for (int i = 0; i < DS_SPEC_MAX_POS; i++) cur[3 + i] = atomic_load(&e->m->spec_accepted_pos[i]);
    uint64_t drafts = cur[0] - e->spec_log_base[0];
    if (drafts && cur[0] >= e->spec_log_base[0]) {
        char pos[160] = "";
        size_t n = 0;
        for (int i = 0; i < e->be->spec_block && i < DS_SPEC_MAX_POS; i++)
            n += (size_t)snprintf(pos + n, sizeof pos - n, "%s%.3f", i ? ", " : "",
                                  (double)(cur[3 + i] - e->spec_log_base[3 + i]) / (double)drafts);
        uint64_t acc = cur[2] - e->spec_log_base[2], tok = cur[1] - e->spec_log_base[1];
        ds_log(DS_LOG_INFO, "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
                            "Drafted throughput: %.2f tokens/s, Per-position acceptance rate: %s",
               1.0 + (double)acc / (double)drafts, (double)acc / dt, (double)tok / dt, pos);
    }
    memcpy(e->spec_log_base, cur, sizeof cur);
    e->spec_last_log = now;
}

static void record(ds_engine *e, ds_req *r, int K, int acc) {
    if (!r->exclude_metrics) {
        atomic_fetch_add(&e->m->spec_drafts, 1);
        atomic_fetch_add(&e->m->spec_draft_tokens, (uint64_t)K);
        atomic_fetch_add(&e->m->spec_accepted, (uint64_t)acc);
        for (int i = 0; i < acc && i < DS_SPEC_MAX_POS; i++) atomic_fetch_add(&e->m->spec_accepted_pos[i], 1);
    }
    guard_request(e, r, acc);
    guard_global(e, acc);
}

/* ------------------------------------------------------------------ accept and commit */

/* Greedy: row j sampled exactly as plain decoding samples it; accept while it equals d_j. */
static int accept_greedy(ds_engine *e, ds_req *r, const float *rows, const int32_t *ids, int K, ds_sample_result *out,
                         int *n_out) {
    const int V = e->be->vocab;
    const int64_t gen0 = r->n_tokens - r->n_prompt;
    for (int j = 0; j <= K; j++) {
        ds_sample_history h = {r->tokens, r->n_prompt, r->tokens + r->n_prompt, gen0 + j};
        if (ids ? ds_sample_greedy_id(ids[j], &out[j]) < 0
                : ds_sample_row(rows + (size_t)j * V, V, e->mask, &r->sp, r->seed, gen0 + j, &h, e->ss, &out[j]) < 0)
            return -1;
        *n_out = j + 1;
        if (j == K || out[j].token != r->drafts[j]) return j;
    }
    return K;
}

typedef struct uni_ctx {
    const ds_req *r;
    int64_t gen0;
    int K;
} uni_ctx;

/* Draw j of ds_spec_accept_sampled: accept tests 0..K-1, replacement K+j, bonus 2K. */
static double draw_uniform(void *vctx, int j) {
    const uni_ctx *c = vctx;
    if (j < c->K) return uniform(c->r, c->gen0 + j, 100 + j);
    return uniform(c->r, c->gen0 + (j - c->K), 200 + (j - c->K));
}

/* Sampled: §8.3 on p (target, ds_sample_probs of each row) and the recorded q. */
static int accept_sampled(ds_engine *e, ds_req *r, const float *rows, int K, ds_sample_result *out, int *n_out) {
    const int V = e->be->vocab;
    const int64_t gen0 = r->n_tokens - r->n_prompt;
    float *p = e->spec_p;
    for (int j = 0; j <= K; j++) {
        ds_sample_history h = {r->tokens, r->n_prompt, r->tokens + r->n_prompt, gen0 + j};
        if (ds_sample_probs(rows + (size_t)j * V, V, e->mask, &r->sp, &h, e->ss, p + (size_t)j * V) < 0) return -1;
    }
    uni_ctx uc = {r, gen0, K};
    int32_t bonus;
    int acc = ds_spec_accept_sampled(p, r->spec_q, V, r->drafts, K, draw_uniform, &uc, &bonus);
    const int n_top = r->sp.logprobs > 0 ? DS_MIN(r->sp.logprobs, DS_MAX_TOP_LOGPROBS) : 0;
    for (int j = 0; j <= acc; j++) {
        int32_t tok = j < acc ? r->drafts[j] : bonus;
        if (ds_row_logprobs(rows + (size_t)j * V, V, e->mask, tok, n_top, e->ss, &out[j]) < 0) return -1;
    }
    *n_out = acc + 1;
    return acc;
}

void ds_spec_finish_item(ds_engine *e, int k, const float *rows) {
    ds_backend_item *it = &e->items[k];
    ds_req *r = e->item_req[k];
    const int K = r->spec_k;
    ds_sample_result res[9];
    int n_out = 0;
    int acc = greedy_req(r) ? accept_greedy(e, r, rows, it->greedy, K, res, &n_out) : accept_sampled(e, r, rows, K, res, &n_out);
    r->spec_k = 0;
    r->n_drafts = 0;
    if (acc < 0) {
        e->be->after_step(e->be->impl, &e->km, r->seq, &r->tab, r->tokens, it->pos0 + 1, r->cache_salt);
        r->n_computed = it->pos0 + 1;
        ds_engine_fail_numeric(e, r);
        return;
    }
    /* roll back past the rejected rows, move the draft context to the committed length */
    const int64_t L = it->pos0 + acc + 1;
    e->be->after_step(e->be->impl, &e->km, r->seq, &r->tab, r->tokens, L, r->cache_salt);
    r->n_computed = L;
    record(e, r, K, acc);
    ds_req_ref(r);   /* a commit may finish (and release) the request */
    for (int j = 0; j < n_out && r->state != DS_REQ_DONE; j++) ds_engine_commit_token(e, r, &res[j]);
    ds_req_unref(r);
}

void ds_spec_after_step(ds_engine *e) {
    if (!e->spec_on) return;
    enum { MAXN = 32 };
    ds_req *batch[MAXN];
    int n = 0;
    for (int i = 0; i < e->n_running; i++) {
        ds_req *r = e->running[i];
        if (r->state != DS_REQ_DECODE || r->n_computed != r->n_tokens - 1) continue;
        if (r->n_drafts > 0 && r->drafts_at == r->n_tokens) continue;
        if (r->spec_off > 0) {   /* plain rows count down the per-request pause too */
            if (r->drafts_at != r->n_tokens) r->spec_off--, r->drafts_at = r->n_tokens;
            continue;
        }
        if (!propose_prepare(e, r)) continue;
        batch[n++] = r;
        if (n == MAXN) {
            propose_batch(e, batch, n);
            n = 0;
        }
    }
    if (n) propose_batch(e, batch, n);
    log_line(e);
}
