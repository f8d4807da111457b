/* safetensors reader and writer (CHECKPOINT.md §3; loader checklist 8–12).
 *
 * Round trips cover every dtype of the format (F8_E4M3 and F8_E8M0 included).  The independent
 * oracle is the NumPy reader/writer in tests/oracle/safetensors_np.py: it reads the files our writer
 * produces and writes files (with its own padding rules, including unaligned layouts) that our
 * reader must decode to the same bytes.  Each structural error is provoked with a hand-built file
 * and the exact code plus the key parts of the message are asserted. */
#define _GNU_SOURCE
#include "check.h"
#include "io/safetensors.h"
#include "base/fsutil.h"
#include <libgen.h>
#include <stdint.h>
#include <unistd.h>

static char *tmp_path(const char *name) { return ds_path_join(ds_test_tmpdir(), name); }

/* Write a file from a raw header text (N = strlen unless n_override >= 0) and `data_len` data
 * bytes of pattern (i * 7 + 3). */
static char *write_raw(const char *name, const char *header, int64_t n_override, size_t data_len) {
    char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    uint64_t n = n_override >= 0 ? (uint64_t)n_override : strlen(header);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(n >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc((int)((i * 7 + 3) & 0xff), f);
    fclose(f);
    return p;
}

static ds_error open_err(const char *path) {
    ds_stfile *f = NULL;
    ds_error e;
    ds_error_clear(&e);
    if (ds_st_open(path, &f, &e) == 0) ds_st_close(f);
    return e;
}

/* Repository root: the working directory when it holds the oracle (tests/run.sh runs there),
 * else derived from /proc/self/exe (build/<BUILD>/tests/<prog>). */
static const char *repo_root(void) {
    static char root[1024];
    if (!root[0] && ds_file_exists("tests/oracle/safetensors_np.py") && getcwd(root, sizeof root)) return root;
    if (!root[0]) {
        ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
        root[n > 0 ? n : 0] = 0;
        for (int i = 0; i < 4; i++) dirname(root);
    }
    return root;
}

TEST(dtype_table) {
    const char *names[] = {"F32", "F16", "BF16", "I8", "U8", "F8_E4M3", "F8_E8M0", "F64", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL", "F8_E5M2", "F4"};
    const int bits[] = {32, 16, 16, 8, 8, 8, 8, 64, 16, 16, 32, 32, 64, 64, 8, 8, 4};
    CHECK(DS_ARRAY_LEN(names) == DS_DT_COUNT && DS_ARRAY_LEN(bits) == DS_DT_COUNT);
    for (int i = 0; i < DS_DT_COUNT; i++) {
        ds_dtype t;
        CHECK(ds_dtype_parse(names[i], &t) == 0 && (int)t == i, "%s", names[i]);
        CHECK(!strcmp(ds_dtype_name(t), names[i]) && ds_dtype_bits(t) == bits[i] && ds_dtype_size(t) == (bits[i] + 7) / 8, "%s", names[i]);
        CHECK(ds_dtype_nbytes(t, 6) == (uint64_t)(6 * bits[i] / 8), "%s", names[i]);
    }
    ds_dtype t;
    CHECK(ds_dtype_nbytes(DS_DT_F4, 7) == UINT64_MAX, "an odd F4 count has no byte length");
    CHECK(ds_dtype_parse("F6_E3M2", &t) == -1 && ds_dtype_parse("f32", &t) == -1);
    CHECK(ds_dtype_is_float(DS_DT_BF16) && ds_dtype_is_float(DS_DT_F16) && !ds_dtype_is_float(DS_DT_I8) && !ds_dtype_is_float(DS_DT_F8_E4M3));
}

static int fill_pattern(void *ctx, const char *name, void *buf, uint64_t n, ds_error *err) {
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)buf)[i] = (uint8_t)(i * 13 + *(int *)ctx);
    return 0;
}
static int fill_fail(void *ctx, const char *name, void *buf, uint64_t n, ds_error *err) {
    return ds_fail(err, "E_TEST", "fill failed for %s", name);
}

TEST(round_trip_every_dtype) {
    ds_stwriter *w = ds_stw_new();
    uint8_t src[DS_DT_COUNT][120];
    for (int d = 0; d < DS_DT_COUNT; d++) {
        for (int i = 0; i < 120; i++) src[d][i] = (uint8_t)(d * 31 + i * 5);
        char name[32];
        snprintf(name, sizeof name, "t.%s", ds_dtype_name((ds_dtype)d));
        int64_t shape[2] = {3, 120 * 8 / 3 / ds_dtype_bits((ds_dtype)d)};
        ds_stw_add(w, name, (ds_dtype)d, 2, shape, src[d], d % 2);
    }
    int64_t sc = 0, zshape[2] = {0, 5}, fshape[1] = {37};
    ds_stw_add(w, "scalar", DS_DT_F32, 0, &sc, (float[]){2.5f}, 0);
    ds_stw_add(w, "empty", DS_DT_BF16, 2, zshape, NULL, 0);
    ds_stw_add(w, "zeros", DS_DT_I32, 1, fshape, NULL, 0);
    int seed = 9;
    ds_stw_add_fill(w, "filled", DS_DT_U8, 1, fshape, fill_pattern, &seed);
    ds_stw_set_metadata(w, "format", "pt");
    uint64_t expect_bytes = ds_stw_data_bytes(w);
    CHECK(expect_bytes == DS_DT_COUNT * 120 + 4 + 0 + 37 * 4 + 37);
    char *p = tmp_path("all.safetensors");
    ds_error e;
    CHECK(ds_stw_finish(w, p, &e) == 0, "%s", e.msg);
    ds_stfile *f;
    CHECK(ds_st_open(p, &f, &e) == 0, "%s", e.msg);
    if (!f) return;
    CHECK(f->n_tensors == DS_DT_COUNT + 4 && f->n_warnings == 0 && f->data_start % 8 == 0);
    CHECK(f->file_size == f->data_start + expect_bytes);
    CHECK(f->metadata_json && strstr(f->metadata_json, "\"format\":\"pt\""));
    for (int d = 0; d < DS_DT_COUNT; d++) {
        char name[32];
        snprintf(name, sizeof name, "t.%s", ds_dtype_name((ds_dtype)d));
        const ds_tensor *t = ds_st_find(f, name);
        CHECK(t && (int)t->dtype == d && t->ndim == 2 && t->shape[0] == 3 && t->nbytes == 120, "%s", name);
        if (!t) continue;
        CHECK(!memcmp(t->data, src[d], 120), "%s bytes", name);
        CHECK(((uintptr_t)t->data % (uintptr_t)ds_dtype_size(t->dtype)) == 0, "%s aligned", name);
        CHECK(t->file == f && ds_tensor_numel(t) == 120 * 8 / ds_dtype_bits(t->dtype));
    }
    const ds_tensor *t = ds_st_find(f, "scalar");
    CHECK(t && t->ndim == 0 && ds_tensor_numel(t) == 1 && ((const float *)t->data)[0] == 2.5f);
    t = ds_st_find(f, "empty");
    CHECK(t && t->nbytes == 0 && ds_tensor_numel(t) == 0);
    t = ds_st_find(f, "zeros");
    CHECK(t && ((const int32_t *)t->data)[36] == 0);
    t = ds_st_find(f, "filled");
    CHECK(t && ((const uint8_t *)t->data)[5] == (uint8_t)(5 * 13 + 9));
    CHECK(ds_st_find(f, "absent") == NULL && ds_st_find(f, "t.F3") == NULL);
    /* sorted by name */
    for (int i = 1; i < f->n_tensors; i++) CHECK(strcmp(f->tensors[i - 1].name, f->tensors[i].name) < 0);
    ds_st_close(f);
    free(p);
}

TEST(oracle_reads_our_files_and_we_read_the_oracles) {
    char *ours = tmp_path("ours.safetensors"), *theirs = tmp_path("theirs.safetensors"), *odd = tmp_path("odd.safetensors");
    ds_stwriter *w = ds_stw_new();
    float fv[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
    int8_t iv[5] = {-8, 7, 0, 1, -1};
    uint16_t bv[3] = {0x3f80, 0xbf80, 0x4000};
    uint8_t e4[4] = {0x38, 0x7e, 0x80, 0x01}, e8[2] = {127, 130};
    ds_stw_add(w, "a.f32", DS_DT_F32, 2, (int64_t[]){2, 3}, fv, 0);
    ds_stw_add(w, "b.i8", DS_DT_I8, 1, (int64_t[]){5}, iv, 0);
    ds_stw_add(w, "c.bf16", DS_DT_BF16, 1, (int64_t[]){3}, bv, 0);
    ds_stw_add(w, "d.e4m3", DS_DT_F8_E4M3, 2, (int64_t[]){2, 2}, e4, 0);
    ds_stw_add(w, "e.e8m0", DS_DT_F8_E8M0, 2, (int64_t[]){1, 2}, e8, 0);
    ds_error e;
    CHECK(ds_stw_finish(w, ours, &e) == 0);
    char out[4096];
    const char *py =
        "import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import safetensors_np as s\n"
        "f = s.SafeTensorsFile(sys.argv[2])\n"
        "for n in sorted(f.tensors): t = f.info(n); a = f.get(n); print(n, t.dtype, list(t.shape), int(a.astype(np.int64).sum()) if a.dtype.kind in 'iu' else float(a.sum()))\n"
        "s.write(sys.argv[3], {'x': ('F32', np.array([1.5, -2.0], np.float32)), 'y': ('I8', np.array([1, 2, 3], np.int8)),"
        " 'z': ('F32', np.array([4.0], np.float32)), 'q': ('F8_E8M0', np.array([126, 128], np.uint8))})\n"
        "s.write(sys.argv[4], {'u': ('I8', np.array([5], np.int8)), 'v': ('F32', np.array([6.25, 7.0], np.float32))}, align=1)\n";
    char *script = tmp_path("oracle.py");
    ds_write_file_atomic(script, py, strlen(py), &e);
    int rc = ds_test_sh(out, sizeof out, "cd '%s' && /usr/bin/python3 '%s' tests/oracle '%s' '%s' '%s' 2>&1", repo_root(), script, ours, theirs, odd);
    CHECK(rc == 0, "oracle failed: %s", out);
    const char *want[] = {"a.f32 F32 [2, 3] 9.5", "b.i8 I8 [5] -1", "c.bf16 BF16 [3] 81664", "d.e4m3 F8_E4M3 [2, 2] 311", "e.e8m0 F8_E8M0 [1, 2] 257"};
    for (int i = 0; i < 5; i++) CHECK(strstr(out, want[i]) != NULL, "'%s' not in oracle output '%s'", want[i], out);
    /* The oracle's layout: I8 of 3 bytes followed by an F32 pads 5 bytes (a gap => warning). */
    ds_stfile *f = NULL;
    CHECK(ds_st_open(theirs, &f, &e) == 0, "%s", e.msg);
    if (f) {
        const ds_tensor *x = ds_st_find(f, "x"), *y = ds_st_find(f, "y"), *z = ds_st_find(f, "z"), *q = ds_st_find(f, "q");
        CHECK(x && ((const float *)x->data)[1] == -2.0f && y && ((const int8_t *)y->data)[2] == 3);
        CHECK(z && ((const float *)z->data)[0] == 4.0f && q && ((const uint8_t *)q->data)[1] == 128);
        CHECK(f->n_warnings >= 1 && strstr(f->warnings[0], "W_DATA_LAYOUT") && strstr(f->warnings[0], "gap"), "gap warning");
        ds_st_close(f);
    }
    /* Header not padded: data starts at an odd offset, so the F32 is copied to an aligned buffer. */
    CHECK(ds_st_open(odd, &f, &e) == 0, "%s", e.msg);
    if (f) {
        const ds_tensor *v = ds_st_find(f, "v");
        CHECK(v && ((uintptr_t)v->data % 4) == 0 && ((const float *)v->data)[0] == 6.25f && ((const float *)v->data)[1] == 7.0f);
        int found = 0;
        for (int i = 0; i < f->n_warnings; i++) found |= strstr(f->warnings[i], "W_DATA_LAYOUT") && strstr(f->warnings[i], ": v: expected an absolute offset") != NULL;
        CHECK(found, "unaligned warning names the tensor");
        ds_st_close(f);
    }
    free(ours); free(theirs); free(odd); free(script);
}

TEST(engram_layout_data_at_112) {
    char *p = tmp_path("layers_1_engram_embed.weight.safetensors");
    int8_t rows[6 * 32];
    for (int i = 0; i < 6 * 32; i++) rows[i] = (int8_t)(i - 96);
    ds_stwriter *w = ds_stw_new();
    ds_stw_add(w, "layers.1.engram.embed.weight", DS_DT_I8, 2, (int64_t[]){6, 32}, rows, 1);
    ds_stw_set_header_size(w, DS_ENGRAM_HEADER_SIZE);
    ds_error e;
    CHECK(ds_stw_finish(w, p, &e) == 0, "%s", e.msg);
    CHECK(ds_file_size(p) == 112 + 6 * 32);
    ds_stfile *f;
    CHECK(ds_st_open(p, &f, &e) == 0);
    CHECK(f->header_len == 104 && f->data_start == 112 && f->metadata_json == NULL && f->n_tensors == 1);
    CHECK(!memcmp(f->tensors[0].data, rows, sizeof rows));
    ds_st_close(f);
    /* The V4.1-Flash header (the longest name and offsets) still fits in 104 bytes. */
    w = ds_stw_new();
    ds_stw_add_fill(w, "layers.14.engram.embed.weight", DS_DT_I8, 2, (int64_t[]){384016682, 256}, NULL, NULL);
    ds_stw_set_header_size(w, 40);
    CHECK(ds_stw_finish(w, p, &e) == -1 && !strcmp(e.code, "E_INVALID_ARG"), "too small a header is refused before writing");
    CHECK(ds_file_size(p) == 112 + 6 * 32, "previous file untouched");
    free(p);
}

TEST(writer_failures_leave_nothing) {
    char *p = tmp_path("fail.safetensors");
    ds_stwriter *w = ds_stw_new();
    ds_stw_add_fill(w, "x", DS_DT_F32, 1, (int64_t[]){4}, fill_fail, NULL);
    ds_error e;
    CHECK(ds_stw_finish(w, p, &e) == -1 && !strcmp(e.code, "E_TEST"));
    CHECK(!ds_file_exists(p));
    char out[256];
    ds_test_sh(out, sizeof out, "ls '%s' | grep -c 'fail.safetensors' || true", ds_test_tmpdir());
    CHECK(atoi(out) == 0, "no temporary file left: %s", out);
    w = ds_stw_new();
    ds_stw_add(w, "dup", DS_DT_F32, 1, (int64_t[]){1}, (float[]){1}, 0);
    ds_stw_add(w, "dup", DS_DT_F32, 1, (int64_t[]){1}, (float[]){2}, 0);
    CHECK(ds_stw_finish(w, p, &e) == -1 && !strcmp(e.code, "E_INVALID_ARG") && strstr(e.msg, "dup"));
    w = ds_stw_new();
    ds_stw_add(w, "x", DS_DT_F32, 1, (int64_t[]){1}, (float[]){1}, 0);
    char *bad = tmp_path("no/such/dir/x.safetensors");
    CHECK(ds_stw_finish(w, bad, &e) == -1 && !strcmp(e.code, "E_IO"));
    free(bad);
    free(p);
}

TEST(header_length_errors) {
    char *p = write_raw("big.st", "{}", 100000001, 0);
    ds_error e = open_err(p);
    CHECK(!strcmp(e.code, "E_HEADER_TOO_LARGE"), "%s", e.code);
    CHECK_STR_CONTAINS(e.msg, "E_HEADER_TOO_LARGE: ");
    CHECK_STR_CONTAINS(e.msg, "big.st: expected header length N <= 100000000");
    CHECK_STR_CONTAINS(e.msg, "found N = 100000001");
    free(p);
    p = write_raw("short.st", "{}", 50, 0);
    e = open_err(p);
    CHECK(!strcmp(e.code, "E_HEADER_TOO_LARGE") && strstr(e.msg, "8 + N <= file size 10"), "%s", e.msg);
    free(p);
    p = tmp_path("tiny.st");
    ds_write_file_atomic(p, "abc", 3, &e);
    e = open_err(p);
    CHECK(!strcmp(e.code, "E_SHARD_TRUNCATED") && strstr(e.msg, "expected at least 8 bytes"), "%s", e.msg);
    free(p);
    p = tmp_path("missing.st");
    e = open_err(p);
    CHECK(!strcmp(e.code, "E_MISSING_FILE") && strstr(e.msg, "missing.st"));
    free(p);
}

TEST(header_parse_errors) {
    struct { const char *hdr, *want; } c[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "expected a JSON object as header, found invalid JSON"},
        {"[1,2]", "expected a JSON object as header, found an array"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", "a: dtype: expected one of F32"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "a: shape[0]: expected a non-negative integer, found 1.5"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "a: shape[0]: expected a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", "a: shape: expected an array of integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "a: data_offsets: expected [begin, end]"},
        {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "a: dtype: expected a string, found nothing"},
        {"{\"a\":5}", "a: expected an object with dtype, shape, data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         "a: expected unique tensor names, found a duplicate key"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", "expected only space padding after the JSON object"},
        {"{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "__metadata__: k: expected a string value"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,4]}}", "a: shape: expected at most 8 dimensions, found 9"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char *p = write_raw("parse.st", c[i].hdr, -1, 8);
        ds_error e = open_err(p);
        CHECK(!strcmp(e.code, "E_HEADER_PARSE"), "case %zu: code %s (%s)", i, e.code, e.msg);
        CHECK_STR_CONTAINS(e.msg, c[i].want);
        CHECK_STR_CONTAINS(e.msg, "E_HEADER_PARSE: ");
        CHECK_STR_CONTAINS(e.msg, "parse.st: ");
        free(p);
    }
}

TEST(offset_and_truncation_errors) {
    struct { const char *hdr, *code, *want; size_t data; } c[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "E_OFFSETS_RANGE", "a: expected end - begin = 2 elements x 4 bytes = 8, found 4", 8},
        {"{\"a\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[4,0]}}", "E_OFFSETS_RANGE", "a: expected begin <= end, found data_offsets [4, 0]", 8},
        /* F4: two elements per byte, so [2, 8] is 8 bytes and an odd element count has no byte length */
        {"{\"a\":{\"dtype\":\"F4\",\"shape\":[2,8],\"data_offsets\":[0,16]}}", "E_OFFSETS_RANGE", "a: expected end - begin = 16 elements x 4 bits = 8, found 16", 16},
        {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3,3],\"data_offsets\":[0,5]}}", "E_HEADER_PARSE", "a: shape: expected a whole number of bytes (2 elements of F4 per byte), found 9 elements", 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         "E_OFFSETS_RANGE", "b: expected no overlap, found range [4, 8) overlapping a [0, 8)", 8},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         "E_SHARD_TRUNCATED", "b: expected file size >= ", 12},
        /* an empty tensor whose offsets lie past the data: its view would point outside the file (fuzz find) */
        {"{\"a\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},\"u\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[32,32]}}",
         "E_OFFSETS_RANGE", "u: expected an empty tensor's offsets within the data section (<= 8 bytes), found data_offsets [32, 32]", 8},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char *p = write_raw("off.st", c[i].hdr, -1, c[i].data);
        ds_error e = open_err(p);
        CHECK(!strcmp(e.code, c[i].code), "case %zu: %s", i, e.msg);
        CHECK_STR_CONTAINS(e.msg, c[i].want);
        free(p);
    }
    /* Truncating a valid file: E_SHARD_TRUNCATED with the exact sizes. */
    char *p = tmp_path("trunc.st");
    ds_stwriter *w = ds_stw_new();
    ds_stw_add(w, "w", DS_DT_F32, 1, (int64_t[]){16}, NULL, 0);
    ds_error e;
    ds_stw_finish(w, p, &e);
    int64_t full = ds_file_size(p);
    CHECK(truncate(p, full - 1) == 0);
    e = open_err(p);
    CHECK(!strcmp(e.code, "E_SHARD_TRUNCATED"));
    char want[128];
    snprintf(want, sizeof want, "w: expected file size >= %lld", (long long)full);
    CHECK_STR_CONTAINS(e.msg, want);
    snprintf(want, sizeof want, "found %lld", (long long)full - 1);
    CHECK_STR_CONTAINS(e.msg, want);
    free(p);
}

TEST(layout_warnings_are_not_errors) {
    /* 4 trailing bytes after the last range, and a gap before b. */
    char *p = write_raw("gap.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}      ",
                        -1, 16);
    ds_stfile *f = NULL;
    ds_error e;
    CHECK(ds_st_open(p, &f, &e) == 0, "%s", e.msg);
    if (f) {
        CHECK(f->n_warnings >= 2, "%d warnings", f->n_warnings);
        int gap = 0, trail = 0;
        for (int i = 0; i < f->n_warnings; i++) {
            gap |= strstr(f->warnings[i], "b: expected contiguous data, found a gap of 4 bytes") != NULL;
            trail |= strstr(f->warnings[i], "found 4 trailing bytes") != NULL;
            CHECK(!strncmp(f->warnings[i], "W_DATA_LAYOUT: ", 15));
        }
        CHECK(gap && trail);
        ds_st_close(f);
    }
    free(p);
}

RUN_ALL()
