/* Kernel tests: the scalar reference against independent oracles, every kernel path this CPU can
 * run against the reference (integer bit for bit, float within 1e-6 of Σ|W·x|) on random shapes
 * with odd sizes and tails, outputs NaN-poisoned before each run, prepared and lazily repacked
 * linears, thread-count and batch invariance, grouped dispatch, MoE grouping, path selection and
 * the self-check.  Paths the CPU cannot run are reported as not run (the AVX-512 arithmetic is
 * still checked through emulation by test_kernels_avx512_emu). */
#include "check.h"
#include "test_kernels_util.h"
#include "base/threadpool.h"
#include <stdio.h>

static const char *k_paths[] = {"reference", "avx2", "avx512-vnni"};

static void quant_oracle(const ds_bf16 *x, int k, int8_t *q, float *s) {
    float amax = 0;
    for (int i = 0; i < k; i++) { float a = fabsf(ds_bf16_to_f32(x[i])); amax = a > amax ? a : amax; }
    *s = amax / 127.0f;
    for (int i = 0; i < k; i++) {
        if (amax == 0) { q[i] = 0; continue; }
        float v = nearbyintf(ds_bf16_to_f32(x[i]) / *s);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
}

TEST(quantize_rows_match_oracle_on_every_path) {
    for (size_t p = 0; p < DS_ARRAY_LEN(k_paths); p++) {
        if (!ds_kernels_available(k_paths[p])) { printf("  (path %s not runnable on this CPU)\n", k_paths[p]); continue; }
        CHECK(ds_kernels_select(k_paths[p], NULL) == 0);
        for (int trial = 0; trial < 40; trial++) {
            int n = tk_range(1, 9), k = tk_range(1, 700);
            ds_bf16 *x = malloc(sizeof(ds_bf16) * n * k);
            tk_fill_bf16(x, (size_t)n * k, trial % 3 ? 1.f : 1e-3f);
            if (trial % 5 == 0) memset(x, 0, sizeof(ds_bf16) * k); /* zero row -> s = 0, q = 0 */
            if (trial % 7 == 0 && k > 3) { x[1] = ds_f32_to_bf16(2.5f); x[2] = ds_f32_to_bf16(-2.5f); x[3] = ds_f32_to_bf16(127.f * 2.5f / 127.f); }
            int8_t *q = malloc((size_t)n * k), *qo = malloc((size_t)n * k);
            float *s = malloc(sizeof(float) * n), *so = malloc(sizeof(float) * n);
            memset(q, 0x55, (size_t)n * k);
            ds_quantize_rows(x, n, k, q, s);
            for (int r = 0; r < n; r++) quant_oracle(x + (size_t)r * k, k, qo + (size_t)r * k, so + r);
            CHECK(!memcmp(q, qo, (size_t)n * k), "path %s n=%d k=%d codes differ", k_paths[p], n, k);
            CHECK(!memcmp(s, so, sizeof(float) * n), "path %s scales differ", k_paths[p]);
            free(x); free(q); free(qo); free(s); free(so);
        }
    }
    ds_kernels_select("auto", NULL);
}

TEST(reference_quantized_linear_matches_oracle) {
    CHECK(ds_kernels_select("reference", NULL) == 0);
    for (int trial = 0; trial < 30; trial++) {
        ds_lin_fmt fmt = trial % 2 ? DS_LIN_W4A8 : DS_LIN_W8A8;
        int out = tk_range(1, 70), in = tk_range(1, 300), n = tk_range(1, 4);
        tk_lin t = tk_make(fmt, out, in);
        int8_t *q = malloc((size_t)n * in);
        float *s = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n * out);
        for (int i = 0; i < n * in; i++) q[i] = (int8_t)tk_range(-127, 127);
        for (int r = 0; r < n; r++) s[r] = (float)tk_range(1, 1000) * 1e-3f;
        tk_poison(y, (size_t)n * out);
        ds_linear_forward_q(&t.L, q, s, n, y);
        int bad = 0;
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                float e = tk_oracle_q(&t, q + (size_t)r * in, s[r], o);
                bad += memcmp(&e, &y[(size_t)r * out + o], 4) != 0;
            }
        CHECK(bad == 0, "fmt %d out=%d in=%d: %d outputs differ from the oracle", fmt, out, in, bad);
        free(q); free(s); free(y);
        tk_free(&t);
    }
    ds_kernels_select("auto", NULL);
}

TEST(reference_float_linear_matches_long_double_oracle) {
    CHECK(ds_kernels_select("reference", NULL) == 0);
    for (int trial = 0; trial < 20; trial++) {
        ds_lin_fmt fmt = trial % 2 ? DS_LIN_F32 : DS_LIN_BF16;
        int out = tk_range(1, 40), in = tk_range(1, 600), n = tk_range(1, 3);
        tk_lin t = tk_make(fmt, out, in);
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        float *y = malloc(sizeof(float) * n * out);
        tk_fill_bf16(x, (size_t)n * in, 1.f);
        tk_poison(y, (size_t)n * out);
        ds_linear_forward(&t.L, x, n, y);
        double worst = 0;
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                double mag;
                float e = tk_oracle_f(&t, x + (size_t)r * in, o, &mag);
                double d = fabs((double)e - y[(size_t)r * out + o]);
                /* float64 accumulation is within ~in * 2^-53 * Σ|wx| of exact; fp32 rounding adds
                 * at most one fp32 ulp where the two straddle a rounding boundary */
                double tol = 1e-12 * mag + fabs((double)e) * 1.2e-7;
                if (d > tol || isnan(y[(size_t)r * out + o])) worst = d > worst ? d : (isnan(d) ? 1e30 : worst);
            }
        CHECK(worst == 0, "fmt %d out=%d in=%d: worst excess %g", fmt, out, in, worst);
        free(x); free(y);
        tk_free(&t);
    }
    ds_kernels_select("auto", NULL);
}

/* Run one linear on `path` and on the reference; compare.  Returns the number of bad outputs. */
static int compare_path(const char *path, tk_lin *t, const ds_bf16 *x, int n, int prepare, double *worst_rel) {
    int out = t->L.out, in = t->L.in, bad = 0;
    float *y = malloc(sizeof(float) * n * out), *yr = malloc(sizeof(float) * n * out);
    tk_poison(y, (size_t)n * out);
    tk_poison(yr, (size_t)n * out);
    ds_kernels_select("reference", NULL);
    ds_linear_forward(&t->L, x, n, yr);
    ds_kernels_select(path, NULL);
    if (prepare) ds_linear_prepare(&t->L);
    ds_linear_forward(&t->L, x, n, y);
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) {
            size_t i = (size_t)r * out + o;
            if (t->L.fmt <= DS_LIN_W4A8) { bad += memcmp(&y[i], &yr[i], 4) != 0; continue; }
            double mag;
            tk_oracle_f(t, x + (size_t)r * in, o, &mag);
            double d = fabs((double)y[i] - yr[i]);
            if (isnan(y[i]) || d > 1e-6 * mag + 1e-30) bad++;
            if (mag > 0 && d / mag > *worst_rel) *worst_rel = d / mag;
        }
    free(y); free(yr);
    return bad;
}

TEST(simd_paths_equal_reference_random_shapes) {
    static const int outs[] = {1, 2, 15, 16, 17, 31, 33, 64, 67, 130};
    static const int ins[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 300, 512, 1037};
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 33};
    for (size_t p = 1; p < DS_ARRAY_LEN(k_paths); p++) {
        if (!ds_kernels_available(k_paths[p])) { printf("  (path %s not runnable on this CPU: not run)\n", k_paths[p]); continue; }
        int runs = 0, bad_total = 0;
        double worst = 0;
        for (int trial = 0; trial < 160; trial++) {
            ds_lin_fmt fmt = (ds_lin_fmt)(trial % 4);
            int out = outs[tk_range(0, DS_ARRAY_LEN(outs) - 1)], in = ins[tk_range(0, DS_ARRAY_LEN(ins) - 1)];
            int n = ns[tk_range(0, DS_ARRAY_LEN(ns) - 1)];
            tk_lin t = tk_make(fmt, out, in);
            ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
            tk_fill_bf16(x, (size_t)n * in, 1.f);
            if (n > 2) memset(x + in, 0, sizeof(ds_bf16) * in); /* an all-zero row */
            int bad = compare_path(k_paths[p], &t, x, n, trial & 4, &worst);
            CHECK(bad == 0, "path %s fmt %d out=%d in=%d n=%d: %d outputs differ", k_paths[p], fmt, out, in, n, bad);
            bad_total += bad;
            runs++;
            free(x);
            tk_free(&t);
        }
        printf("  path %s: %d random linears, worst float rel diff %.3g\n", k_paths[p], runs, worst);
    }
    ds_kernels_select("auto", NULL);
}

/* One and two activation rows take their own tiles: on AVX2, one row walks 4 panels then 2 then
 * 1 (decision 180), two W4A8 rows two panels per pass (decision 153); on AVX-512, W4A8 walks 6
 * panels (decision 178).  Panel counts 3, 6, 7, 9 and 17 leave every tail; long inputs, 1 and 2
 * threads, prepared or not. */
TEST(one_and_two_row_quantized_linears_equal_reference) {
    static const int outs[] = {33, 96, 112, 130, 257}, ins[] = {64, 1037};
    int runs = 0;
    for (size_t p = 1; p < DS_ARRAY_LEN(k_paths); p++) {
        if (!ds_kernels_available(k_paths[p])) continue;
        for (int th = 1; th <= 2; th++) {
            ds_pool_init(th);
            for (size_t oi = 0; oi < DS_ARRAY_LEN(outs); oi++)
                for (size_t ii = 0; ii < DS_ARRAY_LEN(ins); ii++)
                    for (int f = 0; f < 4; f++) {
                        const int n = 1 + f / 2;
                        tk_lin t = tk_make(f % 2 ? DS_LIN_W4A8 : DS_LIN_W8A8, outs[oi], ins[ii]);
                        ds_bf16 *x = malloc(sizeof(ds_bf16) * 2 * ins[ii]);
                        tk_fill_bf16(x, (size_t)2 * ins[ii], 1.f);
                        double worst = 0;
                        int bad = compare_path(k_paths[p], &t, x, n, (int)oi & 1, &worst);
                        CHECK(bad == 0, "path %s fmt %d out=%d in=%d %d rows, %d threads: %d outputs differ", k_paths[p],
                              t.L.fmt, outs[oi], ins[ii], n, th, bad);
                        runs++;
                        free(x);
                        tk_free(&t);
                    }
        }
    }
    printf("  %d one- and two-row quantized linears equal the reference\n", runs);
    CHECK(runs >= 80, "only %d runs", runs);
    ds_pool_init(2);
    ds_kernels_select("auto", NULL);
}

TEST(thread_count_and_batch_do_not_change_results) {
    for (size_t p = 0; p < DS_ARRAY_LEN(k_paths); p++) {
        if (!ds_kernels_available(k_paths[p])) continue;
        ds_kernels_select(k_paths[p], NULL);
        for (int f = 0; f < 4; f++) {
            int out = 203, in = 520, n = 19;
            tk_lin t = tk_make((ds_lin_fmt)f, out, in);
            ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
            tk_fill_bf16(x, (size_t)n * in, 1.f);
            float *y1 = malloc(sizeof(float) * n * out), *yt = malloc(sizeof(float) * n * out);
            ds_pool_init(1);
            tk_poison(y1, (size_t)n * out);
            ds_linear_forward(&t.L, x, n, y1);
            for (int th = 2; th <= 5; th++) {
                ds_pool_init(th);
                tk_poison(yt, (size_t)n * out);
                ds_linear_forward(&t.L, x, n, yt);
                CHECK(!memcmp(y1, yt, sizeof(float) * n * out), "path %s fmt %d: %d threads differ from 1", k_paths[p], f, th);
            }
            /* each row alone, and inside a differently sized batch, gives the same bits */
            for (int r = 0; r < n; r += 5) {
                float *y = malloc(sizeof(float) * out);
                tk_poison(y, out);
                ds_linear_forward(&t.L, x + (size_t)r * in, 1, y);
                CHECK(!memcmp(y, y1 + (size_t)r * out, sizeof(float) * out), "path %s fmt %d row %d alone differs", k_paths[p], f, r);
                free(y);
            }
            tk_poison(yt, (size_t)n * out);
            ds_linear_forward(&t.L, x + 3 * (size_t)in, 7, yt);
            CHECK(!memcmp(yt, y1 + 3 * (size_t)out, sizeof(float) * 7 * out), "path %s fmt %d sub-batch differs", k_paths[p], f);
            free(x); free(y1); free(yt);
            tk_free(&t);
        }
    }
    ds_pool_init(2);
    ds_kernels_select("auto", NULL);
}

TEST(grouped_dispatch_equals_single_calls) {
    for (size_t p = 0; p < DS_ARRAY_LEN(k_paths); p++) {
        if (!ds_kernels_available(k_paths[p])) continue;
        ds_kernels_select(k_paths[p], NULL);
        ds_pool_init(2);
        enum { J = 5 };
        tk_lin t[J];
        ds_linear_job jobs[J];
        int8_t *q[J];
        float *s[J], *y[J], *ys[J];
        for (int j = 0; j < J; j++) {
            /* job 4 dominates the dispatch: it is cut into several 4-panel-aligned pieces */
            int in = j == 2 ? 77 : 256, out = j == 4 ? 1000 : 40 + 16 * j, n = j == 3 ? 0 : 1 + j * 3;
            t[j] = tk_make(j % 2 ? DS_LIN_W4A8 : DS_LIN_W8A8, out, in);
            q[j] = malloc((size_t)(n + 1) * in);
            s[j] = malloc(sizeof(float) * (n + 1));
            y[j] = malloc(sizeof(float) * (n + 1) * out);
            ys[j] = malloc(sizeof(float) * (n + 1) * out);
            for (int i = 0; i < n * in; i++) q[j][i] = (int8_t)tk_range(-127, 127);
            for (int r = 0; r < n; r++) s[j][r] = 0.01f * (r + 1);
            tk_poison(y[j], (size_t)n * out);
            tk_poison(ys[j], (size_t)n * out);
            jobs[j] = (ds_linear_job){&t[j].L, q[j], s[j], n, y[j]};
            ds_linear_forward_q(&t[j].L, q[j], s[j], n, ys[j]);
        }
        ds_linear_forward_q_many(jobs, J);
        for (int j = 0; j < J; j++) {
            CHECK(!memcmp(y[j], ys[j], sizeof(float) * jobs[j].n * t[j].L.out), "path %s job %d differs", k_paths[p], j);
            free(q[j]); free(s[j]); free(y[j]); free(ys[j]);
            tk_free(&t[j]);
        }
    }
    ds_kernels_select("auto", NULL);
}

TEST(prepare_reports_bytes_and_counters_move) {
    const char *path = ds_kernels_available("avx2") ? "avx2" : NULL;
    if (!path) { printf("  (no SIMD path on this CPU: repack not used)\n"); return; }
    ds_kernels_select(path, NULL);
    size_t before = ds_kernels_packed_bytes();
    tk_lin a = tk_make(DS_LIN_W4A8, 100, 200), b = tk_make(DS_LIN_W8A8, 33, 65), f = tk_make(DS_LIN_BF16, 10, 10);
    size_t pa = ds_linear_prepare(&a.L), pb = ds_linear_prepare(&b.L);
    /* 7 panels x 25 tiles x 64 B plus header, scales, sums; 3 panels x 17 tiles x 64 B plus the same */
    CHECK(pa >= 7 * 25 * 64 && pa < 7 * 25 * 64 + 2048, "w4 packed %zu", pa);
    CHECK(pb >= 3 * 17 * 64 && pb < 3 * 17 * 64 + 2048, "w8 packed %zu", pb);
    CHECK(ds_linear_prepare(&f.L) == 0, "float linears are not repacked");
    CHECK(ds_kernels_packed_bytes() == before + pa + pb, "global counter");
    uint64_t w0 = ds_kernels_weight_bytes_read();
    ds_bf16 x[200] = {0};
    float y[100];
    ds_linear_forward(&a.L, x, 1, y);
    CHECK(ds_kernels_weight_bytes_read() - w0 == 50 * 200 + 400, "bytes read %llu",
          (unsigned long long)(ds_kernels_weight_bytes_read() - w0));
    for (int o = 0; o < 100; o++) CHECK(y[o] == 0.f, "zero activations give zero outputs");
    tk_free(&a); tk_free(&b); tk_free(&f);
    CHECK(ds_kernels_packed_bytes() == before, "release returns the bytes");
    ds_kernels_select("auto", NULL);
}

/* The call observer (the benchmarks' linears' floor): one report per call with n > 0 rows, its class
 * from the weight format and the tier, its weight bytes as CHECKPOINT.md lays them out (codes plus
 * one fp32 scale per output row for the int8 formats), and out x in x n multiply-adds. */
typedef struct { int n, cls[8]; uint64_t bytes[8], macs[8]; } seen_calls;
static void note_call(void *ctx, ds_mac_class cls, uint64_t bytes, uint64_t macs) {
    seen_calls *s = ctx;
    if (s->n < 8) s->cls[s->n] = (int)cls, s->bytes[s->n] = bytes, s->macs[s->n] = macs;
    s->n++;
}

TEST(observer_sees_every_call_with_class_bytes_and_macs) {
    tk_lin w4 = tk_make(DS_LIN_W4A8, 33, 64), w8 = tk_make(DS_LIN_W8A8, 20, 96), bf = tk_make(DS_LIN_BF16, 12, 40),
           f32 = tk_make(DS_LIN_F32, 9, 32);
    static ds_bf16 x[3 * 96];
    static float y[3 * 64];
    seen_calls s = {0};
    ds_kernels_observe(note_call, &s);
    ds_linear_forward(&w4.L, x, 3, y);            /* int8, (33 + 1) / 2 x 64 codes + 33 scales */
    ds_linear_forward(&w8.L, x, 0, y);            /* no rows: not a call */
    bf.L.numerics = DS_NUMERICS_FAST;
    ds_linear_forward(&bf.L, x, 2, y);            /* fast bf16 */
    f32.L.numerics = DS_NUMERICS_FAST;
    ds_linear_forward(&f32.L, x, 1, y);           /* fast fp32 */
    f32.L.numerics = DS_NUMERICS_EXACT;
    ds_linear_forward(&f32.L, x, 2, y);           /* exact: float64 accumulation */
    int8_t q[2 * 96] = {0};
    float qs[2] = {1, 1};
    ds_linear_job jobs[2] = {{&w8.L, q, qs, 2, y}, {&w4.L, q, qs, 1, y + 64}};
    ds_linear_forward_q_many(jobs, 2);            /* two jobs, two calls */
    ds_kernels_observe(NULL, NULL);
    ds_linear_forward(&w4.L, x, 1, y);            /* observer cleared: not seen */
    const int want_cls[6] = {DS_MAC_INT8, DS_MAC_BF16, DS_MAC_F32, DS_MAC_F64, DS_MAC_INT8, DS_MAC_INT8};
    const uint64_t want_bytes[6] = {17 * 64 + 4 * 33, 2 * 12 * 40, 4 * 9 * 32, 4 * 9 * 32, 20 * 96 + 4 * 20, 17 * 64 + 4 * 33};
    const uint64_t want_macs[6] = {33 * 64 * 3, 12 * 40 * 2, 9 * 32, 9 * 32 * 2, 20 * 96 * 2, 33 * 64};
    CHECK(s.n == 6, "%d calls observed, expected 6", s.n);
    for (int i = 0; i < 6 && i < s.n; i++)
        CHECK(s.cls[i] == want_cls[i] && s.bytes[i] == want_bytes[i] && s.macs[i] == want_macs[i],
              "call %d: class %d bytes %llu macs %llu, expected %d %llu %llu", i, s.cls[i], (unsigned long long)s.bytes[i],
              (unsigned long long)s.macs[i], want_cls[i], (unsigned long long)want_bytes[i], (unsigned long long)want_macs[i]);
    CHECK(ds_linear_mac_class(&bf.L) == DS_MAC_BF16);
    bf.L.numerics = DS_NUMERICS_EXACT;
    CHECK(ds_linear_mac_class(&bf.L) == DS_MAC_F64);
    tk_free(&w4); tk_free(&w8); tk_free(&bf); tk_free(&f32);
}

TEST(moe_grouping_lists_rows_per_expert_in_order) {
    enum { N = 37, K = 6, E = 48 };
    int32_t sel[N * K];
    for (int r = 0; r < N; r++)
        for (int j = 0; j < K; j++) sel[r * K + j] = (r * 7 + j * 11 + (r % 5) * j) % E;
    ds_moe_groups g;
    ds_error err;
    CHECK(ds_moe_group_rows(sel, N, K, E, &g, &err) == 0);
    CHECK(g.off[0] == 0 && g.off[E] == N * K);
    int seen = 0;
    for (int e = 0; e < E; e++) {
        int expect = 0;
        for (int i = 0; i < N * K; i++) expect += sel[i] == e;
        CHECK(g.off[e + 1] - g.off[e] == expect, "expert %d count", e);
        for (int a = g.off[e]; a < g.off[e + 1]; a++) {
            CHECK(sel[g.idx[a]] == e, "entry routed elsewhere");
            if (a > g.off[e]) CHECK(g.idx[a] > g.idx[a - 1], "rows not ascending");
            seen++;
        }
    }
    CHECK(seen == N * K);
    ds_moe_groups_free(&g);
    sel[5] = E;
    CHECK(ds_moe_group_rows(sel, N, K, E, &g, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "expert 48");
    /* gather */
    int8_t xq[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, dq[2 * 4];
    float xs[3] = {0.5f, 1.5f, 2.5f}, dsc[2];
    int rows[2] = {2, 0};
    ds_gather_rows_q(xq, xs, 4, rows, 2, dq, dsc);
    CHECK(dq[0] == 9 && dq[3] == 12 && dq[4] == 1 && dsc[0] == 2.5f && dsc[1] == 0.5f);
}

TEST(selection_refuses_unavailable_or_unknown_paths) {
    ds_error err;
    CHECK(ds_kernels_select("reference", &err) == 0);
    CHECK(!strcmp(ds_kernels_active(), "reference"));
    CHECK(ds_kernels_select("avx9000", &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "avx9000");
    CHECK(!strcmp(ds_kernels_active(), "reference"), "a failed selection leaves the path unchanged");
    if (!ds_kernels_available("avx512-vnni")) {
        CHECK(ds_kernels_select("avx512-vnni", &err) == -1);
        CHECK_STR_CONTAINS(err.msg, "cannot run");
        CHECK(!strcmp(err.code, "E_KERNELS"));
    } else {
        CHECK(ds_kernels_select("avx512-vnni", &err) == 0);
    }
    CHECK(ds_kernels_select("auto", &err) == 0);
    if (ds_kernels_available("avx512-vnni")) CHECK(!strcmp(ds_kernels_active(), "avx512-vnni"));
    else if (ds_kernels_available("avx2")) CHECK(!strcmp(ds_kernels_active(), "avx2"));
    CHECK_STR_CONTAINS(ds_kernels_reason(), "auto");
}

TEST(selfcheck_passes_on_every_runnable_path) {
    for (size_t p = 0; p < DS_ARRAY_LEN(k_paths); p++) {
        if (!ds_kernels_available(k_paths[p])) continue;
        ds_kernels_select(k_paths[p], NULL);
        ds_kernel_check c[8];
        int n = 0;
        ds_error err;
        CHECK(ds_kernels_selfcheck(c, &n, &err) == 0, "%s", err.msg);
        CHECK(n == 7);
        for (int i = 0; i < n; i++) {
            CHECK(c[i].ok, "%s", c[i].line);
            CHECK_STR_CONTAINS(c[i].line, k_paths[p]);
            if (i < 2 || i == 4 || i == 5) /* integer and fast-tier float families: bit-exact */
                CHECK(c[i].max_abs_diff == 0, "family %s diff %g", c[i].family, c[i].max_abs_diff);
        }
        CHECK(!strcmp(c[4].family, "bf16-fast") && !strcmp(c[5].family, "f32-fast"), "%s %s", c[4].family, c[5].family);
    }
    ds_kernels_select("auto", NULL);
}

/* The perf command's argument handling (the measurements themselves are benchmarks, not tests). */
TEST(perf_cli_rejects_bad_usage) {
    const char *bin = getenv("DSFLASH_BIN");
    char def[256], out[4096];
    if (!bin) { snprintf(def, sizeof def, "build/%s/dsflash", getenv("BUILD") ? getenv("BUILD") : "release"); bin = def; }
    CHECK(ds_test_sh(out, sizeof out, "%s perf 2>&1", bin) == 2, "no benchmark named");
    CHECK(ds_test_sh(out, sizeof out, "%s perf kernelz 2>&1", bin) == 2);
    CHECK(strstr(out, "unknown benchmark") != NULL, "output: %s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s perf kernels --thread 2 2>&1", bin) == 2, "abbreviation refused");
    CHECK(strstr(out, "--thread: unknown option") != NULL, "output: %s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s perf kernels --threads 5000 2>&1", bin) == 2);
    CHECK(strstr(out, "[0, 1024]") != NULL, "output: %s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s perf kernels --kernels avx9000 2>&1", bin) == 2);
    CHECK(strstr(out, "avx9000") != NULL, "output: %s", out);
    if (!ds_kernels_available("avx512-vnni")) {
        CHECK(ds_test_sh(out, sizeof out, "%s perf kernels --kernels avx512-vnni 2>&1", bin) == 2, "unavailable path");
        CHECK(strstr(out, "cannot run") != NULL, "output: %s", out);
    }
    CHECK(ds_test_sh(out, sizeof out, "%s perf decode 2>&1", bin) == 2);
    CHECK(strstr(out, "--model") != NULL, "output: %s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s perf decode --model %s/no-such-model 2>&1", bin, ds_test_tmpdir()) == 3);
    CHECK(ds_test_sh(out, sizeof out, "%s perf kernels --quick --model x 2>&1", bin) == 2, "decode-only option");
}

int main(int argc, char **argv) {
    ds_log_set_level(DS_LOG_WARN);
    ds_pool_init(2);
    int rc = ds_test_main(argc, argv);
    ds_pool_shutdown();
    return rc;
}
