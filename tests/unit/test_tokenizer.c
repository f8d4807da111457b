/* Tokenizer core: UTF-8 replacement rules, the regex engine, tokenizer.json validation errors,
 * encode/decode on the DeepSeek tokenizer, the streaming detokenizer, thread safety, and the
 * V4.1-style release tokenizers.  Byte-exact agreement with HF tokenizers on whole corpora is
 * tested by tests/tokenizer/run_reference.sh; the expectations here come from the Unicode
 * standard's worked examples, from the regex semantics, or from the spec's fixed ids. */
#define _GNU_SOURCE
#include "check.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/uregex.h"
#include "tokenizer/release_tokenizer.h"
#include "base/fsutil.h"
#include <pthread.h>

static ds_tokenizer *g_base;
static ds_tokenizer *base_tok(void) {
    if (g_base) return g_base;
    const char *p = ds_tokenizer_default_base();
    CHECK(p != NULL, "the DeepSeek tokenizer.json is not fetched (scripts/install-deps.sh)");
    if (!p) return NULL;
    ds_error err = {0};
    CHECK(ds_tokenizer_load(p, &g_base, &err) == 0, "%s", err.msg);
    return g_base;
}

/* Unicode 15 §3.9, "U+FFFD substitution of maximal subparts", the standard's worked example. */
TEST(utf8_lossy_follows_maximal_subpart_rule) {
    const char in[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
    char out[128];
    size_t used;
    size_t n = ds_utf8_lossy((const uint8_t *)in, sizeof in - 1, true, out, &used);
    const char *want = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d";
    CHECK(n == strlen(want) && !memcmp(out, want, n), "got %zu bytes", n);
    /* surrogates, overlongs and out-of-range lead bytes each give one U+FFFD per byte */
    n = ds_utf8_lossy((const uint8_t *)"\xED\xA0\x80" "\xC0\xAF" "\xF5\x80", 7, true, out, &used);
    CHECK(n == 7 * 3, "ill-formed bytes: %zu", n);
    /* an incomplete tail is held back unless final */
    n = ds_utf8_lossy((const uint8_t *)"ok\xE4\xBD", 4, false, out, &used);
    CHECK(n == 2 && used == 2, "held tail: n=%zu used=%zu", n, used);
    n = ds_utf8_lossy((const uint8_t *)"ok\xE4\xBD", 4, true, out, &used);
    CHECK(n == 5 && used == 4 && !memcmp(out + 2, "\xEF\xBF\xBD", 3), "final tail: n=%zu", n);
}

static int find_all(const char *pattern, const char *text, char *out, size_t outlen) {
    char eb[256];
    ds_uregex *re = ds_uregex_compile(pattern, eb, sizeof eb);
    if (!re) { snprintf(out, outlen, "compile: %s", eb); return -1; }
    uint32_t cps[256];
    int n = 0;
    size_t len = strlen(text);
    for (size_t i = 0; i < len;) { int k = ds_utf8_decode((const uint8_t *)text + i, len - i, &cps[n++]); i += (size_t)k; }
    out[0] = 0;
    int pos = 0, s, e;
    while (pos <= n && ds_uregex_find(re, cps, n, pos, &s, &e)) {
        char m[32];
        snprintf(m, sizeof m, "[%d,%d)", s, e);
        strncat(out, m, outlen - strlen(out) - 1);
        pos = e > s ? e : s + 1;
    }
    ds_uregex_free(re);
    return 0;
}

TEST(regex_engine_semantics) {
    char got[512];
    struct { const char *pat, *text, *want; } cases[] = {
        {"\\p{N}{1,3}", "a12345b6", "[1,4)[4,6)[7,8)"},                   /* greedy, bounded */
        {"\\s+(?!\\S)|\\s+", "a   b  ", "[1,3)[3,4)[5,7)"},                /* lookahead backs off one */
        {" ?\\p{L}+| ?\\p{N}+", "hi 42 yo", "[0,2)[2,5)[5,8)"},
        {"'s|'t|'re", "it's they're", "[2,4)[9,12)"},                     /* leftmost-first alternation */
        {"(?i:'s|'T)", "A'S b'T c't", "[1,3)[5,7)[9,11)"},
        {"[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+", "1ab,c\u0301", "[0,3)[4,6)"},
        {"a*?b", "aaab", "[0,4)"},                                        /* lazy still reaches b */
        {"[\u4e00-\u9fa5]+", "x中文y", "[1,3)"},
        {"\\d+", "x\u0663\u0664 7", "[1,3)[4,5)"},                        /* \d = Nd, Unicode digits */
        {"^a|b$", "ab", "[0,1)[1,2)"},
        {"x(?:ab){1,2}", "xababab xab", "[0,5)[8,11)"},                  /* bounded group repetition */
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(cases); i++) {
        find_all(cases[i].pat, cases[i].text, got, sizeof got);
        CHECK(!strcmp(got, cases[i].want), "/%s/ on '%s': got %s want %s", cases[i].pat, cases[i].text, got, cases[i].want);
    }
    const char *bad[] = {"(?<=a)b", "a{2,1}", "[a", "(a", "a)", "\\p{Foo}", "a++", "\\1", "(?:ab)+", "(a|b)*"};
    for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
        char eb[256];
        ds_uregex *re = ds_uregex_compile(bad[i], eb, sizeof eb);
        CHECK(re == NULL && strstr(eb, "regex error"), "/%s/ should be rejected with a message", bad[i]);
        ds_uregex_free(re);
    }
    CHECK(ds_uwhite(0x3000) && ds_uwhite(0x85) && !ds_uwhite(0x200B) && !ds_uwhite(0x180E), "White_Space set");
}

static const char *MINI_JSON =
    "{\"added_tokens\":[{\"id\":6,\"content\":\"<X>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{%s},\"merges\":[%s]}}";

static int load_json(const char *vocab, const char *merges, ds_tokenizer **t, ds_error *err) {
    char *full = NULL;
    if (asprintf(&full, MINI_JSON, vocab, merges) < 0) return -1;
    int rc = ds_tokenizer_load_mem(full, strlen(full), "test.json", t, err);
    free(full);
    return rc;
}

TEST(tokenizer_json_errors_name_file_field_and_value) {
    ds_error err = {0};
    ds_tokenizer *t = NULL;
    CHECK(ds_tokenizer_load_mem("{", 1, "broken.json", &t, &err) < 0 && strstr(err.msg, "broken.json") && !strcmp(err.code, "E_TOKENIZER_JSON"), "%s", err.msg);
    const char *nf = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}, \"pre_tokenizer\":{\"type\":\"ByteLevel\"}, \"decoder\":{\"type\":\"ByteLevel\"}}";
    CHECK(ds_tokenizer_load_mem(nf, strlen(nf), "wp.json", &t, &err) < 0 && strstr(err.msg, "model.type") && strstr(err.msg, "WordPiece"), "%s", err.msg);
    const char *nn = "{\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}";
    CHECK(ds_tokenizer_load_mem(nn, strlen(nn), "n.json", &t, &err) < 0 && strstr(err.msg, "normalizer") && strstr(err.msg, "Lowercase"), "%s", err.msg);
    /* a byte-level vocabulary must cover all 256 bytes */
    CHECK(load_json("\"a\":0,\"b\":1", "", &t, &err) < 0 && strstr(err.msg, "byte 0x00"), "%s", err.msg);
    /* a merge whose result is not in the vocabulary */
    char vocab[16384] = "";
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        static int nonp = 0;
        if (b == 0) nonp = 0;
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + nonp++);
        char u[8];
        u[ds_utf8_encode(cp, u)] = 0;
        char ent[32];
        snprintf(ent, sizeof ent, "%s\"%s%s\":%d", b ? "," : "", cp == '"' ? "\\" : cp == '\\' ? "\\" : "", u, b + 7);
        strcat(vocab, ent);
    }
    CHECK(load_json(vocab, "\"a b\"", &t, &err) < 0 && strstr(err.msg, "model.merges") && strstr(err.msg, "merged symbol"), "%s", err.msg);
    char v2[16500];
    snprintf(v2, sizeof v2, "%s,\"ab\":300", vocab);
    CHECK(load_json(v2, "\"a b\"", &t, &err) == 0, "valid tiny tokenizer rejected: %s", err.msg);
    if (t) {
        ds_tokens ids = {0};
        CHECK(ds_tokenizer_encode(t, "ab<X>a", 6, true, &ids, &err) == 0, "%s", err.msg);
        CHECK(ids.n == 3 && ids.ids[0] == 300 && ids.ids[1] == 6 && ids.ids[2] == 'a' + 7, "ids %zu: %d %d %d", ids.n, ids.ids[0], ids.ids[1], ids.ids[2]);
        ids.n = 0;
        CHECK(ds_tokenizer_encode(t, "<X>", 3, false, &ids, &err) == 0 && ids.n == 3, "parse_special=false must not match literals (%zu ids)", ids.n);
        CHECK(ds_tokenizer_encode(t, "a\xFF", 2, true, &ids, &err) < 0 && !strcmp(err.code, "E_TOKENIZER_UTF8") && strstr(err.msg, "offset 1"), "%s", err.msg);
        CHECK(ds_tokenizer_vocab_size(t) == 301, "vocab size %d", ds_tokenizer_vocab_size(t));
        int32_t hole = 5;
        CHECK(ds_tokenizer_decode(t, &hole, 1, false, NULL, &err) == NULL && !strcmp(err.code, "E_TOKENIZER_ID"), "hole id must be an error");
        ds_tokens_free(&ids);
        ds_tokenizer_free(t);
    }
}

TEST(deepseek_special_ids_and_round_trip) {
    ds_tokenizer *t = base_tok();
    if (!t) return;
    CHECK(ds_tokenizer_vocab_size(t) == 128815, "V3 vocab %d", ds_tokenizer_vocab_size(t));
    CHECK(ds_tokenizer_token_id(t, "<｜begin▁of▁sentence｜>") == 0 && ds_tokenizer_token_id(t, "<｜end▁of▁sentence｜>") == 1, "BOS/EOS");
    CHECK(ds_tokenizer_token_id(t, "<｜Assistant｜>") == 128804 && ds_tokenizer_token_id(t, "<｜nope｜>") == -1, "lookups");
    bool special;
    CHECK(ds_tokenizer_is_added(t, 1, &special) && special, "EOS is special");
    CHECK(ds_tokenizer_is_added(t, 128804, &special) && !special, "Assistant is added, not special");
    const char *text = "<｜begin▁of▁sentence｜>Hello 世界 😀 e\xCC\x81<｜end▁of▁sentence｜>";
    ds_tokens ids = {0};
    ds_error err = {0};
    CHECK(ds_tokenizer_encode(t, text, strlen(text), true, &ids, &err) == 0, "%s", err.msg);
    CHECK(ids.n > 4 && ids.ids[0] == 0 && ids.ids[ids.n - 1] == 1, "literals not recognised");
    size_t n;
    char *back = ds_tokenizer_decode(t, ids.ids, ids.n, false, &n, &err);
    CHECK(back && n == strlen(text) && !memcmp(back, text, n), "round trip: %s", back);
    free(back);
    back = ds_tokenizer_decode(t, ids.ids, ids.n, true, &n, &err);
    CHECK(back && !strcmp(back, "Hello 世界 😀 e\xCC\x81"), "skip special: '%s'", back);
    free(back);
    size_t bl;
    const uint8_t *b = ds_tokenizer_token_bytes(t, 223, &bl);   /* "Ġ" is the single space byte */
    CHECK(b && bl == 1 && b[0] == ' ', "token bytes of 223");
    ds_tokens_free(&ids);
}

TEST(detok_stream_never_splits_characters_or_tokens) {
    ds_tokenizer *t = base_tok();
    if (!t) return;
    const char *text = "中文😀👨‍👩‍👧 ok<｜User｜>é\u0301 \u2028end";
    ds_tokens ids = {0};
    ds_error err = {0};
    ds_tokenizer_encode(t, text, strlen(text), true, &ids, &err);
    /* append a lone continuation byte token and a truncated character to exercise U+FFFD */
    int32_t extra[2] = {-1, -1};   /* the single-byte tokens for 0x80 and 0xE4 */
    for (int32_t id = 0; id < 1000; id++) {
        size_t bl;
        const uint8_t *b = ds_tokenizer_token_bytes(t, id, &bl);
        if (b && bl == 1 && b[0] == 0x80) extra[0] = id;
        if (b && bl == 1 && b[0] == 0xE4) extra[1] = id;
    }
    CHECK(extra[0] >= 0 && extra[1] >= 0, "byte symbols");
    ds_tokens_push(&ids, extra[0]);
    ds_tokens_push(&ids, extra[1]);
    for (int skip = 0; skip < 2; skip++) {
        ds_detok_stream *s = ds_detok_stream_new(t, skip);
        char acc[1024] = "";
        size_t al = 0;
        for (size_t i = 0; i <= ids.n; i++) {
            size_t n;
            const char *c = i < ids.n ? ds_detok_stream_push(s, ids.ids[i], &n, &err) : ds_detok_stream_flush(s, &n);
            CHECK(c != NULL, "%s", err.msg);
            if (!c) break;
            CHECK(ds_utf8_validate((const uint8_t *)c, n) == n, "chunk %zu is not whole UTF-8", i);
            CHECK(!(strstr(c, "<｜") && !strstr(c, "<｜User｜>")), "control token split");
            memcpy(acc + al, c, n);
            al += n;
        }
        size_t dl;
        char *whole = ds_tokenizer_decode(t, ids.ids, ids.n, skip, &dl, &err);
        CHECK(whole && dl == al && !memcmp(whole, acc, al), "stream differs from decode (skip=%d)", skip);
        CHECK(al >= 6 && !memcmp(acc + al - 6, "\xEF\xBF\xBD\xEF\xBF\xBD", 6), "trailing bytes must become two U+FFFD");
        free(whole);
        ds_detok_stream_free(s);
    }
    ds_detok_stream *s = ds_detok_stream_new(t, false);
    size_t n;
    CHECK(ds_detok_stream_push(s, 200000, &n, &err) == NULL && !strcmp(err.code, "E_TOKENIZER_ID"), "bad id accepted");
    ds_detok_stream_free(s);
    ds_tokens_free(&ids);
}

typedef struct { const char *text; size_t len; ds_tokens out; } job;
static void *encode_job(void *arg) {
    job *j = arg;
    ds_error err;
    ds_tokenizer_encode(g_base, j->text, j->len, true, &j->out, &err);
    return NULL;
}

TEST(concurrent_encodes_agree) {
    ds_tokenizer *t = base_tok();
    if (!t) return;
    char *data;
    size_t len;
    ds_error err = {0};
    CHECK(ds_read_file(".cache/tokenizer-data/moby_dick.txt", &data, &len, &err) == 0, "%s", err.msg);
    if (!data) return;
    len = DS_MIN(len, (size_t)200000);
    ds_tokens ref = {0};
    ds_tokenizer_encode(t, data, len, true, &ref, &err);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) { jobs[i] = (job){data, len, {0}}; pthread_create(&th[i], NULL, encode_job, &jobs[i]); }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].out.n == ref.n && !memcmp(jobs[i].out.ids, ref.ids, ref.n * 4), "thread %d differs", i);
        ds_tokens_free(&jobs[i].out);
    }
    ds_tokens_free(&ref);
    free(data);
}

TEST(release_tokenizers_have_the_spec_ids) {
    const char *base = ds_tokenizer_default_base();
    CHECK(base != NULL, "no base tokenizer");
    if (!base) return;
    char mini[512], tiny[512], p[600];
    snprintf(mini, sizeof mini, "%s/mini", ds_test_tmpdir());
    snprintf(tiny, sizeof tiny, "%s/tiny", ds_test_tmpdir());
    ds_error err = {0};
    CHECK(ds_tokenizer_write_release(base, 129280, 128799, 129264, mini, &err) == 0, "%s", err.msg);
    CHECK(ds_tokenizer_write_release(base, 1024, 1001, 1010, tiny, &err) == 0, "%s", err.msg);
    const char *lits[] = {"<｜System｜>", "<｜User｜>", "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜", "<｜action｜>",
                          "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"};
    for (int which = 0; which < 2; which++) {
        snprintf(p, sizeof p, "%s/tokenizer.json", which ? tiny : mini);
        ds_tokenizer *t;
        CHECK(ds_tokenizer_load(p, &t, &err) == 0, "%s", err.msg);
        if (!t) continue;
        int V = which ? 1024 : 129280;
        CHECK(ds_tokenizer_vocab_size(t) == V, "vocab %d", ds_tokenizer_vocab_size(t));
        for (int id = 0; id < V; id++) if (!ds_tokenizer_id_to_token(t, id)) { CHECK(0, "id %d undefined", id); break; }
        CHECK(ds_tokenizer_token_id(t, "<｜begin▁of▁sentence｜>") == 0 && ds_tokenizer_token_id(t, "<｜end▁of▁sentence｜>") == 1 &&
              ds_tokenizer_token_id(t, "<｜▁pad▁｜>") == 2, "BOS/EOS/PAD");
        CHECK(ds_tokenizer_token_id(t, "<｜deepseek_image｜>") == (which ? 1010 : 129264), "image id");
        CHECK(ds_tokenizer_token_id(t, "<｜place▁holder▁no▁799｜>") == (which ? 1001 : 128799), "noise id");
        if (!which) CHECK(ds_tokenizer_token_id(t, "<｜Assistant｜>") == 128804, "Assistant id");
        for (size_t i = 0; i < DS_ARRAY_LEN(lits); i++) {
            int32_t id = ds_tokenizer_token_id(t, lits[i]);
            bool sp = true;
            CHECK(id >= 0 && ds_tokenizer_is_added(t, id, &sp) && !sp, "%s missing or special", lits[i]);
        }
        /* every byte stays encodable and decodes back */
        char all[256];
        for (int b = 1; b < 256; b++) all[b - 1] = (char)b;
        ds_tokens ids = {0};
        const char *txt = "Bytes: \x01\x7f ünïcödé 中文 😀";
        CHECK(ds_tokenizer_encode(t, txt, strlen(txt), true, &ids, &err) == 0, "%s", err.msg);
        size_t n;
        char *back = ds_tokenizer_decode(t, ids.ids, ids.n, false, &n, &err);
        CHECK(back && !strcmp(back, txt), "round trip in %s", which ? "tiny" : "mini");
        free(back);
        (void)all;
        ds_tokens_free(&ids);
        ds_tokenizer_free(t);
    }
    CHECK(ds_tokenizer_write_release(base, 100000, 1, 2, mini, &err) < 0 && strstr(err.msg, "vocab_size 100000"), "%s", err.msg);
    CHECK(ds_tokenizer_write_release(base, 1024, 5, 1010, tiny, &err) < 0 && strstr(err.msg, "top region"), "%s", err.msg);
    CHECK(ds_tokenizer_write_release("/nonexistent/tokenizer.json", 1024, 1001, 1010, tiny, &err) < 0 && strstr(err.msg, "/nonexistent"), "%s", err.msg);
}

CLEANUP(free_shared_tokenizer) { ds_tokenizer_free(g_base); g_base = NULL; }

RUN_ALL()
