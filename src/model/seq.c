/* Per-sequence state over KV pages (MODEL.md §6, SERVING.md §4).
 *
 * Why block tables and not rings: every per-position datum (window row, compressed entry, index
 * key, ratio-2 pending row) is addressed by absolute position through the page of its logical
 * block, so rollback is only a length change (§6.3), a cached prefix is adopted by installing page
 * ids (§6.5), and the engine can reserve pages before a step so the step never fails half-way.
 *
 * Retention: CKV/IDX pages are kept for the whole life of the sequence; the STATE page (32-slot
 * fp32 ring keyed by position) is allocated once; WIN pages are kept for the blocks that intersect
 * [len − W − DS_MAX_ROLLBACK, len), and a step persists every row of its chunk that falls in such a
 * block, so each retained WIN page is complete and a rollback of up to DS_MAX_ROLLBACK positions
 * finds every window row it needs.  `win_lo` records the lowest position whose window row is known
 * to be present; truncation checks it (and the STATE ring) instead of assuming. */
#include "model/model.h"
#include "model/draft.h"
#include "base/arena.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void grow_tokens(ds_seq *s, int64_t n) {
    if (n <= s->tok_cap) return;
    int64_t cap = s->tok_cap ? s->tok_cap : 256;
    while (cap < n) cap *= 2;
    s->tokens = ds_xrealloc(s->tokens, sizeof(int32_t) * (size_t)cap);
    s->tok_cap = cap;
}

static int layout_matches(const ds_kv_layout *lay, const ds_config *cfg) {
    ds_kv_layout ref;
    ds_kv_layout_init(&ref, cfg, lay->bs);
    if (lay->bs < 16 || lay->bs > 256 || (lay->bs & (lay->bs - 1))) return 0;
    for (int k = 0; k < DS_KV_KINDS; k++)
        if (ref.page_bytes[k] != lay->page_bytes[k]) return 0;
    for (int s = 0; s < ref.n_src; s++)
        if (lay->bs % ref.src_ratio[s] || ref.src_ratio[s] > DS_STATE_SLOTS) return 0;
    return ref.n_src == lay->n_src && ref.d_h == lay->d_h && ref.d_idx == lay->d_idx;
}

ds_seq *ds_seq_new_paged(const ds_model *m, ds_kv_pools *pools, ds_kv_alloc_ops ops) {
    if (!m || !pools || !ops.alloc || !ops.release) return NULL;
    if (!layout_matches(&pools->lay, &m->cfg)) {
        ds_log(DS_LOG_ERROR, "ds_seq_new_paged: pool layout (bs %d) does not match the model's page layout",
               pools->lay.bs);
        return NULL;
    }
    ds_seq *s = ds_xcalloc(1, sizeof *s);
    s->m = m;
    s->pools = pools;
    s->ops = ops;
    s->pg.state = DS_KV_NONE;
    return s;
}

ds_seq *ds_seq_new_bs(const ds_model *m, int bs, char *errbuf, size_t errlen) {
    if (!m) return NULL;
    const ds_config *c = &m->cfg;
    ds_kv_layout lay;
    ds_kv_layout_init(&lay, c, bs);
    if (!layout_matches(&lay, c)) {
        if (errbuf) snprintf(errbuf, errlen, "E_KV_LAYOUT: block size %d: expected a power of two in 16..256 "
                             "divisible by every compress ratio", bs);
        return NULL;
    }
    uint32_t pages[DS_KV_KINDS] = {0};
    uint32_t blocks = (uint32_t)ceil_div(m->max_len, bs);
    pages[DS_KV_CKV] = lay.page_bytes[DS_KV_CKV] ? blocks : 0;
    pages[DS_KV_IDX] = lay.page_bytes[DS_KV_IDX] ? blocks : 0;
    /* held before the step + newly persisted blocks of the step, each at most a retention span */
    uint32_t span = (uint32_t)ceil_div(c->window + DS_MAX_ROLLBACK, bs) + 1;
    pages[DS_KV_WIN] = 2 * span + 2;
    pages[DS_KV_STATE] = lay.page_bytes[DS_KV_STATE] ? 1 : 0;
    /* draft rings: the blocks of the last W committed positions plus one being entered */
    pages[DS_KV_DRAFT] = m->draft && lay.page_bytes[DS_KV_DRAFT] ? (uint32_t)ceil_div(c->window, bs) + 2 : 0;
    ds_kv_pools *p = ds_xcalloc(1, sizeof *p);
    ds_error err = {{0}, {0}};
    if (ds_kv_pools_create(p, &lay, pages, &err) < 0) {
        if (errbuf) snprintf(errbuf, errlen, "%s", err.msg);
        free(p);
        return NULL;
    }
    ds_seq *s = ds_seq_new_paged(m, p, ds_kv_simple_ops(p));
    if (!s) {
        ds_kv_pools_destroy(p);
        free(p);
        return NULL;
    }
    s->own_pools = 1;
    return s;
}

ds_seq *ds_seq_new(const ds_model *m) { return ds_seq_new_bs(m, m ? m->kv_bs : DS_DEFAULT_BLOCK, NULL, 0); }

static void release_all(ds_seq *s) {
    for (int64_t b = 0; b < s->pg.cap; b++) {
        if (s->pg.ckv[b] != DS_KV_NONE) s->ops.release(s->ops.ctx, DS_KV_CKV, s->pg.ckv[b]);
        if (s->pg.idx[b] != DS_KV_NONE) s->ops.release(s->ops.ctx, DS_KV_IDX, s->pg.idx[b]);
        if (s->pg.win[b] != DS_KV_NONE) s->ops.release(s->ops.ctx, DS_KV_WIN, s->pg.win[b]);
        s->pg.ckv[b] = s->pg.idx[b] = s->pg.win[b] = DS_KV_NONE;
    }
    if (s->pg.state != DS_KV_NONE) s->ops.release(s->ops.ctx, DS_KV_STATE, s->pg.state);
    s->pg.state = DS_KV_NONE;
    ds_draft_release_all(s);
    s->pg.n_blk = 0;
    s->len = 0;
    s->shared_len = 0;
    s->win_lo = 0;
}

void ds_seq_free(ds_seq *s) {
    if (!s) return;
    release_all(s);
    if (s->own_pools) {
        ds_kv_pools_destroy(s->pools);
        free(s->pools);
    }
    ds_block_tab_free(&s->pg);
    free(s->tokens);
    free(s);
}

int64_t ds_seq_length(const ds_seq *s) { return s ? s->len : 0; }

/* First position whose window row a sequence of length `end` keeps (block aligned). */
int64_t ds_seq_win_persist_from(const ds_seq *s, int64_t end) {
    const int64_t bs = s->pools->lay.bs;
    int64_t lo = end - s->m->cfg.window - DS_MAX_ROLLBACK;
    if (lo < 0) lo = 0;
    return (lo / bs) * bs;
}

static int64_t win_first_new_block(const ds_seq *s, int64_t end) {
    const int64_t bs = s->pools->lay.bs;
    int64_t b0 = s->len / bs, b1 = ds_seq_win_persist_from(s, end) / bs;
    return b0 > b1 ? b0 : b1;
}

void ds_seq_pages_needed(const ds_seq *s, int n_new_rows, uint32_t counts[DS_KV_KINDS]) {
    for (int k = 0; k < DS_KV_KINDS; k++) counts[k] = 0;
    if (n_new_rows <= 0) return;
    const ds_kv_layout *lay = &s->pools->lay;
    const int64_t bs = lay->bs, end = s->len + n_new_rows;
    int64_t nb = ceil_div(end, bs);
    if (nb > s->pg.n_blk) {
        if (lay->page_bytes[DS_KV_CKV]) counts[DS_KV_CKV] = (uint32_t)(nb - s->pg.n_blk);
        if (lay->page_bytes[DS_KV_IDX]) counts[DS_KV_IDX] = (uint32_t)(nb - s->pg.n_blk);
    }
    for (int64_t b = win_first_new_block(s, end); b < nb; b++)
        if (b >= s->pg.cap || s->pg.win[b] == DS_KV_NONE) counts[DS_KV_WIN]++;
    if (lay->page_bytes[DS_KV_STATE] && s->pg.state == DS_KV_NONE) counts[DS_KV_STATE] = 1;
}

/* Undo record of the last reservation (pages allocated by it, released again on failure). */
typedef struct reservation {
    int64_t old_kv_blocks;
    int new_state;
    int64_t *win_blocks;
    int n_win;
} reservation;

static void unreserve(ds_seq *s, reservation *r) {
    for (int64_t b = r->old_kv_blocks; b < s->pg.n_blk; b++) {
        if (s->pg.ckv[b] != DS_KV_NONE) s->ops.release(s->ops.ctx, DS_KV_CKV, s->pg.ckv[b]);
        if (s->pg.idx[b] != DS_KV_NONE) s->ops.release(s->ops.ctx, DS_KV_IDX, s->pg.idx[b]);
        s->pg.ckv[b] = s->pg.idx[b] = DS_KV_NONE;
    }
    s->pg.n_blk = r->old_kv_blocks;
    for (int i = 0; i < r->n_win; i++) {
        s->ops.release(s->ops.ctx, DS_KV_WIN, s->pg.win[r->win_blocks[i]]);
        s->pg.win[r->win_blocks[i]] = DS_KV_NONE;
    }
    if (r->new_state) {
        s->ops.release(s->ops.ctx, DS_KV_STATE, s->pg.state);
        s->pg.state = DS_KV_NONE;
    }
    r->n_win = 0;
}

static int exhausted(ds_error *err, ds_kv_kind k) {
    static const char *names[] = {"CKV", "IDX", "WIN", "DRAFT", "STATE"};
    return ds_fail(err, "E_KV_EXHAUSTED", "KV pool %s: expected a free page, found none (reserve pages before the step)",
                   names[k]);
}

static int reserve_rec(ds_arena *scratch, ds_seq *s, int n, reservation *r, ds_error *err) {
    const ds_kv_layout *lay = &s->pools->lay;
    const int64_t bs = lay->bs, end = s->len + n;
    const int64_t nb = ceil_div(end, bs);
    memset(r, 0, sizeof *r);
    r->old_kv_blocks = s->pg.n_blk;
    ds_block_tab_grow(&s->pg, nb);
    uint32_t pg;
    while (s->pg.n_blk < nb) {
        int64_t b = s->pg.n_blk;
        if (lay->page_bytes[DS_KV_CKV]) {
            if (s->ops.alloc(s->ops.ctx, DS_KV_CKV, &pg) < 0) { unreserve(s, r); return exhausted(err, DS_KV_CKV); }
            s->pg.ckv[b] = pg;
        }
        if (lay->page_bytes[DS_KV_IDX]) {
            if (s->ops.alloc(s->ops.ctx, DS_KV_IDX, &pg) < 0) {
                s->pg.n_blk = b + 1;   /* so unreserve releases the CKV page of b */
                unreserve(s, r);
                return exhausted(err, DS_KV_IDX);
            }
            s->pg.idx[b] = pg;
        }
        s->pg.n_blk = b + 1;
    }
    int64_t b0 = win_first_new_block(s, end);
    r->win_blocks = DS_ARENA_NEW(scratch, int64_t, nb > b0 ? nb - b0 : 1);
    for (int64_t b = b0; b < nb; b++) {
        if (s->pg.win[b] != DS_KV_NONE) continue;
        if (s->ops.alloc(s->ops.ctx, DS_KV_WIN, &pg) < 0) { unreserve(s, r); return exhausted(err, DS_KV_WIN); }
        s->pg.win[b] = pg;
        r->win_blocks[r->n_win++] = b;
    }
    if (lay->page_bytes[DS_KV_STATE] && s->pg.state == DS_KV_NONE) {
        if (s->ops.alloc(s->ops.ctx, DS_KV_STATE, &pg) < 0) { unreserve(s, r); return exhausted(err, DS_KV_STATE); }
        s->pg.state = pg;
        r->new_state = 1;
    }
    return 0;
}

int ds_seq_reserve_many_in(ds_arena *scratch, ds_seq **seqs, const int *n_rows, int n_seqs, ds_error *err) {
    ds_arena_mark mk = ds_arena_mark_get(scratch);
    reservation *rs = ds_arena_zalloc(scratch, sizeof *rs * (size_t)(n_seqs ? n_seqs : 1));
    int rc = 0;
    for (int i = 0; i < n_seqs && rc == 0; i++) {
        if (reserve_rec(scratch, seqs[i], n_rows[i], &rs[i], err) < 0) {
            for (int j = i - 1; j >= 0; j--) unreserve(seqs[j], &rs[j]);
            rc = -1;
        }
    }
    ds_arena_release(scratch, mk);
    return rc;
}

int ds_seq_reserve_many(ds_seq **seqs, const int *n_rows, int n_seqs, ds_error *err) {
    ds_arena scratch;
    ds_arena_init(&scratch, 0, "reservation");
    int rc = ds_seq_reserve_many_in(&scratch, seqs, n_rows, n_seqs, err);
    ds_arena_free(&scratch);
    return rc;
}

void ds_seq_commit(ds_seq *s, const int32_t *tokens, int n) {
    const int64_t bs = s->pools->lay.bs, end = s->len + n;
    grow_tokens(s, end);
    memcpy(s->tokens + s->len, tokens, sizeof(int32_t) * (size_t)n);
    s->len = end;
    int64_t keep = ds_seq_win_persist_from(s, end);
    for (int64_t b = s->win_lo / bs; b < keep / bs && b < s->pg.cap; b++) {
        if (s->pg.win[b] == DS_KV_NONE) continue;
        s->ops.release(s->ops.ctx, DS_KV_WIN, s->pg.win[b]);
        s->pg.win[b] = DS_KV_NONE;
    }
    if (keep > s->win_lo) s->win_lo = keep;
}

int ds_seq_truncate(ds_seq *s, int64_t len) {
    if (!s || len < 0 || len > s->len) return -1;
    if (len == s->len) return 0;
    if (len == 0) {
        release_all(s);
        return 0;
    }
    const ds_config *c = &s->m->cfg;
    if (len < s->shared_len) {
        ds_log(DS_LOG_ERROR, "ds_seq_truncate: length %lld is inside the adopted prefix (%lld positions)",
               (long long)len, (long long)s->shared_len);
        return -1;
    }
    /* window rows the next position reads */
    int64_t need = len - c->window + 1;
    if (need < 0) need = 0;
    if (need < s->win_lo) {
        ds_log(DS_LOG_ERROR, "ds_seq_truncate: rollback from %lld to %lld needs window rows from %lld, kept from %lld",
               (long long)s->len, (long long)len, (long long)need, (long long)s->win_lo);
        return -1;
    }
    /* pending rows of open ratio>=2 groups must still be in the STATE ring */
    const ds_kv_layout *lay = &s->pools->lay;
    for (int src = 0; src < lay->n_src; src++) {
        int r = lay->src_ratio[src];
        if (r < 2) continue;
        int64_t g0 = (len / r) * r;
        if (g0 < len && s->len > g0 + DS_STATE_SLOTS) {
            ds_log(DS_LOG_ERROR, "ds_seq_truncate: rollback from %lld to %lld: pending compressor rows from %lld were "
                   "overwritten (ring of %d)", (long long)s->len, (long long)len, (long long)g0, DS_STATE_SLOTS);
            return -1;
        }
    }
    s->len = len;
    ds_draft_truncate(s, len);
    return 0;
}

int ds_seq_adopt_prefix(ds_seq *s, int64_t k_blocks, const uint32_t *ckv_pages, const uint32_t *idx_pages,
                        int n_win, const uint32_t *win_pages, const int32_t *tokens, ds_error *err) {
    const ds_kv_layout *lay = &s->pools->lay;
    const int64_t bs = lay->bs, L = k_blocks * bs;
    if (s->len != 0 || s->pg.n_blk != 0)
        return ds_fail(err, "E_KV_PREFIX", "adopt prefix: expected an empty sequence, found length %lld", (long long)s->len);
    if (k_blocks <= 0 || L > s->m->max_len)
        return ds_fail(err, "E_KV_PREFIX", "adopt prefix: expected 1..%lld blocks, found %lld",
                       (long long)(s->m->max_len / bs), (long long)k_blocks);
    int64_t need = L - s->m->cfg.window + 1;
    if (need < 0) need = 0;
    if (n_win < 0 || n_win > k_blocks || (k_blocks - n_win) * bs > need)
        return ds_fail(err, "E_KV_PREFIX", "adopt prefix: window pages must cover positions from %lld, found %d block(s) "
                       "from %lld", (long long)need, n_win, (long long)((k_blocks - n_win) * bs));
    for (int i = 0; i < 3; i++) {
        const uint32_t *pg = i == 0 ? ckv_pages : i == 1 ? idx_pages : win_pages;
        int kind = i == 0 ? DS_KV_CKV : i == 1 ? DS_KV_IDX : DS_KV_WIN;
        int64_t cnt = i == 2 ? n_win : (lay->page_bytes[kind] ? k_blocks : 0);
        for (int64_t b = 0; b < cnt; b++)
            if (!pg || pg[b] >= s->pools->n_pages[kind])
                return ds_fail(err, "E_KV_PREFIX", "adopt prefix: page of block %lld: expected < %u, found %u",
                               (long long)b, s->pools->n_pages[kind], pg ? pg[b] : DS_KV_NONE);
    }
    ds_block_tab_grow(&s->pg, k_blocks + 1);
    for (int64_t b = 0; b < k_blocks; b++) {
        if (lay->page_bytes[DS_KV_CKV]) s->pg.ckv[b] = ckv_pages[b];
        if (lay->page_bytes[DS_KV_IDX]) s->pg.idx[b] = idx_pages[b];
    }
    for (int i = 0; i < n_win; i++) s->pg.win[k_blocks - n_win + i] = win_pages[i];
    s->pg.n_blk = k_blocks;
    grow_tokens(s, L);
    memcpy(s->tokens, tokens, sizeof(int32_t) * (size_t)L);
    s->len = L;
    s->shared_len = L;
    s->win_lo = (k_blocks - n_win) * bs;
    return 0;
}

/* ---- row addresses (64-bit offsets only through ds_kv_page) ---- */

ds_bf16 *ds_seq_win_row(const ds_seq *s, int layer, int64_t pos) {
    const ds_kv_layout *lay = &s->pools->lay;
    uint8_t *page = ds_kv_page(s->pools, DS_KV_WIN, s->pg.win[pos / lay->bs]);
    uint64_t row = (uint64_t)layer * (uint64_t)lay->bs + (uint64_t)(pos % lay->bs);
    return (ds_bf16 *)(page + row * (uint64_t)lay->d_h * 2u);
}

ds_bf16 *ds_seq_ckv_row(const ds_seq *s, int src, int64_t entry) {
    const ds_kv_layout *lay = &s->pools->lay;
    int64_t p = entry * lay->src_ratio[src];
    uint8_t *page = ds_kv_page(s->pools, DS_KV_CKV, s->pg.ckv[p / lay->bs]);
    uint64_t row = (uint64_t)((p % lay->bs) / lay->src_ratio[src]);
    return (ds_bf16 *)(page + lay->ckv_off[src] + row * (uint64_t)lay->d_h * 2u);
}

ds_bf16 *ds_seq_idx_row(const ds_seq *s, int src, int64_t entry) {
    const ds_kv_layout *lay = &s->pools->lay;
    int64_t p = entry * lay->src_ratio[src];
    uint8_t *page = ds_kv_page(s->pools, DS_KV_IDX, s->pg.idx[p / lay->bs]);
    uint64_t row = (uint64_t)((p % lay->bs) / lay->src_ratio[src]);
    return (ds_bf16 *)(page + lay->idx_off[src] + row * (uint64_t)lay->d_idx * 2u);
}

float *ds_seq_state_row(const ds_seq *s, int state_src, int64_t pos) {
    const ds_kv_layout *lay = &s->pools->lay;
    uint8_t *page = ds_kv_page(s->pools, DS_KV_STATE, s->pg.state);
    uint64_t row = (uint64_t)state_src * DS_STATE_SLOTS + (uint64_t)(pos % DS_STATE_SLOTS);
    return (float *)(page + row * 2u * (uint64_t)lay->d_h * 4u);
}
