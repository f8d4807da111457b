/* The greedy screen of the output head (model/head_screen.h).
 *
 * Independent reference: the full logits of the same rows, computed by the head's own kernel
 * (ds_linear_forward / ds_batch_step), and the plain greedy rule written out here (first id of the
 * largest value among the ids not masked, -1 when any logit is not finite).  The screened answer
 * must equal it on every row: on crafted heads whose best rows are near-duplicates (the int8 copy
 * cannot order them, so only the exact recompute of the candidates gets them right), exact ties,
 * masks over the winner and rows that overflow; and on the trained fixture and a random tiny
 * model through ds_batch_step_greedy, in both numerics tiers.  The screen must also be what ran:
 * the counters show rows screened and few computed in full. */
#include "check.h"
#include "model/draft.h"
#include "model/head_screen.h"
#include "model/model.h"
#include <math.h>

static int32_t plain_greedy(const float *y, int V, const uint8_t *mask) {
    for (int v = 0; v < V; v++)
        if (!isfinite(y[v])) return -1;
    int32_t best = -1;
    for (int v = 0; v < V; v++)
        if (!(mask && mask[v]) && (best < 0 || y[v] > y[best])) best = v;
    return best;
}

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}
static double nrand(void) { return sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

/* A head whose rows 0..39 are near-duplicates of one row (relative perturbations of 1e-4, below
 * the int8 copy's resolution), rows 40..42 exact copies of row 7, the rest random; x leans on
 * the shared row so the near-duplicates hold the largest logits. */
static void crafted_case(ds_lin_fmt fmt, int V, int D, int masked_winner, double x_scale, int *agree, int *rows) {
    float *wf = malloc(sizeof(float) * (size_t)V * D), *base = malloc(sizeof(float) * D);
    for (int i = 0; i < D; i++) base[i] = (float)nrand();
    for (int v = 0; v < V; v++)
        for (int i = 0; i < D; i++) {
            double w = v < 40 ? base[i] * (1.0 + 1e-4 * nrand()) : 0.3 * nrand();
            wf[(size_t)v * D + i] = (float)w;
        }
    for (int v = 40; v < 43; v++) memcpy(wf + (size_t)v * D, wf + (size_t)7 * D, sizeof(float) * D);
    ds_bf16 *wb = malloc(sizeof(ds_bf16) * (size_t)V * D);
    for (size_t k = 0; k < (size_t)V * D; k++) wb[k] = ds_f32_to_bf16(wf[k]);
    ds_linear L = {.fmt = fmt, .out = V, .in = D, .w = fmt == DS_LIN_F32 ? (const void *)wf : (const void *)wb,
                   .numerics = DS_NUMERICS_FAST};
    size_t bytes = 0;
    ds_head_screen *hs = ds_head_screen_new(&L, &bytes);
    CHECK(hs != NULL && bytes >= (size_t)V * D, "screen of a finite head");
    enum { N = 24 };
    ds_bf16 *x = malloc(sizeof(ds_bf16) * N * D);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < D; i++) x[(size_t)r * D + i] = ds_f32_to_bf16((float)(x_scale * (base[i] + 0.5 * nrand())));
    float *y = malloc(sizeof(float) * (size_t)N * V);
    ds_linear_forward(&L, x, N, y);
    int same = 0;
    for (int r = 0; r < 3; r++)
        for (int v = 0; v < V; v++) {
            const float a = ds_head_logit(&L, x + (size_t)r * D, v), b = y[(size_t)r * V + v];
            same += memcmp(&a, &b, sizeof a) == 0 || (!isfinite(a) && !isfinite(b));
        }
    CHECK(same == 3 * V, "fmt %d: the exact recompute gives the kernel's bits (%d / %d)", (int)fmt, same, 3 * V);
    /* and it read the prepared copy (2 MiB pages), not the published rows, wherever a SIMD path made one */
    if (strcmp(ds_kernels_active(), "reference"))
        CHECK(L.packed && ds_linear_float_rows(&L) != L.w, "fmt %d: the exact recompute reads the prepared copy", (int)fmt);
    uint8_t *mask = calloc((size_t)V, 1);
    for (int v = 0; v < V; v += 5) mask[v] = 1;
    if (masked_winner)
        for (int r = 0; r < N; r++) {
            int32_t w = plain_greedy(y + (size_t)r * V, V, NULL);
            if (w >= 0) mask[w] = 1;
        }
    int32_t ids[N];
    ds_arena ar;
    ds_arena_init(&ar, 0, "test");
    ds_head_greedy(&L, hs, x, N, mask, &ar, ids);
    for (int r = 0; r < N; r++) {
        int32_t want = plain_greedy(y + (size_t)r * V, V, mask);
        *agree += ids[r] == want;
        ++*rows;
        CHECK(ids[r] == want, "fmt %d row %d: screened %d, full %d", (int)fmt, r, ids[r], want);
    }
    ds_arena_free(&ar);
    ds_head_screen_free(hs);
    ds_linear_release(&L);
    free(wf), free(wb), free(base), free(x), free(y), free(mask);
}

TEST(head_screen_matches_full_rows_on_crafted_heads) {
    int agree = 0, rows = 0;
    const ds_head_screen_stats s0 = ds_head_screen_stats_get();
    crafted_case(DS_LIN_F32, 3000, 80, 0, 1.0, &agree, &rows);     /* D not a multiple of 16 */
    crafted_case(DS_LIN_F32, 3000, 256, 1, 1.0, &agree, &rows);    /* the winner masked */
    crafted_case(DS_LIN_BF16, 2500, 96, 0, 1.0, &agree, &rows);    /* BF16 head: pair order, flush */
    crafted_case(DS_LIN_BF16, 2500, 64, 1, 1e-3, &agree, &rows);
    crafted_case(DS_LIN_F32, 1000, 64, 0, 1e37, &agree, &rows);    /* logits overflow: -1 everywhere */
    const ds_head_screen_stats s1 = ds_head_screen_stats_get();
    printf("  %d / %d rows agree; %llu rows screened, %llu candidates recomputed, %llu in full\n", agree, rows,
           (unsigned long long)(s1.rows - s0.rows), (unsigned long long)(s1.candidates - s0.candidates),
           (unsigned long long)(s1.full_rows - s0.full_rows));
    CHECK(s1.candidates - s0.candidates >= 4 * 24 * 2, "the near-duplicates were recomputed (%llu candidates)",
          (unsigned long long)(s1.candidates - s0.candidates));
}

TEST(head_screen_refuses_non_finite_and_exact_heads) {
    float w[4 * 16];
    for (int i = 0; i < 64; i++) w[i] = (float)i / 64.0f;
    ds_linear L = {.fmt = DS_LIN_F32, .out = 4, .in = 16, .w = w, .numerics = DS_NUMERICS_FAST};
    size_t bytes = 1;
    ds_head_screen *hs = ds_head_screen_new(&L, &bytes);
    CHECK(hs != NULL, "finite fast head");
    ds_head_screen_free(hs);
    w[37] = INFINITY;
    CHECK(ds_head_screen_new(&L, &bytes) == NULL && bytes == 0, "a non-finite weight disables the screen");
    w[37] = 0.5f;
    L.numerics = DS_NUMERICS_EXACT;
    CHECK(ds_head_screen_new(&L, &bytes) == NULL, "the exact tier is never screened");
}

/* Two copies of each sequence stepped in one batch with the same tokens: one returns logits, one
 * greedy ids; every greedy id must be the plain greedy pick of its twin's logits. */
static const char *g_kernels = "auto";

static void model_case(const char *dir, const char *numerics, int steps, int feed_own, int *agree, int *rows) {
    ds_load_options lo = {.kernels = g_kernels, .numerics = numerics};
    char eb[1024];
    ds_model *m = ds_model_load(dir, &lo, eb, sizeof eb);
    CHECK(m != NULL, "load %s: %s", dir, eb);
    if (!m) return;
    CHECK((m->head_screen != NULL) == !strcmp(numerics, "fast"), "%s tier: screen %s", numerics,
          m->head_screen ? "built" : "absent");
    const int V = ds_model_vocab_size(m);
    enum { S = 2 };
    ds_seq *sq[2 * S];
    for (int i = 0; i < 2 * S; i++) sq[i] = ds_seq_new(m);
    float *lg = malloc(sizeof(float) * (size_t)S * 2 * V);
    uint8_t *mask = calloc((size_t)V, 1);
    for (int v = 3; v < V; v += 11) mask[v] = 1;
    int32_t tok[S][2] = {{11, 500}, {42, 7}}, gid[S][2];
    for (int t = 0; t < steps; t++) {
        const int nr = t == 0 ? 2 : 1;   /* a two-row first step: both rows' ids */
        const int32_t *tk[2 * S];
        int n_rows[2 * S], nl[2 * S];
        float *lgp[2 * S];
        int32_t *gp[2 * S];
        for (int s = 0; s < S; s++) {
            tk[s] = tk[S + s] = tok[s];
            n_rows[s] = n_rows[S + s] = nr;
            nl[s] = nl[S + s] = nr;
            lgp[s] = lg + (size_t)s * 2 * V, gp[s] = NULL;
            lgp[S + s] = NULL, gp[S + s] = gid[s];
        }
        const uint8_t *mk = t % 2 ? mask : NULL;
        int rc = ds_batch_step_greedy(m, 2 * S, sq, tk, n_rows, lgp, nl, NULL, gp, mk, eb, sizeof eb);
        CHECK(rc == 0, "step %d: %s", t, eb);
        if (rc) break;
        for (int s = 0; s < S; s++)
            for (int j = 0; j < nr; j++) {
                const int32_t want = plain_greedy(lg + ((size_t)s * 2 + j) * V, V, mk);
                *agree += gid[s][j] == want;
                ++*rows;
                CHECK(gid[s][j] == want, "%s step %d seq %d row %d: greedy %d, full logits %d", numerics, t, s, j, gid[s][j], want);
            }
        for (int s = 0; s < S; s++) tok[s][0] = feed_own ? gid[s][nr - 1] : (int32_t)((t * 7919 + s * 104729) % V);
    }
    for (int i = 0; i < 2 * S; i++) ds_seq_free(sq[i]);
    free(lg), free(mask);
    ds_model_free(m);
}

static void run_model(const char *dir, const char *what, int steps_fast, int steps_exact) {
    CHECK(dir != NULL, "%s fixture", what);
    if (!dir) return;
    int agree = 0, rows = 0;
    const ds_head_screen_stats s0 = ds_head_screen_stats_get();
    model_case(dir, "fast", steps_fast, 1, &agree, &rows);
    model_case(dir, "fast", steps_fast / 2, 0, &agree, &rows);
    const ds_head_screen_stats s1 = ds_head_screen_stats_get();
    model_case(dir, "exact", steps_exact, 1, &agree, &rows);
    const uint64_t screened = s1.rows - s0.rows, full = s1.full_rows - s0.full_rows;
    printf("  %s: %d / %d rows agree; fast tier %llu rows screened, %.1f candidates per row, %llu in full\n", what,
           agree, rows, (unsigned long long)screened, screened ? (double)(s1.candidates - s0.candidates) / (double)screened : 0.0,
           (unsigned long long)full);
    CHECK(screened >= (uint64_t)steps_fast * 2 && full * 20 <= screened, "%s: the screen decided (%llu rows, %llu in full)",
          what, (unsigned long long)screened, (unsigned long long)full);
}

TEST(head_greedy_equals_full_logits_trained) { run_model(ds_test_trained_fixture(), "trained", 100, 12); }
TEST(head_greedy_equals_full_logits_random_tiny) { run_model(ds_test_tiny_fixture(), "random tiny", 48, 8); }
/* The scalar path keeps the copy's row-major codes (the SIMD paths keep only their tiles). */
TEST(head_greedy_equals_full_logits_reference_kernels) {
    g_kernels = "reference";
    run_model(ds_test_tiny_fixture(), "random tiny, reference kernels", 16, 4);
    g_kernels = "auto";
}

RUN_ALL()
