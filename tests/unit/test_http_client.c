/* The tools' HTTP client (src/tools/http_client.c) against a scripted socket server in this process.
 *
 * Why a raw socket server: it sends exactly the bytes a test wants, split where it wants, with the
 * delays it wants — an SSE event cut mid-line, CRLF line ends, a multi-line event, a last event
 * without its blank line, an answer that never comes — which a real server would not produce on
 * demand.  The expected events, statuses and timings are written in the test, not derived from
 * the client.  Also checks the bench statistics helper against NumPy's percentile (values computed
 * with numpy.percentile, linear method). */
#define _GNU_SOURCE
#include "check.h"
#include "tools/http_client.h"
#include "tools/bench_client.h"
#include "base/common.h"
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    const char *pieces[8];
    int delay_ms[8];          /* before each piece */
    int listen_fd, port;
    char request[8192];       /* what the client sent */
    pthread_t th;
} script;

static void read_request(int fd, char *buf, size_t cap) {
    size_t n = 0;
    long want = -1;
    while (n + 1 < cap) {
        ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        buf[n] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (end && want < 0) {
            char *cl = strcasestr(buf, "Content-Length:");
            want = (long)(end + 4 - buf) + (cl && cl < end ? atol(cl + 15) : 0);
        }
        if (want >= 0 && (long)n >= want) break;
    }
    buf[n] = 0;
}

static void *serve_one(void *arg) {
    script *s = arg;
    int fd = accept(s->listen_fd, NULL, NULL);
    if (fd < 0) return NULL;
    read_request(fd, s->request, sizeof s->request);
    for (int i = 0; i < 8 && s->pieces[i]; i++) {
        if (s->delay_ms[i]) usleep((useconds_t)s->delay_ms[i] * 1000);
        if (send(fd, s->pieces[i], strlen(s->pieces[i]), MSG_NOSIGNAL) < 0) break;
    }
    close(fd);
    return NULL;
}

static void start(script *s) {
    s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK(bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(s->listen_fd, 4) == 0);
    getsockname(s->listen_fd, (struct sockaddr *)&a, &len);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, serve_one, s);
}

static void stop(script *s) {
    shutdown(s->listen_fd, SHUT_RDWR);
    pthread_join(s->th, NULL);
    close(s->listen_fd);
}

static void client_for(const script *s, ds_http_client *c, const char *key, const int *cancel) {
    char url[64], why[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", s->port);
    CHECK(ds_http_client_init(c, url, key, cancel, why, sizeof why) == 0, "%s", why);
}

typedef struct { char data[8][64]; double t[8]; int n, stop_after; } events;

static int on_event(void *user, const char *data, size_t len, double t) {
    events *e = user;
    if (e->n < 8) {
        snprintf(e->data[e->n], sizeof e->data[0], "%.*s", (int)len, data);
        e->t[e->n] = t;
    }
    e->n++;
    return e->stop_after && e->n >= e->stop_after;
}

static void *raise_later(void *flag) {
    usleep(200 * 1000);
    __atomic_store_n((int *)flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

#define SSE_HEAD "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"

TEST(sse_events_split_crlf_multiline_and_unterminated) {
    script s = {.pieces = {SSE_HEAD "data: {\"a\"", ":1}\n\n", "data: line1\r\ndata: line2\r\n\r\n",
                           ": comment\n\nevent: x\nid: 3\ndata:last"},
                .delay_ms = {0, 150, 0, 0}};
    start(&s);
    ds_http_client c;
    client_for(&s, &c, "k-123", NULL);
    events e = {0};
    ds_http_response r;
    double t0 = ds_now();
    int rc = ds_http_post_sse(&c, "/v1/completions", "{\"x\":1}", 5.0, on_event, &e, &r);
    CHECK(rc == 0, "%s", r.error);
    CHECK(r.status == 200);
    CHECK(e.n == 3, "got %d events", e.n);
    CHECK(!strcmp(e.data[0], "{\"a\":1}"), "event 0 '%s'", e.data[0]);
    CHECK(!strcmp(e.data[1], "line1\nline2"), "event 1 '%s'", e.data[1]);
    CHECK(!strcmp(e.data[2], "last"), "event 2 '%s'", e.data[2]);
    CHECK(e.t[0] - t0 >= 0.14, "the first event completed after the 150 ms pause, stamped %.3f s", e.t[0] - t0);
    CHECK(e.t[1] >= e.t[0] && e.t[2] >= e.t[1]);
    CHECK(strstr(s.request, "POST /v1/completions HTTP/1.1") == s.request);
    CHECK(strstr(s.request, "Authorization: Bearer k-123\r\n") != NULL);
    CHECK(strstr(s.request, "Accept: text/event-stream\r\n") != NULL);
    CHECK(strstr(s.request, "\r\n\r\n{\"x\":1}") != NULL, "body sent");
    ds_http_response_free(&r);
    stop(&s);
}

TEST(sse_error_status_keeps_the_body) {
    script s = {.pieces = {"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n"
                           "{\"error\":{\"message\":\"no\"}}"}};
    start(&s);
    ds_http_client c;
    client_for(&s, &c, NULL, NULL);
    events e = {0};
    ds_http_response r;
    CHECK(ds_http_post_sse(&c, "/v1/completions", "{}", 5.0, on_event, &e, &r) == 0, "%s", r.error);
    CHECK(r.status == 400 && e.n == 0);
    CHECK(!strcmp(r.body, "{\"error\":{\"message\":\"no\"}}"), "body '%s'", r.body);
    CHECK(strstr(s.request, "Authorization:") == NULL, "no key, no header");
    ds_http_response_free(&r);
    stop(&s);
}

TEST(get_ignores_proxy_environment) {
    script s = {.pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"}};
    start(&s);
    setenv("http_proxy", "http://127.0.0.1:9", 1);   /* discard port: a proxy that would fail */
    setenv("HTTP_PROXY", "http://127.0.0.1:9", 1);
    setenv("all_proxy", "http://127.0.0.1:9", 1);
    ds_http_client c;
    client_for(&s, &c, NULL, NULL);
    ds_http_response r;
    CHECK(ds_http_get(&c, "/health", 5.0, &r) == 0, "%s", r.error);
    CHECK(r.status == 200 && r.len == 15 && !strcmp(r.body, "{\"status\":\"ok\"}"));
    CHECK(strstr(s.request, "GET /health HTTP/1.1") == s.request, "request '%.40s'", s.request);
    unsetenv("http_proxy"), unsetenv("HTTP_PROXY"), unsetenv("all_proxy");
    ds_http_response_free(&r);
    stop(&s);
}

TEST(refused_timeout_cancel_and_stop) {
    script s = {.pieces = {SSE_HEAD "data: 1\n\n", "data: 2\n\n"}, .delay_ms = {0, 3000}};
    start(&s);
    ds_http_client c;
    client_for(&s, &c, NULL, NULL);
    events e = {0};
    ds_http_response r;
    double t0 = ds_now();
    CHECK(ds_http_post_sse(&c, "/x", "{}", 0.4, on_event, &e, &r) == -1);
    CHECK(strstr(r.error, "timed out") && strstr(r.error, "/x"), "error '%s'", r.error);
    CHECK(ds_now() - t0 < 2.0 && e.n == 1);
    ds_http_response_free(&r);
    stop(&s);

    /* cancel flag raised by another thread while the server is silent */
    script s2 = {.pieces = {SSE_HEAD "data: 1\n\n", "data: 2\n\n"}, .delay_ms = {0, 3000}};
    start(&s2);
    int cancel = 0;
    client_for(&s2, &c, NULL, &cancel);
    events e2 = {0};
    pthread_t th;
    pthread_create(&th, NULL, raise_later, &cancel);
    t0 = ds_now();
    CHECK(ds_http_post_sse(&c, "/x", "{}", 30.0, on_event, &e2, &r) == -1);
    CHECK(strstr(r.error, "cancelled") != NULL, "error '%s'", r.error);
    CHECK(ds_now() - t0 < 2.0, "cancel took %.2f s", ds_now() - t0);
    pthread_join(th, NULL);
    ds_http_response_free(&r);
    CHECK(ds_http_get(&c, "/y", 5.0, &r) == -1 && strstr(r.error, "cancelled"), "a later request also stops");
    ds_http_response_free(&r);
    stop(&s2);

    /* the callback asks to stop after the first event */
    script s3 = {.pieces = {SSE_HEAD "data: 1\n\ndata: 2\n\n", "data: 3\n\n"}, .delay_ms = {0, 3000}};
    start(&s3);
    client_for(&s3, &c, NULL, NULL);
    events e3 = {.stop_after = 1};
    t0 = ds_now();
    CHECK(ds_http_post_sse(&c, "/x", "{}", 30.0, on_event, &e3, &r) == -1);
    CHECK(strstr(r.error, "stopped by the caller") != NULL && e3.n == 1, "error '%s', %d events", r.error, e3.n);
    CHECK(ds_now() - t0 < 2.0);
    ds_http_response_free(&r);
    stop(&s3);

    /* nothing listens on the port */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    char url[64], why[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    CHECK(ds_http_client_init(&c, url, NULL, NULL, why, sizeof why) == 0);
    CHECK(ds_http_get(&c, "/health", 5.0, &r) == -1 && r.status == 0);
    CHECK(strstr(r.error, url) != NULL, "error names the URL: '%s'", r.error);
    ds_http_response_free(&r);
}

TEST(percentile_matches_numpy_linear) {
    double a[] = {1, 2, 3, 4}, b[] = {10, 0, 5}, c[] = {3.5};
    CHECK(fabs(bench_percentile(a, 4, 90) - 3.7) < 1e-12);
    CHECK(fabs(bench_percentile(a, 4, 50) - 2.5) < 1e-12);
    CHECK(fabs(bench_percentile(b, 3, 99) - 9.9) < 1e-12);
    CHECK(bench_percentile(c, 1, 90) == 3.5);
    CHECK(isnan(bench_median(a, 0)));
}

TEST(init_rejects_bad_urls_and_keys) {
    ds_http_client c;
    char why[256];
    CHECK(ds_http_client_init(&c, "ftp://x", NULL, NULL, why, sizeof why) == -1 && strstr(why, "ftp://x"));
    CHECK(ds_http_client_init(&c, "http://h", "a\nb", NULL, why, sizeof why) == -1);
    CHECK(ds_http_client_init(&c, "http://h:1///", NULL, NULL, why, sizeof why) == 0 && !strcmp(c.base_url, "http://h:1"));
}

RUN_ALL()
