/* Private layout of ds_tokenizer, shared by the loader (tokenizer_load.c), the encoder
 * (tokenizer_encode.c) and the decoder (tokenizer_decode.c).  Not part of the public API. */
#ifndef DS_TOKENIZER_INTERNAL_H
#define DS_TOKENIZER_INTERNAL_H
#include "tokenizer/tokenizer.h"
#include "tokenizer/uregex.h"
#include <pthread.h>

/* Open-addressing map from a byte string to an int32 (keys borrowed from the owner). */
typedef struct ds_strmap {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    uint32_t cap;   /* power of two */
    uint32_t n;
} ds_strmap;
void ds_strmap_init(ds_strmap *m, uint32_t expected);
void ds_strmap_free(ds_strmap *m);
/* Insert; returns false (and changes nothing) when the key is already present. */
bool ds_strmap_put(ds_strmap *m, const char *key, uint32_t len, int32_t val);
int32_t ds_strmap_get(const ds_strmap *m, const char *key, uint32_t len); /* -1 if absent */
uint64_t ds_hash_bytes(const void *p, size_t n);

/* Merge table: (left id, right id) → (rank, merged id). */
typedef struct merge_map {
    uint64_t *keys;     /* (left << 32 | right) + 1; 0 = empty */
    int32_t *rank, *merged;
    uint32_t cap, n;
} merge_map;

/* Byte trie over added-token literals for leftmost-longest matching. */
typedef struct lit_trie {
    uint64_t *keys;     /* (node << 8 | byte) + 1; 0 = empty */
    int32_t *child;
    uint32_t cap, n;
    int32_t *term;      /* per node: index into the added table, or -1 */
    int nnodes, capnodes;
    bool first[256];    /* bytes that can start a literal */
} lit_trie;
void ds_lit_trie_init(lit_trie *t);
void ds_lit_trie_add(lit_trie *t, const char *s, size_t len, int32_t value);
/* Longest literal starting at s[0..n): returns its value and length, or -1. */
int32_t ds_lit_trie_longest(const lit_trie *t, const char *s, size_t n, size_t *mlen);
void ds_lit_trie_free(lit_trie *t);

typedef struct added_token {
    char *content;
    size_t len;
    int32_t id;
    bool special, normalized, lstrip, rstrip;
} added_token;

enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
typedef struct split_step {
    ds_uregex *re;
    int behavior;
    bool invert;
} split_step;

enum { NORM_NFC = 1, NORM_NFD, NORM_NFKC, NORM_NFKD };

/* Word cache: pre-token bytes → ids, sharded, each shard behind its own mutex. */
#define DS_WCACHE_SHARDS 16
typedef struct wcache_shard {
    pthread_mutex_t mu;
    uint64_t *hash;        /* 0 = empty */
    uint32_t *off;         /* into arena: [u32 keylen][u32 nids][key bytes][pad][ids] */
    uint32_t cap, n;
    char *arena;
    size_t arena_n, arena_cap;
} wcache_shard;

struct ds_tokenizer {
    char *path;
    int vocab_size;               /* 1 + max id */
    /* id tables (size vocab_size) */
    char **id_str;                /* stored string (byte-level form or literal), NULL = hole */
    uint32_t *id_bytes_off;       /* decoded bytes of each id, in bytes_pool */
    uint32_t *id_bytes_len;
    uint8_t *bytes_pool;
    int8_t *id_added;             /* 0 plain, 1 added, 2 added special */
    /* model */
    ds_strmap vocab;              /* byte-level string → id (model vocabulary) */
    merge_map merges;
    int32_t byte_id[256];         /* id of the single-byte symbol for each byte */
    bool ignore_merges;
    /* added tokens */
    added_token *added;
    int n_added;
    ds_strmap added_map;          /* literal → id */
    lit_trie trie_raw;            /* non-normalized literals (matched first, on raw text) */
    lit_trie trie_norm;           /* normalized literals (matched on normalized pieces) */
    int n_raw, n_norm;
    /* pipeline */
    int normalizers[8];
    int n_normalizers;
    split_step *splits;
    int n_splits;
    /* cache */
    wcache_shard cache[DS_WCACHE_SHARDS];
};

/* The GPT-2 byte ↔ character table of the ByteLevel pre-tokenizer/decoder. */
extern uint32_t ds_byte_to_char[256];
int ds_char_to_byte(uint32_t cp);   /* -1 when cp is not one of the 256 characters */
void ds_bytelevel_init(void);

/* Encoder internals (tokenizer_encode.c).  ds_tokenizer_normalize applies the configured
 * normalizers (a copy when there are none); the result is malloc'd. */
char *ds_tokenizer_normalize(const ds_tokenizer *t, const char *s, size_t n, size_t *out_len);
void ds_wcache_init(ds_tokenizer *tok);
void ds_wcache_free(ds_tokenizer *tok);

#endif
