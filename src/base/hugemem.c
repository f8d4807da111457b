/* Huge-page slab for streamed data; see hugemem.h for why. */
#include "base/hugemem.h"
#include "base/common.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define CHUNK_BYTES ((size_t)32 << 20)   /* shared chunk; blocks over a quarter of it get their own */
#define HDR 64                            /* per-block header: the owning chunk, keeps 64 alignment */

typedef struct chunk {
    size_t size, used;   /* bytes of the chunk; bytes handed out (from the chunk's start) */
    int live;            /* blocks carved from it and not yet freed */
} chunk;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static chunk *g_cur;     /* the shared chunk small blocks come from */
static size_t g_held;

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static chunk *chunk_new(size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, size) != 0) {
        fprintf(stderr, "dsflash: out of memory (%zu bytes for prepared weights)\n", size);
        abort();
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, size, MADV_HUGEPAGE);
#endif
    chunk *c = p;
    *c = (chunk){.size = size, .used = HDR};   /* the chunk record takes the first 64 bytes */
    g_held += size;
    return c;
}

static void chunk_free(chunk *c) {
    g_held -= c->size;
    free(c);
}

static void *carve(chunk *c, size_t need) {
    uint8_t *h = (uint8_t *)c + c->used;
    *(chunk **)h = c;
    c->used += need;
    c->live++;
    return h + HDR;
}

void *ds_huge_alloc(size_t bytes) {
    size_t need = HDR + round_up(bytes ? bytes : 1, 64);
    pthread_mutex_lock(&g_mu);
    void *p;
    if (need > CHUNK_BYTES / 4) {
        p = carve(chunk_new(round_up(HDR + need, HUGE_PAGE)), need);
    } else {
        if (!g_cur || g_cur->used + need > g_cur->size) {
            chunk *old = g_cur;
            g_cur = chunk_new(CHUNK_BYTES);
            if (old && old->live == 0) chunk_free(old);
        }
        p = carve(g_cur, need);
    }
    pthread_mutex_unlock(&g_mu);
    return p;
}

void ds_huge_free(void *p) {
    if (!p) return;
    chunk *c = *(chunk **)((uint8_t *)p - HDR);
    pthread_mutex_lock(&g_mu);
    if (--c->live == 0) {
        if (c == g_cur) g_cur = NULL;
        chunk_free(c);
    }
    pthread_mutex_unlock(&g_mu);
}

size_t ds_huge_held(void) {
    pthread_mutex_lock(&g_mu);
    size_t n = g_held;
    pthread_mutex_unlock(&g_mu);
    return n;
}
