/* Cross-origin requests (CORS) for browser clients: `serve --allowed-origins`.
 *
 * Why: a chat UI running in a browser page (another port, another host) may call the API only if
 * the answers carry Access-Control-Allow-Origin, and it first sends an OPTIONS "preflight" for
 * every POST with a JSON body or an Authorization header.  Without this, such a UI fails with a
 * CORS error before our server sees the real request (OPTIONS was a 405).  The default, `*`,
 * is what vLLM's server does, so UIs made for it work unchanged; `none` sends no CORS headers,
 * and a list admits those origins only (echoed back, with Vary: Origin).  The preflight needs no
 * API key (browsers never send credentials with it); the real request still does. */
#include "server/http_internal.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* One origin: http or https, a host, an optional port, nothing after it. */
static bool origin_ok(const char *o, size_t n) {
    const char *rest;
    if (n > 7 && !strncmp(o, "http://", 7)) rest = o + 7;
    else if (n > 8 && !strncmp(o, "https://", 8)) rest = o + 8;
    else return false;
    for (const char *p = rest; p < o + n; p++)
        if (*p == '/' || *p == ' ' || *p == '*' || (unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) return false;
    return rest < o + n;
}

int ds_cors_check_origins(const char *spec, char *why, size_t wn) {
    if (!strcmp(spec, "*") || !strcmp(spec, "none")) return 0;
    for (const char *p = spec;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!origin_ok(p, n)) {
            snprintf(why, wn, "expected *, none or a comma list of origins such as https://chat.example:8443 (scheme, "
                              "host, optional port; no path), found '%.*s'", (int)(n > 200 ? 200 : n), p);
            return -1;
        }
        if (!e) return 0;
        p = e + 1;
    }
}

/* The value of Access-Control-Allow-Origin for this request's Origin, or NULL (no header). */
static const char *allowed_origin(const ds_server *s, struct MHD_Connection *c) {
    const char *spec = s->cfg.allowed_origins;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!spec || !origin || !strcmp(spec, "none")) return NULL;
    if (!strcmp(spec, "*")) return "*";
    const size_t on = strlen(origin);
    for (const char *p = spec;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == on && !strncasecmp(p, origin, n)) return origin;
        if (!e) return NULL;
        p = e + 1;
    }
}

void ds_http_cors_headers(const ds_server *s, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *allow = allowed_origin(s, c);
    if (s->cfg.allowed_origins && strcmp(s->cfg.allowed_origins, "*") && strcmp(s->cfg.allowed_origins, "none"))
        MHD_add_response_header(r, "Vary", "Origin");   /* the answer depends on the Origin header */
    if (!allow) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id, x-ignored-fields, Retry-After");
}

enum MHD_Result ds_http_preflight(struct MHD_Connection *c, ds_server *s, const char *methods) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    char allow[96];
    snprintf(allow, sizeof allow, "%s, OPTIONS", methods);
    MHD_add_response_header(r, "Allow", allow);
    ds_http_cors_headers(s, c, r);
    if (allowed_origin(s, c)) {
        const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", asked && asked[0] ? asked : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    ds_metrics_inc_http(s->m, "other", 204);
    return rc;
}
