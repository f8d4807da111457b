/* Prefix cache index (SERVING.md §7): chained 128-bit block hashes, token verification, and
 * the LRU order of evictable blocks and window tails.
 *
 * Why it is built this way: a cached block *is* a CKV/IDX block of the pool, so entries are
 * indexed by block id (at most one entry per block, no separate allocation) and the hash table
 * maps a chain hash to that block id.  Each entry keeps its block's token ids so that a hit is
 * confirmed by comparison — a hash collision can never cause reuse.  The WIN page that holds a
 * block's window rows ("tail") is attached to the entry when the request that wrote it still held
 * it at registration; tails are what make a hit usable (§7.2 condition 2).  The DRAFT page that holds
 * the block's draft ring rows is a second, optional tail: with it an adopted prefix keeps
 * speculating at once (the ring rows, like the window rows, are a function of the prefix tokens
 * alone), without it the hit is still valid and the draft re-warms.  Both tail kinds share one
 * implementation (ds_pc_tails), indexed by ds_pc_tail_kind.
 *
 * Reference counts live in the KV manager; this module only keeps evictable items (reference
 * count 0) in two LRU lists, one per page kind.  A request releases its pages deepest block first,
 * so inside one release the deeper block sits nearer the head and is evicted first (§7.4 tie
 * rule).  Hashes use SHA-256 (OpenSSL) truncated to 128 bits: fast enough for one hash per
 * 128-token block and free of the weak-hash collision worries. */
#ifndef DS_ENGINE_PREFIX_CACHE_H
#define DS_ENGINE_PREFIX_CACHE_H
#include "base/common.h"

#define DS_PC_HASH_BYTES 16

typedef enum { DS_PC_WIN = 0, DS_PC_DRF, DS_PC_TAIL_KINDS } ds_pc_tail_kind;

typedef struct ds_pc_entry {
    uint8_t hash[DS_PC_HASH_BYTES];
    uint32_t tail[DS_PC_TAIL_KINDS];   /* attached WIN / DRAFT tail pages or DS_KV_NONE */
    int32_t depth;         /* block index in its chain */
    int32_t next;          /* hash bucket chain (block ids), -1 = end */
    int32_t lru_prev, lru_next;
    bool valid, in_lru;
} ds_pc_entry;

/* The tail pages of one kind: owner entry and an LRU list of the evictable ones. */
typedef struct ds_pc_tails {
    uint32_t n;              /* pages of the kind */
    int32_t *owner;          /* [n] -> block id whose tail it is, -1 */
    int32_t *prev, *next;    /* LRU links, [n] */
    uint8_t *in_lru;
    int32_t head, tail;
    uint32_t n_lru;
} ds_pc_tails;

typedef struct ds_prefix_cache {
    int bs;
    uint32_t n_blocks;
    ds_pc_entry *e;          /* [n_blocks] */
    int32_t *tokens;         /* [n_blocks][bs] token ids of each entry */
    int32_t *buckets;        /* [n_buckets] -> block id */
    uint32_t n_buckets;
    ds_pc_tails t[DS_PC_TAIL_KINDS];
    int32_t lru_head, lru_tail;
    uint32_t n_entries, n_lru;
} ds_prefix_cache;

void ds_pc_init(ds_prefix_cache *pc, uint32_t n_blocks, uint32_t n_win, uint32_t n_drf, int bs);
void ds_pc_free(ds_prefix_cache *pc);

/* hash_{-1}: the seed from a model + KV-format fingerprint string. */
void ds_pc_seed_hash(const char *fingerprint, uint8_t out[DS_PC_HASH_BYTES]);
/* hash_i = H(hash_{i-1}, tokens of block i, extra) — salt only for block 0 (NULL for none). */
void ds_pc_block_hash(const uint8_t parent[DS_PC_HASH_BYTES], const int32_t *tokens, int bs, const char *salt,
                      uint8_t out[DS_PC_HASH_BYTES]);

/* Block id of a valid entry with this hash and these tokens, or -1. */
int32_t ds_pc_lookup(const ds_prefix_cache *pc, const uint8_t hash[DS_PC_HASH_BYTES], const int32_t *tokens);
/* Register block `blk` (refcount > 0, full, immutable from now on).  Returns false (and
 * registers nothing) when an entry with the same hash exists already. */
bool ds_pc_insert(ds_prefix_cache *pc, uint32_t blk, const uint8_t hash[DS_PC_HASH_BYTES], const int32_t *tokens,
                  int depth);
/* Remove an entry (eviction or reset); its tails are detached and returned in tails[] (DS_KV_NONE
 * where none). */
void ds_pc_remove(ds_prefix_cache *pc, uint32_t blk, uint32_t tails[DS_PC_TAIL_KINDS]);
void ds_pc_attach_tail(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t blk, uint32_t page);
/* Detach a tail from its entry (the tail page is being evicted). */
void ds_pc_detach_tail(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t page);

/* LRU lists of evictable (refcount 0) items.  push = most recent (tail end). */
void ds_pc_lru_push(ds_prefix_cache *pc, uint32_t blk);
void ds_pc_lru_remove(ds_prefix_cache *pc, uint32_t blk);
int32_t ds_pc_lru_oldest(const ds_prefix_cache *pc);
void ds_pc_tlru_push(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t page);
void ds_pc_tlru_remove(ds_prefix_cache *pc, ds_pc_tail_kind k, uint32_t page);
int32_t ds_pc_tlru_oldest(const ds_prefix_cache *pc, ds_pc_tail_kind k);

#endif
