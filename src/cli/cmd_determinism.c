/* `dsflash determinism` (TOOLS.md §6.4): the same prompt N times must give the same answer.
 *
 * Probe: N requests with max_tokens 1 and top_logprobs 1; clean means one distinct top-1 token
 * and one distinct top-1 logprob value (spread = max - min).  Extended form: N greedy generations
 * of --gen-tokens that must be identical in text and in their token sequence (the logprobs'
 * token strings and bytes; an OpenAI-compatible answer carries no ids).  Variations: sequential
 * (default), --concurrent (all N at once) and --background N unrelated streaming requests running
 * throughout.  Why a gate: this engine reduces in a fixed order, so any unclean result is a bug
 * (the NPU reference was clean only 16-52% of the time).  Exit: 0 all clean; 1 otherwise or the
 * server restarted; 2 usage; 3 I/O or unreachable; 5 the prompt file is missing. */
#include "base/flags.h"
#include "base/fsutil.h"
#include "cli/commands.h"
#include "cli/probe_cli.h"
#include "tools/probe_text.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_flag k_flags[] = {
    DS_PROBE_CLIENT_FLAGS("determinism.json"),
    {.name = "--prompt-file", .type = DS_FLAG_STRING, .help = "UTF-8 prompt sent as the user message (required)"},
    {.name = "--n", .type = DS_FLAG_INT, .def = "8", .lo = 2, .hi = 64},
    {.name = "--concurrent", .type = DS_FLAG_SWITCH, .help = "send the N requests at once"},
    {.name = "--background", .type = DS_FLAG_INT, .def = "0", .lo = 0, .hi = 64,
     .help = "unrelated streaming requests kept running during the checks"},
    {.name = "--gen-tokens", .type = DS_FLAG_INT, .def = "256", .lo = 0, .hi = 1 << 20,
     .help = "length of the extended form's generations (0: probe only)"},
};

#define USAGE "usage: dsflash determinism --prompt-file F [--n 8] [--concurrent] [--background N] [--gen-tokens 256] " \
              "[--base-url URL] ..."

typedef struct det_run {
    ds_probe *p;
    const char *prompt;
    int max_tokens;
    cJSON **resp;
    char (*err)[512];
} det_run;

static void one(void *ctx, int64_t i) {
    det_run *d = ctx;
    cJSON *b = cJSON_CreateObject(), *m = cJSON_AddArrayToObject(b, "messages"), *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", d->prompt);
    cJSON_AddItemToArray(m, u);
    cJSON_AddStringToObject(b, "model", d->p->model);
    cJSON_AddNumberToObject(b, "max_tokens", d->max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddTrueToObject(b, "logprobs");
    cJSON_AddNumberToObject(b, "top_logprobs", 1);
    d->resp[i] = ds_probe_post(d->p, "/v1/chat/completions", b, d->err[i], sizeof d->err[i]);
    cJSON_Delete(b);
}

/* N requests (sequential or concurrent); returns how many failed (messages printed). */
static int send_n(ds_probe *p, const char *prompt, int n, bool conc, int max_tokens, cJSON **resp) {
    char (*err)[512] = ds_xcalloc((size_t)n, sizeof *err);
    det_run d = {p, prompt, max_tokens, resp, err};
    ds_probe_parallel(n, conc ? n : 1, one, &d);
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!resp[i]) fprintf(stderr, "dsflash determinism: request %d: %s\n", i, err[i]), bad++;
    free(err);
    return bad;
}

static const cJSON *lp_content(const cJSON *r) {
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "choices"), 0);
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "logprobs"), "content");
}

/* Probe: top-1 token and logprob of the single generated token of each answer. */
static bool probe(cJSON **resp, int n, cJSON *out) {
    int uniq_tok = 0, uniq_lp = 0;
    double mn = 0, mx = 0;
    const char **tok = ds_xcalloc((size_t)n, sizeof *tok);
    double *lp = ds_xcalloc((size_t)n, sizeof *lp);
    cJSON *rows = cJSON_CreateArray();
    bool complete = true;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(lp_content(resp[i]), 0);
        const cJSON *t1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "top_logprobs"), 0);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(t1, "token"), *l = cJSON_GetObjectItemCaseSensitive(t1, "logprob");
        if (!cJSON_IsString(t) || !cJSON_IsNumber(l)) {
            complete = false;
            continue;
        }
        tok[i] = t->valuestring, lp[i] = l->valuedouble;
        bool new_t = true, new_l = true;
        for (int j = 0; j < i; j++) {
            if (tok[j] && !strcmp(tok[j], tok[i])) new_t = false;
            if (tok[j] && lp[j] == lp[i]) new_l = false;
        }
        uniq_tok += new_t, uniq_lp += new_l;
        if (uniq_lp == 1 && new_l) mn = mx = lp[i];
        mn = lp[i] < mn ? lp[i] : mn, mx = lp[i] > mx ? lp[i] : mx;
        cJSON *row = cJSON_CreateObject();
        cJSON_AddStringToObject(row, "token", tok[i]);
        cJSON_AddNumberToObject(row, "logprob", lp[i]);
        cJSON_AddItemToArray(rows, row);
    }
    bool clean = complete && uniq_tok == 1 && uniq_lp == 1;
    cJSON *pj = cJSON_AddObjectToObject(out, "probe");
    cJSON_AddNumberToObject(pj, "n", n);
    cJSON_AddNumberToObject(pj, "uniq_top1", uniq_tok);
    cJSON_AddNumberToObject(pj, "n_distinct_logprob", uniq_lp);
    cJSON_AddNumberToObject(pj, "spread", mx - mn);
    cJSON_AddBoolToObject(pj, "complete", complete);
    cJSON_AddBoolToObject(pj, "clean", clean);
    cJSON_AddItemToObject(pj, "top1", rows);
    printf("probe: uniq_top1 %d, n_distinct_logprob %d, spread %.6g%s: %s\n", uniq_tok, uniq_lp, mx - mn,
           complete ? "" : " (an answer lacks top_logprobs)", clean ? "clean" : "NOT clean");
    free(tok);
    free(lp);
    return clean;
}

/* "text\x1f" + every token's string and bytes: equal signatures <=> same text and token sequence */
static char *signature(const cJSON *r, char **text_out) {
    ds_chat_answer a;
    ds_probe_chat_answer(r, &a);
    cJSON *sig = cJSON_CreateArray();
    const cJSON *e;
    cJSON_ArrayForEach(e, lp_content(r)) {
        cJSON_AddItemToArray(sig, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(e, "token"), 1));
        cJSON_AddItemToArray(sig, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(e, "bytes"), 1));
    }
    char *s = cJSON_PrintUnformatted(sig);
    cJSON_Delete(sig);
    *text_out = ds_xstrdup(a.content ? a.content : "");
    return s;
}

static bool extended(cJSON **resp, int n, int gen, cJSON *out) {
    int same_text = 0, same_tok = 0;
    char *t0 = NULL, *s0 = signature(resp[0], &t0);
    for (int i = 0; i < n; i++) {
        char *t, *s = signature(resp[i], &t);
        same_text += !strcmp(t, t0);
        same_tok += !strcmp(s, s0);
        free(t);
        free(s);
    }
    bool ok = same_text == n && same_tok == n;
    cJSON *ej = cJSON_AddObjectToObject(out, "extended");
    cJSON_AddNumberToObject(ej, "n", n);
    cJSON_AddNumberToObject(ej, "gen_tokens", gen);
    cJSON_AddNumberToObject(ej, "identical_texts", same_text);
    cJSON_AddNumberToObject(ej, "identical_tokens", same_tok);
    cJSON_AddBoolToObject(ej, "clean", ok);
    printf("extended: %d/%d identical texts, %d/%d identical token sequences (%d tokens): %s\n", same_text, n, same_tok,
           n, gen, ok ? "clean" : "NOT clean");
    free(t0);
    free(s0);
    return ok;
}

/* Background traffic: N streaming requests over unrelated filler prompts. */
static int start_background(ds_probe *p, int n, ds_probe_stream *bg) {
    ds_probe_rng rng;
    ds_probe_rng_seed(&rng, 99);
    for (int i = 0; i < n; i++) {
        char nonce[7], err[512];
        ds_probe_nonce(&rng, nonce);
        ds_filler f;
        ds_filler_build(&f, nonce, ds_filler_nchar(200));
        int64_t c = ds_probe_tokenize_prompt(p, f.text, NULL, err, sizeof err);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "model", p->model);
        cJSON_AddStringToObject(b, "prompt", f.text);
        cJSON_AddNumberToObject(b, "max_tokens", c > 0 && p->max_model_len > c + 1 ? (double)(p->max_model_len - c) : 256);
        cJSON_AddTrueToObject(b, "ignore_eos");
        cJSON_AddTrueToObject(b, "stream");
        ds_probe_stream_start(&bg[i], p, "/v1/completions", b);
        cJSON_Delete(b);
        ds_filler_free(&f);
        if (ds_probe_stream_wait_first(&bg[i], p->timeout_s)) {
            fprintf(stderr, "dsflash determinism: background request %d produced nothing: %s\n", i, bg[i].error);
            for (int j = 0; j <= i; j++) ds_probe_stream_stop(&bg[j]);
            return -1;
        }
    }
    return 0;
}

static char *read_prompt(const char *path, int *rc) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "dsflash determinism: --prompt-file %s: %s\n", path, strerror(errno));
        *rc = errno == ENOENT ? 5 : 3;
        return NULL;
    }
    size_t cap = 4096, n = 0, k;
    char *buf = ds_xmalloc(cap);
    while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0)
        if ((n += k) + 1 == cap) buf = ds_xrealloc(buf, cap *= 2);
    buf[n] = 0;
    fclose(f);
    if (!n || strlen(buf) != n) {
        fprintf(stderr, "dsflash determinism: --prompt-file %s: %s\n", path, n ? "contains a NUL byte" : "is empty");
        free(buf);
        *rc = 5;
        return NULL;
    }
    return buf;
}

static bool run_checks(ds_probe *p, const char *prompt, int n, bool conc, int gen, cJSON *out) {
    cJSON **resp = ds_xcalloc((size_t)n, sizeof *resp);
    bool ok = !send_n(p, prompt, n, conc, 1, resp) && probe(resp, n, out);
    for (int i = 0; i < n; i++) cJSON_Delete(resp[i]), resp[i] = NULL;
    if (ok && gen > 0) ok = !send_n(p, prompt, n, conc, gen, resp) && extended(resp, n, gen, out);
    for (int i = 0; i < n; i++) cJSON_Delete(resp[i]);
    free(resp);
    return ok;
}

int cmd_determinism(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash determinism", .usage = USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    if (!ds_flag_str(&fs, "--prompt-file")) {
        fprintf(stderr, "dsflash determinism: --prompt-file is required\n%s\n", USAGE);
        return 2;
    }
    int rc = 0, n = (int)ds_flag_int(&fs, "--n"), nbg = (int)ds_flag_int(&fs, "--background");
    int gen = (int)ds_flag_int(&fs, "--gen-tokens");
    bool conc = ds_flag_on(&fs, "--concurrent");
    char *prompt = read_prompt(ds_flag_str(&fs, "--prompt-file"), &rc);
    if (!prompt) return rc;
    ds_probe p;
    if ((rc = ds_probe_cli_open(&p, &fs, "determinism", argc, argv))) {
        ds_probe_close(&p);
        free(prompt);
        return rc;
    }
    char err[512];
    ds_probe_tokenize_prompt(&p, "x", NULL, err, sizeof err);   /* learns max_model_len */
    ds_probe_stream bg[64];
    if (nbg && start_background(&p, nbg, bg)) rc = 1;
    cJSON *out = ds_probe_envelope(&p, "v41-determinism/1");
    cJSON_AddStringToObject(out, "variation", conc ? "concurrent" : "sequential");
    cJSON_AddNumberToObject(out, "background", nbg);
    printf("determinism: %d x same prompt, %s, %d background requests\n", n, conc ? "concurrent" : "sequential", nbg);
    bool ok = !rc && run_checks(&p, prompt, n, conc, gen, out);
    if (nbg && !rc) {
        int still = 0;
        for (int i = 0; i < nbg; i++) still += !bg[i].done;
        cJSON_AddNumberToObject(out, "background_running_at_end", still);
        for (int i = 0; i < nbg; i++) ds_probe_stream_stop(&bg[i]);
    }
    int changed = ds_probe_recheck(&p);
    cJSON_AddBoolToObject(out, "server_restarted", changed);
    cJSON_AddBoolToObject(out, "pass", ok && !changed);
    printf("determinism: %s\n", ok && !changed ? "PASS (100% clean)" : "FAIL");
    int wrc = ds_probe_write_json(ds_flag_str(&fs, "--json-out"), out);
    cJSON_Delete(out);
    ds_probe_close(&p);
    free(prompt);
    return wrc ? wrc : (ok && !changed) ? 0 : 1;
}
