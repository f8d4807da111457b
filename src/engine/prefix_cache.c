/* Prefix cache index (see prefix_cache.h). */
#include "engine/prefix_cache.h"
#include "base/sha256.h"
#include "model/kvcache.h"
#include <stdlib.h>
#include <string.h>

void ds_pc_init(ds_prefix_cache *pc, uint32_t n_blocks, uint32_t n_win, int bs) {
    memset(pc, 0, sizeof *pc);
    pc->bs = bs;
    pc->n_blocks = n_blocks;
    pc->n_win = n_win;
    pc->e = ds_xcalloc(n_blocks ? n_blocks : 1, sizeof *pc->e);
    pc->tokens = ds_xmalloc(sizeof(int32_t) * (size_t)(n_blocks ? n_blocks : 1) * (size_t)bs);
    uint32_t nb = 1024;
    while (nb < 2 * n_blocks) nb *= 2;
    pc->n_buckets = nb;
    pc->buckets = ds_xmalloc(sizeof(int32_t) * nb);
    for (uint32_t i = 0; i < nb; i++) pc->buckets[i] = -1;
    pc->win_owner = ds_xmalloc(sizeof(int32_t) * (n_win ? n_win : 1));
    pc->wprev = ds_xmalloc(sizeof(int32_t) * (n_win ? n_win : 1));
    pc->wnext = ds_xmalloc(sizeof(int32_t) * (n_win ? n_win : 1));
    pc->win_in_lru = ds_xcalloc(n_win ? n_win : 1, 1);
    for (uint32_t i = 0; i < n_win; i++) pc->win_owner[i] = -1;
    for (uint32_t i = 0; i < n_blocks; i++) {
        pc->e[i].win = DS_KV_NONE;
        pc->e[i].next = -1;
    }
    pc->lru_head = pc->lru_tail = pc->wlru_head = pc->wlru_tail = -1;
}

void ds_pc_free(ds_prefix_cache *pc) {
    free(pc->e);
    free(pc->tokens);
    free(pc->buckets);
    free(pc->win_owner);
    free(pc->wprev);
    free(pc->wnext);
    free(pc->win_in_lru);
    memset(pc, 0, sizeof *pc);
}

void ds_pc_seed_hash(const char *fingerprint, uint8_t out[DS_PC_HASH_BYTES]) {
    ds_sha256 *h = ds_sha256_new();
    ds_sha256_update(h, "dsflash-prefix-v1\n", 18);
    ds_sha256_update(h, fingerprint, strlen(fingerprint));
    uint8_t d[DS_SHA256_LEN];
    ds_sha256_final(h, d);
    ds_sha256_free(h);
    memcpy(out, d, DS_PC_HASH_BYTES);
}

void ds_pc_block_hash(const uint8_t parent[DS_PC_HASH_BYTES], const int32_t *tokens, int bs, const char *salt,
                      uint8_t out[DS_PC_HASH_BYTES]) {
    ds_sha256 *h = ds_sha256_new();
    ds_sha256_update(h, parent, DS_PC_HASH_BYTES);
    /* ids as little-endian 32-bit words, so the hash does not depend on the host */
    uint8_t buf[4 * 256];
    for (int i = 0; i < bs; i += 256) {
        int n = DS_MIN(256, bs - i);
        for (int j = 0; j < n; j++) {
            uint32_t v = (uint32_t)tokens[i + j];
            buf[4 * j] = (uint8_t)v;
            buf[4 * j + 1] = (uint8_t)(v >> 8);
            buf[4 * j + 2] = (uint8_t)(v >> 16);
            buf[4 * j + 3] = (uint8_t)(v >> 24);
        }
        ds_sha256_update(h, buf, (size_t)n * 4);
    }
    if (salt) {
        /* length-prefixed so a salt can never be confused with token bytes */
        uint64_t n = strlen(salt);
        ds_sha256_update(h, "salt", 4);
        ds_sha256_update(h, &n, sizeof n);
        ds_sha256_update(h, salt, n);
    }
    uint8_t d[DS_SHA256_LEN];
    ds_sha256_final(h, d);
    ds_sha256_free(h);
    memcpy(out, d, DS_PC_HASH_BYTES);
}

static uint32_t bucket_of(const ds_prefix_cache *pc, const uint8_t hash[DS_PC_HASH_BYTES]) {
    uint64_t v;
    memcpy(&v, hash, sizeof v);
    return (uint32_t)(v & (pc->n_buckets - 1));
}

int32_t ds_pc_lookup(const ds_prefix_cache *pc, const uint8_t hash[DS_PC_HASH_BYTES], const int32_t *tokens) {
    for (int32_t b = pc->buckets[bucket_of(pc, hash)]; b >= 0; b = pc->e[b].next) {
        if (memcmp(pc->e[b].hash, hash, DS_PC_HASH_BYTES)) continue;
        if (memcmp(pc->tokens + (size_t)b * (size_t)pc->bs, tokens, sizeof(int32_t) * (size_t)pc->bs)) continue;
        return b;
    }
    return -1;
}

bool ds_pc_insert(ds_prefix_cache *pc, uint32_t blk, const uint8_t hash[DS_PC_HASH_BYTES], const int32_t *tokens,
                  int depth) {
    if (pc->e[blk].valid) return false;
    uint32_t bk = bucket_of(pc, hash);
    for (int32_t b = pc->buckets[bk]; b >= 0; b = pc->e[b].next)
        if (!memcmp(pc->e[b].hash, hash, DS_PC_HASH_BYTES)) return false;
    ds_pc_entry *e = &pc->e[blk];
    memcpy(e->hash, hash, DS_PC_HASH_BYTES);
    memcpy(pc->tokens + (size_t)blk * (size_t)pc->bs, tokens, sizeof(int32_t) * (size_t)pc->bs);
    e->depth = depth;
    e->win = DS_KV_NONE;
    e->valid = true;
    e->in_lru = false;
    e->next = pc->buckets[bk];
    pc->buckets[bk] = (int32_t)blk;
    pc->n_entries++;
    return true;
}

uint32_t ds_pc_remove(ds_prefix_cache *pc, uint32_t blk) {
    ds_pc_entry *e = &pc->e[blk];
    if (!e->valid) return DS_KV_NONE;
    if (e->in_lru) ds_pc_lru_remove(pc, blk);
    int32_t *link = &pc->buckets[bucket_of(pc, e->hash)];
    while (*link >= 0 && *link != (int32_t)blk) link = &pc->e[*link].next;
    if (*link == (int32_t)blk) *link = e->next;
    e->next = -1;
    e->valid = false;
    pc->n_entries--;
    uint32_t w = e->win;
    if (w != DS_KV_NONE) pc->win_owner[w] = -1;
    e->win = DS_KV_NONE;
    return w;
}

void ds_pc_attach_win(ds_prefix_cache *pc, uint32_t blk, uint32_t win) {
    if (!pc->e[blk].valid || pc->e[blk].win != DS_KV_NONE || pc->win_owner[win] >= 0) return;
    pc->e[blk].win = win;
    pc->win_owner[win] = (int32_t)blk;
}

void ds_pc_detach_win(ds_prefix_cache *pc, uint32_t win) {
    int32_t b = pc->win_owner[win];
    if (b >= 0) pc->e[b].win = DS_KV_NONE;
    pc->win_owner[win] = -1;
}

void ds_pc_lru_push(ds_prefix_cache *pc, uint32_t blk) {
    ds_pc_entry *e = &pc->e[blk];
    if (e->in_lru) return;
    e->lru_prev = pc->lru_tail;
    e->lru_next = -1;
    if (pc->lru_tail >= 0) pc->e[pc->lru_tail].lru_next = (int32_t)blk;
    else pc->lru_head = (int32_t)blk;
    pc->lru_tail = (int32_t)blk;
    e->in_lru = true;
    pc->n_lru++;
}

void ds_pc_lru_remove(ds_prefix_cache *pc, uint32_t blk) {
    ds_pc_entry *e = &pc->e[blk];
    if (!e->in_lru) return;
    if (e->lru_prev >= 0) pc->e[e->lru_prev].lru_next = e->lru_next;
    else pc->lru_head = e->lru_next;
    if (e->lru_next >= 0) pc->e[e->lru_next].lru_prev = e->lru_prev;
    else pc->lru_tail = e->lru_prev;
    e->in_lru = false;
    pc->n_lru--;
}

int32_t ds_pc_lru_oldest(const ds_prefix_cache *pc) { return pc->lru_head; }

void ds_pc_wlru_push(ds_prefix_cache *pc, uint32_t w) {
    if (pc->win_in_lru[w]) return;
    pc->wprev[w] = pc->wlru_tail;
    pc->wnext[w] = -1;
    if (pc->wlru_tail >= 0) pc->wnext[pc->wlru_tail] = (int32_t)w;
    else pc->wlru_head = (int32_t)w;
    pc->wlru_tail = (int32_t)w;
    pc->win_in_lru[w] = 1;
    pc->n_wlru++;
}

void ds_pc_wlru_remove(ds_prefix_cache *pc, uint32_t w) {
    if (!pc->win_in_lru[w]) return;
    if (pc->wprev[w] >= 0) pc->wnext[pc->wprev[w]] = pc->wnext[w];
    else pc->wlru_head = pc->wnext[w];
    if (pc->wnext[w] >= 0) pc->wprev[pc->wnext[w]] = pc->wprev[w];
    else pc->wlru_tail = pc->wprev[w];
    pc->win_in_lru[w] = 0;
    pc->n_wlru--;
}

int32_t ds_pc_wlru_oldest(const ds_prefix_cache *pc) { return pc->wlru_head; }
