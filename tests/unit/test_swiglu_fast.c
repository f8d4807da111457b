/* The fast tier's SwiGLU rows (model/swiglu_fast.c).
 * Oracles: libm's expf (the vector exp must equal it bit for bit: a million spread inputs, every
 * exponent's edges, the overflow / underflow thresholds and their neighbours, ±0, ±inf, NaN), and
 * the plain scalar formula written out here (silu(gg)·vv·w rounded to bf16) on rows of every length
 * 1..40 with tails, clamps, weights, huge, tiny and non-finite values, on every path this CPU and
 * build can run (AVX-512, AVX2, scalar); a path that cannot run here is named as such. */
#include "check.h"
#include "model/swiglu_fast.h"
#include <math.h>
#include <stdint.h>

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static int same(float a, float b) { return (isnan(a) && isnan(b)) || u_of(a) == u_of(b); }

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

static const char *const k_path_name[] = {"scalar", "avx2", "avx512"};

/* The vector exp of one path against libm on the spread, the exponent edges and the special cases. */
static long exp_mismatches(long *n_out) {
    long bad = 0, n = 0;
    for (int i = 0; i < 1000000; i++, n++) {   /* spread over every bit pattern */
        float x = f_of(rnd() | (rnd() & 1u) << 31);
        bad += !same(ds_swiglu_expf(x), expf(x));
    }
    for (uint32_t e = 0; e < 256; e++)          /* each exponent's first and last mantissas, both signs */
        for (uint32_t m = 0; m < 64; m++)
            for (uint32_t s = 0; s < 2; s++, n += 2) {
                float a = f_of(s << 31 | e << 23 | m), b = f_of(s << 31 | e << 23 | (0x7fffffu - m));
                bad += !same(ds_swiglu_expf(a), expf(a)) + !same(ds_swiglu_expf(b), expf(b));
            }
    static const float edges[] = {0x1.62e42ep6f, 0x1.62e430p6f, -0x1.9fe368p6f, -0x1.9fe36ap6f, -0x1.5d589ep6f,
                                  -0x1.5d58a0p6f, 88.0f, -88.0f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN,
                                  0x1p-149f, -0x1p-149f, 1.0f, -1.0f, 0x1.04845ep+5f, -0x1.f8cbb2p+5f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        for (int d = -2; d <= 2; d++, n++) {
            float x = isfinite(edges[i]) && edges[i] != 0 ? f_of(u_of(edges[i]) + (uint32_t)d) : edges[i];
            int ok = same(ds_swiglu_expf(x), expf(x));
            bad += !ok;
            if (!ok) printf("  x = %a: vector %a, expf %a\n", x, ds_swiglu_expf(x), expf(x));
        }
    }
    *n_out = n;
    return bad;
}

/* Run the next checks on `path` if this build and CPU have it (else say so and skip it). */
static int use_path(int path, const char *what) {
    if (!ds_swiglu_path_available(path)) {
        printf("  (%s %s not available: not on this CPU, or a sanitizer build)\n", k_path_name[path], what);
        return 0;
    }
    ds_swiglu_force_path(path);
    return 1;
}

TEST(vector_exp_equals_libm_expf) {
    int ran = 0;
    for (int path = DS_SWIGLU_AVX2; path <= DS_SWIGLU_AVX512; path++) {
        if (!use_path(path, "path")) continue;
        long n = 0, bad = exp_mismatches(&n);
        CHECK(bad == 0, "%s: %ld of %ld inputs differ from libm's expf", k_path_name[path], bad, n);
        printf("  %s exp vs libm expf: %ld inputs, %ld differ\n", k_path_name[path], n, bad);
        ran++;
    }
    ds_swiglu_force_path(-1);
    if (!ran) CHECK(ds_swiglu_expf(1.5f) == expf(1.5f), "scalar path is libm's expf");
}

static ds_bf16 plain(float g, float v, float limit, float w, int weighted) {
    float gg = ds_round_bf16(g), vv = ds_round_bf16(v);
    if (limit > 0) {
        if (vv > limit) vv = limit;
        if (vv < -limit) vv = -limit;
        if (gg > limit) gg = limit;
    }
    float y = gg / (1.0f + expf(-gg)) * vv;
    if (weighted) y = y * w;
    return ds_f32_to_bf16(y);
}

static float spread_value(int i) {
    switch (rnd() % 16) {
    case 0: return f_of(rnd());                         /* any bit pattern: huge, tiny, inf, NaN */
    case 1: return (float)((int)(rnd() % 200) - 100);   /* past the clamp and the exp thresholds */
    case 2: return i % 2 ? 10.0f : -10.0f;              /* exactly at the clamp */
    default: return ((float)(rnd() % 20001) - 10000.0f) / 997.0f;
    }
}

TEST(rows_equal_the_plain_formula) {
    int runs = 0;
    for (int path = DS_SWIGLU_SCALAR; path <= DS_SWIGLU_AVX512; path++) {
        if (!use_path(path, "rows")) continue;
        long bad = 0, n = 0;
        for (int len = 1; len <= 40; len++)
            for (int rep = 0; rep < 50; rep++) {
                float g[40], v[40], lim = rep % 3 ? 10.0f : 0.0f, w = rep % 2 ? 0.37f : 1.0f;
                ds_bf16 a[40];
                for (int i = 0; i < len; i++) { g[i] = spread_value(i); v[i] = spread_value(i + 1); }
                ds_swiglu_row_fast(g, v, len, lim, w, rep % 2, a);
                for (int i = 0; i < len; i++, n++) {
                    ds_bf16 want = plain(g[i], v[i], lim, w, rep % 2);
                    /* NaN payloads may differ (operand order of a product of two NaNs): both NaN */
                    int both_nan = (want & 0x7fff) > 0x7f80 && (a[i] & 0x7fff) > 0x7f80;
                    bad += a[i] != want && !both_nan;
                }
            }
        CHECK(bad == 0, "%s rows: %ld of %ld values differ", k_path_name[path], bad, n);
        runs++;
    }
    ds_swiglu_force_path(-1);
    CHECK(runs >= 1, "no path ran");
}

RUN_ALL()
