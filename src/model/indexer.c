/* Indexer of an index-source layer (MODEL.md §2.8): per row, the top-k compressed entries that the
 * layer and the REUSE layers after it attend to, with the two-level candidate mask.
 *
 * Why it is organized per row: the scores of a row only need its own index query and head weights
 * and the index keys of kv_src(l) visible to it (N_p = ⌊(p+1)/r⌋), which the compressor has already
 * written into the sequence's IDX pages; so rows are independent pool tasks and the result cannot
 * depend on chunking.  The candidate source stores its kept blocks per row for the later index
 * layers of the same step (its own selection is unmasked).  Exact shortcuts: when N_p <= index_topk
 * the selection is everything visible, and when the blocks fit the candidate budget every block is
 * kept — in both cases no score can change the result, so none is computed.  Ties go to the lower
 * entry (block) index; the selection is returned ascending. */
#include "model/forward.h"
#include "model/ops.h"
#include "model/fast_ops.h"
#include "base/threadpool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct idx_ctx {
    ds_step *st;
    int layer;
    int src;                      /* CKV/IDX source of kv_src(layer) */
    int ratio;
    /* wide mode: one row's scan split over tasks */
    int row;
    float *I;
    int64_t np;
    /* per-thread scratch from the step arena: [threads][max_np] scores, [threads][heap_n] heap,
     * [threads][max_nb] block maxima and kept-block flags */
    int64_t max_np, max_nb;
    int heap_n;
    float *scr_I, *scr_bsc;
    float *scr_qf;                /* [threads][qf_n]: the row's index query in fp32, then key scratch */
    int64_t qf_n;
    int32_t *scr_heap;
    uint8_t *scr_keep;
} idx_ctx;

#define SCAN_CHUNK 2048           /* entries per task when one row's scan is split */

static int64_t visible(const idx_ctx *x, int row) { return (x->st->pos[row] + 1) / x->ratio; }

/* Fast tier: the query widened once, then 16 entries per tile (index_tile.c: the same bits as
 * ds_index_score_fast per entry). */
static void score_range_tiled(const idx_ctx *x, int row, int64_t s0, int64_t s1, float *I, int thread) {
    const ds_step *st = x->st;
    const int nh = st->c->index_n_heads, di = st->c->index_head_dim;
    const ds_seq *seq = st->ss[st->row_seq[row]].seq;
    const ds_bf16 *qi = st->qi + (size_t)row * nh * di;
    const int nhp = (nh + 15) / 16 * 16, dip = (di + 31) / 32 * 32;
    float *qf = x->scr_qf + (size_t)thread * x->qf_n, *wp = qf + (size_t)nhp * dip, *kf = wp + nhp;
    ds_index_query_prep(qi, st->iw + (size_t)row * nh, nh, di, qf, wp);
    const ds_bf16 *keys[DS_INDEX_TILE_KEYS];
    for (int64_t s = s0; s < s1; s += DS_INDEX_TILE_KEYS) {
        const int n = s1 - s < DS_INDEX_TILE_KEYS ? (int)(s1 - s) : DS_INDEX_TILE_KEYS;
        for (int u = 0; u < n; u++) keys[u] = ds_seq_idx_row(seq, x->src, s + u);
        ds_index_scores_fast(qf, wp, nh, di, keys, n, kf, I + s);
    }
}

/* I[s] for s in [s0, s1): Σ_h w[h]·max(0, qi[h]·idxk[s]) in float64, one rounding (exact tier), or
 * the fast tier's fp32 order. */
static void score_range(const idx_ctx *x, int row, int64_t s0, int64_t s1, float *I, int thread) {
    const ds_step *st = x->st;
    const int nh = st->c->index_n_heads, di = st->c->index_head_dim;
    const ds_seq *seq = st->ss[st->row_seq[row]].seq;
    const ds_bf16 *qi = st->qi + (size_t)row * nh * di;
    const float *w = st->iw + (size_t)row * nh;
    if (st->m->numerics == DS_NUMERICS_FAST) {
        score_range_tiled(x, row, s0, s1, I, thread);
        return;
    }
    for (int64_t s = s0; s < s1; s++) {
        const ds_bf16 *k = ds_seq_idx_row(seq, x->src, s);
        double acc = 0;
        for (int h = 0; h < nh; h++) {
            float d = (float)ds_dot_bb(qi + (size_t)h * di, k, di);
            acc += (double)w[h] * (double)(d > 0 ? d : 0.0f);
        }
        I[s] = (float)acc;
    }
}

/* Rows whose selection needs scores (the others take every visible entry). */
static int needs_scores(const idx_ctx *x, int row) { return visible(x, row) > x->st->c->index_topk; }

/* Candidate blocks (at the candidate source) and the top-k of one row from its scores. */
static void select_row(const idx_ctx *x, int row, float *I, int thread) {
    ds_step *st = x->st;
    const ds_config *c = st->c;
    const ds_layer_role *role = &c->roles[x->layer];
    const int K = c->index_topk, B = c->cand_block_size;
    const int64_t Np = visible(x, row), nb = (Np + B - 1) / B;
    int32_t *sel = st->sel + (size_t)row * K;
    int32_t *heap = x->scr_heap + (size_t)thread * x->heap_n;
    if (role->cand_source && nb > c->cand_topk_blocks) {
        /* block maxima, newest (possibly partial) block forced in, keep the best blocks */
        float *bsc = x->scr_bsc + (size_t)thread * x->max_nb;
        for (int64_t b = 0; b < nb; b++) {
            float mx = -INFINITY;
            for (int64_t s = b * B; s < (b + 1) * B && s < Np; s++) if (I[s] > mx) mx = I[s];
            bsc[b] = mx;
        }
        bsc[(Np - 1) / B] = INFINITY;
        float next, kth = INFINITY;
        int32_t *kept = st->cand + (size_t)row * c->cand_topk_blocks;
        int nk = ds_topk_set(bsc, nb, c->cand_topk_blocks, kept, heap, &kth, &next);
        st->n_cand[row] = nk;
        if (nk > 1 && isfinite(kth)) ds_probe_gap(st->m, 2, kth, next);
    }
    if (role->uses_candidates && st->n_cand[row] >= 0) {
        uint8_t *keep = memset(x->scr_keep + (size_t)thread * x->max_nb, 0, (size_t)nb);
        const int32_t *kept = st->cand + (size_t)row * c->cand_topk_blocks;
        for (int i = 0; i < st->n_cand[row]; i++) keep[kept[i]] = 1;
        for (int64_t s = 0; s < Np; s++) if (!keep[s / B]) I[s] = -INFINITY;
    }
    float next, kth = -INFINITY;
    int n = ds_topk_set(I, Np, K, sel, heap, &kth, &next);   /* in index order */
    if (n == K) ds_probe_gap(st->m, 1, kth, next);
    st->n_sel[row] = n;
}

/* Rows that need no scores: every visible entry, and at the candidate source every block (when
 * more blocks than the budget were visible the row would need scores: Np > topk by rule 7). */
static void trivial_row(const idx_ctx *x, int row) {
    ds_step *st = x->st;
    const int K = st->c->index_topk;
    const int64_t Np = visible(x, row);
    if (st->c->roles[x->layer].cand_source) st->n_cand[row] = -1;
    int32_t *sel = st->sel + (size_t)row * K;
    for (int64_t s = 0; s < Np; s++) sel[s] = (int32_t)s;
    st->n_sel[row] = (int)Np;
}

/* Narrow mode: one task per row (prefill chunks, batches). */
static void row_task(void *vctx, int row, int thread) {
    idx_ctx *x = vctx;
    if (!needs_scores(x, row)) { trivial_row(x, row); return; }
    const int64_t Np = visible(x, row);
    float *I = x->scr_I + (size_t)thread * x->max_np;
    if (x->st->c->roles[x->layer].cand_source) x->st->n_cand[row] = -1;
    score_range(x, row, 0, Np, I, thread);
    select_row(x, row, I, thread);
}

/* Wide mode: the scan of one row split in chunks of entries. */
static void chunk_task(void *vctx, int t, int thread) {
    idx_ctx *x = vctx;
    int64_t s0 = (int64_t)t * SCAN_CHUNK, s1 = s0 + SCAN_CHUNK < x->np ? s0 + SCAN_CHUNK : x->np;
    score_range(x, x->row, s0, s1, x->I, thread);
}

void ds_indexer_run(ds_step *st, int l) {
    const ds_config *c = st->c;
    const ds_layer_weights *w = &st->m->layers[l];
    const int N = st->N, nh = c->index_n_heads, di = c->index_head_dim, rd = c->rope_head_dim;
    /* index queries (RoPE with the CMP table at the row's position) and head weights: weights_proj is
     * a linear like any other (bf16 output, MODEL.md §2.0), widened and scaled in fp32 */
    ds_linear_bf16(&w->idx_wq_b, st->qr, N, st->ftmp, st->qi);
    for (int r = 0; r < N; r++)
        for (int h = 0; h < nh; h++) ds_rope_apply_t(st->m->numerics, st->qi + ((size_t)r * nh + h) * di, di, rd, st->cs_cmp + (size_t)r * rd, 0);
    ds_linear_forward(&w->idx_wproj, st->u, N, st->ftmp);
    const float k = (float)(1.0 / sqrt((double)di * (double)nh));
    for (int r = 0; r < N; r++)
        for (int h = 0; h < nh; h++) st->iw[(size_t)r * nh + h] = ds_round_bf16(st->ftmp[(size_t)r * nh + h]) * k;
    idx_ctx x = {.st = st, .layer = l, .src = st->ss[0].seq->pools->lay.src_of_layer[c->roles[l].kv_src], .ratio = c->roles[l].ratio};
    int scored = 0;
    for (int r = 0; r < N; r++) {
        scored += needs_scores(&x, r);
        if (visible(&x, r) > x.max_np) x.max_np = visible(&x, r);
    }
    const int T = ds_pool_threads();
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    const int64_t cb = c->cand_block_size > 0 ? c->cand_block_size : 1;
    x.max_nb = (x.max_np + cb - 1) / cb;
    x.heap_n = c->index_topk > c->cand_topk_blocks ? c->index_topk : c->cand_topk_blocks;
    x.scr_I = DS_ARENA_NEW(st->arena, float, (size_t)T * x.max_np);
    x.scr_bsc = DS_ARENA_NEW(st->arena, float, (size_t)T * x.max_nb);
    x.scr_heap = DS_ARENA_NEW(st->arena, int32_t, (size_t)T * x.heap_n);
    const int64_t nhp = (nh + 15) / 16 * 16, dip = (di + 31) / 32 * 32;
    x.qf_n = (nhp * dip + nhp + dip + 15) / 16 * 16;   /* padded query, weights, key scratch; 64-byte steps */
    x.scr_qf = DS_ARENA_NEW(st->arena, float, (size_t)T * x.qf_n);
    x.scr_keep = DS_ARENA_NEW(st->arena, uint8_t, (size_t)T * x.max_nb);
    if (scored >= T) {
        ds_pool_run(N, row_task, &x);
        ds_arena_release(st->arena, mk);
        return;
    }
    /* few rows to score (decode, small verify blocks): spread each row's scan over the threads */
    for (int r = 0; r < N; r++) {
        if (!needs_scores(&x, r)) { trivial_row(&x, r); continue; }
        if (c->roles[l].cand_source) st->n_cand[r] = -1;
        x.row = r;
        x.np = visible(&x, r);
        x.I = x.scr_I;
        ds_pool_run((int)((x.np + SCAN_CHUNK - 1) / SCAN_CHUNK), chunk_task, &x);
        select_row(&x, r, x.I, 0);
    }
    ds_arena_release(st->arena, mk);
}
