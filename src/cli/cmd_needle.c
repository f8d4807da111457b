/* `dsflash needle` (TOOLS.md §5.1): long-context retrieval probe.
 *
 * A numbered filler document with a needle at 50% depth (or four needles at 20/40/60/80%) is
 * returned as the result of a `read` tool call, and the model is asked for the internal code
 * name, in thinking mode.  Every sample gets a fresh nonce: identical prompts give identical
 * answers, so repeating one prompt would measure nothing.  Per dose the report gives hits/valid,
 * the Y/N/E pattern and the Wilson 95% interval; the gate requires every valid sample to hit and
 * no errors.  Exit: 0 gate passed; 1 it failed, a depth was off by more than 0.5 points, or the
 * server restarted; 2 usage; 3 server unreachable or result not written. */
#include "base/flags.h"
#include "cli/commands.h"
#include "cli/probe_cli.h"
#include "tools/probe_text.h"
#include "tools/progress.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_flag k_flags[] = {
    DS_PROBE_CLIENT_FLAGS("needle.json"),
    {.name = "--doses", .type = DS_FLAG_STRING, .def = "10000,20000,40000,60000,80000", .help = "target prompt tokens, comma-separated, up to 32 (k = 1000: 8k)"},
    {.name = "--reps", .type = DS_FLAG_INT, .def = "10", .lo = 1, .hi = 100000},
    {.name = "--extended", .type = DS_FLAG_SWITCH, .help = "also 150000 and 260000 tokens, 6 reps each"},
    {.name = "--needles", .type = DS_FLAG_ENUM, .def = "1", .choices = "1|4"},
    {.name = "--seed", .type = DS_FLAG_INT, .def = "1", .lo = 0, .hi = INT64_MAX},
    {.name = "--calibrate", .type = DS_FLAG_SWITCH, .help = "rescale the filler once to land within 1% of each dose"},
    {.name = "--max-tokens", .type = DS_FLAG_INT, .def = "200", .lo = 1, .hi = 1 << 20},
    {.name = "--reasoning-effort", .type = DS_FLAG_STRING, .def = "high"},
};

#define USAGE "usage: dsflash needle [--doses 10000,20000,40000,60000,80000] [--reps 10] [--extended] [--needles 1|4] " \
              "[--seed N] [--calibrate] [--base-url URL] ..."

static const char *k_codes[4] = {"ZQ7K-3341", "VX2M-8890", "HT4P-5527", "RB9N-6014"};

typedef struct needle_cfg {
    int needles, max_tokens;
    const char *effort;
} needle_cfg;

/* The document of one sample: filler with the needle(s); depth of the first (or each) needle. */
static char *make_document(const needle_cfg *c, const char *nonce, int64_t nchar, double depth[4]) {
    ds_filler f;
    ds_filler_build(&f, nonce, nchar);
    char *doc;
    if (c->needles == 1) {
        double frac = 0.5;
        const char *t = "\n【重要标记】本项目的内部代号是 ZQ-7749。\n";
        doc = ds_filler_insert(&f, 1, &frac, &t, depth);
    } else {
        double fr[4] = {0.2, 0.4, 0.6, 0.8};
        char buf[4][128];
        const char *t[4];
        for (int k = 0; k < 4; k++) {
            snprintf(buf[k], sizeof buf[k], "\n【重要标记】第%d个内部代号是 %s。\n", k + 1, k_codes[k]);
            t[k] = buf[k];
        }
        doc = ds_filler_insert(&f, 4, fr, t, depth);
    }
    ds_filler_free(&f);
    return doc;
}

static cJSON *read_tool(void) {
    return cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"read\",\"description\":\"Read a file\","
                       "\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},"
                       "\"required\":[\"path\"]}}}]");
}

static cJSON *make_messages(const needle_cfg *c, const char *doc) {
    cJSON *m = cJSON_CreateArray();
    ds_probe_add_message(m, "system", "You are a helpful assistant.");
    ds_probe_add_message(m, "user", "请只回答一个问题，不要解释。");
    ds_probe_add_readme_read(m, doc);
    ds_probe_add_message(m, "user", c->needles == 1 ? "根据上面读取到的文档，本项目的内部代号是什么？只回答代号本身。"
                                                    : "根据上面读取到的文档，四个内部代号分别是什么？只列出代号本身。");
    return m;
}

/* 'Y', 'N' or 'E'; per-needle hits in hit4 for the 4-needle variant */
static char score(const needle_cfg *c, const char *text, int hit4[4]) {
    if (c->needles == 1) return strstr(text, "ZQ-7749") || strstr(text, "ZQ7749") ? 'Y' : 'N';
    int all = 1;
    for (int k = 0; k < 4; k++) {
        int h = strstr(text, k_codes[k]) != NULL;
        hit4[k] += h;
        all &= h;
    }
    return all ? 'Y' : 'N';
}

/* One sample: request, outcome, JSON row. */
static char sample(ds_probe *p, const needle_cfg *c, const cJSON *msgs, const char *nonce, int hit4[4], cJSON *rows) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddItemToObject(b, "messages", cJSON_Duplicate(msgs, 1));
    cJSON_AddItemToObject(b, "tools", read_tool());
    cJSON_AddStringToObject(b, "reasoning_effort", c->effort);
    cJSON_AddNumberToObject(b, "max_tokens", c->max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    char err[512] = "";
    double t0 = ds_now();
    cJSON *r = ds_probe_post(p, "/v1/chat/completions", b, err, sizeof err);
    double lat = ds_now() - t0;
    cJSON_Delete(b);
    ds_chat_answer a;
    ds_probe_chat_answer(r, &a);
    size_t lc = a.content ? strlen(a.content) : 0, lr = a.reasoning ? strlen(a.reasoning) : 0;
    char *text = ds_xcalloc(1, lc + lr + 2);
    if (a.content) strcat(text, a.content);
    strcat(text, "\n");
    if (a.reasoning) strcat(text, a.reasoning);
    char o = r ? score(c, text, hit4) : 'E';
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "nonce", nonce);
    cJSON_AddStringToObject(s, "outcome", (char[2]){o, 0});
    cJSON_AddStringToObject(s, "finish_reason", a.finish_reason ? a.finish_reason : "");
    cJSON_AddNumberToObject(s, "latency_s", lat);
    char excerpt[201];
    snprintf(excerpt, sizeof excerpt, "%s", r ? (a.content && *a.content ? a.content : text) : err);
    size_t el = strlen(excerpt);   /* never cut inside a UTF-8 sequence */
    while (el && ((unsigned char)excerpt[el - 1] & 0xC0) == 0x80) el--;
    if (el && (unsigned char)excerpt[el - 1] >= 0xC0) el--;
    if (strlen(excerpt) == 200) excerpt[el] = 0;
    cJSON_AddStringToObject(s, "answer_excerpt", excerpt);
    cJSON_AddItemToArray(rows, s);
    free(text);
    cJSON_Delete(r);
    return o;
}

/* nchar for a dose: the §5.1 formula, rescaled once from a measured count with --calibrate */
static int64_t dose_nchar(ds_probe *p, const needle_cfg *c, int64_t dose, bool calibrate, int64_t *actual) {
    int64_t nchar = ds_filler_nchar(dose);
    for (int pass = 0; pass < (calibrate ? 2 : 1); pass++) {
        double depth[4];
        char *doc = make_document(c, "000000", nchar, depth);
        cJSON *m = make_messages(c, doc);
        cJSON *tools = read_tool();
        char err[512];
        *actual = ds_probe_tokenize_chat(p, m, tools, c->effort, NULL, err, sizeof err);
        cJSON_Delete(m);
        cJSON_Delete(tools);
        free(doc);
        if (*actual < 0) {
            fprintf(stderr, "dsflash needle: dose %lld: %s\n", (long long)dose, err);
            return -1;
        }
        if (pass == 0 && calibrate && llabs(*actual - dose) * 100 > dose)
            nchar = (int64_t)llround((double)nchar * (double)dose / (double)*actual);
        else break;
    }
    return nchar;
}

/* One dose: reps samples; returns 1 when it fails the gate (or its depth is off). */
static int run_dose(ds_probe *p, const needle_cfg *c, int64_t dose, int reps, bool calibrate, ds_probe_rng *rng,
                    ds_progress *pr, cJSON *doses) {
    int64_t actual = -1;
    int64_t nchar = dose_nchar(p, c, dose, calibrate, &actual);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddItemToArray(doses, d);
    cJSON_AddNumberToObject(d, "target_tokens", (double)dose);
    cJSON_AddNumberToObject(d, "actual_tokens", (double)actual);
    cJSON *rows = cJSON_CreateArray();
    char *pattern = ds_xcalloc(1, (size_t)reps + 1);
    int hits = 0, valid = 0, hit4[4] = {0};
    double depth[4] = {0}, worst = 0;
    for (int i = 0; i < reps && nchar > 0; i++) {
        char nonce[7];
        ds_probe_nonce(rng, nonce);
        char *doc = make_document(c, nonce, nchar, depth);
        for (int k = 0; k < c->needles; k++) {
            double want = c->needles == 1 ? 0.5 : 0.2 * (k + 1);
            if (fabs(depth[k] - want) > worst) worst = fabs(depth[k] - want);
        }
        cJSON *m = make_messages(c, doc);
        char o = sample(p, c, m, nonce, hit4, rows);
        cJSON_Delete(m);
        free(doc);
        pattern[i] = o;
        valid += o != 'E';
        hits += o == 'Y';
        ds_progress_add(pr, 1);
    }
    double lo, hi;
    ds_wilson95(hits, valid, &lo, &hi);
    int errors = (int)strlen(pattern) - valid;
    bool depth_ok = worst <= 0.005;
    cJSON_AddNumberToObject(d, "depth", depth[0]);
    cJSON_AddBoolToObject(d, "depth_ok", depth_ok);
    cJSON_AddNumberToObject(d, "n", (double)strlen(pattern));
    cJSON_AddNumberToObject(d, "valid", valid);
    cJSON_AddNumberToObject(d, "hits", hits);
    cJSON_AddStringToObject(d, "pattern", pattern);
    cJSON_AddNumberToObject(d, "wilson_lo", lo);
    cJSON_AddNumberToObject(d, "wilson_hi", hi);
    if (c->needles == 4) {
        cJSON *ph = cJSON_AddArrayToObject(d, "per_needle_hits");
        for (int k = 0; k < 4; k++) cJSON_AddItemToArray(ph, cJSON_CreateNumber(hit4[k]));
    }
    cJSON_AddItemToObject(d, "samples", rows);
    bool pass = nchar > 0 && errors == 0 && hits == valid && valid > 0 && depth_ok;
    printf("dose %7lld (actual %lld tokens, depth %.2f%%): %d/%d  %s  Wilson95 [%.3f, %.3f]%s%s\n", (long long)dose,
           (long long)actual, 100 * depth[0], hits, valid, pattern, lo, hi, errors ? "  ERRORS" : "",
           depth_ok ? "" : "  DEPTH OFF");
    fflush(stdout);
    free(pattern);
    return pass ? 0 : 1;
}

int cmd_needle(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash needle", .usage = USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    int64_t doses[34];
    char why[200];
    int nd = ds_parse_int_list(ds_flag_str(&fs, "--doses"), 1, 100000000, "a dose in tokens (k = 1000)", 1, doses, 32,
                               why, sizeof why);
    if (nd < 0) return ds_flags_fail(&fs, "--doses", "%s", why);
    int reps[34];
    for (int i = 0; i < nd; i++) reps[i] = (int)ds_flag_int(&fs, "--reps");
    if (ds_flag_on(&fs, "--extended")) doses[nd] = 150000, reps[nd++] = 6, doses[nd] = 260000, reps[nd++] = 6;
    needle_cfg c = {.needles = (int)strtol(ds_flag_str(&fs, "--needles"), NULL, 10),
                    .max_tokens = (int)ds_flag_int(&fs, "--max-tokens"), .effort = ds_flag_str(&fs, "--reasoning-effort")};
    ds_probe p;
    int rc = ds_probe_cli_open(&p, &fs, "needle", argc, argv);
    if (rc) {
        ds_probe_close(&p);
        return rc;
    }
    ds_probe_rng rng;
    ds_probe_rng_seed(&rng, (uint64_t)ds_flag_int(&fs, "--seed"));
    cJSON *out = ds_probe_envelope(&p, "v41-needle/1");
    cJSON_AddNumberToObject(out, "needles", c.needles);
    cJSON_AddStringToObject(out, "reasoning_effort", c.effort);
    cJSON *jd = cJSON_AddArrayToObject(out, "doses");
    uint64_t total = 0;
    for (int i = 0; i < nd; i++) total += (uint64_t)reps[i];
    ds_progress pr;
    ds_progress_init_count(&pr, "needle", total, "sample", false);
    int failed = 0;
    for (int i = 0; i < nd; i++) failed += run_dose(&p, &c, doses[i], reps[i], ds_flag_on(&fs, "--calibrate"), &rng, &pr, jd);
    ds_progress_finish(&pr);
    ds_progress_destroy(&pr);
    int changed = ds_probe_recheck(&p);
    cJSON_AddBoolToObject(out, "server_restarted", changed);
    cJSON_AddBoolToObject(out, "pass", !failed && !changed);
    printf("needle: %s (%d of %d doses failed the gate)\n", !failed && !changed ? "PASS" : "FAIL", failed, nd);
    int wrc = ds_probe_write_json(ds_flag_str(&fs, "--json-out"), out);
    cJSON_Delete(out);
    ds_probe_close(&p);
    return wrc ? wrc : (failed || changed) ? 1 : 0;
}
