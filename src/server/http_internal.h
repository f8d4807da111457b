/* Shared state and helpers of the HTTP front end (http.c: daemon, routing, lifecycle;
 * http_endpoints.c: the small endpoints; http_generate.c: generation).
 *
 * Why a private header: the three files need the same server object and the same few
 * reply helpers, and nothing outside src/server should see either. */
#ifndef DS_SERVER_HTTP_INTERNAL_H
#define DS_SERVER_HTTP_INTERNAL_H
#include "server/api.h"
#include "server/response.h"
#include "server/server.h"
#include <microhttpd.h>
#include <stdatomic.h>

struct conn_table;

struct ds_server {
    ds_server_config cfg;
    struct MHD_Daemon *d;
    ds_engine *e;
    const ds_tokenizer *tok;
    ds_metrics *m;
    ds_api_limits lim;
    atomic_bool ready;
    atomic_bool draining;     /* SIGTERM seen: no new work, /health 503 */
    atomic_bool aborting;     /* drain deadline passed: running requests end now */
    atomic_int active;        /* generation requests whose response is not finished */
    int listen_fd;            /* ours (SO_REUSEADDR); closed when draining starts */
    pthread_mutex_t mu;
    char phase[64];
    char instance[64];
    int port;
    struct conn_table *conns; /* open connections and their request deadlines (http.c) */
    pthread_t reaper;         /* closes connections whose request stalls past --http-timeout */
    bool reaper_started;
    atomic_bool reaper_stop;
};

/* Per-request state: the body being received. */
typedef struct conn_ctx {
    ds_tbuf body;
    bool too_large;
} conn_ctx;

enum MHD_Result ds_http_send_text(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status,
                                  const char *ctype, const char *body, size_t len, const char *req_id,
                                  const char *ignored);
enum MHD_Result ds_http_send_json(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status,
                                  const char *json, const char *req_id);
/* Send a cJSON value (NUL-safe text via ds_json_print) and free it. */
enum MHD_Result ds_http_send_cjson(struct MHD_Connection *c, ds_server *s, const char *endpoint, int status, cJSON *o);
enum MHD_Result ds_http_send_error(struct MHD_Connection *c, ds_server *s, const char *endpoint,
                                   const ds_api_error *e, const char *req_id);
/* The body as one JSON object, or NULL with a 400 in err. */
cJSON *ds_http_parse_object_body(const char *body, size_t len, ds_json_capture *cap, ds_api_error *err);
bool ds_http_client_gone(int fd);
int ds_http_conn_fd(struct MHD_Connection *c);

/* CORS (http_cors.c): the Access-Control headers of an answer to this connection's Origin, and
 * the answer to an OPTIONS preflight of a path serving `methods`. */
void ds_http_cors_headers(const ds_server *s, struct MHD_Connection *c, struct MHD_Response *r);
enum MHD_Result ds_http_preflight(struct MHD_Connection *c, ds_server *s, const char *methods);

enum MHD_Result ds_http_health(struct MHD_Connection *c, ds_server *s);
enum MHD_Result ds_http_models(struct MHD_Connection *c, ds_server *s, const char *one_id);
enum MHD_Result ds_http_version(struct MHD_Connection *c, ds_server *s);
enum MHD_Result ds_http_metrics(struct MHD_Connection *c, ds_server *s);
enum MHD_Result ds_http_server_info(struct MHD_Connection *c, ds_server *s);
enum MHD_Result ds_http_tokenize(struct MHD_Connection *c, ds_server *s, const char *body, size_t len);
enum MHD_Result ds_http_detokenize(struct MHD_Connection *c, ds_server *s, const char *body, size_t len);
enum MHD_Result ds_http_generate(struct MHD_Connection *c, ds_server *s, ds_api_kind kind, const char *endpoint,
                                 const char *body, size_t len);

#endif
