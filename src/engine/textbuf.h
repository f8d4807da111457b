/* A growable byte buffer for the engine and server (always NUL-terminated once used).
 *
 * Why not the tokenizer's ds_strbuf: the engine sits below the tokenizer in the dependency
 * order (server -> engine -> model), so it carries its own few lines instead of reaching up. */
#ifndef DS_ENGINE_TEXTBUF_H
#define DS_ENGINE_TEXTBUF_H
#include "base/common.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ds_tbuf {
    char *s;
    size_t n, cap;
} ds_tbuf;

static inline void ds_tbuf_reserve(ds_tbuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    b->s = ds_xrealloc(b->s, cap);
    b->cap = cap;
}
static inline void ds_tbuf_append(ds_tbuf *b, const char *s, size_t n) {
    ds_tbuf_reserve(b, n);
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static inline void ds_tbuf_puts(ds_tbuf *b, const char *s) { ds_tbuf_append(b, s, strlen(s)); }
static inline void ds_tbuf_printf(ds_tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void ds_tbuf_printf(ds_tbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    ds_tbuf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}
static inline void ds_tbuf_clear(ds_tbuf *b) {
    b->n = 0;
    if (b->s) b->s[0] = 0;
}
static inline void ds_tbuf_free(ds_tbuf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}
#endif
