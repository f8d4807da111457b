/* `dsflash perf decode --num-speculative-tokens K`: decoding with and without the DSpark draft on
 * one prompt, in process (SERVING.md §8, issue "speculative decoding" targets).
 *
 * Why these rows: what speculation buys is A / (verify + draft) in units of a plain decode step,
 * where A is the mean acceptance length (accepted drafts + 1 per verify step).  So the bench prints
 * A and the per-position acceptance on the model's own greedy continuation (the tokens plain
 * decoding would emit), both decode speeds over exactly the same tokens (which must be identical:
 * greedy speculation is lossless), and the two cost ratios that explain the speed-up: a verify step
 * of K+1 rows and a draft pass, each against a 1-row decode step at the same context (best of
 * several repetitions, each rolled back, so a busy host shows the code's cost, not the neighbours').
 * The speed-up those ratios predict at the measured A is printed beside the one measured. */
#include "cli/cmd_bench_spec.h"
#include "cli/bench_floor.h"
#include "kernels/membench.h"
#include "engine/spec.h"
#include "model/draft.h"
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Processor time of the whole process (every pool thread): on a shared host it counts the work
 * this process did, not the time its threads waited for a core. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { GROUP = 8 };   /* requests in the batched draft pass row */

typedef struct spec_run {
    int32_t *gen;                 /* committed greedy tokens */
    int64_t n, steps, acc_tokens;
    int64_t pos[DS_DRAFT_MAX_BLOCK];
    double secs;
} spec_run;

/* Speculative greedy decoding of at least n_tokens tokens after the prompt. */
static int run_spec(ds_model *m, const int32_t *prompt, int P, int n_tokens, int K, const uint8_t *masked, spec_run *r,
                    ds_error *err) {
    const int V = ds_model_vocab_size(m);
    float *lg = ds_amalloc(sizeof(float) * (size_t)(K + 1) * V);
    ds_seq *s = ds_seq_new(m);
    int rc = ds_spec_prefill(m, s, prompt, P, 0, lg, err);
    int32_t anchor;
    ds_spec_accept_greedy(lg, V, masked, NULL, 0, &anchor);
    const double t0 = ds_now();
    while (!rc && r->n < n_tokens) {   /* greedy ids from the verify steps, as the engine asks for them */
        int32_t out[DS_DRAFT_MAX_BLOCK + 1];
        int acc = ds_spec_greedy_step(m, s, anchor, K, masked, out, NULL, err);
        if (acc < 0) { rc = -1; break; }
        r->gen[r->n++] = anchor;
        for (int i = 0; i < acc && r->n < n_tokens; i++) r->gen[r->n++] = out[i];
        for (int i = 0; i < acc; i++) r->pos[i]++;
        r->steps++;
        r->acc_tokens += acc + 1;
        anchor = out[acc];
    }
    r->secs = ds_now() - t0;
    ds_seq_free(s);
    ds_afree(lg);
    return rc;
}

/* Plain greedy decoding of the same tokens; counts the tokens that differ. */
static int run_plain(ds_model *m, const int32_t *prompt, int P, const spec_run *sr, const uint8_t *masked, double *secs,
                     int64_t *mismatch, char *eb, size_t eblen) {
    const int V = ds_model_vocab_size(m);
    float *lg = ds_amalloc(sizeof(float) * (size_t)V);
    ds_seq *s = ds_seq_new(m);
    int rc = ds_seq_step(m, s, prompt, P, lg, 1, eb, eblen) < 0 ? -1 : 0;
    int32_t cur;
    ds_spec_accept_greedy(lg, V, masked, NULL, 0, &cur);
    const double t0 = ds_now();
    for (int64_t i = 0; i < sr->n && !rc; i++) {   /* the model returns each row's greedy id */
        if (cur != sr->gen[i]) (*mismatch)++;
        int32_t next = -1;
        if (ds_seq_step_greedy(m, s, &cur, 1, &next, 1, masked, eb, eblen) < 0) rc = -1;
        else if (next < 0) rc = -1, snprintf(eb, eblen, "E_NUMERIC: plain decode: the logits are not finite");
        cur = next;
    }
    *secs = ds_now() - t0;
    ds_seq_free(s);
    ds_afree(lg);
    return rc;
}

/* Best-of-reps (at most; fewer past 30 s) cost of a 1-row decode step, a K+1-row verify step, a
 * draft pass and (processor time only) a batched draft pass of GROUP requests at context P. */
static int step_costs(ds_model *m, const int32_t *prompt, int P, int K, int reps, double best[3], double cpu[4], double bytes[3],
                      bs_tally *calls[3], ds_error *err) {
    const int V = ds_model_vocab_size(m);
    float *lg = ds_amalloc(sizeof(float) * (size_t)(K + 1) * V);
    ds_seq *s = ds_seq_new(m);
    char eb[512];
    int rc = ds_spec_prefill(m, s, prompt, P - K - 1, 0, lg, err);
    for (int i = 0; i < 3; i++) best[i] = 1e30;
    for (int i = 0; i < 4; i++) cpu[i] = 1e30;
    const double start = ds_now();
    int r = 0;
    for (; r < reps && !rc && (r < 3 || ds_now() - start < 30.0); r++) {   /* a large model: fewer repetitions */
        for (int kind = 0; kind < 2 && !rc; kind++) {
            const int n = kind ? K + 1 : 1;
            const double t0 = ds_now(), c0 = cpu_now();
            const uint64_t b0 = ds_kernels_weight_bytes_read();
            if (r == 0) ds_kernels_observe(bs_tally_observe, calls[kind]);   /* one repetition's calls: the floor */
            int32_t ids[DS_DRAFT_MAX_BLOCK + 1];   /* greedy rows, as the engine steps them */
            if (ds_seq_step_greedy(m, s, prompt + P - K - 1, n, ids, n, NULL, eb, sizeof eb) < 0) rc = ds_fail(err, "E_STEP", "%s", eb);
            ds_kernels_observe(NULL, NULL);
            const double dt = ds_now() - t0, dc = cpu_now() - c0;
            bytes[kind] = (double)(ds_kernels_weight_bytes_read() - b0);
            if (dt < best[kind]) best[kind] = dt;
            if (dc < cpu[kind]) cpu[kind] = dc;
            ds_seq_truncate(s, P - K - 1);
        }
        int32_t d[DS_DRAFT_MAX_BLOCK];
        const double t0 = ds_now(), c0 = cpu_now();
        const uint64_t b0 = ds_kernels_weight_bytes_read();
        if (r == 0) ds_kernels_observe(bs_tally_observe, calls[2]);
        if (!rc && ds_draft_propose(m, s, prompt[P - K - 1], NULL, NULL, d, NULL, NULL, err) < 0) rc = -1;
        ds_kernels_observe(NULL, NULL);
        const double dt = ds_now() - t0, dc = cpu_now() - c0;
        /* the Markov rows read their [V, r] bf16 weight outside the kernel layer's counter */
        bytes[2] = (double)(ds_kernels_weight_bytes_read() - b0) + (double)m->draft->block * V * m->draft->rank * 2.0;
        if (dt < best[2]) best[2] = dt;
        if (dc < cpu[2]) cpu[2] = dc;
        /* the engine's batched pass: GROUP requests' drafts at once (here the same sequence) */
        const ds_seq *many[GROUP];
        int32_t an[GROUP], dm[GROUP * DS_DRAFT_MAX_BLOCK];
        for (int i = 0; i < GROUP; i++) many[i] = s, an[i] = prompt[P - K - 1];
        const double c1 = cpu_now();
        if (!rc && ds_draft_propose_many(m, GROUP, many, an, NULL, NULL, NULL, dm, NULL, NULL, err) < 0) rc = -1;
        const double dg = cpu_now() - c1;
        if (dg < cpu[3]) cpu[3] = dg;
    }
    ds_seq_free(s);
    ds_afree(lg);
    return rc ? rc : r;
}

/* The linears' floors of one decode step, one verify step and one draft pass (-1: none, the exact
 * tier's float64 linears), printed beside the measured ratios. */
static void print_floors(bs_tally *calls[3], double read_bw, double int8_peak, double A) {
    const double peaks[DS_MAC_CLASSES] = {int8_peak, ds_bench_float_peak(0, NULL), ds_bench_float_peak(1, NULL), 0};
    double f[3];
    for (int i = 0; i < 3; i++) f[i] = bs_tally_floor(calls[i], read_bw, peaks, NULL);
    if (f[0] <= 0 || f[1] < 0 || f[2] < 0) {
        printf("| linears' floors | n/a: float64 linears (no probe measures their peak) |\n");
        return;
    }
    printf("| linears' floor: decode step / verify step / draft pass (the larger of bytes / read BW and operations /"
           " peak per call; the draft's Markov rows outside) | %.2f / %.2f / %.2f ms: verify %.2f, draft %.2f of a decode"
           " step; speed-up at this A if every section ran at its floor %.2fx |\n", f[0] * 1e3, f[1] * 1e3, f[2] * 1e3,
           f[1] / f[0], f[2] / f[0], A / ((f[1] + f[2]) / f[0]));
}

int ds_bench_spec_decode(ds_model *m, const int32_t *prompt, int P, int n_tokens, int K, int reps, double read_bw,
                         double int8_peak) {
    if (!m->draft) { fprintf(stderr, "dsflash perf decode: --num-speculative-tokens: the model has no usable draft\n"); return 1; }
    if (K > m->draft->block) K = m->draft->block;
    if (P < K + 2) { fprintf(stderr, "dsflash perf decode: --prompt-tokens: expected >= %d with speculation, found %d\n", K + 2, P); return 2; }
    const int V = ds_model_vocab_size(m);
    uint8_t *masked = ds_xcalloc((size_t)V, 1);
    masked[m->cfg.dspark_noise_id] = 1;   /* the plain sampler never emits the noise id either */
    spec_run sr;
    memset(&sr, 0, sizeof sr);
    sr.gen = ds_xmalloc(sizeof(int32_t) * (size_t)n_tokens);
    ds_error err = {{0}, {0}};
    char eb[512] = "";
    double t_plain = 0, best[3], cpu[4], bytes[3] = {0, 0, 0};
    bs_tally *calls[3] = {bs_tally_new(), bs_tally_new(), bs_tally_new()};
    int64_t mismatch = 0;
    int rc = run_spec(m, prompt, P, n_tokens, K, masked, &sr, &err);
    if (!rc && run_plain(m, prompt, P, &sr, masked, &t_plain, &mismatch, eb, sizeof eb) < 0) rc = ds_fail(&err, "E_STEP", "%s", eb);
    if (!rc) {
        reps = step_costs(m, prompt, P, K, reps, best, cpu, bytes, calls, &err);
        rc = reps < 0 ? -1 : 0;
    }
    if (!rc) {
        const double A = sr.steps ? (double)sr.acc_tokens / (double)sr.steps : 0.0;
        const double rv = best[1] / best[0], rd = best[2] / best[0];
        printf("| speculative decoding | K %d drafts per verify step, %lld verify steps, %lld tokens |\n", K,
               (long long)sr.steps, (long long)sr.n);
        printf("| acceptance length A (own greedy continuation) | %.3f |\n", A);
        printf("| per-position acceptance |");
        for (int i = 0; i < K; i++) printf(" %.3f", sr.steps ? (double)sr.pos[i] / (double)sr.steps : 0.0);
        printf(" |\n");
        printf("| decode, speculation off | %.2f tok/s |\n", (double)sr.n / t_plain);
        printf("| decode, speculation on | %.2f tok/s (speed-up %.2fx) |\n", (double)sr.n / sr.secs, t_plain / sr.secs);
        printf("| verify step %d rows / decode step 1 row | %.2f (%.2f ms / %.2f ms, best of %d) |\n", K + 1, rv, best[1] * 1e3,
               best[0] * 1e3, reps);
        printf("| draft pass / decode step | %.2f (%.2f ms) |\n", rd, best[2] * 1e3);
        printf("| the same in processor time (all threads) | verify %.2f, draft %.2f (%.2f / %.2f / %.2f ms) |\n",
               cpu[1] / cpu[0], cpu[2] / cpu[0], cpu[1] * 1e3, cpu[2] * 1e3, cpu[0] * 1e3);
        printf("| weight bytes: decode step / verify step / draft pass (Markov rows as full reads: a bound) | %.1f / %.1f / %.1f MB |\n",
               bytes[0] / 1e6, bytes[1] / 1e6, bytes[2] / 1e6);
        printf("| %d requests' draft passes batched, per request / one single pass (processor time) | %.2f |\n", GROUP,
               cpu[3] / GROUP / cpu[2]);
        printf("| speed-up predicted at this A: A / (verify + draft) | %.2fx (processor time: %.2fx) |\n", A / (rv + rd),
               A / ((cpu[1] + cpu[2]) / cpu[0]));
        printf("| break-even A: verify + draft (what `serve --spec-policy measured` pauses drafting below) | %.2f%s |\n", rv + rd,
               rv + rd >= K + 1 ? " (above K + 1: serve leaves speculation off)" : "");
        print_floors(calls, read_bw, int8_peak, A);
        printf("| greedy identity, speculation on vs off | %s (%lld of %lld tokens differ) |\n", mismatch ? "FAILED" : "ok",
               (long long)mismatch, (long long)sr.n);
        if (mismatch) rc = 1;
    } else {
        fprintf(stderr, "dsflash perf decode: speculation: %s\n", err.msg);
        rc = 1;
    }
    for (int i = 0; i < 3; i++) bs_tally_free(calls[i]);
    free(sr.gen);
    free(masked);
    return rc;
}
