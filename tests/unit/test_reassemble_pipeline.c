/* The pieces under reassemble: the SHA-256 wrapper (FIPS 180-2 vectors and coreutils sha256sum as
 * oracles), the read-once hash/copy pipeline (segment hashes, whole hash, output bytes, odd block
 * sizes, stop, errors), the exit-class order of TOOLS.md §0, and the part-set check. */
#include "check.h"
#include "base/sha256.h"
#include "tools/hash_pipeline.h"
#include "tools/reassemble.h"
#include <fcntl.h>
#include <unistd.h>

TEST(sha256_vectors) {
    char hex[65];
    ds_sha256_hex("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "%s", hex);
    ds_sha256_hex("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "%s", hex);
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    ds_sha256_hex(m2, strlen(m2), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "%s", hex);
    /* incremental == one-shot, and reset makes a context reusable */
    ds_sha256 *h = ds_sha256_new();
    ds_sha256_update(h, "ab", 2);
    ds_sha256_update(h, "c", 1);
    ds_sha256_final_hex(h, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    ds_sha256_reset(h);
    ds_sha256_final_hex(h, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    ds_sha256_free(h);
    uint8_t d[32];
    CHECK(ds_sha256_parse_hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", d) == 0 && d[0] == 0xba && d[31] == 0xad);
    CHECK(ds_sha256_parse_hex("BA7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", d) == -1, "uppercase refused");
    CHECK(ds_sha256_parse_hex("ba78", d) == -1);
    CHECK(strstr(ds_sha256_impl(), "OpenSSL") != NULL, "%s", ds_sha256_impl());
}

static char g_dir[600];

/* Random file of n bytes; returns its path (static buffer per call site). */
static void make_random(const char *path, long n) {
    CHECK(ds_test_sh(NULL, 0, "head -c %ld /dev/urandom > '%s'", n, path) == 0);
}

/* sha256sum of bytes [off, off+len) of path, via coreutils. */
static void oracle_range(const char *path, long off, long len, char out[65]) {
    char buf[256];
    ds_test_sh(buf, sizeof buf, "tail -c +%ld '%s' | head -c %ld | sha256sum | cut -c1-64", off + 1, path, len);
    memcpy(out, buf, 64);
    out[64] = 0;
}

typedef struct { char hex[8][65]; int calls; int fail_at; } seg_log;
static int log_seg(void *user, int seg, const char *hex, ds_error *err) {
    seg_log *l = user;
    if (seg == l->fail_at) return ds_fail(err, "E_TEST", "refused segment %d", seg);
    memcpy(l->hex[seg], hex, 65);
    l->calls++;
    return 0;
}

TEST(pipeline_copies_and_hashes) {
    snprintf(g_dir, sizeof g_dir, "%s", ds_test_tmpdir());
    char in[700], out[700];
    snprintf(in, sizeof in, "%s/in.bin", g_dir);
    snprintf(out, sizeof out, "%s/out.bin", g_dir);
    const long n = 3 * 1000 * 1000 + 17;
    make_random(in, n);
    /* Three segments out of order in the input, written back in input order into the output:
     * the output must equal the input, whatever the block size. */
    long cut[4] = {0, 1000003, 2500000, n};
    size_t blocks[] = {4096, 1000, 777777, 0};
    for (size_t b = 0; b < DS_ARRAY_LEN(blocks); b++) {
        int fi = open(in, O_RDONLY), fo = open(out, O_RDWR | O_CREAT | O_TRUNC, 0644);
        ds_hp_segment seg[3];
        for (int s = 0; s < 3; s++)
            seg[s] = (ds_hp_segment){fi, (uint64_t)cut[s], (uint64_t)(cut[s + 1] - cut[s]), fo, (uint64_t)cut[s], in, out};
        seg_log lg = {.fail_at = -1};
        ds_sha256 *whole = ds_sha256_new();
        ds_hp_opts o = {.whole = whole, .seg_hash = true, .on_done = log_seg, .user = &lg, .block = blocks[b]};
        ds_error err;
        int rc = ds_hp_run(seg, 3, &o, &err);
        CHECK(rc == 0, "block %zu: %s", blocks[b], err.msg);
        close(fi);
        close(fo);
        char w[65], want[65];
        ds_sha256_final_hex(whole, w);
        ds_sha256_free(whole);
        oracle_range(in, 0, n, want);
        CHECK(!strcmp(w, want), "whole hash with block %zu", blocks[b]);
        CHECK(lg.calls == 3);
        for (int s = 0; s < 3; s++) {
            oracle_range(in, cut[s], cut[s + 1] - cut[s], want);
            CHECK(!strcmp(lg.hex[s], want), "segment %d hash with block %zu", s, blocks[b]);
        }
        CHECK(ds_test_sh(NULL, 0, "cmp -s '%s' '%s'", in, out) == 0, "output bytes with block %zu", blocks[b]);
    }
}

TEST(pipeline_stop_error_and_short_input) {
    char in[700];
    snprintf(in, sizeof in, "%s/in2.bin", ds_test_tmpdir());
    make_random(in, 100000);
    int fi = open(in, O_RDONLY);
    ds_hp_segment seg[2] = {{fi, 0, 50000, -1, 0, in, NULL}, {fi, 50000, 50000, -1, 0, in, NULL}};
    volatile sig_atomic_t stop = SIGTERM;
    seg_log lg = {.fail_at = -1};
    ds_hp_opts o = {.seg_hash = true, .on_done = log_seg, .user = &lg, .stop = &stop, .block = 4096};
    ds_error err;
    CHECK(ds_hp_run(seg, 2, &o, &err) == 1 && lg.calls == 0, "a pending stop ends the run before any segment");
    stop = 0;
    lg.fail_at = 1;
    CHECK(ds_hp_run(seg, 2, &o, &err) == -1 && lg.calls == 1, "on_done refusal aborts");
    CHECK(!strcmp(err.code, "E_TEST"), "%s", err.code);
    /* a segment that runs past the end of the file is an I/O error naming the file */
    ds_hp_segment past = {fi, 90000, 20000, -1, 0, in, NULL};
    lg.fail_at = -1;
    CHECK(ds_hp_run(&past, 1, &o, &err) == -1 && !strcmp(err.code, "E_IO"));
    CHECK_STR_CONTAINS(err.msg, "file ended at offset 100000");
    /* a write to a read-only descriptor fails with the output's name */
    ds_hp_segment wr = {fi, 0, 100, fi, 0, in, "readonly-out"};
    CHECK(ds_hp_run(&wr, 1, &o, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "readonly-out: write of 100 bytes at offset 0 failed");
    close(fi);
}

TEST(exit_order) {
    /* TOOLS.md §0: the first in the order 2, 3, 4, 5, 1, 10 wins; then 0. */
    int order[] = {2, 3, 4, 5, 1, 10, 0};
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 7; j++) {
            int want = order[i < j ? i : j];
            CHECK(ds_exit_merge(order[i], order[j]) == want, "merge(%d,%d)=%d want %d", order[i], order[j],
                  ds_exit_merge(order[i], order[j]), want);
        }
    CHECK(ds_exit_merge(2, 143) == 143 && ds_exit_merge(130, 0) == 130, "a signal exit wins");
}

TEST(part_set_check) {
    char d[700], whybuf[1024];
    char *why = whybuf;
    const size_t whylen = sizeof whybuf;
    snprintf(d, sizeof d, "%s/set", ds_test_tmpdir());
    ds_test_sh(NULL, 0, "mkdir -p '%s' && cd '%s' && head -c 10 /dev/zero > t.part-00-of-03 && head -c 10 /dev/zero > t.part-01-of-03 "
                        "&& head -c 4 /dev/zero > t.part-02-of-03", d, d);
    ds_parts_part p[3] = {{"t.part-00-of-03", ""}, {"t.part-01-of-03", ""}, {"t.part-02-of-03", ""}};
    ds_parts_target t = {.name = "t", .size = 24, .part_size = 10, .declared_parts = 3, .n_parts = 3, .parts = p};
    CHECK(ds_parts_check_set(d, &t, why, whylen) == 0, "%s", why);
    t.size = 25;
    CHECK(ds_parts_check_set(d, &t, why, whylen) == DS_EXIT_CHECK);
    CHECK_STR_CONTAINS(why, "parts total 24 bytes, PARTS.sha256 says size=25");
    t.size = -1;
    t.part_size = 12;
    CHECK(ds_parts_check_set(d, &t, why, whylen) == DS_EXIT_CHECK);
    CHECK_STR_CONTAINS(why, "t.part-00-of-03 is 10 bytes, expected 12");
    t.part_size = -1;
    ds_test_sh(NULL, 0, "cd '%s' && head -c 12 /dev/zero > t.part-02-of-03", d);
    CHECK(ds_parts_check_set(d, &t, why, whylen) == DS_EXIT_CHECK, "last part larger than the others");
    CHECK_STR_CONTAINS(why, "last part t.part-02-of-03 is 12 bytes, expected 1..10");
    ds_test_sh(NULL, 0, "cd '%s' && head -c 4 /dev/zero > t.part-02-of-03 && mv t.part-01-of-03 x", d);
    CHECK(ds_parts_check_set(d, &t, why, whylen) == DS_EXIT_MISSING);
    CHECK_STR_CONTAINS(why, "missing t.part-01-of-03");
    ds_test_sh(NULL, 0, "cd '%s' && mv x t.part-01-of-03 && cp t.part-01-of-03 t.part-001-of-003", d);
    CHECK(ds_parts_check_set(d, &t, why, whylen) == DS_EXIT_CHECK, "a second spelling of one index");
    ds_test_sh(NULL, 0, "cd '%s' && rm t.part-001-of-003", d);
    CHECK(ds_parts_check_set(d, &t, why, whylen) == 0, "%s", why);
}

RUN_ALL()
