/* HTTP front end on libmicrohttpd (see server.h for the threading model): the daemon, its
 * listening socket, routing, authentication, connection deadlines and the shutdown drain.
 *
 * Flow of one request: the access handler accumulates the body (413 past --max-request-body:
 * after reading and dropping the body, or at once for Expect: 100-continue or a declared length
 * past 1 GiB; answer_413_at_once), then routes: method check (405 with
 * Allow), authentication (§10.1), readiness/draining, and the endpoint (http_endpoints.c,
 * http_generate.c).
 *
 * Why the listening socket is ours: it carries SO_REUSEADDR (a restart right after SIGTERM must
 * bind while old connections linger in TIME_WAIT) but not SO_REUSEPORT (two servers must never
 * share a port), and the drain closes it first so a successor can bind while we finish.
 *
 * Why a reaper thread: libmicrohttpd's timeout only counts silence, so a client that trickles one
 * byte every few seconds would hold a connection thread for ever.  Each connection gets a
 * deadline: its request (headers and body) must be complete within --http-timeout of the
 * connection opening or of the previous response; past it the reaper shuts the socket down. */
#define _GNU_SOURCE
#include "server/http_internal.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* ------------------------------------------------------------------ reply helpers */

enum MHD_Result ds_http_send_text(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status,
                                  const char *ctype, const char *body, size_t len, const char *req_id,
                                  const char *ignored) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", ctype);
    if (req_id) MHD_add_response_header(r, "X-Request-Id", req_id);
    if (ignored && ignored[0]) MHD_add_response_header(r, "x-ignored-fields", ignored);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 429) MHD_add_response_header(r, "Retry-After", "1");
    if (atomic_load(&s->draining)) MHD_add_response_header(r, "Connection", "close");
    ds_http_cors_headers(s, c, r);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    ds_metrics_inc_http(s->m, endpoint, status);
    return rc;
}

enum MHD_Result ds_http_send_json(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status,
                                  const char *json, const char *req_id) {
    return ds_http_send_text(c, s, endpoint, status, "application/json", json, strlen(json), req_id, NULL);
}

enum MHD_Result ds_http_send_cjson(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status, cJSON *o) {
    ds_tbuf b = {0};
    ds_json_print(o, &b);
    enum MHD_Result rc = ds_http_send_text(c, s, endpoint, status, "application/json", b.s, b.n, NULL, NULL);
    ds_tbuf_free(&b);
    cJSON_Delete(o);
    return rc;
}

cJSON *ds_http_parse_object_body(const char *body, size_t len, ds_json_capture *cap, ds_api_error *err) {
    ds_error pe = {0};
    cJSON *b = ds_json_parse_capture(body, len, cap, &pe);
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

enum MHD_Result ds_http_send_error(struct MHD_Connection *c, ds_server *s, const char *endpoint, const ds_api_error *e,
                                   const char *req_id) {
    ds_tbuf b = {0};
    ds_api_error_json(e, &b);
    if (e->status != 404 || strcmp(e->code, "not_found")) ds_metrics_inc_rejected(s->m, e->code);
    enum MHD_Result rc = ds_http_send_json(c, s, endpoint, e->status, b.s, req_id);
    ds_tbuf_free(&b);
    return rc;
}

bool ds_http_client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

int ds_http_conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* "Authorization: Bearer KEY": the scheme is case-insensitive (RFC 7235), the key is not. */
static bool authorized(ds_server *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key || !s->cfg.api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer", 6) || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    return !strcmp(h, s->cfg.api_key);
}

/* ------------------------------------------------------------------ connection deadlines */

typedef struct conn_slot {
    struct MHD_Connection *c;
    int fd;
    double deadline;
    bool receiving, reaped;
} conn_slot;

static pthread_mutex_t g_conn_mu = PTHREAD_MUTEX_INITIALIZER; /* guards the slots of every server */

typedef struct conn_table {
    conn_slot *v;
    int n, cap;
} conn_table;

static conn_table *table_of(ds_server *s);

static conn_slot *slot_find(conn_table *t, struct MHD_Connection *c) {
    for (int i = 0; i < t->n; i++)
        if (t->v[i].c == c) return &t->v[i];
    return NULL;
}

/* The connection now waits for (receiving) or has received (!receiving) a request. */
static void conn_mark(ds_server *s, struct MHD_Connection *c, bool receiving) {
    pthread_mutex_lock(&g_conn_mu);
    conn_slot *sl = slot_find(table_of(s), c);
    if (sl) {
        sl->receiving = receiving;
        sl->deadline = ds_now() + s->cfg.http_timeout_s;
    }
    pthread_mutex_unlock(&g_conn_mu);
}

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code) {
    ds_server *s = cls;
    (void)socket_ctx;
    pthread_mutex_lock(&g_conn_mu);
    conn_table *t = table_of(s);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        if (t->n == t->cap) t->v = ds_xrealloc(t->v, sizeof(conn_slot) * (size_t)(t->cap = t->cap ? t->cap * 2 : 64));
        t->v[t->n++] = (conn_slot){c, ds_http_conn_fd(c), ds_now() + s->cfg.http_timeout_s, true, false};
    } else {
        conn_slot *sl = slot_find(t, c);
        if (sl) *sl = t->v[--t->n]; /* before libmicrohttpd closes the fd: the reaper never sees a reused one */
    }
    pthread_mutex_unlock(&g_conn_mu);
}

static void *reaper_main(void *arg) {
    ds_server *s = arg;
    while (!atomic_load(&s->reaper_stop)) {
        usleep(200000);
        double now = ds_now();
        pthread_mutex_lock(&g_conn_mu);
        conn_table *t = table_of(s);
        for (int i = 0; i < t->n; i++) {
            conn_slot *sl = &t->v[i];
            if (!sl->receiving || sl->reaped || now < sl->deadline || sl->fd < 0) continue;
            shutdown(sl->fd, SHUT_RDWR); /* the connection thread sees EOF and closes it */
            sl->reaped = true;
            ds_log(DS_LOG_DEBUG, "http: connection closed: request not received within --http-timeout %gs", s->cfg.http_timeout_s);
        }
        pthread_mutex_unlock(&g_conn_mu);
    }
    return NULL;
}

static conn_table *table_of(ds_server *s) { return s->conns; }

/* ------------------------------------------------------------------ dispatch */

typedef struct route {
    const char *path;
    const char *allow;   /* methods, as the Allow header lists them */
} route;

/* Known paths and their methods: a known path with another method is 405, not 404. */
static const route k_routes[] = {
    {"/health", "GET, HEAD"},       {"/metrics", "GET, HEAD"},           {"/version", "GET, HEAD"},
    {"/v1/models", "GET, HEAD"},    {"/server_info", "GET, HEAD"},       {"/v1/chat/completions", "POST"},
    {"/v1/completions", "POST"},    {"/tokenize", "POST"},               {"/detokenize", "POST"},
    {"/reset_prefix_cache", "POST"},
};

static const route *find_route(const char *url) {
    for (size_t i = 0; i < DS_ARRAY_LEN(k_routes); i++)
        if (!strcmp(url, k_routes[i].path)) return &k_routes[i];
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return &k_routes[3];
    return NULL;
}

static enum MHD_Result method_not_allowed(struct MHD_Connection *c, ds_server *s, const route *rt, const char *method) {
    ds_api_error err;
    ds_api_fail(&err, 405, "invalid_request_error", "method_not_allowed", NULL, "%s is not allowed on %s; use %s", method,
                rt->path, rt->allow);
    ds_tbuf b = {0};
    ds_api_error_json(&err, &b);
    struct MHD_Response *r = MHD_create_response_from_buffer(b.n, b.s, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Allow", rt->allow);
    ds_http_cors_headers(s, c, r);
    enum MHD_Result rc = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    ds_metrics_inc_http(s->m, "other", 405);
    ds_tbuf_free(&b);
    return rc;
}

/* Accumulate the body; true once the whole request is here. */
static bool receive_body(ds_server *s, conn_ctx *cc, const char *upload, size_t *upload_size) {
    if (!*upload_size) return true;
    if (!cc->too_large) {
        if (cc->body.n + *upload_size > s->cfg.max_body) {
            cc->too_large = true;
            ds_tbuf_free(&cc->body);
        } else {
            ds_tbuf_append(&cc->body, upload, *upload_size);
        }
    }
    *upload_size = 0;
    return false;
}

static enum MHD_Result route_request(struct MHD_Connection *c, ds_server *s, conn_ctx *cc, const char *url,
                                     const char *method) {
    ds_api_error err = {0};
    const route *rt = find_route(url);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (rt && !strcmp(method, "OPTIONS")) return ds_http_preflight(c, s, rt->allow);   /* no key: browsers send none */
    if (rt && !(strstr(rt->allow, "GET") ? get : post)) return method_not_allowed(c, s, rt, method);
    const char *ep = rt ? rt->path : "other"; /* metrics label: known paths only */
    if (!strcmp(url, "/health")) return ds_http_health(c, s);
    if (!strcmp(url, "/metrics")) return ds_http_metrics(c, s);
    if (!strcmp(url, "/version")) return ds_http_version(c, s);
    if (cc->too_large) {
        ds_api_fail(&err, 413, "invalid_request_error", "request_too_large", NULL,
                    "request body exceeds --max-request-body (%llu bytes)", (unsigned long long)s->cfg.max_body);
        return ds_http_send_error(c, s, ep, &err, NULL);
    }
    if (rt && !authorized(s, c)) { /* every endpoint but /health, /metrics and /version */
        ds_api_fail(&err, 401, "authentication_error", "invalid_api_key", NULL, "missing or invalid API key");
        return ds_http_send_error(c, s, ep, &err, NULL);
    }
    if (atomic_load(&s->draining)) {
        ds_api_fail(&err, 503, "service_unavailable", "not_ready", NULL, "the server is shutting down");
        return ds_http_send_error(c, s, ep, &err, NULL);
    }
    if (!atomic_load(&s->ready)) {
        ds_api_fail(&err, 503, "service_unavailable", "not_ready", NULL, "the server is starting; see /health");
        return ds_http_send_error(c, s, ep, &err, NULL);
    }
    const char *body = cc->body.s ? cc->body.s : "";
    size_t blen = cc->body.n;
    if (!strcmp(url, "/v1/models")) return ds_http_models(c, s, NULL);
    if (!strncmp(url, "/v1/models/", 11)) return ds_http_models(c, s, url + 11);
    if (!strcmp(url, "/server_info")) return ds_http_server_info(c, s);
    if (!strcmp(url, "/v1/chat/completions")) return ds_http_generate(c, s, DS_API_CHAT, ep, body, blen);
    if (!strcmp(url, "/v1/completions")) return ds_http_generate(c, s, DS_API_COMPLETIONS, ep, body, blen);
    if (!strcmp(url, "/tokenize")) return ds_http_tokenize(c, s, body, blen);
    if (!strcmp(url, "/detokenize")) return ds_http_detokenize(c, s, body, blen);
    if (!strcmp(url, "/reset_prefix_cache") && s->cfg.dev_endpoints) {
        ds_engine_reset_prefix_cache(s->e);
        return ds_http_send_json(c, s, "/reset_prefix_cache", 200, "{\"status\":\"ok\"}", NULL);
    }
    ds_api_fail(&err, 404, "not_found_error", "not_found", NULL, "no endpoint %s %s", method, url);
    return ds_http_send_error(c, s, "other", &err, NULL);
}

/* A body over --max-request-body is normally read and dropped before the 413 goes out: replying
 * first makes libmicrohttpd close the socket with the body unread, and the client's write then
 * fails (EPIPE, connection reset) before it reads the reply, so the user sees a broken pipe
 * instead of the reason.  The reply goes out at once when the client waits for it before sending
 * (Expect: 100-continue) or declares more than DRAIN_MAX_BYTES (and twice --max-request-body):
 * a declared 100 GB upload was otherwise drained until --http-timeout cut it off, with no reply. */
#define DRAIN_MAX_BYTES (1ull << 30)
static bool answer_413_at_once(const ds_server *s, struct MHD_Connection *c, unsigned long long declared) {
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
    if (expect && !strcasecmp(expect, "100-continue")) return true;
    const unsigned long long drain_limit = s->cfg.max_body > DRAIN_MAX_BYTES ? 2 * s->cfg.max_body : DRAIN_MAX_BYTES;
    return declared > drain_limit;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ds_server *s = cls;
    conn_ctx *cc = *con_cls;
    (void)version;
    if (!cc) {
        cc = ds_xcalloc(1, sizeof *cc);
        *con_cls = cc;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        const unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        if (declared <= s->cfg.max_body) return MHD_YES;
        cc->too_large = true;
        if (!answer_413_at_once(s, c, declared)) return MHD_YES;   /* read and dropped, then 413 */
        conn_mark(s, c, false);
        return route_request(c, s, cc, url, method);
    }
    if (!receive_body(s, cc, upload, upload_size)) return MHD_YES;
    conn_mark(s, c, false); /* the whole request is here: its time is the handler's now */
    return route_request(c, s, cc, url, method);
}

static void completed_cb(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    ds_server *s = cls;
    conn_ctx *cc = *con_cls;
    (void)toe;
    conn_mark(s, c, true); /* keep-alive: the next request has its own deadline */
    if (!cc) return;
    ds_tbuf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

/* libmicrohttpd's own messages (a client that went away mid-response, ...) are routine here;
 * they go to the debug log instead of stderr. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    if (ds_log_level() < DS_LOG_DEBUG) return;
    char b[512];
    vsnprintf(b, sizeof b, fmt, ap);
    size_t n = strlen(b);
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r')) b[--n] = 0;
    ds_log(DS_LOG_DEBUG, "http: %s", b);
}

/* ------------------------------------------------------------------ lifecycle */

/* SO_REUSEADDR (restart over TIME_WAIT) without SO_REUSEPORT (no port sharing). */
static int open_listener(const ds_server_config *cfg, ds_error *err) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        ds_fail(err, "E_USAGE", "--host %s: expected an IPv4 address", cfg->host);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 512)) {
        ds_fail(err, "E_PORT", "cannot listen on %s:%d: %s (port taken or not permitted)", cfg->host, cfg->port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

ds_server *ds_server_start(const ds_server_config *cfg, ds_engine *e, const ds_tokenizer *tok, ds_metrics *m,
                           ds_error *err) {
    int lfd = open_listener(cfg, err);
    if (lfd < 0) return NULL;
    ds_server *s = ds_xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    if (s->cfg.http_timeout_s <= 0) s->cfg.http_timeout_s = 30;
    s->e = e;
    s->tok = tok;
    s->m = m;
    s->listen_fd = lfd;
    s->conns = ds_xcalloc(1, sizeof *s->conns);
    s->lim.model_names = cfg->names;
    s->lim.n_model_names = cfg->n_names;
    s->lim.max_model_len = cfg->max_model_len;
    s->lim.vocab = tok ? ds_tokenizer_vocab_size(tok) : 0;
    s->lim.default_thinking = cfg->default_thinking;
    s->lim.limit_images = cfg->limit_images;
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->phase, sizeof s->phase, "starting");
    /* one thread per connection, so --http-threads bounds connections and threads alike */
    unsigned limit = (unsigned)(cfg->http_threads > 0 ? cfg->http_threads : cfg->max_connections > 0 ? cfg->max_connections : 2048);
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC,
                            0, NULL, NULL, access_cb, s, MHD_OPTION_LISTEN_SOCKET, lfd,
                            MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s, MHD_OPTION_NOTIFY_CONNECTION, notify_conn, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->cfg.http_timeout_s + 0.999), MHD_OPTION_END);
    if (!s->d) {
        ds_fail(err, "E_PORT", "cannot start the HTTP server on %s:%d", cfg->host, cfg->port);
        close(lfd);
        pthread_mutex_destroy(&s->mu);
        free(s->conns);
        free(s);
        return NULL;
    }
    struct sockaddr_in bound;
    socklen_t bl = sizeof bound;
    s->port = getsockname(lfd, (struct sockaddr *)&bound, &bl) == 0 ? ntohs(bound.sin_port) : cfg->port;
    s->reaper_started = pthread_create(&s->reaper, NULL, reaper_main, s) == 0;
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

int ds_server_drain(ds_server *s, double timeout_s) {
    if (!s) return 0;
    atomic_store(&s->draining, true);
    MHD_socket q = MHD_quiesce_daemon(s->d); /* no new connections; the port is free for a successor */
    if (q != MHD_INVALID_SOCKET) close(q);
    s->listen_fd = -1;
    double deadline = ds_now() + (timeout_s > 0 ? timeout_s : 0);
    while (atomic_load(&s->active) > 0 && ds_now() < deadline) usleep(20000);
    int left = atomic_load(&s->active);
    if (left) {
        ds_log(DS_LOG_INFO, "shutdown: drain deadline %gs passed; ending %d running request(s) with finish_reason abort",
               timeout_s, left);
        atomic_store(&s->aborting, true);
        double hard = ds_now() + 30; /* cancellation takes effect at the next engine step */
        while (atomic_load(&s->active) > 0 && ds_now() < hard) usleep(20000);
    }
    return left;
}

void ds_server_stop(ds_server *s) {
    if (!s) return;
    atomic_store(&s->ready, false);
    atomic_store(&s->draining, true);
    atomic_store(&s->aborting, true); /* handlers still waiting end now instead of blocking the join */
    MHD_stop_daemon(s->d); /* closes the listening socket unless the drain already did */
    atomic_store(&s->reaper_stop, true);
    if (s->reaper_started) pthread_join(s->reaper, NULL);
    free(s->conns->v);
    free(s->conns);
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
static bool dt_is_special(void *ctx, int32_t id) {
    bool special = false;
    return ds_tokenizer_is_added(ctx, id, &special) && special;
}

ds_detok_ops ds_server_detok_ops(const ds_tokenizer *tok) {
    ds_detok_ops o = {(void *)tok, dt_open, dt_push, dt_flush, dt_close, dt_is_special};
    return o;
}
