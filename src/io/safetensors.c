/* safetensors reader and writer (CHECKPOINT.md §3, loader checklist items 8–12).
 *
 * Reader: the whole file is mapped read-only once and every tensor is a view into the mapping, so
 * opening a 98 GB Engram table costs a header parse, not a read.  All structural rules are checked
 * before any view is handed out, in a fixed order — header length, JSON shape of every entry,
 * byte counts and overlaps, and only then the file-length check — so that a truncated file is
 * reported as E_SHARD_TRUNCATED even though its last ranges also fall outside the data section.
 * The header is parsed with cJSON; cJSON keeps duplicate keys as separate children, which lets us
 * detect them after sorting.  Offsets above 2^53 cannot be represented exactly by cJSON and are
 * refused (no real file comes near that).  An unaligned tensor is copied once into an aligned
 * buffer and reported as W_DATA_LAYOUT, never silently used through a misaligned pointer.
 *
 * Writer: entries are collected, then placed by descending item size so that every tensor is
 * aligned with no padding between ranges; the header is written by hand (cJSON would print large
 * offsets in exponent notation) and padded with spaces, either to an 8-byte data start or to an
 * exact forced size (the Engram table layout, data at byte 112).  Output goes through ds_afile, so
 * a failed write never leaves a partial file under the final name. */
#define _GNU_SOURCE
#include "io/safetensors.h"
#include "io/io_util.h"
#include "base/fsutil.h"
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_HEADER_LIMIT 100000000ull

/* bits per element (F4: the safetensors 4-bit float, two per byte) */
static const struct { const char *name; int bits; } g_dtypes[DS_DT_COUNT] = {
    [DS_DT_F32] = {"F32", 32},    [DS_DT_F16] = {"F16", 16},      [DS_DT_BF16] = {"BF16", 16},
    [DS_DT_I8] = {"I8", 8},       [DS_DT_U8] = {"U8", 8},         [DS_DT_F8_E4M3] = {"F8_E4M3", 8},
    [DS_DT_F8_E8M0] = {"F8_E8M0", 8}, [DS_DT_F64] = {"F64", 64},  [DS_DT_I16] = {"I16", 16},
    [DS_DT_U16] = {"U16", 16},    [DS_DT_I32] = {"I32", 32},      [DS_DT_U32] = {"U32", 32},
    [DS_DT_I64] = {"I64", 64},    [DS_DT_U64] = {"U64", 64},      [DS_DT_BOOL] = {"BOOL", 8},
    [DS_DT_F8_E5M2] = {"F8_E5M2", 8}, [DS_DT_F4] = {"F4", 4},
};

const char *ds_dtype_name(ds_dtype t) { return (unsigned)t < DS_DT_COUNT ? g_dtypes[t].name : "?"; }
int ds_dtype_bits(ds_dtype t) { return (unsigned)t < DS_DT_COUNT ? g_dtypes[t].bits : 0; }
int ds_dtype_size(ds_dtype t) { return (ds_dtype_bits(t) + 7) / 8; }
uint64_t ds_dtype_nbytes(ds_dtype t, uint64_t numel) {
    const uint64_t bits = (uint64_t)ds_dtype_bits(t);
    if (bits >= 8) return numel * (bits / 8);
    return bits && numel % (8 / bits) == 0 ? numel / (8 / bits) : UINT64_MAX;
}
bool ds_dtype_is_float(ds_dtype t) { return t == DS_DT_F32 || t == DS_DT_F16 || t == DS_DT_BF16 || t == DS_DT_F64; }
int ds_dtype_parse(const char *name, ds_dtype *out) {
    for (int i = 0; i < DS_DT_COUNT; i++)
        if (name && !strcmp(name, g_dtypes[i].name)) { *out = (ds_dtype)i; return 0; }
    return -1;
}

size_t ds_st_release(const ds_stfile *f, const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p, m0 = (uintptr_t)f->map, m1 = m0 + (uintptr_t)f->file_size;
    if (!f->map || a < m0 || a + n > m1 || !n) return 0;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = (a + page - 1) & ~(page - 1), hi = (a + n) & ~(page - 1);
    if (hi <= lo) return 0;
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    (void)posix_fadvise(f->fd, (off_t)(lo - m0), (off_t)(hi - lo), POSIX_FADV_DONTNEED);
    return hi - lo;
}

int64_t ds_tensor_numel(const ds_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Reader                                                                                     */

static void st_warn(ds_stfile *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void st_warn(ds_stfile *f, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    f->warnings = ds_xrealloc(f->warnings, sizeof(char *) * (size_t)(f->n_warnings + 1));
    f->warnings[f->n_warnings++] = ds_xstrdup(buf);
    ds_log(DS_LOG_WARN, "%s", buf);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const ds_tensor *)a)->name, ((const ds_tensor *)b)->name);
}
static int cmp_by_begin(const void *a, const void *b, void *base) {
    const ds_tensor *t = base, *x = &t[*(const int *)a], *y = &t[*(const int *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Parse one header entry into t (name already set). */
static int parse_entry(const char *path, const cJSON *v, ds_tensor *t, ds_error *err) {
    char b1[256];
    if (!cJSON_IsObject(v))
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "expected an object with dtype, shape, data_offsets, found %s",
                          ds_io_json_brief(b1, sizeof b1, v));
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    if (!cJSON_IsString(dt))
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "dtype: expected a string, found %s", ds_io_json_brief(b1, sizeof b1, dt));
    if (ds_dtype_parse(dt->valuestring, &t->dtype))
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name,
                          "dtype: expected one of F32 F16 BF16 I8 U8 F8_E4M3 F8_E8M0 F64 I16 U16 I32 U32 I64 U64 BOOL F8_E5M2 F4, found \"%.64s\"",
                          dt->valuestring);
    if (!cJSON_IsArray(sh))
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "shape: expected an array of integers, found %s", ds_io_json_brief(b1, sizeof b1, sh));
    int nd = cJSON_GetArraySize(sh);
    if (nd > DS_MAX_DIMS)
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "shape: expected at most %d dimensions, found %d", DS_MAX_DIMS, nd);
    t->ndim = nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        int64_t d;
        const cJSON *e = cJSON_GetArrayItem(sh, i);
        if (!ds_io_json_int(e, 0, INT64_MAX, &d))
            return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "shape[%d]: expected a non-negative integer, found %s", i,
                              ds_io_json_brief(b1, sizeof b1, e));
        t->shape[i] = d;
        if (d && numel > UINT64_MAX / (uint64_t)d)
            return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "shape: expected an element count below 2^64, found an overflow");
        numel *= (uint64_t)d;
    }
    int64_t b, e;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !ds_io_json_int(cJSON_GetArrayItem(of, 0), 0, INT64_MAX, &b) ||
        !ds_io_json_int(cJSON_GetArrayItem(of, 1), 0, INT64_MAX, &e))
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "data_offsets: expected [begin, end] non-negative integers, found %s",
                          ds_io_json_brief(b1, sizeof b1, of));
    const int bits = ds_dtype_bits(t->dtype);
    if (b > e)
        return ds_io_fail(err, "E_OFFSETS_RANGE", path, t->name, "expected begin <= end, found data_offsets [%" PRId64 ", %" PRId64 "]", b, e);
    if (bits < 8 && numel % (uint64_t)(8 / bits))
        return ds_io_fail(err, "E_HEADER_PARSE", path, t->name, "shape: expected a whole number of bytes (%d elements of %s per byte), found %" PRIu64 " elements",
                          8 / bits, ds_dtype_name(t->dtype), numel);
    const uint64_t isz = bits >= 8 ? (uint64_t)(bits / 8) : 1, want = numel > UINT64_MAX / isz ? UINT64_MAX : ds_dtype_nbytes(t->dtype, numel);
    if (want == UINT64_MAX || (uint64_t)(e - b) != want) {
        char per[32];
        if (bits >= 8) snprintf(per, sizeof per, "%" PRIu64 " bytes", isz);
        else snprintf(per, sizeof per, "%d bits", bits);
        return ds_io_fail(err, "E_OFFSETS_RANGE", path, t->name,
                          "expected end - begin = %" PRIu64 " elements x %s = %" PRIu64 ", found %" PRId64
                          " (data_offsets [%" PRId64 ", %" PRId64 "])",
                          numel, per, want, e - b, b, e);
    }
    t->begin = (uint64_t)b;
    t->nbytes = (uint64_t)(e - b);
    return 0;
}

static int parse_header(ds_stfile *f, const char *text, size_t n, ds_error *err) {
    const char *path = f->path, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t at = cJSON_GetErrorPtr() && cJSON_GetErrorPtr() >= text ? (size_t)(cJSON_GetErrorPtr() - text) : 0;
        return ds_io_fail(err, "E_HEADER_PARSE", path, NULL, "expected a JSON object as header, found invalid JSON near byte %zu of %zu", at, n);
    }
    for (const char *p = end; p && p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return ds_io_fail(err, "E_HEADER_PARSE", path, NULL, "expected only space padding after the JSON object, found byte 0x%02x at header offset %zu",
                              (unsigned char)*p, (size_t)(p - text));
        }
    if (!cJSON_IsObject(root)) {
        char b1[128];
        ds_io_json_brief(b1, sizeof b1, root);
        cJSON_Delete(root);
        return ds_io_fail(err, "E_HEADER_PARSE", path, NULL, "expected a JSON object as header, found %s", b1);
    }
    int cnt = 0, rc = 0;
    for (cJSON *it = root->child; it; it = it->next) cnt++;
    f->tensors = ds_xcalloc((size_t)cnt, sizeof(ds_tensor));
    for (cJSON *it = root->child; it; it = it->next) {
        if (!strcmp(it->string, "__metadata__")) {
            if (f->metadata_json) { rc = ds_io_fail(err, "E_HEADER_PARSE", path, "__metadata__", "expected one __metadata__ entry, found a duplicate"); break; }
            if (!cJSON_IsObject(it)) { rc = ds_io_fail(err, "E_HEADER_PARSE", path, "__metadata__", "expected an object of strings, found another type"); break; }
            for (cJSON *m = it->child; m; m = m->next)
                if (!cJSON_IsString(m)) { rc = ds_io_fail(err, "E_HEADER_PARSE", path, "__metadata__", "%s: expected a string value, found another type", m->string); break; }
            if (rc) break;
            f->metadata_json = cJSON_PrintUnformatted(it);
            continue;
        }
        ds_tensor *t = &f->tensors[f->n_tensors++];
        t->name = ds_xstrdup(it->string);
        t->file = f;
        if ((rc = parse_entry(path, it, t, err))) break;
    }
    cJSON_Delete(root);
    if (rc) return rc;
    qsort(f->tensors, (size_t)f->n_tensors, sizeof(ds_tensor), cmp_tensor_name);
    for (int i = 1; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name))
            return ds_io_fail(err, "E_HEADER_PARSE", path, f->tensors[i].name, "expected unique tensor names, found a duplicate key");
    return 0;
}

/* Ranges: overlaps (error), truncation (error), gaps/trailing bytes and alignment (warnings). */
static int check_ranges(ds_stfile *f, ds_error *err) {
    int n = f->n_tensors;
    uint64_t data_size = f->file_size - f->data_start;
    int *ord = ds_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) ord[i] = i;
    qsort_r(ord, (size_t)n, sizeof(int), cmp_by_begin, f->tensors);
    const ds_tensor *prev = NULL;
    uint64_t max_end = 0;
    const ds_tensor *max_t = NULL;
    for (int k = 0; k < n; k++) {
        const ds_tensor *t = &f->tensors[ord[k]];
        if (!t->nbytes && t->begin > data_size) {   /* empty, but its view would point past the file */
            free(ord);
            return ds_io_fail(err, "E_OFFSETS_RANGE", f->path, t->name,
                              "expected an empty tensor's offsets within the data section (<= %" PRIu64 " bytes), found data_offsets [%" PRIu64
                              ", %" PRIu64 "]", data_size, t->begin, t->begin);
        }
        if (!t->nbytes) continue;
        if (prev && t->begin < prev->begin + prev->nbytes) {
            int rc = ds_io_fail(err, "E_OFFSETS_RANGE", f->path, t->name,
                                "expected no overlap, found range [%" PRIu64 ", %" PRIu64 ") overlapping %s [%" PRIu64 ", %" PRIu64 ")",
                                t->begin, t->begin + t->nbytes, prev->name, prev->begin, prev->begin + prev->nbytes);
            free(ord);
            return rc;
        }
        if (t->begin + t->nbytes > max_end) { max_end = t->begin + t->nbytes; max_t = t; }
        prev = t;
    }
    if (max_end > data_size) {
        free(ord);
        return ds_io_fail(err, "E_SHARD_TRUNCATED", f->path, max_t->name,
                          "expected file size >= %" PRIu64 " (8 + header %" PRIu64 " + data end %" PRIu64 "), found %" PRIu64,
                          f->data_start + max_end, f->header_len, max_end, f->file_size);
    }
    /* Writers cover the data section contiguously; anything else is suspicious but legal. */
    uint64_t cursor = 0;
    for (int k = 0; k < n; k++) {
        const ds_tensor *t = &f->tensors[ord[k]];
        if (!t->nbytes) continue;
        if (t->begin > cursor)
            st_warn(f, "W_DATA_LAYOUT: %s: %s: expected contiguous data, found a gap of %" PRIu64 " bytes before it", f->path, t->name,
                    t->begin - cursor);
        cursor = t->begin + t->nbytes;
    }
    if (cursor < data_size)
        st_warn(f, "W_DATA_LAYOUT: %s: expected the last range to end the file, found %" PRIu64 " trailing bytes", f->path, data_size - cursor);
    free(ord);
    return 0;
}

int ds_st_open(const char *path, ds_stfile **out, ds_error *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return ds_io_fail(err, e == ENOENT ? "E_MISSING_FILE" : "E_IO", path, NULL, "expected a readable safetensors file, found %s", strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ds_io_fail(err, "E_IO", path, NULL, "expected a regular file, found %s", S_ISDIR(st.st_mode) ? "a directory" : "something else");
    }
    ds_stfile *f = ds_xcalloc(1, sizeof *f);
    f->path = ds_xstrdup(path);
    f->fd = fd;
    f->file_size = (uint64_t)st.st_size;
    int rc = -1;
    if (f->file_size < 8) {
        rc = ds_io_fail(err, "E_SHARD_TRUNCATED", path, NULL, "expected at least 8 bytes (header length), found %" PRIu64, f->file_size);
        goto fail;
    }
    void *m = mmap(NULL, f->file_size, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED) {
        rc = ds_io_fail(err, "E_IO", path, NULL, "expected a memory mapping of %" PRIu64 " bytes, found mmap error: %s", f->file_size, strerror(errno));
        goto fail;
    }
    f->map = m;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)f->map[i] << (8 * i);
    if (n > ST_HEADER_LIMIT || 8 + n > f->file_size) {
        rc = ds_io_fail(err, "E_HEADER_TOO_LARGE", path, NULL, "expected header length N <= %llu and 8 + N <= file size %" PRIu64 ", found N = %" PRIu64,
                        ST_HEADER_LIMIT, f->file_size, n);
        goto fail;
    }
    f->header_len = n;
    f->data_start = 8 + n;
    if ((rc = parse_header(f, (const char *)f->map + 8, (size_t)n, err))) goto fail;
    if ((rc = check_ranges(f, err))) goto fail;
    for (int i = 0; i < f->n_tensors; i++) {
        ds_tensor *t = &f->tensors[i];
        const uint8_t *p = f->map + f->data_start + t->begin;
        int isz = ds_dtype_size(t->dtype);
        if (t->nbytes && ((uintptr_t)p % (uintptr_t)isz) != 0) {
            void *copy = ds_amalloc(t->nbytes);
            memcpy(copy, p, t->nbytes);
            f->copies = ds_xrealloc(f->copies, sizeof(void *) * (size_t)(f->n_copies + 1));
            f->copies[f->n_copies++] = copy;
            st_warn(f, "W_DATA_LAYOUT: %s: %s: expected an absolute offset that is a multiple of %d, found %" PRIu64 " (copied to an aligned buffer)",
                    path, t->name, isz, f->data_start + t->begin);
            t->data = copy;
        } else {
            t->data = p;
        }
    }
    *out = f;
    return 0;
fail:
    ds_st_close(f);
    return rc;
}

void ds_st_close(ds_stfile *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->file_size);
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n_tensors; i++) free((void *)f->tensors[i].name);
    for (int i = 0; i < f->n_warnings; i++) free(f->warnings[i]);
    for (int i = 0; i < f->n_copies; i++) ds_afree(f->copies[i]);
    free(f->warnings);
    free(f->copies);
    free(f->tensors);
    if (f->metadata_json) cJSON_free(f->metadata_json);
    free(f->path);
    free(f);
}

const ds_tensor *ds_st_find(const ds_stfile *f, const char *name) {
    if (!f || !name) return NULL;
    ds_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof(ds_tensor), cmp_tensor_name);
}

/* ------------------------------------------------------------------------------------------ */
/* Writer                                                                                     */

typedef struct stw_entry {
    char *name;
    ds_dtype dt;
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    uint64_t nbytes, begin;
    const void *data;  /* borrowed or owned (see owned) */
    void *owned;
    ds_stw_fill_fn fill;
    void *fill_ctx;
} stw_entry;

struct ds_stwriter {
    int n, cap;
    stw_entry *e;
    int n_meta;
    char **meta_k, **meta_v;
    uint64_t header_size; /* 0 = pad to 8 */
    int bad;              /* an add was invalid (reported at finish) */
    char bad_msg[256];
};

ds_stwriter *ds_stw_new(void) { return ds_xcalloc(1, sizeof(ds_stwriter)); }

static stw_entry *stw_push(ds_stwriter *w, const char *name, ds_dtype dt, int ndim, const int64_t *shape) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->e = ds_xrealloc(w->e, sizeof(stw_entry) * (size_t)w->cap);
    }
    stw_entry *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    e->name = ds_xstrdup(name);
    e->dt = dt;
    if (ndim < 0 || ndim > DS_MAX_DIMS || (unsigned)dt >= DS_DT_COUNT) {
        if (!w->bad) snprintf(w->bad_msg, sizeof w->bad_msg, "%s: invalid dtype or ndim %d", name, ndim);
        w->bad = 1;
        ndim = 0;
    }
    e->ndim = ndim;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            if (!w->bad) snprintf(w->bad_msg, sizeof w->bad_msg, "%s: negative dimension", name);
            w->bad = 1;
        }
        e->shape[i] = shape[i];
        numel *= (uint64_t)(shape[i] < 0 ? 0 : shape[i]);
    }
    e->nbytes = ds_dtype_nbytes(dt, numel);
    if (e->nbytes == UINT64_MAX) {
        if (!w->bad) snprintf(w->bad_msg, sizeof w->bad_msg, "%s: %s needs an even element count", name, ds_dtype_name(dt));
        w->bad = 1;
        e->nbytes = 0;
    }
    return e;
}

void ds_stw_add(ds_stwriter *w, const char *name, ds_dtype dt, int ndim, const int64_t *shape, const void *data, int borrow) {
    stw_entry *e = stw_push(w, name, dt, ndim, shape);
    if (!data) return;
    if (borrow) e->data = data;
    else if (e->nbytes) {
        e->owned = ds_xmalloc(e->nbytes);
        memcpy(e->owned, data, e->nbytes);
        e->data = e->owned;
    }
}

void ds_stw_add_fill(ds_stwriter *w, const char *name, ds_dtype dt, int ndim, const int64_t *shape, ds_stw_fill_fn fill, void *ctx) {
    stw_entry *e = stw_push(w, name, dt, ndim, shape);
    e->fill = fill;
    e->fill_ctx = ctx;
}

void ds_stw_set_metadata(ds_stwriter *w, const char *key, const char *value) {
    for (int i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta_k[i], key)) { free(w->meta_v[i]); w->meta_v[i] = ds_xstrdup(value); return; }
    w->meta_k = ds_xrealloc(w->meta_k, sizeof(char *) * (size_t)(w->n_meta + 1));
    w->meta_v = ds_xrealloc(w->meta_v, sizeof(char *) * (size_t)(w->n_meta + 1));
    w->meta_k[w->n_meta] = ds_xstrdup(key);
    w->meta_v[w->n_meta++] = ds_xstrdup(value);
}

void ds_stw_set_header_size(ds_stwriter *w, uint64_t n) { w->header_size = n; }

uint64_t ds_stw_data_bytes(const ds_stwriter *w) {
    uint64_t s = 0;
    for (int i = 0; i < w->n; i++) s += w->e[i].nbytes;
    return s;
}

void ds_stw_free(ds_stwriter *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) { free(w->e[i].name); free(w->e[i].owned); }
    for (int i = 0; i < w->n_meta; i++) { free(w->meta_k[i]); free(w->meta_v[i]); }
    free(w->meta_k); free(w->meta_v); free(w->e);
    free(w);
}

/* Growing string buffer for the header text. */
typedef struct { char *p; size_t n, cap; } sbuf;
static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->p = ds_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)k);
}
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char t[2] = {'\\', (char)c}; sb_put(b, t, 2); }
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, "\"", 1);
}

static int cmp_layout(const void *a, const void *b) {
    const stw_entry *x = *(stw_entry *const *)a, *y = *(stw_entry *const *)b;
    int sx = ds_dtype_size(x->dt), sy = ds_dtype_size(y->dt);
    if (sx != sy) return sy - sx;
    return strcmp(x->name, y->name);
}
static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(stw_entry *const *)a)->name, (*(stw_entry *const *)b)->name);
}

int ds_stw_finish(ds_stwriter *w, const char *path, ds_error *err) {
    int rc = -1;
    sbuf hb = {0};
    stw_entry **lay = ds_xmalloc(sizeof(stw_entry *) * (size_t)(w->n ? w->n : 1));
    stw_entry **byname = ds_xmalloc(sizeof(stw_entry *) * (size_t)(w->n ? w->n : 1));
    if (w->bad) { ds_io_fail(err, "E_INVALID_ARG", path, NULL, "expected valid tensor descriptions, found %s", w->bad_msg); goto out; }
    for (int i = 0; i < w->n; i++) lay[i] = byname[i] = &w->e[i];
    qsort(byname, (size_t)w->n, sizeof *byname, cmp_entry_name);
    for (int i = 1; i < w->n; i++)
        if (!strcmp(byname[i]->name, byname[i - 1]->name)) {
            ds_io_fail(err, "E_INVALID_ARG", path, byname[i]->name, "expected unique tensor names, found a duplicate");
            goto out;
        }
    qsort(lay, (size_t)w->n, sizeof *lay, cmp_layout);
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) { lay[i]->begin = off; off += lay[i]->nbytes; }
    sb_put(&hb, "{", 1);
    int first = 1;
    if (w->n_meta) {
        sb_put(&hb, "\"__metadata__\":{", 16);
        for (int i = 0; i < w->n_meta; i++) {
            if (i) sb_put(&hb, ",", 1);
            sb_json_str(&hb, w->meta_k[i]);
            sb_put(&hb, ":", 1);
            sb_json_str(&hb, w->meta_v[i]);
        }
        sb_put(&hb, "}", 1);
        first = 0;
    }
    for (int i = 0; i < w->n; i++) {
        const stw_entry *e = byname[i];
        if (!first) sb_put(&hb, ",", 1);
        first = 0;
        sb_json_str(&hb, e->name);
        sb_printf(&hb, ":{\"dtype\":\"%s\",\"shape\":[", ds_dtype_name(e->dt));
        for (int d = 0; d < e->ndim; d++) sb_printf(&hb, "%s%" PRId64, d ? "," : "", e->shape[d]);
        sb_printf(&hb, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", e->begin, e->begin + e->nbytes);
    }
    sb_put(&hb, "}", 1);
    uint64_t hlen = hb.n;
    if (w->header_size) {
        if (hlen > w->header_size || (8 + w->header_size) % 8) {
            ds_io_fail(err, "E_INVALID_ARG", path, NULL, "expected a header of at most %" PRIu64 " bytes with 8-aligned data, found %" PRIu64 " bytes",
                       w->header_size, hlen);
            goto out;
        }
        hlen = w->header_size;
    } else {
        hlen = (hlen + 8 + 7) / 8 * 8 - 8;
    }
    while (hb.n < hlen) sb_put(&hb, " ", 1);
    ds_afile af;
    if (ds_afile_open(&af, path, err)) goto out;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hlen >> (8 * i));
    if (ds_afile_write(&af, len8, 8, err) || ds_afile_write(&af, hb.p, hlen, err)) { ds_afile_abort(&af); goto out; }
    for (int i = 0; i < w->n; i++) {
        stw_entry *e = lay[i];
        if (!e->nbytes) continue;
        if (e->data) {
            if (ds_afile_write(&af, e->data, e->nbytes, err)) { ds_afile_abort(&af); goto out; }
            continue;
        }
        void *buf = ds_xcalloc(1, e->nbytes);
        int frc = e->fill ? e->fill(e->fill_ctx, e->name, buf, e->nbytes, err) : 0;
        if (frc == 0) frc = ds_afile_write(&af, buf, e->nbytes, err);
        free(buf);
        if (frc) { ds_afile_abort(&af); goto out; }
    }
    rc = ds_afile_commit(&af, 0, err);
out:
    free(hb.p);
    free(lay);
    free(byname);
    ds_stw_free(w);
    return rc;
}
