/* KV page ownership (see kv_manager.h).
 *
 * The WIN pool holds W = ceil((window+S)/bs)+1 pages per running request (§4.2) plus a small
 * transient reserve: while a prefill chunk [a, b) runs, the request still holds the pages it
 * reads (blocks intersecting [a-W, a)) next to the pages it persists (blocks intersecting
 * [b-W, b)), which can be ceil((W-1)/bs) pages more than the steady state.  Only prefilling
 * requests need it, so the reserve is that many pages per request that may prefill in one step. */
#include "engine/kv_manager.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

int ds_kv_budget_plan(ds_kv_budget *b, const ds_kv_layout *lay, uint64_t budget_bytes, int window, int spec_tokens,
                      int max_num_seqs, int max_prefill_seqs, int64_t max_model_len, ds_error *err) {
    memset(b, 0, sizeof *b);
    b->budget_bytes = budget_bytes;
    b->bs = lay->bs;
    b->window = window;
    b->spec_tokens = spec_tokens;
    b->max_num_seqs = max_num_seqs;
    b->max_prefill_seqs = max_prefill_seqs;
    b->max_model_len = max_model_len;
    for (int k = 0; k < DS_KV_KINDS; k++) b->page_bytes[k] = lay->page_bytes[k];
    uint64_t bs = (uint64_t)lay->bs;
    b->win_pages_per_req = (int)(ceil_div((uint64_t)(window + spec_tokens), bs) + 1);
    /* draft rings: blocks of the last W committed positions plus the one being entered (3 at bs 128) */
    uint64_t draft_pages = spec_tokens > 0 ? ceil_div((uint64_t)window, bs) + 2 : 0;
    b->fixed_per_request = (uint64_t)b->win_pages_per_req * lay->page_bytes[DS_KV_WIN] +
                           draft_pages * lay->page_bytes[DS_KV_DRAFT] + lay->page_bytes[DS_KV_STATE];
    b->win_transient_pages = (uint64_t)max_prefill_seqs * ceil_div((uint64_t)(window > 1 ? window - 1 : 1), bs);
    uint64_t fixed = (uint64_t)max_num_seqs * b->fixed_per_request + b->win_transient_pages * lay->page_bytes[DS_KV_WIN];
    uint64_t per_block = lay->page_bytes[DS_KV_CKV] + lay->page_bytes[DS_KV_IDX];
    if (budget_bytes <= fixed)
        return ds_fail(err, "E_KV_BUDGET",
                       "KV budget %llu B cannot hold the fixed per-request pages (%llu B x %d requests + %llu B "
                       "window reserve); raise --kv-cache-memory or lower --max-num-seqs",
                       (unsigned long long)budget_bytes, (unsigned long long)b->fixed_per_request, max_num_seqs,
                       (unsigned long long)(b->win_transient_pages * lay->page_bytes[DS_KV_WIN]));
    uint64_t nb = (budget_bytes - fixed) / per_block;
    if (nb > UINT32_MAX - 1) nb = UINT32_MAX - 1;
    b->num_blocks = nb;
    b->capacity_tokens = nb * bs;
    b->n_pages[DS_KV_CKV] = (uint32_t)nb;
    b->n_pages[DS_KV_IDX] = (uint32_t)nb;
    b->n_pages[DS_KV_WIN] = (uint32_t)((uint64_t)max_num_seqs * (uint64_t)b->win_pages_per_req + b->win_transient_pages);
    b->n_pages[DS_KV_DRAFT] = (uint32_t)((uint64_t)max_num_seqs * draft_pages);
    b->n_pages[DS_KV_STATE] = (uint32_t)max_num_seqs;
    if (max_model_len > 0 && nb < ceil_div((uint64_t)max_model_len, bs))
        return ds_fail(err, "E_KV_BUDGET",
                       "KV cache holds %llu blocks (%llu tokens) but one request of --max-model-len %lld needs %llu "
                       "blocks; the largest --max-model-len that fits is %llu",
                       (unsigned long long)nb, (unsigned long long)(nb * bs), (long long)max_model_len,
                       (unsigned long long)ceil_div((uint64_t)max_model_len, bs), (unsigned long long)(nb * bs));
    return 0;
}

void ds_kv_budget_lines(const ds_kv_budget *b, char *l1, size_t n1, char *l2, size_t n2) {
    uint64_t per_block = b->page_bytes[DS_KV_CKV] + b->page_bytes[DS_KV_IDX];
    snprintf(l1, n1, "KV cache size: %llu tokens", (unsigned long long)b->capacity_tokens);
    double max_len_reqs = b->max_model_len > 0 ? (double)b->capacity_tokens / (double)b->max_model_len : 0.0;
    snprintf(l2, n2,
             "KV cache detail: budget=%llu B per_token=%llu B blocks=%llu fixed_per_request=%llu B x %d "
             "max_len_requests=%.2f window_reserve=%llu pages pools: CKV=%llu IDX=%llu WIN=%llu DRAFT=%llu STATE=%llu",
             (unsigned long long)b->budget_bytes, (unsigned long long)(per_block / (uint64_t)b->bs),
             (unsigned long long)b->num_blocks, (unsigned long long)b->fixed_per_request, b->max_num_seqs, max_len_reqs,
             (unsigned long long)b->win_transient_pages,
             (unsigned long long)((uint64_t)b->n_pages[DS_KV_CKV] * b->page_bytes[DS_KV_CKV]),
             (unsigned long long)((uint64_t)b->n_pages[DS_KV_IDX] * b->page_bytes[DS_KV_IDX]),
             (unsigned long long)((uint64_t)b->n_pages[DS_KV_WIN] * b->page_bytes[DS_KV_WIN]),
             (unsigned long long)((uint64_t)b->n_pages[DS_KV_DRAFT] * b->page_bytes[DS_KV_DRAFT]),
             (unsigned long long)((uint64_t)b->n_pages[DS_KV_STATE] * b->page_bytes[DS_KV_STATE]));
}

int ds_kvm_init(ds_kvm *km, const ds_kv_layout *lay, const ds_kv_budget *plan, int window, bool prefix_caching,
                bool high_first, const char *fingerprint, ds_error *err) {
    memset(km, 0, sizeof *km);
    km->plan = *plan;
    km->bs = lay->bs;
    km->window = window;
    km->prefix_caching = prefix_caching;
    km->high_first = high_first;
    km->debug_fault_page = DS_KV_NONE;
    if (ds_kv_pools_create(&km->pools, lay, plan->n_pages, err)) return -1;
    km->pools.high_first = high_first;
    for (int k = 0; k < DS_KV_KINDS; k++) {
        uint32_t n = plan->n_pages[k];
        km->ref[k] = ds_xcalloc(n ? n : 1, sizeof(uint32_t));
        km->freel[k] = ds_xmalloc(sizeof(uint32_t) * (n ? n : 1));
        /* a stack popped from the end: low-first hands out page 0 first, high-first the top page */
        for (uint32_t i = 0; i < n; i++) km->freel[k][i] = high_first ? i : n - 1 - i;
        km->n_free[k] = n;
    }
    ds_pc_init(&km->pc, plan->n_pages[DS_KV_CKV], plan->n_pages[DS_KV_WIN], plan->n_pages[DS_KV_DRAFT], lay->bs);
    ds_pc_seed_hash(fingerprint ? fingerprint : "", km->seed_hash);
    return 0;
}

void ds_kvm_destroy(ds_kvm *km) {
    for (int k = 0; k < DS_KV_KINDS; k++) {
        free(km->ref[k]);
        free(km->freel[k]);
    }
    ds_pc_free(&km->pc);
    ds_kv_dict_free(&km->dict);
    ds_kv_pools_destroy(&km->pools);
    memset(km, 0, sizeof *km);
}

uint64_t ds_kvm_available(const ds_kvm *km, ds_kv_kind kind) {
    uint64_t n = km->n_free[kind];
    if (kind == DS_KV_CKV || kind == DS_KV_IDX) n += km->pc.n_lru;
    if (kind == DS_KV_WIN) n += km->pc.t[DS_PC_WIN].n_lru;
    if (kind == DS_KV_DRAFT) n += km->pc.t[DS_PC_DRF].n_lru;
    return n;
}

/* The prefix-cache tail kind of a page kind, or -1 (CKV, IDX and STATE pages are no tails). */
static int tail_kind(ds_kv_kind k) { return k == DS_KV_WIN ? DS_PC_WIN : k == DS_KV_DRAFT ? DS_PC_DRF : -1; }
static ds_kv_kind page_kind(int tk) { return tk == DS_PC_WIN ? DS_KV_WIN : DS_KV_DRAFT; }

uint64_t ds_kvm_evictable_blocks(const ds_kvm *km) { return km->pc.n_lru; }

void ds_kvm_seqtab_init(ds_kv_seqtab *t) {
    memset(t, 0, sizeof *t);
    ds_block_tab_init(&t->own);
}

/* Forget the own table's pages without releasing them (their references were handed back or
 * passed on); the arrays are kept for the next request. */
static void forget_own(ds_kv_seqtab *t) {
    ds_block_tab *p = &t->own;
    for (int64_t i = 0; i < p->cap; i++) p->ckv[i] = p->idx[i] = p->win[i] = p->drf[i] = DS_KV_NONE;
    p->n_blk = 0;
    p->state = DS_KV_NONE;
}

void ds_kvm_seqtab_clear(ds_kv_seqtab *t) {
    forget_own(t);
    t->seq = NULL;
    t->drf_from = t->drf_to = 0;
    t->n_hashed = 0;
}

/* The hit's blocks stay offered to the prefix cache (n_hashed and last_hash are kept). */
void ds_kvm_seqtab_bind(ds_kv_seqtab *t, ds_block_tab *seq_tab) {
    forget_own(t);
    t->seq = seq_tab;
    t->drf_from = t->drf_to = 0;
}

void ds_kvm_seqtab_free(ds_kv_seqtab *t) {
    ds_block_tab_free(&t->own);
    ds_kvm_seqtab_init(t);
}

void ds_kvm_seqtab_reserve(ds_kv_seqtab *t, int n) { ds_block_tab_grow(ds_kv_tab(t), n); }

static void free_push(ds_kvm *km, ds_kv_kind k, uint32_t id) { km->freel[k][km->n_free[k]++] = id; }

void ds_kv_dict_push(ds_kv_dict *d, ds_kv_kind k, uint32_t id) {
    if (d->n[k] == d->cap[k]) {
        d->cap[k] = d->cap[k] ? 2 * d->cap[k] : 64;
        d->ids[k] = ds_xrealloc(d->ids[k], sizeof(uint32_t) * d->cap[k]);
    }
    d->ids[k][d->n[k]++] = id;
}

void ds_kv_dict_clear(ds_kv_dict *d) {
    for (int k = 0; k < DS_KV_KINDS; k++) d->n[k] = d->at[k] = 0;
}

void ds_kv_dict_free(ds_kv_dict *d) {
    for (int k = 0; k < DS_KV_KINDS; k++) free(d->ids[k]);
    memset(d, 0, sizeof *d);
}

int ds_kvm_dict_take(ds_kvm *km, ds_kv_kind k, uint32_t *out) {
    ds_kv_dict *d = &km->dict;
    if (d->at[k] >= d->n[k] || d->ids[k][d->at[k]] >= km->plan.n_pages[k]) return -1;
    *out = d->ids[k][d->at[k]++];
    return 0;
}

int ds_kvm_page_alloc(ds_kvm *km, ds_kv_kind k, uint32_t *out) {
    uint32_t id;
    /* the draft is replicated and runs on rank 0 only: its pages are never dictated */
    if ((km->dict_on || km->mirror) && k != DS_KV_DRAFT) return ds_kvm_dict_take(km, k, out);
    if (km->n_free[k]) {
        id = km->freel[k][--km->n_free[k]];
    } else if (k == DS_KV_CKV) {
        int32_t b = ds_pc_lru_oldest(&km->pc);
        if (b < 0) return -1;
        uint32_t tails[DS_PC_TAIL_KINDS];
        ds_pc_remove(&km->pc, (uint32_t)b, tails);
        for (int tk = 0; tk < DS_PC_TAIL_KINDS; tk++)   /* an unreferenced tail of the evicted entry is free now */
            if (tails[tk] != DS_KV_NONE && km->ref[page_kind(tk)][tails[tk]] == 0) {
                ds_pc_tlru_remove(&km->pc, (ds_pc_tail_kind)tk, tails[tk]);
                free_push(km, page_kind(tk), tails[tk]);
            }
        id = (uint32_t)b;
    } else if (tail_kind(k) >= 0) {
        ds_pc_tail_kind tk = (ds_pc_tail_kind)tail_kind(k);
        int32_t w = ds_pc_tlru_oldest(&km->pc, tk);
        if (w < 0) return -1;
        ds_pc_tlru_remove(&km->pc, tk, (uint32_t)w);
        ds_pc_detach_tail(&km->pc, tk, (uint32_t)w);
        id = (uint32_t)w;
    } else {
        return -1;
    }
    km->ref[k][id] = 1;
    if (k == DS_KV_CKV) km->blocks_used++;
    *out = id;
    return 0;
}

void ds_kvm_page_unref(ds_kvm *km, ds_kv_kind k, uint32_t id) {
    if (km->mirror && k != DS_KV_DRAFT) return;   /* rank 0 counts the references of this page */
    if (--km->ref[k][id]) return;
    if (k == DS_KV_CKV) {
        km->blocks_used--;
        if (km->pc.e[id].valid) ds_pc_lru_push(&km->pc, id);
        else free_push(km, k, id);
    } else if (tail_kind(k) >= 0) {
        ds_pc_tail_kind tk = (ds_pc_tail_kind)tail_kind(k);
        if (km->pc.t[tk].owner[id] >= 0) ds_pc_tlru_push(&km->pc, tk, id);
        else free_push(km, k, id);
    } else {
        free_push(km, k, id);
    }
}

static void page_ref_cached(ds_kvm *km, ds_kv_kind k, uint32_t id) {
    if (km->ref[k][id]++ == 0) {
        if (k == DS_KV_CKV) {
            ds_pc_lru_remove(&km->pc, id);
            km->blocks_used++;
        } else if (tail_kind(k) >= 0) {
            ds_pc_tlru_remove(&km->pc, (ds_pc_tail_kind)tail_kind(k), id);
        }
    }
}

/* Blocks whose WIN page a step ending at b persists: those intersecting [b-W, b). */
static void persist_range(const ds_kvm *km, int64_t b, int64_t *lo, int64_t *hi) {
    int64_t s = b - km->window;
    if (s < 0) s = 0;
    *lo = s / km->bs;
    *hi = (b - 1) / km->bs;
}

void ds_kvm_pages_needed(const ds_kvm *km, const ds_kv_seqtab *t, int64_t a, int64_t b, uint64_t need[DS_KV_KINDS]) {
    const ds_block_tab *p = ds_kv_tab_c(t);
    memset(need, 0, sizeof(uint64_t) * DS_KV_KINDS);
    int64_t nb = (b + km->bs - 1) / km->bs;
    if (nb > p->n_blk) need[DS_KV_CKV] = need[DS_KV_IDX] = (uint64_t)(nb - p->n_blk);
    int64_t lo, hi;
    persist_range(km, b, &lo, &hi);
    for (int64_t j = lo; j <= hi; j++)
        if (j >= p->cap || p->win[j] == DS_KV_NONE) need[DS_KV_WIN]++;
    if (p->state == DS_KV_NONE) need[DS_KV_STATE] = 1;
}

int ds_kvm_prepare(ds_kvm *km, ds_kv_seqtab *t, int64_t a, int64_t b) {
    ds_block_tab *p = ds_kv_tab(t);
    int64_t nb = (b + km->bs - 1) / km->bs;
    ds_kvm_seqtab_reserve(t, (int)nb + 1);
    if (p->state == DS_KV_NONE && ds_kvm_page_alloc(km, DS_KV_STATE, &p->state)) return -1;
    while (p->n_blk < nb) {
        if (ds_kvm_page_alloc(km, DS_KV_CKV, &p->ckv[p->n_blk])) return -1;
        p->n_blk++;
    }
    int64_t lo, hi;
    persist_range(km, b, &lo, &hi);
    for (int64_t j = lo; j <= hi; j++)
        if (p->win[j] == DS_KV_NONE && ds_kvm_page_alloc(km, DS_KV_WIN, &p->win[j])) return -1;
    return 0;
}

int64_t ds_kvm_prefill_end(const ds_kvm *km, int64_t a, int64_t n) {
    int64_t kb = ((n - 1) / km->bs) * km->bs; /* the last block boundary a lookup may match */
    if (!km->prefix_caching || kb <= a) return n;
    int64_t lo_n, lo_k, hi;
    persist_range(km, n, &lo_n, &hi);
    persist_range(km, kb, &lo_k, &hi);
    return lo_n > lo_k ? kb : n;   /* a step ending at n would drop block K-1's tail set */
}

void ds_kvm_debug_fault(ds_kvm *km, const ds_kv_seqtab *t) {
    const ds_block_tab *p = ds_kv_tab_c(t);
    uint32_t pg = km->debug_fault_page;
    if (pg == DS_KV_NONE) return;
    for (int i = 0; i < p->n_blk && i < p->cap; i++)
        if (p->ckv[i] == pg) {
            /* 0x40 bytes read as bf16 3.0: plausible magnitudes, wrong values */
            memset(ds_kv_page(&km->pools, DS_KV_CKV, pg), 0x40, km->pools.lay.page_bytes[DS_KV_CKV]);
            memset(ds_kv_page(&km->pools, DS_KV_IDX, pg), 0x40, km->pools.lay.page_bytes[DS_KV_IDX]);
        }
}

void ds_kvm_after_step(ds_kvm *km, ds_kv_seqtab *t, const int32_t *tokens, int64_t L, const char *salt) {
    ds_block_tab *p = ds_kv_tab(t);
    ds_kvm_debug_fault(km, t);
    /* window retention: keep blocks intersecting [L-W, L] */
    int64_t keep_lo = L - km->window;
    keep_lo = keep_lo < 0 ? 0 : keep_lo / km->bs;
    for (int64_t j = 0; j < keep_lo && j < p->cap; j++)
        if (p->win[j] != DS_KV_NONE) {
            ds_kvm_page_unref(km, DS_KV_WIN, p->win[j]);
            p->win[j] = DS_KV_NONE;
        }
    if (!km->prefix_caching) return;
    int64_t full = L / km->bs;
    while (t->n_hashed < full && t->n_hashed < p->n_blk) {
        int i = t->n_hashed;
        uint8_t h[DS_PC_HASH_BYTES];
        const uint8_t *parent = i == 0 ? km->seed_hash : t->last_hash;
        const int32_t *blk_tokens = tokens + (size_t)i * (size_t)km->bs;
        ds_pc_block_hash(parent, blk_tokens, km->bs, i == 0 ? salt : NULL, h);
        if (ds_pc_lookup(&km->pc, h, blk_tokens) < 0 && ds_pc_insert(&km->pc, p->ckv[i], h, blk_tokens, i)) {
            if (p->win[i] != DS_KV_NONE) ds_pc_attach_tail(&km->pc, DS_PC_WIN, p->ckv[i], p->win[i]);
            /* the draft ring rows of block i are complete only where the backend says so */
            if (p->drf[i] != DS_KV_NONE && i >= t->drf_from && i < t->drf_to)
                ds_pc_attach_tail(&km->pc, DS_PC_DRF, p->ckv[i], p->drf[i]);
        }
        memcpy(t->last_hash, h, DS_PC_HASH_BYTES);
        t->n_hashed++;
    }
}

void ds_kvm_release(ds_kvm *km, ds_kv_seqtab *t) {
    ds_block_tab *p = ds_kv_tab(t);
    /* deepest first, tails before blocks: the LRU then evicts in the order of §7.4 */
    for (int i = p->cap - 1; i >= 0; i--) {
        if (p->win[i] != DS_KV_NONE) ds_kvm_page_unref(km, DS_KV_WIN, p->win[i]);
        if (p->drf[i] != DS_KV_NONE) ds_kvm_page_unref(km, DS_KV_DRAFT, p->drf[i]);
        p->win[i] = p->drf[i] = DS_KV_NONE;
    }
    t->drf_from = t->drf_to = 0;
    for (int i = p->n_blk - 1; i >= 0; i--) {
        ds_kvm_page_unref(km, DS_KV_CKV, p->ckv[i]);
        p->ckv[i] = DS_KV_NONE;
    }
    p->n_blk = 0;
    if (p->state != DS_KV_NONE) ds_kvm_page_unref(km, DS_KV_STATE, p->state);
    p->state = DS_KV_NONE;
    t->n_hashed = 0;
}

int64_t ds_kvm_lookup_prefix(ds_kvm *km, ds_kv_seqtab *t, const int32_t *tokens, int64_t n, const char *salt) {
    ds_block_tab *p = ds_kv_tab(t);
    if (!km->prefix_caching || n < 2) return 0;
    int64_t kmax = (n - 1) / km->bs;
    if (kmax <= 0) return 0;
    int32_t *hits = ds_xmalloc(sizeof(int32_t) * (size_t)kmax);
    uint8_t (*hashes)[DS_PC_HASH_BYTES] = ds_xmalloc(DS_PC_HASH_BYTES * (size_t)kmax);
    int64_t k = 0;
    for (; k < kmax; k++) {
        const uint8_t *parent = k == 0 ? km->seed_hash : hashes[k - 1];
        const int32_t *bt = tokens + (size_t)k * (size_t)km->bs;
        ds_pc_block_hash(parent, bt, km->bs, k == 0 ? salt : NULL, hashes[k]);
        hits[k] = ds_pc_lookup(&km->pc, hashes[k], bt);
        if (hits[k] < 0) break;
    }
    /* condition 2: the tail set of block k-1 (WIN pages of blocks intersecting [k*bs-W, k*bs)) */
    for (; k > 0; k--) {
        int64_t lo = k * km->bs - km->window;
        lo = lo < 0 ? 0 : lo / km->bs;
        bool ok = true;
        for (int64_t j = lo; j < k && ok; j++) ok = km->pc.e[hits[j]].tail[DS_PC_WIN] != DS_KV_NONE;
        if (ok) break;
    }
    if (k > 0) {
        ds_kvm_seqtab_reserve(t, (int)k + 1);
        for (int64_t j = 0; j < k; j++) {
            page_ref_cached(km, DS_KV_CKV, (uint32_t)hits[j]);
            p->ckv[j] = (uint32_t)hits[j];
        }
        p->n_blk = (int)k;
        int64_t lo = k * km->bs - km->window;
        lo = lo < 0 ? 0 : lo / km->bs;
        for (int64_t j = lo; j < k; j++) {
            uint32_t w = km->pc.e[hits[j]].tail[DS_PC_WIN];
            page_ref_cached(km, DS_KV_WIN, w);
            p->win[j] = w;
        }
        /* draft tails are optional: the run of them that ends at block k-1 (the backend keeps
         * those its draft window needs and hands the rest back) */
        for (int64_t j = k - 1; j >= lo && km->pc.e[hits[j]].tail[DS_PC_DRF] != DS_KV_NONE; j--) {
            uint32_t d = km->pc.e[hits[j]].tail[DS_PC_DRF];
            page_ref_cached(km, DS_KV_DRAFT, d);
            p->drf[j] = d;
        }
        t->n_hashed = (int)k;
        memcpy(t->last_hash, hashes[k - 1], DS_PC_HASH_BYTES);
    }
    free(hits);
    free(hashes);
    return k * km->bs;
}

void ds_kvm_reset_prefix_cache(ds_kvm *km) {
    for (int tk = 0; tk < DS_PC_TAIL_KINDS; tk++) {
        int32_t w;
        while ((w = ds_pc_tlru_oldest(&km->pc, (ds_pc_tail_kind)tk)) >= 0) {
            ds_pc_tlru_remove(&km->pc, (ds_pc_tail_kind)tk, (uint32_t)w);
            ds_pc_detach_tail(&km->pc, (ds_pc_tail_kind)tk, (uint32_t)w);
            free_push(km, page_kind(tk), (uint32_t)w);
        }
    }
    int32_t b;
    uint32_t tails[DS_PC_TAIL_KINDS];
    while ((b = ds_pc_lru_oldest(&km->pc)) >= 0) {
        ds_pc_remove(&km->pc, (uint32_t)b, tails);
        free_push(km, DS_KV_CKV, (uint32_t)b);
    }
}

int ds_kvm_audit(const ds_kvm *km, ds_kv_seqtab *const *tabs, int n_tabs, char *msg, size_t len) {
    static const ds_kv_kind kinds[] = {DS_KV_CKV, DS_KV_WIN, DS_KV_DRAFT, DS_KV_STATE};
    for (size_t ki = 0; ki < DS_ARRAY_LEN(kinds); ki++) {
        ds_kv_kind k = kinds[ki];
        uint32_t n = km->plan.n_pages[k];
        uint32_t *want = ds_xcalloc(n ? n : 1, sizeof(uint32_t));
        uint8_t *in_free = ds_xcalloc(n ? n : 1, 1);
        for (int t = 0; t < n_tabs; t++) {
            const ds_block_tab *tb = ds_kv_tab_c(tabs[t]);
            if (k == DS_KV_CKV)
                for (int64_t i = 0; i < tb->n_blk; i++) want[tb->ckv[i]]++;
            if (k == DS_KV_WIN || k == DS_KV_DRAFT)
                for (int64_t i = 0; i < tb->cap; i++) {
                    uint32_t pg = k == DS_KV_WIN ? tb->win[i] : tb->drf[i];
                    if (pg != DS_KV_NONE) want[pg]++;
                }
            if (k == DS_KV_STATE && tb->state != DS_KV_NONE) want[tb->state]++;
        }
        int rc = 0;
        for (uint32_t i = 0; i < km->n_free[k]; i++) {
            uint32_t id = km->freel[k][i];
            if (in_free[id]++) { snprintf(msg, len, "kind %d page %u twice on the free list", k, id); rc = -1; }
        }
        uint64_t used = 0;
        for (uint32_t i = 0; i < n && !rc; i++) {
            if (km->ref[k][i] != want[i]) {
                snprintf(msg, len, "kind %d page %u: refcount %u, tables hold %u", k, i, km->ref[k][i], want[i]);
                rc = -1;
                break;
            }
            bool cached = k == DS_KV_CKV ? km->pc.e[i].valid : tail_kind(k) >= 0 ? km->pc.t[tail_kind(k)].owner[i] >= 0 : false;
            bool expect_free = want[i] == 0 && !cached;
            if (expect_free != (in_free[i] != 0)) {
                snprintf(msg, len, "kind %d page %u: free-list membership %d, expected %d", k, i, in_free[i], expect_free);
                rc = -1;
            }
            if (k == DS_KV_CKV && want[i]) used++;
        }
        if (!rc && k == DS_KV_CKV && used != km->blocks_used) {
            snprintf(msg, len, "blocks_used %llu, tables hold %llu", (unsigned long long)km->blocks_used, (unsigned long long)used);
            rc = -1;
        }
        free(want);
        free(in_free);
        if (rc) return -1;
    }
    return 0;
}
