/* `dsflash agent-gate` (TOOLS.md §6.2): does the model still make the next tool call after a long
 * tool result?
 *
 * Trajectory: tools read(path) and bash(command); the user asks to read README.md, then DESIGN.md,
 * then summarise; the assistant has called read README.md and the tool result is a long filler
 * document of the arm's size (fresh nonce per sample).  PASS is a valid read call in the next
 * turn; `finish_reason` "length" is TRUNCATED (neither pass nor fail); anything else is a failure
 * recorded with the first matching signature (tools/gate_logic.h).  Arms: `canary` (128,000
 * characters), `N` or `Nk` tokens (k = 1000), `Nc` / `Nkc` characters.  Thinking mode matters: at
 * 97 K context chat mode scored 0/5, so `--reasoning-effort` defaults to high.  Exit: 0 every arm
 * has passes and no failure or error (an arm of only truncated samples measured nothing); 1
 * otherwise or the server restarted; 2 usage; 3 unreachable/I/O. */
#include "base/flags.h"
#include "cli/commands.h"
#include "cli/probe_cli.h"
#include "tools/gate_logic.h"
#include "tools/probe_text.h"
#include "tools/progress.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_flag k_flags[] = {
    DS_PROBE_CLIENT_FLAGS("agent-gate.json"),
    {.name = "--arms", .type = DS_FLAG_STRING, .def = "canary,8k,32k,128k,256k",
     .help = "canary (128,000 characters), N/Nk tokens, Nc/Nkc characters"},
    {.name = "--reps", .type = DS_FLAG_INT, .def = "10", .lo = 1, .hi = 100000},
    {.name = "--reasoning-effort", .type = DS_FLAG_STRING, .def = "high"},
    {.name = "--max-tokens", .type = DS_FLAG_INT, .def = "2048", .lo = 1, .hi = 1 << 20},
    {.name = "--seed", .type = DS_FLAG_INT, .def = "1", .lo = 0, .hi = INT64_MAX},
};

#define USAGE "usage: dsflash agent-gate [--arms canary,8k,32k,128k,256k] [--reps 10] [--reasoning-effort high] " \
              "[--base-url URL] ..."

typedef struct arm { char name[32]; int64_t chars, tokens; } arm;

static int parse_arm(const char *s, size_t len, arm *a) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%.*s", (int)(len < 31 ? len : 31), s);
    if (!strcmp(a->name, "canary")) return a->chars = 128000, 0;
    char *end;
    long long v = strtoll(a->name, &end, 10);
    int64_t mul = 1;
    if (*end == 'k') mul = 1000, end++;
    bool chars = *end == 'c';
    if (chars) end++;
    if (end == a->name || *end || v <= 0) return -1;
    if (chars) a->chars = v * mul;
    else a->tokens = v * mul;
    return 0;
}

static cJSON *tools_json(void) {
    return cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"read\",\"description\":\"Read a file\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"bash\",\"description\":\"Run a shell command\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\"}},\"required\":[\"command\"]}}}]");
}

static cJSON *messages(const char *doc) {
    cJSON *m = cJSON_CreateArray();
    ds_probe_add_message(m, "user", "Read README.md, then read DESIGN.md, then summarise both.");
    ds_probe_add_readme_read(m, doc);
    return m;
}

/* Classify one answer (tool_calls' function name/arguments; arguments given as an object are
 * serialised, as some servers send them so). */
static ds_ag_outcome classify_answer(const cJSON *resp, bool *design, ds_chat_answer *a) {
    ds_probe_chat_answer(resp, a);
    int n = cJSON_GetArraySize(a->tool_calls);
    ds_ag_call *calls = ds_xcalloc((size_t)(n ? n : 1), sizeof *calls);
    char **owned = ds_xcalloc((size_t)(n ? n : 1), sizeof *owned);
    for (int i = 0; i < n; i++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(a->tool_calls, i), "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name"), *ar = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        calls[i].name = cJSON_IsString(nm) ? nm->valuestring : NULL;
        if (cJSON_IsString(ar)) calls[i].arguments = ar->valuestring;
        else if (ar) calls[i].arguments = owned[i] = cJSON_PrintUnformatted(ar);
    }
    ds_ag_turn t = {a->content, a->reasoning, a->finish_reason, calls, n};
    ds_ag_outcome o = ds_ag_classify(&t, design);
    for (int i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(calls);
    return o;
}

typedef struct arm_stats { int64_t count[DS_AG_N], errors, design_md; } arm_stats;

static void sample(ds_probe *p, const cJSON *tools, const char *effort, int max_tokens, const char *doc,
                   const char *nonce, arm_stats *st, cJSON *rows) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddItemToObject(b, "messages", messages(doc));
    cJSON_AddItemToObject(b, "tools", cJSON_Duplicate(tools, 1));
    cJSON_AddStringToObject(b, "reasoning_effort", effort);
    cJSON_AddNumberToObject(b, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    char err[512] = "";
    double t0 = ds_now();
    cJSON *r = ds_probe_post(p, "/v1/chat/completions", b, err, sizeof err);
    cJSON_Delete(b);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "nonce", nonce);
    cJSON_AddNumberToObject(s, "latency_s", ds_now() - t0);
    if (!r) {
        st->errors++;
        cJSON_AddStringToObject(s, "outcome", "error");
        cJSON_AddStringToObject(s, "error", err);
    } else {
        bool design = false;
        ds_chat_answer a;
        ds_ag_outcome o = classify_answer(r, &design, &a);
        st->count[o]++;
        st->design_md += design;
        cJSON_AddStringToObject(s, "outcome", ds_ag_outcome_name(o));
        cJSON_AddStringToObject(s, "finish_reason", a.finish_reason ? a.finish_reason : "");
        cJSON_AddBoolToObject(s, "design_md", design);
        char ex[161];
        snprintf(ex, sizeof ex, "%s", a.content ? a.content : a.reasoning ? a.reasoning : "");
        size_t l = strlen(ex);   /* a cut excerpt drops its trailing non-ASCII bytes: never half a character */
        if (l == sizeof ex - 1)
            while (l && ((unsigned char)ex[l - 1] & 0x80)) ex[--l] = 0;
        cJSON_AddStringToObject(s, "excerpt", ex);
    }
    cJSON_AddItemToArray(rows, s);
    cJSON_Delete(r);
}

/* One arm; returns 1 when it has a failure or an error. */
static int run_arm(ds_probe *p, const arm *a, int reps, const char *effort, int max_tokens, ds_probe_rng *rng,
                   ds_progress *pr, cJSON *arms) {
    cJSON *tools = tools_json(), *ja = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    cJSON_AddItemToArray(arms, ja);
    cJSON_AddStringToObject(ja, "arm", a->name);
    int64_t nchar = a->chars ? a->chars : ds_filler_nchar(a->tokens), actual = -1;
    arm_stats st = {{0}, 0, 0};
    for (int i = 0; i < reps; i++) {
        char nonce[7];
        ds_probe_nonce(rng, nonce);
        ds_filler f;
        ds_filler_build(&f, nonce, nchar);
        if (i == 0) {
            cJSON *m = messages(f.text);
            char err[512];
            actual = ds_probe_tokenize_chat(p, m, tools, effort, NULL, err, sizeof err);
            cJSON_Delete(m);
        }
        sample(p, tools, effort, max_tokens, f.text, nonce, &st, rows);
        ds_filler_free(&f);
        ds_progress_add(pr, 1);
    }
    int64_t pass = st.count[DS_AG_PASS], trunc = st.count[DS_AG_TRUNCATED];
    int64_t fail = reps - pass - trunc - st.errors;
    double lo, hi;
    ds_wilson95(pass, pass + fail, &lo, &hi);
    cJSON_AddNumberToObject(ja, "prompt_tokens", (double)actual);
    cJSON_AddNumberToObject(ja, "document_chars", (double)nchar);
    cJSON_AddNumberToObject(ja, "pass", (double)pass);
    cJSON_AddNumberToObject(ja, "fail", (double)fail);
    cJSON_AddNumberToObject(ja, "truncated", (double)trunc);
    cJSON_AddNumberToObject(ja, "errors", (double)st.errors);
    cJSON_AddNumberToObject(ja, "design_md", (double)st.design_md);
    cJSON_AddNumberToObject(ja, "wilson_lo", lo);
    cJSON_AddNumberToObject(ja, "wilson_hi", hi);
    cJSON_AddStringToObject(ja, "reasoning_effort", effort);
    cJSON *hist = cJSON_AddObjectToObject(ja, "signatures");
    char hs[256] = "";
    for (int o = DS_AG_EMPTY_OUTPUT; o < DS_AG_N; o++) {
        cJSON_AddNumberToObject(hist, ds_ag_outcome_name((ds_ag_outcome)o), (double)st.count[o]);
        if (st.count[o])
            snprintf(hs + strlen(hs), sizeof hs - strlen(hs), " %s=%lld", ds_ag_outcome_name((ds_ag_outcome)o),
                     (long long)st.count[o]);
    }
    cJSON_AddItemToObject(ja, "samples", rows);
    printf("arm %-8s (%lld tokens): pass %lld fail %lld truncated %lld errors %lld  Wilson95 [%.3f, %.3f]  "
           "DESIGN.md %lld%s%s\n", a->name, (long long)actual, (long long)pass, (long long)fail, (long long)trunc,
           (long long)st.errors, lo, hi, (long long)st.design_md, hs[0] ? "  signatures:" : "", hs);
    fflush(stdout);
    cJSON_Delete(tools);
    /* an arm whose samples were all truncated measured nothing: it cannot pass */
    return fail || st.errors || pass == 0 ? 1 : 0;
}

int cmd_agent_gate(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash agent-gate", .usage = USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    arm arms[32];
    int na = 0;
    for (const char *s = ds_flag_str(&fs, "--arms"); *s;) {
        size_t len = strcspn(s, ",");
        if (na == 32 || parse_arm(s, len, &arms[na++])) {
            fprintf(stderr, "dsflash agent-gate: --arms: bad arm '%.*s' (canary, N, Nk tokens, Nc, Nkc characters; "
                            "at most 32)\n", (int)len, s);
            return 2;
        }
        s += len + (s[len] == ',');
    }
    int reps = (int)ds_flag_int(&fs, "--reps");
    ds_probe p;
    int rc = ds_probe_cli_open(&p, &fs, "agent-gate", argc, argv);
    if (rc) {
        ds_probe_close(&p);
        return rc;
    }
    ds_probe_rng rng;
    ds_probe_rng_seed(&rng, (uint64_t)ds_flag_int(&fs, "--seed"));
    cJSON *out = ds_probe_envelope(&p, "v41-agent-gate/1");
    cJSON *ja = cJSON_AddArrayToObject(out, "arms");
    ds_progress pr;
    ds_progress_init_count(&pr, "agent-gate", (uint64_t)(reps * na), "sample", false);
    int failed = 0;
    for (int i = 0; i < na; i++)
        failed += run_arm(&p, &arms[i], reps, ds_flag_str(&fs, "--reasoning-effort"),
                          (int)ds_flag_int(&fs, "--max-tokens"), &rng, &pr, ja);
    ds_progress_finish(&pr);
    ds_progress_destroy(&pr);
    int changed = ds_probe_recheck(&p);
    cJSON_AddBoolToObject(out, "server_restarted", changed);
    cJSON_AddBoolToObject(out, "pass", !failed && !changed);
    printf("agent-gate: %s (%d of %d arms with failures or errors)\n", !failed && !changed ? "PASS" : "FAIL", failed, na);
    int wrc = ds_probe_write_json(ds_flag_str(&fs, "--json-out"), out);
    cJSON_Delete(out);
    ds_probe_close(&p);
    return wrc ? wrc : (failed || changed) ? 1 : 0;
}
