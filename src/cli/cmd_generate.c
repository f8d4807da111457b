/* dsflash generate: greedy generation with the C engine alone (no server), for smoke runs, timing
 * and the oracle comparison trace.
 *
 *   dsflash generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT | --prompt-file F) --max-tokens N
 *                    [--chunk K] [--trace FILE] [--threads N] [--kernels NAME] [--numerics exact|fast]
 *
 * The prompt is prefilled in chunks of K rows (default: one chunk), then one decode step per
 * generated token; up to N tokens are generated: the run stops after EOS unless --ignore-eos (the
 * oracle comparison uses it so traces have a fixed shape).  The greedy choice never emits the DSpark
 * noise token (MODEL.md §2.11: its logit counts as -inf).  --prompt-file holds UTF-8 text encoded with DIR/tokenizer.json (special-token literals
 * are recognized).  Output on stdout: the generated ids, their text when the model directory has a
 * tokenizer, and prefill/decode timings.
 *
 * --trace FILE writes a safetensors file that the NumPy oracle reads (the agreed format): `tokens`
 * I32 [T] (prompt then fed-back tokens, T = P + N − 1), `generated` I32 [N], `hidden.{l}` BF16
 * [T, HC, D] (residual copies after block l), `logits` F32 [T, V] (every processed row), metadata
 * {"chunk": K, "prompt_len": P}.  With a trace, logits are computed for every row.
 *
 * Why the trace is built from the model's trace hook and not from a second forward: it must show
 * exactly the values of the run that produced the generated tokens. */
#include "cli/commands.h"
#include "dsflash.h"
#include "model/model.h"
#include "model/draft.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "base/flags.h"
#include "base/fsutil.h"
#include "cli/dist_cli.h"
#include "cli/load_flags.h"
#include "dist/dist.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GENERATE_USAGE                                                                                        \
    "usage: dsflash generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT | --prompt-file F) --max-tokens N\n"                    \
    "                        [--chunk K] [--trace FILE] [--threads N] [--kernels NAME] [--numerics exact|fast]\n"                                   \
    "                        [--activations int8|e4m3] [--numa-nodes all|LIST] [--ignore-eos]"

/* One row per flag (base/flags.h). */
static ds_flag k_flags[] = {
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (required)"},
    {.name = "--prompt-ids", .type = DS_FLAG_STRING, .help = "token ids: 1,2,3"},
    {.name = "--prompt", .type = DS_FLAG_STRING, .help = "UTF-8 text encoded with DIR/tokenizer.json (as --prompt-file)"},
    {.name = "--prompt-file", .type = DS_FLAG_STRING, .help = "UTF-8 text encoded with DIR/tokenizer.json"},
    {.name = "--max-tokens", .type = DS_FLAG_INT, .lo = 1, .hi = 1 << 24, .help = "tokens to generate (required)"},
    {.name = "--chunk", .type = DS_FLAG_INT, .lo = 1, .hi = 1 << 24, .help = "prefill chunk rows (default: the whole prompt)"},
    {.name = "--trace", .type = DS_FLAG_STRING, .help = "safetensors trace for the oracle"},
    {.name = "--threads", .type = DS_FLAG_INT, .def = "0", .lo = 0, .hi = 4096, .help = DS_THREADS_HELP},
    {.name = "--kernels", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|avx512-vnni|avx2|reference"},
    {.name = "--numerics", .type = DS_FLAG_ENUM, .def = "fast", .choices = "exact|fast",
     .help = "exact: bit-identical to the reference; fast: fp32 blocked reductions"},
    {.name = "--activations", .type = DS_FLAG_ENUM, .def = "int8", .choices = "int8|e4m3",
     .help = "official FP8/MXFP4 layout: e4m3 = the official runtime's E4M3-per-32 activations"},
    DS_ENGRAM_RESIDENCY_FLAG_ROW,
    DS_NUMA_NODES_FLAG_ROW,
    {.name = "--ignore-eos", .type = DS_FLAG_SWITCH, .help = "generate --max-tokens even after EOS"},
    DS_DIST_FLAG_ROWS,
};

/* Trace collection: hidden states of every processed row, per layer. */
typedef struct trace_buf {
    int L, HC, D;
    int64_t cap_rows, rows;       /* rows stored so far (advanced after each step) */
    ds_bf16 **hidden;             /* [L][cap_rows][HC][D] */
} trace_buf;

static void trace_hook(void *ctx, int layer, int n_rows, const ds_bf16 *X) {
    trace_buf *t = ctx;
    size_t row_elems = (size_t)t->HC * t->D;
    memcpy(t->hidden[layer] + (size_t)t->rows * row_elems, X, sizeof(ds_bf16) * row_elems * (size_t)n_rows);
}

static int write_trace(const char *path, const trace_buf *t, const ds_tokens *processed, const int32_t *gen, int G,
                       const float *logits, int V, int chunk, int P) {
    ds_error err = {{0}, {0}};
    ds_stwriter *w = ds_stw_new();
    int64_t T = (int64_t)processed->n;
    int64_t s1[1] = {T}, sg[1] = {G}, sl[2] = {T, V}, sh[3] = {T, t->HC, t->D};
    ds_stw_add(w, "tokens", DS_DT_I32, 1, s1, processed->ids, 1);
    ds_stw_add(w, "generated", DS_DT_I32, 1, sg, gen, 1);
    ds_stw_add(w, "logits", DS_DT_F32, 2, sl, logits, 1);
    char name[32];
    for (int l = 0; l < t->L; l++) {
        snprintf(name, sizeof name, "hidden.%d", l);
        ds_stw_add(w, name, DS_DT_BF16, 3, sh, t->hidden[l], 1);
    }
    char v[32];
    snprintf(v, sizeof v, "%d", chunk);
    ds_stw_set_metadata(w, "chunk", v);
    snprintf(v, sizeof v, "%d", P);
    ds_stw_set_metadata(w, "prompt_len", v);
    if (ds_stw_finish(w, path, &err) < 0) {
        fprintf(stderr, "dsflash generate: %s: %s\n", err.code, err.msg);
        return -1;
    }
    return 0;
}

/* Greedy choice: argmax with ties to the lowest id, never the noise token. */
static int32_t greedy_pick(const float *logits, int V, int noise_id) {
    int32_t best = noise_id == 0 ? 1 : 0;
    for (int i = best + 1; i < V; i++)
        if (i != noise_id && logits[i] > logits[best]) best = i;
    return best;
}

int cmd_generate(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash generate", .usage = GENERATE_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    const char *model_dir = ds_flag_str(&fs, "--model"), *ids_arg = ds_flag_str(&fs, "--prompt-ids");
    const char *prompt_file = ds_flag_str(&fs, "--prompt-file"), *trace_path = ds_flag_str(&fs, "--trace");
    const char *prompt_text = ds_flag_str(&fs, "--prompt");
    long long max_tokens = ds_flag_given(&fs, "--max-tokens") ? ds_flag_int(&fs, "--max-tokens") : -1;
    long long chunk = ds_flag_int(&fs, "--chunk"), threads = ds_flag_int(&fs, "--threads");
    int ignore_eos = ds_flag_on(&fs, "--ignore-eos");
    if (!model_dir || max_tokens < 0 || !!ids_arg + !!prompt_file + !!prompt_text != 1) {
        fprintf(stderr, "dsflash generate: --model, --max-tokens and exactly one of --prompt-ids / --prompt / --prompt-file "
                        "are required\n");
        ds_flags_usage(&fs, stderr);
        return 2;
    }
    ds_tokens prompt = {0};
    if (ids_arg) {
        char why[160];
        if (ds_parse_ids(ids_arg, 0, INT32_MAX, NULL, &prompt.ids, &prompt.n, &prompt.cap, why, sizeof why) || prompt.n == 0) {
            fprintf(stderr, "dsflash generate: --prompt-ids: %s, got '%s'\n",
                    prompt.n || strpbrk(ids_arg, "0123456789") ? why : "expected at least one token id", ids_arg);
            ds_flags_usage(&fs, stderr);
            ds_tokens_free(&prompt);
            return 2;
        }
    }
    if (trace_path) {
        /* fail before the run, not after it, when the trace cannot be written */
        char *dir = ds_xstrdup(trace_path), *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        struct stat st;
        int ok = stat(slash ? (dir[0] ? dir : "/") : ".", &st) == 0 && S_ISDIR(st.st_mode);
        if (!ok) fprintf(stderr, "dsflash generate: E_IO: --trace %s: expected an existing directory, found none\n", trace_path);
        free(dir);
        if (!ok) { ds_tokens_free(&prompt); return 3; }
    }
    ds_error err = {{0}, {0}};
    ds_tokenizer *tok = NULL;
    char *tok_path = ds_path_join(model_dir, "tokenizer.json");
    if (ds_file_exists(tok_path) && ds_tokenizer_load(tok_path, &tok, &err) < 0) {
        fprintf(stderr, "dsflash generate: %s: %s\n", err.code, err.msg);
        free(tok_path);
        ds_tokens_free(&prompt);
        return 1;
    }
    free(tok_path);
    int rc = 0;
    ds_model *m = NULL;
    ds_seq *s = NULL;
    float *logits = NULL, *all_logits = NULL;
    int32_t *gen = NULL;
    uint8_t *no_noise = NULL;
    trace_buf tb = {0};
    ds_tokens processed = {0};
    if (prompt_file || prompt_text) {
        const char *what = prompt_file ? "--prompt-file" : "--prompt";
        char *text = NULL;
        size_t len = 0;
        if (prompt_text) {
            text = ds_xstrdup(prompt_text);
            len = strlen(text);
        } else if (ds_read_file(prompt_file, &text, &len, &err) < 0) {
            fprintf(stderr, "dsflash generate: --prompt-file %s: %s\n", prompt_file, err.msg);
            rc = 5;
            goto done;
        }
        if (!tok) {
            fprintf(stderr, "dsflash generate: %s needs %s/tokenizer.json, found none\n", what, model_dir);
            free(text);
            rc = 5;
            goto done;
        }
        int e = ds_tokenizer_encode(tok, text, len, true, &prompt, &err);
        free(text);
        if (e < 0 || prompt.n == 0) {
            fprintf(stderr, "dsflash generate: %s%s%s: %s\n", what, prompt_file ? " " : "", prompt_file ? prompt_file : "",
                    e < 0 ? err.msg : "empty prompt");
            rc = 1;
            goto done;
        }
    }
    char eb[1536];
    /* under mpirun every rank runs this same loop on its shard; rank 0's choice is broadcast */
    int drc = ds_cli_dist_begin(&fs, "dsflash generate", model_dir, argc, argv);
    if (drc) {
        rc = drc;
        goto done;
    }
    ds_load_options lo = {.kernels = ds_flag_str(&fs, "--kernels"), .threads = (int)threads,
                          .numerics = ds_flag_str(&fs, "--numerics"), .activations = ds_flag_str(&fs, "--activations"),
                          .engram_residency = ds_flag_str(&fs, "--engram-residency"), .numa_nodes = ds_flag_str(&fs, "--numa-nodes")};
    double t0 = ds_now();
    m = ds_model_load(model_dir, &lo, eb, sizeof eb);
    if (!m) {
        fprintf(stderr, "dsflash generate: %s\n", eb);
        rc = !strncmp(eb, "E_MISSING_FILE", 14) ? 5 : 1;
        goto done;
    }
    double t_load = ds_now() - t0;
    ds_cli_dist_loaded();
    const ds_config *c = &m->cfg;
    const int V = c->vocab_size, P = (int)prompt.n;
    const int noise_id = c->dspark_noise_id, eos_id = c->eos_id;
    int G = (int)max_tokens;
    for (int i = 0; i < P; i++)
        if (prompt.ids[i] >= V) {
            fprintf(stderr, "dsflash generate: prompt id %d at position %d: expected < vocab_size %d\n", prompt.ids[i], i, V);
            rc = 2;
            goto done;
        }
    if ((int64_t)P + G - 1 > m->max_len) {
        fprintf(stderr, "dsflash generate: prompt %d + %d tokens: expected at most %lld positions\n", P, G,
                (long long)m->max_len);
        rc = 2;
        goto done;
    }
    if (chunk <= 0) chunk = P;
    s = ds_seq_new(m);
    if (!s) {
        fprintf(stderr, "dsflash generate: cannot create a sequence\n");
        rc = 1;
        goto done;
    }
    const int64_t T = (int64_t)P + G - 1;
    if (trace_path) {
        tb.L = c->n_layers;
        tb.HC = c->hc_mult;
        tb.D = c->dim;
        tb.cap_rows = T;
        tb.hidden = ds_xcalloc((size_t)tb.L, sizeof(ds_bf16 *));
        for (int l = 0; l < tb.L; l++) tb.hidden[l] = ds_xmalloc(sizeof(ds_bf16) * (size_t)T * tb.HC * tb.D);
        all_logits = ds_xmalloc(sizeof(float) * (size_t)T * V);
        ds_model_set_trace(m, trace_hook, &tb);
    }
    logits = ds_xmalloc(sizeof(float) * (size_t)(chunk > 1 ? chunk : 1) * V);
    gen = ds_xmalloc(sizeof(int32_t) * (size_t)G);
    no_noise = ds_xcalloc((size_t)V, 1);   /* greedy_pick's rule: never the noise token */
    if (noise_id >= 0 && noise_id < V) no_noise[noise_id] = 1;
    /* prefill */
    double tp = ds_now();
    for (int p0 = 0; p0 < P; p0 += (int)chunk) {
        int n = P - p0 < chunk ? P - p0 : (int)chunk;
        int last = p0 + n == P;
        int nl = trace_path ? n : (last ? 1 : 0);
        float *dst = trace_path ? all_logits + (size_t)p0 * V : logits;
        if (ds_seq_step(m, s, prompt.ids + p0, n, nl ? dst : NULL, nl, eb, sizeof eb) < 0) {
            fprintf(stderr, "dsflash generate: prefill at %d: %s\n", p0, eb);
            rc = 1;
            goto done;
        }
        for (int j = 0; j < n; j++) ds_tokens_push(&processed, prompt.ids[p0 + j]);
        tb.rows += n;
        if (last) {
            gen[0] = greedy_pick(dst + (size_t)(nl - 1) * V, V, noise_id);
            ds_dist_bcast(&gen[0], sizeof gen[0], 0);
        }
    }
    double t_prefill = ds_now() - tp, comm_prefill = ds_dist_comm_seconds();
    /* decode: feed each generated token back, except the last */
    double td = ds_now();
    for (int i = 1; i < G; i++) {
        if (!ignore_eos && gen[i - 1] == eos_id) { G = i; break; }
        float *dst = trace_path ? all_logits + (size_t)(P + i - 1) * V : logits;
        /* without a trace the model returns the greedy id (the fast tier screens its head) */
        int32_t id = -1;
        int bad = trace_path ? ds_seq_step(m, s, &gen[i - 1], 1, dst, 1, eb, sizeof eb)
                             : ds_seq_step_greedy(m, s, &gen[i - 1], 1, &id, 1, no_noise, eb, sizeof eb);
        if (bad < 0 || (!trace_path && id < 0)) {
            fprintf(stderr, "dsflash generate: decode step %d: %s\n", i, bad < 0 ? eb : "E_NUMERIC: the logits are not finite");
            rc = 1;
            goto done;
        }
        ds_tokens_push(&processed, gen[i - 1]);
        tb.rows += 1;
        gen[i] = trace_path ? greedy_pick(dst, V, noise_id) : id;
        ds_dist_bcast(&gen[i], sizeof gen[i], 0);
    }
    double t_decode = ds_now() - td;
    printf("prompt: %d tokens\ngenerated:", P);
    for (int i = 0; i < G; i++) printf("%s%d", i ? "," : " ", gen[i]);
    printf("\n");
    if (tok) {
        char *text = ds_tokenizer_decode(tok, gen, (size_t)G, false, NULL, &err);
        if (text) printf("text: %s\n", text);
        else printf("text: (not decodable: %s)\n", err.msg);
        free(text);
    }
    printf("load: %.3f s (kernels %s, numerics %s, activations %s)\n", t_load, ds_kernels_active(), ds_model_numerics(m),
           ds_model_activations(m));
    printf("prefill: %d tokens in %.3f s (%.1f tok/s, chunk %lld)\n", P, t_prefill, t_prefill > 0 ? P / t_prefill : 0.0, chunk);
    printf("decode: %d tokens in %.3f s (%.1f tok/s)\n", G - 1, t_decode, t_decode > 0 ? (G - 1) / t_decode : 0.0);
    if (ds_dist_active())
        printf("comm: %d ranks (rank 0), collectives %.3f s = %.1f%% of prefill, %.3f s = %.1f%% of decode; %.2f MiB moved\n",
               ds_dist_size(), comm_prefill, t_prefill > 0 ? 100.0 * comm_prefill / t_prefill : 0.0,
               ds_dist_comm_seconds() - comm_prefill,
               t_decode > 0 ? 100.0 * (ds_dist_comm_seconds() - comm_prefill) / t_decode : 0.0,
               (double)ds_dist_comm_bytes() / 1048576.0);
    if (trace_path && ds_dist_rank() == 0 && write_trace(trace_path, &tb, &processed, gen, G, all_logits, V, (int)chunk, P) < 0) rc = 3;
done:
    if (tb.hidden) for (int l = 0; l < tb.L; l++) free(tb.hidden[l]);
    free(tb.hidden);
    free(all_logits);
    free(logits);
    free(gen);
    free(no_noise);
    ds_tokens_free(&processed);
    ds_tokens_free(&prompt);
    ds_seq_free(s);
    ds_model_free(m);
    rc = ds_cli_dist_end(rc);
    if (tok) ds_tokenizer_free(tok);
    return rc;
}
