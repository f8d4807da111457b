/* Streaming output parser for deepseek_v41 generations (SERVING.md §11.5); see output_parser.h.
 *
 * How chunk-invariance is achieved: all text ever fed is kept in `raw`; `pos` marks how far the
 * state machine has consumed it.  Each step consumes only what is already decidable: a suffix
 * that could still grow into a marker (`</think>`, `<think>`, `<｜DSML｜`, `</｜DSML｜`,
 * `｜DSML｜`) or into a stop string is left unconsumed, and so is an incomplete UTF-8 character.
 * Content's trailing whitespace is kept in a side buffer until non-whitespace follows (it is
 * released), a DSML block starts (`\n\n` dropped, or all of it trimmed) or the text ends
 * (released).  Inside the DSML region a small tag reader works on complete tags only; at the end
 * of the text, partial tags are judged by the truncation rules.  Since no decision depends on
 * where a chunk ended, feeding the text whole or byte by byte yields the same result.
 *
 * Beyond the spec's letter, in two places where it leaves room: a DSML opener inside reasoning
 * ends the reasoning (the marker is a control token, so calls are never left in reasoning_content),
 * and stray `<think>` / `</think>` literals are dropped from content and reasoning, so no control
 * token text ever reaches a client. */
#define _GNU_SOURCE
#include "tokenizer/output_parser.h"
#include "tokenizer/json_canon.h"
#include "tokenizer/utf8.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define MARK "｜DSML｜"
#define MARK_LEN (sizeof(MARK) - 1)

enum { ST_REASON, ST_CONTENT, ST_DSML, ST_END };

struct ds_output_parser {
    bool thinking;
    char **stop;
    int n_stop;
    ds_strbuf raw;
    size_t pos;            /* consumed */
    size_t stop_safe;      /* raw[0..stop_safe) is known not to start a stop string */
    int state;
    bool finished;
    ds_strbuf held_ws;     /* content whitespace waiting for what follows */
    /* DSML region */
    bool in_value;
    size_t value_start;
    size_t value_scan;     /* value text before this holds no marker */
    char *pname;
    int pstring;           /* -1 attribute missing, 0 false, 1 true, 2 other */
    bool have_call;
    bool call_broken;
    ds_strbuf call_name;
    ds_strbuf call_args;
    int call_nparams;
    uint64_t rng;
    ds_parse_result res;
};

/* ---- small helpers -------------------------------------------------------------------------- */

static void delta_add_text(char **s, size_t *n, const char *t, size_t len) {
    if (!len) return;
    *s = ds_xrealloc(*s, *n + len + 1);
    memcpy(*s + *n, t, len);
    *n += len;
    (*s)[*n] = 0;
}

static void emit_reasoning(ds_output_parser *p, ds_parse_delta *d, const char *t, size_t n) {
    delta_add_text(&d->reasoning, &d->reasoning_len, t, n);
    delta_add_text(&p->res.reasoning, &p->res.reasoning_len, t, n);
}

static void emit_content_raw(ds_output_parser *p, ds_parse_delta *d, const char *t, size_t n) {
    delta_add_text(&d->content, &d->content_len, t, n);
    delta_add_text(&p->res.content, &p->res.content_len, t, n);
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Content text: whitespace at the end is held back until we know what follows it. */
static void emit_content(ds_output_parser *p, ds_parse_delta *d, const char *t, size_t n) {
    size_t j = n;
    while (j > 0 && is_ws(t[j - 1])) j--;
    if (j > 0) {
        emit_content_raw(p, d, p->held_ws.s ? p->held_ws.s : "", p->held_ws.n);
        p->held_ws.n = 0;
        emit_content_raw(p, d, t, j);
    }
    ds_strbuf_append(&p->held_ws, t + j, n - j);
}

static void rng_fill_id(ds_output_parser *p, char *out) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) {
        p->rng ^= p->rng >> 12; p->rng ^= p->rng << 25; p->rng ^= p->rng >> 27;   /* xorshift64* */
        uint64_t r = p->rng * 0x2545F4914F6CDD1Dull;
        out[5 + i] = alnum[(r >> 32) % 62];
    }
    out[29] = 0;
}

static void finalize_call(ds_output_parser *p, ds_parse_delta *d) {
    if (!p->have_call) return;
    p->have_call = false;
    if (p->call_broken || !p->call_name.n) {
        p->res.dropped_partial_calls++;
        return;
    }
    ds_strbuf_putc(&p->call_args, '}');
    ds_tool_call c;
    char id[32];
    rng_fill_id(p, id);
    c.id = ds_xstrdup(id);
    c.name = ds_xstrdup(p->call_name.s);
    c.arguments = ds_xstrdup(p->call_args.s);
    c.index = p->res.n_calls;
    p->res.calls = ds_xrealloc(p->res.calls, (size_t)(p->res.n_calls + 1) * sizeof c);
    p->res.calls[p->res.n_calls++] = c;
    d->calls = ds_xrealloc(d->calls, (size_t)(d->n_calls + 1) * sizeof c);
    d->calls[d->n_calls++] = (ds_tool_call){ds_xstrdup(c.id), ds_xstrdup(c.name), ds_xstrdup(c.arguments), c.index};
}

static void start_call(ds_output_parser *p, ds_parse_delta *d, const char *name, size_t nlen, bool name_ok) {
    finalize_call(p, d);
    p->have_call = true;
    p->call_broken = !name_ok;
    p->call_name.n = 0;
    ds_strbuf_append(&p->call_name, name ? name : "", name ? nlen : 0);
    p->call_args.n = 0;
    ds_strbuf_putc(&p->call_args, '{');
    p->call_nparams = 0;
}

static void add_param(ds_output_parser *p, const char *v, size_t n) {
    if (!p->have_call) return;   /* a parameter outside any invoke has nowhere to go */
    if (p->call_nparams++) ds_strbuf_puts(&p->call_args, ", ");
    ds_json_write_string(&p->call_args, p->pname ? p->pname : "", p->pname ? strlen(p->pname) : 0);
    ds_strbuf_puts(&p->call_args, ": ");
    bool verbatim = false;
    if (p->pstring != 1) {
        ds_error e;
        cJSON *j = ds_json_parse_exact(v, n, &e);
        verbatim = j != NULL;
        cJSON_Delete(j);
        if (!verbatim && p->pstring == 0) p->res.parse_failures++;
    }
    if (verbatim) ds_strbuf_append(&p->call_args, v, n);
    else ds_json_write_string(&p->call_args, v, n);
}

/* Longest k < len(m) such that s ends with the first k bytes of m. */
static size_t partial_suffix(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t k = DS_MIN(n, ml - 1); k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

/* ---- DSML tags ------------------------------------------------------------------------------ */

enum { TAG_OK, TAG_MORE, TAG_NONE };
enum { K_UNKNOWN, K_BLOCK, K_INVOKE, K_PARAM };

typedef struct tag {
    bool close;
    int kind;
    bool kind_known;        /* the tag name is complete */
    size_t end;             /* position after '>' */
    const char *name; size_t name_len; bool has_name;     /* name="..." */
    const char *str; size_t str_len; bool has_str;        /* string="..." */
} tag;

static bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static int tag_kind(const char *s, size_t n) {
    static const char *const blocks[] = {"calls", "tool_calls", "function_calls", "toolcalls"};
    for (size_t i = 0; i < DS_ARRAY_LEN(blocks); i++)
        if (n == strlen(blocks[i]) && !memcmp(s, blocks[i], n)) return K_BLOCK;
    if (n == 6 && !memcmp(s, "invoke", 6)) return K_INVOKE;
    if (n == 9 && !memcmp(s, "parameter", 9)) return K_PARAM;
    return K_UNKNOWN;
}

/* Read a tag at s[i..L).  TAG_MORE: the text so far is a valid prefix of a tag (t holds what was
 * recognised); TAG_NONE: not a DSML tag. */
static int read_tag(const char *s, size_t i, size_t L, tag *t) {
    memset(t, 0, sizeof *t);
    if (i >= L) return TAG_MORE;
    if (s[i] != '<') return TAG_NONE;
    i++;
    if (i < L && s[i] == '/') { t->close = true; i++; }
    for (size_t k = 0; k < MARK_LEN; k++, i++) {
        if (i >= L) return TAG_MORE;
        if (s[i] != MARK[k]) return TAG_NONE;
    }
    while (i < L && is_ws(s[i])) i++;
    size_t ns = i;
    while (i < L && is_name_char(s[i])) i++;
    if (i >= L) { t->kind = tag_kind(s + ns, i - ns); return TAG_MORE; }
    if (i == ns) return TAG_NONE;
    t->kind = tag_kind(s + ns, i - ns);
    t->kind_known = true;
    for (;;) {
        while (i < L && is_ws(s[i])) i++;
        if (i >= L) return TAG_MORE;
        if (s[i] == '>') { t->end = i + 1; return TAG_OK; }
        size_t ks = i;
        while (i < L && is_name_char(s[i])) i++;
        if (i >= L) return TAG_MORE;
        size_t kl = i - ks;
        if (!kl) return TAG_NONE;
        while (i < L && is_ws(s[i])) i++;
        if (i >= L) return TAG_MORE;
        if (s[i] != '=') return TAG_NONE;
        i++;
        while (i < L && is_ws(s[i])) i++;
        if (i >= L) return TAG_MORE;
        if (s[i] != '"') return TAG_NONE;
        const char *v = s + i + 1;
        const char *q = memchr(v, '"', L - i - 1);
        if (!q) return TAG_MORE;
        size_t vl = (size_t)(q - v);
        if (kl == 4 && !memcmp(s + ks, "name", 4)) { t->name = v; t->name_len = vl; t->has_name = true; }
        else if (kl == 6 && !memcmp(s + ks, "string", 6)) { t->str = v; t->str_len = vl; t->has_str = true; }
        i = (size_t)(q - s) + 1;
    }
}

static void open_param(ds_output_parser *p, const tag *t) {
    free(p->pname);
    p->pname = t->has_name ? strndup(t->name, t->name_len) : NULL;
    p->pstring = !t->has_str ? -1 : (t->str_len == 4 && !memcmp(t->str, "true", 4)) ? 1
               : (t->str_len == 5 && !memcmp(t->str, "false", 5)) ? 0 : 2;
    p->in_value = true;
    p->value_start = p->value_scan = t->end;
}

static void handle_tag(ds_output_parser *p, ds_parse_delta *d, const tag *t) {
    switch (t->kind) {
    case K_INVOKE:
        if (t->close) finalize_call(p, d);
        else start_call(p, d, t->name, t->name_len, t->has_name && t->name_len > 0);
        break;
    case K_BLOCK:
        if (t->close) finalize_call(p, d);
        break;
    case K_PARAM:
        if (!t->close) open_param(p, t);
        break;
    default: break;
    }
}

/* Find the next DSML tag start ('<' or '</' before the marker) in s[from..L); returns its
 * position, or L and sets *hold to the first position that might still begin one. */
static size_t find_tag_start(const char *s, size_t from, size_t L, size_t floor_, size_t *hold) {
    /* never back up before `from`: a '<' or '</' there was already tried and rejected, and
     * returning it again loops forever (fuzz/regress/output_parser) */
    if (floor_ < from) floor_ = from;
    const char *q = from < L ? memmem(s + from, L - from, MARK, MARK_LEN) : NULL;
    if (q) {
        size_t m = (size_t)(q - s);
        if (m >= floor_ + 2 && s[m - 2] == '<' && s[m - 1] == '/') return m - 2;
        if (m >= floor_ + 1 && s[m - 1] == '<') return m - 1;
        return m;
    }
    size_t k = DS_MAX(partial_suffix(s + from, L - from, "</" MARK), partial_suffix(s + from, L - from, "<" MARK));
    k = DS_MAX(k, partial_suffix(s + from, L - from, MARK));
    *hold = L - k;
    return L;
}

static void run_dsml(ds_output_parser *p, ds_parse_delta *d, size_t L, bool eof) {
    const char *s = p->raw.s;
    while (p->pos < L || (eof && p->in_value)) {
        if (p->in_value) {
            size_t hold = L;
            size_t t0 = find_tag_start(s, p->value_scan, L, p->value_start, &hold);
            if (t0 == L) {
                p->value_scan = hold;
                if (!eof) return;
                p->call_broken = true;            /* value never closed */
                p->in_value = false;
                p->pos = L;
                return;
            }
            tag t;
            int r = read_tag(s, t0, L, &t);
            if (r == TAG_MORE && !eof) { p->value_scan = t0; return; }
            if (r == TAG_NONE) { p->value_scan = t0 + 1; continue; }   /* a bare marker: part of the value */
            p->in_value = false;
            if (r == TAG_OK && t.close && t.kind == K_PARAM) {
                add_param(p, s + p->value_start, t0 - p->value_start);
                p->pos = t.end;
            } else {
                p->call_broken = true;            /* started parameter not closed */
                p->pos = t0;
                if (r == TAG_MORE) { p->pos = L; return; }
            }
            continue;
        }
        while (p->pos < L && is_ws(s[p->pos])) p->pos++;
        if (p->pos >= L) return;
        tag t;
        int r = read_tag(s, p->pos, L, &t);
        if (r == TAG_NONE) {                      /* stray text inside the region: dropped */
            size_t next_lt = p->pos + 1;
            while (next_lt < L && s[next_lt] != '<') next_lt++;
            p->pos = next_lt;
            continue;
        }
        if (r == TAG_MORE) {
            if (!eof) return;
            /* the text ends inside a tag: judge it by the truncation rules */
            if (!t.close && t.kind == K_INVOKE && t.kind_known && t.has_name) start_call(p, d, t.name, t.name_len, t.name_len > 0);
            else if (!t.close && t.kind == K_INVOKE) { start_call(p, d, NULL, 0, false); }
            else if (!t.close && t.kind == K_PARAM && t.kind_known) p->call_broken = true;
            p->pos = L;
            return;
        }
        handle_tag(p, d, &t);
        p->pos = t.end;
    }
}

/* ---- the text states ------------------------------------------------------------------------ */

static const char *const TEXT_MARKERS[] = {"</think>", "<think>", "<" MARK, "</" MARK, MARK};

/* Earliest marker in s[from..L): returns its position and which (0 </think>, 1 <think>, 2 DSML). */
static size_t next_marker(const char *s, size_t from, size_t L, int *which) {
    size_t best = L;
    *which = -1;
    const char *q;
    if ((q = memmem(s + from, L - from, "</think>", 8)) && (size_t)(q - s) < best) { best = (size_t)(q - s); *which = 0; }
    if ((q = memmem(s + from, L - from, "<think>", 7)) && (size_t)(q - s) < best) { best = (size_t)(q - s); *which = 1; }
    if ((q = memmem(s + from, L - from, MARK, MARK_LEN))) {
        size_t m = (size_t)(q - s);
        if (m >= from + 2 && s[m - 2] == '<' && s[m - 1] == '/') m -= 2;
        else if (m >= from + 1 && s[m - 1] == '<') m -= 1;
        if (m < best) { best = m; *which = 2; }
    }
    return best;
}

static void run_text(ds_output_parser *p, ds_parse_delta *d, size_t L, bool eof) {
    const char *s = p->raw.s;
    while (p->pos < L && (p->state == ST_REASON || p->state == ST_CONTENT)) {
        int which;
        size_t m = next_marker(s, p->pos, L, &which);
        size_t upto = m;
        if (which < 0 && !eof) {
            size_t k = 0;
            for (size_t i = 0; i < DS_ARRAY_LEN(TEXT_MARKERS); i++)
                k = DS_MAX(k, partial_suffix(s + p->pos, L - p->pos, TEXT_MARKERS[i]));
            upto = L - k;
        }
        if (p->state == ST_REASON) emit_reasoning(p, d, s + p->pos, upto - p->pos);
        else emit_content(p, d, s + p->pos, upto - p->pos);
        p->pos = upto;
        if (which < 0) return;
        if (which == 0) {
            p->pos = m + 8;
            if (p->state == ST_REASON) p->state = ST_CONTENT;
        } else if (which == 1) {
            p->pos = m + 7;
        } else {
            if (p->state == ST_CONTENT) {
                size_t h = p->held_ws.n;
                if (h >= 2 && p->held_ws.s[h - 2] == '\n' && p->held_ws.s[h - 1] == '\n')
                    emit_content_raw(p, d, p->held_ws.s, h - 2);
                p->held_ws.n = 0;
            }
            p->state = ST_DSML;
            p->res.saw_dsml = true;
        }
    }
}

/* Stop strings: advance stop_safe; on a hit, cut the text there.  Returns true when stopped. */
static bool scan_stops(ds_output_parser *p) {
    if (!p->n_stop) { p->stop_safe = p->raw.n; return false; }
    const char *s = p->raw.s;
    size_t n = p->raw.n;
    while (p->stop_safe < n) {
        size_t i = p->stop_safe;
        bool partial = false;
        for (int k = 0; k < p->n_stop; k++) {
            size_t sl = strlen(p->stop[k]);
            if (!sl) continue;
            size_t avail = n - i;
            if (avail >= sl) {
                if (!memcmp(s + i, p->stop[k], sl)) { p->raw.n = i; p->raw.s[i] = 0; return true; }
            } else if (!memcmp(s + i, p->stop[k], avail)) {
                partial = true;
            }
        }
        if (partial) return false;
        p->stop_safe++;
    }
    return false;
}

static void process(ds_output_parser *p, ds_parse_delta *d, bool eof) {
    size_t L = DS_MIN(p->stop_safe, p->raw.n);
    if (!eof) {
        /* do not consume an incomplete UTF-8 character */
        size_t k = 0;
        while (k < 3 && k < L && ((uint8_t)p->raw.s[L - 1 - k] & 0xC0) == 0x80) k++;
        if (k < L) {
            uint8_t lead = (uint8_t)p->raw.s[L - 1 - k];
            int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if ((size_t)need > k + 1) L = L - 1 - k;
        }
    } else {
        L = p->raw.n;
    }
    if (p->pos > L) return;
    run_text(p, d, L, eof);
    if (p->state == ST_DSML) run_dsml(p, d, L, eof);
    if (eof) {
        if (p->state == ST_CONTENT) { emit_content_raw(p, d, p->held_ws.s ? p->held_ws.s : "", p->held_ws.n); p->held_ws.n = 0; }
        if (p->state == ST_DSML) finalize_call(p, d);
        p->state = ST_END;
    }
}

/* ---- public API ----------------------------------------------------------------------------- */

ds_output_parser *ds_output_parser_new(const ds_parser_options *o) {
    ds_output_parser *p = ds_xcalloc(1, sizeof *p);
    p->thinking = o && o->thinking;
    p->state = p->thinking ? ST_REASON : ST_CONTENT;
    if (o && o->n_stop > 0) {
        p->stop = ds_xcalloc((size_t)o->n_stop, sizeof *p->stop);
        for (int i = 0; i < o->n_stop; i++) p->stop[p->n_stop++] = ds_xstrdup(o->stop[i]);
    }
    if (o && o->id_seed) p->rng = o->id_seed;
    else if (getrandom(&p->rng, sizeof p->rng, 0) != (ssize_t)sizeof p->rng) p->rng = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)p;
    if (!p->rng) p->rng = 0x9E3779B97F4A7C15ull;
    ds_strbuf_append(&p->raw, "", 0);
    ds_strbuf_append(&p->held_ws, "", 0);
    ds_strbuf_append(&p->call_name, "", 0);
    ds_strbuf_append(&p->call_args, "", 0);
    p->res.reasoning = ds_xstrdup("");
    p->res.content = ds_xstrdup("");
    return p;
}

void ds_parse_result_free(ds_parse_result *r) {
    free(r->reasoning);
    free(r->content);
    for (int i = 0; i < r->n_calls; i++) { free(r->calls[i].id); free(r->calls[i].name); free(r->calls[i].arguments); }
    free(r->calls);
    memset(r, 0, sizeof *r);
}

void ds_parse_delta_free(ds_parse_delta *d) {
    free(d->reasoning);
    free(d->content);
    for (int i = 0; i < d->n_calls; i++) { free(d->calls[i].id); free(d->calls[i].name); free(d->calls[i].arguments); }
    free(d->calls);
    memset(d, 0, sizeof *d);
}

void ds_output_parser_free(ds_output_parser *p) {
    if (!p) return;
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    ds_strbuf_free(&p->raw);
    ds_strbuf_free(&p->held_ws);
    ds_strbuf_free(&p->call_name);
    ds_strbuf_free(&p->call_args);
    free(p->pname);
    ds_parse_result_free(&p->res);
    free(p);
}

static void delta_init(ds_parse_delta *d) {
    memset(d, 0, sizeof *d);
    d->reasoning = ds_xstrdup("");
    d->content = ds_xstrdup("");
}

void ds_output_parser_feed(ds_output_parser *p, const char *text, size_t len, ds_parse_delta *d) {
    delta_init(d);
    if (p->finished) return;
    ds_strbuf_append(&p->raw, text, len);
    if (scan_stops(p)) {
        p->res.stopped = true;
        d->stopped = true;
        process(p, d, true);
        p->finished = true;
        return;
    }
    process(p, d, false);
}

void ds_output_parser_finish(ds_output_parser *p, bool truncated, ds_parse_delta *d) {
    delta_init(d);
    if (p->finished) return;
    (void)truncated;   /* the §11.5 keep/drop rules are the same for EOS and truncation */
    p->stop_safe = p->raw.n;
    process(p, d, true);
    p->finished = true;
}

const ds_parse_result *ds_output_parser_result(const ds_output_parser *p) { return &p->res; }

void ds_output_parse(const char *text, size_t len, const ds_parser_options *opts, bool truncated,
                     ds_parse_result *out) {
    ds_output_parser *p = ds_output_parser_new(opts);
    ds_parse_delta d;
    ds_output_parser_feed(p, text, len, &d);
    ds_parse_delta_free(&d);
    ds_output_parser_finish(p, truncated, &d);
    ds_parse_delta_free(&d);
    *out = p->res;
    memset(&p->res, 0, sizeof p->res);
    ds_output_parser_free(p);
}
