/* Shared fixture of the in-process HTTP tests (test_server_http.c, test_server_hardening.c):
 * the real server, engine and tokenizer code on the synthetic backend and a small generated
 * byte-level tokenizer, a minimal raw-socket HTTP/1.1 client, and the greedy reference that
 * expected texts come from (the synthetic model's logits + argmax, decoded by the tokenizer).
 * Each test program uses a subset of it. */
#ifndef TEST_SERVER_FIXTURE_H
#define TEST_SERVER_FIXTURE_H
#define _GNU_SOURCE
#include "check.h"
#include "engine/engine.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include <arpa/inet.h>
#include <cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#pragma GCC diagnostic ignored "-Wunused-function"

#define V 512
#define EOS_ID 1
#define PLACEHOLDER_ID 414 /* special added token, not masked */

/* ------------------------------------------------------------------ fixture */

static void byte_chars(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        map[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

static void utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; o[1] = 0; }
    else { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); o[2] = 0; }
}

/* Byte-level BPE: bytes at ids 3..258, two-byte symbols filling the rest, control tokens. */
static ds_tokenizer *make_tokenizer(void) {
    static const char *ctl[] = {"<｜User｜>", "<｜Assistant｜>", "<｜System｜>", "<think>", "</think>", "｜DSML｜",
                                "<｜latest_reminder｜>", "<｜deepseek_image｜>", "<｜action｜>", "<｜query｜>",
                                "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
                                "<｜place▁holder▁no▁1｜>"}; /* the last: special and samplable (skip_special tests) */
    uint32_t map[256];
    byte_chars(map);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddArrayToObject(model, "merges");
    char s[16], a[8], b2[8];
    for (int b = 0; b < 256; b++) {
        utf8(map[b], s);
        cJSON_AddNumberToObject(vocab, s, 3 + b);
    }
    int id = 259, k = 0;
    int ctl_base = 400;
    while (id < V) {
        if (id == ctl_base) { id += (int)DS_ARRAY_LEN(ctl); continue; }
        utf8(map['a' + k % 26], a);
        utf8(map['a' + (k / 26) % 26], b2);
        snprintf(s, sizeof s, "%s%s", a, b2);
        k++;
        if (cJSON_GetObjectItemCaseSensitive(vocab, s)) continue;
        cJSON_AddNumberToObject(vocab, s, id++);
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    const char *fixed[3] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
    for (int i = 0; i < 3 + (int)DS_ARRAY_LEN(ctl); i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", i < 3 ? i : ctl_base + i - 3);
        cJSON_AddStringToObject(t, "content", i < 3 ? fixed[i] : ctl[i - 3]);
        cJSON_AddBoolToObject(t, "special", i < 3 || i == 3 + (int)DS_ARRAY_LEN(ctl) - 1);
        cJSON_AddBoolToObject(t, "normalized", false);
        cJSON_AddItemToArray(added, t);
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", false);
    cJSON_AddBoolToObject(pre, "use_regex", true);
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    char *js = cJSON_PrintUnformatted(root);
    ds_tokenizer *tok = NULL;
    ds_error e = {0};
    int rc = ds_tokenizer_load_mem(js, strlen(js), "test-tokenizer", &tok, &e);
    CHECK(rc == 0, "tokenizer: %s", e.msg);
    free(js);
    cJSON_Delete(root);
    return tok;
}

typedef struct stack {
    ds_tokenizer *tok;
    ds_backend *be;
    ds_token_mask mask;
    ds_metrics m;
    ds_engine *e;
    ds_server *srv;
    int port;
    const char *names[2];
} stack;

static void stack_up_cfg(stack *st, int max_seqs, int max_pending, double row_delay_us, const char *api_key,
                         const ds_server_config *over);
static void stack_up(stack *st, int max_seqs, int max_pending, double row_delay_us, const char *api_key) {
    stack_up_cfg(st, max_seqs, max_pending, row_delay_us, api_key, NULL);
}

/* `over` (optional) supplies http_threads / http_timeout_s / max_body for hardening tests. */
static void stack_up_cfg(stack *st, int max_seqs, int max_pending, double row_delay_us, const char *api_key,
                         const ds_server_config *over) {
    memset(st, 0, sizeof *st);
    st->tok = make_tokenizer();
    ds_synthetic_options o = {.vocab = V, .window = 24, .eos_id = EOS_ID, .bos_id = 0, .pad_id = 2, .noise_id = 399,
                              .image_id = 407, .nan_token = -1, .row_delay_us = row_delay_us, .peak = 8};
    st->be = ds_backend_synthetic_new(&o);
    ds_token_mask_init(&st->mask, V, 399, 0, 2, 407, NULL, 0, NULL, 0);
    /* the test vocabulary's 259..399 two-byte symbols stay samplable; control tokens must not be sampled */
    for (int i = 400; i < V && i < 414; i++) st->mask.masked[i] = 1;
    st->mask.masked[3] = 1; /* byte 0x00: C strings in the test's own comparisons cannot hold it */
    ds_metrics_init(&st->m);
    ds_engine_config ec;
    ds_engine_config_defaults(&ec);
    ec.max_num_seqs = max_seqs;
    ec.max_num_batched_tokens = 256;
    ec.block_size = 16;
    ec.max_model_len = 4096;
    ec.max_pending = max_pending;
    ec.kv_budget_bytes = 32u << 20;
    ec.fingerprint = "http-test";
    ds_detok_ops d = ds_server_detok_ops(st->tok);
    ds_error err = {0};
    st->e = ds_engine_create(&ec, st->be, &st->mask, &st->m, &d, &err);
    CHECK(st->e, "%s", err.msg);
    st->names[0] = "deepseek-v41";
    st->names[1] = "alias-model";
    ds_server_config sc = {.host = "127.0.0.1", .port = 0, .api_key = api_key, .names = st->names, .n_names = 2,
                           .root = "synthetic", .max_model_len = 4096, .max_body = 64 << 10, .http_threads = 4,
                           .max_connections = 512, .server_info_json = "{\"test\":true}"};
    sc.http_threads = 0; /* one thread per connection, bounded by max_connections */
    if (over) {
        sc.http_threads = over->http_threads;
        sc.http_timeout_s = over->http_timeout_s;
        if (over->max_body) sc.max_body = over->max_body;
    }
    st->srv = ds_server_start(&sc, st->e, st->tok, &st->m, &err);
    CHECK(st->srv, "%s", err.msg);
    st->port = st->srv ? ds_server_port(st->srv) : 0;
}

static void stack_down(stack *st) {
    ds_server_stop(st->srv);
    ds_engine_destroy(st->e);
    ds_backend_free(st->be);
    ds_token_mask_free(&st->mask);
    ds_metrics_destroy(&st->m);
    ds_tokenizer_free(st->tok);
}

/* ------------------------------------------------------------------ a minimal HTTP/1.1 client */

typedef struct http_resp {
    int status;
    char *headers;
    char *body;
    size_t body_len;
} http_resp;

static int connect_lo(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_req(int fd, const char *method, const char *path, const char *extra_headers, const char *body, size_t blen) {
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%sContent-Length: %zu\r\n"
                                        "Content-Type: application/json\r\n\r\n",
                     method, path, extra_headers ? extra_headers : "", blen);
    if (write(fd, head, (size_t)n) < 0) return;
    size_t off = 0;
    while (off < blen) {
        ssize_t w = send(fd, body + off, blen - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
}

/* Read to EOF and split; chunked bodies are de-chunked. */
static void read_resp(int fd, http_resp *r) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while ((got = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)got;
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    memset(r, 0, sizeof *r);
    sscanf(buf, "HTTP/1.1 %d", &r->status);
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep) { r->headers = buf; r->body = strdup(""); return; }
    *sep = 0;
    r->headers = buf;
    char *body = sep + 4;
    if (strcasestr(buf, "Transfer-Encoding: chunked")) {
        char *out = malloc(strlen(body) + 1);
        size_t o = 0;
        char *p = body;
        for (;;) {
            size_t len = strtoul(p, &p, 16);
            p = strstr(p, "\r\n");
            if (!p || !len) break;
            p += 2;
            memcpy(out + o, p, len);
            o += len;
            p += len + 2;
        }
        out[o] = 0;
        r->body = out;
        r->body_len = o;
    } else {
        r->body = strdup(body);
        r->body_len = strlen(body);
    }
}

static http_resp http(int port, const char *method, const char *path, const char *hdr, const char *body) {
    http_resp r;
    memset(&r, 0, sizeof r);
    int fd = connect_lo(port);
    if (fd < 0) return r;
    send_req(fd, method, path, hdr, body ? body : "", body ? strlen(body) : 0);
    read_resp(fd, &r);
    close(fd);
    return r;
}

static void resp_free(http_resp *r) {
    free(r->headers);
    free(r->body);
}

static cJSON *jbody(const http_resp *r) { return cJSON_Parse(r->body ? r->body : ""); }

static const char *jerr_code(cJSON *j) {
    cJSON *e = cJSON_GetObjectItem(j, "error");
    cJSON *c = e ? cJSON_GetObjectItem(e, "code") : NULL;
    return c && cJSON_IsString(c) ? c->valuestring : "";
}
static const char *jerr_param(cJSON *j) {
    cJSON *e = cJSON_GetObjectItem(j, "error");
    cJSON *c = e ? cJSON_GetObjectItem(e, "param") : NULL;
    return c && cJSON_IsString(c) ? c->valuestring : "(null)";
}

/* ------------------------------------------------------------------ reference */

/* Greedy continuation of a completion prompt computed without the engine. */
static char *reference_text(stack *st, const char *prompt, int max_tokens) {
    ds_tokens t = {0};
    ds_error e;
    ds_tokens_push(&t, 0); /* BOS */
    ds_tokenizer_encode(st->tok, prompt, strlen(prompt), true, &t, &e);
    float *lg = malloc(sizeof(float) * V);
    int32_t out[512];
    int n = 0;
    for (int k = 0; k < max_tokens; k++) {
        ds_synthetic_reference_logits(st->be, t.ids, (int64_t)t.n - 1, lg);
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!st->mask.masked[i] && (best < 0 || lg[i] > lg[best])) best = i;
        ds_tokens_push(&t, best);
        if (best == EOS_ID) break;
        out[n++] = best;
    }
    char *s = ds_tokenizer_decode(st->tok, out, (size_t)n, true, NULL, &e);
    ds_tokens_free(&t);
    free(lg);
    return s;
}

static char *cmpl_body(const char *prompt, int max_tokens, const char *extra) {
    char *b;
    if (asprintf(&b, "{\"model\":\"deepseek-v41\",\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0%s%s}", prompt,
                 max_tokens, extra ? "," : "", extra ? extra : "") < 0)
        return NULL;
    return b;
}

/* Concatenated `text` of completion SSE chunks; checks framing. */
static char *sse_text(const char *body, bool *framing_ok, cJSON **usage) {
    size_t cap = strlen(body) + 1, n = 0;
    char *out = calloc(cap, 1);
    *framing_ok = true;
    if (usage) *usage = NULL;
    const char *p = body;
    bool done = false;
    while (*p) {
        if (strncmp(p, "data: ", 6)) { *framing_ok = false; break; }
        const char *end = strstr(p, "\n\n");
        if (!end) { *framing_ok = false; break; }
        char *ev = strndup(p + 6, (size_t)(end - p - 6));
        if (!strcmp(ev, "[DONE]")) {
            done = true;
            free(ev);
            p = end + 2;
            if (*p) *framing_ok = false;
            break;
        }
        cJSON *j = cJSON_Parse(ev);
        free(ev);
        if (!j) { *framing_ok = false; break; }
        cJSON *ch = cJSON_GetObjectItem(j, "choices");
        if (cJSON_GetArraySize(ch) == 0 && usage) *usage = cJSON_Duplicate(cJSON_GetObjectItem(j, "usage"), 1);
        cJSON *c0 = cJSON_GetArrayItem(ch, 0);
        cJSON *t = c0 ? cJSON_GetObjectItem(c0, "text") : NULL;
        if (t && cJSON_IsString(t)) {
            size_t l = strlen(t->valuestring);
            memcpy(out + n, t->valuestring, l);
            n += l;
        }
        cJSON_Delete(j);
        p = end + 2;
    }
    if (!done) *framing_ok = false;
    return out;
}

#endif
