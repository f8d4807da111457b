/* The flag-table parser (see flags.h for why every command uses it). */
#include "base/flags.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int ds_parse_int_range(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s || isspace((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int ds_parse_bytes(const char *s, uint64_t *out, char *why, size_t n) {
    static const struct { const char *sfx; uint64_t mul; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000ull},
        {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"MB", 1000000ull},
        {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000ull},
        {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1000000000000ull},
    };
    const char *p = s ? s : "";
    uint64_t v = 0;
    if (!isdigit((unsigned char)*p)) {
        snprintf(why, n, "expected a size: digits with an optional K, M, G, T, KiB, MiB, GiB, TiB, KB, MB, GB or TB suffix");
        return -1;
    }
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (UINT64_MAX - 9) / 10) { snprintf(why, n, "expected a size below 2^64 bytes"); return -1; }
        v = v * 10 + (uint64_t)(*p - '0');
    }
    for (size_t i = 0; i < DS_ARRAY_LEN(units); i++) {
        if (strcasecmp(p, units[i].sfx)) continue;
        if (v > UINT64_MAX / units[i].mul) { snprintf(why, n, "expected a size below 2^64 bytes"); return -1; }
        *out = v * units[i].mul;
        return 0;
    }
    snprintf(why, n, "expected a size: digits with an optional K, M, G, T, KiB, MiB, GiB, TiB, KB, MB, GB or TB suffix");
    return -1;
}

/* The item loop behind ds_parse_ids and ds_parse_int_list: items separated by spaces, commas or
 * newlines (optionally inside [ ]), each an integer in [lo, hi] (with kilo, an optional k/K suffix
 * multiplies it by 1000), handed to put(); put returns -1 when it can take no more. */
static int parse_items(const char *s, int64_t lo, int64_t hi, const char *what, int kilo,
                       int (*put)(void *ctx, int64_t v), void *ctx, char *why, size_t why_len) {
    static const char *sep = " \t\r\n,[]";
    const char *p = s;
    int comma_pending = 1;   /* a comma before any item, or two commas in a row, leave an empty item */
    while (*p) {
        if (*p == ',') {
            if (comma_pending) {
                snprintf(why, why_len, "empty item at offset %td: expected %s in [%lld, %lld]", p - s, what,
                         (long long)lo, (long long)hi);
                return -1;
            }
            comma_pending = 1;
            p++;
            continue;
        }
        if (strchr(sep, *p)) { p++; continue; }
        comma_pending = 0;
        int w = 0;
        while (p[w] && !strchr(sep, p[w]) && w < 40) w++;
        char item[48];
        snprintf(item, sizeof item, "%.*s", w, p);
        int64_t v, mul = 1;
        size_t len = strlen(item);
        if (kilo && len > 1 && (item[len - 1] == 'k' || item[len - 1] == 'K')) item[--len] = 0, mul = 1000;
        int bad = ds_parse_int_range(item, INT64_MIN / mul, INT64_MAX / mul, &v) || (p[w] && !strchr(sep, p[w]));
        if (!bad) v *= mul;
        if (bad || v < lo || v > hi) {
            snprintf(why, why_len, "'%.*s' at offset %td: expected %s in [%lld, %lld]", w, p, p - s, what, (long long)lo,
                     (long long)hi);
            return -1;
        }
        if (put(ctx, v)) {
            snprintf(why, why_len, "'%.*s' at offset %td: too many items", w, p, p - s);
            return -1;
        }
        p += w;
    }
    return 0;
}

typedef struct { int32_t **ids; size_t *n, *cap; } ids_sink;

static int put_id(void *vctx, int64_t v) {
    ids_sink *k = vctx;
    if (*k->n == *k->cap) {
        *k->cap = *k->cap ? 2 * *k->cap : 64;
        *k->ids = ds_xrealloc(*k->ids, sizeof(int32_t) * *k->cap);
    }
    (*k->ids)[(*k->n)++] = (int32_t)v;
    return 0;
}

int ds_parse_ids(const char *s, int64_t lo, int64_t hi, const char *what, int32_t **ids, size_t *n, size_t *cap,
                 char *why, size_t why_len) {
    ids_sink k = {ids, n, cap};
    return parse_items(s, DS_MAX(lo, INT32_MIN), DS_MIN(hi, INT32_MAX), what ? what : "an integer token id", 0, put_id,
                       &k, why, why_len);
}

typedef struct { int64_t *out; int max, n; } list_sink;

static int put_list(void *vctx, int64_t v) {
    list_sink *k = vctx;
    if (k->n == k->max) return -1;
    k->out[k->n++] = v;
    return 0;
}

int ds_parse_int_list(const char *s, int64_t lo, int64_t hi, const char *what, int kilo, int64_t *out, int max,
                      char *why, size_t why_len) {
    list_sink k = {out, max, 0};
    if (parse_items(s, lo, hi, what, kilo, put_list, &k, why, why_len)) return -1;
    if (!k.n) {
        snprintf(why, why_len, "expected at least one item (%s in [%lld, %lld]), got '%s'", what, (long long)lo,
                 (long long)hi, s);
        return -1;
    }
    return k.n;
}

int ds_parse_int_ranges(const char *s, int64_t lo, int64_t hi, ds_int_range *out, int max, char *why, size_t why_len) {
    if (!strcmp(s, "none")) return 0;
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64], a[64];
        snprintf(item, sizeof item, "%.*s", (int)(len < 63 ? len : 63), p);
        const char *dash = strchr(item, '-');
        int64_t x, y;
        snprintf(a, sizeof a, "%.*s", dash ? (int)(dash - item) : (int)strlen(item), item);
        int bad = len == 0 || len > 40 || ds_parse_int_range(a, lo, hi, &x) ||
                  (dash ? ds_parse_int_range(dash + 1, lo, hi, &y) : (y = x, 0)) || y < x;
        if (bad) {
            snprintf(why, why_len, "'%s' at offset %td: expected an id or a range a-b (a <= b) within [%lld, %lld], "
                     "comma-separated, or none", item, p - s, (long long)lo, (long long)hi);
            return -1;
        }
        if (n == max) {
            snprintf(why, why_len, "'%s' at offset %td: more than %d ranges", item, p - s, max);
            return -1;
        }
        out[n++] = (ds_int_range){x, y};
        if (!end) return n;
        p = end + 1;
    }
}

static ds_flag *find(ds_flagset *fs, const char *name, size_t len) {
    for (size_t i = 0; i < fs->n; i++)
        if (strlen(fs->flags[i].name) == len && !strncmp(fs->flags[i].name, name, len)) return &fs->flags[i];
    return NULL;
}

ds_flag *ds_flag_get(ds_flagset *fs, const char *name) {
    ds_flag *f = find(fs, name, strlen(name));
    if (!f) {
        fprintf(stderr, "internal error: %s has no flag %s\n", fs->cmd, name);
        abort();
    }
    return f;
}
int64_t ds_flag_int(ds_flagset *fs, const char *name) { return ds_flag_get(fs, name)->i; }
double ds_flag_double(ds_flagset *fs, const char *name) { return ds_flag_get(fs, name)->d; }
const char *ds_flag_str(ds_flagset *fs, const char *name) { return ds_flag_get(fs, name)->text; }
bool ds_flag_on(ds_flagset *fs, const char *name) { return ds_flag_get(fs, name)->i != 0; }
bool ds_flag_given(ds_flagset *fs, const char *name) { return ds_flag_get(fs, name)->given; }

int ds_flags_fail(const ds_flagset *fs, const char *flag, const char *fmt, ...) {
    fprintf(stderr, "%s: %s: ", fs->cmd, flag);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

/* "expected …" for a row, without the value. */
static void expectation(const ds_flag *f, char *buf, size_t n) {
    switch (f->type) {
    case DS_FLAG_INT:
        if (f->lo || f->hi) snprintf(buf, n, "expected an integer in [%lld, %lld]", (long long)f->lo, (long long)f->hi);
        else snprintf(buf, n, "expected a non-negative integer");
        break;
    case DS_FLAG_SIZE:
        if (f->lo || f->hi) snprintf(buf, n, "expected a size in [%lld, %lld] bytes (suffixes K, M, G, T, KiB.., KB..)",
                                     (long long)f->lo, (long long)f->hi);
        else snprintf(buf, n, "expected a size of at least 1 byte (suffixes K, M, G, T, KiB.., KB..)");
        break;
    case DS_FLAG_DOUBLE: snprintf(buf, n, "expected a number in %c%g, %g]", f->lo_open ? '(' : '[', f->dlo, f->dhi); break;
    case DS_FLAG_STRING: snprintf(buf, n, "expected a non-empty value"); break;
    case DS_FLAG_SWITCH: snprintf(buf, n, "takes no value"); break;
    case DS_FLAG_ENUM: {
        size_t k = (size_t)snprintf(buf, n, "expected ");
        const char *c = f->choices;
        int idx = 0, total = 1;
        for (const char *q = c; *q; q++) total += *q == '|';
        while (*c && k < n) {
            const char *bar = strchr(c, '|');
            size_t len = bar ? (size_t)(bar - c) : strlen(c);
            k += (size_t)snprintf(buf + k, n - k, "%s%.*s", idx == 0 ? "" : idx == total - 1 ? " or " : ", ", (int)len, c);
            idx++;
            c += len + (bar ? 1 : 0);
        }
        break;
    }
    }
}

/* Parse `text` into f (no messages); 0 ok. */
static int parse_value(ds_flag *f, const char *text) {
    char why[160];
    switch (f->type) {
    case DS_FLAG_INT: {
        int64_t lo = f->lo, hi = f->hi;
        if (!lo && !hi) hi = INT64_MAX;
        return ds_parse_int_range(text, lo, hi, &f->i);
    }
    case DS_FLAG_SIZE: {
        uint64_t v;
        if (ds_parse_bytes(text, &v, why, sizeof why) || v > (uint64_t)INT64_MAX) return -1;
        if ((f->lo || f->hi) ? ((int64_t)v < f->lo || (int64_t)v > f->hi) : v < 1) return -1;
        f->i = (int64_t)v;
        return 0;
    }
    case DS_FLAG_DOUBLE: {
        char *end;
        errno = 0;
        double x = strtod(text, &end);
        if (!*text || *end || errno || !isfinite(x) || x > f->dhi || x < f->dlo || (f->lo_open && x == f->dlo)) return -1;
        f->d = x;
        return 0;
    }
    case DS_FLAG_STRING: return *text ? 0 : -1;
    case DS_FLAG_SWITCH: f->i = 1; return 0;
    case DS_FLAG_ENUM: {
        const char *c = f->choices;
        for (int idx = 0; *c; idx++) {
            const char *bar = strchr(c, '|');
            size_t len = bar ? (size_t)(bar - c) : strlen(c);
            if (strlen(text) == len && !strncmp(text, c, len)) {
                f->i = idx;
                return 0;
            }
            c += len + (bar ? 1 : 0);
        }
        return -1;
    }
    }
    return -1;
}

/* `name` is the option as typed (an alias names itself), `f` the row whose rules apply. */
static int bad_value(ds_flagset *fs, FILE *err, const char *name, const ds_flag *f, const char *text, const char *reason) {
    char exp[512];
    expectation(f, exp, sizeof exp);
    if (reason && f->def) fprintf(err, "%s: %s: expected %s (%s), got '%s'\n", fs->cmd, name, f->def, reason, text);
    else if (reason) fprintf(err, "%s: %s: not accepted (%s), got '%s'\n", fs->cmd, name, reason, text);
    else fprintf(err, "%s: %s: %s, got '%s'\n", fs->cmd, name, exp, text);
    ds_flags_usage(fs, err);
    return 2;
}

static int usage_error(ds_flagset *fs, FILE *err, const char *fmt, const char *a, const char *b) {
    fprintf(err, "%s: ", fs->cmd);
    fprintf(err, fmt, a, b);
    fputc('\n', err);
    ds_flags_usage(fs, err);
    return 2;
}

/* Does the value just parsed into f equal its default (compared as values: "01" is 1)? */
static bool equals_default(const ds_flag *f, const char *text) {
    if (!f->def) return false;
    ds_flag d = *f;
    if (parse_value(&d, f->def)) return false;
    if (f->type == DS_FLAG_STRING) return !strcmp(text, f->def);
    return f->type == DS_FLAG_DOUBLE ? d.d == f->d : d.i == f->i;
}

/* Assign one given value to its row (or the row it aliases). */
static int take(ds_flagset *fs, FILE *err, ds_flag *f, const char *text) {
    ds_flag *dst = f->alias_of ? ds_flag_get(fs, f->alias_of) : f;
    if (dst->list && dst->n_list >= dst->list_cap) {
        fprintf(err, "%s: %s: given more than %d times (the most this command takes), got '%s'\n", fs->cmd, f->name,
                dst->list_cap, text);
        ds_flags_usage(fs, err);
        return 2;
    }
    if (dst->given && !dst->list && strcmp(dst->text, text)) {
        fprintf(err, "%s: %s: given twice with different values ('%s', then '%s'; aliases count as the same flag)\n", fs->cmd,
                f->name, dst->text, text);
        ds_flags_usage(fs, err);
        return 2;
    }
    if (parse_value(dst, text)) return bad_value(fs, err, f->name, dst, text, NULL);
    if (dst->refuse && !equals_default(dst, text)) return bad_value(fs, err, f->name, dst, text, dst->refuse);
    dst->text = text;
    dst->given = true;
    if (dst->list) dst->list[dst->n_list++] = text;
    if (f != dst) {
        f->text = text;
        f->given = true;
    }
    return 0;
}

int ds_flags_parse(ds_flagset *fs, int argc, char **argv, int first, FILE *err) {
    fs->n_positional = 0;
    for (size_t i = 0; i < fs->n; i++) {
        ds_flag *f = &fs->flags[i];
        f->given = false;
        f->text = f->alias_of ? NULL : f->def;
        f->i = 0;
        f->d = 0;
        f->n_list = 0;
        if (f->def && !f->alias_of && parse_value(f, f->def)) {
            fprintf(err, "internal error: %s: default '%s' of %s is invalid\n", fs->cmd, f->def, f->name);
            return 2;
        }
    }
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            ds_flags_usage(fs, stdout);
            return 1;
        }
        if (strncmp(a, "--", 2) || !a[2]) {
            if (a[0] == '-' && a[1])
                return usage_error(fs, err, "%s: unknown option (long options only, exact names)%s", a, "");
            if (fs->n_positional >= fs->max_positional || fs->n_positional >= (int)DS_ARRAY_LEN(fs->positional)) {
                char why[96] = "";
                if (fs->max_positional)
                    snprintf(why, sizeof why, " (at most %d %s)", fs->max_positional,
                             fs->positional_name ? fs->positional_name : "positional argument");
                return usage_error(fs, err, "unexpected argument '%s'%s", a, why);
            }
            fs->positional[fs->n_positional++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        ds_flag *f = find(fs, a, eq ? (size_t)(eq - a) : strlen(a));
        if (!f) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
            return usage_error(fs, err, "%s: unknown option (long options must match exactly)%s", name, "");
        }
        const char *text;
        if (f->type == DS_FLAG_SWITCH) {
            if (eq) return usage_error(fs, err, "%s takes no value, got '%s'", f->name, eq + 1);
            text = "on";
        } else if (eq) {
            text = eq + 1;
        } else {
            if (i + 1 >= argc) return usage_error(fs, err, "%s needs a value%s", f->name, "");
            text = argv[++i];
        }
        int rc = take(fs, err, f, text);
        if (rc) return rc;
    }
    return 0;
}

void ds_flags_usage(const ds_flagset *fs, FILE *out) {
    fprintf(out, "%s\nflags (long options only, exact names; --name VALUE or --name=VALUE):\n", fs->usage);
    for (size_t i = 0; i < fs->n; i++) {
        const ds_flag *f = &fs->flags[i];
        char exp[512] = "";
        if (f->type != DS_FLAG_SWITCH && f->type != DS_FLAG_STRING) expectation(f, exp, sizeof exp);
        const char *e = !strncmp(exp, "expected ", 9) ? exp + 9 : exp;
        const char *sep = "";
        fprintf(out, "  %-32s", f->name);
        if (f->help) fprintf(out, " %s", f->help), sep = ";";
        if (f->alias_of) fprintf(out, "%s alias of %s", sep, f->alias_of), sep = ";";
        if (*e) fprintf(out, "%s %s", sep, e), sep = ";";
        if (f->def && f->type != DS_FLAG_SWITCH) fprintf(out, "%s default %s", sep, f->def);
        if (f->list) fprintf(out, "%s repeatable, up to %d times", sep, f->list_cap), sep = ";";
        if (f->refuse && f->def) fprintf(out, " (only %s: %s)", f->def, f->refuse);
        else if (f->refuse) fprintf(out, " (refused: %s)", f->refuse);
        fputc('\n', out);
    }
}
