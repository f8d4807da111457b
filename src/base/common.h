/* Shared basics for every module: the error record that carries a precise, user-facing message
 * (file, field, value, limit), checked allocation, and logging.  Errors are values, not exits, so
 * library code never terminates the process; only the CLI layer turns an error into an exit code. */
#ifndef DS_BASE_COMMON_H
#define DS_BASE_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdarg.h>

#define DS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DS_MAX(a, b) ((a) > (b) ? (a) : (b))

/* An error: a stable machine code (e.g. "E_SHAPE_MISMATCH") and the full human message. */
typedef struct ds_error {
    char code[40];
    char msg[1024];
} ds_error;

/* Record an error; returns -1 so callers can `return ds_fail(err, ...)`.  `err` may be NULL. */
int ds_fail(ds_error *err, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix an existing message with context ("while loading X: ..."). */
void ds_error_prefix(ds_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ds_error_clear(ds_error *err);

/* Allocation that aborts on out-of-memory (the only acceptable reaction inside hot code). */
void *ds_xmalloc(size_t n);
void *ds_xcalloc(size_t n, size_t size);
void *ds_xrealloc(void *p, size_t n);
char *ds_xstrdup(const char *s);
/* 64-byte aligned allocation (SIMD tiles, activations); free with ds_afree. */
void *ds_amalloc(size_t n);
void ds_afree(void *p);

/* Logging to stderr.  Levels: 0 error, 1 warn, 2 info, 3 debug.  DSFLASH_LOG=debug raises it. */
enum { DS_LOG_ERROR = 0, DS_LOG_WARN = 1, DS_LOG_INFO = 2, DS_LOG_DEBUG = 3 };
void ds_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ds_log_set_level(int level);
int ds_log_level(void);

/* Monotonic wall clock in seconds. */
double ds_now(void);

#endif
