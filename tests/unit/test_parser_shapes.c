/* The DSML shape corpus of SERVING.md §11.5: 1080 generated generations — every block spelling
 * (` calls`, `tool_calls`, `function_calls`, the malformed `toolcalls`, no wrapper), spaced and
 * unspaced tags, three whitespace styles (LF, CRLF, indentation with extra spaces inside tags), six
 * content/reasoning prefixes, three call sets (nested JSON, non-ASCII, multi-line values, invalid
 * JSON under string="false", missing string attributes, empty values, calls without arguments),
 * with and without closing tags.
 *
 * The expected result of each shape — and of each of its truncations — is computed here from the
 * generator's own record of where every element starts and ends, by the §11.5 rules (a call is kept
 * iff its name is complete and every started parameter is closed; content before a complete marker
 * is released verbatim at the end), not by the parser.  Every shape is parsed whole and in random
 * chunkings (identical results, ids included), and truncated at every byte offset (streamed ==
 * whole, no markup leak), with the oracle checked at every character boundary. */
#define _GNU_SOURCE
#include "check.h"
#include "tokenizer/output_parser.h"
#include "base/common.h"

typedef struct sb { char *s; size_t n, cap; } sb;
static void put(sb *b, const char *t) {
    size_t l = strlen(t);
    if (b->n + l + 1 > b->cap) { b->cap = 2 * (b->n + l + 64); b->s = ds_xrealloc(b->s, b->cap); }
    memcpy(b->s + b->n, t, l + 1);
    b->n += l;
}

/* JSON string literal, written independently of the library (the §11.4 escapes). */
static void jstr(sb *b, const char *v) {
    put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        char e[8] = {0};
        switch (*p) {
        case '"': put(b, "\\\""); continue;
        case '\\': put(b, "\\\\"); continue;
        case '\n': put(b, "\\n"); continue;
        case '\r': put(b, "\\r"); continue;
        case '\t': put(b, "\\t"); continue;
        case '\b': put(b, "\\b"); continue;
        case '\f': put(b, "\\f"); continue;
        }
        if (*p < 0x20) snprintf(e, sizeof e, "\\u%04x", *p);
        else e[0] = (char)*p;
        put(b, e);
    }
    put(b, "\"");
}

typedef struct pspec { const char *name, *value; int str; bool valid_json; } pspec;   /* str: 1 true, 0 false, -1 missing */
typedef struct cspec { const char *name; int np; pspec p[4]; } cspec;

static const cspec SET_A[] = {{"get_weather", 2, {{"location", "Paris", 1, false}, {"unit", "celsius", 1, false}}}};
static const cspec SET_B[] = {
    {"f", 2, {{"n", "42", 0, true}, {"obj", "{\"a\": [1, {\"b\": null}], \"c\": \"日本\"}", 0, true}}},
    {"g", 0, {{0}}},
};
static const cspec SET_C[] = {
    {"w", 4, {{"text", "line1\nline2 \"q\" <b> 日本語 😀 a\\b", 1, false}, {"bad", "[1, 2", 0, false},
              {"miss", "hello", -1, false}, {"miss2", "3.5e-2", -1, true}}},
    {"w2", 1, {{"path", "", 1, false}}},
    {"w3", 2, {{"flag", "true", 1, false}, {"num", "-7", 0, true}}},
};
static const struct { const cspec *c; int n; } SETS[] = {{SET_A, 1}, {SET_B, 2}, {SET_C, 3}};

typedef struct callpos { size_t start, name_done, pword[4], pclose[4]; } callpos;
typedef struct shape {
    sb text;
    bool thinking;
    size_t think_end;        /* after "</think>" (thinking shapes) */
    size_t content_start;
    const char *content;     /* expected content when the block is present */
    char content_buf[64];
    const char *reasoning;
    size_t marker_end;       /* after the first "｜DSML｜" */
    int ncalls;
    const cspec *calls;
    callpos pos[3];
} shape;

static const char *OPEN[] = {" calls", "tool_calls", "function_calls", "toolcalls", NULL};

static void build(shape *sh, int opener, int spaced, int ws, int prefix, int set, bool closers) {
    memset(sh, 0, sizeof *sh);
    sb *t = &sh->text;
    put(t, "");
    static const char *pre_text[] = {"", "Sure.", "Let me check. \n", "Checking  ", "Reasoning 日本.", "r"};
    static const char *pre_content[] = {"", "Sure.", "Let me check.", "Checking  ", "", "Text."};
    sh->thinking = prefix >= 4;
    if (sh->thinking) {
        sh->reasoning = pre_text[prefix];
        put(t, pre_text[prefix]);
        put(t, "</think>");
        sh->think_end = t->n;
        if (prefix == 5) put(t, "Text.");
        put(t, "\n\n");
    } else {
        sh->reasoning = "";
        put(t, pre_text[prefix]);
        if (prefix != 2) put(t, "\n\n");
    }
    sh->content_start = sh->thinking ? sh->think_end : 0;
    sh->content = pre_content[prefix];
    const char *nl = ws == 1 ? "\r\n" : "\n";
    const char *ind = ws == 2 ? "  " : "";
    const char *sp = ws == 2 ? "  " : " ";          /* between a tag name and its attributes */
    const char *inv = spaced ? " invoke" : "invoke", *par = spaced ? " parameter" : "parameter";
    if (OPEN[opener]) { put(t, "<｜DSML｜"); put(t, OPEN[opener]); put(t, ">"); put(t, nl); }
    sh->calls = SETS[set].c;
    sh->ncalls = SETS[set].n;
    for (int i = 0; i < sh->ncalls; i++) {
        const cspec *c = &sh->calls[i];
        callpos *cp = &sh->pos[i];
        put(t, ind);
        cp->start = t->n;
        put(t, "<｜DSML｜"); put(t, inv); put(t, sp); put(t, "name=\""); put(t, c->name); put(t, "\"");
        cp->name_done = t->n;
        put(t, ws == 2 ? " >" : ">"); put(t, nl);
        for (int j = 0; j < c->np; j++) {
            const pspec *p = &c->p[j];
            put(t, ind); put(t, ind);
            put(t, "<｜DSML｜"); put(t, par);
            cp->pword[j] = t->n;
            put(t, sp); put(t, "name=\""); put(t, p->name); put(t, "\"");
            if (p->str >= 0) { put(t, ws == 2 ? "  string=\"" : " string=\""); put(t, p->str ? "true" : "false"); put(t, "\""); }
            put(t, ">"); put(t, p->value); put(t, "</｜DSML｜"); put(t, par); put(t, ">");
            cp->pclose[j] = t->n;
            put(t, nl);
        }
        if (!c->np) put(t, nl);
        if (closers || i + 1 < sh->ncalls) { put(t, ind); put(t, "</｜DSML｜"); put(t, inv); put(t, ">"); put(t, nl); }
    }
    if (closers && OPEN[opener]) { put(t, "</｜DSML｜"); put(t, OPEN[opener]); put(t, ">"); }
    const char *m = strstr(t->s, "｜DSML｜");
    sh->marker_end = (size_t)(m - t->s) + strlen("｜DSML｜");
    /* content when the block is present, by the §11.5 rule: the text before the block's '<' loses
     * a final "\n\n", or else all trailing whitespace (an indented unwrapped invoke is the case
     * where the table value above does not apply) */
    size_t end = (size_t)(m - t->s) - 1, st = sh->content_start;
    if (end - st >= 2 && t->s[end - 1] == '\n' && t->s[end - 2] == '\n') end -= 2;
    else while (end > st && strchr(" \t\r\n", t->s[end - 1])) end--;
    snprintf(sh->content_buf, sizeof sh->content_buf, "%.*s", (int)(end - st), t->s + st);
    if (strcmp(sh->content_buf, sh->content) && !(opener == 4 && ws == 2)) sh->content_buf[0] = '!';   /* table and rule must agree */
    sh->content = sh->content_buf;
}

static char *expected_args(const cspec *c, int upto, int *failures) {
    sb b = {0};
    put(&b, "{");
    for (int j = 0; j < upto; j++) {
        const pspec *p = &c->p[j];
        if (j) put(&b, ", ");
        jstr(&b, p->name);
        put(&b, ": ");
        bool verbatim = p->str != 1 && p->valid_json;
        if (verbatim) put(&b, p->value);
        else jstr(&b, p->value);
        if (p->str == 0 && !p->valid_json && failures) (*failures)++;
    }
    put(&b, "}");
    return b.s;
}

/* The oracle: what parsing text[0..k) must return. */
typedef struct expect { char *reasoning, *content; int ncalls; const char *names[3]; char *args[3]; int failures; } expect;

static void oracle(const shape *sh, size_t k, expect *e) {
    memset(e, 0, sizeof *e);
    const char *t = sh->text.s;
    if (sh->thinking && k < sh->think_end) {
        e->reasoning = strndup(t, k);
        e->content = strdup("");
        return;
    }
    e->reasoning = strdup(sh->reasoning);
    if (k < sh->marker_end) { e->content = strndup(t + sh->content_start, k - sh->content_start); return; }
    e->content = strdup(sh->content);
    for (int i = 0; i < sh->ncalls; i++) {
        const callpos *cp = &sh->pos[i];
        const cspec *c = &sh->calls[i];
        if (k < cp->name_done) break;
        int closed = 0;
        bool broken = false;
        for (int j = 0; j < c->np; j++) {
            if (k >= cp->pclose[j]) closed++;
            else { broken = k > cp->pword[j]; break; }
        }
        if (broken) continue;
        e->names[e->ncalls] = c->name;
        e->args[e->ncalls++] = expected_args(c, closed, &e->failures);
    }
}

static void expect_free(expect *e) {
    free(e->reasoning); free(e->content);
    for (int i = 0; i < e->ncalls; i++) free(e->args[i]);
}

static bool matches(const ds_parse_result *r, const expect *e, char *why, size_t wl) {
    if (strcmp(r->reasoning, e->reasoning)) { snprintf(why, wl, "reasoning '%s' want '%s'", r->reasoning, e->reasoning); return false; }
    if (strcmp(r->content, e->content)) { snprintf(why, wl, "content '%s' want '%s'", r->content, e->content); return false; }
    if (r->n_calls != e->ncalls) { snprintf(why, wl, "%d calls want %d", r->n_calls, e->ncalls); return false; }
    for (int i = 0; i < e->ncalls; i++)
        if (strcmp(r->calls[i].name, e->names[i]) || strcmp(r->calls[i].arguments, e->args[i])) {
            snprintf(why, wl, "call %d: %s %s want %s %s", i, r->calls[i].name, r->calls[i].arguments, e->names[i], e->args[i]);
            return false;
        }
    return true;
}

static bool same(const ds_parse_result *a, const ds_parse_result *b) {
    if (strcmp(a->reasoning, b->reasoning) || strcmp(a->content, b->content) || a->n_calls != b->n_calls) return false;
    if (a->dropped_partial_calls != b->dropped_partial_calls || a->parse_failures != b->parse_failures) return false;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->calls[i].id, b->calls[i].id) || strcmp(a->calls[i].name, b->calls[i].name) ||
            strcmp(a->calls[i].arguments, b->calls[i].arguments)) return false;
    return true;
}

static uint64_t rs = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

/* Streamed parse in random chunks, copied out. */
static void streamed(const char *text, size_t n, const ds_parser_options *o, int maxc, ds_parse_result *out) {
    ds_output_parser *p = ds_output_parser_new(o);
    ds_parse_delta d;
    for (size_t off = 0; off < n;) {
        size_t want = 1 + rnd() % (uint64_t)maxc;   /* not inside DS_MIN: it would draw twice */
        size_t k = DS_MIN(n - off, want);
        ds_output_parser_feed(p, text + off, k, &d);
        ds_parse_delta_free(&d);
        off += k;
    }
    ds_output_parser_finish(p, false, &d);
    ds_parse_delta_free(&d);
    const ds_parse_result *r = ds_output_parser_result(p);
    *out = *r;
    out->reasoning = strdup(r->reasoning);
    out->content = strdup(r->content);
    out->calls = ds_xcalloc((size_t)r->n_calls + 1, sizeof *out->calls);
    for (int i = 0; i < r->n_calls; i++)
        out->calls[i] = (ds_tool_call){strdup(r->calls[i].id), strdup(r->calls[i].name), strdup(r->calls[i].arguments), i};
    ds_output_parser_free(p);
}

static bool leaks(const ds_parse_result *r) {
    return strstr(r->content, "｜DSML｜") || strstr(r->content, "<think>") || strstr(r->content, "</think>") ||
           strstr(r->reasoning, "｜DSML｜") || strstr(r->reasoning, "<think>") || strstr(r->reasoning, "</think>");
}

TEST(dsml_shape_corpus) {
    int shapes = 0, failures = 0, truncations = 0, oracle_checks = 0;
    for (int opener = 0; opener < 5; opener++)
    for (int spaced = 0; spaced < 2; spaced++)
    for (int ws = 0; ws < 3; ws++)
    for (int prefix = 0; prefix < 6; prefix++)
    for (int set = 0; set < 3; set++)
    for (int closers = 0; closers < 2; closers++) {
        shape sh;
        build(&sh, opener, spaced, ws, prefix, set, closers);
        shapes++;
        const char *t = sh.text.s;
        size_t n = sh.text.n;
        ds_parser_options o = {.thinking = sh.thinking, .id_seed = (uint64_t)shapes};
        ds_parse_result whole;
        ds_output_parse(t, n, &o, false, &whole);
        expect e;
        oracle(&sh, n, &e);
        char why[1024];
        int f0 = failures;
        if (!matches(&whole, &e, why, sizeof why)) { failures++; CHECK(0, "shape %d: %s\n  text: %s", shapes, why, t); }
        if (whole.parse_failures != e.failures) { failures++; CHECK(0, "shape %d: %d parse failures, want %d", shapes, whole.parse_failures, e.failures); }
        if (leaks(&whole)) { failures++; CHECK(0, "shape %d leaks markup", shapes); }
        expect_free(&e);
        for (int c = 0; c < 4 && failures == f0; c++) {
            ds_parse_result s;
            streamed(t, n, &o, c == 0 ? 1 : 2 + c * 5, &s);
            if (!same(&whole, &s)) { failures++; CHECK(0, "shape %d: chunking %d differs", shapes, c); }
            ds_parse_result_free(&s);
        }
        /* truncation at every byte offset */
        for (size_t k = 0; k < n && failures == f0; k++) {
            truncations++;
            ds_parse_result r;
            ds_output_parse(t, k, &o, true, &r);
            if (leaks(&r)) { failures++; CHECK(0, "shape %d cut at %zu leaks markup: '%s' '%s'", shapes, k, r.reasoning, r.content); }
            if (((unsigned char)t[k] & 0xC0) != 0x80) {      /* a character boundary: check the oracle */
                oracle(&sh, k, &e);
                oracle_checks++;
                if (!matches(&r, &e, why, sizeof why)) { failures++; CHECK(0, "shape %d cut at %zu: %s\n  text: %.*s", shapes, k, why, (int)k, t); }
                expect_free(&e);
            }
            if (k % 5 == 0) {
                ds_parse_result s;
                streamed(t, k, &o, 1 + (int)(k % 7), &s);
                /* streaming ends with finish(truncated=false) here; the keep/drop rules do not depend on it */
                if (!same(&r, &s)) {
                    failures++;
                    CHECK(0, "shape %d cut at %zu: streamed differs: '%s'/'%s' %d calls %d dropped vs '%s'/'%s' %d calls %d dropped", shapes, k,
                          r.reasoning, r.content, r.n_calls, r.dropped_partial_calls, s.reasoning, s.content, s.n_calls, s.dropped_partial_calls);
                }
                ds_parse_result_free(&s);
            }
            ds_parse_result_free(&r);
        }
        ds_parse_result_free(&whole);
        free(sh.text.s);
        if (failures > 5) break;
    }
    CHECK(shapes >= 450, "only %d shapes", shapes);
    printf("  %d DSML shapes, %d truncations (%d checked against the oracle), %d failures\n", shapes, truncations, oracle_checks, failures);
}

RUN_ALL()
