/* Fast-tier attention over a block of query rows (see attn_tile.h for why the union list).
 *
 * Why these two tiles: the per-row core (ds_attn_head_fast) streams every key twice per row and
 * keeps its value accumulator in memory (a load and a store of dh floats per key).  Here the score
 * tile holds the 16 fp32 lanes of DS_ATTN_QB dot products in registers while one key streams past
 * (the key is split once for all rows; the queries are laid out once per block), and
 * the value tile holds 32 output channels of every row in registers over the whole key list, so
 * each key chunk is loaded once per block and no accumulator leaves the registers.  A dense block
 * (every row takes every key: the heads of one token row, the engine's case) skips the per-key
 * weight and mask tables a sparse block needs: its value tile reads each row's weights in place.
 *
 * Bits: a score is the pair-order dot of ds_fdot_bb_pair (docs/NUMERICS.md, decision 137): on
 * AVX512-BF16 hosts the kernels compute the block's scores with vdpbf16ps (ds_fast_pair_scores8,
 * the queries laid out flushed), elsewhere the vector routes below read the queries in the pair
 * layout (per 32 elements the 16 odd ones, then the 16 even ones) and each key through the same
 * split.  A value channel is acc + fp32(p·k) over the row's keys in its order, as ds_faxpy_bf16;
 * the 16-wide value tiles hold the odd and the even channels of a key chunk in separate vectors (no
 * shuffle per key; the channels are put back in order once, at the store).  A key a row does not
 * take adds exactly +0 to its accumulators (the product's bits are masked to zero, so even an inf or
 * NaN key of another row cannot leak in; the sum is never −0, so +0 changes nothing).  Portable
 * vector C, compiled as AVX-512/AVX2/baseline clones under -ffp-contract=off: the same bits on every
 * host. */
#include "model/attn_tile.h"
#include "model/fast_ops.h"
#include "model/fast_vec.h"
#include "model/ops.h"

#define QB DS_ATTN_QB

/* out[r] = ds_fdot_bb_pair(q_r, k, dh) for the QB rows of qf (the queries in the pair layout). */
DS_CLONES static void score_key(const float *qf, int dh, const ds_bf16 *k, float *out) {
    v16f a[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) a[r] = (v16f){0};
    for (int i = 0; i < dh; i += 32) {
        v16f ko, ke;
        ds_v16_ld_pairs(k + i, &ko, &ke);
#pragma GCC unroll 8
        for (int r = 0; r < QB; r++) {
            const float *qr = qf + (size_t)r * dh + i;
            a[r] = a[r] + ds_v16_ld_f(qr) * ko;
            a[r] = a[r] + ds_v16_ld_f(qr + 16) * ke;
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) {
        float l[16];
        DS_V16_ST(l, a[r]);
        out[r] = ds_pair_tree(l);
    }
}

/* Channels d0..d0+32 of a key as two vectors without a shuffle: the odd channels (2j+1) in lane j
 * of *odd, the even ones (2j) in *even, each widened exactly (not flushed: values are not the
 * scores' dot).  Each channel's sum stays its own, so which lane holds it changes no bit;
 * store_channels puts the channels back in order. */
DS_AI void ld_channels(const ds_bf16 *p, v16f *odd, v16f *even) {
    v16u w;
    memcpy(&w, p, sizeof w);
    *odd = (v16f)(w & 0xffff0000u);
    *even = (v16f)(w << 16);
}
DS_AI void store_channels(float *p, v16f odd, v16f even) {
    const v16f lo = __builtin_shufflevector(even, odd, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const v16f hi = __builtin_shufflevector(even, odd, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    DS_V16_ST(p, lo);
    DS_V16_ST(p + 16, hi);
}

/* acc[r][d0..d0+32) = Σ_u fp32(w[u][r]·k_u[d]) over the union keys in order, from zero. */
DS_CLONES static void value_chunk(const ds_bf16 *const *keys, const float *w, const uint32_t *mask, const uint8_t *full,
                                  int nu, int d0, int dh, float *acc) {
    v16f ao[QB], ae[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) ao[r] = ae[r] = (v16f){0};
    for (int u = 0; u < nu; u++) {
        v16f ko, ke;
        ld_channels(keys[u] + d0, &ko, &ke);
        const float *wu = w + (size_t)u * QB;
        if (full[u]) {
#pragma GCC unroll 8
            for (int r = 0; r < QB; r++) {
                ao[r] = ao[r] + ko * wu[r];
                ae[r] = ae[r] + ke * wu[r];
            }
        } else {
            const uint32_t *mu = mask + (size_t)u * QB;
#pragma GCC unroll 8
            for (int r = 0; r < QB; r++) {
                ao[r] = ao[r] + (v16f)((v16u)(ko * wu[r]) & mu[r]);
                ae[r] = ae[r] + (v16f)((v16u)(ke * wu[r]) & mu[r]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) store_channels(acc + (size_t)r * dh + d0, ao[r], ae[r]);
}

enum { KPD = 8 };   /* keys ahead the value tiles prefetch */

/* A dense block's value tile: every row takes every key, row r's weight of key u is wr[r][u]. */
DS_CLONES static void value_chunk_dense(const ds_bf16 *const *keys, const float *const *wr, int nu, int d0, int dh,
                                        float *acc) {
    v16f ao[QB], ae[QB];
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) ao[r] = ae[r] = (v16f){0};
    for (int u = 0; u < nu; u++) {
        v16f ko, ke;
        /* the key KPD on (past the last key, the next channels of the first keys): the keys are
         * rows apart, so no hardware stream runs ahead of this walk */
        const int un = u + KPD, uw = un - nu;
        __builtin_prefetch(un < nu ? keys[un] + d0 : uw < nu && d0 + 32 < dh ? keys[uw] + d0 + 32 : keys[u] + d0);
        ld_channels(keys[u] + d0, &ko, &ke);
#pragma GCC unroll 8
        for (int r = 0; r < QB; r++) {
            ao[r] = ao[r] + ko * wr[r][u];
            ae[r] = ae[r] + ke * wr[r][u];
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < QB; r++) store_channels(acc + (size_t)r * dh + d0, ao[r], ae[r]);
}

/* The queries as the score routes read them (rows past B: copies of row 0, computed and never
 * read back): flushed bf16 for vdpbf16ps (native), else the pair layout in fp32 — per block of 32,
 * the 16 odd elements, then the 16 even ones, flushed and widened (exact). */
DS_CLONES static void lay_queries(const ds_attn_block *b, float *qf, int native) {
    const int dh = b->dh;
    for (int r = 0; r < QB; r++) {
        const ds_bf16 *q = b->q[r < b->B ? r : 0];
        if (native) {
            ds_bf16 *d = (ds_bf16 *)qf + (size_t)r * dh;
#pragma omp simd
            for (int i = 0; i < dh; i++) d[i] = ((q[i] >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : q[i];
            continue;
        }
        for (int i = 0; i < dh; i += 32) {
            v16f o, e;
            ds_v16_ld_pairs(q + i, &o, &e);
            DS_V16_ST(qf + (size_t)r * dh + i, o);
            DS_V16_ST(qf + (size_t)r * dh + i + 16, e);
        }
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
 * vectors with at most 12 live accumulator/key registers, in the same orders: a score's 16 pair
 * lanes as two vectors, a value channel summed over the keys in order whichever channels share a
 * vector (each channel is its own sum). */

/* score_key with 8-wide vectors, NRP rows per pass over the key (2·NRP accumulators + 4 key
 * vectors): lanes 0-7 of a row in a[r][0], 8-15 in a[r][1].  In the AVX2 clone this route runs
 * ~1.3x slower than the 32-lane order did (0.20 -> 0.26 ms per 8 x 640 x 512 block): each lane now
 * adds two products per 32 elements in sequence; 1 or 2 rows per pass measured slower still. */
#define NRP 4
typedef float v4f __attribute__((vector_size(16)));

/* ds_pair_tree of NRP = 4 rows at once, the same additions in the same order: l[j] + l[j+8] is
 * the sum of a row's two vectors, + l[j+4] its two 4-lane halves; the four rows' lanes are then
 * transposed so that (l0 + l2) + (l1 + l3) runs for all four in one vector.  Done per row through
 * a 16-float copy, the tree cost about as much as the key's dot products at dh = 512 (the copy's
 * two 16-byte stores read back as one 32-byte load stall the store forwarding). */
DS_AI void pair_tree4(const v8f a[NRP][2], float *out) {
    v4f t[NRP];
#pragma GCC unroll 4
    for (int r = 0; r < NRP; r++) {
        const v8f s = a[r][0] + a[r][1];
        t[r] = __builtin_shufflevector(s, s, 0, 1, 2, 3) + __builtin_shufflevector(s, s, 4, 5, 6, 7);
    }
    const v4f u0 = __builtin_shufflevector(t[0], t[1], 0, 4, 1, 5), u1 = __builtin_shufflevector(t[0], t[1], 2, 6, 3, 7);
    const v4f u2 = __builtin_shufflevector(t[2], t[3], 0, 4, 1, 5), u3 = __builtin_shufflevector(t[2], t[3], 2, 6, 3, 7);
    const v4f c0 = __builtin_shufflevector(u0, u2, 0, 1, 4, 5), c1 = __builtin_shufflevector(u0, u2, 2, 3, 6, 7);
    const v4f c2 = __builtin_shufflevector(u1, u3, 0, 1, 4, 5), c3 = __builtin_shufflevector(u1, u3, 2, 3, 6, 7);
    const v4f res = (c0 + c2) + (c1 + c3);
    memcpy(out, &res, sizeof res);
}

DS_CLONES static void score_key_narrow(const float *qf, int dh, const ds_bf16 *k, float *out) {
    for (int r0 = 0; r0 < QB; r0 += NRP) {
        v8f a[NRP][2];
        for (int r = 0; r < NRP; r++) a[r][0] = a[r][1] = (v8f){0};
        for (int i = 0; i < dh; i += 32) {
            v8f ko0, ke0, ko1, ke1;
            ds_v8_ld_pairs(k + i, &ko0, &ke0);
            ds_v8_ld_pairs(k + i + 16, &ko1, &ke1);
#pragma GCC unroll 4
            for (int r = 0; r < NRP; r++) {
                const float *qr = qf + (size_t)(r0 + r) * dh + i;
                a[r][0] = a[r][0] + ds_v8_ld_f(qr) * ko0;
                a[r][0] = a[r][0] + ds_v8_ld_f(qr + 16) * ke0;
                a[r][1] = a[r][1] + ds_v8_ld_f(qr + 8) * ko1;
                a[r][1] = a[r][1] + ds_v8_ld_f(qr + 24) * ke1;
            }
        }
        pair_tree4(a, out + r0);
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

/* value_chunk_dense for channels [d0, d0 + 16) of rows [r0, r0 + 4) over keys [u0, u1): the odd
 * and the even channels of a key as two vectors (a mask and a shift, as ld_channels), so a key
 * costs one load and two operations for 16 channels and each row's weight broadcast serves two
 * vectors.  The sums start at zero when u0 == 0, else from acc, where they wait in that odd / even
 * order (a saved and reloaded sum changes no bit); after the last key (u1 == nu) they are stored
 * in channel order. */
DS_CLONES static void value_chunk_dense_narrow(const ds_bf16 *const *keys, const float *const *wr, int r0, int u0,
                                               int u1, int nu, int d0, int dh, float *acc) {
    v8f ao[4], ae[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        float *ar = acc + (size_t)(r0 + r) * dh + d0;
        if (u0 == 0) ao[r] = ae[r] = (v8f){0};
        else {
            memcpy(&ae[r], ar, sizeof ae[r]);
            memcpy(&ao[r], ar + 8, sizeof ao[r]);
        }
    }
    for (int u = u0; u < u1; u++) {
        v8u w;
        memcpy(&w, keys[u] + d0, sizeof w);
        const v8f ko = (v8f)(w & 0xffff0000u), ke = (v8f)(w << 16);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const float p = wr[r0 + r][u];
            ao[r] = ao[r] + ko * p;
            ae[r] = ae[r] + ke * p;
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        float *ar = acc + (size_t)(r0 + r) * dh + d0;
        if (u1 < nu) {
            memcpy(ar, &ae[r], sizeof ae[r]);
            memcpy(ar + 8, &ao[r], sizeof ao[r]);
            continue;
        }
        const v8f lo = __builtin_shufflevector(ae[r], ao[r], 0, 8, 1, 9, 2, 10, 3, 11);
        const v8f hi = __builtin_shufflevector(ae[r], ao[r], 4, 12, 5, 13, 6, 14, 7, 15);
        memcpy(ar, &lo, sizeof lo);
        memcpy(ar + 8, &hi, sizeof hi);
    }
}

/* The 8-wide value tile walks the keys in chunks of VKC (32 KiB of keys at dh = 512), every
 * channel group of every row against a chunk before the next: a key list longer than L2 holds
 * otherwise comes from L3 once per 16-channel sweep, and the sweeps stalled on it. */
#define VKC 32
static void dense_values_narrow(const ds_bf16 *const *keys, const float *const *wr, int nu, int dh, float *acc) {
    for (int u0 = 0; u0 < nu; u0 += VKC) {
        const int u1 = nu - u0 < VKC ? nu : u0 + VKC;
        for (int r0 = 0; r0 < QB; r0 += 4)
            for (int d0 = 0; d0 < dh; d0 += 16) value_chunk_dense_narrow(keys, wr, r0, u0, u1, nu, d0, dh, acc);
    }
}

/* Scores of every (row, key) into the rows' own lists, scaled: vdpbf16ps where the kernels have it
 * (ds_fast_pair_scores8, chunks of keys), else the vector routes, one key at a time. */
static void block_scores(const ds_attn_block *b, const ds_attn_scratch *s) {
    enum { KC = 64 };
    const int dh = b->dh, native = ds_fast_pair_scores_native(), wide = ds_fast_wide_tiles();
    lay_queries(b, s->qf, native);
    float out[KC * QB];
    for (int u0 = 0; u0 < b->nu; u0 += KC) {
        const int nc = b->nu - u0 < KC ? b->nu - u0 : KC;
        if (native) ds_fast_pair_scores8((const ds_bf16 *)s->qf, dh, b->keys + u0, nc, out);
        else
            for (int c = 0; c < nc; c++) (wide ? score_key : score_key_narrow)(s->qf, dh, b->keys[u0 + c], out + c * QB);
        for (int c = 0; c < nc; c++) {
            const int u = u0 + c;
            const float *oc = out + c * QB;
            if (b->dense) {
                for (int r = 0; r < b->B; r++) s->sc[(size_t)r * s->max_keys + u] = oc[r] * b->scale;
                continue;
            }
            const int32_t *iu = b->idx + (size_t)u * QB;
            for (int r = 0; r < b->B; r++)
                if (iu[r] >= 0) s->sc[(size_t)r * s->max_keys + iu[r]] = oc[r] * b->scale;
        }
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
        dense_values_narrow(b->keys, wr, b->nu, b->dh, s->acc);
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
