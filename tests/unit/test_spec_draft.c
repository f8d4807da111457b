/* The batched DSpark draft pass and the greedy draft pick (MODEL.md §4.1).
 *
 * Independent references: a batched pass over several sequences must give, for every sequence,
 * the same proposals, draft logits and confidences bit for bit as the single-sequence pass (the
 * one the NumPy oracle checks in tests/spec, compare_draft.py), in both numerics tiers; the
 * vectorized argmax must equal the plain scalar rule it replaces (first index of the maximum, ties
 * to the lower id, masked and excluded ids never chosen, NaN never chosen unless first) on random
 * rows full of ties, masks, infinities and NaNs; a greedy row whose logits are not asked for (the
 * bounded Markov pick) must propose what the fully corrected row proposes.  The trained fixture comes from
 * tests/data/trained-tiny through `dsflash quantize`. */
#include "check.h"
#include "engine/spec.h"
#include "model/draft.h"
#include "model/head_screen.h"
#include <math.h>


static int32_t *heldout(int64_t *n) {
    char path[1300];
    snprintf(path, sizeof path, "%s/tt_float/heldout.u32", ds_test_tmpdir());
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    int32_t *ids = malloc(sizeof(int32_t) * 4096);
    *n = (int64_t)fread(ids, 4, 4096, f);
    fclose(f);
    return ids;
}

enum { NSEQ = 3 };

static void batch_equals_single(const char *numerics) {
    const char *dir = ds_test_trained_fixture();
    CHECK(dir != NULL, "trained fixture");
    if (!dir) return;
    int64_t n_ids = 0;
    int32_t *ids = heldout(&n_ids);
    CHECK(ids != NULL && n_ids > 400, "held-out ids");
    if (!ids || n_ids <= 400) { free(ids); return; }
    ds_load_options lo = {.kernels = "auto", .draft = 2, .numerics = numerics};
    char eb[1024];
    ds_model *m = ds_model_load(dir, &lo, eb, sizeof eb);
    CHECK(m != NULL && m->draft != NULL, "load %s: %s", dir, eb);
    if (!m || !m->draft) { free(ids); if (m) ds_model_free(m); return; }
    const int B = m->draft->block, V = ds_model_vocab_size(m);
    const int lens[NSEQ] = {20, 57, 130};   /* different ring lengths: one shorter than the window */
    ds_seq *s[NSEQ];
    int32_t anchors[NSEQ];
    ds_error err = {{0}, {0}};
    for (int i = 0; i < NSEQ; i++) {
        s[i] = ds_seq_new(m);
        const int32_t *p = ids + 100 * i;
        CHECK(ds_spec_prefill(m, s[i], p, lens[i], 0, NULL, &err) == 0, "prefill: %s", err.msg);
        anchors[i] = p[lens[i]];
    }
    int32_t d1[NSEQ * DS_DRAFT_MAX_BLOCK], dn[NSEQ * DS_DRAFT_MAX_BLOCK];
    float *l1 = malloc(sizeof(float) * (size_t)NSEQ * B * V), *ln = malloc(sizeof(float) * (size_t)NSEQ * B * V);
    float c1[NSEQ * DS_DRAFT_MAX_BLOCK], cn[NSEQ * DS_DRAFT_MAX_BLOCK];
    for (int i = 0; i < NSEQ; i++)
        CHECK(ds_draft_propose(m, s[i], anchors[i], NULL, NULL, d1 + i * B, l1 + (size_t)i * B * V, c1 + i * B, &err) == 0,
              "single pass: %s", err.msg);
    const ds_seq *cs[NSEQ] = {s[0], s[1], s[2]};
    CHECK(ds_draft_propose_many(m, NSEQ, cs, anchors, NULL, NULL, NULL, dn, ln, cn, &err) == 0, "batched pass: %s", err.msg);
    CHECK(memcmp(d1, dn, sizeof(int32_t) * NSEQ * B) == 0, "%s: batched proposals differ from single ones", numerics);
    CHECK(memcmp(l1, ln, sizeof(float) * (size_t)NSEQ * B * V) == 0, "%s: batched draft logits not bit-identical", numerics);
    CHECK(memcmp(c1, cn, sizeof(float) * NSEQ * B) == 0, "%s: batched confidences not bit-identical", numerics);
    /* the proposals are the argmax of their logits (noise excluded), and the batch order does not matter */
    const ds_seq *rev[NSEQ] = {s[2], s[1], s[0]};
    int32_t ar[NSEQ] = {anchors[2], anchors[1], anchors[0]}, dr[NSEQ * DS_DRAFT_MAX_BLOCK];
    CHECK(ds_draft_propose_many(m, NSEQ, rev, ar, NULL, NULL, NULL, dr, NULL, NULL, &err) == 0, "reversed pass: %s", err.msg);
    for (int i = 0; i < NSEQ; i++) CHECK(memcmp(dr + (NSEQ - 1 - i) * B, d1 + i * B, sizeof(int32_t) * B) == 0, "order");
    int argmax_ok = 1;
    for (int r = 0; r < NSEQ * B; r++) {
        const float *row = l1 + (size_t)r * V;
        int32_t best = m->cfg.dspark_noise_id == 0 ? 1 : 0;
        for (int v = best + 1; v < V; v++)
            if (v != m->cfg.dspark_noise_id && row[v] > row[best]) best = v;
        argmax_ok &= best == d1[r];
    }
    CHECK(argmax_ok, "%s: a proposal is not the argmax of its draft logits", numerics);
    /* greedy rows whose logits are not asked for skip most of the Markov correction: their
     * proposals must equal those of the fully corrected rows, with and without a mask */
    uint8_t *mask = calloc((size_t)V, 1);
    for (int v = 0; v < V; v += 3) mask[v] = 1;
    int same = 1, rows = 0;
    const ds_head_screen_stats h0 = ds_head_screen_stats_get();
    for (int k = 0; k < 12; k++) {
        int32_t an[NSEQ], df[NSEQ * DS_DRAFT_MAX_BLOCK], dp[NSEQ * DS_DRAFT_MAX_BLOCK];
        for (int i = 0; i < NSEQ; i++) an[i] = ids[300 + 7 * k + i];
        const uint8_t *mk = k % 2 ? mask : NULL;
        CHECK(ds_draft_propose_many(m, NSEQ, cs, an, NULL, NULL, mk, df, ln, NULL, &err) == 0, "full: %s", err.msg);
        CHECK(ds_draft_propose_many(m, NSEQ, cs, an, NULL, NULL, mk, dp, NULL, NULL, &err) == 0, "bounded: %s", err.msg);
        same &= memcmp(df, dp, sizeof(int32_t) * NSEQ * B) == 0;
        for (int r = 0; r < NSEQ * B; r++) same &= !(mk && mk[dp[r]]);
        rows += NSEQ * B;
    }
    CHECK(same, "%s: bounded greedy proposals differ from the fully corrected ones", numerics);
    /* the fast tier's greedy rows go through the head's screen (decision 163): it must have decided them */
    const ds_head_screen_stats h1 = ds_head_screen_stats_get();
    const uint64_t screened = h1.rows - h0.rows, undecided = h1.full_rows - h0.full_rows;
    if (!strcmp(numerics, "fast"))
        CHECK(screened >= (uint64_t)rows && undecided * 10 <= screened, "fast: the screen decided the greedy draft rows "
              "(%llu screened, %llu undecided)", (unsigned long long)screened, (unsigned long long)undecided);
    else
        CHECK(screened == 0, "exact: no screen (%llu rows screened)", (unsigned long long)screened);
    free(mask);
    printf("  %s: %d sequences x %d rows: batched == single (proposals, logits, confidences); %d greedy rows: bounded "
           "Markov pick == full (%llu through the head's screen, %llu undecided)\n", numerics, NSEQ, B, rows,
           (unsigned long long)screened, (unsigned long long)undecided);
    for (int i = 0; i < NSEQ; i++) ds_seq_free(s[i]);
    free(l1);
    free(ln);
    free(ids);
    ds_model_free(m);
}

/* A random draft: its Markov bound rarely prunes, so the head's screen leaves rows undecided and the
 * pass falls back to reading the whole head (draft_heads.c); proposals must still equal those of
 * the fully corrected rows, pass after pass (the screen is retried every SCREEN_REST + 1 passes). */
TEST(draft_screen_fallback_random_tiny) {
    const char *dir = ds_test_tiny_fixture();
    CHECK(dir != NULL, "tiny fixture");
    if (!dir) return;
    ds_load_options lo = {.kernels = "auto", .draft = 2, .numerics = "fast"};
    char eb[1024];
    ds_model *m = ds_model_load(dir, &lo, eb, sizeof eb);
    CHECK(m != NULL && m->draft != NULL, "load %s: %s", dir, eb);
    if (!m || !m->draft) { if (m) ds_model_free(m); return; }
    const int B = m->draft->block, V = m->cfg.vocab_size;
    ds_error err = {{0}, {0}};
    ds_seq *s = ds_seq_new(m);
    int32_t prompt[40];
    for (int p = 0; p < 40; p++) prompt[p] = 3 + (p * 7919) % 900;
    CHECK(ds_spec_prefill(m, s, prompt, 40, 0, NULL, &err) == 0, "prefill: %s", err.msg);
    float *lg = malloc(sizeof(float) * (size_t)B * V);
    const ds_head_screen_stats h0 = ds_head_screen_stats_get();
    /* after 20 passes the Markov bounds are made useless (every norm 1e35, still true bounds): the
     * screen cannot decide, the pass reads the whole head, and the pick_pruned fallback corrects in full */
    float *loose = malloc(sizeof(float) * (size_t)V);
    for (int v = 0; v < V; v++) loose[v] = 1e35f;
    const float *norm0 = m->draft->markov_norm;
    const float max0 = m->draft->markov_norm_max;
    int same = 1;
    for (int k = 0; k < 60; k++) {
        if (k == 20) m->draft->markov_norm = loose, m->draft->markov_norm_max = 1e35f;
        int32_t df[DS_DRAFT_MAX_BLOCK], dp[DS_DRAFT_MAX_BLOCK];
        const int32_t an = 5 + (k * 104729) % 900;
        CHECK(ds_draft_propose(m, s, an, NULL, NULL, df, lg, NULL, &err) == 0, "full: %s", err.msg);
        CHECK(ds_draft_propose(m, s, an, NULL, NULL, dp, NULL, NULL, &err) == 0, "screened: %s", err.msg);
        same &= memcmp(df, dp, sizeof(int32_t) * (size_t)B) == 0;
    }
    m->draft->markov_norm = norm0, m->draft->markov_norm_max = max0;
    const ds_head_screen_stats h1 = ds_head_screen_stats_get();
    printf("  random tiny: 60 passes (40 with loose Markov bounds), proposals equal: %s; %llu rows screened, %llu "
           "undecided\n", same ? "yes" : "no", (unsigned long long)(h1.rows - h0.rows),
           (unsigned long long)(h1.full_rows - h0.full_rows));
    CHECK(same, "screened proposals differ from the fully corrected ones");
    /* 20 passes x 5 rows decided, then a miss every 16 passes (the first row of each miss pass) */
    CHECK(h1.rows - h0.rows >= 100 && h1.full_rows - h0.full_rows >= 2 && h1.full_rows - h0.full_rows <= 4,
          "the screen decided the first passes and was retried after misses (%llu rows, %llu undecided)",
          (unsigned long long)(h1.rows - h0.rows), (unsigned long long)(h1.full_rows - h0.full_rows));
    free(loose);
    free(lg);
    ds_seq_free(s);
    ds_model_free(m);
}

TEST(draft_batched_pass_equals_single_exact) { batch_equals_single("exact"); }
TEST(draft_batched_pass_equals_single_fast) { batch_equals_single("fast"); }

/* The rule the vectorized argmax replaces, written plainly. */
static int32_t scalar_argmax(const float *x, int V, const uint8_t *masked, int32_t exclude) {
    int32_t best = -1;
    for (int v = 0; v < V; v++)
        if (!(masked && masked[v]) && v != exclude && (best < 0 || x[v] > x[best])) best = v;
    return best < 0 ? 0 : best;
}

/* Fidelity of the fast tier's draft pass (every stage, the attention core shared with the trunk,
 * the heads) against the exact tier's on the trained fixture: same sequences, same anchors, each
 * tier's own prefill.  Relative L2 of the draft logits and the share of equal proposals, as the
 * trunk's fidelity check bounds them (docs/NUMERICS.md). */
static int propose_tier(const char *dir, const char *numerics, const int32_t *ids, int32_t *drafts, float **logits, size_t *nv) {
    ds_load_options lo = {.kernels = "auto", .draft = 2, .numerics = numerics};
    char eb[1024];
    ds_model *m = ds_model_load(dir, &lo, eb, sizeof eb);
    CHECK(m != NULL && m->draft != NULL, "load %s (%s): %s", dir, numerics, eb);
    if (!m || !m->draft) { if (m) ds_model_free(m); return -1; }
    const int B = m->draft->block, V = ds_model_vocab_size(m);
    ds_error err = {{0}, {0}};
    *nv = (size_t)V;
    *logits = malloc(sizeof(float) * 8 * (size_t)B * (size_t)V);
    for (int i = 0; i < 8; i++) {
        ds_seq *s = ds_seq_new(m);
        const int32_t *p = ids + 37 * i, len = 24 + 16 * i;
        CHECK(ds_spec_prefill(m, s, p, len, 0, NULL, &err) == 0, "prefill: %s", err.msg);
        CHECK(ds_draft_propose(m, s, p[len], NULL, NULL, drafts + i * B, *logits + (size_t)i * B * V, NULL, &err) == 0,
              "%s pass: %s", numerics, err.msg);
        ds_seq_free(s);
    }
    ds_model_free(m);
    return B;
}

TEST(draft_fast_tier_tracks_exact) {
    const char *dir = ds_test_trained_fixture();
    CHECK(dir != NULL, "trained fixture");
    int64_t n_ids = 0;
    int32_t *ids = dir ? heldout(&n_ids) : NULL;
    CHECK(ids != NULL && n_ids > 600, "held-out ids");
    if (!ids || n_ids <= 600) { free(ids); return; }
    int32_t de[8 * DS_DRAFT_MAX_BLOCK], df[8 * DS_DRAFT_MAX_BLOCK];
    float *le = NULL, *lf = NULL;
    size_t V = 0, Vf = 0;
    const int B = propose_tier(dir, "exact", ids, de, &le, &V), Bf = propose_tier(dir, "fast", ids, df, &lf, &Vf);
    CHECK(B > 0 && B == Bf && V == Vf, "blocks %d / %d", B, Bf);
    if (B > 0 && B == Bf && V == Vf) {
        double num = 0, den = 0;
        int same = 0;
        for (size_t k = 0; k < (size_t)8 * B * V; k++) {
            const double d = (double)lf[k] - (double)le[k];
            num += d * d;
            den += (double)le[k] * le[k];
        }
        for (int r = 0; r < 8 * B; r++) same += de[r] == df[r];
        const double rel = sqrt(num / den);
        printf("  %d rows: draft logits fast vs exact relative L2 %.2e, proposals equal %d / %d\n", 8 * B, rel, same, 8 * B);
        CHECK(rel <= 1e-2, "relative L2 %.3e above 1e-2", rel);
        CHECK(same * 10 >= 9 * 8 * B, "proposals equal on %d of %d rows (< 90%%)", same, 8 * B);
    }
    free(le);
    free(lf);
    free(ids);
}

TEST(draft_argmax_equals_scalar_rule) {
    uint64_t st = 0x9e3779b97f4a7c15ull;
    int bad = 0, cases = 0;
    for (int t = 0; t < 3000; t++) {
        const int V = 1 + (int)((st = st * 6364136223846793005ull + 1442695040888963407ull) >> 33) % 300;
        float x[300];
        uint8_t mk[300];
        for (int v = 0; v < V; v++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            const uint32_t u = (uint32_t)(st >> 32);
            x[v] = (float)(u % 7) - 3.0f;                 /* many ties */
            if (u % 97 == 0) x[v] = NAN;
            if (u % 89 == 1) x[v] = -INFINITY;
            if (u % 83 == 2) x[v] = INFINITY;
            if (u % 79 == 3) x[v] = -0.0f;
            mk[v] = (u >> 8) % 5 == 0;
        }
        if (t % 7 == 0) x[0] = NAN;
        if (t % 11 == 0) for (int v = 0; v < V; v++) mk[v] = 1;
        const int32_t ex = t % 3 == 0 ? -1 : (int32_t)(st % (uint64_t)V);
        const uint8_t *m = t % 2 ? mk : NULL;
        bad += ds_draft_argmax(x, V, m, ex) != scalar_argmax(x, V, m, ex);
        cases++;
    }
    CHECK(bad == 0, "argmax differs from the scalar rule in %d of %d rows", bad, cases);
    printf("  %d random rows (ties, masks, NaN, infinities): argmax equal to the scalar rule\n", cases);
}

RUN_ALL()
