/* `dsflash gsm8k` (TOOLS.md §6.1): 8-shot GSM8K accuracy gate on JSONL files given as arguments.
 *
 * Each item is sent as the shots (user question, assistant worked answer ending in `#### N`) then
 * the test question, temperature 0, `--conc` items in flight so prefills and decodes of different
 * items overlap (an old harness serialised prefills and never exercised that).  The rendered
 * prompt is checked once through /tokenize: in chat mode it must end with
 * `<｜Assistant｜></think>` (a template bug once produced empty answers).  Extraction and the
 * verdict are tools/gate_logic.h.  Exit: 0 pass (>= 97.5%, i.e. 195/200); 1 investigate
 * (>= 95%) or fail, a mode-check failure, or a server restart; 2 usage; 3 I/O or server
 * unreachable; 5 a data file missing or malformed (file, line and field named). */
#include "base/flags.h"
#include "cli/commands.h"
#include "cli/probe_cli.h"
#include "tools/gate_logic.h"
#include "tools/progress.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_flag k_flags[] = {
    DS_PROBE_CLIENT_FLAGS("gsm8k.json"),
    {.name = "--data", .type = DS_FLAG_STRING, .help = "test JSONL {\"question\",\"answer\"} (required)"},
    {.name = "--shots-file", .type = DS_FLAG_STRING, .help = "train JSONL for the shots (required)"},
    {.name = "--limit", .type = DS_FLAG_INT, .def = "200", .lo = 1, .hi = 1 << 24},
    {.name = "--shots", .type = DS_FLAG_INT, .def = "8", .lo = 0, .hi = 64},
    {.name = "--conc", .type = DS_FLAG_INT, .def = "4", .lo = 1, .hi = 64},
    {.name = "--mode", .type = DS_FLAG_ENUM, .def = "chat", .choices = "chat|thinking"},
    {.name = "--max-tokens", .type = DS_FLAG_INT, .def = "512", .lo = 1, .hi = 1 << 20},
    {.name = "--items-out", .type = DS_FLAG_STRING, .def = "gsm8k-items.jsonl", .help = "per-item JSONL"},
};

#define USAGE "usage: dsflash gsm8k --data test.jsonl --shots-file train.jsonl [--limit 200] [--shots 8] [--conc 4] " \
              "[--mode chat|thinking] [--max-tokens 512] [--base-url URL] ..."

typedef struct gitem { char *q, *a; double gold; } gitem;

/* Read up to `limit` records; 0, or the exit status after a message naming file, line and field. */
static int read_jsonl(const char *path, int64_t limit, gitem **out, int64_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dsflash gsm8k: %s: %s\n", path, strerror(errno));
        return errno == ENOENT ? 5 : 3;
    }
    char *line = NULL;
    size_t cap = 0;
    int64_t ln = 0, k = 0;
    gitem *v = NULL;
    int rc = 0;
    while (k < limit && getline(&line, &cap, f) > 0) {
        ln++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        cJSON *j = cJSON_Parse(line);
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "question"), *a = cJSON_GetObjectItemCaseSensitive(j, "answer");
        double gold;
        const char *bad = !j ? "not a JSON object" : !cJSON_IsString(q) ? "field \"question\" is not a string"
                        : !cJSON_IsString(a) ? "field \"answer\" is not a string"
                        : !ds_gsm8k_extract(a->valuestring, &gold) ? "field \"answer\" has no '#### <number>'" : NULL;
        if (bad) {
            fprintf(stderr, "dsflash gsm8k: %s:%lld: %s\n", path, (long long)ln, bad);
            cJSON_Delete(j);
            rc = 5;
            break;
        }
        v = ds_xrealloc(v, sizeof *v * (size_t)(k + 1));
        v[k++] = (gitem){ds_xstrdup(q->valuestring), ds_xstrdup(a->valuestring), gold};
        cJSON_Delete(j);
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "dsflash gsm8k: %s: read error\n", path);
        rc = 3;
    }
    free(line);
    fclose(f);
    *out = v, *n = k;
    return rc;
}

typedef struct gsm_run {
    ds_probe *p;
    const gitem *items, *shots;
    int64_t n_shots;
    int max_tokens;
    bool thinking;
    ds_progress *pr;
    cJSON **rows;              /* per item */
    int *correct, *no_answer, *truncated, *errors;
} gsm_run;

static cJSON *item_messages(const gsm_run *g, const char *question) {
    cJSON *m = cJSON_CreateArray();
    for (int64_t s = 0; s <= g->n_shots; s++) {
        cJSON *u = cJSON_CreateObject();
        cJSON_AddStringToObject(u, "role", "user");
        cJSON_AddStringToObject(u, "content", s < g->n_shots ? g->shots[s].q : question);
        cJSON_AddItemToArray(m, u);
        if (s == g->n_shots) break;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "role", "assistant");
        cJSON_AddStringToObject(a, "content", g->shots[s].a);
        cJSON_AddItemToArray(m, a);
    }
    return m;
}

static cJSON *kwargs(bool thinking) {
    cJSON *k = cJSON_CreateObject();
    cJSON_AddBoolToObject(k, "enable_thinking", thinking);
    return k;
}

static void run_item(void *ctx, int64_t i) {
    gsm_run *g = ctx;
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", g->p->model);
    cJSON_AddItemToObject(b, "messages", item_messages(g, g->items[i].q));
    cJSON_AddItemToObject(b, "chat_template_kwargs", kwargs(g->thinking));
    cJSON_AddNumberToObject(b, "max_tokens", g->max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    char err[512] = "";
    cJSON *r = ds_probe_post(g->p, "/v1/chat/completions", b, err, sizeof err);
    cJSON_Delete(b);
    ds_chat_answer a;
    ds_probe_chat_answer(r, &a);
    double pred = 0;
    bool have = r && ds_gsm8k_extract(a.content, &pred);
    bool ok = have && ds_gsm8k_equal(pred, g->items[i].gold);
    cJSON *row = cJSON_CreateObject();
    cJSON_AddNumberToObject(row, "id", (double)i);
    cJSON_AddNumberToObject(row, "gold", g->items[i].gold);
    if (have) cJSON_AddNumberToObject(row, "pred", pred);
    else cJSON_AddNullToObject(row, "pred");
    cJSON_AddBoolToObject(row, "correct", ok);
    cJSON_AddStringToObject(row, "finish_reason", a.finish_reason ? a.finish_reason : "");
    cJSON_AddNumberToObject(row, "completion_tokens", (double)a.completion_tokens);
    if (!r) cJSON_AddStringToObject(row, "error", err);
    g->rows[i] = row;
    g->correct[i] = ok;
    g->no_answer[i] = r && !have;
    g->truncated[i] = a.finish_reason && !strcmp(a.finish_reason, "length");
    g->errors[i] = !r;
    cJSON_Delete(r);
    ds_progress_add(g->pr, 1);
}

/* §6.1 mode check on the first item's rendering. */
static int mode_check(gsm_run *g) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", g->p->model);
    cJSON_AddItemToObject(b, "messages", item_messages(g, g->items[0].q));
    cJSON_AddItemToObject(b, "chat_template_kwargs", kwargs(g->thinking));
    cJSON_AddTrueToObject(b, "return_text");
    char *text = NULL, err[512];
    if (ds_probe_tokenize_raw(g->p, b, NULL, &text, err, sizeof err) < 0) {
        fprintf(stderr, "dsflash gsm8k: mode check: %s\n", err);
        return 1;
    }
    const char *want = g->thinking ? "<｜Assistant｜><think>" : "<｜Assistant｜></think>";
    size_t lt = strlen(text), lw = strlen(want);
    int bad = lt < lw || strcmp(text + lt - lw, want);
    if (bad)
        fprintf(stderr, "dsflash gsm8k: mode check: the rendered %s prompt must end with %s; it ends with '%s'\n",
                g->thinking ? "thinking" : "chat", want, lt > 40 ? text + lt - 40 : text);
    free(text);
    return bad;
}

static int finish(ds_probe *p, ds_flagset *fs, gsm_run *g, int64_t n) {
    int64_t c = 0, na = 0, tr = 0, er = 0;
    size_t cap = 1, len = 0;
    char *jl = ds_xcalloc(1, cap);
    for (int64_t i = 0; i < n; i++) {
        c += g->correct[i], na += g->no_answer[i], tr += g->truncated[i], er += g->errors[i];
        char *s = cJSON_PrintUnformatted(g->rows[i]);
        size_t sl = strlen(s);
        jl = ds_xrealloc(jl, cap = len + sl + 2);
        memcpy(jl + len, s, sl);
        len += sl;
        jl[len++] = '\n', jl[len] = 0;
        free(s);
        cJSON_Delete(g->rows[i]);
    }
    ds_gate_verdict v = ds_gsm8k_verdict(c, n);
    int changed = ds_probe_recheck(p);
    cJSON *out = ds_probe_envelope(p, "v41-gsm8k/1");
    cJSON_AddStringToObject(out, "mode", g->thinking ? "thinking" : "chat");
    cJSON_AddNumberToObject(out, "shots", (double)g->n_shots);
    cJSON_AddNumberToObject(out, "correct", (double)c);
    cJSON_AddNumberToObject(out, "total", (double)n);
    cJSON_AddNumberToObject(out, "accuracy", n ? (double)c / (double)n : 0);
    cJSON_AddNumberToObject(out, "no_answer", (double)na);
    cJSON_AddNumberToObject(out, "truncated", (double)tr);
    cJSON_AddNumberToObject(out, "errors", (double)er);
    cJSON_AddStringToObject(out, "verdict", changed ? "invalid" : ds_gate_verdict_name(v));
    printf("gsm8k: %lld/%lld correct (%.1f%%), no_answer %lld, truncated %lld, errors %lld: %s\n", (long long)c,
           (long long)n, n ? 100.0 * (double)c / (double)n : 0.0, (long long)na, (long long)tr, (long long)er,
           changed ? "INVALID (server restarted)" : ds_gate_verdict_name(v));
    int wrc = ds_probe_write_text(ds_flag_str(fs, "--items-out"), jl);
    if (!wrc) wrc = ds_probe_write_json(ds_flag_str(fs, "--json-out"), out);
    cJSON_Delete(out);
    free(jl);
    return wrc ? wrc : (changed || v != DS_GATE_PASS) ? 1 : 0;
}

static void free_items(gitem *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(v[i].q), free(v[i].a);
    free(v);
}

int cmd_gsm8k(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash gsm8k", .usage = USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    if (!ds_flag_str(&fs, "--data") || !ds_flag_str(&fs, "--shots-file")) {
        fprintf(stderr, "dsflash gsm8k: --data and --shots-file are required\n%s\n", USAGE);
        return 2;
    }
    gitem *items = NULL, *shots = NULL;
    int64_t n = 0, ns = 0;
    int rc = read_jsonl(ds_flag_str(&fs, "--data"), ds_flag_int(&fs, "--limit"), &items, &n);
    if (!rc) rc = read_jsonl(ds_flag_str(&fs, "--shots-file"), ds_flag_int(&fs, "--shots"), &shots, &ns);
    if (!rc && (!n || ns < ds_flag_int(&fs, "--shots"))) {
        fprintf(stderr, "dsflash gsm8k: %s\n", !n ? "--data holds no record" : "--shots-file holds fewer records than --shots");
        rc = 5;
    }
    ds_probe p;
    if (!rc) rc = ds_probe_cli_open(&p, &fs, "gsm8k", argc, argv);
    else memset(&p, 0, sizeof p);
    gsm_run g = {.p = &p, .items = items, .shots = shots, .n_shots = ns, .max_tokens = (int)ds_flag_int(&fs, "--max-tokens"),
                 .thinking = !strcmp(ds_flag_str(&fs, "--mode"), "thinking")};
    if (!rc) rc = mode_check(&g);
    if (!rc) {
        g.rows = ds_xcalloc((size_t)n, sizeof *g.rows);
        int *flags = ds_xcalloc((size_t)n * 4, sizeof(int));
        g.correct = flags, g.no_answer = flags + n, g.truncated = flags + 2 * n, g.errors = flags + 3 * n;
        ds_progress pr;
        ds_progress_init_count(&pr, "gsm8k", (uint64_t)n, "item", false);
        g.pr = &pr;
        ds_probe_parallel(n, (int)ds_flag_int(&fs, "--conc"), run_item, &g);
        ds_progress_finish(&pr);
        ds_progress_destroy(&pr);
        rc = finish(&p, &fs, &g, n);
        free(flags);
        free(g.rows);
    }
    ds_probe_close(&p);
    free_items(items, n);
    free_items(shots, ns);
    return rc;
}
