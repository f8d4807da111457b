/* Fast-tier attention over a block of query rows (see attn_tile.h for why the union list).
 *
 * Why these two tiles: the per-row core (ds_attn_head_fast) streams every key twice per row and
 * keeps its value accumulator in memory (a load and a store of dh floats per key).  Here the score
 * tile holds the 32 fp32 lanes of DS_ATTN_QB dot products in registers while one key streams past
 * (the key is converted once for all rows; the queries are converted to fp32 once per block), and
 * the value tile holds 32 output channels of every row in registers over the whole key list, so
 * each key chunk is loaded once per block and no accumulator leaves the registers.  A dense block
 * (every row takes every key: the heads of one token row, the engine's case) skips the per-key
 * weight and mask tables a sparse block needs: its value tile reads each row's weights in place.
 *
 * Bits: a lane of a score is the sum, in element order, of exact bf16×bf16 products, combined by
 * the fixed tree of ds_ftree — the order of ds_fdot_bb (lanes 0..15 in one 16-wide vector, 16..31
 * in the other: their sum is the tree's first level, the rest follows ds_ftree).  A value channel
 * is acc + fp32(p·k) over the row's keys in its order, as ds_faxpy_bf16.  A key a row does not take
 * adds exactly +0 to its accumulators (the product's bits are masked to zero, so even an inf or NaN
 * key of another row cannot leak in; the sum is never −0, so +0 changes nothing).  Portable vector
 * C, compiled as AVX-512/AVX2/baseline clones under -ffp-contract=off: the same bits on every host. */
#include "model/attn_tile.h"
#include "model/fast_ops.h"
#include "model/fast_vec.h"
#include "model/ops.h"

#define QB DS_ATTN_QB

/* The rest of ds_ftree once its first level (l[j] + l[j+16], j < 16) is in l. */
DS_AI float tree_rest(float *l) {
    for (int j = 0; j < 8; j++) l[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) l[j] = l[j] + l[j + 4];
    l[0] = l[0] + l[2];
    l[1] = l[1] + l[3];
    return l[0] + l[1];
}

/* out[r] = ds_fdot_bb(q_r, k, dh) for the QB rows of qf (fp32 copies of bf16 queries). */
DS_CLONES static void score_key(const float *qf, int dh, const ds_bf16 *k, float *out) {
    v16f a0[QB], a1[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) a0[r] = a1[r] = (v16f){0};
    for (int i = 0; i < dh; i += 32) {
        const v16f k0 = ds_v16_ld_b(k + i), k1 = ds_v16_ld_b(k + i + 16);
#pragma GCC unroll 8
        for (int r = 0; r < QB; r++) {
            a0[r] = a0[r] + ds_v16_ld_f(qf + (size_t)r * dh + i) * k0;
            a1[r] = a1[r] + ds_v16_ld_f(qf + (size_t)r * dh + i + 16) * k1;
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) {
        float l[16];
        DS_V16_ST(l, a0[r] + a1[r]);
        out[r] = tree_rest(l);
    }
}

/* acc[r][d0..d0+32) = Σ_u fp32(w[u][r]·k_u[d]) over the union keys in order, from zero. */
DS_CLONES static void value_chunk(const ds_bf16 *const *keys, const float *w, const uint32_t *mask, const uint8_t *full,
                                  int nu, int d0, int dh, float *acc) {
    v16f a0[QB], a1[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) a0[r] = a1[r] = (v16f){0};
    for (int u = 0; u < nu; u++) {
        const v16f k0 = ds_v16_ld_b(keys[u] + d0), k1 = ds_v16_ld_b(keys[u] + d0 + 16);
        const float *wu = w + (size_t)u * QB;
        if (full[u]) {
#pragma GCC unroll 8
            for (int r = 0; r < QB; r++) {
                a0[r] = a0[r] + k0 * wu[r];
                a1[r] = a1[r] + k1 * wu[r];
            }
        } else {
            const uint32_t *mu = mask + (size_t)u * QB;
#pragma GCC unroll 8
            for (int r = 0; r < QB; r++) {
                a0[r] = a0[r] + (v16f)((v16u)(k0 * wu[r]) & mu[r]);
                a1[r] = a1[r] + (v16f)((v16u)(k1 * wu[r]) & mu[r]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) {
        DS_V16_ST(acc + (size_t)r * dh + d0, a0[r]);
        DS_V16_ST(acc + (size_t)r * dh + d0 + 16, a1[r]);
    }
}

/* A dense block's value tile: every row takes every key, row r's weight of key u is wr[r][u]. */
DS_CLONES static void value_chunk_dense(const ds_bf16 *const *keys, const float *const *wr, int nu, int d0, int dh,
                                        float *acc) {
    v16f a0[QB], a1[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) a0[r] = a1[r] = (v16f){0};
    for (int u = 0; u < nu; u++) {
        const v16f k0 = ds_v16_ld_b(keys[u] + d0), k1 = ds_v16_ld_b(keys[u] + d0 + 16);
#pragma GCC unroll 8
        for (int r = 0; r < QB; r++) {
            a0[r] = a0[r] + k0 * wr[r][u];
            a1[r] = a1[r] + k1 * wr[r][u];
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) {
        DS_V16_ST(acc + (size_t)r * dh + d0, a0[r]);
        DS_V16_ST(acc + (size_t)r * dh + d0 + 16, a1[r]);
    }
}

/* The queries widened to fp32 (rows past B: copies of row 0, computed and never read back). */
DS_CLONES static void widen_queries(const ds_attn_block *b, float *qf) {
    const int dh = b->dh;
    for (int r = 0; r < QB; r++) {
        const ds_bf16 *q = b->q[r < b->B ? r : 0];
        for (int d = 0; d < dh; d += 16) DS_V16_ST(qf + (size_t)r * dh + d, ds_v16_ld_b(q + d));
    }
}

/* x[i] / den for i < n (the value weight e_k/den of ds_attn_head_fast, one fp32 division each). */
DS_CLONES static void divide_by(float *x, float den, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] = x[i] / den;
}

/* ---- 8-wide tiles (hosts without AVX-512) ----
 * GCC keeps 64-byte vector values in memory when the target has no 512-bit registers, so the tiles
 * above run ~20x slower in the AVX2 clone than in the AVX-512 one.  These hold every value in 8-wide
 * vectors with at most 12 live accumulator/key registers, in the same orders: a score's 32 lanes as
 * four vectors combined as ds_fdot_bb combines them, a value channel summed over the keys in order
 * whichever channels share a vector (each channel is its own sum). */

/* ds_fdot_bb(q_r, k, dh) for the QB rows, two rows per pass over the key. */
DS_CLONES static void score_key_narrow(const float *qf, int dh, const ds_bf16 *k, float *out) {
    for (int r0 = 0; r0 < QB; r0 += 2) {
        v8f s8[2];
        ds_dot2_levels(qf + (size_t)r0 * dh, (size_t)dh, k, NULL, dh, s8);
        for (int r = 0; r < 2; r++) {   /* the rest of ds_ftree: +4, +2, +1 */
            float l[8];
            memcpy(l, &s8[r], sizeof s8[r]);
            for (int j = 0; j < 4; j++) l[j] = l[j] + l[j + 4];
            l[0] = l[0] + l[2];
            l[1] = l[1] + l[3];
            out[r0 + r] = l[0] + l[1];
        }
    }
}

/* value_chunk for channels [d0, d0 + 8). */
DS_CLONES static void value_chunk_narrow(const ds_bf16 *const *keys, const float *w, const uint32_t *mask,
                                         const uint8_t *full, int nu, int d0, int dh, float *acc) {
    v8f a[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) a[r] = (v8f){0};
    for (int u = 0; u < nu; u++) {
        const v8f k = ds_v8_ld_b(keys[u] + d0);
        const float *wu = w + (size_t)u * QB;
        if (full[u]) {
#pragma GCC unroll 8
            for (int r = 0; r < QB; r++) a[r] = a[r] + k * wu[r];
        } else {
            const uint32_t *mu = mask + (size_t)u * QB;
#pragma GCC unroll 8
            for (int r = 0; r < QB; r++) a[r] = a[r] + (v8f)((v8u)(k * wu[r]) & mu[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) memcpy(acc + (size_t)r * dh + d0, &a[r], sizeof a[r]);
}

/* value_chunk_dense for channels [d0, d0 + 8). */
DS_CLONES static void value_chunk_dense_narrow(const ds_bf16 *const *keys, const float *const *wr, int nu, int d0, int dh,
                                               float *acc) {
    v8f a[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) a[r] = (v8f){0};
    for (int u = 0; u < nu; u++) {
        const v8f k = ds_v8_ld_b(keys[u] + d0);
#pragma GCC unroll 8
        for (int r = 0; r < QB; r++) a[r] = a[r] + k * wr[r][u];
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) memcpy(acc + (size_t)r * dh + d0, &a[r], sizeof a[r]);
}

/* Scores of every (row, key) into the rows' own lists, scaled. */
static void block_scores(const ds_attn_block *b, const ds_attn_scratch *s) {
    const int dh = b->dh;
    widen_queries(b, s->qf);
    float out[QB];
    const int wide = ds_fast_wide_tiles();
    for (int u = 0; u < b->nu; u++) {
        (wide ? score_key : score_key_narrow)(s->qf, dh, b->keys[u], out);
        if (b->dense) {
            for (int r = 0; r < b->B; r++) s->sc[(size_t)r * s->max_keys + u] = out[r] * b->scale;
            continue;
        }
        const int32_t *iu = b->idx + (size_t)u * QB;
        for (int r = 0; r < b->B; r++)
            if (iu[r] >= 0) s->sc[(size_t)r * s->max_keys + iu[r]] = out[r] * b->scale;
    }
}

/* Dense block: each row's weights divided in place, then the value tile reads them row by row
 * (no transposed weight or mask table: every row takes every key). */
static void dense_values(const ds_attn_block *b, const ds_attn_scratch *s, const float *den) {
    const float *wr[QB];
    for (int r = 0; r < QB; r++) {
        wr[r] = s->sc + (size_t)(r < b->B ? r : 0) * s->max_keys;     /* rows past B: row 0's, unread */
        if (r < b->B) divide_by(s->sc + (size_t)r * s->max_keys, den[r], b->nu);
    }
    if (ds_fast_wide_tiles())
        for (int d0 = 0; d0 < b->dh; d0 += 32) value_chunk_dense(b->keys, wr, b->nu, d0, b->dh, s->acc);
    else
        for (int d0 = 0; d0 < b->dh; d0 += 8) value_chunk_dense_narrow(b->keys, wr, b->nu, d0, b->dh, s->acc);
}

void ds_attn_block_fast(const ds_attn_block *b, const ds_attn_scratch *s) {
    const int dh = b->dh, B = b->B;
    block_scores(b, s);
    /* each row's softmax over its own list, as ds_attn_head_fast: max in key order (sink first),
     * e = ds_fexp(s − m), den = ds_fsum (32 lanes over the row's indices) + ds_fexp(sink − m) */
    float den[QB];
    for (int r = 0; r < B; r++) {
        float *sc = s->sc + (size_t)r * s->max_keys;
        const int nk = b->dense ? b->nu : b->nk[r];
        float mx = b->sink[r];
        for (int i = 0; i < nk; i++)
            if (sc[i] > mx) mx = sc[i];
        ds_fexp_sub(sc, mx, nk);
        den[r] = ds_fsum(sc, nk) + ds_fexp(b->sink[r] - mx);
    }
    if (b->dense) {
        dense_values(b, s, den);
        for (int r = 0; r < B; r++) ds_round_rows_bf16(s->acc + (size_t)r * dh, (size_t)dh, b->o[r]);
        return;
    }
    for (int u = 0; u < b->nu; u++) {
        const int32_t *iu = b->idx + (size_t)u * QB;
        float *wu = s->w + (size_t)u * QB;
        uint32_t *mu = s->mask + (size_t)u * QB;
        int all = 1;
        for (int r = 0; r < QB; r++) {
            const int take = r < B && iu[r] >= 0;
            wu[r] = take ? s->sc[(size_t)r * s->max_keys + iu[r]] / den[r] : 0.0f;
            mu[r] = take ? 0xffffffffu : 0u;
            if (r < B && !take) all = 0;
        }
        s->full[u] = (uint8_t)all;
    }
    if (ds_fast_wide_tiles())
        for (int d0 = 0; d0 < dh; d0 += 32) value_chunk(b->keys, s->w, s->mask, s->full, b->nu, d0, dh, s->acc);
    else
        for (int d0 = 0; d0 < dh; d0 += 8) value_chunk_narrow(b->keys, s->w, s->mask, s->full, b->nu, d0, dh, s->acc);
    for (int r = 0; r < B; r++) ds_round_rows_bf16(s->acc + (size_t)r * dh, (size_t)dh, b->o[r]);
}
