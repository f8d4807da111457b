/* Prefix cache index (see prefix_cache.h). */
#include "engine/prefix_cache.h"
#include "base/sha256.h"
#include "model/kvcache.h"
#include <stdlib.h>
#include <string.h>

static void tails_init(ds_pc_tails *t, uint32_t n) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->owner = ds_xmalloc(sizeof(int32_t) * (n ? n : 1));
    t->prev = ds_xmalloc(sizeof(int32_t) * (n ? n : 1));
    t->next = ds_xmalloc(sizeof(int32_t) * (n ? n : 1));
    t->in_lru = ds_xcalloc(n ? n : 1, 1);
    for (uint32_t i = 0; i < n; i++) t->owner[i] = -1;
    t->head = t->tail = -1;
}

static void tails_free(ds_pc_tails *t) {
    free(t->owner);
    free(t->prev);
    free(t->next);
    free(t->in_lru);
}

void ds_pc_init(ds_prefix_cache *pc, uint32_t n_blocks, uint32_t n_win, uint32_t n_drf, int bs) {
    memset(pc, 0, sizeof *pc);
    pc->bs = bs;
    pc->n_blocks = n_blocks;
    pc->e = ds_xcalloc(n_blocks ? n_blocks : 1, sizeof *pc->e);
    pc->tokens = ds_xmalloc(sizeof(int32_t) * (size_t)(n_blocks ? n_blocks : 1) * (size_t)bs);
    uint32_t nb = 1024;
    while (nb < 2 * n_blocks) nb *= 2;
    pc->n_buckets = nb;
    pc->buckets = ds_xmalloc(sizeof(int32_t) * nb);
    for (uint32_t i = 0; i < nb; i++) pc->buckets[i] = -1;
    tails_init(&pc->t[DS_PC_WIN], n_win);
    tails_init(&pc->t[DS_PC_DRF], n_drf);
    for (uint32_t i = 0; i < n_blocks; i++) {
        for (int k = 0; k < DS_PC_TAIL_KINDS; k++) pc->e[i].tail[k] = DS_KV_NONE;
        pc->e[i].next = -1;
    }
    pc->lru_head = pc->lru_tail = -1;
}

void ds_pc_free(ds_prefix_cache *pc) {
    free(pc->e);
    free(pc->tokens);
    free(pc->buckets);
    for (int k = 0; k < DS_PC_TAIL_KINDS; k++) tails_free(&pc->t[k]);
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
    for (int k = 0; k < DS_PC_TAIL_KINDS; k++) e->tail[k] = DS_KV_NONE;
    e->valid = true;
    e->in_lru = false;
    e->next = pc->buckets[bk];
    pc->buckets[bk] = (int32_t)blk;
    pc->n_entries++;
    return true;
}

void ds_pc_remove(ds_prefix_cache *pc, uint32_t blk, uint32_t tails[DS_PC_TAIL_KINDS]) {
    ds_pc_entry *e = &pc->e[blk];
    for (int k = 0; k < DS_PC_TAIL_KINDS; k++) tails[k] = DS_KV_NONE;
    if (!e->valid) return;
    if (e->in_lru) ds_pc_lru_remove(pc, blk);
    int32_t *link = &pc->buckets[bucket_of(pc, e->hash)];
    while (*link >= 0 && *link != (int32_t)blk) link = &pc->e[*link].next;
    if (*link == (int32_t)blk) *link = e->next;
    e->next = -1;
    e->valid = false;
    pc->n_entries--;
    for (int k = 0; k < DS_PC_TAIL_KINDS; k++) {
        uint32_t w = e->tail[k];
        if (w != DS_KV_NONE) pc->t[k].owner[w] = -1;
        e->tail[k] = DS_KV_NONE;
        tails[k] = w;
    }
}

void ds_pc_attach_tail(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t blk, uint32_t page) {
    if (!pc->e[blk].valid || pc->e[blk].tail[k] != DS_KV_NONE || page >= pc->t[k].n || pc->t[k].owner[page] >= 0) return;
    pc->e[blk].tail[k] = page;
    pc->t[k].owner[page] = (int32_t)blk;
}

void ds_pc_detach_tail(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t page) {
    int32_t b = pc->t[k].owner[page];
    if (b >= 0) pc->e[b].tail[k] = DS_KV_NONE;
    pc->t[k].owner[page] = -1;
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

void ds_pc_tlru_push(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t w) {
    ds_pc_tails *t = &pc->t[k];
    if (t->in_lru[w]) return;
    t->prev[w] = t->tail;
    t->next[w] = -1;
    if (t->tail >= 0) t->next[t->tail] = (int32_t)w;
    else t->head = (int32_t)w;
    t->tail = (int32_t)w;
    t->in_lru[w] = 1;
    t->n_lru++;
}

void ds_pc_tlru_remove(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t w) {
    ds_pc_tails *t = &pc->t[k];
    if (!t->in_lru[w]) return;
    if (t->prev[w] >= 0) t->next[t->prev[w]] = t->next[w];
    else t->head = t->next[w];
    if (t->next[w] >= 0) t->prev[t->next[w]] = t->prev[w];
    else t->tail = t->prev[w];
    t->in_lru[w] = 0;
    t->n_lru--;
}

int32_t ds_pc_tlru_oldest(const ds_prefix_cache *pc, ds_pc_tail_kind k) { return pc->t[k].head; }
