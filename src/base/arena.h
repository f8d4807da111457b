/* Per-step scratch arena: a bump allocator that a forward step takes all its temporaries from.
 *
 * Why: a step used to call malloc/free hundreds of times (every sublayer, every pool task), which
 * costs time, fragments the heap under concurrency and hid unchecked NULLs.  An arena is sized
 * once (at load, from the config and the rows a step is expected to carry), handed to one stepping
 * thread at a time, rewound with marks as each sublayer finishes (stack discipline) and reset at
 * the end of the step, so a steady-state step calls no allocator at all.  When a step needs more
 * than the arena holds, a new block is added for the rest of that step and logged; at the next
 * reset the blocks are merged into one of the combined size, so the growth happens once.
 *
 * Every allocation is 64-byte aligned (cache line, and what the AVX-512 kernels like) and its size
 * is rounded up to 64, so a merged block always fits a step the split blocks fitted.  Exhausted
 * memory aborts like ds_xmalloc (no NULL to check).  Not thread-safe: pool tasks get their own
 * per-thread slices carved out by the stepping thread before the parallel region. */
#ifndef DS_BASE_ARENA_H
#define DS_BASE_ARENA_H
#include <stddef.h>

#define DS_ARENA_ALIGN 64
#define DS_ARENA_MAX_BLOCKS 32

typedef struct ds_arena_block {
    unsigned char *base;
    size_t cap, used;
} ds_arena_block;

typedef struct ds_arena {
    const char *name;                   /* for the growth log line */
    ds_arena_block blk[DS_ARENA_MAX_BLOCKS];
    int n_blk, cur;                     /* blocks held; the one allocations come from */
    size_t peak;                        /* largest total in use since the last reset */
    unsigned grows;                     /* blocks added since start (growth events) */
} ds_arena;

typedef struct ds_arena_mark {
    int blk;
    size_t used;
} ds_arena_mark;

/* An arena of one block of `bytes` (0: no block until the first allocation). */
void ds_arena_init(ds_arena *a, size_t bytes, const char *name);
void ds_arena_free(ds_arena *a);
/* 64-byte aligned memory for `bytes` (a valid pointer for 0 too); never NULL. */
void *ds_arena_alloc(ds_arena *a, size_t bytes);
/* Same, zero-filled. */
void *ds_arena_zalloc(ds_arena *a, size_t bytes);
/* Rewind to a mark: everything allocated after it is released (stack discipline). */
ds_arena_mark ds_arena_mark_get(const ds_arena *a);
void ds_arena_release(ds_arena *a, ds_arena_mark m);
/* Release everything; if the last use needed extra blocks, merge them into one block. */
void ds_arena_reset(ds_arena *a);
/* Bytes the arena holds (all blocks). */
size_t ds_arena_capacity(const ds_arena *a);

#define DS_ARENA_NEW(a, T, n) ((T *)ds_arena_alloc((a), sizeof(T) * (size_t)(n)))

#endif
