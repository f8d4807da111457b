/* One DSpark draft pass (MODEL.md §4.1): the block [anchor, noise…] through the draft stages with
 * non-causal block attention over the draft ring, the draft head, the serial Markov correction and
 * the confidence head.
 *
 * Why the stages reuse the trunk's ds_step: a draft stage is a V4.1 block (lagged mHC sites, MoE)
 * whose weights sit at m->layers[L + s], so the MoE runs through ds_moe_layer with the draft's own
 * expert counts (a copy of the config), and the hyper-connection mixes through the hc module; only
 * the attention differs.  Its key list for a row is fixed — ring rows of positions
 * max(P−W+1, first ring row) .. P ascending, then the block's own rows 0..B−1 — and the exact tier
 * reduces it in float64 with one rounding (docs/NUMERICS.md "attention"), the fast tier with the
 * trunk's fast per-head core (ds_attn_head_fast: vector dot products in the pair order, keys in list
 * order), so a proposal depends only on the sequence's committed context.  (A copy of that core with
 * strictly sequential fp32 sums made the draft attention latency-bound: ~15% of a draft pass on mini.)
 *
 * Batched passes: ds_draft_propose_many runs the B rows of several sequences as one step (rows
 * s·B..s·B+B−1 belong to sequence s); the linears, the MoE and the hyper-connection sites are
 * row-wise and batch-invariant, and the attention task of a row reads only its own sequence's ring
 * and block, so a batched proposal equals the single one bit for bit.  The site entry/exit use the
 * tier's building blocks (fast tier: fp32 mixes, collapse, norm and rotary), and every temporary
 * comes from the step arena (the per-thread attention scratch included). */
#include "model/draft_internal.h"
#include "model/fast_ops.h"
#include "model/ops.h"
#include "base/threadpool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dattn_ctx {
    ds_step *st;
    const ds_seq *const *seqs;    /* the sequence of row r is seqs[r / B] */
    const ds_layer_weights *w;
    int stage, B, max_nk;
    int64_t *lo, *P;              /* per sequence: ring rows lo..P are keys */
    float scale;
    int fast;
    uint8_t *scratch;             /* per thread: keys, scores and the accumulator */
    size_t scratch_bytes;
} dattn_ctx;

/* Softmax-weighted sum of keys (values = keys) for one (row, head), exact tier. */
static void core_exact(const ds_bf16 *qh, const ds_bf16 *const *keys, int nk, float sink, float scale, int dh, float *sc,
                       double *acc, ds_bf16 *oh) {
    memset(acc, 0, sizeof(double) * (size_t)dh);
    float mx = sink;
    for (int i = 0; i < nk; i++) {
        sc[i] = (float)ds_dot_bb(qh, keys[i], dh) * scale;
        if (sc[i] > mx) mx = sc[i];
    }
    double den = 0;
    for (int i = 0; i < nk; i++) {
        sc[i] = (float)exp((double)sc[i] - (double)mx);
        den += sc[i];
    }
    float fden = (float)(den + (double)(float)exp((double)sink - (double)mx));
    for (int i = 0; i < nk; i++) ds_axpy_bf16(acc, sc[i] / fden, keys[i], dh);
    for (int d = 0; d < dh; d++) oh[d] = ds_f32_to_bf16((float)acc[d]);
}

static void dattn_task(void *vctx, int task, int thread) {
    dattn_ctx *a = vctx;
    ds_step *st = a->st;
    const ds_config *c = st->c;
    const int H = c->n_heads, dh = c->head_dim, rd = c->rope_head_dim, B = a->B;
    const int row = task / H, h = task % H, s = row / B;
    const int64_t lo = a->lo[s], P = a->P[s];
    const int n_ring = P >= lo ? (int)(P - lo + 1) : 0, nk = n_ring + B;
    uint8_t *mem = a->scratch + (size_t)thread * a->scratch_bytes;
    double *acc = (double *)mem;
    const ds_bf16 **keys = (const ds_bf16 **)(mem + sizeof(double) * (size_t)dh);
    float *sc = (float *)(keys + a->max_nk);
    int k = 0;
    for (int64_t q = lo; q <= P; q++) keys[k++] = ds_seq_draft_row(a->seqs[s], a->stage, q);
    for (int j = 0; j < B; j++) keys[k++] = st->kv + ((size_t)s * B + j) * dh;
    const ds_bf16 *qh = st->q + ((size_t)row * H + h) * dh;
    ds_bf16 *oh = st->o + ((size_t)row * H + h) * dh;
    if (a->fast) ds_attn_head_fast(qh, keys, nk, a->w->attn_sink[h], a->scale, dh, sc, (float *)acc, oh);
    else core_exact(qh, keys, nk, a->w->attn_sink[h], a->scale, dh, sc, acc, oh);
    ds_rope_apply_t(st->m->numerics, oh, dh, rd, st->cs_swa + (size_t)row * rd, 1);
}

static void norm_rows(ds_step *st, const float *lin, int n, const float *w, ds_bf16 *dst) {
    ds_bf16 *tmp = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)n);
    for (int r = 0; r < st->N; r++) {
        ds_round_rows_bf16(lin + (size_t)r * n, (size_t)n, tmp);
        ds_rmsnorm_t(st->m->numerics, tmp, w, n, st->c->norm_eps, dst + (size_t)r * n);
    }
}

typedef struct dpass {
    int n, B;
    const ds_seq *const *seqs;
    int64_t *P;                   /* per sequence: the last committed position */
} dpass;

/* MODEL.md §2.6 projections with SWA rope, then the draft key set (§4.1), then wo_a/wo_b. */
static void draft_attention(ds_step *st, const dpass *dp, int stage) {
    const ds_config *c = st->c;
    const ds_numerics nt = st->m->numerics;
    const ds_layer_weights *w = &st->m->layers[c->n_layers + stage];
    const int N = st->N, H = c->n_heads, dh = c->head_dim, rd = c->rope_head_dim, ql = c->q_lora_rank;
    ds_arena_mark mark = ds_arena_mark_get(st->arena);
    ds_linear_forward(&w->wq_a, st->u, N, st->ftmp);
    norm_rows(st, st->ftmp, ql, w->q_norm, st->qr);
    ds_linear_forward(&w->wkv, st->u, N, st->ftmp);
    norm_rows(st, st->ftmp, dh, w->kv_norm, st->kv);
    for (int r = 0; r < N; r++) ds_rope_apply_t(nt, st->kv + (size_t)r * dh, dh, rd, st->cs_swa + (size_t)r * rd, 0);
    ds_linear_bf16(&w->wq_b, st->qr, N, st->ftmp, st->q);
    for (int r = 0; r < N; r++)
        for (int h = 0; h < H; h++) ds_rope_apply_t(nt, st->q + ((size_t)r * H + h) * dh, dh, rd, st->cs_swa + (size_t)r * rd, 0);
    int64_t *lo = DS_ARENA_NEW(st->arena, int64_t, (size_t)dp->n);
    int max_nk = dp->B;
    for (int s = 0; s < dp->n; s++) {
        lo[s] = dp->P[s] - c->window + 1;
        if (lo[s] < dp->seqs[s]->drf_lo) lo[s] = dp->seqs[s]->drf_lo;
        if (lo[s] < 0) lo[s] = 0;
        int nk = (dp->P[s] >= lo[s] ? (int)(dp->P[s] - lo[s] + 1) : 0) + dp->B;
        if (nk > max_nk) max_nk = nk;
    }
    dattn_ctx a = {st, dp->seqs, w, stage, dp->B, max_nk, lo, dp->P, (float)(1.0 / sqrt((double)dh)), nt == DS_NUMERICS_FAST,
                   NULL, 0};
    a.scratch_bytes = (sizeof(double) * (size_t)dh + sizeof(void *) * (size_t)max_nk + sizeof(float) * (size_t)max_nk + 63) &
                      ~(size_t)63;
    a.scratch = ds_arena_alloc(st->arena, a.scratch_bytes * (size_t)ds_pool_threads());
    ds_pool_run(N * H, dattn_task, &a);
    const int G = c->o_groups, gin = H * dh / G, ol = c->o_lora_rank;
    for (int g = 0; g < G; g++) {
        for (int r = 0; r < N; r++)
            memcpy(st->grp + (size_t)r * gin, st->o + (size_t)r * H * dh + (size_t)g * gin, sizeof(ds_bf16) * (size_t)gin);
        ds_linear_forward(&w->wo_a[g], st->grp, N, st->ftmp);
        for (int r = 0; r < N; r++)
            ds_round_rows_bf16(st->ftmp + (size_t)r * ol, (size_t)ol, st->z + (size_t)r * G * ol + (size_t)g * ol);
    }
    ds_linear_forward(&w->wo_b, st->z, N, st->ftmp);
    ds_round_rows_bf16(st->ftmp, (size_t)N * c->dim, st->y);
    ds_arena_release(st->arena, mark);
}

/* One lagged mHC site over every row, the same as the target's (forward.h), around a draft stage. */
static void draft_site(ds_step *st, const dpass *dp, int stage, int ffn) {
    const ds_config *c = st->c;
    const ds_layer_weights *w = &st->m->layers[c->n_layers + stage];
    ds_mhc_site_enter(st, ffn ? &w->hc_ffn : &w->hc_attn, ffn ? w->ffn_norm : w->attn_norm);
    if (ffn) ds_moe_layer(st, c->n_layers + stage);
    else draft_attention(st, dp, stage);
    ds_mhc_site_exit(st);
}

/* Every buffer of the pass comes from the step arena (no allocation on the decode path). */
static void dstep_alloc(ds_step *st, const ds_config *c, int N) {
    const size_t HC = (size_t)c->hc_mult, D = (size_t)c->dim, dh = (size_t)c->head_dim, H = (size_t)c->n_heads;
    size_t cols = (size_t)c->q_lora_rank;
    size_t more[] = {H * dh, (size_t)c->o_lora_rank, D, (size_t)c->n_experts, dh};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) cols = cols > more[i] ? cols : more[i];
    ds_arena *ar = st->arena;
    st->N = N;
    st->ftmp_cols = cols;
    st->X = DS_ARENA_NEW(ar, ds_bf16, N * HC * D);
    st->R = DS_ARENA_NEW(ar, ds_bf16, N * HC * D);
    st->pre = ds_arena_zalloc(ar, sizeof(float) * (size_t)N * HC);
    st->mix = DS_ARENA_NEW(ar, ds_hc_mix, (size_t)N);
    st->u = DS_ARENA_NEW(ar, ds_bf16, N * D);
    st->y = DS_ARENA_NEW(ar, ds_bf16, N * D);
    st->cs_swa = DS_ARENA_NEW(ar, float, (size_t)N * (size_t)c->rope_head_dim);
    st->ftmp = DS_ARENA_NEW(ar, float, N * cols);
    st->qr = DS_ARENA_NEW(ar, ds_bf16, N * (size_t)c->q_lora_rank);
    st->q = DS_ARENA_NEW(ar, ds_bf16, N * H * dh);
    st->kv = DS_ARENA_NEW(ar, ds_bf16, N * dh);
    st->o = DS_ARENA_NEW(ar, ds_bf16, N * H * dh);
    st->grp = DS_ARENA_NEW(ar, ds_bf16, N * H * dh / (size_t)c->o_groups);
    st->z = DS_ARENA_NEW(ar, ds_bf16, N * (size_t)c->o_groups * (size_t)c->o_lora_rank);
}

int ds_draft_check(const ds_model *m, const ds_seq *s, int32_t anchor, ds_error *err) {
    const ds_draft *d = m ? m->draft : NULL;
    if (!d) return ds_fail(err, "E_INVALID_ARG", "draft: the model has no draft loaded");
    const ds_config *c = &m->cfg;
    if (anchor < 0 || anchor >= c->vocab_size)
        return ds_fail(err, "E_TOKEN_ID", "draft: expected an anchor id in 0..%d, found %d", c->vocab_size - 1, anchor);
    if (s->len < 1 || s->drf_hi != s->len)
        return ds_fail(err, "E_DRAFT_STALE", "draft: expected draft rings up to the processed length %lld, found them up to %lld",
                       (long long)s->len, (long long)s->drf_hi);
    if (s->len + d->block > m->max_len)
        return ds_fail(err, "E_CONTEXT_LENGTH", "draft: block at positions %lld..%lld exceeds the max model length %lld",
                       (long long)s->len, (long long)(s->len + d->block - 1), (long long)m->max_len);
    return 0;
}

int ds_draft_propose_many(ds_model *m, int n, const ds_seq *const *seqs, const int32_t *anchors, ds_draft_pick_fn pick,
                          void *const *pick_ctx, const uint8_t *greedy_mask, int32_t *drafts, float *logits, float *conf,
                          ds_error *err) {
    if (n <= 0) return 0;
    for (int s = 0; s < n; s++)
        if (ds_draft_check(m, seqs[s], anchors[s], err) < 0) return -1;
    const ds_draft *d = m->draft;
    const ds_config *c = &m->cfg;
    const int B = d->block, D = c->dim, HC = c->hc_mult, rd = c->rope_head_dim;
    ds_step st;
    memset(&st, 0, sizeof st);
    st.m = m;
    st.c = &d->cfg;
    ds_step_ctx *ctx = ds_step_ctx_acquire(m);
    st.arena = &ctx->arena;
    dstep_alloc(&st, &d->cfg, n * B);
    dpass dp = {n, B, seqs, DS_ARENA_NEW(st.arena, int64_t, (size_t)n)};
    for (int s = 0; s < n; s++) {
        dp.P[s] = seqs[s]->len - 1;
        for (int i = 0; i < B; i++) {
            const size_t row = (size_t)s * B + i;
            int32_t id = i == 0 ? anchors[s] : c->dspark_noise_id;
            const ds_bf16 *e = d->embed + (size_t)id * D;
            for (int k = 0; k < HC; k++) memcpy(st.X + (row * HC + k) * D, e, sizeof(ds_bf16) * (size_t)D);
            st.pre[row * HC] = 1.0f;
            ds_rope_cossin(&m->rope_swa, dp.P[s] + 1 + i, st.cs_swa + row * rd);
        }
    }
    for (int stage = 0; stage < d->n_stages; stage++) {
        draft_site(&st, &dp, stage, 0);
        draft_site(&st, &dp, stage, 1);
    }
    ds_draft_heads(m, &st, n, anchors, pick, pick_ctx, greedy_mask, drafts, logits, conf);
    ds_step_ctx_release(m, ctx);
    return 0;
}

int ds_draft_propose(ds_model *m, const ds_seq *s, int32_t anchor, ds_draft_pick_fn pick, void *pick_ctx,
                     int32_t *drafts, float *logits, float *conf, ds_error *err) {
    void *const pc[1] = {pick_ctx};
    return ds_draft_propose_many(m, 1, &s, &anchor, pick, pc, NULL, drafts, logits, conf, err);
}
