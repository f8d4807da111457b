/* Step contexts: the scratch arenas forward steps take their temporaries from (base/arena.h).
 *
 * Why a free list on the model and not one arena per model or per thread: ds_batch_step may be
 * called from several threads at once (the engine's stepping thread, tools, tests stepping
 * private sequences in parallel), and each running step needs its own scratch; thread-local
 * arenas would leak with short-lived threads and multiply with models.  A step pops a context (or
 * makes one when every context is busy: a new concurrent stepper, logged) and pushes it back when
 * it ends, so the number of arenas equals the most steps ever run at once, and a steady-state step
 * allocates nothing.
 *
 * The first arena is sized at load for a step of DS_STEP_ROWS_AT_LOAD rows from the config (an
 * upper bound of what the forward pass takes: the step's row buffers plus the largest sublayer's
 * temporaries, with per-thread slices for the pool); a larger step grows it once (logged). */
#include "model/forward.h"
#include "model/attn_tile.h"
#include "base/threadpool.h"
#include <stdlib.h>

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }
#define A64(x) (((size_t)(x) + 63) & ~(size_t)63)

/* Bytes a step of `rows` rows needs from its arena (an estimate that errs on the large side). */
static size_t step_bytes(const ds_config *c, size_t N, size_t T, int64_t max_len) {
    const size_t HC = (size_t)c->hc_mult, D = (size_t)c->dim, dh = (size_t)c->head_dim, H = (size_t)c->n_heads;
    const size_t rd = (size_t)c->rope_head_dim, ql = (size_t)c->q_lora_rank, ol = (size_t)c->o_lora_rank;
    const size_t G = (size_t)(c->o_groups > 0 ? c->o_groups : 1);
    const size_t K = (size_t)(c->index_topk > 0 ? c->index_topk : 1);
    const size_t CB = (size_t)(c->cand_topk_blocks > 0 ? c->cand_topk_blocks : 1);
    const size_t ni = (size_t)(c->index_n_heads > 0 ? c->index_n_heads : 1);
    const size_t di = (size_t)(c->index_head_dim > 0 ? c->index_head_dim : 1);
    const size_t E = (size_t)c->n_experts, k = (size_t)c->n_active, I = (size_t)c->moe_inter;
    const size_t V = (size_t)c->vocab_size;
    size_t cols = max_sz(max_sz(ql, H * dh), max_sz(ni * di, max_sz(max_sz(ol, D), E)));
    /* the step's own buffers (forward.c step_alloc) */
    size_t s = A64(N * 4) + A64(N * 8) + 2 * A64(N * HC * D * 2) + A64(N * HC * 4) + A64(N * sizeof(ds_hc_mix)) +
               2 * A64(N * D * 2) + 2 * A64(N * rd * 4) + A64(N * cols * 4) + A64(N * ql * 2) + 2 * A64(N * H * dh * 2) +
               A64(N * dh * 2) + A64(N * H * dh / G * 2) + A64(N * G * ol * 2) + A64(N * K * 4) + 2 * A64(N * 4) +
               A64(N * CB * 4) + A64(N * ni * di * 2) + A64(N * ni * 4) + 4096;
    /* the largest sublayer */
    const size_t nmix = (2 + HC) * HC;
    size_t site = A64(N * nmix * 4) + A64(N * D * 2);
    size_t attn = A64(N * D) + A64(N * 4) + T * (A64((size_t)c->window * 8 + K * 8) + A64((size_t)c->window * 4 + K * 4) +
                  A64(dh * 8));
    /* the fast tier's blocked attention (attention.c tile_setup): per-thread tiles over one row's keys */
    const size_t QB = DS_ATTN_QB, U = (size_t)c->window + K;
    attn += A64(T * sizeof(ds_attn_scratch)) + T * (4 * A64(U * QB * 4) + A64(U) + 2 * A64(QB * dh * 4));
    size_t cmp = 2 * A64(N * dh * 4) + A64(N * 16) + A64(N * dh * 2) + A64(N * di * 4) + 3 * A64(dh * 2);
    int min_ratio = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].ratio > 0 && (min_ratio == 0 || c->roles[l].ratio < min_ratio)) min_ratio = c->roles[l].ratio;
    size_t np = min_ratio ? (size_t)(max_len / min_ratio) : 0;
    size_t idx = min_ratio ? T * (A64(np * 4) + 2 * A64(np + 1) + A64(max_sz(K, CB) * 4) + A64(((ni + 15) / 16 * 16 + 1) * ((di + 31) / 32 * 32 + 1) * 4 + 64)) : 0;
    size_t eng = c->n_engram ? A64(N * (size_t)c->engram_head_dim * DS_ENGRAM_MAX_COLS * 2) + A64(N * (HC + 1) * D * 4) +
                 2 * A64(T * D * 4) : 0;
    const size_t R = N * k, TT = R + N;
    size_t moe = 2 * A64(N * k * 4) + A64(T * 2 * E * 4) + A64(T * k * 4) + A64((E + 1) * 4) + 3 * A64(R * 4) +
                 2 * A64(TT * I * 4) + A64(TT * D * 4) + A64(TT * I * 2) + A64(N * D) + A64(N * 4) + A64(R * D) + A64(R * 4) +
                 A64(R * 4) + A64((2 * E + 2) * sizeof(ds_linear_job)) + A64(TT * I) + A64(TT * 4) + A64(T * D * 12);
    size_t logits = A64(N * D * 2) + A64(D * 2) + A64(N * 8) + A64(max_sz(N < 64 ? N : 64, 1) * V * 4);
    size_t sub = max_sz(max_sz(site, attn + cmp + idx), max_sz(eng, max_sz(moe, logits)));
    return s + sub;
}

static ds_step_ctx *ctx_new(ds_model *m) {
    ds_step_ctx *x = ds_xcalloc(1, sizeof *x);
    ds_arena_init(&x->arena, m->step_bytes, "step");
    m->n_step_ctx++;
    return x;
}

void ds_model_init_step_scratch(ds_model *m, int rows) {
    m->step_bytes = step_bytes(&m->cfg, (size_t)(rows > 0 ? rows : 1), (size_t)ds_pool_threads(), m->max_len);
    m->step_free = ctx_new(m);
    ds_log(DS_LOG_DEBUG, "step arena: %.1f MiB for steps of %d rows", (double)m->step_bytes / 1048576.0, rows);
}

void ds_model_free_step_scratch(ds_model *m) {
    while (m->step_free) {
        ds_step_ctx *x = m->step_free;
        m->step_free = x->next;
        ds_arena_free(&x->arena);
        free(x);
    }
    pthread_mutex_destroy(&m->step_mu);   /* initialized with the model (ds_model_load) */
}

ds_step_ctx *ds_step_ctx_acquire(ds_model *m) {
    pthread_mutex_lock(&m->step_mu);
    ds_step_ctx *x = m->step_free;
    if (x) m->step_free = x->next;
    else {
        x = ctx_new(m);
        ds_log(DS_LOG_INFO, "step arena: %d steps at once, new arena of %.1f MiB", m->n_step_ctx,
               (double)m->step_bytes / 1048576.0);
    }
    pthread_mutex_unlock(&m->step_mu);
    x->next = NULL;
    return x;
}

void ds_step_ctx_release(ds_model *m, ds_step_ctx *x) {
    ds_arena_reset(&x->arena);
    pthread_mutex_lock(&m->step_mu);
    x->next = m->step_free;
    m->step_free = x;
    pthread_mutex_unlock(&m->step_mu);
}
