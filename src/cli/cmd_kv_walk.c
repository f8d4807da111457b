/* `dsflash kv-walk` (TOOLS.md §5.2): the most sensitive KV-corruption detector.
 *
 * One filler prompt of the target length is sent `--runs` times with `prompt_logprobs`, each time
 * with a fresh `cache_salt` (so the prefix cache cannot answer it) and optionally while an
 * occupier request holds KV pages, so successive runs land on different pages of the pool.  The
 * engine is deterministic, so the logprob of every prompt token must be identical in every run;
 * a page whose contents or address are wrong (the seed stack's 32-bit offset overflow) shows up
 * as deviating positions.  Why every position: a sampled answer hides most corruption, the
 * per-position logprobs expose all of it.
 *
 * Exit status: 0 no run deviates; 1 a run deviates, a request failed or the server restarted;
 * 2 usage; 3 the server cannot be reached or a result cannot be written. */
#include "io/io_util.h"
#include "base/flags.h"
#include "cli/commands.h"
#include "cli/probe_cli.h"
#include "tools/probe_text.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_flag k_flags[] = {
    DS_PROBE_CLIENT_FLAGS("kv-walk.json"),
    {.name = "--tokens", .type = DS_FLAG_INT, .def = "65536", .lo = 2, .hi = 1 << 30, .help = "prompt length"},
    {.name = "--runs", .type = DS_FLAG_INT, .def = "8", .lo = 2, .hi = 100000},
    {.name = "--occupy-tokens", .type = DS_FLAG_INT, .def = "0", .lo = 0, .hi = 1 << 30,
     .help = "prompt tokens of the occupier request held during each run (0: none)"},
    {.name = "--tol", .type = DS_FLAG_DOUBLE, .def = "0", .dlo = 0, .dhi = 1e9, .help = "|delta| allowed per position"},
    {.name = "--seed", .type = DS_FLAG_INT, .def = "1", .lo = 0, .hi = INT64_MAX, .help = "nonces and cache salts"},
};

#define USAGE "usage: dsflash kv-walk [--tokens 65536] [--runs 8] [--occupy-tokens 0] [--tol 0] [--base-url URL] ..."

typedef struct walk_run {
    double *lp;            /* [n] logprob of the actual prompt token at each position (NaN at 0) */
    int64_t deviating, first_dev, cached, occupier_events;
    double max_abs, latency;
    char error[400];
} walk_run;

/* The filler with the most tokens <= target (binary search over its length in code points). */
static char *build_prompt(ds_probe *p, const char *nonce, int64_t target, int64_t *count, char *err, size_t n) {
    int64_t lo = 1, hi = 2 * ds_filler_nchar(target), best_n = -1;
    char *best = NULL;
    for (int it = 0; it < 40 && lo <= hi; it++) {
        int64_t mid = lo + (hi - lo) / 2;
        ds_filler f;
        ds_filler_build(&f, nonce, mid);
        int64_t c = ds_probe_tokenize_prompt(p, f.text, NULL, err, n);
        if (c < 0) {
            ds_filler_free(&f);
            free(best);
            return NULL;
        }
        if (c <= target) {
            if (c > best_n) {
                free(best);
                best = f.text, f.text = NULL, best_n = c;
            }
            lo = (int64_t)f.chars + 1;   /* records are indivisible: skip to the next length */
        } else hi = mid - 1;
        ds_filler_free(&f);
        if (best_n == target) break;
    }
    if (!best) snprintf(err, n, "no filler prompt of at most %lld tokens", (long long)target);
    *count = best_n;
    return best;
}

static int parse_prompt_logprobs(const cJSON *resp, const int32_t *ids, int64_t n, double *lp, char *err, size_t el) {
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(resp, "choices"), 0);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(ch, "prompt_logprobs");
    if (cJSON_GetArraySize(pl) != n) {
        snprintf(err, el, "prompt_logprobs has %d entries for a %lld-token prompt", cJSON_GetArraySize(pl), (long long)n);
        return -1;
    }
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, pl) {
        lp[i] = NAN;
        if (i > 0) {
            char key[16];
            snprintf(key, sizeof key, "%d", ids[i]);
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, key), "logprob");
            if (!cJSON_IsNumber(v)) {
                snprintf(err, el, "prompt_logprobs[%lld] has no entry for the prompt token %d", (long long)i, ids[i]);
                return -1;
            }
            lp[i] = v->valuedouble;
        }
        i++;
    }
    return 0;
}

/* Start the occupier of run r: a streaming request that holds KV until cancelled. */
static int start_occupier(ds_probe *p, ds_probe_stream *s, ds_probe_rng *rng, int64_t occ_tokens, char *err, size_t n) {
    char nonce[7];
    ds_probe_nonce(rng, nonce);
    ds_filler f;
    ds_filler_build(&f, nonce, ds_filler_nchar(occ_tokens));
    int64_t c = ds_probe_tokenize_prompt(p, f.text, NULL, err, n);
    int64_t room = p->max_model_len - c;
    if (c < 0 || room < 1) {
        if (c >= 0) snprintf(err, n, "--occupy-tokens: an occupier of %lld tokens leaves no room below max_model_len %lld",
                             (long long)c, (long long)p->max_model_len);
        ds_filler_free(&f);
        return -1;
    }
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddStringToObject(b, "prompt", f.text);
    cJSON_AddNumberToObject(b, "max_tokens", (double)room);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddTrueToObject(b, "ignore_eos");
    cJSON_AddTrueToObject(b, "stream");
    ds_probe_stream_start(s, p, "/v1/completions", b);
    cJSON_Delete(b);
    ds_filler_free(&f);
    if (ds_probe_stream_wait_first(s, p->timeout_s)) {
        snprintf(err, n, "the occupier produced no output (%s)", s->error[0] ? s->error : "timeout");
        ds_probe_stream_stop(s);
        return -1;
    }
    return 0;
}

static void measure(ds_probe *p, const char *prompt, const int32_t *ids, int64_t n, int r, ds_probe_rng *rng,
                    walk_run *w) {
    char salt[64];
    snprintf(salt, sizeof salt, "walk-%d-%016llx", r, (unsigned long long)ds_probe_rng_next(rng));
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddStringToObject(b, "prompt", prompt);
    cJSON_AddNumberToObject(b, "max_tokens", 1);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddNumberToObject(b, "prompt_logprobs", 1);
    cJSON_AddStringToObject(b, "cache_salt", salt);
    double t0 = ds_now();
    cJSON *resp = ds_probe_post(p, "/v1/completions", b, w->error, sizeof w->error);
    w->latency = ds_now() - t0;
    cJSON_Delete(b);
    if (!resp) return;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(resp, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"),
                                                       "cached_tokens");
    w->cached = ds_io_json_int_or(ct, 0, INT64_MAX, 0);
    w->lp = ds_xmalloc(sizeof(double) * (size_t)n);
    if (ds_io_json_int_or(pt, 0, INT64_MAX, -1) != n)
        snprintf(w->error, sizeof w->error, "usage.prompt_tokens %g differs from the /tokenize count %lld",
                 cJSON_IsNumber(pt) ? pt->valuedouble : -1.0, (long long)n);
    else parse_prompt_logprobs(resp, ids, n, w->lp, w->error, sizeof w->error);
    cJSON_Delete(resp);
}

static void compare(const walk_run *ref, walk_run *w, int64_t n, double tol) {
    w->first_dev = -1;
    for (int64_t i = 1; i < n; i++) {
        double d = fabs(w->lp[i] - ref->lp[i]);
        if (d > w->max_abs) w->max_abs = d;
        if (d > tol) {
            if (w->first_dev < 0) w->first_dev = i;
            w->deviating++;
        }
    }
}

static cJSON *run_json(int r, const walk_run *w, int64_t occ) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "run", r);
    if (w->error[0]) cJSON_AddStringToObject(o, "error", w->error);
    cJSON_AddNumberToObject(o, "deviating", (double)w->deviating);
    cJSON_AddNumberToObject(o, "max_abs_delta", w->max_abs);
    if (w->first_dev >= 0) cJSON_AddNumberToObject(o, "first_deviation", (double)w->first_dev);
    else cJSON_AddNullToObject(o, "first_deviation");
    cJSON_AddNumberToObject(o, "cached_tokens", (double)w->cached);
    cJSON_AddNumberToObject(o, "occupy_tokens", (double)occ);
    cJSON_AddNumberToObject(o, "latency_s", w->latency);
    return o;
}

typedef struct walk_cfg { int64_t target, occ; int runs; double tol; uint64_t seed; } walk_cfg;

/* The runs; fills `rows`, returns the number of failed-or-deviating runs. */
static int walk(ds_probe *p, const walk_cfg *c, const char *prompt, const int32_t *ids, int64_t n, cJSON *rows) {
    ds_probe_rng rng;
    ds_probe_rng_seed(&rng, c->seed ^ 0x5a5a5a5aull);
    walk_run *w = ds_xcalloc((size_t)c->runs, sizeof *w);
    int bad = 0;
    for (int r = 0; r < c->runs; r++) {
        ds_probe_stream occ;
        bool have_occ = false;
        w[r].first_dev = -1;
        if (c->occ > 0) {
            if (start_occupier(p, &occ, &rng, c->occ, w[r].error, sizeof w[r].error)) goto report;
            have_occ = true;
        }
        measure(p, prompt, ids, n, r, &rng, &w[r]);
        if (have_occ) {
            w[r].occupier_events = occ.events;
            ds_probe_stream_stop(&occ);
        }
        if (!w[r].error[0] && r > 0 && w[0].lp && !w[0].error[0]) compare(&w[0], &w[r], n, c->tol);
    report:
        if (w[r].error[0] || w[r].deviating) bad++;
        if (w[r].error[0]) printf("run %d: ERROR %s\n", r, w[r].error);
        else if (r == 0) printf("run 0: reference (%lld positions, cached %lld, %.2f s)\n", (long long)n - 1,
                                (long long)w[r].cached, w[r].latency);
        else {
            char first[32] = "none";
            if (w[r].first_dev >= 0) snprintf(first, sizeof first, "at position %lld", (long long)w[r].first_dev);
            printf("run %d: %lld deviating positions, max |delta| %.6g, first %s (cached %lld, %.2f s)\n", r,
                   (long long)w[r].deviating, w[r].max_abs, first, (long long)w[r].cached, w[r].latency);
        }
        fflush(stdout);
        cJSON_AddItemToArray(rows, run_json(r, &w[r], c->occ));
    }
    for (int r = 0; r < c->runs; r++) free(w[r].lp);
    free(w);
    return bad;
}

int cmd_kv_walk(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash kv-walk", .usage = USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    walk_cfg c = {.target = ds_flag_int(&fs, "--tokens"), .occ = ds_flag_int(&fs, "--occupy-tokens"),
                  .runs = (int)ds_flag_int(&fs, "--runs"), .tol = ds_flag_double(&fs, "--tol"),
                  .seed = (uint64_t)ds_flag_int(&fs, "--seed")};
    ds_probe p;
    int rc = ds_probe_cli_open(&p, &fs, "kv-walk", argc, argv);
    if (rc) {
        ds_probe_close(&p);
        return rc;
    }
    char err[512] = "", nonce[7];
    ds_probe_rng rng;
    ds_probe_rng_seed(&rng, c.seed);
    ds_probe_nonce(&rng, nonce);
    int64_t n = 0;
    int32_t *ids = NULL;
    char *prompt = build_prompt(&p, nonce, c.target, &n, err, sizeof err);
    if (prompt && ds_probe_tokenize_prompt(&p, prompt, &ids, err, sizeof err) != n) {
        free(prompt);
        prompt = NULL;
    }
    if (prompt && p.max_model_len && n + 1 > p.max_model_len) {
        snprintf(err, sizeof err, "--tokens %lld: the server's max_model_len is %lld", (long long)c.target,
                 (long long)p.max_model_len);
        free(prompt);
        prompt = NULL;
    }
    if (!prompt) {
        fprintf(stderr, "dsflash kv-walk: %s\n", err);
        free(ids);
        ds_probe_close(&p);
        return 1;
    }
    printf("kv-walk: prompt %lld tokens (target %lld), %d runs, occupier %lld tokens, tol %g, server %s\n",
           (long long)n, (long long)c.target, c.runs, (long long)c.occ, c.tol, p.instance_id);
    cJSON *out = ds_probe_envelope(&p, "v41-kv-walk/1");
    cJSON_AddNumberToObject(out, "target_tokens", (double)c.target);
    cJSON_AddNumberToObject(out, "actual_tokens", (double)n);
    cJSON_AddNumberToObject(out, "occupy_tokens", (double)c.occ);
    cJSON_AddNumberToObject(out, "tol", c.tol);
    cJSON_AddStringToObject(out, "nonce", nonce);
    int bad = walk(&p, &c, prompt, ids, n, cJSON_AddArrayToObject(out, "runs"));
    int changed = ds_probe_recheck(&p);
    cJSON_AddBoolToObject(out, "server_restarted", changed);
    cJSON_AddNumberToObject(out, "deviating_runs", bad);
    cJSON_AddBoolToObject(out, "pass", !bad && !changed);
    printf("kv-walk: %s (%d of %d runs deviate or failed)\n", !bad && !changed ? "PASS" : "FAIL", bad, c.runs);
    int wrc = ds_probe_write_json(ds_flag_str(&fs, "--json-out"), out);
    cJSON_Delete(out);
    free(prompt);
    free(ids);
    ds_probe_close(&p);
    return wrc ? wrc : (bad || changed) ? 1 : 0;
}
