/* HTTP front end on libmicrohttpd (see server.h for the threading model).
 *
 * Flow of one request: the access handler accumulates the body (413 past --max-request-body,
 * decided from Content-Length up front when present), then routes: authentication (§10.1),
 * readiness, and the endpoint.  Generation handlers validate (api_request.c), submit to the
 * engine (429 when the queue is full), and either wait for the result or hand a streaming reader
 * to libmicrohttpd.  A request whose client goes away is cancelled; the engine frees its pages
 * at the next step boundary. */
#define _GNU_SOURCE
#include "server/server.h"
#include "server/api.h"
#include "server/response.h"
#include <microhttpd.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>

struct ds_server {
    ds_server_config cfg;
    struct MHD_Daemon *d;
    ds_engine *e;
    const ds_tokenizer *tok;
    ds_metrics *m;
    ds_api_limits lim;
    atomic_bool ready;
    pthread_mutex_t mu;
    char phase[64];
    char instance[64];
    int port;
};

typedef struct conn_ctx {
    ds_tbuf body;
    bool too_large;
} conn_ctx;

typedef struct stream_ctx {
    ds_server *s;
    ds_req *r;
    ds_resp rs;
    ds_tbuf out;
    size_t off;
    int fd;
    bool finished_sent;
    uint64_t seen;       /* request version already rendered */
} stream_ctx;

/* ------------------------------------------------------------------ small helpers */

static enum MHD_Result send_text(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status,
                                 const char *ctype, const char *body, size_t len, const char *req_id,
                                 const char *ignored) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", ctype);
    if (req_id) MHD_add_response_header(r, "X-Request-Id", req_id);
    if (ignored && ignored[0]) MHD_add_response_header(r, "x-ignored-fields", ignored);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    ds_metrics_inc_http(s->m, endpoint, status);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status, const char *json,
                                 const char *req_id) {
    return send_text(c, s, endpoint, status, "application/json", json, strlen(json), req_id, NULL);
}

/* Send a cJSON value as the response body and free it. */
static enum MHD_Result send_cjson(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status, cJSON *o) {
    char *t = cJSON_PrintUnformatted(o);
    enum MHD_Result rc = send_json(c, s, endpoint, status, t, NULL);
    free(t);
    cJSON_Delete(o);
    return rc;
}

/* Parse a request body that must be one JSON object (numbers keep their spelling); NULL with a
 * 400 in `err` otherwise.  Shared by the small endpoints; generation requests go through api_request.c. */
static cJSON *parse_object_body(const char *body, size_t len, ds_api_error *err) {
    ds_error pe = {0};
    cJSON *b = ds_json_parse_exact(body, len, &pe);
    if (!b) {
        ds_api_fail(err, 400, "invalid_request_error", "invalid_json", NULL, "malformed JSON body: %s", pe.msg);
        return NULL;
    }
    if (!cJSON_IsObject(b)) {
        ds_api_fail(err, 400, "invalid_request_error", "invalid_type", NULL, "the request body must be a JSON object");
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

static enum MHD_Result send_error(struct MHD_Connection *c, ds_server *s, const char *endpoint, const ds_api_error *e,
                                  const char *req_id) {
    ds_tbuf b = {0};
    ds_api_error_json(e, &b);
    if (e->status != 404 || strcmp(e->code, "not_found")) ds_metrics_inc_rejected(s->m, e->code);
    enum MHD_Result rc = send_json(c, s, endpoint, e->status, b.s, req_id);
    ds_tbuf_free(&b);
    return rc;
}

static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static bool authorized(ds_server *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key || !s->cfg.api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    return !strcmp(h + 7, s->cfg.api_key);
}

/* ------------------------------------------------------------------ simple endpoints */

static enum MHD_Result h_health(struct MHD_Connection *c, ds_server *s) {
    char b[256];
    if (atomic_load(&s->ready)) {
        snprintf(b, sizeof b, "{\"status\":\"ok\",\"model\":\"%s\",\"instance_id\":\"%s\"}", s->cfg.names[0], s->instance);
        return send_json(c, s, "/health", 200, b, NULL);
    }
    pthread_mutex_lock(&s->mu);
    snprintf(b, sizeof b, "{\"status\":\"starting\",\"phase\":\"%s\"}", s->phase);
    pthread_mutex_unlock(&s->mu);
    return send_json(c, s, "/health", 503, b, NULL);
}

static enum MHD_Result h_models(struct MHD_Connection *c, ds_server *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->cfg.names[0]);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "v41");
    cJSON_AddStringToObject(m, "root", s->cfg.root ? s->cfg.root : "");
    cJSON_AddNumberToObject(m, "max_model_len", (double)s->cfg.max_model_len);
    cJSON_AddItemToArray(d, m);
    enum MHD_Result rc = send_cjson(c, s, "/v1/models", 200, o);
    return rc;
}

static enum MHD_Result h_metrics(struct MHD_Connection *c, ds_server *s) {
    ds_metrics_gauges g;
    memset(&g, 0, sizeof g);
    ds_engine *e = __atomic_load_n(&s->e, __ATOMIC_ACQUIRE);
    if (e) ds_engine_gauges(e, &g);
    g.ready = atomic_load(&s->ready);
    g.spec_enabled = 0;
    ds_tbuf b = {0};
    ds_metrics_render(s->m, &g, &b);
    enum MHD_Result rc = send_text(c, s, "/metrics", 200, "text/plain; version=0.0.4", b.s, b.n, NULL, NULL);
    ds_tbuf_free(&b);
    return rc;
}

static enum MHD_Result h_server_info(struct MHD_Connection *c, ds_server *s) {
    pthread_mutex_lock(&s->mu);
    cJSON *info = cJSON_Parse(s->cfg.server_info_json ? s->cfg.server_info_json : "{}");
    pthread_mutex_unlock(&s->mu);
    if (!info) info = cJSON_CreateObject();
    cJSON_DeleteItemFromObjectCaseSensitive(info, "instance_id");
    cJSON_AddStringToObject(info, "instance_id", s->instance);
    cJSON_AddBoolToObject(info, "ready", atomic_load(&s->ready));
    char *t = cJSON_PrintUnformatted(info);
    enum MHD_Result rc = send_json(c, s, "/server_info", 200, t, NULL);
    free(t);
    cJSON_Delete(info);
    return rc;
}

static enum MHD_Result h_tokenize(struct MHD_Connection *c, ds_server *s, const char *body, size_t len) {
    ds_api_error err = {0};
    cJSON *b = parse_object_body(body, len, &err);
    enum MHD_Result rc;
    ds_tokens toks = {0};
    char *text = NULL;
    if (!b) goto fail;
    if (ds_api_check_model(b, false, &s->lim, &err)) goto fail;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    if (p && cJSON_IsString(p)) {
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(b, "add_special_tokens");
        bool add = !as || !cJSON_IsFalse(as);
        if (ds_api_tokenize_completion(s->tok, p->valuestring, add, &toks, &err)) goto fail;
        text = ds_xstrdup(p->valuestring);
    } else if (cJSON_GetObjectItemCaseSensitive(b, "messages")) {
        bool thinking;
        if (ds_api_encode_chat(s->tok, b, &s->lim, &toks, &text, &thinking, &err)) goto fail;
    } else {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_value", "prompt", "'prompt' (a string) or 'messages' is required");
        goto fail;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)toks.n);
    cJSON_AddNumberToObject(o, "max_model_len", (double)s->cfg.max_model_len);
    cJSON *ta = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < toks.n; i++) cJSON_AddItemToArray(ta, cJSON_CreateNumber(toks.ids[i]));
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(b, "return_text");
    if (rt && cJSON_IsTrue(rt)) cJSON_AddStringToObject(o, "text", text ? text : "");
    rc = send_cjson(c, s, "/tokenize", 200, o);
    goto done;
fail:
    rc = send_error(c, s, "/tokenize", &err, NULL);
done:
    free(text);
    ds_tokens_free(&toks);
    cJSON_Delete(b);
    return rc;
}

static enum MHD_Result h_detokenize(struct MHD_Connection *c, ds_server *s, const char *body, size_t len) {
    ds_api_error err = {0};
    cJSON *b = parse_object_body(body, len, &err);
    enum MHD_Result rc;
    int32_t *ids = NULL;
    if (!b) goto fail;
    if (ds_api_check_model(b, false, &s->lim, &err)) goto fail;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "tokens");
    if (!t || !cJSON_IsArray(t)) {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_type", "tokens", "'tokens' must be a list of token ids");
        goto fail;
    }
    int n = cJSON_GetArraySize(t);
    ids = ds_xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(t, i);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= s->lim.vocab || v->valuedouble != (int32_t)v->valuedouble) {
            ds_api_fail(&err, 400, "invalid_request_error", "invalid_value", "tokens", "'tokens[%d]' is not a token id in [0, %d)", i, s->lim.vocab);
            goto fail;
        }
        ids[i] = (int32_t)v->valuedouble;
    }
    ds_error de = {0};
    char *text = ds_tokenizer_decode(s->tok, ids, (size_t)n, false, NULL, &de);
    if (!text) {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_value", "tokens", "%s", de.msg);
        goto fail;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    rc = send_cjson(c, s, "/detokenize", 200, o);
    goto done;
fail:
    rc = send_error(c, s, "/detokenize", &err, NULL);
done:
    free(ids);
    cJSON_Delete(b);
    return rc;
}

/* ------------------------------------------------------------------ generation */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *sc = cls;
    while (sc->off == sc->out.n) {
        if (sc->finished_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        ds_tbuf_clear(&sc->out);
        sc->off = 0;
        ds_req *r = sc->r;
        pthread_mutex_lock(&r->mu);
        ds_req_wait_locked(r, sc->seen, 0.1);
        sc->seen = r->version;
        ds_resp_consume(&sc->rs, r, &sc->out);
        if (sc->rs.done) sc->finished_sent = true;
        pthread_mutex_unlock(&r->mu);
        if (sc->out.n == 0 && client_gone(sc->fd)) {
            ds_engine_cancel(sc->s->e, r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = DS_MIN(max, sc->out.n - sc->off);
    memcpy(buf, sc->out.s + sc->off, n);
    sc->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    if (!sc->finished_sent) ds_engine_cancel(sc->s->e, sc->r); /* connection ended before the stream did */
    ds_resp_free(&sc->rs);
    ds_req_unref(sc->r);
    ds_tbuf_free(&sc->out);
    free(sc);
}

static enum MHD_Result h_generate(struct MHD_Connection *c, ds_server *s, ds_api_kind kind, const char *endpoint,
                                  const char *body, size_t len) {
    const char *xrid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    ds_api_request ar;
    ds_api_error err = {0};
    if (ds_api_parse_generation(kind, body, len, &s->lim, s->tok, &ar, &err)) {
        ds_api_request_free(&ar);
        return send_error(c, s, endpoint, &err, xrid);
    }
    ds_resp rs;
    ds_resp_init(&rs, &ar, s->tok, s->m, s->cfg.names[0], kind == DS_API_CHAT ? "chatcmpl-" : "cmpl-");
    ds_req *r = ds_req_new(rs.id, ar.prompt.ids, (int64_t)ar.prompt.n, &ar.sp);
    r->skip_special = kind == DS_API_COMPLETIONS ? ar.skip_special : true;
    if (ar.cache_salt) r->cache_salt = ds_xstrdup(ar.cache_salt);
    if (ds_engine_submit(s->e, r)) {
        ds_req_unref(r);
        ds_resp_free(&rs);
        ds_api_fail(&err, 429, "rate_limit_error", "too_many_requests", NULL,
                    "too many pending requests (running + waiting reached --max-pending-requests); retry later");
        ds_api_request_free(&ar);
        return send_error(c, s, endpoint, &err, xrid);
    }
    if (xrid) ds_log(DS_LOG_INFO, "request %s X-Request-Id %s", r->id, xrid);
    if (s->cfg.log_requests) {
        const char *pt = ar.prompt_text ? ar.prompt_text : "";
        int n = (int)DS_MIN(strlen(pt), (size_t)s->cfg.max_log_len);
        ds_log(DS_LOG_INFO, "request %s %s prompt_tokens=%zu max_tokens=%lld stream=%d prompt=\"%.*s\"%s", r->id, endpoint,
               ar.prompt.n, (long long)ar.sp.max_tokens, ar.stream, n, pt, (size_t)n < strlen(pt) ? "..." : "");
    }
    int fd = conn_fd(c);
    enum MHD_Result rc;
    if (ar.stream) {
        stream_ctx *sc = ds_xcalloc(1, sizeof *sc);
        sc->s = s;
        sc->r = r;
        sc->rs = rs;
        sc->fd = fd;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, sc, stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        if (xrid) MHD_add_response_header(resp, "X-Request-Id", xrid);
        if (ar.ignored_fields.n) MHD_add_response_header(resp, "x-ignored-fields", ar.ignored_fields.s);
        rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        ds_metrics_inc_http(s->m, endpoint, 200);
        ds_api_request_free(&ar);
        return rc;
    }
    /* non-streaming: wait in 100 ms slices, watching the client */
    pthread_mutex_lock(&r->mu);
    while (!r->finished) {
        ds_req_wait_locked(r, r->version, 0.1);
        ds_resp_consume(&rs, r, NULL);
        if (!r->finished && client_gone(fd)) {
            pthread_mutex_unlock(&r->mu);
            ds_engine_cancel(s->e, r);
            pthread_mutex_lock(&r->mu);
            while (!r->finished) ds_req_wait_locked(r, r->version, 0.1);
            break;
        }
    }
    ds_resp_consume(&rs, r, NULL);
    ds_tbuf out = {0};
    int status = 200;
    if (r->end == DS_END_ERROR || r->end == DS_END_CANCELLED) {
        status = r->err_status ? r->err_status : 500;
        ds_api_fail(&err, status == 499 ? 500 : status, status == 503 ? "service_unavailable" : "server_error",
                    r->err_code[0] ? r->err_code : "internal_error", NULL, "%s", r->err_msg);
        status = err.status;
        ds_api_error_json(&err, &out);
    } else {
        ds_resp_render(&rs, r, &out);
    }
    pthread_mutex_unlock(&r->mu);
    rc = send_text(c, s, endpoint, status, "application/json", out.s, out.n, xrid, ar.ignored_fields.s);
    ds_tbuf_free(&out);
    ds_resp_free(&rs);
    ds_req_unref(r);
    ds_api_request_free(&ar);
    return rc;
}

/* ------------------------------------------------------------------ dispatch */

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ds_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = ds_xcalloc(1, sizeof *cc);
        *con_cls = cc;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) cc->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_large) {
            if (cc->body.n + *upload_size > s->cfg.max_body) {
                cc->too_large = true;
                ds_tbuf_free(&cc->body);
            } else {
                ds_tbuf_append(&cc->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    ds_api_error err = {0};
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") && get) return h_health(c, s);
    if (!strcmp(url, "/metrics") && get) return h_metrics(c, s);
    if (cc->too_large) {
        ds_api_fail(&err, 413, "invalid_request_error", "request_too_large", NULL,
                    "request body exceeds --max-request-body (%llu bytes)", (unsigned long long)s->cfg.max_body);
        return send_error(c, s, url, &err, NULL);
    }
    bool guarded = !strncmp(url, "/v1/", 4) || !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") ||
                   !strcmp(url, "/reset_prefix_cache");
    if (guarded && !authorized(s, c)) {
        ds_api_fail(&err, 401, "authentication_error", "invalid_api_key", NULL, "missing or invalid API key");
        return send_error(c, s, url, &err, NULL);
    }
    if (!atomic_load(&s->ready)) {
        ds_api_fail(&err, 503, "service_unavailable", "not_ready", NULL, "the server is starting; see /health");
        return send_error(c, s, url, &err, NULL);
    }
    const char *body = cc->body.s ? cc->body.s : "";
    size_t blen = cc->body.n;
    if (!strcmp(url, "/v1/models") && get) return h_models(c, s);
    if (!strcmp(url, "/server_info") && get) return h_server_info(c, s);
    if (!strcmp(url, "/v1/chat/completions") && post) return h_generate(c, s, DS_API_CHAT, "/v1/chat/completions", body, blen);
    if (!strcmp(url, "/v1/completions") && post) return h_generate(c, s, DS_API_COMPLETIONS, "/v1/completions", body, blen);
    if (!strcmp(url, "/tokenize") && post) return h_tokenize(c, s, body, blen);
    if (!strcmp(url, "/detokenize") && post) return h_detokenize(c, s, body, blen);
    if (!strcmp(url, "/reset_prefix_cache") && post && s->cfg.dev_endpoints) {
        ds_engine_reset_prefix_cache(s->e);
        return send_json(c, s, "/reset_prefix_cache", 200, "{\"status\":\"ok\"}", NULL);
    }
    ds_api_fail(&err, 404, "not_found_error", "not_found", NULL, "no endpoint %s %s", method, url);
    return send_error(c, s, "other", &err, NULL);
}

static void completed_cb(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    ds_tbuf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

/* libmicrohttpd's own messages (a client that went away mid-response, ...) are routine here;
 * they go to the debug log instead of stderr. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    if (ds_log_level() < DS_LOG_DEBUG) return;
    char b[512];
    vsnprintf(b, sizeof b, fmt, ap);
    size_t n = strlen(b);
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r')) b[--n] = 0;
    ds_log(DS_LOG_DEBUG, "http: %s", b);
}

ds_server *ds_server_start(const ds_server_config *cfg, ds_engine *e, const ds_tokenizer *tok, ds_metrics *m,
                           ds_error *err) {
    ds_server *s = ds_xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    s->e = e;
    s->tok = tok;
    s->m = m;
    s->lim.model_names = cfg->names;
    s->lim.n_model_names = cfg->n_names;
    s->lim.max_model_len = cfg->max_model_len;
    s->lim.vocab = tok ? ds_tokenizer_vocab_size(tok) : 0;
    s->lim.default_thinking = cfg->default_thinking;
    s->lim.limit_images = cfg->limit_images;
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->phase, sizeof s->phase, "starting");
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        ds_fail(err, "E_USAGE", "--host %s: expected an IPv4 address", cfg->host);
        free(s);
        return NULL;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                            (uint16_t)cfg->port, NULL, NULL, access_cb, s, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(cfg->max_connections > 0 ? cfg->max_connections : 2048),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)0,
                            MHD_OPTION_END);
    if (!s->d) {
        ds_fail(err, "E_PORT", "cannot listen on %s:%d (port taken or not permitted)", cfg->host, cfg->port);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    return s;
}

void ds_server_set_engine(ds_server *s, ds_engine *e, int64_t max_model_len) {
    s->cfg.max_model_len = max_model_len;
    s->lim.max_model_len = max_model_len;
    __atomic_store_n(&s->e, e, __ATOMIC_RELEASE);
}

void ds_server_set_info(ds_server *s, const char *server_info_json) {
    pthread_mutex_lock(&s->mu);
    s->cfg.server_info_json = server_info_json;
    pthread_mutex_unlock(&s->mu);
}

void ds_server_set_phase(ds_server *s, const char *phase) {
    pthread_mutex_lock(&s->mu);
    snprintf(s->phase, sizeof s->phase, "%s", phase);
    pthread_mutex_unlock(&s->mu);
}

void ds_server_set_ready(ds_server *s, const char *instance_id) {
    snprintf(s->instance, sizeof s->instance, "%s", instance_id);
    atomic_store(&s->ready, true);
}

int ds_server_port(const ds_server *s) { return s->port; }

void ds_server_stop(ds_server *s) {
    if (!s) return;
    atomic_store(&s->ready, false);
    MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ------------------------------------------------------------------ detokenizer glue */

static void *dt_open(void *ctx) { return ds_detok_stream_new(ctx, false); }
static const char *dt_push(void *st, int32_t id, size_t *len) {
    ds_error e;
    const char *t = ds_detok_stream_push(st, id, len, &e);
    if (!t) *len = 0;
    return t;
}
static const char *dt_flush(void *st, size_t *len) { return ds_detok_stream_flush(st, len); }
static void dt_close(void *st) { ds_detok_stream_free(st); }

ds_detok_ops ds_server_detok_ops(const ds_tokenizer *tok) {
    ds_detok_ops o = {(void *)tok, dt_open, dt_push, dt_flush, dt_close};
    return o;
}
