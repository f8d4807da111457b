/* The cache-blocked many-row quantized products (prefill chunks, grouped MoE experts) against the
 * scalar reference, bit for bit, on the shapes where blocking can go wrong: every row count from 1
 * to 40 (each micro-tile tail), 511 and 513 rows (several L2 row chunks), inputs that are not a
 * multiple of the input block nor of 64 (partial sums parked and resumed, zero-padded rows),
 * outputs that leave a lone panel or a partial one.  Then the invariances a row's result must keep:
 * thread count, and the row alone versus inside a 513-row call.  The reference itself is checked
 * against an independent oracle (tk_oracle_q, written from CHECKPOINT.md §7) on a sample, so the
 * chain ends at the spec, not at our own code.  Paths this CPU cannot run are reported; the
 * AVX-512 arithmetic is checked on every host by test_kernels_avx512_emu. */
#include "check.h"
#include "test_kernels_util.h"
#include "base/threadpool.h"
#include <stdio.h>

static const char *k_simd[] = {"avx2", "avx512-vnni"};

typedef struct {
    int8_t *q;
    float *s;
} qrows;

static qrows make_rows(int n, int in) {
    qrows r = {malloc((size_t)n * in), malloc(sizeof(float) * (size_t)n)};
    for (size_t i = 0; i < (size_t)n * in; i++) r.q[i] = (int8_t)tk_range(-127, 127);
    for (int i = 0; i < in && n > 1; i++) r.q[(size_t)in + i] = (int8_t)(i % 2 ? 127 : -127); /* extremes */
    for (int k = 0; k < n; k++) r.s[k] = (float)tk_range(1, 1000) * 1e-4f;
    return r;
}

static void free_rows(qrows *r) { free(r->q); free(r->s); }

/* The first n rows on `path` against the reference's 513-row output yr; returns the number of
 * differing outputs. */
static long diff_vs_reference(const char *path, tk_lin *t, const qrows *x, int n, const float *yr) {
    size_t cnt = (size_t)n * t->L.out;
    float *y = malloc(sizeof(float) * cnt);
    tk_poison(y, cnt);
    ds_kernels_select(path, NULL);
    ds_linear_forward_q(&t->L, x->q, x->s, n, y);
    long bad = 0;
    for (size_t i = 0; i < cnt; i++) bad += memcmp(&y[i], &yr[i], 4) != 0;
    free(y);
    return bad;
}

static const struct { int out, in; } k_shapes[] = {
    {50, 1100},  /* W8: 3 input blocks, the last partial; 4 panels, the last partial */
    {33, 2085},  /* W4: 3 input blocks; a lone third panel; in % 64 != 0 */
    {17, 64},    /* one block; lone panel of 1 row */
    {96, 4096},  /* input a multiple of the block and of 4 KiB (L1 set aliasing of the rows) */
};

TEST(reference_matches_independent_oracle_on_blocked_shapes) {
    for (size_t k = 0; k < DS_ARRAY_LEN(k_shapes); k++)
        for (int f = 0; f < 2; f++) {
            tk_lin t = tk_make(f ? DS_LIN_W4A8 : DS_LIN_W8A8, k_shapes[k].out, k_shapes[k].in);
            int n = 3;
            qrows x = make_rows(n, t.L.in);
            float *y = malloc(sizeof(float) * (size_t)n * t.L.out);
            ds_kernels_select("reference", NULL);
            ds_linear_forward_q(&t.L, x.q, x.s, n, y);
            for (int r = 0; r < n; r++)
                for (int o = 0; o < t.L.out; o++) {
                    float want = tk_oracle_q(&t, x.q + (size_t)r * t.L.in, x.s[r], o);
                    CHECK(!memcmp(&want, &y[(size_t)r * t.L.out + o], 4), "fmt %d shape %d row %d out %d", f, (int)k, r, o);
                }
            free(y);
            free_rows(&x);
            tk_free(&t);
        }
    ds_kernels_select("auto", NULL);
}

TEST(blocked_products_equal_reference_rows_1_to_40_511_513) {
    int ran = 0;
    long calls[DS_ARRAY_LEN(k_simd)] = {0};
    for (size_t k = 0; k < DS_ARRAY_LEN(k_shapes); k++)
        for (int f = 0; f < 2; f++) {
            tk_lin t = tk_make(f ? DS_LIN_W4A8 : DS_LIN_W8A8, k_shapes[k].out, k_shapes[k].in);
            qrows x = make_rows(513, t.L.in);
            float *yr = malloc(sizeof(float) * 513 * (size_t)t.L.out);
            tk_poison(yr, 513 * (size_t)t.L.out);
            ds_kernels_select("reference", NULL);
            ds_linear_forward_q(&t.L, x.q, x.s, 513, yr);
            for (size_t p = 0; p < DS_ARRAY_LEN(k_simd); p++) {
                if (!ds_kernels_available(k_simd[p])) continue;
                for (int n = 1; n <= 513; n = n < 40 ? n + 1 : n == 40 ? 511 : n + 2) {
                    long bad = diff_vs_reference(k_simd[p], &t, &x, n, yr);
                    CHECK(bad == 0, "path %s fmt %s out=%d in=%d rows=%d: %ld outputs differ", k_simd[p],
                          f ? "W4A8" : "W8A8", t.L.out, t.L.in, n, bad);
                    calls[p]++;
                }
            }
            free(yr);
            free_rows(&x);
            tk_free(&t);
        }
    for (size_t p = 0; p < DS_ARRAY_LEN(k_simd); p++) {
        if (!ds_kernels_available(k_simd[p])) {
            printf("  (path %s not runnable on this CPU: not run here)\n", k_simd[p]);
            continue;
        }
        printf("  path %s: %ld blocked products equal the reference\n", k_simd[p], calls[p]);
        ran++;
    }
    CHECK(ran > 0, "no SIMD path runnable: the blocked kernels were not checked");
    ds_kernels_select("auto", NULL);
}

TEST(blocked_rows_independent_of_threads_and_batch) {
    const int n = 513;
    for (size_t p = 0; p < DS_ARRAY_LEN(k_simd); p++) {
        if (!ds_kernels_available(k_simd[p])) continue;
        ds_kernels_select(k_simd[p], NULL);
        for (int f = 0; f < 2; f++) {
            tk_lin t = tk_make(f ? DS_LIN_W4A8 : DS_LIN_W8A8, 80, 2085);
            ds_linear_prepare(&t.L);
            qrows x = make_rows(n, t.L.in);
            size_t cnt = (size_t)n * t.L.out;
            float *y1 = malloc(sizeof(float) * cnt), *yt = malloc(sizeof(float) * cnt);
            ds_pool_init(1);
            tk_poison(y1, cnt);
            ds_linear_forward_q(&t.L, x.q, x.s, n, y1);
            for (int th = 2; th <= 3; th++) {
                ds_pool_init(th);
                tk_poison(yt, cnt);
                ds_linear_forward_q(&t.L, x.q, x.s, n, yt);
                CHECK(!memcmp(y1, yt, sizeof(float) * cnt), "path %s fmt %d: %d threads differ from 1", k_simd[p], f, th);
            }
            static const int rows[] = {0, 11, 12, 255, 500, 512};
            for (size_t i = 0; i < DS_ARRAY_LEN(rows); i++) {
                int r = rows[i];
                tk_poison(yt, (size_t)t.L.out);
                ds_linear_forward_q(&t.L, x.q + (size_t)r * t.L.in, x.s + r, 1, yt);
                CHECK(!memcmp(yt, y1 + (size_t)r * t.L.out, sizeof(float) * t.L.out), "path %s fmt %d row %d alone differs",
                      k_simd[p], f, r);
            }
            tk_poison(yt, cnt);
            ds_linear_forward_q(&t.L, x.q + (size_t)7 * t.L.in, x.s + 7, 200, yt); /* rows 7..206 as a 200-row call */
            CHECK(!memcmp(yt, y1 + (size_t)7 * t.L.out, sizeof(float) * 200 * t.L.out), "path %s fmt %d sub-batch differs",
                  k_simd[p], f);
            free(y1);
            free(yt);
            free_rows(&x);
            tk_free(&t);
        }
    }
    ds_pool_init(2);
    ds_kernels_select("auto", NULL);
}

int main(int argc, char **argv) {
    ds_log_set_level(DS_LOG_WARN);
    ds_pool_init(2);
    int rc = ds_test_main(argc, argv);
    ds_pool_shutdown();
    return rc;
}
