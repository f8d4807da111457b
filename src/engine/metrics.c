/* Metrics registry and Prometheus rendering (see metrics.h for the locking design). */
#include "engine/metrics.h"
#include <string.h>

static void hist_init(ds_histogram *h, const double *le, int n) {
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->le, le, sizeof(double) * (size_t)n);
}

static void init_hists(ds_metrics *m) {
    static const double lat[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900};
    static const double step[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
    hist_init(&m->ttft, lat, 16);
    hist_init(&m->e2e, lat, 16);
    hist_init(&m->step_prefill, step, 14);
    hist_init(&m->step_decode, step, 14);
}

void ds_metrics_init(ds_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    init_hists(m);
}

void ds_metrics_destroy(ds_metrics *m) { pthread_mutex_destroy(&m->mu); }

void ds_metrics_reset(ds_metrics *m) {
    atomic_uint_fast64_t *all[] = {&m->prompt_tokens, &m->generation_tokens, &m->success[0], &m->success[1],
                                   &m->success[2], &m->cancelled, &m->preemptions, &m->numeric_errors,
                                   &m->kernel_fallback, &m->prefix_queries, &m->prefix_hits, &m->gate_prefill,
                                   &m->gate_decode, &m->gate_forced, &m->gate_violations,
                                   &m->gate_max_decode_stall, &m->tool_parse_failures, &m->tool_calls_dropped,
                                   &m->spec_drafts, &m->spec_draft_tokens, &m->spec_accepted, &m->spec_guard_request,
                                   &m->spec_guard_global};
    for (size_t i = 0; i < DS_ARRAY_LEN(all); i++) atomic_store(all[i], 0);
    for (int i = 0; i < DS_SPEC_MAX_POS; i++) atomic_store(&m->spec_accepted_pos[i], 0);
    pthread_mutex_lock(&m->mu);
    m->n_rejected = m->n_http = 0;
    init_hists(m);
    pthread_mutex_unlock(&m->mu);
}

static void labelled_inc(ds_labelled_counter *arr, int *n, const char *label) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(arr[i].label, label)) {
            arr[i].value++;
            return;
        }
    if (*n == DS_METRIC_MAX_LABELLED) return; /* bounded: labels come from a fixed set */
    snprintf(arr[*n].label, sizeof arr[*n].label, "%s", label);
    arr[*n].value = 1;
    (*n)++;
}

void ds_metrics_inc_rejected(ds_metrics *m, const char *code) {
    char l[96];
    snprintf(l, sizeof l, "code=\"%s\"", code);
    pthread_mutex_lock(&m->mu);
    labelled_inc(m->rejected, &m->n_rejected, l);
    pthread_mutex_unlock(&m->mu);
}

void ds_metrics_inc_http(ds_metrics *m, const char *endpoint, int status) {
    char l[96];
    snprintf(l, sizeof l, "endpoint=\"%s\",code=\"%d\"", endpoint, status);
    pthread_mutex_lock(&m->mu);
    labelled_inc(m->http, &m->n_http, l);
    pthread_mutex_unlock(&m->mu);
}

void ds_hist_observe(ds_metrics *m, ds_histogram *h, double v) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < h->n && v > h->le[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->total++;
    pthread_mutex_unlock(&m->mu);
}

static void counter(ds_tbuf *o, const char *name, const char *help, uint64_t v) {
    ds_tbuf_printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}
static void gauge(ds_tbuf *o, const char *name, const char *help, double v) {
    ds_tbuf_printf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}
static void hist(ds_tbuf *o, const char *name, const char *help, const char *label, const ds_histogram *h, bool header) {
    if (header) ds_tbuf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    const char *sep = label[0] ? "," : "";
    for (int b = 0; b < h->n; b++) {
        cum += h->count[b];
        ds_tbuf_printf(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, label, sep, h->le[b], (unsigned long long)cum);
    }
    cum += h->count[h->n];
    ds_tbuf_printf(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, label, sep, (unsigned long long)cum);
    if (label[0]) {
        ds_tbuf_printf(o, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, label, h->sum, name, label, (unsigned long long)h->total);
    } else {
        ds_tbuf_printf(o, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->total);
    }
}

void ds_metrics_render(ds_metrics *m, const ds_metrics_gauges *g, ds_tbuf *o) {
    gauge(o, "dsflash_num_requests_running", "requests in the running set", g->running);
    gauge(o, "dsflash_num_requests_waiting", "requests in the waiting queue", g->waiting);
    gauge(o, "dsflash_kv_cache_usage_ratio", "share of CKV blocks in use",
          g->blocks_total ? (double)g->blocks_used / (double)g->blocks_total : 0.0);
    gauge(o, "dsflash_kv_cache_blocks_total", "CKV blocks in the pool", (double)g->blocks_total);
    gauge(o, "dsflash_kv_cache_blocks_used", "CKV blocks held by requests", (double)g->blocks_used);
    gauge(o, "dsflash_kv_cache_blocks_evictable", "CKV blocks kept by the prefix cache, evictable", (double)g->blocks_evictable);
    gauge(o, "dsflash_kv_cache_capacity_tokens", "N of the capacity line", (double)g->capacity_tokens);
    gauge(o, "dsflash_engine_ready", "1 after the READY line", g->ready);
    gauge(o, "dsflash_spec_enabled", "1 while speculative decoding is on", g->spec_enabled);
    counter(o, "dsflash_prompt_tokens_total", "prompt tokens computed (cache hits excluded)", atomic_load(&m->prompt_tokens));
    counter(o, "dsflash_generation_tokens_total", "tokens generated", atomic_load(&m->generation_tokens));
    static const char *fin[] = {"stop", "length", "tool_calls"};
    ds_tbuf_puts(o, "# HELP dsflash_request_success_total finished requests by finish reason\n"
                    "# TYPE dsflash_request_success_total counter\n");
    for (int i = 0; i < DS_FINISH_N; i++)
        ds_tbuf_printf(o, "dsflash_request_success_total{finish_reason=\"%s\"} %llu\n", fin[i],
                       (unsigned long long)atomic_load(&m->success[i]));
    counter(o, "dsflash_requests_cancelled_total", "requests cancelled (client disconnect)", atomic_load(&m->cancelled));
    counter(o, "dsflash_preemptions_total", "running requests preempted for KV", atomic_load(&m->preemptions));
    counter(o, "dsflash_numeric_errors_total", "rows with NaN/Inf logits", atomic_load(&m->numeric_errors));
    counter(o, "dsflash_kernel_fallback_total", "kernel implementation switches after start-up", atomic_load(&m->kernel_fallback));
    counter(o, "dsflash_prefix_cache_queries_total", "prompt tokens looked up in the prefix cache", atomic_load(&m->prefix_queries));
    counter(o, "dsflash_prefix_cache_hits_total", "prompt tokens served from the prefix cache", atomic_load(&m->prefix_hits));
    counter(o, "dsflash_spec_decode_num_drafts_total", "verify steps with drafts", atomic_load(&m->spec_drafts));
    counter(o, "dsflash_spec_decode_num_draft_tokens_total", "draft tokens verified", atomic_load(&m->spec_draft_tokens));
    counter(o, "dsflash_spec_decode_num_accepted_tokens_total", "draft tokens accepted", atomic_load(&m->spec_accepted));
    ds_tbuf_puts(o, "# HELP dsflash_spec_decode_num_accepted_tokens_per_pos_total verify steps that accepted draft i\n"
                    "# TYPE dsflash_spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (int i = 0; i < g->spec_positions && i < DS_SPEC_MAX_POS; i++)
        ds_tbuf_printf(o, "dsflash_spec_decode_num_accepted_tokens_per_pos_total{position=\"%d\"} %llu\n", i,
                       (unsigned long long)atomic_load(&m->spec_accepted_pos[i]));
    ds_tbuf_puts(o, "# HELP dsflash_spec_guard_disable_total drafting switched off by the acceptance-collapse guard\n"
                    "# TYPE dsflash_spec_guard_disable_total counter\n");
    ds_tbuf_printf(o, "dsflash_spec_guard_disable_total{scope=\"request\"} %llu\n",
                   (unsigned long long)atomic_load(&m->spec_guard_request));
    ds_tbuf_printf(o, "dsflash_spec_guard_disable_total{scope=\"global\"} %llu\n",
                   (unsigned long long)atomic_load(&m->spec_guard_global));
    counter(o, "dsflash_admission_gate_prefill_steps_total", "prefill-only steps", atomic_load(&m->gate_prefill));
    counter(o, "dsflash_admission_gate_decode_steps_total", "decode-only steps", atomic_load(&m->gate_decode));
    counter(o, "dsflash_admission_gate_forced_decode_steps_total", "decode steps forced by KV pressure", atomic_load(&m->gate_forced));
    counter(o, "dsflash_admission_gate_invariant_violations_total", "steps mixing prefill and decode rows with the gate on",
            atomic_load(&m->gate_violations));
    gauge(o, "dsflash_admission_gate_max_decode_stall_chunks", "most prefill steps seen between two decode steps",
          (double)atomic_load(&m->gate_max_decode_stall));
    counter(o, "dsflash_tool_call_parse_failures_total", "string=\"false\" values that were not JSON", atomic_load(&m->tool_parse_failures));
    counter(o, "dsflash_tool_calls_dropped_total", "tool calls dropped (parallel_tool_calls false, truncation)", atomic_load(&m->tool_calls_dropped));
    pthread_mutex_lock(&m->mu);
    ds_tbuf_puts(o, "# HELP dsflash_requests_rejected_total requests refused, by error code\n"
                    "# TYPE dsflash_requests_rejected_total counter\n");
    for (int i = 0; i < m->n_rejected; i++)
        ds_tbuf_printf(o, "dsflash_requests_rejected_total{%s} %llu\n", m->rejected[i].label, (unsigned long long)m->rejected[i].value);
    ds_tbuf_puts(o, "# HELP dsflash_http_requests_total HTTP requests by endpoint and status\n"
                    "# TYPE dsflash_http_requests_total counter\n");
    for (int i = 0; i < m->n_http; i++)
        ds_tbuf_printf(o, "dsflash_http_requests_total{%s} %llu\n", m->http[i].label, (unsigned long long)m->http[i].value);
    hist(o, "dsflash_time_to_first_token_seconds", "arrival to first token", "", &m->ttft, true);
    hist(o, "dsflash_e2e_request_latency_seconds", "arrival to finish", "", &m->e2e, true);
    hist(o, "dsflash_step_duration_seconds", "engine step wall time", "kind=\"prefill\"", &m->step_prefill, true);
    hist(o, "dsflash_step_duration_seconds", "engine step wall time", "kind=\"decode\"", &m->step_decode, false);
    pthread_mutex_unlock(&m->mu);
}
