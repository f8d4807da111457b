/* End-to-end invariances of the C forward pass on the tiny checkpoint (MODEL.md §6.2–§6.4):
 * chunked prefill equals one-shot prefill bit for bit (chunk sizes 1, 7, 16, 64 over prompts that
 * cross the window, the top-k, the candidate pool, odd/even ratio-2 group ends and page blocks),
 * decode after a prefill equals the same rows of a longer prefill, rollback then re-processing
 * gives identical logits, batched sequences equal each alone, and results do not depend on the KV
 * block size or the thread count.  The absolute numbers are checked against the independent NumPy
 * oracle by tests/oracle/run_oracle.sh; here the oracle is the same engine under another schedule,
 * which must agree exactly.  Every invariance case runs in both numerics tiers (exact and fast:
 * docs/NUMERICS.md), each compared only with itself.  Also: step argument errors, the trace hook,
 * the margin probe.
 *
 * The fixture comes from `dsflash mkmodel --config tiny` ($DSFLASH_BIN, else build/$BUILD/dsflash). */
#include "check.h"
#include "dsflash.h"
#include "model/model.h"
#include "base/threadpool.h"
#include <math.h>
#include <limits.h>
#include <stdlib.h>


/* The numerics tier of the case being run (the invariance cases run once per tier). */
static const char *g_tier = "exact";

/* kernels: "reference" (the scalar ground truth) or "auto" (the SIMD path the server runs) */
static ds_model *load_k(const char *kernels) {
    const char *d = ds_test_tiny_fixture();
    if (!d) return NULL;
    char eb[1024];
    ds_load_options o = {.kernels = kernels, .numerics = g_tier};
    ds_model *m = ds_model_load(d, &o, eb, sizeof eb);
    if (!m) fprintf(stderr, "  load: %s\n", eb);
    if (m) CHECK(!strcmp(ds_model_numerics(m), g_tier), "model runs tier %s, asked %s", ds_model_numerics(m), g_tier);
    return m;
}
static ds_model *load(void) { return load_k("reference"); }

static void prompt(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((seed >> 8) % 997);
    }
}

/* Process tokens in chunks of `chunk` rows, logits of every row into out[n][V]. */
static int run_chunks(ds_model *m, ds_seq *s, const int32_t *t, int n, int chunk, float *out) {
    const int V = ds_model_vocab_size(m);
    char eb[512];
    for (int p = 0; p < n; p += chunk) {
        int k = n - p < chunk ? n - p : chunk;
        if (ds_seq_step(m, s, t + p, k, out + (size_t)p * V, k, eb, sizeof eb) < 0) {
            fprintf(stderr, "  step: %s\n", eb);
            return -1;
        }
    }
    return 0;
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, sizeof(float) * n); }

static void chunked_prefill_equals_one_shot(void);
TEST(chunked_prefill_equals_one_shot_exact) { g_tier = "exact"; chunked_prefill_equals_one_shot(); }
TEST(chunked_prefill_equals_one_shot_fast) { g_tier = "fast"; chunked_prefill_equals_one_shot(); g_tier = "exact"; }
static void chunked_prefill_equals_one_shot(void) {
    ds_model *m = load();
    CHECK(m != NULL, "tiny fixture");
    if (!m) return;
    const int V = ds_model_vocab_size(m);
    int lens[2] = {100, 157};
    int chunks[4] = {1, 7, 16, 64};
    for (int li = 0; li < 2; li++) {
        int P = lens[li];
        int32_t *t = malloc(sizeof(int32_t) * (size_t)P);
        prompt(t, P, 11u + (uint32_t)P);
        float *ref = malloc(sizeof(float) * (size_t)P * V), *got = malloc(sizeof(float) * (size_t)P * V);
        ds_seq *s = ds_seq_new(m);
        CHECK(run_chunks(m, s, t, P, P, ref) == 0);
        CHECK(ds_seq_length(s) == P);
        int finite = 1;
        for (size_t i = 0; i < (size_t)P * V; i++) finite &= isfinite(ref[i]) != 0;
        CHECK(finite, "one-shot logits finite");
        ds_seq_free(s);
        for (int ci = 0; ci < 4; ci++) {
            s = ds_seq_new(m);
            CHECK(run_chunks(m, s, t, P, chunks[ci], got) == 0);
            for (int r = 0; r < P; r++)
                if (!same(ref + (size_t)r * V, got + (size_t)r * V, (size_t)V)) {
                    CHECK(0, "P %d chunk %d: row %d differs", P, chunks[ci], r);
                    break;
                }
            ds_seq_free(s);
        }
        free(t); free(ref); free(got);
    }
    ds_model_free(m);
}

static void decode_after_prefill_equals_longer_prefill(void);
TEST(decode_after_prefill_equals_longer_prefill_exact) { g_tier = "exact"; decode_after_prefill_equals_longer_prefill(); }
TEST(decode_after_prefill_equals_longer_prefill_fast) { g_tier = "fast"; decode_after_prefill_equals_longer_prefill(); g_tier = "exact"; }
static void decode_after_prefill_equals_longer_prefill(void) {
    ds_model *m = load();
    if (!m) { CHECK(0, "fixture"); return; }
    const int V = ds_model_vocab_size(m), P = 101, P1 = 61;
    int32_t t[101];
    prompt(t, P, 5);
    float *ref = malloc(sizeof(float) * (size_t)P * V), *got = malloc(sizeof(float) * (size_t)V);
    ds_seq *s = ds_seq_new(m);
    CHECK(run_chunks(m, s, t, P, P, ref) == 0);
    ds_seq_free(s);
    s = ds_seq_new(m);
    char eb[256];
    CHECK(ds_seq_step(m, s, t, P1, NULL, 0, eb, sizeof eb) == 0, "%s", eb);
    for (int p = P1; p < P; p++) {
        CHECK(ds_seq_step(m, s, t + p, 1, got, 1, eb, sizeof eb) == 0, "%s", eb);
        CHECK(same(ref + (size_t)p * V, got, (size_t)V), "decode row %d differs from the prefill row", p);
    }
    ds_seq_free(s);
    free(ref); free(got);
    ds_model_free(m);
}

static void rollback_then_reprocess_is_identical(void);
TEST(rollback_then_reprocess_is_identical_exact) { g_tier = "exact"; rollback_then_reprocess_is_identical(); }
TEST(rollback_then_reprocess_is_identical_fast) { g_tier = "fast"; rollback_then_reprocess_is_identical(); g_tier = "exact"; }
static void rollback_then_reprocess_is_identical(void) {
    ds_model *m = load();
    if (!m) { CHECK(0, "fixture"); return; }
    const int V = ds_model_vocab_size(m), P = 130;
    int32_t t[130], junk[40];
    prompt(t, P, 77);
    prompt(junk, 40, 99);
    float *ref = malloc(sizeof(float) * (size_t)P * V), *got = malloc(sizeof(float) * (size_t)P * V);
    ds_seq *s = ds_seq_new(m);
    CHECK(run_chunks(m, s, t, P, P, ref) == 0);
    ds_seq_free(s);
    char eb[256];
    int bases[2] = {99, 100};                 /* both parities of the ratio-2 groups */
    int ks[3] = {1, 5, DS_MAX_ROLLBACK};
    for (int bi = 0; bi < 2; bi++)
        for (int ki = 0; ki < 3; ki++) {
            int b = bases[bi], k = ks[ki];
            s = ds_seq_new(m);
            CHECK(ds_seq_step(m, s, t, b, NULL, 0, eb, sizeof eb) == 0);
            /* rejected rows (a verify block of k drafts), then rollback */
            CHECK(ds_seq_step(m, s, junk, k, NULL, 0, eb, sizeof eb) == 0);
            CHECK(ds_seq_truncate(s, b) == 0, "truncate %d -> %d", b + k, b);
            CHECK(ds_seq_length(s) == b);
            CHECK(run_chunks(m, s, t + b, P - b, 7, got) == 0);
            int ok = 1;
            for (int r = b; r < P; r++) ok &= same(ref + (size_t)r * V, got + (size_t)(r - b) * V, (size_t)V);
            CHECK(ok, "base %d, %d rejected rows: logits after rollback differ", b, k);
            ds_seq_free(s);
        }
    /* rollback inside the already-committed prompt, then re-processing the same tokens */
    s = ds_seq_new(m);
    CHECK(ds_seq_step(m, s, t, 120, NULL, 0, eb, sizeof eb) == 0);
    CHECK(ds_seq_truncate(s, 111) == 0);
    CHECK(run_chunks(m, s, t + 111, P - 111, 3, got) == 0);
    int ok = 1;
    for (int r = 111; r < P; r++) ok &= same(ref + (size_t)r * V, got + (size_t)(r - 111) * V, (size_t)V);
    CHECK(ok, "re-processing committed rows after rollback");
    ds_seq_free(s);
    free(ref); free(got);
    ds_model_free(m);
}

static void batched_sequences_equal_each_alone(void);
TEST(batched_sequences_equal_each_alone_exact) { g_tier = "exact"; batched_sequences_equal_each_alone(); }
TEST(batched_sequences_equal_each_alone_fast) { g_tier = "fast"; batched_sequences_equal_each_alone(); g_tier = "exact"; }
static void batched_sequences_equal_each_alone(void) {
    ds_model *m = load_k("auto");
    if (!m) { CHECK(0, "fixture"); return; }
    const int V = ds_model_vocab_size(m), PA = 90, PB = 45, PC = 60;
    int32_t a[90], b[45], c[60];
    prompt(a, PA, 1);
    prompt(b, PB, 2);
    prompt(c, PC, 3);
    float *ra = malloc(sizeof(float) * (size_t)PA * V), *rb = malloc(sizeof(float) * (size_t)PB * V),
          *rc = malloc(sizeof(float) * (size_t)PC * V);
    ds_seq *s = ds_seq_new(m);
    run_chunks(m, s, a, PA, PA, ra);
    ds_seq_free(s);
    s = ds_seq_new(m);
    run_chunks(m, s, b, PB, PB, rb);
    ds_seq_free(s);
    s = ds_seq_new(m);
    run_chunks(m, s, c, PC, PC, rc);
    ds_seq_free(s);
    /* A prefills in chunks of 16, B decodes one row per step, C prefills in chunks of 7 */
    ds_seq *sa = ds_seq_new(m), *sb = ds_seq_new(m), *sc = ds_seq_new_bs(m, 16, NULL, 0);
    float *oa = malloc(sizeof(float) * 16 * V), *ob = malloc(sizeof(float) * V), *oc = malloc(sizeof(float) * 7 * V);
    int pa = 0, pb = 0, pc = 0, ok = 1;
    char eb[256];
    while (pa < PA || pb < PB || pc < PC) {
        ds_seq *seqs[3];
        const int32_t *tk[3];
        int nr[3], nl[3];
        float *lg[3];
        int n = 0, na = 0, nc = 0;
        if (pa < PA) { na = PA - pa < 16 ? PA - pa : 16; seqs[n] = sa; tk[n] = a + pa; nr[n] = nl[n] = na; lg[n++] = oa; }
        if (pb < PB) { seqs[n] = sb; tk[n] = b + pb; nr[n] = nl[n] = 1; lg[n++] = ob; }
        if (pc < PC) { nc = PC - pc < 7 ? PC - pc : 7; seqs[n] = sc; tk[n] = c + pc; nr[n] = nl[n] = nc; lg[n++] = oc; }
        if (ds_batch_step(m, n, seqs, tk, nr, lg, nl, eb, sizeof eb) < 0) { CHECK(0, "%s", eb); break; }
        if (na) { ok &= same(ra + (size_t)pa * V, oa, (size_t)na * V); pa += na; }
        if (pb < PB) { ok &= same(rb + (size_t)pb * V, ob, (size_t)V); pb++; }
        if (nc) { ok &= same(rc + (size_t)pc * V, oc, (size_t)nc * V); pc += nc; }
    }
    CHECK(ok, "batched logits differ from the single-sequence ones");
    CHECK(ds_seq_length(sa) == PA && ds_seq_length(sb) == PB && ds_seq_length(sc) == PC);
    ds_seq_free(sa); ds_seq_free(sb); ds_seq_free(sc);
    free(ra); free(rb); free(rc); free(oa); free(ob); free(oc);
    ds_model_free(m);
}

static void block_size_and_threads_do_not_matter(void);
TEST(block_size_and_threads_do_not_matter_exact) { g_tier = "exact"; block_size_and_threads_do_not_matter(); }
TEST(block_size_and_threads_do_not_matter_fast) { g_tier = "fast"; block_size_and_threads_do_not_matter(); g_tier = "exact"; }
static void block_size_and_threads_do_not_matter(void) {
    ds_model *m = load_k("auto");
    if (!m) { CHECK(0, "fixture"); return; }
    const int V = ds_model_vocab_size(m), P = 150;
    int32_t t[150];
    prompt(t, P, 42);
    float *ref = malloc(sizeof(float) * (size_t)P * V), *got = malloc(sizeof(float) * (size_t)P * V);
    ds_seq *s = ds_seq_new(m);
    run_chunks(m, s, t, P, 64, ref);
    ds_seq_free(s);
    int bss[3] = {16, 32, 256};
    for (int i = 0; i < 3; i++) {
        s = ds_seq_new_bs(m, bss[i], NULL, 0);
        CHECK(s != NULL);
        if (!s) continue;
        run_chunks(m, s, t, P, 64, got);
        CHECK(same(ref, got, (size_t)P * V), "block size %d", bss[i]);
        ds_seq_free(s);
    }
    int before = ds_pool_threads();
    ds_pool_init(1);
    s = ds_seq_new(m);
    run_chunks(m, s, t, P, 64, got);
    CHECK(same(ref, got, (size_t)P * V), "one thread");
    ds_seq_free(s);
    ds_pool_init(2);
    s = ds_seq_new(m);
    run_chunks(m, s, t, P, 64, got);
    CHECK(same(ref, got, (size_t)P * V), "two threads");
    ds_seq_free(s);
    ds_pool_init(3);
    s = ds_seq_new(m);
    run_chunks(m, s, t, P, 64, got);
    CHECK(same(ref, got, (size_t)P * V), "three threads");
    ds_seq_free(s);
    ds_pool_init(before);
    free(ref); free(got);
    ds_model_free(m);
}

TEST(step_errors_leave_the_sequence_unchanged) {
    ds_model *m = load();
    if (!m) { CHECK(0, "fixture"); return; }
    const int V = ds_model_vocab_size(m);
    ds_seq *s = ds_seq_new(m), *s2 = ds_seq_new(m);
    char eb[256];
    int32_t t[4] = {5, 6, V, 7};
    float *lg = malloc(sizeof(float) * 4 * V);
    CHECK(ds_seq_step(m, s, t, 4, lg, 1, eb, sizeof eb) < 0);
    CHECK(strstr(eb, "E_TOKEN_ID") != NULL && strstr(eb, "found 1024") != NULL, "%s", eb);
    CHECK(ds_seq_length(s) == 0 && s->pg.n_blk == 0, "nothing reserved or committed");
    t[2] = 9;
    CHECK(ds_seq_step(m, s, t, 4, lg, 5, eb, sizeof eb) < 0 && strstr(eb, "n_logits"), "%s", eb);
    CHECK(ds_seq_step(m, s, t, 0, NULL, 0, eb, sizeof eb) < 0);
    CHECK(ds_seq_step(m, s, t, 4, NULL, 1, eb, sizeof eb) < 0, "logits buffer required");
    ds_seq *dup[2] = {s, s};
    const int32_t *tk[2] = {t, t};
    int nr[2] = {1, 1}, nl[2] = {0, 0};
    CHECK(ds_batch_step(m, 2, dup, tk, nr, NULL, nl, eb, sizeof eb) < 0 && strstr(eb, "twice"), "%s", eb);
    CHECK(ds_seq_step(m, s, t, 4, lg, 4, eb, sizeof eb) == 0, "%s", eb);
    /* the failed batch left s2 untouched even though s was valid */
    ds_seq *both[2] = {s, s2};
    int32_t bad = -1;
    const int32_t *tk2[2] = {t, &bad};
    CHECK(ds_batch_step(m, 2, both, tk2, nr, NULL, nl, eb, sizeof eb) < 0);
    CHECK(ds_seq_length(s) == 4 && ds_seq_length(s2) == 0);
    CHECK(ds_argmax(lg + 3 * V, V) >= 0);
    /* context limit */
    ds_seq_free(s);
    ds_seq_free(s2);
    free(lg);
    ds_model_free(m);
}

typedef struct tr { int calls, last_layer, rows; double absmax; } tr;
static void hook(void *ctx, int layer, int n_rows, const ds_bf16 *X) {
    tr *t = ctx;
    t->calls++;
    t->last_layer = layer;
    t->rows = n_rows;
    for (int i = 0; i < n_rows * 4 * 128; i++) {
        double v = fabs(ds_bf16_to_f32(X[i]));
        if (v > t->absmax || !isfinite(v)) t->absmax = v;
    }
}

TEST(trace_hook_and_margin_probe) {
    ds_model *m = load();
    if (!m) { CHECK(0, "fixture"); return; }
    const ds_config *c = &m->cfg;
    tr t = {0, -1, 0, 0};
    ds_margin_stats ms;
    ds_margin_reset(&ms);
    ds_model_set_trace(m, hook, &t);
    ds_model_set_margin_probe(m, &ms);
    int32_t tok[80];
    prompt(tok, 80, 9);
    ds_seq *s = ds_seq_new(m);
    char eb[256];
    CHECK(ds_seq_step(m, s, tok, 80, NULL, 0, eb, sizeof eb) == 0);
    CHECK(t.calls == c->n_layers && t.last_layer == c->n_layers - 1 && t.rows == 80, "%d calls", t.calls);
    CHECK(isfinite(t.absmax) && t.absmax > 0);
    CHECK(ms.router_n == 80LL * c->n_layers, "router choices %lld", (long long)ms.router_n);
    CHECK(ms.router_min >= 0 && ms.router_min <= 1);
    /* rows with N_p > index_topk at the index layers: r=2 layer 2 (p >= 17), r=1 layers 4 and 6 (p >= 8) */
    CHECK(ms.indexer_n == (80 - 17) + 2 * (80 - 8), "indexer choices %lld", (long long)ms.indexer_n);
    /* candidate blocks: more than 4 blocks of 4 entries visible at layer 4 (N_p > 16, p >= 16) */
    CHECK(ms.cand_n == 80 - 16, "candidate choices %lld", (long long)ms.cand_n);
    CHECK(ms.bf16_n > 0 && ms.bf16_min >= 0 && ms.bf16_min <= 0.5);
    ds_model_set_trace(m, NULL, NULL);
    ds_model_set_margin_probe(m, NULL);
    ds_seq_free(s);
    ds_model_free(m);
}

RUN_ALL()
