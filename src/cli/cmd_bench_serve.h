/* `dsflash bench serve`: the serving benchmark of issue 9 item 5 (see cmd_bench_serve.c).
 *
 * Why a header: measurement (cmd_bench_serve.c) and reporting (cmd_bench_serve_report.c) are
 * split so each file stays short; this is the record they share.  Every figure is raw (seconds,
 * bytes, multiply-adds); the report turns them into ratios against the limits of the same run. */
#ifndef DS_CLI_CMD_BENCH_SERVE_H
#define DS_CLI_CMD_BENCH_SERVE_H
#include "base/phase_prof.h"
#include "cli/bench_floor.h"
#include <stdint.h>

#define BS_N_LEVELS 4
#define BS_MAX_TIERS 2

/* Host limits: the best sample of each probe taken through the run (a busy host only lowers a
 * sample, so the best one is the closest to what the machine can do). */
typedef struct {
    double read_bw;          /* GB/s, read-only, all pool threads */
    double read_worst, read_median;  /* GB/s: slowest pass of the run, median pass of the best sample */
    int read_passes;         /* read passes over the run */
    double peak;             /* int8 GOP/s (2 ops per multiply-add) */
    const char *peak_what;
    double f32_peak, bf16_peak;   /* GOP/s of the fast tier's float linears: FMA on fp32, the bf16 path */
    const char *f32_what, *bf16_what;
    int samples;
} bs_limits;

/* One concurrency level of the continuous-batching decode: `steps` timed steps of `conc` rows. */
typedef struct {
    int conc, steps;
    double t_median, t_mean;  /* seconds per step */
    double bytes_step;        /* mean distinct weight bytes one step read (kernel counter) */
    double phase_s[DS_PH_COUNT];  /* --profile: mean seconds per step in each phase (exclusive) */
    bs_tally *calls;          /* every linear call of the timed steps (the linears' floor) */
} bs_level;

typedef struct {
    const char *numerics;    /* "exact" | "fast" */
    const char *rows;        /* decode rows: "greedy" (greedy ids) | "logits" (full rows) */
    double load_s;
    bs_level lv[BS_N_LEVELS];   /* lv[0] is concurrency 1 = single-stream decode */
    int prompt_tokens, chunk; /* TTFT prompt, prefill chunk */
    double ttft_s;            /* first chunk start to the argmax of the last chunk's logits */
    double prefill_macs;      /* multiply-adds of the linears over that prefill */
    double prefill_phase_s[DS_PH_COUNT];  /* --profile: seconds of that whole prefill in each phase */
    bs_tally *prefill_calls;  /* every linear call of that prefill */
} bs_tier;

typedef struct {
    const char *model, *kernels, *json, *engram_residency, *numa_nodes;
    int threads, quick, profile, n_tiers;
    int logits_rows;          /* --rows logits: decode rows ask for full logits (sampled requests) */
    const char *tiers[BS_MAX_TIERS];
    int levels[BS_N_LEVELS];
    int decode_steps, context_tokens, prompt_tokens, chunk;
} bs_opts;

/* Prints the table (and writes --json when asked); returns the number of ratios above 100%
 * (each also printed as a warning naming the probe it exceeded). */
int bs_report(const bs_opts *o, const bs_limits *lim, const bs_tier *t, int n_tiers, const char *kernel_path);

int cmd_bench_serve(int argc, char **argv);
#endif
