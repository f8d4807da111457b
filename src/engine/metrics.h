/* Counters, gauges and histograms of SERVING.md §10.8, and their Prometheus text rendering.
 *
 * Why it is built this way: the engine thread, the HTTP threads and the scrape handler all touch
 * metrics, so plain counters are C11 atomics (no lock on the hot path) and only the labelled
 * families and histograms take a mutex.  Gauges that describe engine state (running, waiting,
 * KV blocks) are not stored here: the engine fills a snapshot when /metrics is scraped, so they
 * can never drift from the state they describe.  Self-check traffic is excluded by resetting
 * everything with ds_metrics_reset just before READY. */
#ifndef DS_ENGINE_METRICS_H
#define DS_ENGINE_METRICS_H
#include "base/common.h"
#include "engine/textbuf.h"
#include <pthread.h>
#include <stdatomic.h>

#define DS_HIST_BUCKETS 16
#define DS_SPEC_MAX_POS 8        /* per-position acceptance counters (draft block <= 8) */
typedef struct ds_histogram {
    int n;                                /* finite bucket bounds */
    double le[DS_HIST_BUCKETS];
    uint64_t count[DS_HIST_BUCKETS + 1];  /* last = +Inf */
    double sum;
    uint64_t total;
} ds_histogram;

#define DS_METRIC_MAX_LABELLED 64
typedef struct ds_labelled_counter {
    char label[96];     /* already formatted: endpoint="/v1/models",code="200" */
    uint64_t value;
} ds_labelled_counter;

typedef enum { DS_FINISH_STOP = 0, DS_FINISH_LENGTH, DS_FINISH_TOOL_CALLS, DS_FINISH_N } ds_finish_kind;

typedef struct ds_metrics {
    atomic_uint_fast64_t prompt_tokens, generation_tokens;
    atomic_uint_fast64_t success[DS_FINISH_N];
    atomic_uint_fast64_t cancelled, preemptions, numeric_errors, kernel_fallback;
    atomic_uint_fast64_t prefix_queries, prefix_hits;
    atomic_uint_fast64_t gate_prefill, gate_decode, gate_forced, gate_violations;
    atomic_uint_fast64_t gate_max_decode_stall;     /* most prefill steps between two decode steps */
    atomic_uint_fast64_t tool_parse_failures, tool_calls_dropped;
    /* speculative decoding (SERVING.md §8.4, §8.5) */
    atomic_uint_fast64_t spec_drafts, spec_draft_tokens, spec_accepted;
    atomic_uint_fast64_t spec_accepted_pos[DS_SPEC_MAX_POS];
    atomic_uint_fast64_t spec_guard_request, spec_guard_global;
    pthread_mutex_t mu;
    int n_rejected, n_http;
    ds_labelled_counter rejected[DS_METRIC_MAX_LABELLED];
    ds_labelled_counter http[DS_METRIC_MAX_LABELLED];
    ds_histogram ttft, e2e, step_prefill, step_decode;
} ds_metrics;

/* Engine-state gauges captured at scrape time. */
typedef struct ds_metrics_gauges {
    int running, waiting;
    uint64_t blocks_total, blocks_used, blocks_evictable;
    uint64_t capacity_tokens;
    int ready, spec_enabled;
    int spec_positions;           /* draft positions reported per position (0 without speculation) */
} ds_metrics_gauges;

void ds_metrics_init(ds_metrics *m);
void ds_metrics_destroy(ds_metrics *m);
void ds_metrics_reset(ds_metrics *m);
void ds_metrics_inc_rejected(ds_metrics *m, const char *code);
void ds_metrics_inc_http(ds_metrics *m, const char *endpoint, int status);
void ds_hist_observe(ds_metrics *m, ds_histogram *h, double v);
/* Prometheus text exposition format 0.0.4. */
void ds_metrics_render(ds_metrics *m, const ds_metrics_gauges *g, ds_tbuf *out);

#endif
