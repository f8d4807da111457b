/* One DSpark draft pass (MODEL.md §4.1): the block [anchor, noise…] through the draft stages with
 * non-causal block attention over the draft ring, the draft head, the serial Markov correction and
 * the confidence head.
 *
 * Why the stages reuse the trunk's ds_step: a draft stage is a V4.1 block (lagged mHC sites, MoE)
 * whose weights sit at m->layers[L + s], so the MoE runs through ds_moe_layer with the draft's own
 * expert counts (a copy of the config), and the hyper-connection mixes through the hc module; only
 * the attention differs.  Its key list for a row is fixed — ring rows of positions
 * max(P−W+1, first ring row) .. P ascending, then the block's own rows 0..B−1 — and the exact tier
 * reduces it in float64 with one rounding (docs/NUMERICS.md "attention"), the fast tier in fp32 in
 * the same order, so a proposal depends only on the sequence's committed context. */
#include "model/draft.h"
#include "model/forward.h"
#include "model/ops.h"
#include "base/threadpool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dattn_ctx {
    ds_step *st;
    const ds_seq *seq;
    const ds_layer_weights *w;
    int stage;
    int64_t lo, P;                /* ring rows lo..P are keys */
    float scale;
    int fast;
} dattn_ctx;

/* Softmax-weighted sum of keys (values = keys) for one (row, head), exact tier. */
static void core_exact(const ds_bf16 *qh, const ds_bf16 *const *keys, int nk, float sink, float scale, int dh, float *sc,
                       ds_bf16 *oh) {
    double *acc = calloc((size_t)dh, sizeof(double));
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
    free(acc);
}

/* The same in fp32, one fixed order (fast tier). */
static void core_fast(const ds_bf16 *qh, const ds_bf16 *const *keys, int nk, float sink, float scale, int dh, float *sc,
                      ds_bf16 *oh) {
    float *acc = calloc((size_t)dh, sizeof(float));
    float mx = sink;
    for (int i = 0; i < nk; i++) {
        float d = 0.0f;
        for (int j = 0; j < dh; j++) d += ds_bf16_to_f32(qh[j]) * ds_bf16_to_f32(keys[i][j]);
        sc[i] = d * scale;
        if (sc[i] > mx) mx = sc[i];
    }
    float den = 0.0f;
    for (int i = 0; i < nk; i++) {
        sc[i] = expf(sc[i] - mx);
        den += sc[i];
    }
    den += expf(sink - mx);
    for (int i = 0; i < nk; i++) {
        float p = sc[i] / den;
        for (int j = 0; j < dh; j++) acc[j] += p * ds_bf16_to_f32(keys[i][j]);
    }
    for (int d = 0; d < dh; d++) oh[d] = ds_f32_to_bf16(acc[d]);
    free(acc);
}

static void dattn_task(void *vctx, int task, int thread) {
    (void)thread;
    dattn_ctx *a = vctx;
    ds_step *st = a->st;
    const ds_config *c = st->c;
    const int H = c->n_heads, dh = c->head_dim, rd = c->rope_head_dim, B = st->N;
    const int row = task / H, h = task % H;
    const int n_ring = a->P >= a->lo ? (int)(a->P - a->lo + 1) : 0, nk = n_ring + B;
    const ds_bf16 **keys = malloc(sizeof(*keys) * (size_t)nk);
    float *sc = malloc(sizeof(float) * (size_t)nk);
    int k = 0;
    for (int64_t q = a->lo; q <= a->P; q++) keys[k++] = ds_seq_draft_row(a->seq, a->stage, q);
    for (int j = 0; j < B; j++) keys[k++] = st->kv + (size_t)j * dh;
    const ds_bf16 *qh = st->q + ((size_t)row * H + h) * dh;
    ds_bf16 *oh = st->o + ((size_t)row * H + h) * dh;
    if (a->fast) core_fast(qh, keys, nk, a->w->attn_sink[h], a->scale, dh, sc, oh);
    else core_exact(qh, keys, nk, a->w->attn_sink[h], a->scale, dh, sc, oh);
    ds_rope_apply(oh, dh, rd, st->cs_swa + (size_t)row * rd, 1);
    free(keys);
    free(sc);
}

static void norm_rows(const ds_config *c, const float *lin, int N, int n, const float *w, ds_bf16 *dst) {
    ds_bf16 *tmp = malloc(sizeof(ds_bf16) * (size_t)n);
    for (int r = 0; r < N; r++) {
        ds_round_rows_bf16(lin + (size_t)r * n, (size_t)n, tmp);
        ds_rmsnorm_bf16(tmp, w, n, c->norm_eps, dst + (size_t)r * n);
    }
    free(tmp);
}

/* MODEL.md §2.6 projections with SWA rope, then the draft key set (§4.1), then wo_a/wo_b. */
static void draft_attention(ds_step *st, const ds_seq *seq, int stage, int64_t P) {
    const ds_config *c = st->c;
    const ds_layer_weights *w = &st->m->layers[c->n_layers + stage];
    const int N = st->N, H = c->n_heads, dh = c->head_dim, rd = c->rope_head_dim, ql = c->q_lora_rank;
    ds_linear_forward(&w->wq_a, st->u, N, st->ftmp);
    norm_rows(c, st->ftmp, N, ql, w->q_norm, st->qr);
    ds_linear_forward(&w->wkv, st->u, N, st->ftmp);
    norm_rows(c, st->ftmp, N, dh, w->kv_norm, st->kv);
    for (int r = 0; r < N; r++) ds_rope_apply(st->kv + (size_t)r * dh, dh, rd, st->cs_swa + (size_t)r * rd, 0);
    ds_linear_bf16(&w->wq_b, st->qr, N, st->ftmp, st->q);
    for (int r = 0; r < N; r++)
        for (int h = 0; h < H; h++) ds_rope_apply(st->q + ((size_t)r * H + h) * dh, dh, rd, st->cs_swa + (size_t)r * rd, 0);
    int64_t lo = P - c->window + 1;
    if (lo < seq->drf_lo) lo = seq->drf_lo;
    if (lo < 0) lo = 0;
    dattn_ctx a = {st, seq, w, stage, lo, P, (float)(1.0 / sqrt((double)dh)), st->m->numerics == DS_NUMERICS_FAST};
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
}

/* One lagged mHC site over every row (as forward.c's run_site): u from X and the previous pre,
 * the sublayer, then X = expand(y, R) and pre = this site's pre. */
static void draft_site(ds_step *st, const ds_seq *seq, int stage, int ffn, int64_t P) {
    const ds_config *c = st->c;
    const int HC = c->hc_mult, D = c->dim, N = st->N;
    const ds_layer_weights *w = &st->m->layers[c->n_layers + stage];
    const ds_hc_params *hp = ffn ? &w->hc_ffn : &w->hc_attn;
    memcpy(st->R, st->X, sizeof(ds_bf16) * (size_t)N * HC * D);
    ds_bf16 *tmp = malloc(sizeof(ds_bf16) * (size_t)D);
    for (int r = 0; r < N; r++) {
        const ds_bf16 *X = st->X + (size_t)r * HC * D;
        ds_hc_mixes(hp, X, &st->mix[r]);
        ds_hc_collapse(X, st->pre + (size_t)r * HC, HC, D, tmp);
        ds_rmsnorm_bf16(tmp, ffn ? w->ffn_norm : w->attn_norm, D, c->norm_eps, st->u + (size_t)r * D);
    }
    free(tmp);
    if (ffn) ds_moe_layer(st, c->n_layers + stage);
    else draft_attention(st, seq, stage, P);
    for (int r = 0; r < N; r++) {
        ds_hc_expand(st->y + (size_t)r * D, st->R + (size_t)r * HC * D, &st->mix[r], HC, D, st->X + (size_t)r * HC * D);
        memcpy(st->pre + (size_t)r * HC, st->mix[r].pre, sizeof(float) * (size_t)HC);
    }
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

/* conf = proj · fp32(concat(hid, me)): float64 with one rounding (exact), fp32 in order (fast). */
static float confidence(const ds_draft *d, const ds_bf16 *hid, const ds_bf16 *me, int D, int fast) {
    if (fast) {
        float s = 0.0f;
        for (int j = 0; j < D; j++) s += d->conf_proj[j] * ds_bf16_to_f32(hid[j]);
        for (int j = 0; j < d->rank; j++) s += d->conf_proj[D + j] * ds_bf16_to_f32(me[j]);
        return s;
    }
    return (float)(ds_dot_fb(d->conf_proj, hid, D) + ds_dot_fb(d->conf_proj + D, me, d->rank));
}

/* Greedy proposal: argmax, ties to the lower id, never the noise token (MODEL.md §7.3). */
static int32_t pick_greedy(const float *logits, int V, int32_t noise) {
    int32_t best = noise == 0 ? 1 : 0;
    for (int v = best + 1; v < V; v++)
        if (v != noise && logits[v] > logits[best]) best = v;
    return best;
}

/* The head, the serial Markov correction and the confidence head of §4.1. */
static void draft_heads(ds_model *m, const ds_step *st, ds_draft_pick_fn pick, void *pick_ctx, int32_t anchor,
                        int32_t *drafts, float *logits, float *conf) {
    const ds_draft *d = m->draft;
    const ds_config *c = &m->cfg;
    const int B = d->block, D = c->dim, HC = c->hc_mult, V = c->vocab_size, r = d->rank;
    ds_bf16 *hid = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)B * D), *hn = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)B * D);
    for (int i = 0; i < B; i++) {
        ds_hc_collapse(st->X + (size_t)i * HC * D, st->pre + (size_t)i * HC, HC, D, hid + (size_t)i * D);
        ds_rmsnorm_bf16(hid + (size_t)i * D, d->norm, D, c->norm_eps, hn + (size_t)i * D);
    }
    float *base = DS_ARENA_NEW(st->arena, float, (size_t)B * V), *mk = DS_ARENA_NEW(st->arena, float, (size_t)V);
    ds_linear_forward(&d->head, hn, B, base);
    int32_t prev = anchor;
    for (int i = 0; i < B; i++) {
        const ds_bf16 *me = d->markov_embed + (size_t)prev * r;
        ds_linear_forward(&d->markov_head, me, 1, mk);
        float *li = base + (size_t)i * V;
        for (int v = 0; v < V; v++) li[v] = li[v] + mk[v];
        int32_t t = pick ? pick(pick_ctx, i, li) : pick_greedy(li, V, c->dspark_noise_id);
        drafts[i] = t;
        if (conf) conf[i] = confidence(d, hid + (size_t)i * D, me, D, m->numerics == DS_NUMERICS_FAST);
        if (logits) memcpy(logits + (size_t)i * V, li, sizeof(float) * (size_t)V);
        prev = t;
    }
}

int ds_draft_propose(ds_model *m, const ds_seq *s, int32_t anchor, ds_draft_pick_fn pick, void *pick_ctx,
                     int32_t *drafts, float *logits, float *conf, ds_error *err) {
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
    const int B = d->block, D = c->dim, HC = c->hc_mult, rd = c->rope_head_dim;
    const int64_t P = s->len - 1;
    ds_step st;
    memset(&st, 0, sizeof st);
    st.m = m;
    st.c = &d->cfg;
    ds_step_ctx *ctx = ds_step_ctx_acquire(m);
    st.arena = &ctx->arena;
    dstep_alloc(&st, &d->cfg, B);
    for (int i = 0; i < B; i++) {
        int32_t id = i == 0 ? anchor : c->dspark_noise_id;
        const ds_bf16 *e = d->embed + (size_t)id * D;
        for (int k = 0; k < HC; k++) memcpy(st.X + ((size_t)i * HC + k) * D, e, sizeof(ds_bf16) * (size_t)D);
        st.pre[(size_t)i * HC] = 1.0f;
        ds_rope_cossin(&m->rope_swa, P + 1 + i, st.cs_swa + (size_t)i * rd);
    }
    for (int stage = 0; stage < d->n_stages; stage++) {
        draft_site(&st, s, stage, 0, P);
        draft_site(&st, s, stage, 1, P);
    }
    draft_heads(m, &st, pick, pick_ctx, anchor, drafts, logits, conf);
    ds_step_ctx_release(m, ctx);
    return 0;
}
