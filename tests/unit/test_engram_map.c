/* Engram token normalization map (MODEL.md §2.10.1): the normalization steps on hand-worked
 * cases, the map file format and its checks, and the class count of the V4.1-style tokenizer,
 * which must be the spec's engram_compressed_vocab_size 99092.  The full map is compared with an
 * independent Python implementation by tests/tokenizer/run_engram.sh. */
#define _GNU_SOURCE
#include "check.h"
#include "tokenizer/engram_map.h"
#include "tokenizer/release_tokenizer.h"
#include "base/fsutil.h"

TEST(normalization_steps) {
    struct { const char *in, *out; } cases[] = {
        {"  Hello\t\n", "hello"},                 /* lowercase, collapse, strip */
        {"\t", " "},                             /* one space after collapsing: the sentinel keeps it */
        {" \n\r ", " "},
        {"A \t B", "a b"},
        {"Ｃａｆé", "cafe"},                      /* NFKC fullwidth, NFD + mark removal */
        {"ﬁ", "fi"},                              /* compatibility ligature */
        {"İ", "i"},                               /* NFD splits the dot above, which is a mark */
        {"ΣΑΣ", "σασ"},                           /* per-character lowercase, no final-sigma rule */
        {"\u3000x\u00a0", "x"},                   /* White_Space stripped at both ends */
        {"\u00a0", " "},                          /* NFKC turns NBSP into a space: the sentinel keeps it */
        {"\u2028", ""},                           /* empty after stripping (the caller keeps the text) */
        {"①", "1"},
        {"x\u0301\u0302", "x"},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(cases); i++) {
        size_t n;
        char *k = ds_engram_normalize(cases[i].in, strlen(cases[i].in), &n);
        CHECK(k && !strcmp(k, cases[i].out), "'%s' -> '%s', want '%s'", cases[i].in, k ? k : "(null)", cases[i].out);
        free(k);
    }
}

TEST(map_file_round_trip_and_checks) {
    char path[600];
    snprintf(path, sizeof path, "%s/map.bin", ds_test_tmpdir());
    uint32_t cls[6] = {0, 1, 1, 2, 0, 3};
    ds_error err = {0};
    CHECK(ds_engram_map_write(path, cls, 6, &err) == 0, "%s", err.msg);
    CHECK(ds_file_size(path) == 24, "size %lld", (long long)ds_file_size(path));
    uint32_t *back = NULL;
    int n = 0;
    CHECK(ds_engram_map_read(path, 6, &back, &n, &err) == 0 && n == 4 && !memcmp(back, cls, sizeof cls), "%s", err.msg);
    free(back);
    back = NULL;
    CHECK(ds_engram_map_read(path, 7, &back, &n, &err) < 0 && !strcmp(err.code, "E_TOKEN_MAP_SIZE") && strstr(err.msg, "24 bytes"), "%s", err.msg);
    uint32_t bad[3] = {0, 2, 1};
    ds_engram_map_write(path, bad, 3, &err);
    CHECK(ds_engram_map_read(path, 3, &back, &n, &err) < 0 && strstr(err.msg, "first-seen"), "%s", err.msg);
    free(back);
}

TEST(v41_tokenizer_has_99092_classes) {
    const char *base = ds_tokenizer_default_base();
    CHECK(base != NULL, "no base tokenizer (scripts/install-deps.sh)");
    if (!base) return;
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/v41", ds_test_tmpdir());
    ds_error err = {0};
    CHECK(ds_tokenizer_write_release(base, 129280, 128799, 129264, dir, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ds_tokenizer *t;
    CHECK(ds_tokenizer_load(path, &t, &err) == 0, "%s", err.msg);
    if (!t) return;
    uint32_t *cls;
    int n;
    CHECK(ds_engram_map_compute(t, &cls, &n, &err) == 0, "%s", err.msg);
    CHECK(n == 99092, "%d classes, MODEL.md says 99092", n);
    /* first-seen numbering, and a few classes that follow from the rules */
    uint32_t maxc = 0;
    bool ordered = cls[0] == 0;
    for (int v = 1; v < 129280; v++) { if (cls[v] > maxc + 1) ordered = false; if (cls[v] > maxc) maxc = cls[v]; }
    CHECK(ordered, "classes not in first-seen order");
    int32_t hello = ds_tokenizer_token_id(t, "Hello"), hello2 = ds_tokenizer_token_id(t, "hello"), ghello = ds_tokenizer_token_id(t, "Ġhello");
    CHECK(hello >= 0 && hello2 >= 0 && ghello >= 0 && cls[hello] == cls[hello2] && cls[hello] == cls[ghello], "Hello/hello/ hello share a class");
    CHECK(cls[2] == 2, "pad class %u", cls[2]);
    free(cls);
    ds_tokenizer_free(t);
}

RUN_ALL()
