/* The tools' HTTP client on libcurl (contract in http_client.h).
 *
 * Why these curl settings: CURLOPT_NOPROXY "*" makes curl ignore http_proxy/https_proxy/all_proxy
 * (TOOLS.md §0: clients connect directly); CURLOPT_NOSIGNAL because the bench runs requests on
 * many threads and curl's alarm-based DNS timeout is not thread-safe; the progress callback is how
 * a cancel flag set by another thread stops a transfer that is waiting for bytes.  SSE parsing
 * follows the event-stream rules the servers use: lines end in \n (or \r\n), `data:` lines
 * accumulate, a blank line ends an event, other fields (event:, id:, comments) are ignored. */
#include "tools/http_client.h"
#include "base/common.h"
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_global(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int ds_http_client_init(ds_http_client *c, const char *base_url, const char *api_key, const int *cancel,
                        char *why, size_t why_len) {
    memset(c, 0, sizeof *c);
    pthread_once(&g_curl_once, curl_global);
    if (!base_url || (strncmp(base_url, "http://", 7) && strncmp(base_url, "https://", 8))) {
        snprintf(why, why_len, "expected an http:// or https:// URL, got '%s'", base_url ? base_url : "");
        return -1;
    }
    size_t n = strlen(base_url);
    while (n > 0 && base_url[n - 1] == '/') n--;
    if (n >= sizeof c->base_url) {
        snprintf(why, why_len, "URL longer than %zu characters", sizeof c->base_url - 1);
        return -1;
    }
    memcpy(c->base_url, base_url, n);
    if (api_key && *api_key) {
        if (strlen(api_key) > 512 || strpbrk(api_key, "\r\n")) {
            snprintf(why, why_len, "API key longer than 512 characters or containing a line break");
            return -1;
        }
        snprintf(c->auth_header, sizeof c->auth_header, "Authorization: Bearer %s", api_key);
    }
    c->connect_timeout_s = 10.0;
    c->cancel = cancel;
    return 0;
}

void ds_http_response_free(ds_http_response *r) {
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

/* Growable byte buffer, always NUL-terminated. */
typedef struct { char *p; size_t n, cap; } buf;

static void buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = DS_MAX(b->cap * 2, b->n + n + 1024);
        b->p = ds_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* One transfer's state, seen by the curl callbacks. */
typedef struct {
    const ds_http_client *c;
    CURL *h;
    buf body;                   /* plain body, or a non-SSE error body */
    buf line, event;            /* SSE: the partial line, the data of the event being built */
    bool sse, decided, is_stream, event_has_data, stopped;
    ds_sse_event_fn fn;
    void *user;
} xfer;

static bool cancelled(const ds_http_client *c) { return c->cancel && __atomic_load_n(c->cancel, __ATOMIC_RELAXED); }

/* One complete SSE line (without its terminator). */
static void sse_line(xfer *x, const char *s, size_t n, double now) {
    if (n && s[n - 1] == '\r') n--;
    if (n == 0) {   /* blank line: dispatch */
        if (x->event_has_data && x->fn(x->user, x->event.p ? x->event.p : "", x->event.n, now)) x->stopped = true;
        x->event.n = 0;
        if (x->event.p) x->event.p[0] = 0;
        x->event_has_data = false;
        return;
    }
    if (n >= 5 && !memcmp(s, "data:", 5)) {
        s += 5, n -= 5;
        if (n && *s == ' ') s++, n--;
        if (x->event_has_data) buf_add(&x->event, "\n", 1);
        buf_add(&x->event, s, n);
        x->event_has_data = true;
    }
}

static void sse_feed(xfer *x, const char *s, size_t n, double now) {
    for (size_t i = 0; i < n && !x->stopped; i++) {
        if (s[i] != '\n') { buf_add(&x->line, &s[i], 1); continue; }
        sse_line(x, x->line.p ? x->line.p : "", x->line.n, now);
        x->line.n = 0;
    }
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
    xfer *x = ud;
    size_t n = size * nmemb;
    if (cancelled(x->c)) return 0;   /* a short count aborts the transfer */
    if (x->sse && !x->decided) {
        long status = 0;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
        x->is_stream = status >= 200 && status < 300;
        x->decided = true;
    }
    if (x->sse && x->is_stream) {
        sse_feed(x, ptr, n, ds_now());
        return x->stopped ? 0 : n;
    }
    buf_add(&x->body, ptr, n);
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d) {
    xfer *x = ud;
    return cancelled(x->c) ? 1 : 0;
}

static void make_url(const ds_http_client *c, const char *url, char *out, size_t n) {
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) snprintf(out, n, "%s", url);
    else snprintf(out, n, "%s%s", c->base_url, url);
}

static int perform(const ds_http_client *c, const char *url, const char *json, double timeout_s, xfer *x,
                   ds_http_response *r) {
    memset(r, 0, sizeof *r);
    char full[2048];
    make_url(c, url, full, sizeof full);
    x->c = c;
    x->h = curl_easy_init();
    if (!x->h) {
        snprintf(r->error, sizeof r->error, "%s: curl_easy_init failed", full);
        r->body = ds_xstrdup("");
        return -1;
    }
    CURL *h = x->h;
    struct curl_slist *hdr = NULL;
    if (c->auth_header[0]) hdr = curl_slist_append(hdr, c->auth_header);
    if (json) {
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(json));
    }
    if (x->sse) hdr = curl_slist_append(hdr, "Accept: text/event-stream");
    hdr = curl_slist_append(hdr, "Expect:");   /* no 100-continue round trip on large prompts */
    curl_easy_setopt(h, CURLOPT_URL, full);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000.0 + 0.5));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(DS_MIN(c->connect_timeout_s, timeout_s) * 1000.0 + 0.5));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    if (rc == CURLE_OK && x->sse && x->is_stream && x->line.n) {   /* a last event without its blank line */
        sse_line(x, x->line.p, x->line.n, ds_now());
        sse_line(x, "", 0, ds_now());
    }
    int ret = 0;
    if (rc != CURLE_OK) {
        const char *why = cancelled(c) ? "cancelled" : x->stopped ? "stopped by the caller" : curl_easy_strerror(rc);
        if (rc == CURLE_OPERATION_TIMEDOUT) why = "timed out";
        snprintf(r->error, sizeof r->error, "%s: %s%s", full, why,
                 rc == CURLE_OPERATION_TIMEDOUT ? (r->status ? " while receiving the answer" : "") : "");
        ret = -1;
    }
    r->body = x->body.p ? x->body.p : ds_xstrdup("");
    r->len = x->body.n;
    free(x->line.p);
    free(x->event.p);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
    return ret;
}

int ds_http_get(const ds_http_client *c, const char *url, double timeout_s, ds_http_response *r) {
    xfer x = {0};
    return perform(c, url, NULL, timeout_s, &x, r);
}

int ds_http_post_json(const ds_http_client *c, const char *url, const char *json, double timeout_s,
                      ds_http_response *r) {
    xfer x = {0};
    return perform(c, url, json, timeout_s, &x, r);
}

int ds_http_post_sse(const ds_http_client *c, const char *url, const char *json, double timeout_s,
                     ds_sse_event_fn fn, void *user, ds_http_response *r) {
    xfer x = {.sse = true, .fn = fn, .user = user};
    return perform(c, url, json, timeout_s, &x, r);
}
