/* The §11.4 JSON serializer and the number-preserving parser (see json_canon.h for why).
 *
 * The double layout mirrors Python's repr, which is what the reference serializer produced in
 * training: the shortest digit string that reads back to the same binary64 (found by trying 1..17
 * significant digits), positional with at least one fractional digit when 1e-4 <= |x| < 1e16 or
 * x is zero, otherwise d[.ddd]e±XX with at least two exponent digits. */
#define _GNU_SOURCE
#include "tokenizer/json_canon.h"
#include "tokenizer/chat.h"
#include "tokenizer/utf8.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffer --------------------------------------------------------------------------------- */

void ds_strbuf_append(ds_strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = DS_MAX(b->cap * 2, b->n + n + 64);
        b->s = ds_xrealloc(b->s, b->cap);
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
void ds_strbuf_puts(ds_strbuf *b, const char *s) { ds_strbuf_append(b, s, strlen(s)); }
void ds_strbuf_putc(ds_strbuf *b, char c) { ds_strbuf_append(b, &c, 1); }
void ds_strbuf_printf(ds_strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { ds_strbuf_append(b, tmp, (size_t)n); return; }
    char *big = ds_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ds_strbuf_append(b, big, (size_t)n);
    free(big);
}
char *ds_strbuf_take(ds_strbuf *b, size_t *len) {
    if (!b->s) ds_strbuf_append(b, "", 0);
    char *s = b->s;
    if (len) *len = b->n;
    memset(b, 0, sizeof *b);
    return s;
}
void ds_strbuf_free(ds_strbuf *b) { free(b->s); memset(b, 0, sizeof *b); }

/* ---- writer --------------------------------------------------------------------------------- */

void ds_json_write_string(ds_strbuf *b, const char *s, size_t n) {
    ds_strbuf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) { snprintf(u, sizeof u, "\\u%04x", c); esc = u; }
        }
        if (!esc) continue;
        ds_strbuf_append(b, s + run, i - run);
        ds_strbuf_puts(b, esc);
        run = i + 1;
    }
    ds_strbuf_append(b, s + run, n - run);
    ds_strbuf_putc(b, '"');
}

void ds_json_write_double(ds_strbuf *b, double x) {
    if (isnan(x)) { ds_strbuf_puts(b, "NaN"); return; }
    if (isinf(x)) { ds_strbuf_puts(b, x < 0 ? "-Infinity" : "Infinity"); return; }
    if (x == 0) { ds_strbuf_puts(b, signbit(x) ? "-0.0" : "0.0"); return; }
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf = [-]d[.ddd]e±XX: collect the digits and the decimal exponent */
    char digits[32];
    int nd = 0, exp10;
    const char *q = buf;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++) if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;    /* %.*e may pad with zeros */
    digits[nd] = 0;
    if (neg) ds_strbuf_putc(b, '-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            ds_strbuf_puts(b, "0.");
            for (int i = 0; i < -exp10 - 1; i++) ds_strbuf_putc(b, '0');
            ds_strbuf_puts(b, digits);
        } else {
            int intd = exp10 + 1;
            for (int i = 0; i < intd; i++) ds_strbuf_putc(b, i < nd ? digits[i] : '0');
            ds_strbuf_putc(b, '.');
            if (nd > intd) ds_strbuf_puts(b, digits + intd);
            else ds_strbuf_putc(b, '0');
        }
    } else {
        ds_strbuf_putc(b, digits[0]);
        if (nd > 1) { ds_strbuf_putc(b, '.'); ds_strbuf_puts(b, digits + 1); }
        ds_strbuf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

void ds_json_write_number_lexeme(ds_strbuf *b, const char *lex) {
    if (!strpbrk(lex, ".eE")) {
        /* an integer: its exact digits, whatever its size; -0 is written 0 */
        const char *d = lex[0] == '-' ? lex + 1 : lex;
        if (strspn(d, "0") == strlen(d)) ds_strbuf_putc(b, '0');
        else ds_strbuf_puts(b, lex);
        return;
    }
    ds_json_write_double(b, strtod(lex, NULL));
}

static void write_text(ds_strbuf *b, const char *s, const struct ds_escaper *esc) {
    if (!esc) { ds_json_write_string(b, s, strlen(s)); return; }
    ds_strbuf tmp = {0};
    ds_escaper_apply(esc, s, strlen(s), &tmp);
    ds_json_write_string(b, tmp.s ? tmp.s : "", tmp.n);
    ds_strbuf_free(&tmp);
}

void ds_json_write(ds_strbuf *b, const cJSON *v, const struct ds_escaper *esc) {
    if (!v || cJSON_IsNull(v)) { ds_strbuf_puts(b, "null"); return; }
    if (cJSON_IsTrue(v)) { ds_strbuf_puts(b, "true"); return; }
    if (cJSON_IsFalse(v)) { ds_strbuf_puts(b, "false"); return; }
    if (cJSON_IsNumber(v)) {
        if (v->valuestring) { ds_json_write_number_lexeme(b, v->valuestring); return; }
        double x = v->valuedouble;
        if (x == floor(x) && fabs(x) < 9007199254740992.0) ds_strbuf_printf(b, "%.0f", x == 0 ? 0.0 : x);
        else ds_json_write_double(b, x);
        return;
    }
    if (cJSON_IsString(v)) { write_text(b, v->valuestring, esc); return; }
    if (cJSON_IsRaw(v)) { ds_strbuf_puts(b, v->valuestring); return; }
    bool obj = cJSON_IsObject(v);
    ds_strbuf_putc(b, obj ? '{' : '[');
    const cJSON *it;
    bool first = true;
    cJSON_ArrayForEach(it, v) {
        if (!first) ds_strbuf_puts(b, ", ");
        first = false;
        if (obj) {
            write_text(b, it->string ? it->string : "", esc);
            ds_strbuf_puts(b, ": ");
        }
        ds_json_write(b, it, esc);
    }
    ds_strbuf_putc(b, obj ? '}' : ']');
}

/* ---- parser --------------------------------------------------------------------------------- */

typedef struct jp {
    const char *s;
    size_t n, i;
    int depth;
    ds_error *err;
    bool failed;
    ds_json_capture *cap;
} jp;

static cJSON *jfail(jp *p, const char *what) {
    if (!p->failed) ds_fail(p->err, "E_JSON", "invalid JSON at byte %zu: %s", p->i, what);
    p->failed = true;
    return NULL;
}
static void ws(jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}
static int hex4(jp *p, uint32_t *v) {
    if (p->i + 4 > p->n) return -1;
    uint32_t x = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i + (size_t)k];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        x = x * 16 + (uint32_t)h;
    }
    p->i += 4;
    *v = x;
    return 0;
}

/* Parse a string body after the opening quote into a new NUL-terminated buffer. */
/* Append a run of raw source bytes; each run is validated on its own because the escapes between
 * runs are ASCII (a run never splits a character) and the NUL stand-in must not meet the check. */
static bool append_run(jp *p, ds_strbuf *b, size_t from, size_t to) {
    if (ds_utf8_validate((const uint8_t *)p->s + from, to - from) != to - from) return false;
    ds_strbuf_append(b, p->s + from, to - from);
    return true;
}

static char *parse_str(jp *p) {
    ds_strbuf b = {0};
    ds_strbuf_append(&b, "", 0);
    size_t run = p->i;
    while (1) {
        if (p->i >= p->n) { ds_strbuf_free(&b); jfail(p, "unterminated string"); return NULL; }
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            if (!append_run(p, &b, run, p->i)) { ds_strbuf_free(&b); jfail(p, "string is not valid UTF-8"); return NULL; }
            p->i++;
            break;
        }
        if (c < 0x20) { ds_strbuf_free(&b); jfail(p, "control character in string"); return NULL; }
        if (c != '\\') { p->i++; continue; }
        if (!append_run(p, &b, run, p->i)) { ds_strbuf_free(&b); jfail(p, "string is not valid UTF-8"); return NULL; }
        p->i++;
        if (p->i >= p->n) { ds_strbuf_free(&b); jfail(p, "unterminated escape"); return NULL; }
        char e = p->s[p->i++];
        switch (e) {
        case '"': ds_strbuf_putc(&b, '"'); break;
        case '\\': ds_strbuf_putc(&b, '\\'); break;
        case '/': ds_strbuf_putc(&b, '/'); break;
        case 'b': ds_strbuf_putc(&b, '\b'); break;
        case 'f': ds_strbuf_putc(&b, '\f'); break;
        case 'n': ds_strbuf_putc(&b, '\n'); break;
        case 'r': ds_strbuf_putc(&b, '\r'); break;
        case 't': ds_strbuf_putc(&b, '\t'); break;
        case 'u': {
            uint32_t cp;
            if (hex4(p, &cp) < 0) { ds_strbuf_free(&b); jfail(p, "bad \\u escape"); return NULL; }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (p->i + 2 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                    p->i += 2;
                    if (hex4(p, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) { ds_strbuf_free(&b); jfail(p, "unpaired surrogate"); return NULL; }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    ds_strbuf_free(&b); jfail(p, "unpaired surrogate"); return NULL;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                ds_strbuf_free(&b); jfail(p, "unpaired surrogate"); return NULL;
            }
            if (cp == 0) { ds_strbuf_append(&b, DS_JSON_NUL, 2); break; } /* see json_canon.h */
            char u[4];
            ds_strbuf_append(&b, u, (size_t)ds_utf8_encode(cp, u));
            break;
        }
        default: ds_strbuf_free(&b); jfail(p, "unknown escape"); return NULL;
        }
        run = p->i;
    }
    return b.s;
}

static cJSON *parse_value(jp *p);

static cJSON *parse_number(jp *p) {
    size_t st = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || !(p->s[p->i] >= '0' && p->s[p->i] <= '9')) return jfail(p, "bad number");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || !(p->s[p->i] >= '0' && p->s[p->i] <= '9')) return jfail(p, "bad number fraction");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || !(p->s[p->i] >= '0' && p->s[p->i] <= '9')) return jfail(p, "bad number exponent");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    size_t len = p->i - st;
    if (len <= 15 && !memchr(p->s + st, '.', len) && !memchr(p->s + st, 'e', len) && !memchr(p->s + st, 'E', len)) {
        /* a plain integer below 2^53: its double is exact and writes back with the same digits,
         * so no lexeme is kept (one allocation per number instead of two: 5M-id arrays) */
        bool neg = p->s[st] == '-';
        int64_t x = 0;
        for (size_t k = neg; k < len; k++) x = x * 10 + (p->s[st + k] - '0');
        return cJSON_CreateNumber(neg ? -(double)x : (double)x);
    }
    char *lex = cJSON_malloc(len + 1);
    memcpy(lex, p->s + st, len);
    lex[len] = 0;
    cJSON *v = cJSON_CreateNumber(strtod(lex, NULL));
    v->valuestring = lex;   /* freed by cJSON_Delete like any valuestring */
    return v;
}

/* A clean int32 literal at p->i: -?(0|[1-9][0-9]{0,9}) not followed by a fraction, exponent or
 * digit.  Anything else leaves p->i alone and returns false (the general parser takes over). */
static bool plain_int32(jp *p, int32_t *out) {
    size_t i = p->i;
    bool neg = i < p->n && p->s[i] == '-';
    if (neg) i++;
    if (i >= p->n || p->s[i] < '0' || p->s[i] > '9') return false;
    size_t d0 = i;
    int64_t x = 0;
    if (p->s[i] == '0') i++;
    else
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9' && i - d0 < 10) x = x * 10 + (p->s[i++] - '0');
    if (i < p->n && (p->s[i] == '.' || p->s[i] == 'e' || p->s[i] == 'E' || (p->s[i] >= '0' && p->s[i] <= '9'))) return false;
    if (neg) x = -x;
    if (x < INT32_MIN || x > INT32_MAX) return false;
    *out = (int32_t)x;
    p->i = i;
    return true;
}

/* The items of an array whose '[' (and any leading items) are consumed, through the closing ']',
 * appended to v.  Returns v, or NULL with v freed and the parse error set. */
static cJSON *parse_array_items(jp *p, cJSON *v) {
    while (1) {
        cJSON *item = parse_value(p);
        if (!item) { cJSON_Delete(v); return NULL; }
        cJSON_AddItemToArray(v, item);
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == ']') { p->i++; return v; }
        cJSON_Delete(v);
        return jfail(p, "expected ',' or ']'");
    }
}

/* The captured member's array (see ds_json_capture): clean integers go to cap->ids, no nodes.
 * At the first element that is not one, the ids so far become nodes and the general parser
 * continues, so grammar and errors are exactly those of parse_value. */
static cJSON *parse_captured_array(jp *p) {
    ds_json_capture *cap = p->cap;
    p->i++; /* '[' */
    cap->n = 0;
    ws(p);
    if (p->i < p->n && p->s[p->i] == ']') { p->i++; cap->captured = true; return cJSON_CreateArray(); }
    while (1) {
        ws(p);
        int32_t x;
        if (!plain_int32(p, &x)) break;
        if (cap->n == cap->cap) cap->ids = ds_xrealloc(cap->ids, sizeof(int32_t) * (cap->cap = cap->cap ? cap->cap * 2 : 1024));
        cap->ids[cap->n++] = x;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == ']') { p->i++; cap->captured = true; return cJSON_CreateArray(); }
        return jfail(p, "expected ',' or ']'");
    }
    cJSON *v = cJSON_CreateArray(); /* fall back: the rest of the array as ordinary nodes */
    for (size_t k = 0; k < cap->n; k++) cJSON_AddItemToArray(v, cJSON_CreateNumber(cap->ids[k]));
    cap->n = 0;
    p->depth++;
    v = parse_array_items(p, v);
    p->depth--;
    return v;
}

static cJSON *parse_value(jp *p) {
    ws(p);
    if (p->i >= p->n) return jfail(p, "unexpected end");
    if (++p->depth > 512) return jfail(p, "nesting deeper than 512");
    char c = p->s[p->i];
    cJSON *v = NULL;
    if (c == '{') {
        p->i++;
        v = cJSON_CreateObject();
        ws(p);
        if (p->i < p->n && p->s[p->i] == '}') { p->i++; p->depth--; return v; }
        while (1) {
            ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') { cJSON_Delete(v); return jfail(p, "expected a key string"); }
            p->i++;
            char *key = parse_str(p);
            if (!key) { cJSON_Delete(v); return NULL; }
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') { free(key); cJSON_Delete(v); return jfail(p, "expected ':'"); }
            p->i++;
            ws(p);
            bool capture = p->cap && p->depth == 1 && !p->cap->captured && !strcmp(key, p->cap->key) &&
                           !cJSON_GetObjectItemCaseSensitive(v, key) && p->i < p->n && p->s[p->i] == '[';
            cJSON *item = capture ? parse_captured_array(p) : parse_value(p);
            if (!item) { free(key); cJSON_Delete(v); return NULL; }
            cJSON_AddItemToObject(v, key, item);
            free(key);
            ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == '}') { p->i++; break; }
            cJSON_Delete(v);
            return jfail(p, "expected ',' or '}'");
        }
    } else if (c == '[') {
        p->i++;
        v = cJSON_CreateArray();
        ws(p);
        if (p->i < p->n && p->s[p->i] == ']') { p->i++; p->depth--; return v; }
        if (!parse_array_items(p, v)) return NULL;
    } else if (c == '"') {
        p->i++;
        char *s = parse_str(p);
        if (!s) return NULL;
        v = cJSON_CreateString(s);
        free(s);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        v = parse_number(p);
    } else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "true", 4)) {
        p->i += 4; v = cJSON_CreateTrue();
    } else if (p->n - p->i >= 5 && !memcmp(p->s + p->i, "false", 5)) {
        p->i += 5; v = cJSON_CreateFalse();
    } else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "null", 4)) {
        p->i += 4; v = cJSON_CreateNull();
    } else {
        return jfail(p, "unexpected character");
    }
    p->depth--;
    return v;
}

size_t ds_json_nul_restore(char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == DS_JSON_NUL[0] && i + 1 < len && s[i + 1] == DS_JSON_NUL[1]) {
            s[o++] = 0;
            i++;
        } else {
            s[o++] = s[i];
        }
    }
    if (o < len) s[o] = 0;
    return o;
}

cJSON *ds_json_parse_exact(const char *text, size_t len, ds_error *err) {
    return ds_json_parse_capture(text, len, NULL, err);
}

cJSON *ds_json_parse_capture(const char *text, size_t len, ds_json_capture *cap, ds_error *err) {
    if (cap) cap->captured = false, cap->n = 0;
    jp p = {text, len, 0, 0, err, false, cap};
    cJSON *v = parse_value(&p);
    if (!v) return NULL;
    ws(&p);
    if (p.i != len) { cJSON_Delete(v); jfail(&p, "trailing characters after the value"); return NULL; }
    return v;
}
