/* dsflash perf serve: serving speed against this host's limits, in process, in one run.
 *
 *   perf serve --model DIR [--threads N] [--numerics exact|fast|both] [--kernels PATH] [--quick]
 *               [--profile] [--json FILE]      (flags: the table below, base/flags.h rules)
 *               [--tensor-parallel-size R ...]  (under mpirun -np R: every rank runs the same steps on
 *               its shard; each level and the prefill report every rank's communication share)
 *
 * Why in process and through ds_batch_step: an HTTP sweep measures the client, the sockets and
 * the scheduler's waits as much as the model, and cannot tell which weight bytes a step read.
 * The engine's model backend runs exactly one ds_batch_step per scheduler step (every running
 * sequence contributes its rows), so timing ds_batch_step with C sequences of one decode row each
 * is the steady state of continuous batching at concurrency C, without the engine thread's queue
 * hand-offs blurring the per-step figure.  The kernel layer's weight-byte counter, read around
 * each step, gives the bytes of the distinct weights that step touched (dense weights plus the
 * union of the experts its rows route to): the numerator of the batched roofline.
 *
 * What it measures, per numerics tier: decode at concurrency 1/4/16/32 (concurrency 1 is the
 * single-stream figure), the time to first token of a 2,048-token prompt prefilled in 512-token
 * chunks, and the multiply-adds of that prefill.  Host limits (read bandwidth, int8 peak) are
 * sampled before, between and after the sections; the report uses the best sample of each, so a
 * sample taken while another process held a core cannot make the code look better than it is. */
#include "cli/cmd_bench_serve.h"
#include "cli/dist_cli.h"
#include "cli/load_flags.h"
#include "dist/dist.h"
#include "kernels/kernels.h"
#include "kernels/membench.h"
#include "base/numa.h"
#include "base/threadpool.h"
#include "base/flags.h"
#include "base/phase_prof.h"
#include "dsflash.h"
#include "model/draft.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read-bandwidth probe working set: beyond every cache level (as bench kernels). */
#define PROBE_BYTES ((size_t)512 << 20)

#define BENCH_SERVE_USAGE                                                                          \
    "usage: dsflash perf serve --model DIR [flags]\n"                                             \
    "  decode at concurrency 1/4/16/32 against the batched roofline, TTFT of a 2048-token prompt\n" \
    "  (512-token chunks) and its prefill rate against the int8 peak; --quick: fewer steps, a\n"    \
    "  512-token prompt in 128-token chunks."

static ds_flag k_flags[] = {
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (required)"},
    {.name = "--threads", .type = DS_FLAG_INT, .lo = 1, .hi = 1024, .help = "pool threads (default: one per physical core of the --numa-nodes the process may run on)"},
    {.name = "--numerics", .type = DS_FLAG_ENUM, .def = "fast", .choices = "exact|fast|both",
     .help = "numerics tier(s) to measure"},
    {.name = "--kernels", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|avx512-vnni|avx2|reference"},
    DS_ENGRAM_RESIDENCY_FLAG_ROW,
    DS_NUMA_NODES_FLAG_ROW,
    {.name = "--quick", .type = DS_FLAG_SWITCH, .help = "fewer steps, a 512-token prompt in 128-token chunks"},
    {.name = "--profile", .type = DS_FLAG_SWITCH,
     .help = "also time each phase of the decode steps (attention, MoE, mHC, head, ...) per level"},
    {.name = "--rows", .type = DS_FLAG_ENUM, .def = "greedy", .choices = "greedy|logits",
     .help = "decode rows as greedy requests (the model returns greedy ids: the fast tier screens the head) "
             "or as sampled ones (full logits rows)"},
    {.name = "--json", .type = DS_FLAG_STRING, .help = "also write the figures to this file"},
    DS_DIST_FLAG_ROWS,
};

/* Returns 0 ok, 1 after --help, 2 on a usage error (message printed), 3 when the multi-process
 * start was refused (*dist_rc: the exit status, reason printed). */
static int parse(int argc, char **argv, bs_opts *o, int *dist_rc) {
    ds_flagset fs = {.cmd = "dsflash perf serve", .usage = BENCH_SERVE_USAGE, .flags = k_flags,
                     .n = DS_ARRAY_LEN(k_flags)};
    int rc = ds_flags_parse(&fs, argc, argv, 2, stderr);
    if (rc) return rc;
    *o = (bs_opts){.kernels = ds_flag_str(&fs, "--kernels"), .n_tiers = 1, .tiers = {"fast"}, .levels = {1, 4, 16, 32}};
    o->model = ds_flag_str(&fs, "--model");
    o->json = ds_flag_str(&fs, "--json");
    o->engram_residency = ds_flag_str(&fs, "--engram-residency");
    o->numa_nodes = ds_flag_str(&fs, "--numa-nodes");
    o->threads = ds_flag_given(&fs, "--threads") ? (int)ds_flag_int(&fs, "--threads") : 0;
    o->quick = ds_flag_on(&fs, "--quick");
    o->profile = ds_flag_on(&fs, "--profile");
    o->logits_rows = !strcmp(ds_flag_str(&fs, "--rows"), "logits");
    const char *tier = ds_flag_str(&fs, "--numerics");
    if (!strcmp(tier, "both")) {
        o->tiers[0] = "exact";
        o->tiers[1] = "fast";
        o->n_tiers = 2;
    } else {
        o->tiers[0] = !strcmp(tier, "fast") ? "fast" : "exact";
    }
    if (!o->model) {
        ds_flags_fail(&fs, "--model", "DIR is required");
        ds_flags_usage(&fs, stderr);
        return 2;
    }
    o->decode_steps = o->quick ? 3 : 16;
    o->context_tokens = o->quick ? 8 : 16;
    o->prompt_tokens = o->quick ? 512 : 2048;
    o->chunk = o->quick ? 128 : 512;
    if ((*dist_rc = ds_cli_dist_begin(&fs, "dsflash perf serve", o->model, argc, argv))) return 3;
    return 0;
}

/* One more sample of each limit; keeps the best. */
static void sample_limits(bs_limits *l, int quick) {
    ds_bw_stats bs;
    ds_bench_read_bw_stats(PROBE_BYTES, (size_t)64 << 20, quick ? 4 : 8, quick ? 0.3 : 1.0, &bs);
    const double bw = bs.best;
    const char *what = NULL;
    double pk = ds_bench_int8_peak(&what);
    const char *fw = NULL, *bw16 = NULL;
    const double fpk = ds_bench_float_peak(0, &fw), bpk = ds_bench_float_peak(1, &bw16);
    if (fpk > l->f32_peak) l->f32_peak = fpk, l->f32_what = fw;
    if (bpk > l->bf16_peak) l->bf16_peak = bpk, l->bf16_what = bw16;
    if (bw > l->read_bw) l->read_bw = bw, l->read_median = bs.median;
    if (!l->read_passes || bs.worst < l->read_worst) l->read_worst = bs.worst;
    l->read_passes += bs.passes;
    if (pk > l->peak) { l->peak = pk; l->peak_what = what; }
    l->samples++;
    fprintf(stderr, "  limits sample %d: read %.1f GB/s (median %.1f, worst %.1f of %d passes of %zu MiB over %zu MiB), "
            "int8 %.0f GOP/s, fp32 %.0f / bf16 %.0f GOP/s (best so far %.1f GB/s, %.0f GOP/s)\n", l->samples, bw,
            bs.median, bs.worst, bs.passes, bs.pass_bytes >> 20, bs.buffer_bytes >> 20, pk, fpk, bpk, l->read_bw, l->peak);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Deterministic ordinary-text ids: clear of BOS/EOS/PAD (0..2) and, on a large vocabulary, of
 * the special ids at the top (image, draft noise); `salt` gives every sequence its own text. */
static void fill_prompt(int32_t *p, int n, int vocab, int salt) {
    int lo = vocab > 2000 ? 1000 : 3, hi = vocab > 2000 ? vocab - 1000 : DS_MIN(vocab, 1000);
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)(lo + ((int64_t)i * 7919 + (int64_t)salt * 104729 + 17) % (hi - lo));
}

typedef struct {
    ds_model *m;
    int vocab;
    int logits_rows;          /* 0: decode rows take greedy ids, as the engine asks for greedy requests */
    char err[1024];
} bs_run;

/* `steps` timed decode steps of the first `conc` sequences (one greedy row each), after one
 * untimed step at this batch size. */
static int run_level(bs_run *r, ds_seq **seqs, float **logits, int conc, int steps, bs_level *out) {
    double ph[DS_PH_COUNT], ph_sum[DS_PH_COUNT] = {0};
    int32_t tok[32], gid[32], *gp[32];
    const int32_t *tp[32];
    int rows[32], nl[32];
    double *t = ds_xmalloc(sizeof(double) * (size_t)steps);
    double bytes = 0, comm = 0;
    for (int i = 0; i < conc; i++) { tp[i] = &tok[i]; rows[i] = 1; nl[i] = 1; gp[i] = &gid[i]; }
    for (int i = 0; i < conc; i++) gid[i] = ds_argmax(logits[i], r->vocab);   /* the prefill's rows */
    for (int s = -1; s < steps; s++) {
        for (int i = 0; i < conc; i++) tok[i] = r->logits_rows ? ds_argmax(logits[i], r->vocab) : gid[i];
        for (int i = 0; i < conc; i++)
            if (tok[i] < 0) {
                snprintf(r->err, sizeof r->err, "E_NUMERIC: decode at concurrency %d: a row's logits are not finite", conc);
                free(t);
                return -1;
            }
        ds_dist_bcast(tok, sizeof(int32_t) * (size_t)conc, 0);   /* mpirun: every rank feeds rank 0's picks */
        uint64_t b0 = ds_kernels_weight_bytes_read();
        ds_prof_take(ph);   /* discards what came before: the profile brackets the step */
        if (s >= 0) ds_kernels_observe(bs_tally_observe, out->calls);
        double c0 = ds_dist_comm_seconds(), t0 = ds_now();
        int bad = ds_batch_step_greedy(r->m, conc, seqs, tp, rows, logits, nl, NULL, r->logits_rows ? NULL : gp, NULL,
                                       r->err, sizeof r->err);
        double dt = ds_now() - t0;
        ds_kernels_observe(NULL, NULL);
        if (bad) { free(t); return -1; }
        ds_prof_take(ph);
        if (s < 0) continue;
        comm += ds_dist_comm_seconds() - c0;
        for (int p = 0; p < DS_PH_COUNT; p++) ph_sum[p] += ph[p];
        t[s] = dt;
        bytes += (double)(ds_kernels_weight_bytes_read() - b0);
    }
    double sum = 0;
    for (int s = 0; s < steps; s++) sum += t[s];
    char what[64];
    snprintf(what, sizeof what, "  concurrency %2d decode steps", conc);
    ds_cli_dist_comm_share(stderr, what, comm, sum);
    qsort(t, (size_t)steps, sizeof(double), cmp_double);
    *out = (bs_level){.conc = conc, .steps = steps, .t_mean = sum / steps, .bytes_step = bytes / steps, .calls = out->calls,
                      .t_median = steps % 2 ? t[steps / 2] : 0.5 * (t[steps / 2 - 1] + t[steps / 2])};
    for (int p = 0; p < DS_PH_COUNT; p++) out->phase_s[p] = ph_sum[p] / steps;
    free(t);
    fprintf(stderr, "  concurrency %2d: %.1f ms/step (median of %d), %.1f MB read per step\n", conc,
            1e3 * out->t_median, steps, out->bytes_step / 1e6);
    return 0;
}

/* The concurrency sweep: the largest level's sequences are prefilled together once (a short
 * context each, every one a different text so the rows route differently), then each level
 * steps its first `conc` of them. */
static int decode_sweep(bs_run *r, const bs_opts *o, bs_tier *t) {
    int nmax = 0, P = o->context_tokens, rc = 0;
    for (int l = 0; l < BS_N_LEVELS; l++) nmax = DS_MAX(nmax, o->levels[l]);
    ds_seq **seqs = ds_xcalloc((size_t)nmax, sizeof(ds_seq *));
    float **logits = ds_xcalloc((size_t)nmax, sizeof(float *));
    int32_t *prompts = ds_xmalloc(sizeof(int32_t) * (size_t)nmax * P);
    const int32_t **tp = ds_xmalloc(sizeof(int32_t *) * (size_t)nmax);
    int *rows = ds_xmalloc(sizeof(int) * (size_t)nmax), *nl = ds_xmalloc(sizeof(int) * (size_t)nmax);
    for (int i = 0; i < nmax; i++) {
        seqs[i] = ds_seq_new(r->m);
        logits[i] = ds_xmalloc(sizeof(float) * (size_t)r->vocab);
        fill_prompt(prompts + (size_t)i * P, P, r->vocab, i + 1);
        tp[i] = prompts + (size_t)i * P;
        rows[i] = P;
        nl[i] = 1;
    }
    fprintf(stderr, "  prefilling %d sequences of %d tokens\n", nmax, P);
    if (ds_batch_step(r->m, nmax, seqs, tp, rows, logits, nl, r->err, sizeof r->err)) rc = -1;
    for (int l = 0; !rc && l < BS_N_LEVELS; l++) {
        t->lv[l].calls = bs_tally_new();
        rc = run_level(r, seqs, logits, o->levels[l], o->decode_steps, &t->lv[l]);
    }
    for (int i = 0; i < nmax; i++) { ds_seq_free(seqs[i]); free(logits[i]); }
    free(seqs); free(logits); free(prompts); free(tp); free(rows); free(nl);
    return rc;
}

/* Time to first token of one long prompt, prefilled chunk by chunk as the scheduler does. */
static int ttft(bs_run *r, const bs_opts *o, bs_tier *t) {
    int P = o->prompt_tokens, C = o->chunk, rc = 0;
    int32_t *prompt = ds_xmalloc(sizeof(int32_t) * (size_t)P);
    float *logits = ds_xmalloc(sizeof(float) * (size_t)r->vocab);
    fill_prompt(prompt, P, r->vocab, 1000);
    ds_seq *s = ds_seq_new(r->m);
    fprintf(stderr, "  prefilling a %d-token prompt in %d-token chunks\n", P, C);
    uint64_t mac0 = ds_kernels_macs();
    double ph[DS_PH_COUNT];
    t->prefill_calls = bs_tally_new();
    double t0 = ds_now(), c0 = ds_dist_comm_seconds();
    for (int p = 0; p < P && !rc; p += C) {
        int n = DS_MIN(C, P - p), last = p + n == P;
        ds_prof_take(ph);   /* discards what came before: the profile brackets the chunk */
        ds_kernels_observe(bs_tally_observe, t->prefill_calls);
        rc = ds_seq_step(r->m, s, prompt + p, n, last ? logits : NULL, last, r->err, sizeof r->err);
        ds_kernels_observe(NULL, NULL);
        ds_prof_take(ph);
        for (int q = 0; q < DS_PH_COUNT; q++) t->prefill_phase_s[q] += ph[q];
    }
    if (!rc) {
        volatile int32_t first = ds_argmax(logits, r->vocab);
        (void)first;
        t->ttft_s = ds_now() - t0;
        t->prefill_macs = (double)(ds_kernels_macs() - mac0);
        t->prompt_tokens = P;
        t->chunk = C;
        fprintf(stderr, "  TTFT %.2f s\n", t->ttft_s);
    }
    if (!rc) ds_cli_dist_comm_share(stderr, "  prefill (TTFT)", ds_dist_comm_seconds() - c0, t->ttft_s);
    ds_seq_free(s);
    free(prompt);
    free(logits);
    return rc;
}

/* Touches (and repacks on first use) every linear and the experts before anything is timed. */
static int warm_up(bs_run *r) {
    int32_t p[16];
    float *logits = ds_xmalloc(sizeof(float) * (size_t)r->vocab);
    fill_prompt(p, 16, r->vocab, 7);
    ds_seq *s = ds_seq_new(r->m);
    int rc = ds_seq_step(r->m, s, p, 16, logits, 1, r->err, sizeof r->err);
    for (int i = 0; i < 2 && !rc; i++) {
        int32_t tk = ds_argmax(logits, r->vocab);
        rc = ds_seq_step(r->m, s, &tk, 1, logits, 1, r->err, sizeof r->err);
    }
    ds_seq_free(s);
    free(logits);
    return rc;
}

static int run_tier(const bs_opts *o, const char *numerics, bs_limits *lim, bs_tier *t) {
    bs_run r;
    ds_load_options lo = {.kernels = o->kernels, .threads = o->threads, .numerics = numerics,
                          .engram_residency = o->engram_residency, .numa_nodes = o->numa_nodes};
    memset(t, 0, sizeof *t);
    t->numerics = numerics;
    t->rows = o->logits_rows ? "logits" : "greedy";
    fprintf(stderr, "perf serve: loading %s (numerics %s)\n", o->model, numerics);
    double t0 = ds_now();
    r.m = ds_model_load(o->model, &lo, r.err, sizeof r.err);
    if (!r.m) { fprintf(stderr, "dsflash perf serve: %s\n", r.err); return 3; }
    t->load_s = ds_now() - t0;
    ds_cli_dist_loaded();
    r.vocab = ds_model_vocab_size(r.m);
    r.logits_rows = o->logits_rows;
    if (!lim->samples) sample_limits(lim, o->quick);   /* first sample once the checkpoint loaded */
    int rc = warm_up(&r);
    if (!rc) rc = decode_sweep(&r, o, t);
    if (!rc) sample_limits(lim, o->quick);
    if (!rc) rc = ttft(&r, o, t);
    if (!rc) sample_limits(lim, o->quick);
    if (rc) fprintf(stderr, "dsflash perf serve: %s\n", r.err);
    ds_model_free(r.m);
    return rc ? 1 : 0;
}

/* Refuse an unwritable --json before minutes of measuring, not after. */
static int json_writable(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f) { fclose(f); remove(tmp); return 1; }
    fprintf(stderr, "dsflash perf serve: --json %s: cannot write the file\n", path);
    return 0;
}

static void free_tallies(bs_tier *t) {
    for (int l = 0; l < BS_N_LEVELS; l++) bs_tally_free(t->lv[l].calls);
    bs_tally_free(t->prefill_calls);
}

static int run_all(bs_opts *o) {
    ds_error err;
    if (ds_kernels_select(o->kernels, &err)) { fprintf(stderr, "dsflash perf serve: %s\n", err.msg); return 2; }
    if (ds_numa_place(o->numa_nodes, o->threads, NULL, &err)) {   /* the limits are measured where the model will run */ fprintf(stderr, "dsflash perf serve: %s\n", err.msg); return 2; }
    ds_prof_enable(o->profile);
    if (ds_dist_rank() > 0) o->json = NULL;   /* rank 0 reports */
    if (o->json && !json_writable(o->json)) return 3;
    bs_limits lim = {0};
    bs_tier tiers[BS_MAX_TIERS];
    int rc = 0, done = 0;
    for (; done < o->n_tiers && !rc; done++) rc = run_tier(o, o->tiers[done], &lim, &tiers[done]);
    int over = rc ? 0 : bs_report(o, &lim, tiers, o->n_tiers, ds_kernels_active());
    for (int i = 0; i < done; i++) free_tallies(&tiers[i]);
    if (rc) return rc;
    if (over < 0) return 3;
    return 0;
}

int cmd_bench_serve(int argc, char **argv) {
    bs_opts o;
    int dist_rc = 0, prc = parse(argc, argv, &o, &dist_rc);
    if (prc) return prc == 3 ? dist_rc : prc == 1 ? 0 : 2;
    return ds_cli_dist_end(run_all(&o));
}
