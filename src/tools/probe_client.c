/* Probe session over tools/http_client (see probe_client.h for why the probes share it). */
#include "io/io_util.h"
#include "tools/probe_client.h"
#include "base/fsutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOOL_VERSION "dsflash-tools 1"

void ds_probe_utc(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* GET path and parse it; NULL with a message naming the URL when that fails or is not 200 */
static cJSON *get_json(ds_probe *p, const char *path, char *err, size_t n) {
    ds_http_response r;
    cJSON *j = NULL;
    if (ds_http_get(&p->http, path, p->timeout_s < 30 ? p->timeout_s : 30, &r))
        snprintf(err, n, "GET %s%s: %s", p->http.base_url, path, r.error);
    else if (r.status != 200)
        snprintf(err, n, "GET %s%s: HTTP %ld: %.200s", p->http.base_url, path, r.status, r.body);
    else if (!(j = cJSON_Parse(r.body)))
        snprintf(err, n, "GET %s%s: the answer is not JSON: %.120s", p->http.base_url, path, r.body);
    ds_http_response_free(&r);
    return j;
}

static int check_models(ds_probe *p, const char *model, char *err, size_t n) {
    cJSON *m = get_json(p, "/v1/models", err, n);
    if (!m) return 3;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(m, "data"), *it;
    int found = 0, first = 1;
    cJSON_ArrayForEach(it, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsString(id)) continue;
        if (first && !model) snprintf(p->model, sizeof p->model, "%s", id->valuestring);
        first = 0;
        if (model && !strcmp(model, id->valuestring)) found = 1;
    }
    cJSON_Delete(m);
    if (model && !found) {
        snprintf(err, n, "--model %s: the server at %s does not list it (GET /v1/models)", model, p->http.base_url);
        return 1;
    }
    if (model) snprintf(p->model, sizeof p->model, "%s", model);
    if (!p->model[0]) {
        snprintf(err, n, "GET %s/v1/models lists no model", p->http.base_url);
        return 1;
    }
    return 0;
}

int ds_probe_open(ds_probe *p, const char *tool, const char *base_url, const char *api_key, const char *model,
                  double timeout_s, int argc, char **argv) {
    memset(p, 0, sizeof *p);
    p->tool = tool;
    p->timeout_s = timeout_s;
    ds_probe_utc(p->started_utc, sizeof p->started_utc);
    size_t len = 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    p->command = ds_xcalloc(1, len + 8);
    strcat(p->command, "dsflash");
    for (int i = 0; i < argc; i++) strcat(strcat(p->command, " "), argv[i]);
    char err[512];
    if (ds_http_client_init(&p->http, base_url, api_key, &p->cancel, err, sizeof err)) {
        fprintf(stderr, "dsflash %s: --base-url: %s\n", tool, err);
        return 2;
    }
    cJSON *h = get_json(p, "/health", err, sizeof err);
    const cJSON *st = h ? cJSON_GetObjectItemCaseSensitive(h, "status") : NULL;
    int rc = 0;
    if (!h) rc = 3;
    else if (!cJSON_IsString(st) || strcmp(st->valuestring, "ok")) {
        snprintf(err, sizeof err, "GET %s/health: status is not \"ok\"", p->http.base_url);
        rc = 3;
    }
    cJSON_Delete(h);
    if (!rc) rc = check_models(p, model, err, sizeof err);
    if (!rc && !(p->server_info = get_json(p, "/server_info", err, sizeof err))) rc = 3;
    if (!rc) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(p->server_info, "instance_id");
        if (!cJSON_IsString(id)) {
            snprintf(err, sizeof err, "GET %s/server_info has no instance_id", p->http.base_url);
            rc = 1;
        } else snprintf(p->instance_id, sizeof p->instance_id, "%s", id->valuestring);
    }
    if (rc) fprintf(stderr, "dsflash %s: %s\n", tool, err);
    return rc;
}

int ds_probe_recheck(ds_probe *p) {
    char err[512];
    cJSON *si = get_json(p, "/server_info", err, sizeof err);
    const cJSON *id = si ? cJSON_GetObjectItemCaseSensitive(si, "instance_id") : NULL;
    int rc = 0;
    if (!si) rc = 1;
    else if (!cJSON_IsString(id) || strcmp(id->valuestring, p->instance_id)) {
        snprintf(err, sizeof err, "the server's instance_id changed from %s to %s during the run: the server restarted; "
                 "the run is invalid", p->instance_id, cJSON_IsString(id) ? id->valuestring : "(none)");
        rc = 1;
    }
    cJSON_Delete(si);
    if (rc) fprintf(stderr, "dsflash %s: %s\n", p->tool, err);
    return rc;
}

void ds_probe_close(ds_probe *p) {
    cJSON_Delete(p->server_info);
    free(p->command);
    memset(p, 0, sizeof *p);
}

cJSON *ds_probe_post(ds_probe *p, const char *path, const cJSON *body, char *err, size_t n) {
    char *txt = cJSON_PrintUnformatted(body);
    ds_http_response r;
    cJSON *j = NULL;
    if (ds_http_post_json(&p->http, path, txt, p->timeout_s, &r))
        snprintf(err, n, "POST %s: %s", path, r.error);
    else if (r.status != 200) {
        cJSON *e = cJSON_Parse(r.body);
        const cJSON *eo = e ? cJSON_GetObjectItemCaseSensitive(e, "error") : NULL;
        const cJSON *msg = eo ? cJSON_GetObjectItemCaseSensitive(eo, "message") : NULL;
        snprintf(err, n, "POST %s: HTTP %ld: %.300s", path, r.status, cJSON_IsString(msg) ? msg->valuestring : r.body);
        cJSON_Delete(e);
    } else if (!(j = cJSON_Parse(r.body)))
        snprintf(err, n, "POST %s: the answer is not JSON: %.120s", path, r.body);
    ds_http_response_free(&r);
    free(txt);
    return j;
}

static int64_t tokenize(ds_probe *p, cJSON *body, int32_t **ids, char **text, char *err, size_t n) {
    cJSON *r = ds_probe_post(p, "/tokenize", body, err, n);
    cJSON_Delete(body);
    if (!r) return -1;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(r, "count");
    const cJSON *mml = cJSON_GetObjectItemCaseSensitive(r, "max_model_len");
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(r, "tokens");
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(r, "text");
    int64_t count = ds_io_json_int_or(c, 0, INT32_MAX, -1);
    if (count < 0) snprintf(err, n, "POST /tokenize: the answer has no count");
    if (cJSON_IsNumber(mml)) p->max_model_len = ds_io_json_int_or(mml, 0, INT64_MAX, 0);
    if (ids && count >= 0) {
        if (cJSON_GetArraySize(toks) != count) {
            snprintf(err, n, "POST /tokenize: %d tokens listed for count %lld", cJSON_GetArraySize(toks), (long long)count);
            count = -1;
        } else {
            *ids = ds_xmalloc(sizeof(int32_t) * (size_t)(count ? count : 1));
            int64_t i = 0;
            const cJSON *t;
            cJSON_ArrayForEach(t, toks)(*ids)[i++] = (int32_t)ds_io_json_int_or(t, 0, INT32_MAX, -1);
        }
    }
    if (text && count >= 0) *text = ds_xstrdup(cJSON_IsString(tx) ? tx->valuestring : "");
    cJSON_Delete(r);
    return count;
}

int64_t ds_probe_tokenize_raw(ds_probe *p, cJSON *body, int32_t **ids, char **text, char *err, size_t n) {
    return tokenize(p, body, ids, text, err, n);
}

int64_t ds_probe_tokenize_prompt(ds_probe *p, const char *prompt, int32_t **ids, char *err, size_t n) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddStringToObject(b, "prompt", prompt);
    return tokenize(p, b, ids, NULL, err, n);
}

int64_t ds_probe_tokenize_chat(ds_probe *p, const cJSON *messages, const cJSON *tools, const char *effort,
                               char **text, char *err, size_t n) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddItemToObject(b, "messages", cJSON_Duplicate(messages, 1));
    if (tools) cJSON_AddItemToObject(b, "tools", cJSON_Duplicate(tools, 1));
    if (effort) cJSON_AddStringToObject(b, "reasoning_effort", effort);
    if (text) cJSON_AddTrueToObject(b, "return_text");
    return tokenize(p, b, NULL, text, err, n);
}

/* ---- background streams ---- */

static int on_event(void *user, const char *data, size_t len, double t) {
    ds_probe_stream *s = user;
    pthread_mutex_lock(&s->mu);
    s->events++;
    if (!s->first) {
        s->first = true;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void *stream_main(void *arg) {
    ds_probe_stream *s = arg;
    ds_http_response r;
    int rc = ds_http_post_sse(&s->http, s->path, s->body, s->p->timeout_s, on_event, s, &r);
    pthread_mutex_lock(&s->mu);
    s->status = r.status;
    s->failed = rc != 0 || r.status != 200;
    if (s->failed) snprintf(s->error, sizeof s->error, "%s", rc ? r.error : r.body);
    s->done = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    ds_http_response_free(&r);
    return NULL;
}

int ds_probe_stream_start(ds_probe_stream *s, ds_probe *p, const char *path, const cJSON *body) {
    memset(s, 0, sizeof *s);
    s->p = p;
    s->http = p->http;
    s->http.cancel = &s->cancel;
    s->path = ds_xstrdup(path);
    s->body = cJSON_PrintUnformatted(body);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, stream_main, s)) {
        s->done = s->failed = true;
        snprintf(s->error, sizeof s->error, "cannot start a thread");
        return -1;
    }
    return 0;
}

int ds_probe_stream_wait_first(ds_probe_stream *s, double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while (!s->first && !s->done && rc == 0) rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    bool ok = s->first;
    pthread_mutex_unlock(&s->mu);
    return ok ? 0 : -1;
}

void ds_probe_stream_stop(ds_probe_stream *s) {
    __atomic_store_n(&s->cancel, 1, __ATOMIC_RELAXED);
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->path);
    free(s->body);
    s->path = s->body = NULL;
}

/* ---- parallel loop ---- */

typedef struct {
    pthread_mutex_t mu;
    int64_t next, n;
    void (*fn)(void *, int64_t);
    void *ctx;
} par_state;

static void *par_main(void *arg) {
    par_state *ps = arg;
    for (;;) {
        pthread_mutex_lock(&ps->mu);
        int64_t i = ps->next < ps->n ? ps->next++ : -1;
        pthread_mutex_unlock(&ps->mu);
        if (i < 0) return NULL;
        ps->fn(ps->ctx, i);
    }
}

void ds_probe_parallel(int64_t n, int conc, void (*fn)(void *ctx, int64_t i), void *ctx) {
    par_state ps = {.next = 0, .n = n, .fn = fn, .ctx = ctx};
    pthread_mutex_init(&ps.mu, NULL);
    if (conc < 1) conc = 1;
    if (conc > n) conc = n > 0 ? (int)n : 1;
    pthread_t th[64];
    if (conc > 64) conc = 64;
    int started = 0;
    for (int i = 0; i < conc; i++)
        if (!pthread_create(&th[i], NULL, par_main, &ps)) started++;
    if (!started) par_main(&ps);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&ps.mu);
}

/* ---- results ---- */

cJSON *ds_probe_envelope(const ds_probe *p, const char *schema) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", schema);
    cJSON_AddStringToObject(j, "tool_version", TOOL_VERSION);
    cJSON_AddStringToObject(j, "started_utc", p->started_utc);
    cJSON_AddStringToObject(j, "command", p->command ? p->command : "");
    cJSON_AddStringToObject(j, "base_url", p->http.base_url);
    cJSON_AddStringToObject(j, "model", p->model);
    if (p->server_info) cJSON_AddItemToObject(j, "server", cJSON_Duplicate(p->server_info, 1));
    return j;
}

int ds_probe_write_text(const char *path, const char *text) {
    ds_error e;
    if (ds_write_file_atomic(path, text, strlen(text), &e)) {
        fprintf(stderr, "dsflash: cannot write %s: %s\n", path, e.msg);
        return 3;
    }
    return 0;
}

int ds_probe_write_json(const char *path, const cJSON *j) {
    char *txt = cJSON_Print(j);
    size_t n = strlen(txt);
    txt = ds_xrealloc(txt, n + 2);
    txt[n] = '\n', txt[n + 1] = 0;
    int rc = ds_probe_write_text(path, txt);
    free(txt);
    return rc;
}

void ds_probe_chat_answer(const cJSON *resp, ds_chat_answer *a) {
    memset(a, 0, sizeof *a);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(resp, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(ch, "message");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(resp, "usage"), "completion_tokens");
    a->content = cJSON_IsString(c) ? c->valuestring : NULL;
    a->reasoning = cJSON_IsString(r) ? r->valuestring : NULL;
    a->finish_reason = cJSON_IsString(f) ? f->valuestring : NULL;
    a->tool_calls = cJSON_IsArray(tc) ? tc : NULL;
    a->completion_tokens = ds_io_json_int_or(u, 0, INT64_MAX, -1);
}

void ds_probe_add_message(cJSON *messages, const char *role, const char *content) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "role", role);
    cJSON_AddStringToObject(x, "content", content);
    cJSON_AddItemToArray(messages, x);
}

void ds_probe_add_readme_read(cJSON *messages, const char *doc) {
    cJSON_AddItemToArray(messages, cJSON_Parse("{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_0\","
                                               "\"type\":\"function\",\"function\":{\"name\":\"read\","
                                               "\"arguments\":\"{\\\"path\\\":\\\"README.md\\\"}\"}}]}"));
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "role", "tool");
    cJSON_AddStringToObject(x, "tool_call_id", "call_0");
    cJSON_AddStringToObject(x, "content", doc);
    cJSON_AddItemToArray(messages, x);
}
