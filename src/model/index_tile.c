/* Fast-tier indexer scores of one row against up to 16 index keys at once (see fast_ops.h).
 *
 * Why a tile: the per-pair score ds_index_score_fast calls ds_fdot_bb once per head, so every
 * (row, key) pair converts the key nh times, and each of the nh dots ends in a scalar 32-lane tree;
 * at long context the indexer scans every visible entry of every row and the pair cost is what a
 * prefill spends its time on.  Here the key is converted once per pair, eight heads' dot lanes stay
 * in registers while the key streams past, and the trees run "transposed": sixteen 16-lane vectors
 * (sixteen heads, or sixteen keys) are reduced together by shuffles, each output lane seeing exactly
 * the additions of ds_ftree in its order.
 *
 * Bits: a head's dot is ds_fdot_bb's — lane j (element j mod 32) sums its products in element
 * order from +0; lanes 0..15 plus lanes 16..31 is the tree's first level, the rest is tree16 below.
 * The head terms w[h]·max(0, d_h) go to lane h mod 32 in head order from +0, and the score is
 * ds_ftree of those 32 lanes, as in ds_index_score_fast.  Portable vector C (GCC vector
 * extensions), compiled as AVX-512/AVX2/baseline clones under -ffp-contract=off: the same bits on
 * every host.  Any shape: heads are padded to a multiple of 16 and the head dimension to one of 32
 * with zeros (query, weight and key), which is exact — a padded product is +0, and a lane that
 * starts at +0 and adds values is never −0, so adding +0 leaves its bits alone; a padded head's
 * score is +0 and its weight 0, so it adds +0 to its lane.  Hosts without AVX-512 take an 8-wide
 * version of the same tile (see ds_fast_wide_tiles: 64-byte vectors live in memory there). */
#include "model/fast_ops.h"
#include "model/fast_vec.h"


/* One level of the transposed tree: from two vectors that each hold g inputs of 2m lanes, one that
 * holds those 2g inputs with lane j + lane j+m of each (j < m). */
#define PAIR_LEVEL(a, b, lo, hi) (__builtin_shuffle((a), (b), (lo)) + __builtin_shuffle((a), (b), (hi)))

/* out lane k = the 16-lane rest of ds_ftree (l[j]+l[j+8], l[j]+l[j+4], l0+l2 and l1+l3, their sum)
 * applied to in[k]. */
DS_AI v16f tree16(const v16f *in) {
    const v16i l8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const v16i h8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    const v16i l4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const v16i h4 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    const v16i l2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const v16i h2 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
    const v16i l1 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const v16i h1 = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    v16f m[8], n[4], p[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) m[i] = PAIR_LEVEL(in[2 * i], in[2 * i + 1], l8, h8);   /* 2 inputs × 8 */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) n[i] = PAIR_LEVEL(m[2 * i], m[2 * i + 1], l4, h4);     /* 4 inputs × 4 */
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) p[i] = PAIR_LEVEL(n[2 * i], n[2 * i + 1], l2, h2);     /* 8 inputs × 2 */
    return PAIR_LEVEL(p[0], p[1], l1, h1);                                              /* 16 inputs */
}

/* First tree level of 8 heads' dots with one key (kf: the key in fp32), heads at qf, qf + di, ... */
DS_AI void dots8(const float *qf, int di, const float *kf, v16f *L) {
    v16f a0[8], a1[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) a0[r] = a1[r] = (v16f){0};
    for (int i = 0; i < di; i += 32) {
        const v16f k0 = ds_v16_ld_f(kf + i), k1 = ds_v16_ld_f(kf + i + 16);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            a0[r] = a0[r] + ds_v16_ld_f(qf + (size_t)r * di + i) * k0;
            a1[r] = a1[r] + ds_v16_ld_f(qf + (size_t)r * di + i + 16) * k1;
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) L[r] = a0[r] + a1[r];
}

static int up(int n, int m) { return (n + m - 1) / m * m; }

void ds_index_query_prep(const ds_bf16 *qi, const float *w, int nh, int di, float *qf, float *wp) {
    const int nhp = up(nh, 16), dip = up(di, 32);
    memset(qf, 0, sizeof(float) * (size_t)nhp * dip);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < di; i++) qf[(size_t)h * dip + i] = ds_bf16_to_f32(qi[(size_t)h * di + i]);
    for (int h = 0; h < nhp; h++) wp[h] = h < nh ? w[h] : 0.0f;
}

/* The first tree level of one key's score: lanes h mod 32 (0..15 + 16..31) of Σ_h w[h]·max(0, d_h);
 * nh and di padded, dk the key's length. */
DS_AI v16f key_lanes(const float *qf, const float *w, int nh, int di, int dk, const ds_bf16 *k, float *kf) {
    int i = 0;
    for (; i + 16 <= dk; i += 16) {
        const v16f v = ds_v16_ld_b(k + i);
        memcpy(kf + i, &v, sizeof v);
    }
    for (; i < di; i++) kf[i] = i < dk ? ds_bf16_to_f32(k[i]) : 0.0f;
    v16f half[2] = {{0}, {0}}, L[16];
    for (int g = 0; g < nh / 16; g++) {
        dots8(qf + (size_t)g * 16 * di, di, kf, L);
        dots8(qf + ((size_t)g * 16 + 8) * di, di, kf, L + 8);
        const v16f d = tree16(L);
        const v16f relu = (v16f)((v16u)d & (v16u)(d > 0.0f));   /* NaN and negatives: +0 */
        half[g & 1] = half[g & 1] + ds_v16_ld_f(w + (size_t)g * 16) * relu;
    }
    return half[0] + half[1];
}

/* ---- 8-wide route (hosts without AVX-512, see ds_fast_wide_tiles) ----
 * The same additions in 8-lane vectors: a head's 32 dot lanes as four vectors whose first two tree
 * levels are (v0 + v2) + (v1 + v3), the head terms in four quarters (lanes h mod 32: heads 8g..8g+7
 * go to quarter g mod 4) combined the same way, and the remaining levels (+4, +2, +1) run
 * transposed over eight heads or eight keys by tree8. */
typedef int32_t v8i __attribute__((vector_size(32)));

/* out lane k = (l[j] + l[j+4], then l0 + l2 and l1 + l3, then their sum) of in[k]. */
DS_AI v8f tree8(const v8f *in) {
    const v8i l4 = {0, 1, 2, 3, 8, 9, 10, 11}, h4 = {4, 5, 6, 7, 12, 13, 14, 15};
    const v8i l2 = {0, 1, 4, 5, 8, 9, 12, 13}, h2 = {2, 3, 6, 7, 10, 11, 14, 15};
    const v8i l1 = {0, 2, 4, 6, 8, 10, 12, 14}, h1 = {1, 3, 5, 7, 9, 11, 13, 15};
    v8f m[4], n[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) m[i] = PAIR_LEVEL(in[2 * i], in[2 * i + 1], l4, h4);   /* 2 inputs × 4 */
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) n[i] = PAIR_LEVEL(m[2 * i], m[2 * i + 1], l2, h2);     /* 4 inputs × 2 */
    return PAIR_LEVEL(n[0], n[1], l1, h1);                                              /* 8 inputs */
}

/* key_lanes' result after one more level: the score's lanes l[j] + l[j+8] (j < 8) of the first level. */
DS_AI v8f key_lanes8(const float *qf, const float *w, int nh, int di, int dk, const ds_bf16 *k, float *kf) {
    int i = 0;
    for (; i + 8 <= dk; i += 8) {
        const v8f v = ds_v8_ld_b(k + i);
        memcpy(kf + i, &v, sizeof v);
    }
    for (; i < di; i++) kf[i] = i < dk ? ds_bf16_to_f32(k[i]) : 0.0f;
    v8f q[4] = {{0}, {0}, {0}, {0}}, L[8];
    for (int g = 0; g < nh / 8; g++) {
        for (int p = 0; p < 4; p++) ds_dot2_levels(qf + ((size_t)g * 8 + 2 * p) * di, (size_t)di, kf, di, L + 2 * p);
        const v8f d = tree8(L);
        const v8f relu = (v8f)((v8u)d & (v8u)(d > 0.0f));   /* NaN and negatives: +0 */
        q[g & 3] = q[g & 3] + ds_v8_ld_f(w + (size_t)g * 8) * relu;
    }
    return (q[0] + q[2]) + (q[1] + q[3]);
}

DS_AI void scores_narrow(const float *qf, const float *wp, int nhp, int dip, int di, const ds_bf16 *const *keys, int n,
                          float *kf, float *out) {
    for (int u0 = 0; u0 < n; u0 += 8) {
        v8f U[8];
        for (int u = 0; u < 8; u++) U[u] = u0 + u < n ? key_lanes8(qf, wp, nhp, dip, di, keys[u0 + u], kf) : (v8f){0};
        const v8f s = tree8(U);
        float o[8];
        memcpy(o, &s, sizeof s);
        for (int u = 0; u < 8 && u0 + u < n; u++) out[u0 + u] = o[u];
    }
}

DS_CLONES void ds_index_scores_fast(const float *qf, const float *wp, int nh, int di, const ds_bf16 *const *keys, int n,
                                    float *kf, float *out) {
    const int nhp = up(nh, 16), dip = up(di, 32);
    if (!ds_fast_wide_tiles()) {
        scores_narrow(qf, wp, nhp, dip, di, keys, n, kf, out);
        return;
    }
    v16f U[16];
    for (int u = 0; u < 16; u++) U[u] = u < n ? key_lanes(qf, wp, nhp, dip, di, keys[u], kf) : (v16f){0};
    const v16f s = tree16(U);
    memcpy(kf, &s, sizeof s);
    for (int u = 0; u < n; u++) out[u] = kf[u];
}
