/* Byte sizes on the command line (--part-size, --shard-size, --split-engram, --kv-cache-memory):
 * the one parser in base/flags, through a SIZE row of the flag table as the commands use it.
 * Binary K/M/G/T and KiB.., decimal KB.., plain bytes, case-insensitive suffixes; every rejection
 * names the flag and quotes the offending text, and a refused value leaves nothing set.  The
 * expected byte counts are written out by hand (powers of 1024 and 1000), not computed by us. */
#include "check.h"
#include "base/flags.h"
#include <stdlib.h>
#include <string.h>

static ds_flag k_rows[] = {
    {.name = "--part-size", .type = DS_FLAG_SIZE, .help = "bytes per part"},
};

/* Parse "--part-size VALUE"; returns the parser's status, the bytes in *v and stderr text in msg. */
static int parse(const char *value, uint64_t *v, char *msg, size_t n) {
    ds_flagset fs = {.cmd = "dsflash t", .usage = "usage: t", .flags = k_rows, .n = DS_ARRAY_LEN(k_rows)};
    char *argv[] = {"t", "--part-size", (char *)value};
    char *buf = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&buf, &len);
    int rc = ds_flags_parse(&fs, 3, argv, 1, err);
    fclose(err);
    snprintf(msg, n, "%s", buf ? buf : "");
    free(buf);
    *v = rc ? 12345 : (uint64_t)ds_flag_int(&fs, "--part-size");
    return rc;
}

static uint64_t ok(const char *s) {
    uint64_t v = 0;
    char msg[1024];
    CHECK(parse(s, &v, msg, sizeof msg) == 0, "'%s' rejected: %s", s, msg);
    return v;
}

static void rejected(const char *s) {
    uint64_t v;
    char msg[1024], want[128];
    CHECK(parse(s, &v, msg, sizeof msg) == 2, "'%s' accepted as %llu", s, (unsigned long long)v);
    const char *m = msg;
    CHECK_STR_CONTAINS(m, "dsflash t: --part-size: expected a size of at least 1 byte");
    snprintf(want, sizeof want, "got '%s'", s);
    CHECK_STR_CONTAINS(m, want);
}

TEST(sizes_accepted) {
    CHECK(ok("4096") == 4096);
    CHECK(ok("1M") == 1048576);
    CHECK(ok("1m") == 1048576);
    CHECK(ok("16G") == 17179869184ull, "the published part size");
    CHECK(ok("16GiB") == 17179869184ull);
    CHECK(ok("16gib") == 17179869184ull);
    CHECK(ok("2T") == 2199023255552ull);
    CHECK(ok("50GB") == 50000000000ull, "decimal, the hub's 50 GB cap");
    CHECK(ok("1000KB") == 1000000);
    CHECK(ok("7B") == 7);
    CHECK(ok("3KiB") == 3072);
}

TEST(sizes_rejected) {
    rejected("0");
    rejected("0G");
    rejected("");
    rejected("G");
    rejected("-1");
    rejected("1.5G");
    rejected("4X");
    rejected("16 G");
    rejected("99999999999999999999");
    rejected("20000000T");
    rejected("9223372036854775808");   /* one past the largest value a row holds */
}

RUN_ALL()
