/* Implementation of the shared basics declared in common.h. */
#define _GNU_SOURCE
#include "base/common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ds_fail(ds_error *err, const char *code, const char *fmt, ...) {
    if (!err) return -1;
    snprintf(err->code, sizeof err->code, "%s", code ? code : "E_ERROR");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void ds_error_prefix(ds_error *err, const char *fmt, ...) {
    if (!err) return;
    char pre[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
}

void ds_error_clear(ds_error *err) {
    if (err) { err->code[0] = 0; err->msg[0] = 0; }
}

static void oom(size_t n) {
    fprintf(stderr, "dsflash: out of memory allocating %zu bytes\n", n);
    abort();
}
void *ds_xmalloc(size_t n) { void *p = malloc(n ? n : 1); if (!p) oom(n); return p; }
void *ds_xcalloc(size_t n, size_t s) { void *p = calloc(n ? n : 1, s ? s : 1); if (!p) oom(n * s); return p; }
void *ds_xrealloc(void *p, size_t n) { p = realloc(p, n ? n : 1); if (!p) oom(n); return p; }
char *ds_xstrdup(const char *s) { char *p = strdup(s ? s : ""); if (!p) oom(strlen(s)); return p; }
void *ds_amalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64) != 0) oom(n);
    return p;
}
void ds_afree(void *p) { free(p); }

static int g_level = -1;
int ds_log_level(void) {
    if (g_level < 0) {
        const char *e = getenv("DSFLASH_LOG");
        g_level = DS_LOG_INFO;
        if (e && !strcmp(e, "debug")) g_level = DS_LOG_DEBUG;
        else if (e && !strcmp(e, "warn")) g_level = DS_LOG_WARN;
        else if (e && !strcmp(e, "error")) g_level = DS_LOG_ERROR;
    }
    return g_level;
}
void ds_log_set_level(int level) { g_level = level; }
void ds_log(int level, const char *fmt, ...) {
    if (level > ds_log_level()) return;
    static const char *tag[] = {"ERROR", "WARN", "info", "debug"};
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%s] %s\n", tag[level < 0 ? 0 : level > 3 ? 3 : level], buf);
}

double ds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
