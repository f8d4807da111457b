/* `dsflash bench`: the HTTP concurrency benchmark client of TOOLS.md §4, for any OpenAI-compatible
 * server (ours or another).
 *
 * Why split in four files sharing this record: prompt building and exact calibration
 * (bench_prompts.c), the timed streaming requests and the server's counters (bench_requests.c),
 * the sweep with its per-level metrics (bench_sweep.c), and the console table and JSON result
 * (bench_report.c) each stay short and testable.  Every time is from the monotonic clock
 * (ds_now), every rate is computed from those times and the server's own usage counts. */
#ifndef DS_TOOLS_BENCH_CLIENT_H
#define DS_TOOLS_BENCH_CLIENT_H
#include "tools/http_client.h"
#include <stdbool.h>
#include <stdio.h>

#define BENCH_MAX_LEVELS 32
#define BENCH_SCHEMA "v41-bench/1"

typedef struct bench_opts {
    const char *base_url, *tokenize_url, *model, *json_out, *label, *corpus_file, *corpus_mark, *suffix_dir;
    const char *api_key, *plot_dir, *reset_prefix_cache;   /* "auto" | "off" */
    int levels[BENCH_MAX_LEVELS], n_levels;
    int prompt_tokens, output_tokens, repeats, warmup_tokens, spec_tokens;   /* spec_tokens 0: from the server */
    double timeout_s;
    bool ignore_eos, keep_preamble;
    const char *command_line;
} bench_opts;

/* One calibrated prompt. */
typedef struct {
    char *text;
    int tokens;        /* /tokenize count of the full prompt */
    int dev;           /* tokens - target */
    size_t start, len; /* slice of the corpus, in code points */
} bench_prompt;

typedef struct {
    bench_prompt *p;
    int n, exact, max_dev;
    size_t overlap_chars;
} bench_prompt_set;

/* Server counters from /metrics (Prometheus text; names matched by suffix so vLLM-style
 * prefixes work too).  has_* say whether the series exists at all. */
typedef struct {
    double running, waiting, accepted, drafts, draft_tokens, prefix_hits, kernel_fallback;
    bool ok, has_queue, has_accepted, has_drafts, has_draft_tokens, has_prefix_hits, has_fallback;
} bench_counters;

/* One streaming request's outcome. */
typedef struct {
    bool ok;
    char why[200];                  /* failure reason */
    double t0, t_first, t_last;     /* monotonic seconds; t_first/t_last: first/last non-empty text */
    int n_out, usage_prompt;        /* usage.completion_tokens, usage.prompt_tokens (-1 absent) */
    char *text;                     /* concatenated output text */
    size_t text_len;
    double *gaps;                   /* inter-chunk gaps (seconds) between non-empty text chunks */
    int n_gaps, cap_gaps;
} bench_result;

/* One level of one repeat (raw), or the median row over repeats. */
typedef struct {
    int conc, ok, fail, n_reps;
    double per_stream_med, per_stream_mean, total_decode, total_e2e, ttft_med, decode_wall, e2e_wall;
    double accept_len, accept_rate, decode_step_ms, speedup, efficiency, uniq2_med;
    bool has_speedup, has_efficiency;
    double prefix_hit_tokens;
    /* latency percentiles: p50, p90, p99 */
    double ttft_p[3], tpot_ms_p[3], itl_ms_p[3];
    bool degenerate, prefix_reuse, prompt_len_mismatch;
    char *samples[2];               /* first 300 characters of two outputs when degenerate */
} bench_row;

typedef struct {
    const bench_opts *o;
    ds_http_client http, tok_http;
    char model[256];
    char *server_info_json;         /* raw /server_info at the start, NULL when absent */
    char instance_id[128];
    int server_max_num_seqs, server_spec_tokens;   /* -1 unknown */
    bool reset_available;
    bench_prompt_set prompts;
    bench_row rows[BENCH_MAX_LEVELS];
    char started_utc[32];
    bool valid;
    char invalid_why[512];
    int spec_tokens_used;
} bench_run;

/* Prompts (bench_prompts.c).  0 ok; else the exit status, with the message printed. */
int bench_build_prompts(bench_run *r);
void bench_prompts_free(bench_prompt_set *s);
/* /tokenize count of `text` (prompt form); -1 with `why` on failure.  With ids, also the token ids
 * (malloc'd, *n_ids) when the server returns them. */
int bench_tokenize(const bench_run *r, const char *text, bool add_special, int **ids, int *n_ids, char *why,
                   size_t why_len);

/* Requests and counters (bench_requests.c). */
int bench_scrape(const bench_run *r, bench_counters *c);
/* Wait until the server reports 0 running and 0 waiting (no-op without queue gauges).  -1 on timeout. */
int bench_wait_idle(const bench_run *r, double timeout_s);
/* Send prompts [first, first+n) concurrently, each streaming `max_tokens`; fills res[0..n). */
void bench_send_batch(const bench_run *r, const char *const *prompts, int n, int max_tokens, bench_result *res);
void bench_result_free(bench_result *x);

/* The sweep (bench_sweep.c): server checks, warm-up, levels x repeats.  Returns the exit status. */
int bench_http_run(const bench_opts *o);

/* Report (bench_report.c). */
void bench_print_table(const bench_run *r, FILE *out);
/* Writes the §4.4 JSON to o->json_out through a temporary file; 0 ok, 3 on an I/O error. */
int bench_write_json(const bench_run *r, const char *path);

/* Statistics helpers shared with the tests' expectations: linear-interpolation percentile
 * (numpy's default) of v[0..n) (sorted in place); q in [0, 100]; NaN when n == 0. */
double bench_percentile(double *v, int n, double q);
double bench_median(double *v, int n);

#endif
