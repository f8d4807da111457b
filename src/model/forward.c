/* The forward pass of one (batched) step (MODEL.md §2.1–§2.3, §2.11): embedding and expansion into
 * HC copies, per layer the optional Engram, the attention site and the FFN site with the lagged
 * pre-mix, then the final collapse, norm and head for the rows that need logits.
 *
 * Why the step is validated and its pages reserved before any computation: a step must either
 * happen completely or leave every sequence as it was (the engine retries or preempts), so all
 * argument checks and page allocations come first, and sequence bookkeeping (tokens, length,
 * window retention) is committed only at the end.  Per-row work (mixes, norms, collapse, expand)
 * runs as pool tasks over rows; sublayers see all rows of the batch at once. */
#include "model/forward.h"
#include "model/draft.h"
#include "model/head_screen.h"
#include "model/ops.h"
#include "model/fast_ops.h"
#include "base/threadpool.h"
#include "base/phase_prof.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct site_ctx {
    ds_step *st;
    const ds_hc_params *hp;
    const float *norm;
    float *dots;                  /* [N][(2+HC)·HC] mix dot products */
    ds_bf16 *tmp;                 /* [N][D] collapsed rows before the norm */
} site_ctx;

/* Exact tier: one long dot product of the mixes, task = row · (2+HC)·HC + i. */
static void mix_dot_task(void *vctx, int t, int thread) {
    (void)thread;
    site_ctx *s = vctx;
    ds_step *st = s->st;
    const int HC = st->c->hc_mult, D = st->c->dim, nmix = (2 + HC) * HC;
    const int r = t / nmix, i = t % nmix;
    s->dots[t] = ds_hc_mix_dot(s->hp, st->X + (size_t)r * HC * D, i);
}

/* Fast tier: a tile of up to 4 rows x 2 mixes per task (same bits as mix_dot_task's dots).  Tasks
 * run in blocks of MIX_ROW_QUADS row quads; inside a block the mix pair changes slowest, so one pair
 * of weight rows (2 x HC·D fp32, 64 KiB on mini) serves the block's rows from cache while the
 * block's rows (256 KiB) stay in L2.  Row by row, each row re-read every site's whole mix weight
 * (768 KiB on mini) from L3: a 512-row prefill chunk did that 512 times per site. */
#define MIX_ROW_QUADS 4
static void mix_tile_task(void *vctx, int t, int thread) {
    (void)thread;
    site_ctx *s = vctx;
    ds_step *st = s->st;
    const int HC = st->c->hc_mult, D = st->c->dim, nmix = (2 + HC) * HC, mix_pairs = (nmix + 1) / 2;
    const int quads = (st->N + 3) / 4, blk = t / (MIX_ROW_QUADS * mix_pairs), rem = t % (MIX_ROW_QUADS * mix_pairs);
    const int q0 = blk * MIX_ROW_QUADS, nq = DS_MIN(MIX_ROW_QUADS, quads - q0);
    const int r0 = 4 * (q0 + rem % nq), i0 = 2 * (rem / nq);
    ds_hc_mix_dots_fast(s->hp, st->X + (size_t)r0 * HC * D, DS_MIN(4, st->N - r0), i0, DS_MIN(2, nmix - i0),
                        s->dots + (size_t)r0 * nmix);
}

/* Site entry of one row: mixes from X, u = rmsnorm(collapse(X, pre_in)). */
static void site_in_task(void *vctx, int r, int thread) {
    (void)thread;
    site_ctx *s = vctx;
    ds_step *st = s->st;
    const int HC = st->c->hc_mult, D = st->c->dim, nmix = (2 + HC) * HC;
    const ds_bf16 *X = st->X + (size_t)r * HC * D;
    ds_hc_mixes_from_dots_t(st->m->numerics, s->hp, X, s->dots + (size_t)r * nmix, &st->mix[r]);
    ds_bf16 *tmp = s->tmp + (size_t)r * D;
    ds_hc_collapse_t(st->m->numerics, X, st->pre + (size_t)r * HC, HC, D, tmp);
    ds_rmsnorm_t(st->m->numerics, tmp, s->norm, D, st->c->norm_eps, st->u + (size_t)r * D);
}

/* Site exit of one row: X = expand(y, R), and this site's pre becomes the next site's.  The fast
 * tier expands X in place (R is X as the site found it: the sublayer does not write X). */
static void site_out_task(void *vctx, int r, int thread) {
    (void)thread;
    site_ctx *s = vctx;
    ds_step *st = s->st;
    const int HC = st->c->hc_mult, D = st->c->dim;
    const ds_bf16 *R = (st->m->numerics == DS_NUMERICS_FAST ? st->X : st->R) + (size_t)r * HC * D;
    ds_hc_expand_t(st->m->numerics, st->y + (size_t)r * D, R, &st->mix[r], HC, D, st->X + (size_t)r * HC * D);
    memcpy(st->pre + (size_t)r * HC, st->mix[r].pre, sizeof(float) * (size_t)HC);
}

void ds_mhc_site_enter(ds_step *st, const ds_hc_params *hp, const float *norm) {
    const size_t xs = (size_t)st->N * st->c->hc_mult * st->c->dim;
    if (st->m->numerics != DS_NUMERICS_FAST) memcpy(st->R, st->X, sizeof(ds_bf16) * xs);   /* exact: expand needs it */
    const int nmix = (2 + st->c->hc_mult) * st->c->hc_mult;
    site_ctx s = {st, hp, norm, NULL, NULL};
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    s.dots = DS_ARENA_NEW(st->arena, float, (size_t)st->N * nmix);
    s.tmp = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)st->N * st->c->dim);
    if (st->m->numerics == DS_NUMERICS_FAST) ds_pool_run((st->N + 3) / 4 * ((nmix + 1) / 2), mix_tile_task, &s);
    else ds_pool_run(st->N * nmix, mix_dot_task, &s);
    ds_pool_run(st->N, site_in_task, &s);
    ds_arena_release(st->arena, mk);
}

void ds_mhc_site_exit(ds_step *st) {
    site_ctx s = {st, NULL, NULL, NULL, NULL};
    ds_pool_run(st->N, site_out_task, &s);
}

static void run_site(ds_step *st, int l, int ffn) {
    const ds_layer_weights *w = &st->m->layers[l];
    ds_prof_push(DS_PH_MHC);
    ds_mhc_site_enter(st, ffn ? &w->hc_ffn : &w->hc_attn, ffn ? w->ffn_norm : w->attn_norm);
    ds_prof_pop();
    if (ffn) ds_moe_layer(st, l);
    else ds_attention_layer(st, l);
    ds_prof_push(DS_PH_MHC);
    ds_mhc_site_exit(st);
    ds_prof_pop();
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static int step_alloc(ds_step *st) {
    const ds_config *c = st->c;
    const size_t N = (size_t)st->N, HC = (size_t)c->hc_mult, D = (size_t)c->dim, dh = (size_t)c->head_dim;
    const size_t H = (size_t)c->n_heads, rd = (size_t)c->rope_head_dim;
    size_t cols = max_sz((size_t)c->q_lora_rank, H * dh);
    cols = max_sz(cols, (size_t)c->index_n_heads * (size_t)c->index_head_dim);
    cols = max_sz(cols, max_sz((size_t)c->o_lora_rank, D));
    cols = max_sz(cols, (size_t)c->n_experts);
    st->ftmp_cols = cols;
    ds_arena *ar = st->arena;
    st->row_seq = DS_ARENA_NEW(ar, int, N);
    st->pos = DS_ARENA_NEW(ar, int64_t, N);
    st->X = DS_ARENA_NEW(ar, ds_bf16, N * HC * D);
    st->R = DS_ARENA_NEW(ar, ds_bf16, N * HC * D);
    st->pre = DS_ARENA_NEW(ar, float, N * HC);
    st->mix = DS_ARENA_NEW(ar, ds_hc_mix, N);
    st->u = DS_ARENA_NEW(ar, ds_bf16, N * D);
    st->y = DS_ARENA_NEW(ar, ds_bf16, N * D);
    st->cs_swa = DS_ARENA_NEW(ar, float, N * rd);
    st->cs_cmp = DS_ARENA_NEW(ar, float, N * rd);
    st->ftmp = DS_ARENA_NEW(ar, float, N * cols);
    st->qr = DS_ARENA_NEW(ar, ds_bf16, N * (size_t)c->q_lora_rank);
    st->q = DS_ARENA_NEW(ar, ds_bf16, N * H * dh);
    st->kv = DS_ARENA_NEW(ar, ds_bf16, N * dh);
    st->o = DS_ARENA_NEW(ar, ds_bf16, N * H * dh);
    st->grp = DS_ARENA_NEW(ar, ds_bf16, N * H * dh / (size_t)c->o_groups);
    st->z = DS_ARENA_NEW(ar, ds_bf16, N * (size_t)c->o_groups * (size_t)c->o_lora_rank);
    size_t K = (size_t)(c->index_topk > 0 ? c->index_topk : 1);
    size_t CB = (size_t)(c->cand_topk_blocks > 0 ? c->cand_topk_blocks : 1);
    st->sel = DS_ARENA_NEW(ar, int32_t, N * K);
    st->n_sel = ds_arena_zalloc(ar, sizeof(int) * N);
    st->cand = DS_ARENA_NEW(ar, int32_t, N * CB);
    st->n_cand = DS_ARENA_NEW(ar, int, N);
    for (size_t r = 0; r < N; r++) st->n_cand[r] = -1;
    size_t ni = (size_t)(c->index_n_heads > 0 ? c->index_n_heads : 1), di = (size_t)(c->index_head_dim > 0 ? c->index_head_dim : 1);
    st->qi = DS_ARENA_NEW(ar, ds_bf16, N * ni * di);
    st->iw = DS_ARENA_NEW(ar, float, N * ni);
    return 0;
}

static int validate(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                    float *const *logits, const int *n_logits, int32_t *const *greedy, ds_error *err) {
    const ds_config *c = &m->cfg;
    if (n_seqs <= 0 || !seqs || !tokens || !n_rows)
        return ds_fail(err, "E_INVALID_ARG", "step: expected at least one sequence, found %d", n_seqs);
    for (int i = 0; i < n_seqs; i++) {
        const ds_seq *s = seqs[i];
        if (!s || s->m != m) return ds_fail(err, "E_INVALID_ARG", "step: sequence %d does not belong to this model", i);
        for (int j = 0; j < i; j++)
            if (seqs[j] == s) return ds_fail(err, "E_INVALID_ARG", "step: sequence %d appears twice in one batch", i);
        if (n_rows[i] < 1) return ds_fail(err, "E_INVALID_ARG", "step: sequence %d: expected n >= 1 rows, found %d", i, n_rows[i]);
        int nl = n_logits ? n_logits[i] : 0;
        if (nl < 0 || nl > n_rows[i])
            return ds_fail(err, "E_INVALID_ARG", "step: sequence %d: expected n_logits in 0..%d, found %d", i, n_rows[i], nl);
        if (nl > 0 && (!logits || !logits[i]) && !(greedy && greedy[i]))
            return ds_fail(err, "E_INVALID_ARG", "step: sequence %d: n_logits %d without a logits buffer", i, nl);
        if (s->len + n_rows[i] > m->max_len)
            return ds_fail(err, "E_CONTEXT_LENGTH", "step: sequence %d: expected at most %lld positions (max model length), "
                           "found %lld", i, (long long)m->max_len, (long long)(s->len + n_rows[i]));
        for (int j = 0; j < n_rows[i]; j++)
            if (tokens[i][j] < 0 || tokens[i][j] >= c->vocab_size)
                return ds_fail(err, "E_TOKEN_ID", "step: sequence %d row %d: expected a token id in 0..%d, found %d", i, j,
                               c->vocab_size - 1, tokens[i][j]);
    }
    return 0;
}


/* The normalized final rows of the sequences `want` selects (their last n_logits[i] rows), in
 * (sequence, row) order, into hn (sized by the caller); returns how many. */
static int final_rows(ds_step *st, const int *n_logits, int want_greedy, int32_t *const *greedy, ds_bf16 *hn,
                      float *const *logits, float **dst, int32_t **gdst, float *gbuf) {
    const ds_model *m = st->m;
    const ds_config *c = st->c;
    const int HC = c->hc_mult, D = c->dim, V = c->vocab_size;
    ds_bf16 *tmp = DS_ARENA_NEW(st->arena, ds_bf16, D);
    int k = 0;
    for (int i = 0; i < st->n_seqs; i++) {
        const ds_step_seq *sq = &st->ss[i];
        const int nl = n_logits[i];
        const int g = greedy && greedy[i];
        if (want_greedy >= 0 && g != want_greedy) continue;
        for (int j = 0; j < nl; j++, k++) {
            int r = sq->row0 + sq->n - nl + j;
            ds_hc_collapse_t(m->numerics, st->X + (size_t)r * HC * D, st->pre + (size_t)r * HC, HC, D, tmp);
            ds_rmsnorm_t(m->numerics, tmp, m->norm, D, c->norm_eps, hn + (size_t)k * D);
            if (dst) dst[k] = g ? gbuf + (size_t)k * V : logits[i] + (size_t)j * V;
            if (gdst) gdst[k] = g ? greedy[i] + j : NULL;
        }
    }
    return k;
}

/* Rows whose request only wants its greedy id: the head's screen (head_screen.h), same answer as
 * plain greedy sampling of the full row. */
static void compute_greedy(ds_step *st, const int *n_logits, int32_t *const *greedy, const uint8_t *mask, int M) {
    const ds_model *m = st->m;
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    ds_bf16 *hn = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)M * st->c->dim);
    int32_t **gdst = DS_ARENA_NEW(st->arena, int32_t *, M), *ids = DS_ARENA_NEW(st->arena, int32_t, M);
    final_rows(st, n_logits, 1, greedy, hn, NULL, NULL, gdst, NULL);
    ds_head_greedy(&m->head, m->head_screen, hn, M, mask, st->arena, ids);
    for (int k = 0; k < M; k++) *gdst[k] = ids[k];
    ds_arena_release(st->arena, mk);
}

static void compute_logits(ds_step *st, float *const *logits, const int *n_logits, int32_t *const *greedy,
                           const uint8_t *mask) {
    const ds_model *m = st->m;
    const ds_config *c = st->c;
    const int D = c->dim, V = c->vocab_size;
    int M = 0, G = 0;
    for (int i = 0; i < st->n_seqs; i++) {
        const int nl = n_logits ? n_logits[i] : 0;
        if (greedy && greedy[i]) G += nl;
        else M += nl;
    }
    if (!M && !G) return;
    ds_prof_push(DS_PH_HEAD);
    /* a vocabulary split computes every row in full (each rank its share, then one gather for
     * all rows, as every rank runs the same rows); elsewhere greedy rows take the screen */
    const int split = m->shard.size > 1;
    if (G && !split) compute_greedy(st, n_logits, greedy, mask, G);
    if (split) M += G;
    if (!M) {
        ds_prof_pop();
        return;
    }
    ds_bf16 *hn = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)M * D);
    float **dst = DS_ARENA_NEW(st->arena, float *, M), *gbuf = split && G ? DS_ARENA_NEW(st->arena, float, (size_t)M * V) : NULL;
    int32_t **gdst = DS_ARENA_NEW(st->arena, int32_t *, M);
    final_rows(st, n_logits, split ? -1 : 0, greedy, hn, logits, dst, gdst, gbuf);
    const int chunk = 64;
    float *out = DS_ARENA_NEW(st->arena, float, (size_t)(M < chunk ? M : chunk) * V);
    for (int r0 = 0; r0 < M; r0 += chunk) {
        int n = M - r0 < chunk ? M - r0 : chunk;
        /* vocabulary split (dist/dist.h): this rank's rows, then the logits gathered on every rank */
        const ds_linear *hp = m->shard.size > 1 ? &m->head_part : &m->head;
        if (hp->out > 0) ds_linear_forward(hp, hn + (size_t)r0 * D, n, out);
        if (m->shard.size > 1) ds_dist_gather_split(out, out, n, V, 16, 1, sizeof(float));
        for (int j = 0; j < n; j++) memcpy(dst[r0 + j], out + (size_t)j * V, sizeof(float) * (size_t)V);
    }
    for (int k = 0; k < M; k++)
        if (gdst[k]) *gdst[k] = ds_head_pick_full(dst[k], V, mask);
    ds_prof_pop();
}

/* DSpark features (MODEL.md §4): aux[p][t·D + d] = bf16(fp32(Σ_k X[k][d]) · fp32(1/HC)) of the
 * residual entering target layer t, summed over the HC copies in copy order. */
static void capture_aux(ds_step *st, int t, ds_bf16 *const *aux) {
    const int HC = st->c->hc_mult, D = st->c->dim, W = st->c->n_dspark_targets * D;
    const float inv = 1.0f / (float)HC;
    for (int i = 0; i < st->n_seqs; i++) {
        if (!aux[i]) continue;
        for (int j = 0; j < st->ss[i].n; j++) {
            const ds_bf16 *X = st->X + (size_t)(st->ss[i].row0 + j) * HC * D;
            ds_bf16 *dst = aux[i] + (size_t)j * W + (size_t)t * D;
            for (int d = 0; d < D; d++) {
                float sum = 0.0f;
                for (int k = 0; k < HC; k++) sum += ds_bf16_to_f32(X[(size_t)k * D + d]);
                dst[d] = ds_f32_to_bf16(sum * inv);
            }
        }
    }
}

int ds_batch_step(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                  float *const *logits, const int *n_logits, char *errbuf, size_t errlen) {
    return ds_batch_step_aux(m, n_seqs, seqs, tokens, n_rows, logits, n_logits, NULL, errbuf, errlen);
}

int ds_batch_step_aux(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                      float *const *logits, const int *n_logits, ds_bf16 *const *aux, char *errbuf, size_t errlen) {
    return ds_batch_step_greedy(m, n_seqs, seqs, tokens, n_rows, logits, n_logits, aux, NULL, NULL, errbuf, errlen);
}

int ds_batch_step_greedy(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                         float *const *logits, const int *n_logits, ds_bf16 *const *aux, int32_t *const *greedy,
                         const uint8_t *mask, char *errbuf, size_t errlen) {
    ds_error err = {{0}, {0}};
    if (!m) {
        if (errbuf) snprintf(errbuf, errlen, "E_INVALID_ARG: step: no model");
        return -1;
    }
    if (validate(m, n_seqs, seqs, tokens, n_rows, logits, n_logits, greedy, &err) < 0) {
        ds_format_error(&err, errbuf, errlen);
        return -1;
    }
    ds_step_ctx *ctx = ds_step_ctx_acquire(m);
    if (ds_seq_reserve_many_in(&ctx->arena, seqs, n_rows, n_seqs, &err) < 0) {
        ds_step_ctx_release(m, ctx);
        ds_format_error(&err, errbuf, errlen);
        return -1;
    }
    const ds_config *c = &m->cfg;
    ds_step st;
    memset(&st, 0, sizeof st);
    st.m = m;
    st.c = c;
    st.n_seqs = n_seqs;
    st.arena = &ctx->arena;
    st.ss = ds_arena_zalloc(st.arena, sizeof(ds_step_seq) * (size_t)n_seqs);
    for (int i = 0; i < n_seqs; i++) {
        st.ss[i].seq = seqs[i];
        st.ss[i].row0 = st.N;
        st.ss[i].n = n_rows[i];
        st.ss[i].p0 = seqs[i]->len;
        st.ss[i].tok = tokens[i];
        st.N += n_rows[i];
    }
    step_alloc(&st);
    const int HC = c->hc_mult, D = c->dim, rd = c->rope_head_dim;
    for (int i = 0; i < n_seqs; i++)
        for (int j = 0; j < n_rows[i]; j++) {
            int r = st.ss[i].row0 + j;
            st.row_seq[r] = i;
            st.pos[r] = st.ss[i].p0 + j;
            ds_rope_cossin(&m->rope_swa, st.pos[r], st.cs_swa + (size_t)r * rd);
            ds_rope_cossin(&m->rope_cmp, st.pos[r], st.cs_cmp + (size_t)r * rd);
            const ds_bf16 *e = m->embed + (size_t)tokens[i][j] * D;
            for (int k = 0; k < HC; k++) memcpy(st.X + ((size_t)r * HC + k) * D, e, sizeof(ds_bf16) * (size_t)D);
            for (int k = 0; k < HC; k++) st.pre[(size_t)r * HC + k] = k == 0 ? 1.0f : 0.0f;
        }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->roles[l].engram >= 0) {
            ds_prof_push(DS_PH_ENGRAM);
            ds_engram_layer(&st, c->roles[l].engram);
            ds_prof_pop();
        }
        if (aux && c->roles[l].captured >= 0) capture_aux(&st, c->roles[l].captured, aux);
        run_site(&st, l, 0);
        run_site(&st, l, 1);
        if (m->trace) m->trace(m->trace_ctx, l, st.N, st.X);
    }
    compute_logits(&st, logits, n_logits, greedy, mask);
    for (int i = 0; i < n_seqs; i++) ds_seq_commit(seqs[i], tokens[i], n_rows[i]);
    ds_step_ctx_release(m, ctx);
    return 0;
}

int ds_seq_step_greedy(ds_model *m, ds_seq *s, const int32_t *tokens, int n, int32_t *ids, int n_ids, const uint8_t *mask,
                       char *errbuf, size_t errlen) {
    int32_t *const gi[1] = {ids};
    const int32_t *const tk[1] = {tokens};
    int nr[1] = {n}, nl[1] = {n_ids};
    return ds_batch_step_greedy(m, 1, &s, tk, nr, NULL, nl, NULL, gi, mask, errbuf, errlen);
}

int ds_seq_step(ds_model *m, ds_seq *s, const int32_t *tokens, int n, float *logits, int n_logits, char *errbuf,
                size_t errlen) {
    float *const lg[1] = {logits};
    const int32_t *const tk[1] = {tokens};
    int nr[1] = {n}, nl[1] = {n_logits};
    return ds_batch_step(m, 1, &s, tk, nr, lg, nl, errbuf, errlen);
}
