/* --part-size parsing (the flag table's byte-size rules plus "not zero"): binary K/M/G/T and KiB..,
 * decimal KB.., plain bytes, and every rejection with the offending text quoted. */
#include "check.h"
#include "tools/split.h"

static uint64_t ok(const char *s) {
    uint64_t v = 0;
    char why[256] = "";
    int rc = ds_parse_size(s, &v, why, sizeof why);
    CHECK(rc == 0, "'%s' rejected: %s", s, why);
    return v;
}

static void rejected(const char *s, const char *needle) {
    uint64_t v = 12345;
    char why[256] = "";
    CHECK(ds_parse_size(s, &v, why, sizeof why) == -1, "'%s' accepted as %llu", s, (unsigned long long)v);
    CHECK(v == 12345, "output untouched on error");
    const char *w = why;
    CHECK_STR_CONTAINS(w, needle);
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
    rejected("0", "zero");
    rejected("0G", "zero");
    rejected("", "'': expected a size");
    rejected("G", "'G': expected a size");
    rejected("-1", "'-1': expected a size");
    rejected("1.5G", "'1.5G': expected a size: digits with an optional");
    rejected("4X", "'4X': expected a size: digits with an optional");
    rejected("16 G", "'16 G': expected a size");
    rejected("99999999999999999999", "below 2^64 bytes");
    rejected("20000000T", "below 2^64 bytes");
}

RUN_ALL()
