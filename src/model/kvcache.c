/* Page layouts, pools and the simple allocator (see kvcache.h for why they are built this way). */
#define _GNU_SOURCE
#include "model/kvcache.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void ds_kv_layout_init(ds_kv_layout *lay, const ds_config *cfg, int bs) {
    memset(lay, 0, sizeof *lay);
    lay->bs = bs;
    lay->d_h = cfg->head_dim;
    lay->d_idx = cfg->index_head_dim;
    lay->n_layers = cfg->n_layers;
    lay->n_draft = cfg->n_mtp_layers;
    for (int l = 0; l < DS_MAX_LAYERS; l++) lay->src_of_layer[l] = -1;
    uint64_t ckv = 0, idx = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (cfg->roles[l].role != DS_ROLE_FULL) continue;
        int s = lay->n_src++;
        int r = cfg->roles[l].ratio;
        lay->src_layer[s] = l;
        lay->src_ratio[s] = r;
        lay->src_of_layer[l] = s;
        lay->ckv_off[s] = ckv;
        lay->idx_off[s] = idx;
        uint64_t rows = (uint64_t)(bs / r);
        ckv += rows * (uint64_t)cfg->head_dim * 2u;
        idx += rows * (uint64_t)cfg->index_head_dim * 2u;
        lay->state_of_src[s] = r >= 2 ? lay->n_state_src++ : -1;
    }
    lay->page_bytes[DS_KV_CKV] = ckv;
    lay->page_bytes[DS_KV_IDX] = idx;
    lay->page_bytes[DS_KV_WIN] = (uint64_t)cfg->n_layers * (uint64_t)bs * (uint64_t)cfg->head_dim * 2u;
    lay->page_bytes[DS_KV_DRAFT] = (uint64_t)cfg->n_mtp_layers * (uint64_t)bs * (uint64_t)cfg->head_dim * 2u;
    lay->page_bytes[DS_KV_STATE] = (uint64_t)lay->n_state_src * DS_STATE_SLOTS * 2u * (uint64_t)cfg->head_dim * 4u;
}

int ds_kv_pools_create(ds_kv_pools *p, const ds_kv_layout *lay, const uint32_t n_pages[DS_KV_KINDS], ds_error *err) {
    memset(p, 0, sizeof *p);
    p->lay = *lay;
    for (int k = 0; k < DS_KV_KINDS; k++) {
        p->n_pages[k] = n_pages[k];
        uint64_t bytes = (uint64_t)n_pages[k] * lay->page_bytes[k];
        p->mapped_bytes[k] = bytes;
        if (bytes) {
            void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) {
                ds_kv_pools_destroy(p);
                return ds_fail(err, "E_KV_POOL", "KV pool kind %d: cannot map %llu bytes", k, (unsigned long long)bytes);
            }
            p->base[k] = m;
        }
        p->free_list[k] = ds_xmalloc(sizeof(uint32_t) * (n_pages[k] ? n_pages[k] : 1));
        p->n_free[k] = n_pages[k];
        /* pop from the end: low-first hands out page 0 first */
        for (uint32_t i = 0; i < n_pages[k]; i++) p->free_list[k][i] = n_pages[k] - 1 - i;
    }
    return 0;
}

void ds_kv_pools_destroy(ds_kv_pools *p) {
    for (int k = 0; k < DS_KV_KINDS; k++) {
        if (p->base[k]) munmap(p->base[k], p->mapped_bytes[k]);
        free(p->free_list[k]);
    }
    memset(p, 0, sizeof *p);
}

int ds_kv_pools_selftest(ds_kv_pools *p, char *report, size_t len) {
    uint64_t total = 0, highest = 0;
    for (int k = 0; k < DS_KV_KINDS; k++) {
        uint64_t pb = p->lay.page_bytes[k];
        if ((uint64_t)p->n_pages[k] * pb != p->mapped_bytes[k]) {
            snprintf(report, len, "KV addressing self-test: FAIL (kind %d: %u pages x %llu B != %llu B mapped)", k,
                     p->n_pages[k], (unsigned long long)pb, (unsigned long long)p->mapped_bytes[k]);
            return -1;
        }
        total += p->mapped_bytes[k];
        if (!p->n_pages[k] || pb < 128) continue;
        uint32_t probe[3] = {0, p->n_pages[k] / 2, p->n_pages[k] - 1};
        for (int i = 0; i < 3; i++) {
            uint8_t *pg = ds_kv_page(p, (ds_kv_kind)k, probe[i]);
            uint8_t save[128];
            memcpy(save, pg, 64);
            memcpy(save + 64, pg + pb - 64, 64);
            uint64_t pat[8];
            for (int j = 0; j < 8; j++) pat[j] = ((uint64_t)k << 56) ^ ((uint64_t)probe[i] << 8) ^ (uint64_t)j;
            memcpy(pg, pat, 64);
            memcpy(pg + pb - 64, pat, 64);
            int ok = !memcmp(ds_kv_page(p, (ds_kv_kind)k, probe[i]), pat, 64) &&
                     !memcmp(ds_kv_page(p, (ds_kv_kind)k, probe[i]) + pb - 64, pat, 64);
            memcpy(pg, save, 64);
            memcpy(pg + pb - 64, save + 64, 64);
            if (!ok) {
                snprintf(report, len, "KV addressing self-test: FAIL (kind %d page %u)", k, probe[i]);
                return -1;
            }
            uint64_t off = (uint64_t)probe[i] * pb;
            if (off > highest) highest = off;
        }
    }
    snprintf(report, len, "KV addressing self-test: PASS (pool bytes %llu, highest page offset 0x%llx)",
             (unsigned long long)total, (unsigned long long)highest);
    return 0;
}

static int simple_alloc(void *ctx, ds_kv_kind kind, uint32_t *page) {
    ds_kv_pools *p = ctx;
    if (!p->n_free[kind]) return -1;
    if (p->high_first) {
        /* take the highest free id */
        uint32_t best = 0;
        for (uint32_t i = 1; i < p->n_free[kind]; i++)
            if (p->free_list[kind][i] > p->free_list[kind][best]) best = i;
        *page = p->free_list[kind][best];
        p->free_list[kind][best] = p->free_list[kind][--p->n_free[kind]];
    } else {
        *page = p->free_list[kind][--p->n_free[kind]];
    }
    return 0;
}
static void simple_release(void *ctx, ds_kv_kind kind, uint32_t page) {
    ds_kv_pools *p = ctx;
    p->free_list[kind][p->n_free[kind]++] = page;
}
const ds_kv_alloc_ops ds_kv_simple_ops_template = {NULL, simple_alloc, simple_release};
ds_kv_alloc_ops ds_kv_simple_ops(ds_kv_pools *p) {
    ds_kv_alloc_ops o = ds_kv_simple_ops_template;
    o.ctx = p;
    return o;
}

void ds_block_tab_init(ds_block_tab *t) { *t = (ds_block_tab){.state = DS_KV_NONE}; }

void ds_block_tab_grow(ds_block_tab *t, int64_t nblocks) {
    if (nblocks <= t->cap) return;
    int64_t cap = t->cap ? t->cap : 8;
    while (cap < nblocks) cap *= 2;
    t->ckv = ds_xrealloc(t->ckv, sizeof(uint32_t) * (size_t)cap);
    t->idx = ds_xrealloc(t->idx, sizeof(uint32_t) * (size_t)cap);
    t->win = ds_xrealloc(t->win, sizeof(uint32_t) * (size_t)cap);
    t->drf = ds_xrealloc(t->drf, sizeof(uint32_t) * (size_t)cap);
    for (int64_t b = t->cap; b < cap; b++) t->ckv[b] = t->idx[b] = t->win[b] = t->drf[b] = DS_KV_NONE;
    t->cap = cap;
}

void ds_block_tab_free(ds_block_tab *t) {
    free(t->ckv);
    free(t->idx);
    free(t->win);
    free(t->drf);
    ds_block_tab_init(t);
}
