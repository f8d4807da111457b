/* ds_model_load's own checks (CHECKPOINT.md §15 items 19, 23, 24) on deliberately broken copies of
 * the tiny checkpoint, asserting the code and the `E_CODE: <file>: <field>: expected <x>, found <y>`
 * text: prime sums against engram_num_embeddings, the token map's length, class count and
 * first-seen order, and configured multipliers against the Appendix A generator.  Also: a clean copy
 * loads, and a missing directory fails without crashing. */
#include "check.h"
#include "dsflash.h"
#include <limits.h>
#include <stdlib.h>


/* A copy of the fixture named `name`, with a Python snippet applied to its config dict `c` (text_config
 * in `t`) and/or its token map (list `m`); the copy's Engram parts are re-verified (stamps name inodes). */
static const char *broken_copy(const char *name, const char *edit) {
    static char dir[1200];
    const char *src = ds_test_tiny_fixture();
    if (!src) return NULL;
    snprintf(dir, sizeof dir, "%s/%s", ds_test_tmpdir(), name);
    char out[4096];
    int rc = ds_test_sh(out, sizeof out,
                        "rm -rf %s && cp -a %s %s && cd %s && /usr/bin/python3 -c \"\n"
                        "import json, struct\n"
                        "c = json.load(open('config.json')); t = c['text_config']\n"
                        "raw = open('engram_token_map.bin','rb').read(); m = list(struct.unpack('<%%dI' %% (len(raw)//4), raw))\n"
                        "%s\n"
                        "json.dump(c, open('config.json','w'), indent=1)\n"
                        "open('engram_token_map.bin','wb').write(struct.pack('<%%dI' %% len(m), *m))\n\" 2>&1 && "
                        "%s reassemble %s/engram_int8 --quiet 2>&1",
                        dir, src, dir, dir, edit, ds_test_bin(), dir);
    if (rc) {
        fprintf(stderr, "  broken copy %s: %s\n", name, out);
        return NULL;
    }
    return dir;
}

static int load_fails(const char *dir, char *eb, size_t n) {
    ds_load_options o = {.kernels = "reference", .threads = 1};
    ds_model *m = ds_model_load(dir, &o, eb, n);
    if (m) { ds_model_free(m); return 0; }
    return 1;
}

TEST(clean_fixture_loads) {
    const char *d = broken_copy("clean", "pass");
    CHECK(d != NULL);
    if (!d) return;
    char eb[1024];
    CHECK(!load_fails(d, eb, sizeof eb), "%s", eb);
}

TEST(check19_prime_sum) {
    /* a different prime floor moves every prime: the sums no longer equal engram_num_embeddings */
    const char *d = broken_copy("primes", "t['engram_vocab_size'] = 1100");
    if (!d) { CHECK(0, "copy"); return; }
    char eb[1024], want[1400];
    CHECK(load_fails(d, eb, sizeof eb));
    /* primes above 1099 for layer 1: 1103 1109 1117 1123 1129 1151 -> 6732 */
    snprintf(want, sizeof want, "E_ENGRAM_PRIME_SUM: %s/config.json: engram_num_embeddings[0]: expected 6732 (sum of the "
             "primes of layer 1), found 6126", d);
    CHECK(!strcmp(eb, want), "\n  got  %s\n  want %s", eb, want);
}

TEST(check24_multipliers) {
    const char *d = broken_copy("mults", "t['engram_hash_multipliers'][1][2] += 2");
    if (!d) { CHECK(0, "copy"); return; }
    char eb[1024], want[1400];
    CHECK(load_fails(d, eb, sizeof eb));
    snprintf(want, sizeof want, "E_ENGRAM_MULTIPLIERS: %s/config.json: engram_hash_multipliers[1][2]: expected "
             "3205963898546285, found 3205963898546287", d);
    CHECK(!strcmp(eb, want), "\n  got  %s\n  want %s", eb, want);
}

TEST(check23_token_map) {
    char eb[1024], want[1400];
    const char *d = broken_copy("map_len", "m = m[:-1]");
    if (!d) { CHECK(0, "copy"); return; }
    CHECK(load_fails(d, eb, sizeof eb));
    snprintf(want, sizeof want, "E_TOKEN_MAP_SIZE: %s/engram_token_map.bin: expected 4096 bytes (vocab_size 1024 x 4), "
             "found 4092", d);
    CHECK(!strcmp(eb, want), "\n  got  %s\n  want %s", eb, want);
    d = broken_copy("map_classes", "m[1023] = 700");
    if (!d) { CHECK(0, "copy"); return; }
    CHECK(load_fails(d, eb, sizeof eb));
    snprintf(want, sizeof want, "E_TOKEN_MAP_SIZE: %s/engram_token_map.bin: expected 700 classes "
             "(engram_compressed_vocab_size), found 701", d);
    CHECK(!strcmp(eb, want), "\n  got  %s\n  want %s", eb, want);
    d = broken_copy("map_order", "m[5] = 9");
    if (!d) { CHECK(0, "copy"); return; }
    CHECK(load_fails(d, eb, sizeof eb));
    snprintf(want, sizeof want, "E_TOKEN_MAP_SIZE: %s/engram_token_map.bin: expected class <= 5 at id 5 (first-seen "
             "order), found 9", d);
    CHECK(!strcmp(eb, want), "\n  got  %s\n  want %s", eb, want);
}

TEST(missing_directory) {
    char eb[1024];
    CHECK(load_fails("/nonexistent/dsflash-model", eb, sizeof eb));
    CHECK(strstr(eb, "E_") == eb && strstr(eb, "/nonexistent/dsflash-model") != NULL, "%s", eb);
}

RUN_ALL()
