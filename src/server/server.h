/* The OpenAI-compatible HTTP front end (SERVING.md §10) on libmicrohttpd.
 *
 * Why it is built this way: libmicrohttpd runs one thread per connection here, so a handler may
 * block while its request is generated: a non-streaming handler waits on the request's condition
 * variable in 100 ms slices, and a streaming response's reader callback does the same, checking
 * the client socket (POLLRDHUP) between slices so a vanished client cancels its request within
 * 100 ms even during prefill (§10.6).  The engine never touches a socket.  Everything else —
 * validation, response shapes, errors — lives in api*.c and response.c so it can be unit-tested
 * without sockets. */
#ifndef DS_SERVER_SERVER_H
#define DS_SERVER_SERVER_H
#include "base/common.h"
#include "dsflash.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#define DS_SERVER_VERSION DSFLASH_VERSION

typedef struct ds_server ds_server;

typedef struct ds_server_config {
    const char *host;
    int port;
    const char *api_key;             /* NULL: no authentication */
    const char *const *names;        /* served name first, then aliases */
    int n_names;
    const char *root;                /* checkpoint name for /v1/models */
    int64_t max_model_len;
    uint64_t max_body;               /* bytes; larger bodies get 413 */
    int http_threads;                /* most simultaneous connections = connection threads (0: max_connections) */
    int max_connections;
    double http_timeout_s;           /* a request must arrive within this of connecting / the last reply (0: 30) */
    bool dev_endpoints;
    bool default_thinking;
    int limit_images;
    const char *server_info_json;    /* effective configuration object (text) */
    bool log_requests;               /* one INFO line per generation request */
    int max_log_len;                 /* prompt characters in that line */
    const char *allowed_origins;     /* CORS: "*", "none" or a comma list of origins (http_cors.c) */
} ds_server_config;

ds_server *ds_server_start(const ds_server_config *cfg, ds_engine *e, const ds_tokenizer *tok, ds_metrics *m,
                           ds_error *err);
/* The listener may start before the engine exists (model loading): /health then answers 503
 * with the phase, everything else 503 not_ready.  Attach the engine once it is built. */
void ds_server_set_engine(ds_server *s, ds_engine *e, int64_t max_model_len);
void ds_server_set_info(ds_server *s, const char *server_info_json);
/* Before READY: /health answers 503 {"status":"starting","phase":phase}. */
void ds_server_set_phase(ds_server *s, const char *phase);
void ds_server_set_ready(ds_server *s, const char *instance_id);
/* Graceful shutdown, first half: stop accepting (the listening socket is closed, so a new
 * server can bind at once), answer /health 503 and new requests 503, and let running requests
 * finish for up to timeout_s; then end the rest (streams: finish_reason "abort" + [DONE];
 * whole replies: 503).  Returns how many requests were still running at the deadline.  Call
 * ds_server_stop afterwards. */
int ds_server_drain(ds_server *s, double timeout_s);
void ds_server_stop(ds_server *s);
/* 0 when `spec` is "*", "none" or a comma list of origins (scheme://host[:port]); else -1 with why. */
int ds_cors_check_origins(const char *spec, char *why, size_t why_len);
/* The bound port (useful with port 0). */
int ds_server_port(const ds_server *s);

/* Engine detokenizer callbacks over the tokenizer's incremental decoder. */
ds_detok_ops ds_server_detok_ops(const ds_tokenizer *tok);

#endif
