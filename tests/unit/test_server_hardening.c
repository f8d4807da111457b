/* Regression tests for the hardening defects of the HTTP front end, in process over loopback
 * sockets (fixture: test_server_fixture.h).  Each test reproduces one defect as a hostile or
 * careless client would meet it — long id arrays, restarts over TIME_WAIT, shutdown with
 * requests in flight, NUL bytes, API semantics, vLLM-style request features, stalled
 * connections — and asserts the fixed behaviour against an independent expectation: the
 * greedy reference of the synthetic model, the tokenizer's own decode, or the HTTP rule. */
#include "test_server_fixture.h"
#include "server/api.h"
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <time.h>

/* Sanitizers slow allocation-heavy parsing by roughly an order of magnitude. */
#if defined(__SANITIZE_ADDRESS__)
#define SLOW 10.0
#else
#define SLOW 1.0
#endif

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static http_resp post(stack *st, const char *path, const char *body) { return http(st->port, "POST", path, NULL, body); }

static const char *choice_str(cJSON *j, int i, const char *key) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
    cJSON *v = cJSON_GetObjectItem(c, key);
    if (!v && cJSON_GetObjectItem(c, "message")) v = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double usage_num(cJSON *j, const char *key) {
    cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), key);
    return v ? v->valuedouble : -1;
}

/* A /detokenize body with n ids cycling over ordinary byte tokens. */
static char *detok_body(size_t n) {
    ds_tbuf b = {0};
    ds_tbuf_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) ds_tbuf_printf(&b, "%s%d", i ? "," : "", 3 + 'a' + (int)(i % 26));
    ds_tbuf_puts(&b, "]}");
    return b.s;
}

static double time_detok(stack *st, size_t n, int *status, size_t *text_len) {
    char *body = detok_body(n);
    double t0 = now_s();
    http_resp r = post(st, "/detokenize", body);
    double dt = now_s() - t0;
    *status = r.status;
    cJSON *j = jbody(&r);
    cJSON *p = cJSON_GetObjectItem(j, "prompt");
    *text_len = cJSON_IsString(p) ? strlen(p->valuestring) : 0;
    cJSON_Delete(j);
    resp_free(&r);
    free(body);
    return dt;
}

/* Defect 1: integer arrays were parsed in quadratic time (80k ids: 13-17 s). */
TEST(hardening_1_linear_id_arrays) {
    stack st;
    ds_server_config over = {.max_body = 64u << 20};
    stack_up_cfg(&st, 8, 64, 0, NULL, &over);
    ds_server_set_ready(st.srv, "x");
    int status;
    size_t len;
    double t80 = time_detok(&st, 80000, &status, &len);
    CHECK(status == 200 && len == 80000, "80k ids: status %d, %zu chars", status, len);
    CHECK(t80 < 1.0 * SLOW, "80k-id /detokenize took %.3f s (limit %.1f s)", t80, 1.0 * SLOW);
    double t5m = time_detok(&st, 5000000, &status, &len);
    CHECK(status == 200 && len == 5000000, "5M ids: status %d, %zu chars", status, len);
    CHECK(t5m < 5.0 * SLOW, "5M-id /detokenize took %.3f s (limit %.1f s)", t5m, 5.0 * SLOW);
    printf("  timing: 80k ids %.3f s (limit %.1f), 5M ids %.3f s (limit %.1f), ratio 5M/80k %.1f for 62.5x the ids\n", t80,
           1.0 * SLOW, t5m, 5.0 * SLOW, t5m / t80);
    /* the same linear walk serves prompt ids and stop_token_ids */
    ds_tbuf b = {0};
    ds_tbuf_puts(&b, "{\"model\":\"deepseek-v41\",\"max_tokens\":2,\"prompt\":[");
    for (int i = 0; i < 200000; i++) ds_tbuf_printf(&b, "%s%d", i ? "," : "", 3 + 'a' + i % 26);
    ds_tbuf_puts(&b, "]}");
    double t0 = now_s();
    http_resp r = post(&st, "/v1/completions", b.s);
    double tp = now_s() - t0;
    cJSON *j = jbody(&r);
    CHECK(r.status == 400 && !strcmp(jerr_code(j), "context_length_exceeded"), "200k-id prompt: %d", r.status);
    CHECK(tp < 2.0 * SLOW, "200k-id prompt rejected in %.3f s", tp);
    cJSON_Delete(j);
    resp_free(&r);
    ds_tbuf_free(&b);
    /* a 2.0-style id is an integer; 2.5 is not */
    r = post(&st, "/detokenize", "{\"tokens\":[100.0, 101]}");
    CHECK(r.status == 200, "integral float id: %d %s", r.status, r.body);
    resp_free(&r);
    r = post(&st, "/detokenize", "{\"tokens\":[100.5]}");
    CHECK(r.status == 400, "fractional id: %d", r.status);
    resp_free(&r);
    /* the allocation-free capture of id arrays falls back to the general parser mid-array and
     * gives its exact errors: compare with the tokenizer's own decode */
    struct { const char *body; int status; const char *text; } rows[] = {
        {"{\"tokens\":[100, 101.0, 102]}", 200, "abc"},
        {"{\"tokens\" : [ 100 ,101 ] , \"model\":\"deepseek-v41\"}", 200, "ab"},
        {"{\"tokens\":[]}", 200, ""},
        {"{\"tokens\":[100, \"x\"]}", 400, NULL},
        {"{\"tokens\":[01]}", 400, NULL},
        {"{\"tokens\":[100,]}", 400, NULL},
        {"{\"tokens\":[-1]}", 400, NULL},
        {"{\"tokens\":[99999999999]}", 400, NULL},
        {"{\"x\":{\"tokens\":[5]},\"tokens\":[100]}", 200, "a"},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(rows); i++) {
        r = post(&st, "/detokenize", rows[i].body);
        cJSON *jj = jbody(&r);
        cJSON *p = cJSON_GetObjectItem(jj, "prompt");
        CHECK(r.status == rows[i].status, "capture row %zu: %d %s", i, r.status, r.body);
        if (rows[i].text) CHECK(cJSON_IsString(p) && !strcmp(p->valuestring, rows[i].text), "capture row %zu: %s", i, r.body);
        cJSON_Delete(jj);
        resp_free(&r);
    }
    stack_down(&st);
}

/* Defect 2: a restart after connections were closed by the server (TIME_WAIT) could not bind. */
TEST(hardening_2_restart_binds_same_port) {
    stack st;
    stack_up(&st, 8, 64, 0, NULL);
    ds_server_set_ready(st.srv, "x");
    int port = st.port;
    for (int i = 0; i < 3; i++) { /* the server closes these (Connection: close): TIME_WAIT on its side */
        http_resp r = http(port, "GET", "/health", NULL, NULL);
        CHECK(r.status == 200);
        resp_free(&r);
    }
    int idle = connect_lo(port); /* and one still open at shutdown */
    CHECK(idle >= 0);
    ds_server_drain(st.srv, 0);
    ds_server_stop(st.srv);
    st.srv = NULL;
    ds_server_config sc = {.host = "127.0.0.1", .port = port, .names = st.names, .n_names = 2, .root = "synthetic",
                           .max_model_len = 4096, .max_body = 1 << 16, .max_connections = 64, .server_info_json = "{}"};
    ds_error err = {0};
    ds_server *again = ds_server_start(&sc, st.e, st.tok, &st.m, &err);
    CHECK(again != NULL, "restart on port %d: %s", port, err.msg);
    if (again) {
        ds_server_set_ready(again, "y");
        http_resp r = http(port, "GET", "/health", NULL, NULL);
        CHECK(r.status == 200 && strstr(r.body, "\"y\""), "restarted server answers: %d", r.status);
        resp_free(&r);
        /* no port sharing: a second listener on the same port is still refused */
        ds_server *twin = ds_server_start(&sc, st.e, st.tok, &st.m, &err);
        CHECK(twin == NULL, "two servers on one port");
        if (twin) ds_server_stop(twin);
        st.srv = again;
    }
    close(idle);
    stack_down(&st);
}

static void *drain_bg(void *a) {
    ds_server_drain(a, 1.0);
    return NULL;
}

typedef struct bgreq { int port; const char *path; char *body; http_resp r; } bgreq;
static void *bg_post(void *a) {
    bgreq *b = a;
    b->r = http(b->port, "POST", b->path, NULL, b->body);
    return NULL;
}

/* Defect 3: shutdown cut streams without finish_reason or [DONE] and left whole replies empty. */
TEST(hardening_3_graceful_drain) {
    stack st;
    stack_up(&st, 8, 64, 20000, NULL); /* 20 ms per row: requests of 200 tokens outlive the drain */
    ds_server_set_ready(st.srv, "x");
    bgreq lng = {.port = st.port, .path = "/v1/completions", .body = cmpl_body("abc", 200, "\"stream\":true,\"ignore_eos\":true")};
    bgreq whole = {.port = st.port, .path = "/v1/completions", .body = cmpl_body("abd", 200, "\"ignore_eos\":true")};
    bgreq quick = {.port = st.port, .path = "/v1/completions", .body = cmpl_body("abe", 3, NULL)};
    pthread_t t1, t2, t3;
    pthread_create(&t1, NULL, bg_post, &lng);
    pthread_create(&t2, NULL, bg_post, &whole);
    pthread_create(&t3, NULL, bg_post, &quick);
    usleep(300000);
    double t0 = now_s();
    int left = ds_server_drain(st.srv, 0.5);
    double dt = now_s() - t0;
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    CHECK(left == 2, "requests running at the deadline: %d (expected the two long ones)", left);
    CHECK(dt >= 0.45 && dt < 10, "drain took %.2f s for a 0.5 s deadline", dt);
    /* the quick one finished normally */
    cJSON *j = jbody(&quick.r);
    CHECK(quick.r.status == 200 && choice_str(j, 0, "text"), "quick request: %d %s", quick.r.status, quick.r.body);
    cJSON_Delete(j);
    /* the whole reply is a JSON error, never empty */
    j = jbody(&whole.r);
    CHECK(whole.r.status == 503 && !strcmp(jerr_code(j), "shutting_down"), "whole reply at shutdown: %d %s", whole.r.status,
          whole.r.body);
    cJSON_Delete(j);
    /* the stream ends with finish_reason "abort" and [DONE] */
    bool framing;
    char *txt = sse_text(lng.r.body, &framing, NULL);
    CHECK(framing, "stream framing at shutdown (ends with [DONE]): %.200s", lng.r.body);
    CHECK(strstr(lng.r.body, "\"finish_reason\":\"abort\""), "stream has finish_reason abort");
    CHECK(strlen(txt) > 0, "tokens produced before the deadline were delivered");
    free(txt);
    /* the listener is closed: no new connection (a successor may bind the port) */
    int fd = connect_lo(st.port);
    CHECK(fd < 0, "new connections are refused once draining starts");
    if (fd >= 0) close(fd);
    for (int i = 0; i < 3; i++) {
        bgreq *b = i == 0 ? &lng : i == 1 ? &whole : &quick;
        resp_free(&b->r);
        free(b->body);
    }
    stack_down(&st);
}

/* Defect 3, /health while draining, on a connection opened before the drain began. */
TEST(hardening_3_health_503_while_draining) {
    stack st;
    stack_up(&st, 8, 64, 20000, NULL);
    ds_server_set_ready(st.srv, "x");
    bgreq lng = {.port = st.port, .path = "/v1/completions", .body = cmpl_body("abc", 100, "\"ignore_eos\":true")};
    pthread_t t1;
    pthread_create(&t1, NULL, bg_post, &lng);
    usleep(200000);
    int fd = connect_lo(st.port); /* accepted before the drain */
    usleep(100000);
    pthread_t td;
    pthread_create(&td, NULL, drain_bg, st.srv);
    usleep(200000);
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(write(fd, req, strlen(req)) > 0);
    http_resp h;
    read_resp(fd, &h);
    close(fd);
    CHECK(h.status == 503 && strstr(h.body, "shutting_down"), "/health while draining: %d %s", h.status, h.body);
    resp_free(&h);
    pthread_join(td, NULL);
    pthread_join(t1, NULL);
    CHECK(lng.r.status == 503 || lng.r.status == 200, "request during drain got a reply: %d", lng.r.status);
    resp_free(&lng.r);
    free(lng.body);
    stack_down(&st);
}


/* Raw request on a fresh connection; the reply is read to EOF. */
static http_resp raw(int port, const char *req) {
    http_resp r;
    memset(&r, 0, sizeof r);
    int fd = connect_lo(port);
    if (fd < 0) return r;
    if (write(fd, req, strlen(req)) < 0) {}
    read_resp(fd, &r);
    close(fd);
    return r;
}

static int count_substr(const char *h, const char *needle) {
    int n = 0;
    for (const char *p = h; (p = strstr(p, needle)); p++) n++;
    return n;
}

/* Defect 5: /detokenize cut its text at a NUL byte; "\u0000" in request strings was refused. */
TEST(hardening_5_nul_bytes) {
    stack st;
    stack_up(&st, 8, 64, 0, NULL);
    ds_server_set_ready(st.srv, "x");
    /* ids of the bytes 'A', 0x00, 'B' (byte b has id 3 + b in the test vocabulary) */
    http_resp r = post(&st, "/detokenize", "{\"tokens\":[68,3,69]}");
    CHECK(r.status == 200 && strstr(r.body, "\"prompt\":\"A\\u0000B\""), "detokenize with NUL: %d %s", r.status, r.body);
    resp_free(&r);
    /* the tokenizer's own decode agrees on the length */
    int32_t ids[3] = {68, 3, 69};
    size_t len = 0;
    ds_error e;
    char *t = ds_tokenizer_decode(st.tok, ids, 3, false, &len, &e);
    CHECK(t && len == 3 && t[1] == 0, "tokenizer decode length %zu", len);
    free(t);
    /* "\u0000" in a completion prompt and in a chat message is text: the NUL byte's id appears */
    r = post(&st, "/tokenize", "{\"prompt\":\"a\\u0000b\",\"add_special_tokens\":false}");
    CHECK(r.status == 200 && strstr(r.body, "\"tokens\":[100,3,101]"), "tokenize with NUL: %d %s", r.status, r.body);
    resp_free(&r);
    r = post(&st, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000y\"}]}");
    CHECK(r.status == 200 && strstr(r.body, ",123,3,124,"), "chat tokenize with NUL: %d %s", r.status, r.body);
    resp_free(&r);
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":\"a\\u0000b\",\"max_tokens\":2}");
    CHECK(r.status == 200, "completion with NUL in the prompt: %d %s", r.status, r.body);
    resp_free(&r);
    /* a raw C0 80 (overlong NUL, the parser's internal stand-in) is still invalid UTF-8 */
    const char bad[] = "{\"prompt\":\"a\xC0\x80" "b\"}";
    r = post(&st, "/tokenize", bad);
    CHECK(r.status == 400, "raw C0 80 refused: %d", r.status);
    resp_free(&r);
    /* /tokenize with both a prompt and messages: which to count is ambiguous (it counted the
     * prompt and ignored the messages); a null prompt is absent; a non-string prompt is named */
    r = post(&st, "/tokenize", "{\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"y\"}]}");
    CHECK(r.status == 400 && strstr(r.body, "not both") && strstr(r.body, "\"param\":\"prompt\""), "tokenize both: %d %s", r.status, r.body);
    resp_free(&r);
    r = post(&st, "/tokenize", "{\"prompt\":null,\"messages\":[{\"role\":\"user\",\"content\":\"y\"}]}");
    CHECK(r.status == 200, "tokenize null prompt + messages: %d %s", r.status, r.body);
    resp_free(&r);
    r = post(&st, "/tokenize", "{\"prompt\":[1,2]}");
    CHECK(r.status == 400 && strstr(r.body, "'prompt' must be a string"), "tokenize id-list prompt: %d %s", r.status, r.body);
    resp_free(&r);
    stack_down(&st);
}

/* Defect 7: API semantics. */
TEST(hardening_7_api_semantics) {
    stack st;
    stack_up(&st, 8, 64, 0, "sekret");
    ds_server_set_ready(st.srv, "x");
    const char *auth = "Authorization: Bearer sekret\r\n";
    char body[512];
    /* skip_special_tokens: a special placeholder forced by logit_bias is dropped from the text
     * (true, the default) or kept as its literal (false); logit_bias itself takes effect */
    for (int keep = 0; keep < 2; keep++) {
        snprintf(body, sizeof body, "{\"model\":\"deepseek-v41\",\"prompt\":\"hi\",\"max_tokens\":3,\"temperature\":0,"
                                    "\"logit_bias\":{\"%d\":100}%s}", PLACEHOLDER_ID, keep ? ",\"skip_special_tokens\":false" : "");
        http_resp r = http(st.port, "POST", "/v1/completions", auth, body);
        cJSON *j = jbody(&r);
        const char *txt = choice_str(j, 0, "text");
        CHECK(r.status == 200 && txt && usage_num(j, "completion_tokens") == 3, "%d %s", r.status, r.body);
        if (txt) CHECK(keep ? count_substr(txt, "<｜place▁holder▁no▁1｜>") == 3 : !strcmp(txt, ""), "skip_special=%d: '%s'", !keep, txt);
        cJSON_Delete(j);
        resp_free(&r);
    }
    /* chat honours it too */
    snprintf(body, sizeof body, "{\"model\":\"deepseek-v41\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
                                "\"temperature\":0,\"logit_bias\":{\"%d\":100}}", PLACEHOLDER_ID);
    http_resp r = http(st.port, "POST", "/v1/chat/completions", auth, body);
    cJSON *j = jbody(&r);
    CHECK(r.status == 200 && choice_str(j, 0, "content") && !strcmp(choice_str(j, 0, "content"), ""), "chat skip_special: %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);
    /* max_completion_tokens wins over max_tokens */
    r = http(st.port, "POST", "/v1/chat/completions", auth,
             "{\"model\":\"deepseek-v41\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":7,"
             "\"max_completion_tokens\":3,\"ignore_eos\":true}");
    j = jbody(&r);
    CHECK(r.status == 200 && usage_num(j, "completion_tokens") == 3, "max_completion_tokens: %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);
    /* min_tokens: EOS forced by logit_bias cannot come before min_tokens outputs */
    for (int mt = 0; mt <= 4; mt += 4) {
        snprintf(body, sizeof body, "{\"model\":\"deepseek-v41\",\"prompt\":\"hi\",\"max_tokens\":10,\"logit_bias\":{\"%d\":100},"
                                    "\"min_tokens\":%d}", EOS_ID, mt);
        r = http(st.port, "POST", "/v1/completions", auth, body);
        j = jbody(&r);
        CHECK(r.status == 200 && usage_num(j, "completion_tokens") == mt + 1 && !strcmp(choice_str(j, 0, "finish_reason"), "stop"),
              "min_tokens %d: %s", mt, r.body);
        cJSON_Delete(j);
        resp_free(&r);
    }
    r = http(st.port, "POST", "/v1/completions", auth, "{\"model\":\"deepseek-v41\",\"prompt\":\"hi\",\"max_tokens\":2,\"min_tokens\":3}");
    CHECK(r.status == 400 && strstr(r.body, "min_tokens"), "min_tokens > max_tokens: %d", r.status);
    resp_free(&r);
    /* include_stop_str_in_output: the stop string stays (the reference text gives the expectation) */
    char *ref = reference_text(&st, "hello", 16);
    CHECK(ref && strlen(ref) >= 8, "reference text");
    if (ref && strlen(ref) >= 8) {
        size_t k = 1; /* two ASCII letters after the start make an unambiguous stop string */
        while (ref[k + 1] && !(isalpha((unsigned char)ref[k]) && isalpha((unsigned char)ref[k + 1]))) k++;
        char stop[4] = {ref[k], ref[k + 1], 0};
        const char *at = strstr(ref, stop);
        size_t cut = (size_t)(at - ref);
        for (int inc = 0; inc < 2; inc++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", "deepseek-v41");
            cJSON_AddStringToObject(o, "prompt", "hello");
            cJSON_AddNumberToObject(o, "max_tokens", 16);
            cJSON_AddNumberToObject(o, "temperature", 0);
            cJSON_AddStringToObject(o, "stop", stop);
            cJSON_AddBoolToObject(o, "include_stop_str_in_output", inc);
            char *b = cJSON_PrintUnformatted(o);
            r = http(st.port, "POST", "/v1/completions", auth, b);
            j = jbody(&r);
            const char *txt = choice_str(j, 0, "text");
            size_t want = cut + (inc ? 2 : 0);
            CHECK(txt && strlen(txt) == want && !strncmp(txt, ref, want), "include_stop_str=%d: '%s' vs ref '%s'", inc, txt ? txt : "", ref);
            cJSON_Delete(j);
            resp_free(&r);
            free(b);
            cJSON_Delete(o);
        }
    }
    free(ref);
    /* wrong method: 405 with Allow */
    r = http(st.port, "GET", "/v1/completions", auth, NULL);
    CHECK(r.status == 405 && strcasestr(r.headers, "\r\nAllow: POST"), "GET /v1/completions: %d [%s]", r.status, r.headers);
    resp_free(&r);
    r = http(st.port, "DELETE", "/health", NULL, NULL);
    CHECK(r.status == 405 && strcasestr(r.headers, "\r\nAllow: GET, HEAD"), "DELETE /health: %d", r.status);
    resp_free(&r);
    r = http(st.port, "GET", "/nowhere", NULL, NULL);
    CHECK(r.status == 404, "unknown path stays 404: %d", r.status);
    resp_free(&r);
    /* HEAD /health: the status and headers, no body */
    r = raw(st.port, "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK(r.status == 200 && r.body_len == 0, "HEAD /health: %d body %zu", r.status, r.body_len);
    resp_free(&r);
    /* integral floats are integers; fractions are not */
    r = http(st.port, "POST", "/v1/completions", auth, "{\"model\":\"deepseek-v41\",\"prompt\":\"hi\",\"max_tokens\":2.0,\"ignore_eos\":true}");
    j = jbody(&r);
    CHECK(r.status == 200 && usage_num(j, "completion_tokens") == 2, "max_tokens 2.0: %d %s", r.status, r.body);
    cJSON_Delete(j);
    resp_free(&r);
    r = http(st.port, "POST", "/v1/completions", auth, "{\"model\":\"deepseek-v41\",\"prompt\":\"hi\",\"max_tokens\":2.5}");
    j = jbody(&r);
    CHECK(r.status == 400 && !strcmp(jerr_param(j), "max_tokens"), "max_tokens 2.5: %d", r.status);
    cJSON_Delete(j);
    resp_free(&r);
    /* the Bearer scheme is case-insensitive; the key is not */
    r = http(st.port, "POST", "/tokenize", "Authorization: bearer sekret\r\n", "{\"prompt\":\"x\"}");
    CHECK(r.status == 200, "lowercase bearer: %d", r.status);
    resp_free(&r);
    r = http(st.port, "POST", "/tokenize", "Authorization: BEARER SEKRET\r\n", "{\"prompt\":\"x\"}");
    CHECK(r.status == 401, "key is case-sensitive: %d", r.status);
    resp_free(&r);
    /* /server_info needs the key when one is set; /health, /metrics, /version stay open */
    r = http(st.port, "GET", "/server_info", NULL, NULL);
    CHECK(r.status == 401, "/server_info without key: %d", r.status);
    resp_free(&r);
    r = http(st.port, "GET", "/server_info", auth, NULL);
    CHECK(r.status == 200, "/server_info with key: %d", r.status);
    resp_free(&r);
    r = http(st.port, "GET", "/version", NULL, NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"version\":\"" DS_SERVER_VERSION "\""), "/version: %d %s", r.status, r.body);
    resp_free(&r);
    stack_down(&st);
}

/* Defect 8: request features vLLM users expect. */
TEST(hardening_8_vllm_features) {
    stack st;
    stack_up(&st, 8, 64, 0, NULL);
    ds_server_set_ready(st.srv, "x");
    /* a list of prompts: one choice per prompt, each equal to its own greedy reference */
    char *ra = reference_text(&st, "abc", 6), *rb = reference_text(&st, "xyz", 6);
    http_resp r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":[\"abc\",\"xyz\"],\"max_tokens\":6,\"temperature\":0}");
    cJSON *j = jbody(&r);
    CHECK(r.status == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")) == 2, "prompt list: %d %s", r.status, r.body);
    CHECK(choice_str(j, 0, "text") && !strcmp(choice_str(j, 0, "text"), ra), "choice 0 = reference of prompt 0");
    CHECK(choice_str(j, 1, "text") && !strcmp(choice_str(j, 1, "text"), rb), "choice 1 = reference of prompt 1");
    CHECK(usage_num(j, "prompt_tokens") == 8, "both prompts counted once (BOS + 3 each): %g", usage_num(j, "prompt_tokens"));
    cJSON_Delete(j);
    resp_free(&r);
    /* a list of token-id lists */
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":[[0,100,101,102],[0,123,124,125]],\"max_tokens\":6,\"temperature\":0}");
    j = jbody(&r);
    CHECK(r.status == 200 && choice_str(j, 1, "text") && !strcmp(choice_str(j, 1, "text"), rb), "id lists: %d %s", r.status, r.body);
    cJSON_Delete(j);
    resp_free(&r);
    /* echo: the prompt text, then the completion */
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":\"abc\",\"max_tokens\":6,\"temperature\":0,\"echo\":true}");
    j = jbody(&r);
    char want[256];
    snprintf(want, sizeof want, "abc%s", ra);
    CHECK(r.status == 200 && choice_str(j, 0, "text") && !strcmp(choice_str(j, 0, "text"), want), "echo: %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":[0,100,101,102],\"max_tokens\":6,\"temperature\":0,\"echo\":true}");
    j = jbody(&r);
    CHECK(r.status == 200 && choice_str(j, 0, "text") && !strcmp(choice_str(j, 0, "text"), want), "echo of ids (BOS skipped): %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":\"abc\",\"max_tokens\":6,\"temperature\":0,\"echo\":true,\"stream\":true}");
    bool framing;
    char *txt = sse_text(r.body, &framing, NULL);
    CHECK(framing && !strcmp(txt, want), "streamed echo: '%s'", txt);
    free(txt);
    resp_free(&r);
    /* n = 3 sampled choices: indexes 0..2, each its own random stream, reproducible with a seed */
    const char *nb = "{\"model\":\"deepseek-v41\",\"prompt\":\"abc\",\"max_tokens\":12,\"temperature\":1,\"seed\":7,\"n\":3}";
    r = post(&st, "/v1/completions", nb);
    http_resp r2 = post(&st, "/v1/completions", nb);
    j = jbody(&r);
    cJSON *j2 = jbody(&r2);
    CHECK(r.status == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")) == 3, "n=3: %s", r.body);
    const char *c0 = choice_str(j, 0, "text"), *c1 = choice_str(j, 1, "text"), *c2 = choice_str(j, 2, "text");
    CHECK(c0 && c1 && c2 && (strcmp(c0, c1) || strcmp(c1, c2)), "n=3 choices differ");
    for (int i = 0; i < 3; i++) {
        cJSON *ci = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
        CHECK(cJSON_GetObjectItem(ci, "index")->valueint == i, "choice %d index", i);
        CHECK(choice_str(j2, i, "text") && choice_str(j, i, "text") && !strcmp(choice_str(j, i, "text"), choice_str(j2, i, "text")),
              "seeded choice %d reproduces", i);
    }
    CHECK(usage_num(j, "prompt_tokens") == 4 && usage_num(j, "completion_tokens") >= 3, "n=3 usage: prompt once");
    cJSON_Delete(j);
    cJSON_Delete(j2);
    resp_free(&r);
    resp_free(&r2);
    /* n = 2 streamed: chunks carry both indexes, one finish per choice, one [DONE] (ignore_eos: the
     * choices are sampled, and one that drew the end token would stop before max_tokens) */
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":\"abc\",\"max_tokens\":5,\"n\":2,\"stream\":true,\"ignore_eos\":true,\"stream_options\":{\"include_usage\":true}}");
    CHECK(strstr(r.body, "\"index\":0") && strstr(r.body, "\"index\":1"), "streamed n=2 indexes");
    CHECK(count_substr(r.body, "\"finish_reason\":\"length\"") == 2 && count_substr(r.body, "data: [DONE]") == 1, "streamed n=2 ends");
    CHECK(strstr(r.body, "\"completion_tokens\":10"), "streamed n=2 usage sums the choices");
    resp_free(&r);
    /* chat n = 2 */
    r = post(&st, "/v1/chat/completions", "{\"model\":\"deepseek-v41\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,\"n\":2}");
    j = jbody(&r);
    CHECK(r.status == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")) == 2, "chat n=2: %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);
    /* response_format json_object: accepted, and the prompt carries the response-format section */
    r = post(&st, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":{\"type\":\"json_object\"},\"return_text\":true}");
    CHECK(r.status == 200 && strstr(r.body, "## Response Format:") && strstr(r.body, "{\\\"type\\\": \\\"json_object\\\"}"),
          "response_format section: %d %s", r.status, r.body);
    resp_free(&r);
    r = post(&st, "/v1/chat/completions", "{\"model\":\"deepseek-v41\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"response_format\":{\"type\":\"json_object\"}}");
    CHECK(r.status == 200, "response_format json_object generation: %d", r.status);
    resp_free(&r);
    /* tool_choice named: must name a listed tool; the reply is checked for the call */
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";
    char b[1024];
    snprintf(b, sizeof b, "{\"model\":\"deepseek-v41\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"h\"}}}", tools);
    r = post(&st, "/v1/chat/completions", b);
    j = jbody(&r);
    CHECK(r.status == 400 && !strcmp(jerr_code(j), "invalid_value") && !strcmp(jerr_param(j), "tool_choice"), "unknown named tool: %s", r.body);
    cJSON_Delete(j);
    resp_free(&r);
    /* the narrowed tools keep their key: fields after them are still found (messages last, as
     * some clients order them), and the prompt renders the named tool only (from the parse
     * itself, against the same request without tool_choice) */
    {
        const char *names[] = {"deepseek-v41"};
        ds_api_limits lim = {.model_names = names, .n_model_names = 1, .max_model_len = 4096, .vocab = 1 << 20};
        char nb[1024], ab[1024];
        snprintf(nb, sizeof nb, "{\"model\":\"deepseek-v41\",%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", tools);
        snprintf(ab, sizeof ab, "{\"model\":\"deepseek-v41\",%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", tools);
        ds_api_request nr, ar;
        ds_api_error ne = {0}, ae = {0};
        int nrc = ds_api_parse_generation(DS_API_CHAT, nb, strlen(nb), &lim, st.tok, &nr, &ne);
        int arc = ds_api_parse_generation(DS_API_CHAT, ab, strlen(ab), &lim, st.tok, &ar, &ae);
        CHECK(nrc == 0 && arc == 0, "named tool_choice before messages parses: %s / %s", ne.message, ae.message);
        if (nrc == 0 && arc == 0) {
            CHECK(nr.has_tools && nr.tool_required && nr.prompt_text && ar.prompt_text, "named: has_tools %d", nr.has_tools);
            CHECK(nr.prompt_text && strstr(nr.prompt_text, "\"g\"") && !strstr(nr.prompt_text, "\"f\"") &&
                  ar.prompt_text && strstr(ar.prompt_text, "\"f\"") && strstr(ar.prompt_text, "\"g\""),
                  "the named prompt lists g only, the plain one f and g");
        }
        /* /tokenize narrows the same way: its count is the generation's prompt length (§10 /tokenize) */
        char tb[1024];
        snprintf(tb, sizeof tb, "{%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"return_text\":true}", tools);
        http_resp tr = post(&st, "/tokenize", tb);
        cJSON *tj = jbody(&tr);
        const cJSON *cnt = cJSON_GetObjectItem(tj, "count"), *txt = cJSON_GetObjectItem(tj, "text");
        CHECK(tr.status == 200 && nrc == 0 && cJSON_IsNumber(cnt) && (size_t)cnt->valuedouble == nr.prompt.n && cJSON_IsString(txt) &&
              strstr(txt->valuestring, "\"g\"") && !strstr(txt->valuestring, "\"f\""),
              "/tokenize with a named tool_choice: %d %s", tr.status, tr.body);
        cJSON_Delete(tj);
        resp_free(&tr);
        ds_api_request_free(&nr);
        ds_api_request_free(&ar);
        /* messages first: the request parsed before the fix too, but "tools" was not found after
         * the narrowing, so the prompt carried no tool section at all */
        snprintf(nb, sizeof nb, "{\"model\":\"deepseek-v41\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", tools);
        nrc = ds_api_parse_generation(DS_API_CHAT, nb, strlen(nb), &lim, st.tok, &nr, &ne);
        CHECK(nrc == 0 && nr.has_tools && nr.prompt_text && strstr(nr.prompt_text, "\"g\"") && !strstr(nr.prompt_text, "\"f\""),
              "named tool_choice after messages: the prompt lists g only (rc %d: %s)", nrc, ne.message);
        ds_api_request_free(&nr);
    }
    /* over HTTP, in both field orders, the request reaches the model, which does not call g */
    for (int order = 0; order < 2; order++) {
        const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
        const char *choice = "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}";
        if (order == 0) snprintf(b, sizeof b, "{\"model\":\"deepseek-v41\",\"max_tokens\":4,%s,%s,%s}", tools, choice, msgs);
        else snprintf(b, sizeof b, "{\"model\":\"deepseek-v41\",\"max_tokens\":4,%s,%s,%s}", msgs, tools, choice);
        r = post(&st, "/v1/chat/completions", b);
        j = jbody(&r);
        CHECK(r.status == 400 && !strcmp(jerr_code(j), "tool_choice_not_satisfied"), "named tool not called (messages %s): %d %s",
              order == 0 ? "last" : "first", r.status, r.body);
        cJSON_Delete(j);
        resp_free(&r);
    }
    /* suffix: a clear 400 */
    r = post(&st, "/v1/completions", "{\"model\":\"deepseek-v41\",\"prompt\":\"abc\",\"suffix\":\"z\"}");
    CHECK(r.status == 400 && strstr(r.body, "suffix"), "suffix: %d", r.status);
    resp_free(&r);
    /* GET /v1/models/{id} for a served name or alias; 404 for others */
    r = http(st.port, "GET", "/v1/models/alias-model", NULL, NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"id\":\"deepseek-v41\""), "models/alias: %d %s", r.status, r.body);
    resp_free(&r);
    r = http(st.port, "GET", "/v1/models/gpt-4", NULL, NULL);
    j = jbody(&r);
    CHECK(r.status == 404 && !strcmp(jerr_code(j), "model_not_found"), "models/unknown: %d", r.status);
    cJSON_Delete(j);
    resp_free(&r);
    free(ra);
    free(rb);
    stack_down(&st);
}

/* Wait until the peer closes (read returns 0 or an error); seconds waited, or -1 past limit. */
static double wait_closed(int fd, double limit) {
    double t0 = now_s();
    char buf[4096];
    while (now_s() - t0 < limit) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) return now_s() - t0;
        }
    }
    return -1;
}

/* Defect 9: connections were never timed out, and --http-threads bounded nothing. */
TEST(hardening_9_connection_timeouts_and_bound) {
    stack st;
    ds_server_config over = {.http_timeout_s = 1.0};
    stack_up_cfg(&st, 8, 64, 0, NULL, &over);
    ds_server_set_ready(st.srv, "x");
    /* slow headers: one byte every 0.3 s never completes a request; closed near the 1 s deadline */
    int fd = connect_lo(st.port);
    const char *part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    CHECK(write(fd, part, strlen(part)) > 0);
    double t0 = now_s(), closed = -1;
    while (now_s() - t0 < 4) {
        if (send(fd, "a", 1, MSG_NOSIGNAL) <= 0) { closed = now_s() - t0; break; }
        double w = wait_closed(fd, 0.3);
        if (w >= 0) { closed = now_s() - t0; break; }
    }
    CHECK(closed > 0.5 && closed < 2.5, "slowloris headers closed after %.2f s (timeout 1 s)", closed);
    close(fd);
    /* partial body: Content-Length 100, 10 bytes sent, then silence */
    fd = connect_lo(st.port);
    const char *pb = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\":";
    CHECK(write(fd, pb, strlen(pb)) > 0);
    double w = wait_closed(fd, 4);
    CHECK(w > 0.5 && w < 2.5, "partial body closed after %.2f s", w);
    close(fd);
    /* idle keep-alive after a reply */
    fd = connect_lo(st.port);
    const char *hr = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(write(fd, hr, strlen(hr)) > 0);
    char buf[2048];
    usleep(100000);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    CHECK(n > 0 && !strncmp(buf, "HTTP/1.1 200", 12), "keep-alive reply");
    w = wait_closed(fd, 4);
    CHECK(w > 0.5 && w < 2.5, "idle keep-alive closed after %.2f s", w);
    close(fd);
    /* a long generation is not cut by the timeout: the deadline covers receiving, not answering */
    stack_down(&st);
    stack_up_cfg(&st, 8, 64, 30000, NULL, &over);
    ds_server_set_ready(st.srv, "x");
    char *lb = cmpl_body("abc", 60, "\"ignore_eos\":true");
    http_resp r = post(&st, "/v1/completions", lb);
    cJSON *j = jbody(&r);
    CHECK(r.status == 200 && usage_num(j, "completion_tokens") == 60, "60 tokens at 30 ms (1.8 s > timeout): %d", r.status);
    cJSON_Delete(j);
    resp_free(&r);
    free(lb);
    stack_down(&st);
    /* --http-threads 2: two connections held, a third waits (not accepted: no thread for it) and
     * is served as soon as one of the two closes */
    ds_server_config two = {.http_threads = 2, .http_timeout_s = 10};
    stack_up_cfg(&st, 8, 64, 0, NULL, &two);
    ds_server_set_ready(st.srv, "x");
    int a = connect_lo(st.port), b2 = connect_lo(st.port);
    usleep(200000);
    int c = connect_lo(st.port);
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(c >= 0 && write(c, req, strlen(req)) > 0, "third connection queued");
    struct pollfd pc = {.fd = c, .events = POLLIN};
    CHECK(poll(&pc, 1, 1000) == 0, "no thread serves a third connection while two are held");
    close(a);
    http_resp h;
    read_resp(c, &h);
    CHECK(h.status == 200, "third connection served once one closed: %d", h.status);
    resp_free(&h);
    close(c);
    close(b2);
    stack_down(&st);
}

RUN_ALL()
