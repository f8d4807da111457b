/* The engine thread: queues, the step builder with the admission gate, preemption, sampling and
 * emission (see engine.h for the threading design).
 *
 * One step = drain the inbox and cancellations, decide the step kind (§6), build the rows
 * (reserving KV pages first, so the forward pass never runs out of pages), run one batched
 * forward, then sample, check stop conditions and publish results.  Requests hold their pages
 * until the step in which they finish; preempted requests go back to the front of the queue with
 * their generated tokens and are prefilled again later (prefix hits allowed). */
#define _GNU_SOURCE
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "base/threadpool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ds_engine_config_defaults(ds_engine_config *c) {
    memset(c, 0, sizeof *c);
    c->max_num_seqs = 32;
    c->max_num_batched_tokens = 8192;
    c->block_size = 128;
    c->prefix_caching = true;
    c->admission_gate = true;
    c->max_prefill_seqs = 1;
    c->gate_decode_steps_per_chunk = 1;
    c->max_model_len = 1048576;
    c->max_pending = 1024;
    c->kv_budget_bytes = 1ull << 30;
    c->prompt_logprobs_chunk = 256;
}

/* Publish under the request lock and wake its reader. */
static void publish_locked_end(ds_req *r) {
    r->version++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------------ queues */

static void vec_push(ds_req ***v, int *n, int *cap, ds_req *r) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *v = ds_xrealloc(*v, sizeof(ds_req *) * (size_t)*cap);
    }
    (*v)[(*n)++] = r;
}

static void vec_remove_at(ds_req **v, int *n, int i) {
    memmove(v + i, v + i + 1, sizeof(ds_req *) * (size_t)(*n - i - 1));
    (*n)--;
}

static void waiting_push_front(ds_engine *e, ds_req *r) {
    vec_push(&e->waiting, &e->n_waiting, &e->cap_waiting, r);
    memmove(e->waiting + 1, e->waiting, sizeof(ds_req *) * (size_t)(e->n_waiting - 1));
    e->waiting[0] = r;
}

static int index_of(ds_req **v, int n, ds_req *r) {
    for (int i = 0; i < n; i++)
        if (v[i] == r) return i;
    return -1;
}

/* ------------------------------------------------------------------ finishing */

static void release_kv(ds_engine *e, ds_req *r) {
    if (r->seq) e->be->release(e->be->impl, &e->km, r->seq, &r->tab);
    else ds_kvm_release(&e->km, &r->tab); /* prefix references taken before the sequence opened */
    r->seq = NULL;
}

static void close_detok(ds_engine *e, ds_req *r) {
    if (r->detok) e->detok.close(r->detok);
    r->detok = NULL;
    ds_stop_free(&r->stopm);
}

/* Terminal transition: the request leaves every queue, its pages are released, the reader is
 * told, and the engine drops its reference. */
static void finish_req(ds_engine *e, ds_req *r, ds_req_end end, int status, const char *code, const char *msg) {
    int i;
    if ((i = index_of(e->running, e->n_running, r)) >= 0) vec_remove_at(e->running, &e->n_running, i);
    if ((i = index_of(e->waiting, e->n_waiting, r)) >= 0) vec_remove_at(e->waiting, &e->n_waiting, i);
    release_kv(e, r);
    ds_tbuf tail = {0};
    if (end == DS_END_STOP || end == DS_END_LENGTH) {
        /* flush text held back by the detokenizer and the stop matcher (no match happened) */
        if (r->detok && !r->stopm.stopped) {
            size_t len = 0;
            const char *t = e->detok.flush(r->detok, &len);
            ds_stop_push(&r->stopm, t, len, &tail);
            if (!r->stopm.stopped) ds_stop_flush(&r->stopm, &tail);
        }
    }
    close_detok(e, r);
    r->state = DS_REQ_DONE;
    double now = ds_now();
    pthread_mutex_lock(&r->mu);
    if (tail.n) ds_tbuf_append(&r->text, tail.s, tail.n);
    r->finished = true;
    r->end = end;
    r->err_status = status;
    if (code) snprintf(r->err_code, sizeof r->err_code, "%s", code);
    if (msg) snprintf(r->err_msg, sizeof r->err_msg, "%s", msg);
    r->t_finish = now;
    publish_locked_end(r);
    ds_tbuf_free(&tail);
    if (!r->exclude_metrics) {
        if (end == DS_END_STOP) atomic_fetch_add(&e->m->success[DS_FINISH_STOP], 1);
        if (end == DS_END_LENGTH) atomic_fetch_add(&e->m->success[DS_FINISH_LENGTH], 1);
        if (end == DS_END_CANCELLED) atomic_fetch_add(&e->m->cancelled, 1);
        if (end == DS_END_STOP || end == DS_END_LENGTH) ds_hist_observe(e->m, &e->m->e2e, now - r->t_arrival);
    }
    if (end == DS_END_CANCELLED)
        ds_log(DS_LOG_INFO, "request %s cancelled: %s after %lld tokens", r->id,
               atomic_load(&r->cancel_shutdown) ? "shutdown drain deadline" : "client disconnected",
               (long long)(r->n_tokens - r->n_prompt));
    atomic_fetch_sub(&e->n_live, 1);
    ds_req_unref(r);
}

static void preempt(ds_engine *e, ds_req *r) {
    int i = index_of(e->running, e->n_running, r);
    if (i >= 0) vec_remove_at(e->running, &e->n_running, i);
    release_kv(e, r);
    r->n_computed = 0;
    r->in_step = false;
    r->spec_k = r->n_drafts = 0;
    r->state = DS_REQ_WAITING;
    waiting_push_front(e, r);
    if (!r->exclude_metrics) atomic_fetch_add(&e->m->preemptions, 1);
    if (!e->warned_preempt) {
        e->warned_preempt = true;
        ds_log(DS_LOG_WARN, "request %s preempted for KV space (recompute); consider a larger KV budget "
                            "(--kv-cache-memory) or a smaller --max-num-seqs", r->id);
    }
}

static ds_req *latest_admitted(ds_engine *e) {
    ds_req *v = NULL;
    for (int i = 0; i < e->n_running; i++)
        if (!v || e->running[i]->admit_order > v->admit_order) v = e->running[i];
    return v;
}

/* ------------------------------------------------------------------ step building */

/* Room for `need` pages after what this step already promised (lazy backends take their pages
 * only inside the forward pass). */
static bool kv_fits(ds_engine *e, const uint64_t need[DS_KV_KINDS], uint64_t ckv_watermark) {
    static const ds_kv_kind k[] = {DS_KV_CKV, DS_KV_WIN, DS_KV_STATE, DS_KV_DRAFT};
    for (size_t i = 0; i < DS_ARRAY_LEN(k); i++) {
        uint64_t avail = ds_kvm_available(&e->km, k[i]), want = need[k[i]] + e->promised[k[i]];
        if (k[i] == DS_KV_CKV) want += ckv_watermark;
        if (avail < want) return false;
    }
    return true;
}

/* Check room for [a, b) and take it (or promise it, for lazy backends). */
static bool reserve_pages(ds_engine *e, ds_req *r, int64_t a, int64_t b, uint64_t watermark) {
    uint64_t need[DS_KV_KINDS];
    e->be->pages_needed(e->be->impl, &e->km, r->seq, &r->tab, a, b, need);
    if (!kv_fits(e, need, watermark)) return false;
    if (e->be->prepare(e->be->impl, &e->km, r->seq, &r->tab, a, b)) return false;
    if (e->be->lazy_pages)
        for (int k = 0; k < DS_KV_KINDS; k++) e->promised[k] += need[k];
    return true;
}

/* End of the next prefill chunk for r within `tokens_left`; returns <= a when nothing fits.
 * Non-final chunks end on a block boundary (§5), which also bounds the WIN pages a chunk needs;
 * the final one may stop at the last full block so that block's window tail is kept for the
 * prefix cache (ds_kvm_prefill_end). */
static int64_t plan_chunk(ds_engine *e, ds_req *r, int64_t tokens_left) {
    int64_t a = r->n_computed, cap = tokens_left;
    if (r->sp.prompt_logprobs >= 0 && r->n_plp_done < r->n_prompt)
        cap = DS_MIN(cap, (int64_t)e->cfg.prompt_logprobs_chunk);
    if (r->n_tokens - a <= cap) return ds_kvm_prefill_end(&e->km, a, r->n_tokens);
    int64_t bs = e->cfg.block_size;
    return ((a + cap) / bs) * bs;
}

static int n_logits_for(ds_req *r, int64_t a, int64_t end) {
    if (r->sp.prompt_logprobs >= 0 && r->n_plp_done < r->n_prompt) return (int)(end - a);
    return end == r->n_tokens ? 1 : 0;
}

static void add_item(ds_engine *e, ds_req *r, int64_t a, int64_t end) {
    if (e->n_items == e->cap_items) {
        e->cap_items = e->cap_items ? e->cap_items * 2 : 64;
        e->items = ds_xrealloc(e->items, sizeof *e->items * (size_t)e->cap_items);
        e->item_req = ds_xrealloc(e->item_req, sizeof *e->item_req * (size_t)e->cap_items);
    }
    ds_backend_item *it = &e->items[e->n_items];
    it->seq = r->seq;
    it->tab = &r->tab;
    it->tokens = r->tokens;
    it->pos0 = a;
    it->n = (int)(end - a);
    it->n_logits = n_logits_for(r, a, end);
    e->item_req[e->n_items++] = r;
}

static void admit(ds_engine *e, ds_req *r, int64_t hit) {
    int i = index_of(e->waiting, e->n_waiting, r);
    if (i >= 0) vec_remove_at(e->waiting, &e->n_waiting, i);
    vec_push(&e->running, &e->n_running, &e->cap_running, r);
    r->state = DS_REQ_PREFILL;
    r->admit_order = ++e->admit_counter;
    if (!r->exclude_metrics) {
        atomic_fetch_add(&e->m->prefix_queries, (uint64_t)r->n_tokens);
        atomic_fetch_add(&e->m->prefix_hits, (uint64_t)hit);
    }
    if (!r->reached_decode && r->n_out == 0) {
        pthread_mutex_lock(&r->mu);
        r->cached_tokens = hit;
        pthread_mutex_unlock(&r->mu);
    }
}

/* Prefill rows: in-flight prefills first (admission order), then waiting requests in arrival
 * order; stop at the first that does not fit.  Returns rows added; *kv_short is set when a
 * candidate was refused for KV. */
static int build_prefill(ds_engine *e, int64_t tokens_left, int max_seqs, bool *kv_short, bool *had_candidates) {
    int taken = 0, rows = 0;
    *kv_short = false;
    *had_candidates = false;
    for (int i = 0; i < e->n_running && taken < max_seqs; i++) {
        ds_req *r = e->running[i];
        if (r->state != DS_REQ_PREFILL || r->in_step) continue;
        *had_candidates = true;
        int64_t a = r->n_computed, end = plan_chunk(e, r, tokens_left);
        if (end <= a) return rows;
        if (!reserve_pages(e, r, a, end, 0)) {
            *kv_short = true;
            return rows;
        }
        add_item(e, r, a, end);
        r->in_step = true;
        taken++;
        rows += (int)(end - a);
        tokens_left -= end - a;
    }
    uint64_t watermark = e->km.plan.num_blocks / 100;
    if (watermark < 1) watermark = 1;
    while (e->n_waiting > 0 && taken < max_seqs && e->n_running < e->cfg.max_num_seqs && tokens_left > 0) {
        ds_req *r = e->waiting[0];
        *had_candidates = true;
        bool plp_pending = r->sp.prompt_logprobs >= 0 && r->n_plp_done < r->n_prompt;
        int64_t hit = plp_pending ? 0 : ds_kvm_lookup_prefix(&e->km, &r->tab, r->tokens, r->n_tokens, r->cache_salt);
        r->n_computed = hit;
        int64_t end = plan_chunk(e, r, tokens_left);
        uint64_t wm = e->n_running > 0 ? watermark : 0;
        ds_error err = {0};
        if (end > hit && !(r->seq = e->be->seq_open(e->be->impl, &e->km, &r->tab, r->tokens, hit, &err)))
            ds_log(DS_LOG_ERROR, "request %s: cannot open a sequence: %s", r->id, err.msg);
        if (end <= hit || !r->seq || !reserve_pages(e, r, hit, end, wm)) {
            release_kv(e, r);
            r->n_computed = 0;
            if (end > hit) *kv_short = true;
            return rows;
        }
        admit(e, r, hit);
        add_item(e, r, hit, end);
        r->in_step = true;
        taken++;
        rows += (int)(end - hit);
        tokens_left -= end - hit;
    }
    return rows;
}

/* Decode rows for every request in DECODE; when pages run out, the most recently admitted running
 * request is preempted (it may be the one asking) and the scan restarts over the changed list. */
static int build_decode(ds_engine *e) {
    int rows = 0, n_decoding = 0;
    for (int i = 0; i < e->n_running; i++) n_decoding += e->running[i]->state == DS_REQ_DECODE;
restart:
    for (int i = 0; i < e->n_running; i++) {
        ds_req *r = e->running[i];
        if (r->state != DS_REQ_DECODE || r->in_step) continue;
        /* a verify row set: the last token and K drafts (stored after it in the token array) */
        const int K = ds_spec_k_for(e, r, n_decoding);
        int64_t a = r->n_computed, end = r->n_tokens + K;
        bool preempted = false, self = false;
        while (!reserve_pages(e, r, a, end, 0)) {
            ds_req *v = latest_admitted(e);
            int vi = index_of(e->item_req, e->n_items, v);
            if (vi >= 0) { /* drop the victim's row from this step */
                memmove(e->items + vi, e->items + vi + 1, sizeof *e->items * (size_t)(e->n_items - vi - 1));
                memmove(e->item_req + vi, e->item_req + vi + 1, sizeof *e->item_req * (size_t)(e->n_items - vi - 1));
                e->n_items--;
                rows--;
            }
            preempt(e, v);
            preempted = true;
            if (v == r) {
                self = true;
                break;
            }
        }
        if (!self) {
            add_item(e, r, a, end);
            if (K > 0) e->items[e->n_items - 1].n_logits = K + 1;
            r->spec_k = K;
            r->in_step = true;
            rows++;
        }
        if (preempted) goto restart;
    }
    return rows;
}

/* ------------------------------------------------------------------ after the forward */

static void push_out(ds_req *r, int32_t tok, const ds_sample_result *res, const char *text, size_t tlen) {
    if (r->n_out == r->cap_out) {
        r->cap_out = r->cap_out ? r->cap_out * 2 : 64;
        r->out_ids = ds_xrealloc(r->out_ids, sizeof(int32_t) * (size_t)r->cap_out);
        if (r->sp.logprobs >= 0) r->out_lp = ds_xrealloc(r->out_lp, sizeof(ds_sample_result) * (size_t)r->cap_out);
    }
    if (r->sp.logprobs >= 0) r->out_lp[r->n_out] = *res;
    r->out_ids[r->n_out++] = tok;
    if (tlen) ds_tbuf_append(&r->text, text, tlen);
}

static void tokens_push(ds_req *r, int32_t tok) {
    if (r->n_tokens == r->cap_tokens) {
        r->cap_tokens *= 2;
        r->tokens = ds_xrealloc(r->tokens, sizeof(int32_t) * (size_t)r->cap_tokens);
    }
    r->tokens[r->n_tokens++] = tok;
}

/* Commit one sampled token: stop checks in order (EOS / stop ids, stop strings, max_tokens,
 * max_model_len), then publication. */
static void commit_token(ds_engine *e, ds_req *r, const ds_sample_result *res) {
    int32_t tok = res->token;
    tokens_push(r, tok);
    if (!r->exclude_metrics) atomic_fetch_add(&e->m->generation_tokens, 1);
    int64_t n_gen = r->n_tokens - r->n_prompt;
    ds_req_end end = DS_END_NONE;
    bool eos = false;
    if (tok == e->be->eos_id && !r->sp.ignore_eos) end = DS_END_STOP, eos = true;
    for (int i = 0; i < r->sp.n_stop_ids && end == DS_END_NONE; i++)
        if (r->sp.stop_ids[i] == tok) end = DS_END_STOP;
    ds_tbuf piece = {0};
    if (end == DS_END_NONE && r->detok) {
        bool drop = r->skip_special && (tok == e->be->bos_id || tok == e->be->eos_id || tok == e->be->pad_id ||
                                        (e->detok.is_special && e->detok.is_special(e->detok.ctx, tok)));
        if (!drop) {
            size_t len = 0;
            const char *t = e->detok.push(r->detok, tok, &len);
            if (n_gen < r->sp.min_tokens) { /* min_tokens: no stop string ends the request yet */
                if (t && len) ds_tbuf_append(&piece, t, len);
            } else if (ds_stop_push(&r->stopm, t ? t : "", t ? len : 0, &piece)) end = DS_END_STOP;
        }
    }
    if (end == DS_END_NONE && n_gen >= r->sp.max_tokens) end = DS_END_LENGTH;
    if (end == DS_END_NONE && r->n_tokens >= e->cfg.max_model_len) end = DS_END_LENGTH;
    double now = ds_now();
    pthread_mutex_lock(&r->mu);
    push_out(r, tok, res, piece.s, piece.n);
    bool first = r->t_first_token == 0;
    if (first) r->t_first_token = now;
    r->stopped_by_eos = eos;
    publish_locked_end(r);
    ds_tbuf_free(&piece);
    if (first && !r->exclude_metrics) ds_hist_observe(e->m, &e->m->ttft, now - r->t_arrival);
    if (end != DS_END_NONE) finish_req(e, r, end, 200, NULL, NULL);
}

static void fail_numeric(ds_engine *e, ds_req *r) {
    if (!r->exclude_metrics) atomic_fetch_add(&e->m->numeric_errors, 1);
    ds_log(DS_LOG_ERROR, "request %s: non-finite logits at position %lld; request failed", r->id, (long long)r->n_computed);
    finish_req(e, r, DS_END_ERROR, 500, "internal_error", "numeric error: the model produced NaN or Inf logits");
}

static void after_forward(ds_engine *e) {
    int V = e->be->vocab;
    size_t row = 0;
    struct {
        int n, *item;              /* items whose last row is sampled now */
        ds_sample_result *res;
        int *rc;
    } job = {0, ds_xmalloc(sizeof(int) * (size_t)e->n_items), ds_xmalloc(sizeof(ds_sample_result) * (size_t)e->n_items),
             ds_xmalloc(sizeof(int) * (size_t)e->n_items)};
    if (e->n_items > e->cap_item_row) {
        e->cap_item_row = e->n_items;
        e->item_row = ds_xrealloc(e->item_row, sizeof(size_t) * (size_t)e->cap_item_row);
    }
    bool *failed = ds_xcalloc((size_t)e->n_items, sizeof(bool));
    for (int k = 0; k < e->n_items; k++) {
        ds_backend_item *it = &e->items[k];
        ds_req *r = e->item_req[k];
        r->in_step = false;
        e->item_row[k] = row;
        int64_t end = it->pos0 + it->n;
        const float *rows = e->logits + row * (size_t)V;
        row += (size_t)it->n_logits;
        if (r->spec_k > 0) continue;   /* a verify row set: accepted and committed below (spec_engine.c) */
        if (r->state == DS_REQ_PREFILL && !r->exclude_metrics) atomic_fetch_add(&e->m->prompt_tokens, (uint64_t)it->n);
        r->n_computed = end;
        e->be->after_step(e->be->impl, &e->km, r->seq, &r->tab, r->tokens, end, r->cache_salt);
        if (r->sp.prompt_logprobs >= 0 && r->n_plp_done < r->n_prompt && it->n_logits == it->n) {
            /* row q's logits score token q+1 */
            for (int j = 0; j < it->n && !failed[k]; j++) {
                int64_t q = it->pos0 + j;
                if (q + 1 >= r->n_prompt || q + 1 < r->n_plp_done) continue;
                ds_sample_result res;
                if (ds_row_logprobs(rows + (size_t)j * (size_t)V, V, e->mask, r->tokens[q + 1], r->sp.prompt_logprobs,
                                    e->ss_pool[0], &res)) {
                    failed[k] = true;
                    break;
                }
                pthread_mutex_lock(&r->mu);
                r->plp[q + 1] = res;
                r->n_plp = q + 2;
                pthread_mutex_unlock(&r->mu);
            }
            r->n_plp_done = DS_MIN(end + 1, r->n_prompt);
        }
        if (!failed[k] && end == r->n_tokens) job.item[job.n++] = k;
    }
    ds_engine_sample_items(e, job.item, job.n, job.res, job.rc);
    int jn = 0;
    for (int k = 0; k < e->n_items; k++) {
        ds_req *r = e->item_req[k];
        if (r->spec_k > 0) {
            ds_spec_finish_item(e, k, e->logits + e->item_row[k] * (size_t)V);
            continue;
        }
        if (failed[k]) {
            fail_numeric(e, r);
            continue;
        }
        if (jn >= job.n || job.item[jn] != k) continue;
        int t = jn++;
        r->state = DS_REQ_DECODE;
        r->reached_decode = true;
        if (job.rc[t]) {
            fail_numeric(e, r);
            continue;
        }
        commit_token(e, r, &job.res[t]);
    }
    free(failed);
    free(job.item);
    free(job.res);
    free(job.rc);
}

/* ------------------------------------------------------------------ one step */

enum { STEP_NONE = 0, STEP_PREFILL, STEP_DECODE, STEP_MIXED };

static bool any_decode(ds_engine *e) {
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i]->state == DS_REQ_DECODE) return true;
    return false;
}

static int choose_and_build(ds_engine *e, bool *forced) {
    *forced = false;
    e->n_items = 0;
    memset(e->promised, 0, sizeof e->promised);
    int64_t budget = e->cfg.max_num_batched_tokens;
    bool kv_short = false, cands = false;
    if (!e->cfg.admission_gate) {
        int d = build_decode(e);
        build_prefill(e, budget - d, e->cfg.max_num_seqs, &kv_short, &cands);
        return e->n_items ? STEP_MIXED : STEP_NONE;
    }
    bool dec = any_decode(e);
    if (e->forced_decode > 0 && dec) {
        e->forced_decode--;
        *forced = true;
        build_decode(e);
        return STEP_DECODE;
    }
    if (dec && e->decode_since_prefill < e->cfg.gate_decode_steps_per_chunk) {
        build_decode(e);
        return STEP_DECODE;
    }
    build_prefill(e, budget, e->cfg.max_prefill_seqs, &kv_short, &cands);
    if (e->n_items) {
        e->empty_streak = 0;
        return STEP_PREFILL;
    }
    if (cands && kv_short) {
        e->empty_streak++;
        int s = e->empty_streak - 1 < 3 ? e->empty_streak - 1 : 3;
        e->forced_decode = DS_MIN(1 << s, 8);
        if (dec) {
            e->forced_decode--;
            *forced = true;
            build_decode(e);
            return STEP_DECODE;
        }
        /* no decode to free KV: preempt the newest running prefill, or the queue head can never fit */
        if (e->n_running > 1) {
            preempt(e, latest_admitted(e));
        } else if (e->n_running == 0 && e->n_waiting > 0) {
            ds_req *r = e->waiting[0];
            finish_req(e, r, DS_END_ERROR, 500, "internal_error", "request does not fit in the KV cache");
        }
        return STEP_NONE;
    }
    if (dec) {
        build_decode(e);
        return STEP_DECODE;
    }
    return STEP_NONE;
}

static void run_step(ds_engine *e) {
    bool forced;
    int kind = choose_and_build(e, &forced);
    if (kind == STEP_NONE || e->n_items == 0) return;
    e->steps++;
    int p_rows = 0, d_rows = 0, p_reqs = 0;
    size_t n_logits = 0;
    for (int k = 0; k < e->n_items; k++) {
        if (e->item_req[k]->state == DS_REQ_PREFILL) p_rows += e->items[k].n, p_reqs++;
        else d_rows += e->items[k].n;
        n_logits += (size_t)e->items[k].n_logits;
    }
    if (e->cfg.admission_gate && p_rows && d_rows) {
        atomic_fetch_add(&e->m->gate_violations, 1);
        ds_log(DS_LOG_ERROR, "[admission_gate] invariant violated: step #%llu has %d prefill and %d decode rows",
               (unsigned long long)e->steps, p_rows, d_rows);
#ifndef NDEBUG
        abort();
#endif
    }
    bool prefill_only = p_rows && !d_rows;
    if (e->cfg.admission_gate) {
        if (prefill_only) {
            atomic_fetch_add(&e->m->gate_prefill, 1);
            e->prefill_episode++;
            ds_log(DS_LOG_DEBUG, "[admission_gate] prefill-only step #%llu reqs=%d tokens=%d",
                   (unsigned long long)e->steps, p_reqs, p_rows);
        } else {
            atomic_fetch_add(&e->m->gate_decode, 1);
            if (forced) atomic_fetch_add(&e->m->gate_forced, 1);
            if (e->prefill_episode)
                ds_log(DS_LOG_DEBUG, "[admission_gate] episode ended after %d prefill steps", e->prefill_episode);
            e->prefill_episode = 0;
        }
    }
    /* decode-stall accounting: prefill steps that ran while some request was decoding */
    if (prefill_only && any_decode(e)) {
        e->prefill_since_decode++;
        if ((uint64_t)e->prefill_since_decode > atomic_load(&e->m->gate_max_decode_stall))
            atomic_store(&e->m->gate_max_decode_stall, (uint64_t)e->prefill_since_decode);
    }
    if (d_rows) e->prefill_since_decode = 0;
    if (prefill_only) e->decode_since_prefill = 0;
    else if (d_rows) e->decode_since_prefill++;

    size_t need = n_logits * (size_t)e->be->vocab;
    if (need > e->logits_cap) {
        free(e->logits);
        e->logits = ds_xmalloc(sizeof(float) * (need ? need : 1));
        e->logits_cap = need;
    }
    ds_engine_ask_greedy_ids(e, n_logits);
    double t0 = ds_now();
    ds_error err = {0};
    if (e->be->step(e->be->impl, &e->km.pools, e->items, e->n_items, e->logits, &err)) {
        ds_log(DS_LOG_ERROR, "forward step #%llu failed: %s", (unsigned long long)e->steps, err.msg);
        for (int k = 0; k < e->n_items; k++) {
            e->item_req[k]->in_step = false;
            finish_req(e, e->item_req[k], DS_END_ERROR, 500, "internal_error", err.msg);
        }
        e->n_items = 0;
        return;
    }
    double dt = ds_now() - t0;
    ds_hist_observe(e->m, prefill_only ? &e->m->step_prefill : &e->m->step_decode, dt);
    after_forward(e);
    e->n_items = 0;
    ds_spec_after_step(e);
}

static void process_cancels(ds_engine *e) {
    for (int i = e->n_waiting - 1; i >= 0; i--)
        if (atomic_load(&e->waiting[i]->cancel)) finish_req(e, e->waiting[i], DS_END_CANCELLED, 499, "cancelled", "cancelled");
    for (int i = e->n_running - 1; i >= 0; i--)
        if (atomic_load(&e->running[i]->cancel)) finish_req(e, e->running[i], DS_END_CANCELLED, 499, "cancelled", "cancelled");
}

static void update_gauges(ds_engine *e) {
    atomic_store(&e->g_running, e->n_running);
    atomic_store(&e->g_waiting, e->n_waiting);
    atomic_store(&e->g_blocks_used, e->km.blocks_used);
    atomic_store(&e->g_blocks_evictable, ds_kvm_evictable_blocks(&e->km));
}

static void *engine_main(void *arg) {
    ds_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->n_inbox == 0 && !e->reset_pc && e->n_running == 0 && e->n_waiting == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        ds_req **in = e->inbox;
        int n_in = e->n_inbox;
        e->inbox = NULL;
        e->n_inbox = e->cap_inbox = 0;
        bool stopping = e->stopping, reset = e->reset_pc;
        e->reset_pc = false;
        pthread_mutex_unlock(&e->mu);

        pthread_mutex_lock(&e->state_mu);
        for (int i = 0; i < n_in; i++) vec_push(&e->waiting, &e->n_waiting, &e->cap_waiting, in[i]);
        free(in);
        if (stopping) {
            while (e->n_running) finish_req(e, e->running[0], DS_END_ERROR, 503, "not_ready", "server shutting down");
            while (e->n_waiting) finish_req(e, e->waiting[0], DS_END_ERROR, 503, "not_ready", "server shutting down");
            update_gauges(e);
            pthread_mutex_unlock(&e->state_mu);
            break;
        }
        process_cancels(e);
        if (reset) ds_kvm_reset_prefix_cache(&e->km);
        if (e->n_running || e->n_waiting) run_step(e);
        update_gauges(e);
        pthread_mutex_unlock(&e->state_mu);
        if (reset) {
            pthread_mutex_lock(&e->mu);
            e->reset_done++;
            pthread_cond_broadcast(&e->idle_cv);
            pthread_mutex_unlock(&e->mu);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ public API */

ds_engine *ds_engine_create(const ds_engine_config *cfg, ds_backend *be, const ds_token_mask *mask,
                            ds_metrics *metrics, const ds_detok_ops *detok, ds_error *err) {
    if (cfg->block_size < 16 || cfg->block_size > 256 || (cfg->block_size & (cfg->block_size - 1))) {
        ds_fail(err, "E_CONFIG", "--block-size %d: must be a power of two between 16 and 256", cfg->block_size);
        return NULL;
    }
    if (cfg->max_num_batched_tokens < cfg->block_size || cfg->max_num_batched_tokens < cfg->max_num_seqs) {
        ds_fail(err, "E_CONFIG", "--max-num-batched-tokens %d: must be >= --block-size (%d) and >= --max-num-seqs (%d)",
                cfg->max_num_batched_tokens, cfg->block_size, cfg->max_num_seqs);
        return NULL;
    }
    ds_engine *e = ds_xcalloc(1, sizeof *e);
    e->cfg = *cfg;
    e->be = be;
    e->mask = mask;
    e->m = metrics;
    if (detok) e->detok = *detok, e->has_detok = true;
    ds_kv_layout lay;
    be->layout(be->impl, cfg->block_size, &lay);
    ds_kv_budget plan;
    int prefill_seqs = cfg->admission_gate ? cfg->max_prefill_seqs : cfg->max_num_seqs;
    int spec = be->propose && be->spec_block > 0 ? cfg->spec_tokens : 0;
    if (ds_kv_budget_plan(&plan, &lay, cfg->kv_budget_bytes, be->window, spec, cfg->max_num_seqs, prefill_seqs,
                          cfg->max_model_len, err) ||
        ds_kvm_init(&e->km, &lay, &plan, be->window, cfg->prefix_caching, cfg->kv_high_first, cfg->fingerprint, err)) {
        free(e);
        return NULL;
    }
    if (cfg->kv_fault) {
        if (cfg->kv_fault_page >= plan.n_pages[DS_KV_CKV]) {
            ds_fail(err, "E_FLAG", "--debug-kv-fault-page %u: the KV pool has %u CKV pages (0..%u)",
                    cfg->kv_fault_page, plan.n_pages[DS_KV_CKV], plan.n_pages[DS_KV_CKV] - 1);
            ds_kvm_destroy(&e->km);
            free(e);
            return NULL;
        }
        e->km.debug_fault_page = cfg->kv_fault_page;
        ds_log(DS_LOG_WARN, "--debug-kv-fault-page %u: KV page deliberately corrupted; outputs are wrong (debug only)",
               cfg->kv_fault_page);
    }
    e->ss = ds_sampler_scratch_new(be->vocab);
    e->n_ss = ds_pool_threads() > 0 ? ds_pool_threads() : 1;
    e->ss_pool = ds_xmalloc(sizeof(ds_sampler_scratch *) * (size_t)e->n_ss);
    e->ss_pool[0] = e->ss;
    for (int i = 1; i < e->n_ss; i++) e->ss_pool[i] = ds_sampler_scratch_new(be->vocab);
    e->decode_since_prefill = 1 << 30;
    ds_spec_engine_init(e);
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->state_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    if (pthread_create(&e->thr, NULL, engine_main, e)) {
        ds_fail(err, "E_THREAD", "cannot start the engine thread");
        ds_kvm_destroy(&e->km);
        for (int i = 0; i < e->n_ss; i++) ds_sampler_scratch_free(e->ss_pool[i]);
        free(e->ss_pool);
        free(e);
        return NULL;
    }
    return e;
}

void ds_engine_destroy(ds_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thr, NULL);
    for (int i = 0; i < e->n_inbox; i++) {
        ds_req *r = e->inbox[i];
        pthread_mutex_lock(&r->mu);
        r->finished = true;
        r->end = DS_END_ERROR;
        r->err_status = 503;
        snprintf(r->err_code, sizeof r->err_code, "not_ready");
        publish_locked_end(r);
        ds_req_unref(r);
    }
    free(e->inbox);
    free(e->waiting);
    free(e->running);
    free(e->items);
    free(e->item_req);
    free(e->logits);
    free(e->greedy_ids);
    free(e->item_row);
    ds_spec_engine_free(e);
    for (int i = 0; i < e->n_ss; i++) ds_sampler_scratch_free(e->ss_pool[i]);
    free(e->ss_pool);
    ds_kvm_destroy(&e->km);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->state_mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle_cv);
    free(e);
}

int ds_engine_submit(ds_engine *e, ds_req *r) {
    pthread_mutex_lock(&e->mu);
    if (e->stopping || atomic_load(&e->n_live) >= e->cfg.max_pending) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    atomic_fetch_add(&e->n_live, 1);
    ds_req_ref(r);
    r->state = DS_REQ_WAITING;
    r->cap_tokens = r->n_prompt + 16;
    r->tokens = ds_xmalloc(sizeof(int32_t) * (size_t)r->cap_tokens);
    memcpy(r->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    r->n_tokens = r->n_prompt;
    if (r->sp.prompt_logprobs >= 0) {
        r->plp = ds_xcalloc((size_t)(r->n_prompt ? r->n_prompt : 1), sizeof(ds_sample_result));
        r->n_plp_done = 1; /* entry 0 has no logprob */
    }
    if (r->want_text && e->has_detok) r->detok = e->detok.open(e->detok.ctx);
    ds_stop_init(&r->stopm, (const char *const *)r->sp.stop, r->sp.n_stop);
    r->stopm.keep_match = r->sp.include_stop_str;
    r->sp.eos_id = r->sp.ignore_eos ? -1 : e->be->eos_id;
    vec_push(&e->inbox, &e->n_inbox, &e->cap_inbox, r);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void ds_engine_commit_token(ds_engine *e, ds_req *r, const ds_sample_result *res) { commit_token(e, r, res); }
void ds_engine_fail_numeric(ds_engine *e, ds_req *r) { fail_numeric(e, r); }
