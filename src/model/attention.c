/* Attention of one layer for every row of a step (MODEL.md §2.6), with the FULL layer's compressor
 * and the indexer run in between (§2.7, §2.8: writes before reads).
 *
 * Why this shape: the projections (wq_a, wkv, wq_b, wo_a, wo_b) are linears over all rows of all
 * sequences; the core (scores over window + selected compressed keys, sink, values = keys) is per
 * row and head and runs as pool tasks.  A row's key list is built in one fixed order — window
 * positions ascending (earlier positions from the sequence's WIN pages, this step's positions from
 * scratch), then the selected compressed entries ascending — and every reduction is float64 with
 * one rounding (docs/NUMERICS.md "attention"; the fast tier, ds_attn_head_fast, keeps the same key
 * order with fp32 sums in a fixed order; the heads of a row run as blocks of up to DS_ATTN_QB through
 * attn_tile.c, each head still in its own order), so a row's output is the same whether it arrives
 * in a prefill chunk, a decode step or a batch.  Window rows of this step are persisted into WIN pages
 * after the core has run. */
#include "model/forward.h"
#include "model/ops.h"
#include "model/fast_ops.h"
#include "model/attn_tile.h"
#include "base/threadpool.h"
#include "base/phase_prof.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_ctx {
    ds_step *st;
    int layer;
    const ds_layer_weights *w;
    int src;                      /* CKV source of kv_src(layer), -1 for SWA layers */
    float scale;                  /* fp32(d_h^-0.5) */
    int max_keys;                 /* window + index_topk: the most keys a row attends to */
    const ds_bf16 **keys;         /* [threads][max_keys] per-thread scratch (step arena) */
    float *sc;                    /* [threads][max_keys] */
    double *acc;                  /* [threads][d_h] */
    int h0, Hl;                   /* this rank's heads h0..h0+Hl-1 (dist/dist.h); q holds only them */
    /* fast tier: blocks of up to DS_ATTN_QB heads of one row (attn_tile.h) */
    int head_groups;              /* blocks per row: ceil(Hl / DS_ATTN_QB) */
    ds_attn_scratch *tile;        /* [threads] */
} attn_ctx;

/* A row's key list in its fixed order (window positions ascending, then the selected compressed
 * entries ascending); returns its length. */
static int row_keys(const attn_ctx *a, int row, const ds_bf16 **keys) {
    const ds_step *st = a->st;
    const ds_config *c = st->c;
    const int dh = c->head_dim;
    const ds_step_seq *sq = &st->ss[st->row_seq[row]];
    const int64_t p = st->pos[row];
    const int64_t lo = p - c->window + 1 > 0 ? p - c->window + 1 : 0;
    const int n_cmp = a->src >= 0 ? st->n_sel[row] : 0;
    int k = 0;
    for (int64_t q = lo; q <= p; q++)
        keys[k++] = q < sq->p0 ? ds_seq_win_row(sq->seq, a->layer, q) : st->kv + (size_t)(sq->row0 + (q - sq->p0)) * dh;
    for (int i = 0; i < n_cmp; i++) keys[k++] = ds_seq_ckv_row(sq->seq, a->src, st->sel[(size_t)row * c->index_topk + i]);
    return k;
}

/* One (row, head): o[row][h] = bf16(Σ p_k·k), then inverse RoPE at the row's position. */
static void attn_row_head(attn_ctx *a, int row, int h, int thread) {
    ds_step *st = a->st;
    const ds_config *c = st->c;
    const int H = c->n_heads, dh = c->head_dim, rd = c->rope_head_dim;
    const ds_bf16 **keys = a->keys + (size_t)thread * a->max_keys;
    const int nk = row_keys(a, row, keys);
    float *sc = a->sc + (size_t)thread * a->max_keys;
    double *acc = memset(a->acc + (size_t)thread * dh, 0, sizeof(double) * (size_t)dh);

    const ds_bf16 *qh = st->q + ((size_t)row * a->Hl + (h - a->h0)) * dh;
    const float sink = a->w->attn_sink[h];
    ds_bf16 *oh = st->o + ((size_t)row * H + h) * dh;
    const float *cs = (c->roles[a->layer].ratio > 0 ? st->cs_cmp : st->cs_swa) + (size_t)row * rd;
    if (st->m->numerics == DS_NUMERICS_FAST) {
        /* the fp32 accumulator lives in the float64 one's storage (dh doubles hold 2·dh floats) */
        ds_attn_head_fast(qh, keys, nk, sink, a->scale, dh, sc, (float *)acc, oh);
        ds_rope_apply_fast(oh, dh, rd, cs, 1);
        return;
    }
    float mx = sink;
    for (int i = 0; i < nk; i++) {
        float d = (float)ds_dot_bb(qh, keys[i], dh);
        sc[i] = d * a->scale;
        if (sc[i] > mx) mx = sc[i];
    }
    double den = 0;
    for (int i = 0; i < nk; i++) {
        sc[i] = (float)exp((double)sc[i] - (double)mx);
        den += sc[i];
    }
    float es = (float)exp((double)sink - (double)mx);
    float fden = (float)(den + (double)es);
    for (int i = 0; i < nk; i++) {
        ds_axpy_bf16(acc, sc[i] / fden, keys[i], dh);
    }
    for (int d = 0; d < dh; d++) oh[d] = ds_f32_to_bf16((float)acc[d]);
    ds_rope_apply(oh, dh, rd, cs, 1);
}

static void attn_task(void *vctx, int task, int thread) {
    attn_ctx *a = vctx;
    attn_row_head(a, task / a->Hl, a->h0 + task % a->Hl, thread);
}

/* Fast tier, one (row, group of up to DS_ATTN_QB heads): every head of a row attends the same key
 * list (one latent KV per position), so the block's queries share each key load and every query
 * takes every key — nothing of the tile is wasted; each head keeps the bits of its per-head core. */
static void attn_block_task(void *vctx, int task, int thread) {
    attn_ctx *a = vctx;
    const ds_step *st = a->st;
    const ds_config *c = st->c;
    const int dh = c->head_dim, rd = c->rope_head_dim, QB = DS_ATTN_QB;
    const int row = task / a->head_groups, hg = a->h0 + (task % a->head_groups) * QB;
    const int B = a->h0 + a->Hl - hg < QB ? a->h0 + a->Hl - hg : QB;
    const ds_bf16 **keys = a->keys + (size_t)thread * a->max_keys;
    ds_attn_block b = {.B = B, .dh = dh, .scale = a->scale, .keys = keys, .dense = 1};
    b.nu = row_keys(a, row, keys);
    for (int r = 0; r < B; r++) {
        b.nk[r] = b.nu;
        b.sink[r] = a->w->attn_sink[hg + r];
        b.q[r] = st->q + ((size_t)row * a->Hl + (hg + r - a->h0)) * dh;
        b.o[r] = st->o + ((size_t)row * c->n_heads + hg + r) * dh;
    }
    ds_attn_block_fast(&b, &a->tile[thread]);
    const float *cs = (c->roles[a->layer].ratio > 0 ? st->cs_cmp : st->cs_swa) + (size_t)row * rd;
    for (int r = 0; r < B; r++) ds_rope_apply_fast(b.o[r], dh, rd, cs, 1);
}

/* Carves the per-thread tile scratch (a block's keys are one row's list: max_keys at most). */
static void tile_setup(attn_ctx *a, int T) {
    ds_step *st = a->st;
    const int dh = st->c->head_dim;
    const size_t U = (size_t)a->max_keys, QB = DS_ATTN_QB;
    a->head_groups = (a->Hl + DS_ATTN_QB - 1) / DS_ATTN_QB;
    a->tile = DS_ARENA_NEW(st->arena, ds_attn_scratch, T);
    for (int t = 0; t < T; t++) {
        /* dense blocks only (attn_block_task): no sparse weight or mask tables */
        a->tile[t] = (ds_attn_scratch){.max_keys = a->max_keys,
                                      .sc = DS_ARENA_NEW(st->arena, float, QB * U),
                                      .qf = DS_ARENA_NEW(st->arena, float, QB * (size_t)dh),
                                      .acc = DS_ARENA_NEW(st->arena, float, QB * (size_t)dh)};
    }
}

/* rmsnorm(bf16(linear)) for every row, rows of length n, written to dst. */
static void norm_rows(ds_step *st, const float *lin, int N, int n, const float *w, ds_bf16 *dst) {
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    ds_bf16 *tmp = DS_ARENA_NEW(st->arena, ds_bf16, n);
    for (int r = 0; r < N; r++) {
        ds_round_rows_bf16(lin + (size_t)r * n, (size_t)n, tmp);
        ds_rmsnorm_t(st->m->numerics, tmp, w, n, st->c->norm_eps, dst + (size_t)r * n);
    }
    ds_arena_release(st->arena, mk);
}

static void persist_window(ds_step *st, int layer) {
    const int dh = st->c->head_dim;
    for (int i = 0; i < st->n_seqs; i++) {
        const ds_step_seq *sq = &st->ss[i];
        int64_t from = ds_seq_win_persist_from(sq->seq, sq->p0 + sq->n);
        for (int j = 0; j < sq->n; j++) {
            int64_t p = sq->p0 + j;
            if (p < from) continue;
            memcpy(ds_seq_win_row(sq->seq, layer, p), st->kv + (size_t)(sq->row0 + j) * dh, sizeof(ds_bf16) * (size_t)dh);
        }
    }
}

void ds_attention_layer(ds_step *st, int l) {
    const ds_config *c = st->c;
    const ds_layer_weights *w = &st->m->layers[l];
    const ds_layer_role *role = &c->roles[l];
    const int N = st->N, H = c->n_heads, dh = c->head_dim, rd = c->rope_head_dim, ql = c->q_lora_rank;

    /* wq_a and wkv read the same rows u: when both are quantized they share one quantization of
     * u and one pool dispatch (the outputs equal two separate forwards; the quantization is the
     * one ds_linear_forward computes).  Their fp32 outputs sit side by side in ftmp. */
    float *fq = st->ftmp, *fkv = st->ftmp + (size_t)N * ql;
    int quant = (w->wq_a.fmt == DS_LIN_W8A8 || w->wq_a.fmt == DS_LIN_W4A8) &&
                (w->wkv.fmt == DS_LIN_W8A8 || w->wkv.fmt == DS_LIN_W4A8);
    if ((size_t)ql + (size_t)dh > st->ftmp_cols) fkv = st->ftmp, quant = 0;  /* no room: one at a time */
    ds_prof_push(DS_PH_ATTN_QLIN);
    if (quant) {
        const int D = c->dim;
        ds_arena_mark mk = ds_arena_mark_get(st->arena);
        int8_t *uq = DS_ARENA_NEW(st->arena, int8_t, (size_t)N * D);
        float *us = DS_ARENA_NEW(st->arena, float, N);
        ds_quantize_rows(st->u, N, D, uq, us);
        ds_linear_job jobs[2] = {{&w->wq_a, uq, us, N, fq}, {&w->wkv, uq, us, N, fkv}};
        ds_linear_forward_q_many(jobs, 2);
        ds_arena_release(st->arena, mk);
    } else {
        ds_linear_forward(&w->wq_a, st->u, N, fq);
        if (fkv == fq) norm_rows(st, fq, N, ql, w->q_norm, st->qr);
        ds_linear_forward(&w->wkv, st->u, N, fkv);
    }
    ds_prof_pop();
    /* window key: kv = rmsnorm(wkv·u) with RoPE */
    ds_prof_push(DS_PH_ATTN_NORM);
    norm_rows(st, fkv, N, dh, w->kv_norm, st->kv);
    const float *cs_all = role->ratio > 0 ? st->cs_cmp : st->cs_swa;
    for (int r = 0; r < N; r++) ds_rope_apply_t(st->m->numerics, st->kv + (size_t)r * dh, dh, rd, cs_all + (size_t)r * rd, 0);
    /* queries: qr = rmsnorm(wq_a·u), q = wq_b·qr with RoPE on each head's tail */
    if (fkv != fq) norm_rows(st, fq, N, ql, w->q_norm, st->qr);
    /* tensor parallel (dist/dist.h): this rank's heads and output groups only; wq_b holds their rows */
    const ds_shard *sh = &st->m->shard;
    const int split = sh->size > 1 && l < c->n_layers;
    const int h0 = split ? sh->h0 : 0, Hl = split ? sh->h1 - sh->h0 : H;
    const int g0 = split ? sh->g0 : 0, g1 = split ? sh->g1 : c->o_groups;
    ds_prof_push(DS_PH_ATTN_QLIN);
    if (Hl > 0) ds_linear_bf16(&w->wq_b, st->qr, N, st->ftmp, st->q);
    ds_prof_pop();
    for (int r = 0; r < N; r++)
        for (int h = 0; h < Hl; h++) ds_rope_apply_t(st->m->numerics, st->q + ((size_t)r * Hl + h) * dh, dh, rd, cs_all + (size_t)r * rd, 0);

    /* compressed keys: a FULL layer writes its new entries and index keys first, then the index
     * sources select; REUSE layers keep the selection of their index source (already in st->sel) */
    ds_prof_pop();
    int src = -1;
    if (role->ratio > 0) {
        ds_prof_push(DS_PH_COMPRESSOR);
        if (role->role == DS_ROLE_FULL) ds_compressor_run(st, l);
        ds_prof_pop();
        ds_prof_push(DS_PH_INDEXER);
        if (role->role == DS_ROLE_FULL || role->role == DS_ROLE_REINDEX) ds_indexer_run(st, l);
        ds_prof_pop();
        src = st->ss[0].seq->pools->lay.src_of_layer[role->kv_src];
    }

    attn_ctx a = {.st = st, .layer = l, .w = w, .src = src, .scale = (float)(1.0 / sqrt((double)dh)),
                  .max_keys = c->window + (src >= 0 ? c->index_topk : 0), .h0 = h0, .Hl = Hl};
    ds_prof_push(DS_PH_ATTN_CORE);
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    const int T = ds_pool_threads();
    a.keys = DS_ARENA_NEW(st->arena, const ds_bf16 *, (size_t)T * a.max_keys);
    a.sc = DS_ARENA_NEW(st->arena, float, (size_t)T * a.max_keys);
    a.acc = DS_ARENA_NEW(st->arena, double, (size_t)T * dh);
    /* the fast tier runs blocks of a row's heads when the head dim fits the tiles (a multiple of 32) */
    const int tiled = st->m->numerics == DS_NUMERICS_FAST && dh % 32 == 0;
    if (tiled && Hl > 0) tile_setup(&a, T);
    if (Hl > 0) {
        if (tiled) ds_pool_run(N * a.head_groups, attn_block_task, &a);
        else ds_pool_run(N * Hl, attn_task, &a);
    }
    ds_arena_release(st->arena, mk);
    persist_window(st, l);
    ds_prof_pop();
    ds_prof_push(DS_PH_ATTN_OUT);

    /* output: z[g] = wo_a[g]·o[g] per group, out = wo_b·bf16(z) */
    const int G = c->o_groups, gin = H * dh / G, ol = c->o_lora_rank;
    for (int g = g0; g < g1; g++) {
        for (int r = 0; r < N; r++)
            memcpy(st->grp + (size_t)r * gin, st->o + (size_t)r * H * dh + (size_t)g * gin, sizeof(ds_bf16) * (size_t)gin);
        ds_linear_forward(&w->wo_a[g], st->grp, N, st->ftmp);
        for (int r = 0; r < N; r++)
            ds_round_rows_bf16(st->ftmp + (size_t)r * ol, (size_t)ol, st->z + (size_t)r * G * ol + (size_t)g * ol);
    }
    if (split) {
        /* every rank gets all of z (groups gathered, not summed), computes its wo_b rows, and the
         * rows are gathered: each value is the single-process one, so R never changes a bit */
        ds_dist_gather_split(NULL, st->z, N, G, 1, ol, sizeof(ds_bf16));
        if (w->wo_b.out > 0 && sh->d1 > sh->d0) ds_linear_forward(&w->wo_b, st->z, N, st->ftmp);
        ds_dist_gather_split(st->ftmp, st->ftmp, N, c->dim, 16, 1, sizeof(float));
    } else {
        ds_linear_forward(&w->wo_b, st->z, N, st->ftmp);
    }
    ds_probe_bf16(st->m, st->ftmp, (size_t)N * c->dim);
    ds_round_rows_bf16(st->ftmp, (size_t)N * c->dim, st->y);
    ds_prof_pop();
}
