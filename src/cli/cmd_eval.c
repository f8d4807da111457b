/* dsflash eval: quality measurements on real text with the C engine alone.
 *
 *   dsflash eval perplexity --model DIR --tokens FILE.u32 [--window 256] [--max-windows N] [--window-step S]
 *                           [--numerics exact|fast] [--threads N] [--chunk K]
 *   dsflash eval acceptance --model DIR --tokens FILE.u32 [--starts 48,96,160,224] [--steps 64]
 *                           [--num-speculative-tokens 5] [--numerics exact|fast] [--threads N]
 *
 * perplexity: non-overlapping windows of `window` input ids from position 0 of each window, window
 * w reading ids[w·n .. w·n+n−1] and scoring the next id of every row (ids[w·n+1 .. w·n+n]) —
 * with --window-step S only windows 0, S, 2S, … (a spread subset); prints
 * windows, scored tokens, mean NLL (float64 log-softmax of the fp32 logits) and perplexity.  This is
 * the protocol of the trained fixture's reference measurement.
 * acceptance: for every start P, the prompt ids[0..P) is prefilled, then `steps` speculative steps
 * with K drafts run twice: on the model's own greedy continuation (target = masked argmax) and on
 * the text (teacher-forced: a draft is accepted while it equals the next held-out id).  Prints the
 * mean acceptance length A = tokens per step and the per-position prefix acceptance, plus decode
 * tok/s with and without speculation over the same greedy tokens (which must be identical).
 * --trace FILE (one start) writes the greedy run for the NumPy oracle: `tokens` I32 [T] (prompt and
 * committed tokens), `anchor_pos` I32 [S] (position of each step's anchor), `drafts` I32 [S, B],
 * `draft_logits` F32 [S, B, V], `conf` F32 [S, B].
 *
 * Why a command of its own: these are the numbers the closing note quotes (quantization
 * cost on real text, DSpark acceptance); they must come from the code that serves requests. */
#include "cli/commands.h"
#include "cli/load_flags.h"
#include "dsflash.h"
#include "engine/spec.h"
#include "base/flags.h"
#include "base/fsutil.h"
#include "io/safetensors.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct eval_opts {
    const char *model, *tokens, *numerics, *activations, *starts, *trace, *kernels, *numa_nodes;
    long long window, max_windows, window_step, threads, chunk, steps, K;
    int32_t *start_ids;   /* --starts, parsed */
    size_t n_starts;
} eval_opts;

#define EVAL_USAGE \
    "usage: dsflash eval perplexity --model DIR --tokens FILE.u32 [--window 256] [--max-windows N] [--window-step S]\n" \
    "                               [--numerics exact|fast] [--threads N] [--chunk K]\n" \
    "       dsflash eval acceptance --model DIR --tokens FILE.u32 [--starts 48,96,160,224] [--steps 64]\n" \
    "                               [--num-speculative-tokens 5] [--numerics exact|fast] [--threads N]\n" \
    "                               [--trace FILE (one start: the greedy run's drafts for the oracle)]\n" \
    "       (both) [--kernels auto|avx512-vnni|avx2|reference] [--activations int8|e4m3] [--numa-nodes all|LIST]"

/* One table for both modes; the rows of the other mode are refused after parsing (never ignored). */
static ds_flag k_flags[] = {
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (required)"},
    {.name = "--tokens", .type = DS_FLAG_STRING, .help = "little-endian u32 token ids (required)"},
    {.name = "--numerics", .type = DS_FLAG_ENUM, .def = "exact", .choices = "exact|fast", .help = "numerics tier"},
    {.name = "--activations", .type = DS_FLAG_ENUM, .def = "int8", .choices = "int8|e4m3",
     .help = "official FP8/MXFP4 layout: e4m3 = the official runtime's E4M3-per-32 activations"},
    {.name = "--threads", .type = DS_FLAG_INT, .def = "0", .lo = 0, .hi = 4096, .help = DS_THREADS_HELP},
    DS_NUMA_NODES_FLAG_ROW,
    {.name = "--kernels", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|avx512-vnni|avx2|reference", .help = "kernel family"},
    {.name = "--window", .type = DS_FLAG_INT, .def = "256", .lo = 2, .hi = 1 << 20, .help = "perplexity: ids per window"},
    {.name = "--max-windows", .type = DS_FLAG_INT, .lo = 1, .hi = 1 << 30, .help = "perplexity: at most this many windows (default all)"},
    {.name = "--window-step", .type = DS_FLAG_INT, .def = "1", .lo = 1, .hi = 1 << 30, .help = "perplexity: every S-th window only"},
    {.name = "--chunk", .type = DS_FLAG_INT, .def = "64", .lo = 1, .hi = 1 << 20, .help = "perplexity: rows per forward call"},
    {.name = "--starts", .type = DS_FLAG_STRING, .def = "48,96,160,224", .help = "acceptance: prompt lengths P, comma-separated, each >= 1"},
    {.name = "--steps", .type = DS_FLAG_INT, .def = "64", .lo = 1, .hi = 1 << 20, .help = "acceptance: speculative steps per start"},
    {.name = "--num-speculative-tokens", .type = DS_FLAG_INT, .def = "5", .lo = 1, .hi = DS_DRAFT_MAX_BLOCK, .help = "acceptance: drafts K per step"},
    {.name = "--trace", .type = DS_FLAG_STRING, .help = "acceptance, one start: write the greedy run for the NumPy oracle"},
};
static const char *const k_perplexity_only[] = {"--window", "--max-windows", "--window-step", "--chunk"};
static const char *const k_acceptance_only[] = {"--starts", "--steps", "--num-speculative-tokens", "--trace"};

/* 0 ok, 1 --help printed, 2 usage error (message printed). */
static int parse_args(int argc, char **argv, bool acceptance, eval_opts *o) {
    ds_flagset fs = {.cmd = acceptance ? "dsflash eval acceptance" : "dsflash eval perplexity", .usage = EVAL_USAGE,
                     .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 2, stderr);
    if (prc) return prc;
    const char *const *other = acceptance ? k_perplexity_only : k_acceptance_only;
    for (size_t k = 0; k < DS_ARRAY_LEN(k_perplexity_only); k++)
        if (ds_flag_given(&fs, other[k]))
            return ds_flags_fail(&fs, other[k], "applies to eval %s only", acceptance ? "perplexity" : "acceptance");
    o->model = ds_flag_str(&fs, "--model");
    o->tokens = ds_flag_str(&fs, "--tokens");
    if (!o->model) return ds_flags_fail(&fs, "--model", "is required (the checkpoint directory)");
    if (!o->tokens) return ds_flags_fail(&fs, "--tokens", "is required (a file of u32 ids)");
    o->numerics = ds_flag_str(&fs, "--numerics");
    o->activations = ds_flag_str(&fs, "--activations");
    o->kernels = ds_flag_str(&fs, "--kernels");
    o->threads = ds_flag_int(&fs, "--threads");
    o->numa_nodes = ds_flag_str(&fs, "--numa-nodes");
    o->window = ds_flag_int(&fs, "--window");
    o->max_windows = ds_flag_int(&fs, "--max-windows");
    o->window_step = ds_flag_int(&fs, "--window-step");
    o->chunk = ds_flag_int(&fs, "--chunk");
    o->steps = ds_flag_int(&fs, "--steps");
    o->K = ds_flag_int(&fs, "--num-speculative-tokens");
    o->trace = ds_flag_str(&fs, "--trace");
    o->starts = ds_flag_str(&fs, "--starts");
    if (!acceptance) return 0;
    char why[160];
    size_t cap = 0;
    if (ds_parse_ids(o->starts, 1, INT32_MAX, "a prompt length in tokens", &o->start_ids, &o->n_starts, &cap, why, sizeof why))
        return ds_flags_fail(&fs, "--starts", "%s", why);
    if (!o->n_starts) return ds_flags_fail(&fs, "--starts", "expected at least one prompt length >= 1");
    if (o->trace && o->n_starts != 1)
        return ds_flags_fail(&fs, "--trace", "records one greedy run; expected one --starts value, got %zu", o->n_starts);
    return 0;
}

static int32_t *read_u32(const char *path, int64_t *n) {
    char *data = NULL;
    size_t len = 0;
    ds_error err = {{0}, {0}};
    if (ds_read_file(path, &data, &len, &err)) { fprintf(stderr, "dsflash eval: %s\n", err.msg); return NULL; }
    if (len % 4 || !len) {
        fprintf(stderr, "dsflash eval: %s: expected little-endian u32 ids (a non-empty multiple of 4 bytes), found %zu bytes\n", path, len);
        free(data);
        return NULL;
    }
    *n = (int64_t)(len / 4);
    int32_t *ids = ds_xmalloc(len);
    memcpy(ids, data, len);
    free(data);
    return ids;
}

/* −log softmax(lg)[target]: fp32 exponentials of the shifted logits (relative error ~1e-7 each,
 * far below the 4 printed digits) summed in float64. */
static double row_nll(const float *lg, int V, int32_t target) {
    float mx = lg[0];
    for (int v = 1; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
    double s = 0;
    for (int v = 0; v < V; v++) s += (double)expf(lg[v] - mx);
    return log(s) + (double)mx - (double)lg[target];
}

static int run_perplexity(ds_model *m, const eval_opts *o, const int32_t *ids, int64_t n) {
    const int V = ds_model_vocab_size(m), win = (int)o->window, chunk = (int)(o->chunk ? o->chunk : 64);
    const int64_t step = o->window_step ? o->window_step : 1;   /* every step-th window: a spread subset */
    int64_t nw = ((n - 1) / win + step - 1) / step;
    if (o->max_windows && nw > o->max_windows) nw = o->max_windows;
    if (nw < 1) { fprintf(stderr, "dsflash eval: %s: expected at least %d ids, found %lld\n", o->tokens, win + 1, (long long)n); return 1; }
    float *lg = ds_amalloc(sizeof(float) * (size_t)chunk * V);
    double nll = 0;
    int64_t scored = 0;
    char eb[512];
    double t0 = ds_now();
    for (int64_t w = 0; w < nw; w++) {
        ds_seq *s = ds_seq_new(m);
        for (int p = 0; p < win; p += chunk) {
            int k = win - p < chunk ? win - p : chunk;
            const int32_t *in = ids + w * step * win + p;
            if (ds_seq_step(m, s, in, k, lg, k, eb, sizeof eb) < 0) { fprintf(stderr, "dsflash eval: %s\n", eb); ds_seq_free(s); return 1; }
            for (int j = 0; j < k; j++, scored++) nll += row_nll(lg + (size_t)j * V, V, in[j + 1]);
        }
        ds_seq_free(s);
    }
    double dt = ds_now() - t0;
    printf("perplexity: numerics %s, activations %s, %lld windows x %d tokens from position 0 (every %lld. window), %lld scored\n",
           ds_model_numerics(m), ds_model_activations(m), (long long)nw, win, (long long)step, (long long)scored);
    printf("perplexity: NLL %.4f, PPL %.2f (%.1f s, %.0f tok/s)\n", nll / (double)scored, exp(nll / (double)scored), dt,
           (double)scored / dt);
    ds_afree(lg);
    return 0;
}

typedef struct acc_stats {
    int64_t steps, tokens, pos[DS_DRAFT_MAX_BLOCK];
} acc_stats;

static void acc_add(acc_stats *a, int acc) {
    a->steps++;
    a->tokens += acc + 1;
    for (int i = 0; i < acc; i++) a->pos[i]++;
}

static void acc_print(const char *what, const acc_stats *a, int K) {
    printf("acceptance %-9s: steps %lld, A %.3f, per-position", what, (long long)a->steps,
           a->steps ? (double)a->tokens / (double)a->steps : 0.0);
    for (int i = 0; i < K; i++) printf(" %.3f", a->steps ? (double)a->pos[i] / (double)a->steps : 0.0);
    printf("\n");
}

/* Teacher-forced: the held-out text plays the target; the engine's verify rows give the aux rows. */
static int text_steps(ds_model *m, ds_seq *s, const int32_t *ids, int64_t n, int64_t P, int steps, int K, acc_stats *st,
                      ds_error *err) {
    const int V = ds_model_vocab_size(m), W = ds_draft_aux_width(m);
    float *lg = ds_amalloc(sizeof(float) * (size_t)(K + 1) * V);
    ds_bf16 *aux = ds_amalloc(sizeof(ds_bf16) * (size_t)(K + 1) * W);
    int64_t p = P;                                         /* position of the anchor ids[p] */
    int rc = 0;
    for (int t = 0; t < steps && p + K + 1 < n && !rc; t++) {
        int32_t rows[DS_DRAFT_MAX_BLOCK + 1], d[DS_DRAFT_MAX_BLOCK];
        if (ds_draft_propose(m, s, ids[p], NULL, NULL, d, NULL, NULL, err) < 0) { rc = -1; break; }
        int acc = 0;
        while (acc < K && d[acc] == ids[p + 1 + acc]) acc++;
        rows[0] = ids[p];
        memcpy(rows + 1, ids + p + 1, sizeof(int32_t) * (size_t)K);   /* the text's rows: the accepted prefix is identical */
        float *const lgs[1] = {lg};
        const int32_t *const tk[1] = {rows};
        int nr[1] = {K + 1}, nl[1] = {0};
        ds_bf16 *const ax[1] = {aux};
        char eb[512];
        if (ds_batch_step_aux(m, 1, &s, tk, nr, lgs, nl, ax, eb, sizeof eb) < 0) { rc = ds_fail(err, "E_STEP", "%s", eb); break; }
        if (ds_spec_commit(m, s, p, acc, aux, err) < 0) { rc = -1; break; }
        acc_add(st, acc);
        p += acc + 1;
    }
    ds_afree(lg);
    ds_afree(aux);
    return rc;
}

/* FNV-1a over a logits row's bits: speculative and plain rows must be bit-identical. */
static uint64_t row_hash(const float *row, int V) {
    const uint8_t *b = (const uint8_t *)row;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < (size_t)V * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct trace_buf {
    int steps;
    int32_t *pos, *drafts;
    float *logits, *conf;
} trace_buf;

static void trace_init(trace_buf *t, int steps, int B, int V) {
    t->pos = ds_xcalloc((size_t)steps, sizeof(int32_t));
    t->drafts = ds_xcalloc((size_t)steps * B, sizeof(int32_t));
    t->logits = ds_xcalloc((size_t)steps * B * V, sizeof(float));
    t->conf = ds_xcalloc((size_t)steps * B, sizeof(float));
}

static void trace_free(trace_buf *t) {
    free(t->pos); free(t->drafts); free(t->logits); free(t->conf);
}

static int trace_write(const char *path, const trace_buf *t, const int32_t *prompt, int P, const int32_t *gen, int64_t ng,
                       int B, int V) {
    int32_t *tok = ds_xmalloc(sizeof(int32_t) * (size_t)(P + ng));
    memcpy(tok, prompt, sizeof(int32_t) * (size_t)P);
    memcpy(tok + P, gen, sizeof(int32_t) * (size_t)ng);
    ds_stwriter *w = ds_stw_new();
    int64_t s1[1] = {P + ng}, s2[1] = {t->steps}, s3[2] = {t->steps, B}, s4[3] = {t->steps, B, V};
    ds_stw_add(w, "tokens", DS_DT_I32, 1, s1, tok, 1);
    ds_stw_add(w, "anchor_pos", DS_DT_I32, 1, s2, t->pos, 1);
    ds_stw_add(w, "drafts", DS_DT_I32, 2, s3, t->drafts, 1);
    ds_stw_add(w, "draft_logits", DS_DT_F32, 3, s4, t->logits, 1);
    ds_stw_add(w, "conf", DS_DT_F32, 2, s3, t->conf, 1);
    ds_error err = {{0}, {0}};
    int rc = ds_stw_finish(w, path, &err);
    if (rc < 0) fprintf(stderr, "dsflash eval: --trace %s: %s\n", path, err.msg);
    free(tok);
    return rc;
}

/* Cost of one verify step (K+1 rows) against one decode step (1 row) and one draft pass, at the
 * same context length, best of `reps` (each step is rolled back, so every repetition sees the same
 * state). */
static int verify_cost(ds_model *m, const int32_t *ids, int P, int K, int reps) {
    const int V = ds_model_vocab_size(m);
    ds_seq *s = ds_seq_new(m);
    float *lg = ds_amalloc(sizeof(float) * (size_t)(K + 1) * V);
    ds_error err = {{0}, {0}};
    char eb[512];
    int rc = ds_spec_prefill(m, s, ids, P, 0, lg, &err);
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps && !rc; r++) {
        for (int kind = 0; kind < 2 && !rc; kind++) {
            int n = kind ? K + 1 : 1;
            double t0 = ds_now();
            if (ds_seq_step(m, s, ids + P, n, lg, n, eb, sizeof eb) < 0) { fprintf(stderr, "%s\n", eb); rc = -1; }
            double dt = ds_now() - t0;
            if (dt < best[kind]) best[kind] = dt;
            ds_seq_truncate(s, P);
        }
        int32_t d[DS_DRAFT_MAX_BLOCK];
        double t0 = ds_now();
        if (!rc && ds_draft_propose(m, s, ids[P], NULL, NULL, d, NULL, NULL, &err) < 0) rc = -1;
        double dt = ds_now() - t0;
        if (dt < best[2]) best[2] = dt;
    }
    if (!rc)
        printf("cost: verify step %d rows %.2f ms, decode step 1 row %.2f ms (ratio %.2f), draft pass %.2f ms; "
               "speculative step / plain step %.2f\n", K + 1, best[1] * 1e3, best[0] * 1e3, best[1] / best[0], best[2] * 1e3,
               (best[1] + best[2]) / best[0]);
    else if (err.msg[0]) fprintf(stderr, "dsflash eval: %s\n", err.msg);
    ds_afree(lg);
    ds_seq_free(s);
    return rc ? 1 : 0;
}

static int run_acceptance(ds_model *m, const eval_opts *o, const int32_t *ids, int64_t n) {
    const int V = ds_model_vocab_size(m), K = (int)(o->K ? o->K : 5), steps = (int)(o->steps ? o->steps : 64);
    if (!m->draft) { fprintf(stderr, "dsflash eval: the model has no usable draft\n"); return 1; }
    uint8_t *masked = ds_xcalloc((size_t)V, 1);
    masked[m->cfg.dspark_noise_id] = 1;
    acc_stats greedy = {0}, text = {0};
    double t_spec = 0, t_plain = 0;
    int64_t tok_spec = 0, mismatch = 0, row_mismatch = 0;
    ds_error err = {{0}, {0}};
    float *lg = ds_amalloc(sizeof(float) * (size_t)V);
    int rc = 0;
    for (size_t si = 0; si < o->n_starts && !rc; si++) {
        long long P = o->start_ids[si];
        if (P < 1 || P + steps * (K + 1) + 2 > n) { fprintf(stderr, "dsflash eval: --starts: %lld out of range\n", P); rc = 1; break; }
        /* greedy continuation, speculative */
        ds_seq *s = ds_seq_new(m);
        int32_t *gen = ds_xmalloc(sizeof(int32_t) * (size_t)steps * (K + 1) + 8);
        uint64_t *gh = ds_xmalloc(sizeof(uint64_t) * (size_t)steps * (K + 1) + 8);
        float *vl = ds_amalloc(sizeof(float) * (size_t)(K + 1) * V);
        int64_t ng = 0;
        if (ds_spec_prefill(m, s, ids, (int)P, 0, lg, &err) < 0) { rc = 1; ds_seq_free(s); free(gen); break; }
        int32_t anchor;
        ds_spec_accept_greedy(lg, V, masked, NULL, 0, &anchor);
        const int B = m->draft->block;
        trace_buf tb = {0};
        if (o->trace) trace_init(&tb, steps, B, V);
        double t0 = ds_now();
        for (int t = 0; t < steps && !rc; t++) {
            int32_t out[DS_DRAFT_MAX_BLOCK + 1];
            ds_spec_trace tr = {.verify_logits = vl};
            if (o->trace) {
                tb.pos[t] = (int32_t)s->len;
                tr.drafts = tb.drafts + (size_t)t * B;
                tr.draft_logits = tb.logits + (size_t)t * B * V;
                tr.conf = tb.conf + (size_t)t * B;
                tb.steps = t + 1;
            }
            int acc = ds_spec_greedy_step(m, s, anchor, K, masked, out, &tr, &err);
            if (acc < 0) { rc = 1; break; }
            for (int i = 0; i <= acc; i++) gh[ng + i] = row_hash(vl + (size_t)i * V, V);
            gen[ng++] = anchor;
            for (int i = 0; i < acc; i++) gen[ng++] = out[i];
            anchor = out[acc];
            acc_add(&greedy, acc);
        }
        t_spec += ds_now() - t0;
        tok_spec += ng;
        if (o->trace) {
            if (!rc && trace_write(o->trace, &tb, ids, (int)P, gen, ng, B, V) < 0) rc = 1;
            trace_free(&tb);
        }
        ds_seq_free(s);
        /* the same tokens without speculation: identity and the plain decode time */
        s = ds_seq_new(m);
        char eb[512];
        if (!rc && ds_seq_step(m, s, ids, (int)P, lg, 1, eb, sizeof eb) < 0) { fprintf(stderr, "%s\n", eb); rc = 1; }
        t0 = ds_now();
        int32_t cur;
        ds_spec_accept_greedy(lg, V, masked, NULL, 0, &cur);
        for (int64_t i = 0; i < ng && !rc; i++) {
            if (cur != gen[i]) mismatch++;
            if (ds_seq_step(m, s, &cur, 1, lg, 1, eb, sizeof eb) < 0) { fprintf(stderr, "%s\n", eb); rc = 1; }
            if (row_hash(lg, V) != gh[i]) row_mismatch++;
            ds_spec_accept_greedy(lg, V, masked, NULL, 0, &cur);
        }
        t_plain += ds_now() - t0;
        ds_seq_free(s);
        free(gen);
        free(gh);
        ds_afree(vl);
        /* teacher-forced on the text */
        s = ds_seq_new(m);
        if (!rc && (ds_spec_prefill(m, s, ids, (int)P, 0, NULL, &err) < 0 || text_steps(m, s, ids, n, P, steps, K, &text, &err) < 0))
            rc = 1;
        ds_seq_free(s);
    }
    if (rc && err.msg[0]) fprintf(stderr, "dsflash eval: %s\n", err.msg);
    if (!rc) {
        printf("acceptance: numerics %s, K %d, starts %s, %d steps each\n", ds_model_numerics(m), K,
               o->starts, steps);
        acc_print("greedy", &greedy, K);
        acc_print("text", &text, K);
        printf("decode: %lld greedy tokens, speculative %.1f tok/s, plain %.1f tok/s, speed-up %.2fx\n", (long long)tok_spec,
               (double)tok_spec / t_spec, (double)tok_spec / t_plain, t_plain / t_spec);
        printf("identity: speculative vs plain: token mismatches %lld, logit rows not bit-identical %lld (of %lld)\n",
               (long long)mismatch, (long long)row_mismatch, (long long)tok_spec);
        if (mismatch || row_mismatch) rc = 1;
        if (!rc) rc = verify_cost(m, ids, 96, K, 10);
    }
    ds_afree(lg);
    free(masked);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--help")) { printf("%s\n", EVAL_USAGE); return 0; }
    if (argc < 2 || (strcmp(argv[1], "perplexity") && strcmp(argv[1], "acceptance"))) {
        fprintf(stderr, "dsflash eval: expected the mode perplexity or acceptance, got '%s'\n%s\n", argc < 2 ? "" : argv[1], EVAL_USAGE);
        return 2;
    }
    const int acc = !strcmp(argv[1], "acceptance");
    eval_opts o = {0};
    int prc = parse_args(argc, argv, acc, &o);
    if (prc) { free(o.start_ids); return prc == 1 ? 0 : 2; }
    int64_t n = 0;
    int32_t *ids = read_u32(o.tokens, &n);
    if (!ids) { free(o.start_ids); return 5; }
    ds_load_options lo = {.kernels = o.kernels, .threads = (int)o.threads, .numerics = o.numerics,
                          .activations = o.activations, .numa_nodes = o.numa_nodes, .draft = acc ? 2 : 0};
    char eb[1024];
    ds_model *m = ds_model_load(o.model, &lo, eb, sizeof eb);
    if (!m) { fprintf(stderr, "dsflash eval: %s\n", eb); free(ids); free(o.start_ids); return 1; }
    int V = ds_model_vocab_size(m), rc = 0;
    for (int64_t i = 0; i < n && !rc; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            fprintf(stderr, "dsflash eval: %s: id %d at index %lld: expected < vocab_size %d\n", o.tokens, ids[i], (long long)i, V);
            rc = 2;
        }
    if (!rc) rc = acc ? run_acceptance(m, &o, ids, n) : run_perplexity(m, &o, ids, n);
    ds_model_free(m);
    free(ids);
    free(o.start_ids);
    return rc;
}
