/* Engram hashing constants (MODEL.md §2.10.2–§2.10.3, §8, Appendix A/B): multipliers against the
 * spec's check values, primes and offsets against Appendix B and the tiny/mini fixture values,
 * prime sums, and row ids against an independent evaluation (the n-gram XOR written out per size,
 * and the NumPy-side oracle tests/oracle/engram_hash.py when /usr/bin/python3 is available). */
#include "check.h"
#include "model/engram_hash.h"
#include <stdio.h>

static int eq4(const int64_t *a, const int64_t *b) { return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3]; }

TEST(multipliers_v41_check_values) {
    int64_t m[4];
    const int64_t l1[4] = {76632096046245LL, 4839876093313LL, 35959672319349LL, 73987337458391LL};
    const int64_t l14[4] = {67716810739261LL, 51510806800915LL, 30921347202721LL, 82619226485591LL};
    CHECK(ds_engram_mult_bound(99092) == 46539438283891ULL, "bound %llu", (unsigned long long)ds_engram_mult_bound(99092));
    CHECK(ds_engram_multipliers(1, 99092, 4, m) == 0 && eq4(m, l1), "layer 1: %lld %lld %lld %lld",
          (long long)m[0], (long long)m[1], (long long)m[2], (long long)m[3]);
    CHECK(ds_engram_multipliers(14, 99092, 4, m) == 0 && eq4(m, l14), "layer 14");
}

TEST(multipliers_tiny_and_mini_check_values) {
    int64_t m[4];
    const int64_t t1[4] = {10848039516306619LL, 685132859769461LL, 5090451213527091LL, 10473647490610037LL};
    const int64_t t2[4] = {10830397415046839LL, 5251565313253021LL, 3205963898546285LL, 10110859572717759LL};
    const int64_t m6[4] = {39757161197093LL, 90288823459075LL, 10790497458921LL, 26965969153235LL};
    CHECK(ds_engram_multipliers(1, 700, 4, m) == 0 && eq4(m, t1), "tiny layer 1");
    CHECK(ds_engram_multipliers(2, 700, 4, m) == 0 && eq4(m, t2), "tiny layer 2");
    CHECK(ds_engram_multipliers(6, 99092, 4, m) == 0 && eq4(m, m6), "mini layer 6");
    /* every multiplier is odd and below 2·bound+1 */
    for (int l = 0; l < 50; l++) {
        ds_engram_multipliers(l, 700, 4, m);
        for (int k = 0; k < 4; k++)
            CHECK((m[k] & 1) && (uint64_t)m[k] <= 2 * ds_engram_mult_bound(700) + 1, "layer %d draw %d", l, k);
    }
}

TEST(multipliers_refuse_small_bound) {
    /* a class count so large that the bound needs the 32-bit draw is a config error */
    int64_t m[4];
    CHECK(ds_engram_multipliers(1, (int64_t)3000000000LL, 4, m) < 0);
}

TEST(primes_tiny_fixture) {
    ds_config c;
    CHECK(ds_config_preset("tiny", &c) == 0);
    ds_engram_consts ec;
    ds_error err;
    CHECK(ds_engram_consts_init(&ec, &c, &err) == 0, "%s", err.msg);
    const int64_t p1[6] = {1009, 1013, 1019, 1021, 1031, 1033}, p2[6] = {1039, 1049, 1051, 1061, 1063, 1069};
    CHECK(ec.n_cols == 6);
    for (int k = 0; k < 6; k++) CHECK(ec.primes[0][k] == p1[k] && ec.primes[1][k] == p2[k], "slot %d", k);
    CHECK(ec.prime_sum[0] == 6126 && ec.prime_sum[1] == 6332, "sums %lld %lld", (long long)ec.prime_sum[0],
          (long long)ec.prime_sum[1]);
    CHECK(ec.offsets[0][0] == 0 && ec.offsets[0][1] == 1009 && ec.offsets[1][5] == 6332 - 1069);
    CHECK(ec.mult[1][3] == 10110859572717759LL, "multipliers from the layer id");
}

TEST(primes_mini_fixture) {
    ds_config c;
    CHECK(ds_config_preset("mini", &c) == 0);
    ds_engram_consts ec;
    ds_error err;
    CHECK(ds_engram_consts_init(&ec, &c, &err) == 0, "%s", err.msg);
    CHECK(ec.primes[0][0] == 50021 && ec.primes[1][ec.n_cols - 1] == 50513);
    CHECK(ec.prime_sum[0] == 1202790 && ec.prime_sum[1] == 1209004);
}

TEST(primes_v41_appendix_b) {
    ds_config c;
    CHECK(ds_config_preset("v41-flash", &c) == 0);
    ds_engram_consts ec;
    ds_error err;
    CHECK(ds_engram_consts_init(&ec, &c, &err) == 0, "%s", err.msg);
    const int64_t p1[24] = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183,
                            16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321,
                            16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463};
    const int64_t p14[24] = {16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627,
                             16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769,
                             16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889};
    const int64_t o14[24] = {0, 16000477, 32000964, 48001463, 64001970, 80002481, 96003054, 112003663,
                             128004290, 144004957, 160005626, 176006319, 192007016, 208007727, 224008456, 240009215,
                             256009984, 272010765, 288011564, 304012377, 320013196, 336014037, 352014914, 368015793};
    for (int k = 0; k < 24; k++) {
        CHECK(ec.primes[0][k] == p1[k] && ec.primes[1][k] == p14[k], "slot %d", k);
        CHECK(ec.offsets[1][k] == o14[k], "offset %d", k);
    }
    CHECK(ec.offsets[0][23] == 368005705);
    CHECK(ec.prime_sum[0] == 384006168LL && ec.prime_sum[1] == 384016682LL);
}

/* Independent row-id evaluation: the g-gram hash is the XOR of prod[0..g-1], written out directly. */
static void rows_direct(const ds_engram_consts *ec, int e, const int64_t *t, int64_t *rows) {
    for (int g = 2; g <= ec->max_ngram; g++) {
        uint64_t h = 0;
        for (int s = 0; s < g; s++) h ^= (uint64_t)t[s] * (uint64_t)ec->mult[e][s];
        for (int hd = 0; hd < ec->n_heads; hd++) {
            int col = (g - 2) * ec->n_heads + hd;
            rows[col] = (int64_t)(h % (uint64_t)ec->primes[e][col]) + ec->offsets[e][col];
        }
    }
}

TEST(row_ids_match_direct_evaluation_and_stay_in_range) {
    ds_config c;
    ds_config_preset("v41-flash", &c);
    ds_engram_consts ec;
    ds_error err;
    ds_engram_consts_init(&ec, &c, &err);
    uint64_t x = 12345;
    for (int it = 0; it < 2000; it++) {
        int64_t t[4], a[24], b[24];
        for (int s = 0; s < 4; s++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            t[s] = (int64_t)((x >> 33) % 99092);
        }
        int e = it & 1;
        ds_engram_row_ids(&ec, e, t, a);
        rows_direct(&ec, e, t, b);
        for (int k = 0; k < 24; k++) {
            CHECK(a[k] == b[k], "it %d col %d", it, k);
            CHECK(a[k] >= ec.offsets[e][k] && a[k] < ec.offsets[e][k] + ec.primes[e][k] && a[k] < ec.prime_sum[e]);
        }
    }
}

TEST(row_ids_match_python_oracle) {
    /* tiny config, classes 0..699, one sequence of 12 tokens with pad history (class of id 2) */
    ds_config c;
    ds_config_preset("tiny", &c);
    ds_engram_consts ec;
    ds_error err;
    ds_engram_consts_init(&ec, &c, &err);
    /* without the oracle nothing is compared: that is a failure, not a pass */
    CHECK(ds_test_sh(NULL, 0, "test -x /usr/bin/python3 && test -f tests/oracle/engram_hash.py") == 0,
          "python oracle not available (/usr/bin/python3, tests/oracle/engram_hash.py): scripts/install-deps.sh");
    if (ds_case_failed) return;
    const int T = 12;
    int64_t cls[12] = {5, 699, 0, 17, 17, 350, 2, 698, 1, 44, 44, 44};
    char out[8192];
    int rc = ds_test_sh(out, sizeof out,
                        "cd tests/oracle && /usr/bin/python3 -c \"import engram_hash as e\n"
                        "pr=e.primes_and_offsets(2,4,2,1000)\n"
                        "for L,(p,o) in zip([1,2],pr):\n"
                        "  m=e.multipliers(L,700,4)\n"
                        "  for r in e.row_ids([5,699,0,17,17,350,2,698,1,44,44,44],2,m,p,o,4,2): print(*r)\n\"");
    CHECK(rc == 0, "oracle failed: %s", out);
    const char *q = out;
    for (int e = 0; e < 2; e++)
        for (int p = 0; p < T; p++) {
            int64_t t[4], rows[6];
            for (int s = 0; s < 4; s++) t[s] = p - s >= 0 ? cls[p - s] : 2;
            ds_engram_row_ids(&ec, e, t, rows);
            for (int k = 0; k < 6; k++) {
                long long v;
                int n;
                CHECK(sscanf(q, "%lld%n", &v, &n) == 1, "oracle output too short");
                q += n;
                CHECK(v == rows[k], "layer %d pos %d col %d: C %lld oracle %lld", e, p, k, (long long)rows[k], v);
            }
        }
}

RUN_ALL()
