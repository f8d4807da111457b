/* `dsflash multibatch-gate` (TOOLS.md §6.3): does batching change answers?
 *
 *   A  an 8-turn growing conversation: turn 1 carries three random 10-digit numbers, turns 2-7
 *      recall one each, turn 8 recalls all three; pass = 100% (A_needle: single recalls,
 *      A_recall: the final turn).
 *   B  16 arithmetic items, greedy, at concurrency 1 and at concurrency 8; pass = 0 items whose
 *      answers differ (B_itemwise).
 *   C  one long request (--long-tokens, 128 K by default) and, 2 s after it starts, six short
 *      requests at once; pass = the short answers equal their serial baseline (C_short_vs_long
 *      mismatches 0) and the long answer is coherent (distinct token bigrams / all >= 0.5).
 * Why: continuous batching, the admission gate and chunked prefill must not change any answer;
 * the spec runs this on the production setting with the admission gate on and off — the server's
 * setting is recorded from /server_info, the operator runs the tool once per server.  Output:
 * summary JSON {A_needle, A_recall, B_itemwise, C_short_vs_long, ...}.  Exit: 0 all parts pass;
 * 1 a part fails or the server restarted; 2 usage; 3 I/O or unreachable. */
#include "base/flags.h"
#include "cli/commands.h"
#include "cli/probe_cli.h"
#include "tools/probe_text.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ds_flag k_flags[] = {
    DS_PROBE_CLIENT_FLAGS("summary.json"),
    {.name = "--parts", .type = DS_FLAG_STRING, .def = "ABC", .help = "which parts to run"},
    {.name = "--seed", .type = DS_FLAG_INT, .def = "1", .lo = 0, .hi = INT64_MAX},
    {.name = "--max-tokens", .type = DS_FLAG_INT, .def = "64", .lo = 1, .hi = 1 << 20, .help = "per short answer"},
    {.name = "--long-tokens", .type = DS_FLAG_INT, .def = "128000", .lo = 16, .hi = 1 << 30, .help = "part C prompt"},
    {.name = "--long-gen-tokens", .type = DS_FLAG_INT, .def = "128", .lo = 2, .hi = 1 << 20},
};

#define USAGE "usage: dsflash multibatch-gate [--parts ABC] [--seed N] [--long-tokens 128000] [--base-url URL] ..."

/* One chat request; returns the content (malloc'd) or NULL with err. */
static char *chat(ds_probe *p, const cJSON *msgs, int max_tokens, char *err, size_t n) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", p->model);
    cJSON_AddItemToObject(b, "messages", cJSON_Duplicate(msgs, 1));
    cJSON_AddNumberToObject(b, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON *r = ds_probe_post(p, "/v1/chat/completions", b, err, n);
    cJSON_Delete(b);
    ds_chat_answer a;
    ds_probe_chat_answer(r, &a);
    char *s = r ? ds_xstrdup(a.content ? a.content : "") : NULL;
    cJSON_Delete(r);
    return s;
}

static void add_msg(cJSON *m, const char *role, const char *content) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "role", role);
    cJSON_AddStringToObject(x, "content", content);
    cJSON_AddItemToArray(m, x);
}

/* digits of s only: "1,234 567" -> "1234567" (so separators do not hide a recalled number) */
static void digits_only(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (; *s && k + 1 < n; s++)
        if (*s >= '0' && *s <= '9') out[k++] = *s;
    out[k] = 0;
}

static int part_a(ds_probe *p, ds_probe_rng *rng, int max_tokens, cJSON *sum) {
    char num[3][16], buf[512], err[512];
    for (int k = 0; k < 3; k++)
        snprintf(num[k], sizeof num[k], "%010llu", (unsigned long long)(ds_probe_rng_next(rng) % 9000000000ull + 1000000000ull));
    static const char *ord[3] = {"first", "second", "third"};
    cJSON *m = cJSON_CreateArray();
    int hits = 0, final_hits = 0, errors = 0;
    for (int turn = 1; turn <= 8; turn++) {
        if (turn == 1)
            snprintf(buf, sizeof buf, "Remember these three numbers exactly: the first is %s, the second is %s, the third is "
                     "%s. Reply with OK.", num[0], num[1], num[2]);
        else if (turn < 8)
            snprintf(buf, sizeof buf, "What was the %s number I gave you? Answer with the number only.", ord[(turn - 2) % 3]);
        else snprintf(buf, sizeof buf, "List all three numbers I gave you, in order, separated by spaces.");
        add_msg(m, "user", buf);
        char *ans = chat(p, m, max_tokens, err, sizeof err);
        if (!ans) {
            fprintf(stderr, "dsflash multibatch-gate: part A turn %d: %s\n", turn, err);
            errors++;
            break;
        }
        char dig[4096];
        digits_only(ans, dig, sizeof dig);
        if (turn > 1 && turn < 8) hits += strstr(dig, num[(turn - 2) % 3]) != NULL;
        if (turn == 8)
            for (int k = 0; k < 3; k++) final_hits += strstr(dig, num[k]) != NULL;
        add_msg(m, "assistant", ans);
        free(ans);
    }
    cJSON_Delete(m);
    double needle = hits / 6.0, recall = final_hits / 3.0;
    cJSON_AddNumberToObject(sum, "A_needle", needle);
    cJSON_AddNumberToObject(sum, "A_recall", recall);
    bool ok = !errors && hits == 6 && final_hits == 3;
    printf("part A: single recalls %d/6, final recall %d/3%s: %s\n", hits, final_hits, errors ? ", ERROR" : "",
           ok ? "pass" : "FAIL");
    return ok ? 0 : 1;
}

typedef struct batch { ds_probe *p; char **q, **ans; int max_tokens; } batch;
static void batch_one(void *ctx, int64_t i) {
    batch *b = ctx;
    cJSON *m = cJSON_CreateArray();
    add_msg(m, "user", b->q[i]);
    char err[512];
    b->ans[i] = chat(b->p, m, b->max_tokens, err, sizeof err);
    if (!b->ans[i]) fprintf(stderr, "dsflash multibatch-gate: item %lld: %s\n", (long long)i, err);
    cJSON_Delete(m);
}

static char **arith_items(ds_probe_rng *rng, int n) {
    char **q = ds_xcalloc((size_t)n, sizeof *q);
    for (int i = 0; i < n; i++) {
        char buf[160];
        unsigned a = (unsigned)(ds_probe_rng_next(rng) % 900 + 100), b = (unsigned)(ds_probe_rng_next(rng) % 90 + 10);
        snprintf(buf, sizeof buf, "What is %u %s %u? Answer with the number only.", a, i % 2 ? "times" : "plus", b);
        q[i] = ds_xstrdup(buf);
    }
    return q;
}

/* mismatching items between two answer sets (a missing answer counts as a mismatch) */
static int mismatches(char **x, char **y, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += !x[i] || !y[i] || strcmp(x[i], y[i]);
    return k;
}
static void free_strs(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int part_b(ds_probe *p, ds_probe_rng *rng, int max_tokens, cJSON *sum) {
    enum { N = 16 };
    char **q = arith_items(rng, N), **a1 = ds_xcalloc(N, sizeof *a1), **a8 = ds_xcalloc(N, sizeof *a8);
    batch b1 = {p, q, a1, max_tokens}, b8 = {p, q, a8, max_tokens};
    ds_probe_parallel(N, 1, batch_one, &b1);
    ds_probe_parallel(N, 8, batch_one, &b8);
    int mm = mismatches(a1, a8, N);
    cJSON_AddNumberToObject(sum, "B_itemwise", mm);
    printf("part B: %d of %d items differ between concurrency 1 and 8: %s\n", mm, N, mm ? "FAIL" : "pass");
    free_strs(q, N), free_strs(a1, N), free_strs(a8, N);
    return mm ? 1 : 0;
}

typedef struct long_req { ds_probe *p; cJSON *msgs; int gen; char *text; char err[512]; } long_req;
static void *long_main(void *arg) {
    long_req *l = arg;
    l->text = chat(l->p, l->msgs, l->gen, l->err, sizeof l->err);
    return NULL;
}

static int part_c(ds_probe *p, ds_probe_rng *rng, int max_tokens, int64_t long_tokens, int gen, cJSON *sum) {
    enum { N = 6 };
    char **q = arith_items(rng, N), **base = ds_xcalloc(N, sizeof *base), **over = ds_xcalloc(N, sizeof *over);
    batch bs = {p, q, base, max_tokens}, bo = {p, q, over, max_tokens};
    ds_probe_parallel(N, 1, batch_one, &bs);
    char nonce[7];
    ds_probe_nonce(rng, nonce);
    ds_filler f;
    ds_filler_build(&f, nonce, ds_filler_nchar(long_tokens));
    size_t len = f.bytes + 64;
    char *prompt = ds_xmalloc(len);
    snprintf(prompt, len, "%s\n\nContinue the text above.", f.text);
    ds_filler_free(&f);
    long_req l = {.p = p, .msgs = cJSON_CreateArray(), .gen = gen};
    add_msg(l.msgs, "user", prompt);
    free(prompt);
    pthread_t th;
    bool started = !pthread_create(&th, NULL, long_main, &l);
    if (started) sleep(2);
    ds_probe_parallel(N, N, batch_one, &bo);
    if (started) pthread_join(th, NULL);
    int mm = mismatches(base, over, N);
    double u2 = 0;
    if (l.text) {
        int32_t *ids = NULL;
        char err[512];
        int64_t n = ds_probe_tokenize_prompt(p, l.text, &ids, err, sizeof err);
        u2 = n >= 0 ? ds_uniq2_ids(ids, (size_t)n) : 0;
        free(ids);
    } else fprintf(stderr, "dsflash multibatch-gate: part C long request: %s\n", l.err);
    cJSON_AddNumberToObject(sum, "C_short_vs_long", mm);
    cJSON_AddNumberToObject(sum, "C_uniq2", u2);
    cJSON_AddBoolToObject(sum, "C_long_completed", l.text != NULL);
    bool ok = started && !mm && l.text && u2 >= 0.5;
    printf("part C: %d of %d short answers differ from their serial baseline; long answer uniq2 %.3f%s: %s\n", mm, N,
           u2, l.text ? "" : " (long request FAILED)", ok ? "pass" : "FAIL");
    free(l.text);
    cJSON_Delete(l.msgs);
    free_strs(q, N), free_strs(base, N), free_strs(over, N);
    return ok ? 0 : 1;
}

int cmd_multibatch_gate(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash multibatch-gate", .usage = USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    const char *parts = ds_flag_str(&fs, "--parts");
    if (strspn(parts, "ABC") != strlen(parts)) {
        fprintf(stderr, "dsflash multibatch-gate: --parts: expected letters from ABC, got '%s'\n", parts);
        return 2;
    }
    ds_probe p;
    int rc = ds_probe_cli_open(&p, &fs, "multibatch-gate", argc, argv);
    if (rc) {
        ds_probe_close(&p);
        return rc;
    }
    const cJSON *gate = cJSON_GetObjectItemCaseSensitive(p.server_info, "admission_gate");
    const cJSON *seqs = cJSON_GetObjectItemCaseSensitive(p.server_info, "max_num_seqs");
    printf("multibatch-gate: server admission_gate %s, max_num_seqs %g\n", cJSON_IsTrue(gate) ? "on" : cJSON_IsFalse(gate) ? "off" : "?",
           cJSON_IsNumber(seqs) ? seqs->valuedouble : -1.0);
    ds_probe_rng rng;
    ds_probe_rng_seed(&rng, (uint64_t)ds_flag_int(&fs, "--seed"));
    int mt = (int)ds_flag_int(&fs, "--max-tokens"), failed = 0;
    cJSON *out = ds_probe_envelope(&p, "v41-multibatch-gate/1");
    if (cJSON_IsBool(gate)) cJSON_AddBoolToObject(out, "admission_gate", cJSON_IsTrue(gate));
    if (strchr(parts, 'A')) failed += part_a(&p, &rng, mt, out);
    if (strchr(parts, 'B')) failed += part_b(&p, &rng, mt, out);
    if (strchr(parts, 'C'))
        failed += part_c(&p, &rng, mt, ds_flag_int(&fs, "--long-tokens"), (int)ds_flag_int(&fs, "--long-gen-tokens"), out);
    int changed = ds_probe_recheck(&p);
    cJSON_AddBoolToObject(out, "server_restarted", changed);
    cJSON_AddBoolToObject(out, "pass", !failed && !changed);
    printf("multibatch-gate: %s\n", !failed && !changed ? "PASS" : "FAIL");
    int wrc = ds_probe_write_json(ds_flag_str(&fs, "--json-out"), out);
    cJSON_Delete(out);
    ds_probe_close(&p);
    return wrc ? wrc : (failed || changed) ? 1 : 0;
}
