/* The bench's timed requests and the server counters around them (TOOLS.md §4.3).
 *
 * Why one thread per request: a batch of c streaming requests must be in flight together, each
 * timed on its own (t0 before sending, t_first / t_last at the first / last chunk with non-empty
 * text, gaps between text chunks for the inter-token latency); a blocking libcurl call per thread
 * keeps each timeline independent of the others.  The clocks are read in the SSE callback, as
 * the bytes completing an event arrive.
 *
 * Counters come from /metrics in the Prometheus text format.  Series are matched by name suffix
 * (dsflash_… and vllm:… alike) and summed over their label sets; a server without /metrics simply
 * has no counters, and the derived figures fall back as §4.3 says (A = 1.0). */
#define _GNU_SOURCE
#include "io/io_util.h"
#include "tools/bench_client.h"
#include "base/common.h"
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- /metrics ---- */

static bool ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k) && (n == k || s[n - k - 1] == '_' || s[n - k - 1] == ':');
}

static void add_series(bench_counters *c, const char *name, size_t n, double v) {
    static const struct { const char *suffix; size_t value_off, has_off; } k[] = {
        {"num_requests_running", offsetof(bench_counters, running), offsetof(bench_counters, has_queue)},
        {"num_requests_waiting", offsetof(bench_counters, waiting), offsetof(bench_counters, has_queue)},
        {"spec_decode_num_accepted_tokens_total", offsetof(bench_counters, accepted), offsetof(bench_counters, has_accepted)},
        {"spec_decode_num_drafts_total", offsetof(bench_counters, drafts), offsetof(bench_counters, has_drafts)},
        {"spec_decode_num_draft_tokens_total", offsetof(bench_counters, draft_tokens), offsetof(bench_counters, has_draft_tokens)},
        {"prefix_cache_hits_total", offsetof(bench_counters, prefix_hits), offsetof(bench_counters, has_prefix_hits)},
        {"kernel_fallback_total", offsetof(bench_counters, kernel_fallback), offsetof(bench_counters, has_fallback)},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(k); i++)
        if (ends_with(name, n, k[i].suffix)) {
            *(double *)((char *)c + k[i].value_off) += v;
            *(bool *)((char *)c + k[i].has_off) = true;
            return;
        }
}

int bench_scrape(const bench_run *r, bench_counters *c) {
    memset(c, 0, sizeof *c);
    ds_http_response resp;
    if (ds_http_get(&r->http, "/metrics", 30.0, &resp) || resp.status != 200) {
        ds_http_response_free(&resp);
        return -1;
    }
    for (char *line = resp.body; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (*line != '#') {
            size_t name_len = strcspn(line, "{ \t");
            char *val = line + name_len;
            if (*val == '{') val = strchr(val, '}') ? strchr(val, '}') + 1 : val + strlen(val);
            char *end;
            double v = strtod(val, &end);
            if (end != val && name_len) add_series(c, line, name_len, v);
        }
        line = nl ? nl + 1 : NULL;
    }
    ds_http_response_free(&resp);
    c->ok = true;
    return 0;
}

int bench_wait_idle(const bench_run *r, double timeout_s) {
    double t_end = ds_now() + timeout_s;
    for (;;) {
        bench_counters c;
        if (bench_scrape(r, &c) || !c.has_queue) return 0;   /* nothing to wait on */
        if (c.running == 0 && c.waiting == 0) return 0;
        if (ds_now() > t_end) return -1;
        usleep(20000);
    }
}

/* ---- one streaming request ---- */

void bench_result_free(bench_result *x) {
    free(x->text);
    free(x->gaps);
    memset(x, 0, sizeof *x);
}

static void add_text(bench_result *x, const char *s, double t) {
    size_t n = strlen(s);
    if (!n) return;
    if (x->t_first == 0) x->t_first = t;
    else {
        if (x->n_gaps == x->cap_gaps) {
            x->cap_gaps = DS_MAX(64, x->cap_gaps * 2);
            x->gaps = ds_xrealloc(x->gaps, sizeof(double) * (size_t)x->cap_gaps);
        }
        x->gaps[x->n_gaps++] = t - x->t_last;
    }
    x->t_last = t;
    x->text = ds_xrealloc(x->text, x->text_len + n + 1);
    memcpy(x->text + x->text_len, s, n + 1);
    x->text_len += n;
}

/* One SSE event: a completion chunk (text and/or usage), "[DONE]", or an in-stream error. */
static int on_event(void *user, const char *data, size_t len, double t) {
    bench_result *x = user;
    if (!strcmp(data, "[DONE]")) return 0;
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!j) { snprintf(x->why, sizeof x->why, "unparsable stream event: %.80s", data); return 1; }
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (err) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
        snprintf(x->why, sizeof x->why, "error in stream: %.150s", cJSON_IsString(m) ? m->valuestring : data);
        cJSON_Delete(j);
        return 1;
    }
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(ch, "text");
    if (cJSON_IsString(text)) add_text(x, text->valuestring, t);
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    if (cJSON_IsNumber(ct)) x->n_out = (int)ds_io_json_int_or(ct, 0, INT32_MAX, -1);
    if (cJSON_IsNumber(pt)) x->usage_prompt = (int)ds_io_json_int_or(pt, 0, INT32_MAX, -1);
    cJSON_Delete(j);
    return 0;
}

typedef struct {
    const bench_run *r;
    const char *prompt;
    int max_tokens;
    bench_result *res;
} req_job;

static char *completion_body(const bench_run *r, const char *prompt, int max_tokens) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", r->model);
    cJSON_AddStringToObject(b, "prompt", prompt);
    cJSON_AddNumberToObject(b, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddBoolToObject(b, "ignore_eos", r->o->ignore_eos);
    cJSON_AddBoolToObject(b, "stream", 1);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage", 1);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

static void *request_thread(void *arg) {
    req_job *j = arg;
    bench_result *x = j->res;
    char *body = completion_body(j->r, j->prompt, j->max_tokens);
    ds_http_response resp;
    x->n_out = -1;
    x->usage_prompt = -1;
    x->t0 = ds_now();
    int rc = ds_http_post_sse(&j->r->http, "/v1/completions", body, j->r->o->timeout_s, on_event, x, &resp);
    free(body);
    if (x->why[0]) x->ok = false;
    else if (rc) snprintf(x->why, sizeof x->why, "%s", resp.error);
    else if (resp.status != 200) snprintf(x->why, sizeof x->why, "HTTP %ld: %.150s", resp.status, resp.body);
    else if (x->n_out < 0) snprintf(x->why, sizeof x->why, "no usage.completion_tokens in the stream");
    else if (x->t_first == 0) snprintf(x->why, sizeof x->why, "no text in the stream");
    else if (j->r->o->ignore_eos && x->n_out != j->max_tokens)
        snprintf(x->why, sizeof x->why, "%d tokens out, %d asked with ignore_eos", x->n_out, j->max_tokens);
    x->ok = !x->why[0];
    ds_http_response_free(&resp);
    return NULL;
}

void bench_send_batch(const bench_run *r, const char *const *prompts, int n, int max_tokens, bench_result *res) {
    pthread_t *th = ds_xmalloc(sizeof(pthread_t) * (size_t)n);
    bool *started = ds_xcalloc((size_t)n, sizeof(bool));
    req_job *jobs = ds_xmalloc(sizeof(req_job) * (size_t)n);
    for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        jobs[i] = (req_job){.r = r, .prompt = prompts[i], .max_tokens = max_tokens, .res = &res[i]};
        started[i] = pthread_create(&th[i], NULL, request_thread, &jobs[i]) == 0;
        if (!started[i]) snprintf(res[i].why, sizeof res[i].why, "cannot start a request thread");
    }
    for (int i = 0; i < n; i++)
        if (started[i]) pthread_join(th[i], NULL);
    free(started);
    free(th);
    free(jobs);
}
