/* A small client for OpenAI-compatible servers, on libcurl: the one HTTP layer of the operator's
 * tools (bench, needle, kv-walk, the gates: TOOLS.md §0, §4-6).
 *
 * Why one layer: every tool needs the same four things — a JSON POST with a timeout, a streaming
 * (SSE) POST whose events carry arrival times, a GET, and a way to stop in-flight requests — and
 * the same rules: connect straight to the host in the URL, never through a proxy named by the
 * environment (a proxy once answered 127.0.0.1 health checks with HTML 503), and an optional
 * bearer key.  A request either gets an HTTP answer (any status: the caller judges it) or fails at
 * the transport level with a message naming the URL and the reason (refused, timeout, cancelled).
 *
 * Threads: a ds_http_client is read-only after ds_http_client_init and may be shared by threads;
 * each call uses its own curl handle.  The cancel flag, when set (non-zero) by any thread, makes
 * every running and later request of that client fail promptly with "cancelled". */
#ifndef DS_TOOLS_HTTP_CLIENT_H
#define DS_TOOLS_HTTP_CLIENT_H
#include <stddef.h>

typedef struct ds_http_client {
    char base_url[512];         /* "http://127.0.0.1:8000", no trailing slash */
    char auth_header[600];      /* "Authorization: Bearer KEY", or empty */
    double connect_timeout_s;   /* default 10 s */
    const int *cancel;          /* optional; read atomically */
} ds_http_client;

typedef struct ds_http_response {
    long status;                /* HTTP status; 0 when no answer came */
    char *body;                 /* NUL-terminated (never NULL after a call); for SSE: the body only when
                                 * the answer was not an event stream (an error document) */
    size_t len;
    char error[320];            /* transport failure text, empty when an answer came */
} ds_http_response;

/* Called once per SSE event with its `data:` payload (multi-line data joined by '\n', NUL-terminated)
 * and the monotonic time (ds_now()) at which the bytes completing the event arrived.  Return 0 to
 * continue, non-zero to stop the stream (the call then fails with "stopped by the caller"). */
typedef int (*ds_sse_event_fn)(void *user, const char *data, size_t len, double t_arrival);

/* 0 ok; -1 with `why` when base_url is not an http:// or https:// URL.  api_key may be NULL. */
int ds_http_client_init(ds_http_client *c, const char *base_url, const char *api_key, const int *cancel,
                        char *why, size_t why_len);

/* `url` is a path starting with '/' (appended to base_url) or a full http(s):// URL.  timeout_s
 * bounds the whole request.  Each returns 0 when an HTTP answer came (r->status set, whatever it is)
 * and -1 on a transport failure (r->error says which); r must be freed with ds_http_response_free
 * in both cases. */
int ds_http_get(const ds_http_client *c, const char *url, double timeout_s, ds_http_response *r);
int ds_http_post_json(const ds_http_client *c, const char *url, const char *json, double timeout_s,
                      ds_http_response *r);
/* Streaming POST: `Accept: text/event-stream`; events go to `fn` as they arrive.  A non-2xx answer
 * is not parsed as events: its body lands in r->body. */
int ds_http_post_sse(const ds_http_client *c, const char *url, const char *json, double timeout_s,
                     ds_sse_event_fn fn, void *user, ds_http_response *r);
void ds_http_response_free(ds_http_response *r);

#endif
