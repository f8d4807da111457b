/* Fast-tier attention for a block of query vectors at once: every key row is loaded once per block
 * instead of once per query.
 *
 * Why a union list with per-query indices: the engine (attention.c) fills a block with the heads of
 * one token row — every head of a row attends the same key list (one latent KV per position), so
 * there each query takes every key — but the tile also serves queries with different lists (e.g.
 * consecutive rows of one head, each with its own window and selected entries): the block walks the
 * union of the lists in an order that is, restricted to any one query, that query's own key order
 * (window positions ascending, then compressed entries ascending).  Each (query, key) score and each
 * query's value sum is then computed in exactly the order of ds_attn_head_fast: an output has the
 * same bits whether it runs alone or in any block, so chunking, batching, head grouping and thread
 * count change nothing (tests/unit/test_attn_tile.c checks this bit for bit).  A "row" below is one
 * query of the block. */
#ifndef DS_MODEL_ATTN_TILE_H
#define DS_MODEL_ATTN_TILE_H
#include <stddef.h>
#include <stdint.h>
#include "base/bf16.h"

#define DS_ATTN_QB 8            /* query rows per block (16 zmm accumulators in the score tile) */

/* One block: B ≤ DS_ATTN_QB rows (queries, each with its own sink) against nu union keys. */
typedef struct ds_attn_block {
    int B, dh;                  /* rows, head dim (a multiple of 32) */
    const ds_bf16 *q[DS_ATTN_QB];  /* query of each row (roped), dh values */
    ds_bf16 *o[DS_ATTN_QB];     /* output of each row, dh values (before the inverse RoPE) */
    int nk[DS_ATTN_QB];         /* keys in each row's own list */
    float sink[DS_ATTN_QB];     /* each row's attention sink (its head's) */
    float scale;
    int nu;                     /* union keys */
    const ds_bf16 *const *keys; /* [nu] */
    const int32_t *idx;         /* [nu][DS_ATTN_QB]: index of key u in row r's list, -1 = not in it */
    int dense;                  /* 1: every row's list is the whole union in its order (idx not read) */
} ds_attn_block;

/* Scratch of one thread (the caller carves it from the step arena). */
typedef struct ds_attn_scratch {
    int max_keys;               /* capacity of one row's score list */
    float *sc;                  /* [DS_ATTN_QB][max_keys] */
    float *qf;                  /* [DS_ATTN_QB][dh] queries in fp32 */
    float *acc;                 /* [DS_ATTN_QB][dh] */
    float *w;                   /* [max_u][DS_ATTN_QB] value weights, 0 where a row skips the key */
    uint32_t *mask;             /* [max_u][DS_ATTN_QB] all ones where the row takes the key */
    uint8_t *full;              /* [max_u] 1 when every row of the block takes the key */
                                /* (w, mask, full: sparse blocks only; a dense block may leave them NULL) */
} ds_attn_scratch;

/* o[r] = bf16(attention of row r), bit-identical to ds_attn_head_fast(q[r], row r's keys in its
 * order, nk[r], sink[r], scale, dh, ...) for every r < B. */
void ds_attn_block_fast(const ds_attn_block *b, const ds_attn_scratch *s);

#endif
