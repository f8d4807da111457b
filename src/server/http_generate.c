/* Generation endpoints: validate, submit one engine request per choice, then either wait for
 * all of them (one JSON reply) or stream their chunks as they come (SSE).
 *
 * Why one engine request per choice: `n` > 1 and a list of prompts are just independent
 * sequences that share a prompt (the prefix cache makes the sharing cheap), and each needs its
 * own random stream — the engine already keys draws by (seed, output index), so choice j of a
 * seeded request uses seed + j.  The waiting side checks, every 100 ms slice, whether the
 * client went away (cancel everything) and whether the shutdown deadline passed (end every
 * unfinished choice with finish_reason "abort" when streaming, a 503 error otherwise), so no
 * client is ever left with an empty reply. */
#define _GNU_SOURCE
#include "server/http_internal.h"
#include "tokenizer/json_canon.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen {
    ds_server *s;
    int n;                 /* choices */
    ds_req **r;
    ds_resp *rs;
    char **echo;           /* per choice, owned (completions echo) */
    ds_tbuf out;
    size_t off;
    int fd;
    double last_out;       /* when the stream last produced bytes (ds_now), for the keep-alive */
    bool finished_sent;
    bool aborted;
} gen;

static void gen_free(gen *g) {
    for (int i = 0; i < g->n; i++) {
        if (g->r[i]) ds_req_unref(g->r[i]);
        ds_resp_free(&g->rs[i]);
        free(g->echo[i]);
    }
    free(g->r);
    free(g->rs);
    free(g->echo);
    ds_tbuf_free(&g->out);
    atomic_fetch_sub(&g->s->active, 1);
    free(g);
}

static void cancel_all(gen *g) {
    for (int i = 0; i < g->n; i++)
        if (g->r[i]) ds_engine_cancel(g->s->e, g->r[i]);
}

/* Shutdown deadline passed: unfinished choices end as "abort". */
static void abort_all(gen *g) {
    if (g->aborted) return;
    g->aborted = true;
    for (int i = 0; i < g->n; i++) {
        pthread_mutex_lock(&g->r[i]->mu);
        if (!g->r[i]->finished) {
            g->rs[i].aborted = true;
            atomic_store(&g->r[i]->cancel_shutdown, true);
        }
        pthread_mutex_unlock(&g->r[i]->mu);
    }
    cancel_all(g);
}

/* The prompt text echoed before a completion: the string as sent, or the ids decoded (special
 * tokens dropped when the request skips them in its output too). */
static char *echo_text(ds_server *s, const ds_tokens *ids, const char *text, bool skip_special, size_t *len) {
    if (text) {
        char *t = ds_xstrdup(text);
        *len = ds_json_nul_restore(t, strlen(t));
        return t;
    }
    ds_error e;
    char *t = ds_tokenizer_decode(s->tok, ids->ids, ids->n, skip_special, len, &e);
    if (!t) *len = 0;
    return t;
}

/* Build and submit every choice; -1 (429 in err) when the queue is full. */
static int submit_all(gen *g, ds_api_request *ar, const char *endpoint, ds_api_error *err) {
    ds_server *s = g->s;
    int np = 1 + ar->n_more;
    g->n = np * ar->n;
    g->r = ds_xcalloc((size_t)g->n, sizeof *g->r);
    g->rs = ds_xcalloc((size_t)g->n, sizeof *g->rs);
    g->echo = ds_xcalloc((size_t)g->n, sizeof *g->echo);
    for (int k = 0; k < g->n; k++) {
        int p = k / ar->n, j = k % ar->n;
        const ds_tokens *pt = p ? &ar->more_prompts[p - 1] : &ar->prompt;
        const char *ptext = p ? ar->more_texts[p - 1] : ar->prompt_text;
        ds_resp *rs = &g->rs[k];
        ds_resp_init(rs, ar, s->tok, s->m, s->cfg.names[0], ar->kind == DS_API_CHAT ? "chatcmpl-" : "cmpl-");
        if (k) snprintf(rs->id, sizeof rs->id, "%s", g->rs[0].id); /* one response id for all choices */
        rs->index = k;
        rs->first_of_prompt = j == 0;
        if (ar->echo) {
            g->echo[k] = echo_text(s, pt, ptext, ar->skip_special, &rs->echo_len);
            rs->echo = g->echo[k];
        }
        ds_sampling_params sp = ar->sp;
        if (sp.has_seed) sp.seed += j; /* its own random stream, reproducible */
        char rid[80];
        snprintf(rid, sizeof rid, g->n > 1 ? "%s-%d" : "%s", rs->id, k);
        ds_req *r = ds_req_new(rid, pt->ids, (int64_t)pt->n, &sp);
        r->skip_special = ar->skip_special;
        if (ar->cache_salt) r->cache_salt = ds_xstrdup(ar->cache_salt);
        if (ds_engine_submit(s->e, r)) {
            ds_req_unref(r);
            cancel_all(g);
            return ds_api_fail(err, 429, "rate_limit_error", "too_many_requests", NULL,
                               "too many pending requests (running + waiting reached --max-pending-requests); retry later");
        }
        g->r[k] = r;
        if (s->cfg.log_requests) {
            const char *txt = ptext ? ptext : "";
            int n = (int)DS_MIN(strlen(txt), (size_t)s->cfg.max_log_len);
            ds_log(DS_LOG_INFO, "request %s %s prompt_tokens=%zu max_tokens=%lld stream=%d prompt=\"%.*s\"%s", r->id, endpoint,
                   pt->n, (long long)ar->sp.max_tokens, ar->stream, n, txt, (size_t)n < strlen(txt) ? "..." : "");
        }
    }
    return 0;
}

/* One 100 ms slice: wait on the first unfinished choice, then consume every choice's news.
 * Returns true when every choice is done (streaming) or finished (whole reply). */
static bool gen_poll(gen *g, ds_tbuf *sse) {
    bool waited = false, all = true;
    for (int i = 0; i < g->n; i++) {
        ds_req *r = g->r[i];
        pthread_mutex_lock(&r->mu);
        if (!r->finished && !waited) {
            ds_req_wait_locked(r, r->version, 0.1);
            waited = true;
        }
        ds_resp_consume(&g->rs[i], r, sse);
        all &= sse ? g->rs[i].done : r->finished;
        bool failed = g->rs[i].failed;
        pthread_mutex_unlock(&r->mu);
        if (failed) { /* an error event ends the whole stream */
            cancel_all(g);
            return true;
        }
    }
    return all;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen *g = cls;
    (void)pos;
    while (g->off == g->out.n) {
        if (g->finished_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        ds_tbuf_clear(&g->out);
        g->off = 0;
        if (atomic_load(&g->s->aborting)) abort_all(g);
        if (gen_poll(g, &g->out)) {
            ds_resp_stream_tail(g->rs, g->r, g->n, &g->out);
            g->finished_sent = true;
        }
        if (g->out.n == 0 && ds_http_client_gone(g->fd)) {
            cancel_all(g);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* libmicrohttpd closes a connection that was silent for --http-timeout, counting the
         * time this callback waits: a request queued behind long prefills would lose its stream.
         * An SSE comment line (clients ignore it) at a third of the timeout keeps it open. */
        double now = ds_now();
        if (g->out.n == 0 && now - g->last_out >= g->s->cfg.http_timeout_s / 3) ds_tbuf_puts(&g->out, ": keep-alive\n\n");
        if (g->out.n) g->last_out = now;
    }
    size_t n = DS_MIN(max, g->out.n - g->off);
    memcpy(buf, g->out.s + g->off, n);
    g->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    gen *g = cls;
    if (!g->finished_sent) cancel_all(g); /* the connection ended before the stream did */
    gen_free(g);
}

static enum MHD_Result start_stream(struct MHD_Connection *c, gen *g, const char *endpoint, const char *xrid,
                                    const ds_api_request *ar) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, stream_free);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    if (xrid) MHD_add_response_header(resp, "X-Request-Id", xrid);
    if (ar->ignored_fields.n) MHD_add_response_header(resp, "x-ignored-fields", ar->ignored_fields.s);
    ds_http_cors_headers(g->s, c, resp);
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    ds_metrics_inc_http(g->s->m, endpoint, 200);
    return rc;
}

/* Whole reply: the first failed choice's error, 503 for a shutdown abort, else every choice. */
static int whole_reply(gen *g, ds_tbuf *out, ds_api_error *err) {
    for (int i = 0; i < g->n; i++) pthread_mutex_lock(&g->r[i]->mu);
    int status = 200;
    for (int i = 0; i < g->n && status == 200; i++) {
        ds_req *r = g->r[i];
        ds_resp_consume(&g->rs[i], r, NULL);
        if (r->end == DS_END_CANCELLED && g->rs[i].aborted) {
            status = ds_api_fail(err, 503, "service_unavailable", "shutting_down", NULL,
                                 "the server shut down before this request finished; retry it");
        } else if (r->end == DS_END_ERROR || r->end == DS_END_CANCELLED) {
            int st = r->err_status && r->err_status != 499 ? r->err_status : 500;
            status = ds_api_fail(err, st, st == 503 ? "service_unavailable" : "server_error",
                                 r->err_code[0] ? r->err_code : "internal_error", NULL, "%s", r->err_msg);
        }
    }
    if (status == 200 && ds_resp_render_all(g->rs, g->r, g->n, out, err)) status = -1;
    for (int i = 0; i < g->n; i++) pthread_mutex_unlock(&g->r[i]->mu);
    if (status != 200) {
        ds_api_error_json(err, out);
        return err->status;
    }
    return 200;
}

enum MHD_Result ds_http_generate(struct MHD_Connection *c, ds_server *s, ds_api_kind kind, const char *endpoint,
                                 const char *body, size_t len) {
    const char *xrid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    ds_api_request ar;
    ds_api_error err = {0};
    if (ds_api_parse_generation(kind, body, len, &s->lim, s->tok, &ar, &err)) {
        ds_api_request_free(&ar);
        return ds_http_send_error(c, s, endpoint, &err, xrid);
    }
    gen *g = ds_xcalloc(1, sizeof *g);
    g->s = s;
    g->fd = ds_http_conn_fd(c);
    g->last_out = ds_now();
    atomic_fetch_add(&s->active, 1);
    if (submit_all(g, &ar, endpoint, &err)) {
        gen_free(g);
        ds_api_request_free(&ar);
        return ds_http_send_error(c, s, endpoint, &err, xrid);
    }
    if (xrid) ds_log(DS_LOG_INFO, "request %s X-Request-Id %s", g->r[0]->id, xrid);
    if (ar.stream) {
        enum MHD_Result rc = start_stream(c, g, endpoint, xrid, &ar);
        ds_api_request_free(&ar);
        return rc;
    }
    bool cancelled = false;
    while (!gen_poll(g, NULL)) {
        if (atomic_load(&s->aborting)) abort_all(g);
        if (!cancelled && ds_http_client_gone(g->fd)) {
            cancel_all(g);
            cancelled = true;
        }
    }
    ds_tbuf out = {0};
    int status = whole_reply(g, &out, &err);
    enum MHD_Result rc = ds_http_send_text(c, s, endpoint, status, "application/json", out.s, out.n, xrid, ar.ignored_fields.s);
    ds_tbuf_free(&out);
    gen_free(g);
    ds_api_request_free(&ar);
    return rc;
}
