/* The fast tier's tiled indexer scores (model/index_tile.c) against the per-entry fast score and
 * against a float64 score written here.
 *
 * Why these oracles: ds_index_score_fast is the fast tier's definition of one entry's score (one
 * ds_fdot_bb per head, the head terms in 32 lanes, ds_ftree); the tile must give its bits for every
 * shape — heads and head dimensions that need padding (tiny's 4 × 32, 20 × 40), mini's 32 × 128,
 * 64 heads folding two heads into a lane — every tile fill 1..16, magnitudes spread over 2^±20,
 * negative and zero scores (the ReLU), and keys holding inf or NaN.  The float64 formula checks that
 * both compute the score at all. */
#include "check.h"
#include "model/fast_ops.h"
#include "base/common.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint32_t g_seed = 777;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}
/* a value with a random binade in 2^[-spread, spread] */
static float wide(int spread) { return ldexpf(frand(), spread ? (int)(g_seed >> 3) % (2 * spread + 1) - spread : 0); }

static int same_float(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t x, y;
    memcpy(&x, &a, 4), memcpy(&y, &b, 4);
    return x == y;
}

/* Σ_h w[h]·max(0, q_h·k) in float64; *mag: Σ_h |w[h]|·Σ_i |q_hi·k_i|, the scale of its rounding error */
static double score64(const ds_bf16 *qi, const float *w, const ds_bf16 *k, int nh, int di, double *mag) {
    double acc = 0;
    *mag = 0;
    for (int h = 0; h < nh; h++) {
        double d = 0, m = 0;
        for (int i = 0; i < di; i++) {
            const double p = (double)ds_bf16_to_f32(qi[h * di + i]) * ds_bf16_to_f32(k[i]);
            d += p, m += fabs(p);
        }
        acc += (double)w[h] * (d > 0 ? d : 0);
        *mag += fabs((double)w[h]) * m;
    }
    return acc;
}

typedef struct {
    int scores, bad_bits, bad_ref;
} tally;

/* One row against nk keys in tiles of `fill`, compared entry by entry. */
static void run_row(int nh, int di, int nk, int fill, int spread, int poison, tally *t) {
    const int nhp = (nh + 15) / 16 * 16, dip = (di + 31) / 32 * 32;
    ds_bf16 *qi = malloc(sizeof(ds_bf16) * (size_t)nh * di), *kmem = malloc(sizeof(ds_bf16) * (size_t)nk * di);
    float *w = malloc(sizeof(float) * (size_t)nh), *qf = malloc(sizeof(float) * (size_t)nhp * dip);
    float *wp = malloc(sizeof(float) * (size_t)nhp), *kf = malloc(sizeof(float) * (size_t)(dip > 16 ? dip : 16));
    float out[DS_INDEX_TILE_KEYS];
    const ds_bf16 *keys[DS_INDEX_TILE_KEYS];
    for (int i = 0; i < nh * di; i++) qi[i] = ds_f32_to_bf16(wide(spread));
    for (int i = 0; i < nk * di; i++) kmem[i] = ds_f32_to_bf16(wide(spread));
    for (int h = 0; h < nh; h++) w[h] = frand() * 0.2f;
    if (poison) {                        /* an inf key element and a NaN one */
        kmem[di / 2] = ds_f32_to_bf16(INFINITY);
        kmem[(nk - 1) * di] = 0x7fc0;
    }
    ds_index_query_prep(qi, w, nh, di, qf, wp);
    for (int s = 0; s < nk; s += fill) {
        const int n = nk - s < fill ? nk - s : fill;
        for (int u = 0; u < n; u++) keys[u] = kmem + (size_t)(s + u) * di;
        ds_index_scores_fast(qf, wp, nh, di, keys, n, kf, out);
        for (int u = 0; u < n; u++) {
            const float ref = ds_index_score_fast(qi, w, keys[u], nh, di);
            t->scores++;
            if (!same_float(out[u], ref)) {
                if (t->bad_bits++ < 5)
                    fprintf(stderr, "  nh %d di %d entry %d: tile %a, per-entry %a\n", nh, di, s + u, out[u], ref);
            }
            double mag;
            const double r64 = score64(qi, w, keys[u], nh, di, &mag);
            if (!poison && fabs(out[u] - r64) > 1e-5 * mag)
                t->bad_ref++;
        }
    }
    free(qi), free(kmem), free(w), free(qf), free(wp), free(kf);
}

TEST(tiled_scores_equal_the_per_entry_scores_bit_for_bit) {
    static const int shapes[][2] = {{4, 32}, {32, 128}, {64, 128}, {16, 64}, {20, 40}, {1, 7}, {48, 96}};
    tally t = {0};
    for (int width = 1; width <= 2; width++) {   /* the 8-wide route (no AVX-512) and the 16-wide tile */
        ds_fast_tile_width(width);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int fill = 1; fill <= DS_INDEX_TILE_KEYS; fill += (fill < 4 ? 1 : 5)) {
                run_row(shapes[i][0], shapes[i][1], 37, fill, 0, 0, &t);
                run_row(shapes[i][0], shapes[i][1], 16, fill, 20, 0, &t);
            }
    }
    ds_fast_tile_width(0);
    printf("  %d scores: %d differ in bits from ds_index_score_fast, %d off the float64 score\n", t.scores, t.bad_bits,
           t.bad_ref);
    CHECK(t.scores > 1000, "only %d scores compared", t.scores);
    CHECK(t.bad_bits == 0, "%d tiled scores differ from the per-entry fast score", t.bad_bits);
    CHECK(t.bad_ref == 0, "%d scores off the float64 formula", t.bad_ref);
}

TEST(keys_with_inf_and_nan_give_the_per_entry_bits) {
    tally t = {0};
    for (int width = 1; width <= 2; width++) {
        ds_fast_tile_width(width);
        for (int fill = 1; fill <= DS_INDEX_TILE_KEYS; fill++) run_row(32, 128, 24, fill, 2, 1, &t);
    }
    ds_fast_tile_width(0);
    CHECK(t.bad_bits == 0, "%d of %d scores differ from the per-entry fast score", t.bad_bits, t.scores);
}

/* Not a pass/fail figure (the host is shared): mini's shape, tiled vs per entry, printed so a
 * regression is visible in the log.  The check is that both produce the same bits. */
TEST(tiled_speed_on_mini_shapes) {
    enum { NH = 32, DI = 128, NK = 2048, REPS = 5 };
    ds_bf16 *qi = malloc(sizeof(ds_bf16) * NH * DI), *kmem = malloc(sizeof(ds_bf16) * NK * DI);
    float w[NH], wp[NH], kf[DI], *qf = malloc(sizeof(float) * NH * DI);
    float *a = malloc(sizeof(float) * NK), *b = malloc(sizeof(float) * NK), *c = malloc(sizeof(float) * NK);
    for (int i = 0; i < NH * DI; i++) qi[i] = ds_f32_to_bf16(frand());
    for (int i = 0; i < NK * DI; i++) kmem[i] = ds_f32_to_bf16(frand());
    for (int h = 0; h < NH; h++) w[h] = frand();
    double t_tile = 1e9, t_entry = 1e9, t_narrow = 1e9;
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = ds_now();
        ds_index_query_prep(qi, w, NH, DI, qf, wp);
        for (int s = 0; s < NK; s += DS_INDEX_TILE_KEYS) {
            const ds_bf16 *keys[DS_INDEX_TILE_KEYS];
            for (int u = 0; u < DS_INDEX_TILE_KEYS; u++) keys[u] = kmem + (size_t)(s + u) * DI;
            ds_index_scores_fast(qf, wp, NH, DI, keys, DS_INDEX_TILE_KEYS, kf, a + s);
        }
        double t1 = ds_now();
        for (int s = 0; s < NK; s++) b[s] = ds_index_score_fast(qi, w, kmem + (size_t)s * DI, NH, DI);
        double t2 = ds_now();
        ds_fast_tile_width(1);
        for (int s = 0; s < NK; s += DS_INDEX_TILE_KEYS) {
            const ds_bf16 *keys[DS_INDEX_TILE_KEYS];
            for (int u = 0; u < DS_INDEX_TILE_KEYS; u++) keys[u] = kmem + (size_t)(s + u) * DI;
            ds_index_scores_fast(qf, wp, NH, DI, keys, DS_INDEX_TILE_KEYS, kf, c + s);
        }
        ds_fast_tile_width(0);
        double t3 = ds_now();
        if (t1 - t0 < t_tile) t_tile = t1 - t0;
        if (t2 - t1 < t_entry) t_entry = t2 - t1;
        if (t3 - t2 < t_narrow) t_narrow = t3 - t2;
    }
    const double flop = 2.0 * NH * DI * NK;
    printf("  %d heads x %d x %d entries: tiled %.3f ms (%.1f GFLOP/s), per entry %.3f ms (%.1f GFLOP/s), %.2fx; "
           "8-wide tiles %.3f ms\n", NH, DI, NK, 1e3 * t_tile, flop / t_tile / 1e9, 1e3 * t_entry, flop / t_entry / 1e9,
           t_entry / t_tile, 1e3 * t_narrow);
    CHECK(!memcmp(a, b, sizeof(float) * NK), "tiled and per-entry scores differ");
    CHECK(!memcmp(c, b, sizeof(float) * NK), "8-wide tiled and per-entry scores differ");
    free(qi), free(kmem), free(qf), free(a), free(b), free(c);
}

RUN_ALL()
