/* Gate decision rules (see gate_logic.h for why they are pure functions). */
#include "tools/gate_logic.h"
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_gsm8k_extract(const char *text, double *out) {
    if (!text) return 0;
    const char *last = NULL;
    for (const char *p = strstr(text, "####"); p; p = strstr(p + 1, "####")) last = p;
    if (!last) return 0;
    const char *p = last + 4;
    /* the first match of -?[0-9][0-9,]*(\.[0-9]+)? */
    for (; *p; p++) {
        if (isdigit((unsigned char)*p)) break;
        if (*p == '-' && isdigit((unsigned char)p[1])) break;
    }
    if (!*p) return 0;
    char num[128];
    size_t n = 0;
    if (*p == '-') num[n++] = *p++;
    while ((isdigit((unsigned char)*p) || *p == ',') && n < sizeof num - 2) {
        if (*p != ',') num[n++] = *p;
        p++;
    }
    if (*p == '.' && isdigit((unsigned char)p[1])) {
        num[n++] = *p++;
        while (isdigit((unsigned char)*p) && n < sizeof num - 1) num[n++] = *p++;
    }
    num[n] = 0;
    *out = strtod(num, NULL);
    return 1;
}

bool ds_gsm8k_equal(double pred, double gold) {
    if (gold == floor(gold) && pred == floor(pred)) return pred == gold;
    return fabs(pred - gold) < 1e-6;
}

ds_gate_verdict ds_gsm8k_verdict(int64_t correct, int64_t total) {
    /* 195/200 and 190/200 are 97.5% and 95%; integer arithmetic keeps 200 items exact */
    if (total <= 0) return DS_GATE_FAIL;
    if (correct * 200 >= 195 * total) return DS_GATE_PASS;
    if (correct * 200 >= 190 * total) return DS_GATE_INVESTIGATE;
    return DS_GATE_FAIL;
}
const char *ds_gate_verdict_name(ds_gate_verdict v) {
    return v == DS_GATE_PASS ? "pass" : v == DS_GATE_INVESTIGATE ? "investigate" : "fail";
}

static const char *k_ag_names[DS_AG_N] = {"pass", "truncated", "empty_output", "malformed_tool_call",
                                          "wrong_tool", "mixed_script", "repetitive", "no_tool_call"};
const char *ds_ag_outcome_name(ds_ag_outcome o) { return o < DS_AG_N ? k_ag_names[o] : "?"; }

/* Decode one UTF-8 code point; invalid bytes decode as themselves (one byte). */
static uint32_t next_cp(const unsigned char **pp) {
    const unsigned char *p = *pp;
    uint32_t c = *p;
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (len > 1) {
        c &= 0x3Fu >> (len - 1);
        for (int i = 1; i < len; i++) {
            if ((p[i] & 0xC0) != 0x80) { *pp = p + 1; return *p; }
            c = c << 6 | (p[i] & 0x3F);
        }
    }
    *pp = p + len;
    return c;
}

bool ds_ag_mixed_script(const char *text) {
    if (!text) return false;
    const unsigned char *p = (const unsigned char *)text;
    int run = 0;
    while (*p) {
        uint32_t c = next_cp(&p);
        bool letter = (c >= 0x0400 && c <= 0x04FF) || (c >= 0x0600 && c <= 0x06FF);
        run = letter ? run + 1 : 0;
        if (run >= 3) return true;
    }
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* unique / all over whitespace-separated words; -1 when there are fewer than 20 */
static double word_ratio(const char *text, bool *cjk) {
    size_t n = 0, cap = 64, cjk_cp = 0, cp = 0;
    char **w = ds_xmalloc(sizeof(char *) * cap);
    char *copy = ds_xstrdup(text), *save = NULL;
    for (char *t = strtok_r(copy, " \t\r\n\f\v", &save); t; t = strtok_r(NULL, " \t\r\n\f\v", &save)) {
        if (n == cap) w = ds_xrealloc(w, sizeof(char *) * (cap *= 2));
        w[n++] = t;
    }
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        uint32_t c = next_cp(&p);
        if (c > ' ') cp++;
        if ((c >= 0x3040 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) || (c >= 0xFF00 && c <= 0xFFEF)) cjk_cp++;
    }
    *cjk = cp && cjk_cp * 10 > cp * 3;   /* more than 30% CJK: spaces do not separate its words */
    double r = -1;
    if (n >= 20) {
        qsort(w, n, sizeof *w, cmp_str);
        size_t u = 1;
        for (size_t i = 1; i < n; i++) u += strcmp(w[i], w[i - 1]) != 0;
        r = (double)u / (double)n;
    }
    free(w);
    free(copy);
    return r;
}

/* unique / all over code-point 3-grams; -1 when there are fewer than 20 */
static double trigram_ratio(const char *text) {
    size_t n = 0, cap = 256;
    uint32_t *cps = ds_xmalloc(sizeof(uint32_t) * cap);
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        if (n == cap) cps = ds_xrealloc(cps, sizeof(uint32_t) * (cap *= 2));
        cps[n++] = next_cp(&p);
    }
    double r = -1;
    if (n >= 22) {
        size_t m = n - 2;
        uint64_t *g = ds_xmalloc(sizeof(uint64_t) * m);
        for (size_t i = 0; i < m; i++)
            g[i] = ((uint64_t)(cps[i] & 0x1FFFFF) << 42) | ((uint64_t)(cps[i + 1] & 0x1FFFFF) << 21) | (cps[i + 2] & 0x1FFFFF);
        qsort(g, m, sizeof *g, cmp_u64);
        size_t u = 1;
        for (size_t i = 1; i < m; i++) u += g[i] != g[i - 1];
        r = (double)u / (double)m;
        free(g);
    }
    free(cps);
    return r;
}

bool ds_ag_repetitive(const char *text) {
    if (!text || !*text) return false;
    bool cjk = false;
    double r = word_ratio(text, &cjk);
    if (r < 0 || cjk) r = trigram_ratio(text);
    return r >= 0 && r < 0.45;
}

static bool nonempty(const char *s) { return s && *s; }

/* arguments parse to a JSON object; *path_out is its string "path" or NULL */
static bool args_object(const char *args, char *path, size_t n, bool *has_path) {
    *has_path = false;
    cJSON *j = args ? cJSON_Parse(args) : NULL;
    bool obj = cJSON_IsObject(j);
    const cJSON *p = obj ? cJSON_GetObjectItemCaseSensitive(j, "path") : NULL;
    if (cJSON_IsString(p)) {
        *has_path = true;
        snprintf(path, n, "%s", p->valuestring);
    }
    cJSON_Delete(j);
    return obj;
}

ds_ag_outcome ds_ag_classify(const ds_ag_turn *t, bool *design_md) {
    *design_md = false;
    char path[512];
    bool has_path;
    for (int i = 0; i < t->n_calls; i++)
        if (t->calls[i].name && !strcmp(t->calls[i].name, "read") &&
            args_object(t->calls[i].arguments, path, sizeof path, &has_path) && has_path) {
            *design_md = !strcmp(path, "DESIGN.md");
            return DS_AG_PASS;
        }
    if (t->finish_reason && !strcmp(t->finish_reason, "length")) return DS_AG_TRUNCATED;
    if (!nonempty(t->content) && !nonempty(t->reasoning) && t->n_calls == 0) return DS_AG_EMPTY_OUTPUT;
    if ((t->content && strstr(t->content, "DSML")) || (t->reasoning && strstr(t->reasoning, "DSML")))
        return DS_AG_MALFORMED_TOOL_CALL;
    for (int i = 0; i < t->n_calls; i++)
        if (!args_object(t->calls[i].arguments, path, sizeof path, &has_path)) return DS_AG_MALFORMED_TOOL_CALL;
    for (int i = 0; i < t->n_calls; i++)
        if (!t->calls[i].name || strcmp(t->calls[i].name, "read")) return DS_AG_WRONG_TOOL;
    /* a read call whose object lacks a string path is not a valid call either */
    if (t->n_calls > 0) return DS_AG_MALFORMED_TOOL_CALL;
    const char *texts[2] = {t->content, t->reasoning};
    for (int k = 0; k < 2; k++)
        if (ds_ag_mixed_script(texts[k])) return DS_AG_MIXED_SCRIPT;
    for (int k = 0; k < 2; k++)
        if (ds_ag_repetitive(texts[k])) return DS_AG_REPETITIVE;
    return DS_AG_NO_TOOL_CALL;
}

/* log of the hypergeometric probability of a table with first cell x and the given margins */
static double log_hyper(int64_t x, int64_t r1, int64_t r2, int64_t c1) {
    int64_t n = r1 + r2;
    return lgamma((double)r1 + 1) - lgamma((double)x + 1) - lgamma((double)(r1 - x) + 1) +
           lgamma((double)r2 + 1) - lgamma((double)(c1 - x) + 1) - lgamma((double)(r2 - c1 + x) + 1) -
           (lgamma((double)n + 1) - lgamma((double)c1 + 1) - lgamma((double)(n - c1) + 1));
}

double ds_fisher_two_sided(int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t r1 = a + b, r2 = c + d, c1 = a + c;
    int64_t lo = c1 - r2 > 0 ? c1 - r2 : 0, hi = c1 < r1 ? c1 : r1;
    double lp_obs = log_hyper(a, r1, r2, c1), p = 0;
    for (int64_t x = lo; x <= hi; x++) {
        double lp = log_hyper(x, r1, r2, c1);
        if (lp <= lp_obs + 1e-7 * fabs(lp_obs) + 1e-12) p += exp(lp);
    }
    return p > 1 ? 1 : p;
}

int ds_fisher_selftest(char *msg, size_t len) {
    /* textbook tables: Fisher's tea tasting, the Wikipedia dieting example, an extreme 10/0 table,
     * a symmetric table (p = 1); the expected values are exact sums computed by hand from binomials */
    static const struct { int64_t t[4]; double p; } k_cases[] = {
        {{3, 1, 1, 3}, 34.0 / 70.0},
        {{1, 9, 11, 3}, 0.00275945614},
        {{10, 0, 0, 10}, 2.0 / 184756.0},
        {{5, 5, 5, 5}, 1.0},
    };
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const int64_t *t = k_cases[i].t;
        double p = ds_fisher_two_sided(t[0], t[1], t[2], t[3]);
        if (fabs(p - k_cases[i].p) > 1e-9 + 1e-6 * k_cases[i].p) {
            snprintf(msg, len, "self-test table [[%lld,%lld],[%lld,%lld]]: p = %.10g, expected %.10g", (long long)t[0],
                     (long long)t[1], (long long)t[2], (long long)t[3], p, k_cases[i].p);
            return -1;
        }
    }
    return 0;
}
