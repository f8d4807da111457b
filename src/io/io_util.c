/* Implementation of the io helpers (see io_util.h for why they exist). */
#define _GNU_SOURCE
#include "io/io_util.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int ds_io_fail(ds_error *err, const char *code, const char *file, const char *tensor, const char *fmt, ...) {
    if (!err) return -1;
    char body[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (tensor && tensor[0])
        return ds_fail(err, code, "%s: %s: %s: %s", code, file ? file : "?", tensor, body);
    return ds_fail(err, code, "%s: %s: %s", code, file ? file : "?", body);
}

int ds_io_safe_relpath(const char *p) {
    if (!p || !p[0] || p[0] == '/') return 0;
    const char *s = p;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
        if (!e) break;
        s = e + 1;
    }
    return 1;
}

int ds_io_json_int(const cJSON *it, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0) return 0;
    int64_t x = (int64_t)v;
    if (x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

int64_t ds_io_json_int_or(const cJSON *it, int64_t lo, int64_t hi, int64_t def) {
    int64_t x;
    return ds_io_json_int(it, lo, hi, &x) ? x : def;
}

const char *ds_io_shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

const char *ds_io_json_brief(char *buf, size_t n, const cJSON *it) {
    if (!it) snprintf(buf, n, "nothing (key absent)");
    else if (cJSON_IsString(it)) snprintf(buf, n, "\"%.200s\"", it->valuestring);
    else if (cJSON_IsNumber(it)) snprintf(buf, n, "%.17g", it->valuedouble);
    else if (cJSON_IsBool(it)) snprintf(buf, n, "%s", cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNull(it)) snprintf(buf, n, "null");
    else if (cJSON_IsArray(it)) snprintf(buf, n, "an array of %d items", cJSON_GetArraySize(it));
    else if (cJSON_IsObject(it)) snprintf(buf, n, "an object");
    else snprintf(buf, n, "an invalid value");
    return buf;
}
