/* DSpark draft: loading (CHECKPOINT.md §11, MODEL.md §3 item 2, §4) and the draft rings in DRAFT
 * pages (SERVING.md §4.2–§4.3).
 *
 * Why the rings are block tables like the other KV kinds: a ring row is addressed by absolute
 * position (page of block p/bs, row p mod bs), so a rollback is a length change, preemption frees
 * pages through the engine's allocator, and nothing is copied.  Only committed positions are ever
 * written (the engine calls ds_draft_commit with the aux rows of accepted verify rows), and only
 * the pages of blocks intersecting the last W written positions are kept.
 *
 * The draft stages are bound as ordinary V4.1 blocks at m->layers[L + s] (ratio 0, the draft's own
 * expert count), so the MoE and the hyper-connection code of the trunk run them unchanged; their
 * attention differs (ring + non-causal block keys) and lives in draft_fwd.c. */
#include "model/draft_internal.h"
#include "model/ops.h"
#include "model/fast_ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int ds_draft_aux_width(const ds_model *m) {
    return m && m->draft ? m->draft->n_targets * m->cfg.dim : 0;
}

/* A draft that cannot be used: an error when it was required, otherwise an ERROR line (the
 * configuration echo reports speculation OFF) and no draft. */
static int draft_unavailable(int required, const char *reason, ds_error *err) {
    if (required) return ds_fail(err, "E_DRAFT_UNAVAILABLE", "speculation was requested, but the draft is unavailable: %s", reason);
    ds_log(DS_LOG_ERROR, "DSpark draft unavailable: %s; speculation disabled", reason);
    return 0;
}

static int bind_vocab(ds_model *m, ds_draft *d, ds_error *err) {
    const ds_config *c = &m->cfg;
    char hname[64];
    snprintf(hname, sizeof hname, "mtp.%d.head", c->n_mtp_layers - 1);
    char hw[80];
    snprintf(hw, sizeof hw, "%s.weight", hname);
    const ds_tensor *e = ds_ckpt_tensor(m->ckpt, "mtp.0.embed.weight");
    const ds_tensor *h = ds_ckpt_tensor(m->ckpt, hw);
    if (!e != !h)
        return ds_fail(err, "E_DRAFT_VOCAB_MISSING", "%s: expected both mtp.0.embed.weight and %s, found only %s", m->dir, hw,
                       e ? "mtp.0.embed.weight" : hw);
    if (!e) {   /* shared vocabulary: legal only without rotation (the loader refused the other case) */
        d->embed = m->embed;
        d->head = m->head;
        d->own_vocab = 0;
        return 0;
    }
    if (e->dtype != DS_DT_BF16 || e->ndim != 2 || e->shape[0] != c->vocab_size || e->shape[1] != c->dim)
        return ds_fail(err, "E_DRAFT_VOCAB", "%s: mtp.0.embed.weight: expected BF16 [%d, %d] (a W8A8 draft vocabulary is not "
                       "supported by this build), found %s with %d dimensions", m->dir, c->vocab_size, c->dim,
                       ds_dtype_name(e->dtype), e->ndim);
    d->embed = e->data;
    d->own_vocab = 1;
    return ds_model_bind_linear(m, hname, c->vocab_size, c->dim, &d->head, err);
}

static int bind_extras(ds_model *m, ds_draft *d, ds_error *err) {
    const ds_config *c = &m->cfg;
    const int D = c->dim, S = c->n_mtp_layers, r = c->dspark_markov_rank;
    char n[96];
    if (ds_model_bind_linear(m, "mtp.0.main_proj", D, (int64_t)d->n_targets * D, &d->main_proj, err) < 0) return -1;
    if (ds_model_bind_vec(m, "mtp.0.main_norm.weight", D, &d->main_norm, err) < 0) return -1;
    snprintf(n, sizeof n, "mtp.%d.norm.weight", S - 1);
    if (ds_model_bind_vec(m, n, D, &d->norm, err) < 0) return -1;
    snprintf(n, sizeof n, "mtp.%d.markov_head.embed.weight", S - 1);
    const ds_tensor *me = ds_ckpt_tensor(m->ckpt, n);
    if (!me || me->dtype != DS_DT_BF16 || me->ndim != 2 || me->shape[0] != c->vocab_size || me->shape[1] != r)
        return ds_fail(err, "E_DRAFT_TENSOR", "%s: %s: expected BF16 [%d, %d], found %s", m->dir, n, c->vocab_size, r,
                       me ? "another dtype or shape" : "none");
    d->markov_embed = me->data;
    snprintf(n, sizeof n, "mtp.%d.markov_head.head", S - 1);
    if (ds_model_bind_linear(m, n, c->vocab_size, r, &d->markov_head, err) < 0) return -1;
    ds_draft_pack_markov(m, d);
    snprintf(n, sizeof n, "mtp.%d.confidence_head.proj.weight", S - 1);
    const ds_tensor *cp = ds_ckpt_tensor(m->ckpt, n);
    int64_t cw = (int64_t)D + r;
    if (!cp || cp->ndim != 2 || cp->shape[0] != 1 || cp->shape[1] != cw || (cp->dtype != DS_DT_F32 && cp->dtype != DS_DT_BF16))
        return ds_fail(err, "E_DRAFT_TENSOR", "%s: %s: expected F32 or BF16 [1, %lld], found %s", m->dir, n, (long long)cw,
                       cp ? "another dtype or shape" : "none");
    if (cp->dtype == DS_DT_F32) {
        d->conf_proj = cp->data;
    } else {
        float *v = ds_model_own(m, ds_xmalloc(sizeof(float) * (size_t)cw));
        for (int64_t i = 0; i < cw; i++) v[i] = ds_bf16_to_f32(((const ds_bf16 *)cp->data)[i]);
        d->conf_proj = v;
    }
    return 0;
}

int ds_draft_load(ds_model *m, int required, ds_error *err) {
    const ds_config *c = &m->cfg;
    m->draft = NULL;
    if (c->n_mtp_layers <= 0) return draft_unavailable(required, "the configuration has no draft stages", err);
    if (!m->ckpt->draft_enabled)
        return draft_unavailable(required, m->ckpt->draft_disabled_reason[0] ? m->ckpt->draft_disabled_reason
                                                                             : "the draft files were not loaded", err);
    if (c->dspark_block < 1 || c->dspark_block > DS_DRAFT_MAX_BLOCK)
        return ds_fail(err, "E_CONFIG", "%s/config.json: dspark_block_size: expected 1..%d, found %d", m->dir, DS_DRAFT_MAX_BLOCK,
                       c->dspark_block);
    if (c->dspark_markov_rank < 1)
        return ds_fail(err, "E_CONFIG", "%s/config.json: dspark_markov_rank: expected >= 1, found %d", m->dir, c->dspark_markov_rank);
    ds_draft *d = ds_model_own(m, ds_xcalloc(1, sizeof *d));
    d->n_stages = c->n_mtp_layers;
    d->block = c->dspark_block;
    d->rank = c->dspark_markov_rank;
    d->n_targets = c->n_dspark_targets;
    d->trained = !c->dspark_draft_random;
    d->cfg = *c;
    d->cfg.n_experts = c->dspark_n_experts;
    d->cfg.n_active = c->dspark_n_active;
    for (int s = 0; s < d->n_stages; s++) {
        char p[32];
        snprintf(p, sizeof p, "mtp.%d.", s);
        if (ds_model_bind_block(m, p, c->n_layers + s, c->dspark_n_experts, &m->layers[c->n_layers + s], err) < 0) return -1;
    }
    if (bind_vocab(m, d, err) < 0 || bind_extras(m, d, err) < 0) return -1;
    m->draft = d;
    ds_log(DS_LOG_INFO, "DSpark draft: %d stages, block %d, %d/%d experts, %s vocabulary%s", d->n_stages, d->block,
           c->dspark_n_active, c->dspark_n_experts, d->own_vocab ? "own" : "shared trunk",
           d->trained ? "" : " (declared random: no acceptance probe)");
    return 0;
}

/* ------------------------------------------------------------------ rings */

ds_bf16 *ds_seq_draft_row(const ds_seq *s, int stage, int64_t pos) {
    const ds_kv_layout *lay = &s->pools->lay;
    uint8_t *page = ds_kv_page(s->pools, DS_KV_DRAFT, s->pg.drf[pos / lay->bs]);
    uint64_t row = (uint64_t)stage * (uint64_t)lay->bs + (uint64_t)(pos % lay->bs);
    return (ds_bf16 *)(page + row * (uint64_t)lay->d_h * 2u);
}

/* First position a ring ending at `end` keeps (block aligned: whole pages are kept or freed). */
static int64_t keep_from(const ds_seq *s, int64_t end) {
    const int64_t bs = s->pools->lay.bs;
    return (max64(0, end - s->m->cfg.window) / bs) * bs;
}

uint32_t ds_draft_pages_needed(const ds_seq *s, int64_t end) {
    const int64_t bs = s->pools->lay.bs;
    uint32_t n = 0;
    for (int64_t b = keep_from(s, end) / bs; b * bs < end; b++)
        if (b >= s->pg.cap || s->pg.drf[b] == DS_KV_NONE) n++;
    return n;
}

void ds_draft_release_all(ds_seq *s) {
    for (int64_t b = 0; b < s->pg.cap; b++)
        if (s->pg.drf && s->pg.drf[b] != DS_KV_NONE) {
            s->ops.release(s->ops.ctx, DS_KV_DRAFT, s->pg.drf[b]);
            s->pg.drf[b] = DS_KV_NONE;
        }
    s->drf_lo = s->drf_hi = 0;
}

void ds_draft_truncate(ds_seq *s, int64_t len) {
    if (s->drf_hi > len) s->drf_hi = len;
    if (s->drf_lo > s->drf_hi) s->drf_lo = s->drf_hi;
}

/* Allocate the DRAFT pages of blocks [b0, b1) that are missing; all or nothing. */
static int alloc_pages(ds_seq *s, int64_t b0, int64_t b1, ds_error *err) {
    ds_block_tab_grow(&s->pg, b1);
    int64_t *fresh = ds_xmalloc(sizeof(int64_t) * (size_t)(b1 > b0 ? b1 - b0 : 1));
    int n_fresh = 0;
    for (int64_t b = b0; b < b1; b++) {
        if (s->pg.drf[b] != DS_KV_NONE) continue;
        uint32_t pg;
        if (s->ops.alloc(s->ops.ctx, DS_KV_DRAFT, &pg) < 0) {
            for (int i = 0; i < n_fresh; i++) {
                s->ops.release(s->ops.ctx, DS_KV_DRAFT, s->pg.drf[fresh[i]]);
                s->pg.drf[fresh[i]] = DS_KV_NONE;
            }
            free(fresh);
            return ds_fail(err, "E_KV_EXHAUSTED", "KV pool DRAFT: expected a free page, found none (reserve pages before the step)");
        }
        s->pg.drf[b] = pg;
        fresh[n_fresh++] = b;
    }
    free(fresh);
    return 0;
}

/* ctx rows = rmsnorm(bf16(main_proj·aux), main_norm), then every stage's ring row (temporaries on a
 * step arena: a commit follows every verify step). */
static void write_rows(ds_model *m, ds_seq *s, const ds_bf16 *aux, int64_t p0, int n) {
    const ds_draft *d = m->draft;
    const ds_config *c = &m->cfg;
    const ds_numerics nt = m->numerics;
    const int D = c->dim, dh = c->head_dim, rd = c->rope_head_dim;
    const int cols = D > dh ? D : dh;
    ds_step_ctx *sc = ds_step_ctx_acquire(m);
    ds_arena *ar = &sc->arena;
    float *lin = DS_ARENA_NEW(ar, float, (size_t)n * cols);
    ds_bf16 *ctx = DS_ARENA_NEW(ar, ds_bf16, (size_t)n * D), *tmp = DS_ARENA_NEW(ar, ds_bf16, (size_t)cols);
    ds_linear_forward(&d->main_proj, aux, n, lin);
    for (int j = 0; j < n; j++) {
        ds_round_rows_bf16(lin + (size_t)j * D, (size_t)D, tmp);
        ds_rmsnorm_t(nt, tmp, d->main_norm, D, c->norm_eps, ctx + (size_t)j * D);
    }
    float cs[2 * DS_ROPE_MAX_PAIRS];
    for (int st = 0; st < d->n_stages; st++) {
        const ds_layer_weights *w = &m->layers[c->n_layers + st];
        ds_linear_forward(&w->wkv, ctx, n, lin);
        for (int j = 0; j < n; j++) {
            ds_bf16 *row = ds_seq_draft_row(s, st, p0 + j);
            ds_round_rows_bf16(lin + (size_t)j * dh, (size_t)dh, tmp);
            ds_rmsnorm_t(nt, tmp, w->kv_norm, dh, c->norm_eps, row);
            ds_rope_cossin(&m->rope_swa, p0 + j, cs);
            ds_rope_apply_t(nt, row, dh, rd, cs, 0);
        }
    }
    ds_step_ctx_release(m, sc);
}

int ds_draft_commit(ds_model *m, ds_seq *s, const ds_bf16 *aux, int64_t p0, int n, ds_error *err) {
    if (!m->draft) return ds_fail(err, "E_INVALID_ARG", "draft commit: the model has no draft loaded");
    if (n <= 0) return 0;
    if (p0 < 0 || p0 + n > s->len)
        return ds_fail(err, "E_INVALID_ARG", "draft commit: expected positions within the processed length %lld, found %lld..%lld",
                       (long long)s->len, (long long)p0, (long long)(p0 + n - 1));
    const int64_t bs = s->pools->lay.bs, end = p0 + n;
    /* rows from the first kept block on: older ones would be released at once, and whole blocks
     * let a prefix-cache entry keep the page as a complete draft tail (ds_draft_complete_blocks) */
    const int64_t first = max64(p0, keep_from(s, end));
    if (alloc_pages(s, keep_from(s, end) / bs, (end + bs - 1) / bs, err) < 0) return -1;
    const int W = ds_draft_aux_width(m);
    write_rows(m, s, aux + (size_t)(first - p0) * W, first, (int)(end - first));
    /* rows continue the ring when they touch it; a gap (rows older than the window skipped, or a
     * prefix adopted without rings) restarts it, so [drf_lo, drf_hi) is exactly what was written */
    if (first > s->drf_hi || p0 < s->drf_lo) s->drf_lo = first;
    s->drf_hi = end;
    const int64_t keep = keep_from(s, end);
    for (int64_t b = 0; b < keep / bs && b < s->pg.cap; b++)
        if (s->pg.drf[b] != DS_KV_NONE) {
            s->ops.release(s->ops.ctx, DS_KV_DRAFT, s->pg.drf[b]);
            s->pg.drf[b] = DS_KV_NONE;
        }
    s->drf_lo = max64(s->drf_lo, keep);
    return 0;
}

int ds_draft_adopt(ds_seq *s, int64_t b0, int n, const uint32_t *pages, ds_error *err) {
    const int64_t bs = s->pools->lay.bs, end = (b0 + n) * bs;
    if (!s->m->draft) return ds_fail(err, "E_INVALID_ARG", "draft adopt: the model has no draft loaded");
    if (n <= 0 || b0 < 0 || end != s->len || s->drf_hi != 0)
        return ds_fail(err, "E_KV_PREFIX", "draft adopt: expected blocks ending at the adopted length %lld on a sequence "
                       "without rings, found blocks %lld..%lld (rings up to %lld)", (long long)s->len, (long long)b0,
                       (long long)(b0 + n - 1), (long long)s->drf_hi);
    if (b0 * bs > max64(0, end - s->m->cfg.window))
        return ds_fail(err, "E_KV_PREFIX", "draft adopt: expected pages from position %lld, found them from %lld",
                       (long long)max64(0, end - s->m->cfg.window), (long long)(b0 * bs));
    for (int i = 0; i < n; i++)
        if (pages[i] >= s->pools->n_pages[DS_KV_DRAFT])
            return ds_fail(err, "E_KV_PREFIX", "draft adopt: page of block %lld: expected < %u, found %u", (long long)(b0 + i),
                           s->pools->n_pages[DS_KV_DRAFT], pages[i]);
    ds_block_tab_grow(&s->pg, b0 + n + 1);
    for (int i = 0; i < n; i++) s->pg.drf[b0 + i] = pages[i];
    /* block b0's page is complete from max(b0·bs, (b0+1)·bs − W) (ds_draft_complete_blocks) */
    s->drf_lo = max64(b0 * bs, (b0 + 1) * bs - s->m->cfg.window);
    s->drf_hi = end;
    return 0;
}

void ds_draft_complete_blocks(const ds_model *m, const ds_seq *s, int *from, int *to) {
    *from = *to = 0;
    if (!m->draft || !s->pg.drf || s->drf_hi <= s->drf_lo) return;
    const int64_t bs = s->pools->lay.bs, W = m->cfg.window;
    /* smallest b with drf_lo <= b·bs or drf_lo <= (b+1)·bs − W */
    int64_t b1 = (s->drf_lo + bs - 1) / bs, b2 = (s->drf_lo + W + bs - 1) / bs - 1;
    *from = (int)(b1 < b2 ? b1 : b2);
    *to = (int)(s->drf_hi / bs);
}
