/* The single JSON serializer of SERVING.md §11.4, and a parser that keeps number spellings.
 *
 * Why it exists: the prompt must reproduce JSON exactly as the model saw it in training —
 * separators ", " and ": ", keys in source order, raw UTF-8, integers with their exact source
 * digits (even beyond 2^53) and other numbers as the shortest round-trip double.  cJSON stores
 * numbers only as doubles, so ds_json_parse_exact builds an ordinary cJSON tree but also keeps
 * each number's source lexeme in the node's (otherwise unused) `valuestring`; cJSON_Delete frees
 * it like any string.  Plain integers of at most 15 digits carry no lexeme: their double is
 * exact and prints back with the same digits.  Trees from plain cJSON_Parse still serialise, with integral doubles
 * written as integers. */
#ifndef DS_TOKENIZER_JSON_CANON_H
#define DS_TOKENIZER_JSON_CANON_H
#include "base/common.h"
#include <cJSON.h>

/* Growable byte buffer (always NUL-terminated after the first append). */
typedef struct ds_strbuf {
    char *s;
    size_t n, cap;
} ds_strbuf;
void ds_strbuf_append(ds_strbuf *b, const char *s, size_t n);
void ds_strbuf_puts(ds_strbuf *b, const char *s);
void ds_strbuf_putc(ds_strbuf *b, char c);
void ds_strbuf_printf(ds_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Take ownership of the buffer's string (never NULL) and reset the buffer. */
char *ds_strbuf_take(ds_strbuf *b, size_t *len);
void ds_strbuf_free(ds_strbuf *b);

/* Parse exactly one JSON value (surrounding whitespace allowed) of `len` bytes.  Returns NULL
 * with err set (E_JSON, naming the byte offset) on malformed input.  Strings must be valid UTF-8;
 * \u escapes (surrogate pairs included) are decoded.  Free with cJSON_Delete. */
cJSON *ds_json_parse_exact(const char *text, size_t len, ds_error *err);
/* Large integer arrays (token ids: 5M ids are a 24 MB body) would cost two cJSON nodes' worth of
 * allocation each; a capture takes the array of one top-level member (`key`) as plain int32s
 * instead.  When captured, the tree holds an empty array for that member and the ids are in
 * ids[0..n); when any element is not a clean int32 literal the array is parsed as usual
 * (captured false).  ids is owned by the caller (free it). */
typedef struct ds_json_capture {
    const char *key;
    int32_t *ids;
    size_t n, cap;
    bool captured;
} ds_json_capture;
cJSON *ds_json_parse_capture(const char *text, size_t len, ds_json_capture *cap, ds_error *err);

/* A `\u0000` escape cannot live in a NUL-terminated cJSON string, so the parser stores it as the
 * two bytes C0 80 (never valid UTF-8, so never client text); whoever hands the text to the
 * tokenizer turns them back into a NUL byte with ds_json_nul_restore (returns the new length). */
#define DS_JSON_NUL "\xC0\x80"
size_t ds_json_nul_restore(char *s, size_t len);

/* Serialise `v` canonically.  A non-NULL `esc` applies the client-text escaping of §11.2
 * (chat.h) to every key and string value. */
struct ds_escaper;
void ds_json_write(ds_strbuf *b, const cJSON *v, const struct ds_escaper *esc);
/* A JSON string literal with the §11.4 escapes (quotes included). */
void ds_json_write_string(ds_strbuf *b, const char *s, size_t n);
/* A number from its source lexeme (integers keep their digits, `-0` → `0`; others → shortest
 * round-trip double, Python-repr layout). */
void ds_json_write_number_lexeme(ds_strbuf *b, const char *lexeme);
/* A binary64 in the non-integer layout (`1.0`, `1e-07`, `-0.0`). */
void ds_json_write_double(ds_strbuf *b, double x);

#endif
