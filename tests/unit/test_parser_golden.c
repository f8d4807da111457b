/* Output-parser golden vectors (SERVING.md §11.6, tests/data/dsml_parse_golden.jsonl): each vector is
 * parsed in one shot and must match the expected reasoning, content and tool calls exactly; then it
 * is fed through the streaming parser in 40 random chunkings (including byte-by-byte) and the
 * accumulated deltas and final result must be identical to the one-shot result. */
#define _GNU_SOURCE
#include "check.h"
#include "tokenizer/output_parser.h"
#include "base/fsutil.h"
#include <cJSON.h>

#define GOLDEN "tests/data/dsml_parse_golden.jsonl"   /* a copy of the specification's golden vectors */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

static int results_equal(const ds_parse_result *a, const ds_parse_result *b, char *why, size_t wl) {
    if (strcmp(a->reasoning, b->reasoning)) { snprintf(why, wl, "reasoning '%s' vs '%s'", a->reasoning, b->reasoning); return 0; }
    if (strcmp(a->content, b->content)) { snprintf(why, wl, "content '%s' vs '%s'", a->content, b->content); return 0; }
    if (a->n_calls != b->n_calls) { snprintf(why, wl, "%d calls vs %d", a->n_calls, b->n_calls); return 0; }
    for (int i = 0; i < a->n_calls; i++) {
        if (strcmp(a->calls[i].name, b->calls[i].name) || strcmp(a->calls[i].arguments, b->calls[i].arguments) ||
            strcmp(a->calls[i].id, b->calls[i].id) || a->calls[i].index != b->calls[i].index) {
            snprintf(why, wl, "call %d differs: %s %s / %s %s", i, a->calls[i].name, a->calls[i].arguments, b->calls[i].name, b->calls[i].arguments);
            return 0;
        }
    }
    if (a->dropped_partial_calls != b->dropped_partial_calls || a->parse_failures != b->parse_failures) {
        snprintf(why, wl, "counters differ");
        return 0;
    }
    return 1;
}

/* Feed in random chunks; also rebuild the result from the deltas alone. */
static void parse_chunked(const char *text, size_t n, const ds_parser_options *o, bool truncated, int max_chunk,
                          ds_parse_result *out, ds_parse_result *from_deltas) {
    ds_output_parser *p = ds_output_parser_new(o);
    size_t off = 0;
    ds_parse_delta d;
    char *r = ds_xstrdup(""), *c = ds_xstrdup("");
    size_t rl = 0, cl = 0;
    ds_tool_call *calls = NULL;
    int nc = 0;
    for (int last = 0; !last;) {
        size_t k = off < n ? 1 + rnd() % (size_t)max_chunk : 0;
        if (off + k > n) k = n - off;
        if (off >= n) { ds_output_parser_finish(p, truncated, &d); last = 1; }
        else { ds_output_parser_feed(p, text + off, k, &d); off += k; }
        r = ds_xrealloc(r, rl + d.reasoning_len + 1); memcpy(r + rl, d.reasoning, d.reasoning_len + 1); rl += d.reasoning_len;
        c = ds_xrealloc(c, cl + d.content_len + 1); memcpy(c + cl, d.content, d.content_len + 1); cl += d.content_len;
        for (int i = 0; i < d.n_calls; i++) {
            calls = ds_xrealloc(calls, (size_t)(nc + 1) * sizeof *calls);
            calls[nc++] = (ds_tool_call){ds_xstrdup(d.calls[i].id), ds_xstrdup(d.calls[i].name), ds_xstrdup(d.calls[i].arguments), d.calls[i].index};
        }
        ds_parse_delta_free(&d);
    }
    const ds_parse_result *res = ds_output_parser_result(p);
    *out = *res;
    out->reasoning = ds_xstrdup(res->reasoning);
    out->content = ds_xstrdup(res->content);
    out->calls = ds_xcalloc((size_t)res->n_calls + 1, sizeof *out->calls);
    for (int i = 0; i < res->n_calls; i++)
        out->calls[i] = (ds_tool_call){ds_xstrdup(res->calls[i].id), ds_xstrdup(res->calls[i].name), ds_xstrdup(res->calls[i].arguments), res->calls[i].index};
    *from_deltas = *out;
    from_deltas->reasoning = r; from_deltas->reasoning_len = rl;
    from_deltas->content = c; from_deltas->content_len = cl;
    from_deltas->calls = calls; from_deltas->n_calls = nc;
    ds_output_parser_free(p);
}

static int no_markup(const ds_parse_result *r) {
    const char *bad[] = {"｜DSML｜", "<think>", "</think>"};
    for (size_t i = 0; i < 3; i++)
        if (strstr(r->content, bad[i]) || strstr(r->reasoning, bad[i])) return 0;
    return 1;
}

TEST(dsml_parse_golden_vectors) {
    char *data;
    size_t len;
    ds_error err = {0};
    CHECK(ds_read_file(GOLDEN, &data, &len, &err) == 0, "cannot read %s: %s", GOLDEN, err.msg);
    if (!data) return;
    int n = 0, ok = 0;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *v = cJSON_Parse(line);
        CHECK(v != NULL, "bad JSON line");
        if (!v) continue;
        const char *name = cJSON_GetObjectItem(v, "name")->valuestring;
        const char *text = cJSON_GetObjectItem(v, "completion_text")->valuestring;
        bool thinking = cJSON_IsTrue(cJSON_GetObjectItem(v, "thinking"));
        bool truncated = !strcmp(cJSON_GetObjectItem(v, "finish")->valuestring, "length");
        const cJSON *exp = cJSON_GetObjectItem(v, "expected");
        ds_parser_options o = {.thinking = thinking, .id_seed = 1234};
        ds_parse_result r;
        ds_output_parse(text, strlen(text), &o, truncated, &r);
        int good = 1;
        good &= !strcmp(r.reasoning, cJSON_GetObjectItem(exp, "reasoning_content")->valuestring);
        good &= !strcmp(r.content, cJSON_GetObjectItem(exp, "content")->valuestring);
        const cJSON *calls = cJSON_GetObjectItem(exp, "tool_calls");
        good &= r.n_calls == cJSON_GetArraySize(calls);
        for (int i = 0; good && i < r.n_calls; i++) {
            const cJSON *c = cJSON_GetArrayItem(calls, i);
            good &= !strcmp(r.calls[i].name, cJSON_GetObjectItem(c, "name")->valuestring);
            good &= !strcmp(r.calls[i].arguments, cJSON_GetObjectItem(c, "arguments")->valuestring);
            good &= !strncmp(r.calls[i].id, "call_", 5) && strlen(r.calls[i].id) == 29;
        }
        CHECK(good, "%s: got reasoning='%s' content='%s' calls=%d%s%s", name, r.reasoning, r.content, r.n_calls,
              r.n_calls ? " first args=" : "", r.n_calls ? r.calls[0].arguments : "");
        CHECK(no_markup(&r), "%s: markup leaked", name);
        for (int k = 0; k < 40; k++) {
            ds_parse_result s, fd;
            char why[512];
            parse_chunked(text, strlen(text), &o, truncated, k == 0 ? 1 : 1 + k % 9, &s, &fd);
            CHECK(results_equal(&r, &s, why, sizeof why), "%s: chunking %d: %s", name, k, why);
            CHECK(results_equal(&r, &fd, why, sizeof why), "%s: deltas of chunking %d: %s", name, k, why);
            ds_parse_result_free(&s);
            ds_parse_result_free(&fd);
        }
        ok += good;
        n++;
        ds_parse_result_free(&r);
        cJSON_Delete(v);
    }
    CHECK(n == 37, "expected 37 golden vectors, read %d", n);
    printf("  %d/%d golden parse vectors match (each also in 40 chunkings)\n", ok, n);
    free(data);
}

TEST(stop_strings_cut_text_and_hold_prefixes) {
    const char *stops[] = {"STOP", "\n\nUser:"};
    ds_parser_options o = {.thinking = false, .stop = stops, .n_stop = 2, .id_seed = 7};
    const char *text = "Hello there. ST no. And now STOP this is gone";
    ds_parse_result r;
    ds_output_parse(text, strlen(text), &o, false, &r);
    CHECK(!strcmp(r.content, "Hello there. ST no. And now "), "content '%s'", r.content);
    CHECK(r.stopped, "stop not reported");
    for (int k = 0; k < 30; k++) {
        ds_parse_result s, fd;
        char why[256];
        parse_chunked(text, strlen(text), &o, false, 1 + k % 5, &s, &fd);
        CHECK(results_equal(&r, &s, why, sizeof why), "chunking %d: %s", k, why);
        CHECK(results_equal(&r, &fd, why, sizeof why), "deltas %d: %s", k, why);
        CHECK(s.stopped, "stop lost in chunking %d", k);
        ds_parse_result_free(&s);
        ds_parse_result_free(&fd);
    }
    ds_parse_result_free(&r);
}

TEST(streaming_never_emits_partial_markers) {
    /* byte by byte: no delta may contain the start of a marker that later completes */
    const char *text = "Hmm.</think>Answer: 42\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
                       "<｜DSML｜ parameter name=\"x\" string=\"false\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
    ds_parser_options o = {.thinking = true, .id_seed = 3};
    ds_output_parser *p = ds_output_parser_new(&o);
    ds_parse_delta d;
    int calls_seen = 0;
    for (size_t i = 0; text[i]; i++) {
        ds_output_parser_feed(p, text + i, 1, &d);
        CHECK(!strchr(d.content, '<') && !strchr(d.reasoning, '<'), "partial markup in a delta at byte %zu: '%s' '%s'", i, d.reasoning, d.content);
        if (d.n_calls) {
            calls_seen += d.n_calls;
            CHECK(!strcmp(d.calls[0].arguments, "{\"x\": 1}"), "args %s", d.calls[0].arguments);
            /* the call is delivered as soon as its invoke closes, not at the end */
            CHECK(strstr(text + i + 1, "</｜DSML｜ calls>") != NULL, "call delivered late");
        }
        ds_parse_delta_free(&d);
    }
    ds_output_parser_finish(p, false, &d);
    ds_parse_delta_free(&d);
    const ds_parse_result *r = ds_output_parser_result(p);
    CHECK(calls_seen == 1 && r->n_calls == 1, "calls %d", calls_seen);
    CHECK(!strcmp(r->content, "Answer: 42") && !strcmp(r->reasoning, "Hmm."), "'%s' '%s'", r->reasoning, r->content);
    ds_output_parser_free(p);
}

TEST(trailing_whitespace_held_then_released) {
    ds_parser_options o = {.id_seed = 5};
    ds_output_parser *p = ds_output_parser_new(&o);
    ds_parse_delta d;
    ds_output_parser_feed(p, "Line one.  \n", 12, &d);
    CHECK(!strcmp(d.content, "Line one."), "first delta '%s'", d.content);
    ds_parse_delta_free(&d);
    ds_output_parser_feed(p, "Two", 3, &d);
    CHECK(!strcmp(d.content, "  \nTwo"), "second delta '%s'", d.content);
    ds_parse_delta_free(&d);
    ds_output_parser_feed(p, " \n", 2, &d);
    CHECK(d.content_len == 0, "whitespace should be held: '%s'", d.content);
    ds_parse_delta_free(&d);
    ds_output_parser_finish(p, false, &d);
    CHECK(!strcmp(d.content, " \n"), "released at the end: '%s'", d.content);
    ds_parse_delta_free(&d);
    ds_output_parser_free(p);
}

RUN_ALL()
