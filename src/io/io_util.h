/* Small helpers shared by the checkpoint I/O files (safetensors, config, tensor plan, loader).
 *
 * Every loader failure has one shape, `E_CODE: <file>[: <tensor>]: expected <x>, found <y>`
 * (CHECKPOINT.md §15), and tests assert those texts, so the formatting lives in exactly one
 * function instead of being re-typed at each call site.  The path and integer helpers exist because
 * the same three questions (is this relative path safe, is this JSON number an exact integer, how
 * do I print a shape) come up in every file of this module. */
#ifndef DS_IO_UTIL_H
#define DS_IO_UTIL_H
#include "base/common.h"
#include <cJSON.h>

/* Record `CODE: file[: tensor]: <fmt...>`; returns -1.  `tensor` may be NULL. */
int ds_io_fail(ds_error *err, const char *code, const char *file, const char *tensor, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* A path taken from a JSON file must be relative, non-empty and free of ".." components
 * (CHECKPOINT.md §4).  Returns 1 when safe. */
int ds_io_safe_relpath(const char *p);

/* cJSON numbers are doubles: accept only exact integers in [lo, hi] (|v| <= 2^53).  Returns 1 on
 * success.  Larger integers (Engram multipliers) never go through here. */
int ds_io_json_int(const cJSON *it, int64_t lo, int64_t hi, int64_t *out);

/* The value of an exact integer in [lo, hi], else `def` (absent, not a number, fractional, out of
 * range).  For numbers read from a peer (a server's usage block, a prompt file) where a casting
 * `(int)valuedouble` would be undefined behaviour on 1e30. */
int64_t ds_io_json_int_or(const cJSON *it, int64_t lo, int64_t hi, int64_t def);

/* Format a shape as "[a, b, c]" into buf. */
const char *ds_io_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* Describe a JSON value briefly for "found ..." texts (type name, or the literal for scalars). */
const char *ds_io_json_brief(char *buf, size_t n, const cJSON *it);

#endif
