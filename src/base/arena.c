/* Per-step scratch arena (see arena.h for why it exists and its rules). */
#include "base/arena.h"
#include "base/common.h"
#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t n) { return (n + DS_ARENA_ALIGN - 1) & ~(size_t)(DS_ARENA_ALIGN - 1); }

static void add_block(ds_arena *a, size_t bytes) {
    if (a->n_blk == DS_ARENA_MAX_BLOCKS) {
        ds_log(DS_LOG_ERROR, "%s arena: more than %d blocks in one use", a->name, DS_ARENA_MAX_BLOCKS);
        abort();
    }
    ds_arena_block *b = &a->blk[a->n_blk++];
    b->base = ds_amalloc(bytes);
    b->cap = bytes;
    b->used = 0;
}

void ds_arena_init(ds_arena *a, size_t bytes, const char *name) {
    memset(a, 0, sizeof *a);
    a->name = name ? name : "scratch";
    if (bytes) add_block(a, round_up(bytes));
}

void ds_arena_free(ds_arena *a) {
    for (int i = 0; i < a->n_blk; i++) ds_afree(a->blk[i].base);
    memset(a, 0, sizeof *a);
}

size_t ds_arena_capacity(const ds_arena *a) {
    size_t s = 0;
    for (int i = 0; i < a->n_blk; i++) s += a->blk[i].cap;
    return s;
}

static size_t in_use(const ds_arena *a) {
    size_t s = 0;
    for (int i = 0; i <= a->cur && i < a->n_blk; i++) s += a->blk[i].used;
    return s;
}

void *ds_arena_alloc(ds_arena *a, size_t bytes) {
    size_t need = round_up(bytes ? bytes : 1);
    if (a->n_blk == 0) add_block(a, need);
    while (a->blk[a->cur].cap - a->blk[a->cur].used < need) {
        /* a later block (from earlier growth in this use) may be free: blocks after cur hold nothing */
        if (a->cur + 1 < a->n_blk) {
            a->cur++;
            a->blk[a->cur].used = 0;
            continue;
        }
        size_t cap = ds_arena_capacity(a);
        size_t grow = need > cap ? need : cap;
        add_block(a, grow);
        a->grows++;
        ds_log(DS_LOG_INFO, "%s arena: grew by %.1f MiB to %.1f MiB (a step needed more than it was sized for)", a->name,
               (double)grow / 1048576.0, (double)(cap + grow) / 1048576.0);
        a->cur = a->n_blk - 1;
    }
    ds_arena_block *b = &a->blk[a->cur];
    void *p = b->base + b->used;
    b->used += need;
    size_t u = in_use(a);
    if (u > a->peak) a->peak = u;
    return p;
}

void *ds_arena_zalloc(ds_arena *a, size_t bytes) {
    void *p = ds_arena_alloc(a, bytes);
    memset(p, 0, bytes);
    return p;
}

ds_arena_mark ds_arena_mark_get(const ds_arena *a) {
    ds_arena_mark m = {a->cur, a->n_blk ? a->blk[a->cur].used : 0};
    return m;
}

void ds_arena_release(ds_arena *a, ds_arena_mark m) {
    if (!a->n_blk) return;
    for (int i = m.blk + 1; i < a->n_blk; i++) a->blk[i].used = 0;
    a->cur = m.blk;
    a->blk[m.blk].used = m.used;
}

void ds_arena_reset(ds_arena *a) {
    if (a->n_blk > 1) {
        /* merge: one block as large as all of them, so the same step fits without growing */
        size_t cap = ds_arena_capacity(a);
        for (int i = 0; i < a->n_blk; i++) ds_afree(a->blk[i].base);
        a->n_blk = 0;
        add_block(a, cap);
    }
    a->cur = 0;
    if (a->n_blk) a->blk[0].used = 0;
    a->peak = 0;
}
