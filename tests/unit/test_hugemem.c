/* The huge-page slab for prepared weights (base/hugemem.h): alignment, disjoint blocks, chunks
 * returned once their last block is freed, large blocks on chunks of their own, and many threads
 * allocating at once (the load prepares linears from pool threads).  The oracle is address
 * arithmetic, the bytes each block was filled with, and the slab's own count of held chunks,
 * which must fall back to what it was before the test. */
#include "check.h"
#include "base/hugemem.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

TEST(blocks_are_aligned_disjoint_and_keep_their_bytes) {
    size_t held0 = ds_huge_held();
    enum { N = 200 };
    uint8_t *b[N];
    for (int i = 0; i < N; i++) {
        size_t n = 1 + (size_t)i * 977;
        b[i] = ds_huge_alloc(n);
        CHECK((uintptr_t)b[i] % 64 == 0, "block %d is 64-byte aligned", i);
        memset(b[i], i, n);
    }
    int intact = 1;
    for (int i = 0; i < N; i++)
        for (size_t j = 0; j < 1 + (size_t)i * 977; j++) intact &= b[i][j] == (uint8_t)i;
    CHECK(intact, "no block overlaps another");
    CHECK(ds_huge_held() > held0 && ds_huge_held() % (2 * MIB) == 0, "chunks are whole 2 MiB pages");
    for (int i = 0; i < N; i++) ds_huge_free(b[i]);
    CHECK(ds_huge_held() == held0, "every chunk returned once its blocks are freed (%zu held, %zu before)",
          ds_huge_held(), held0);
}

TEST(large_blocks_get_their_own_chunk_and_small_ones_fill_a_new_chunk) {
    size_t held0 = ds_huge_held();
    uint8_t *big = ds_huge_alloc(40 * MIB + 3);
    CHECK((uintptr_t)big % 64 == 0, "aligned");
    CHECK(ds_huge_held() - held0 >= 40 * MIB, "a 40 MiB block holds at least 40 MiB");
    big[40 * MIB + 2] = 7;
    /* small blocks that overflow the shared chunk move on to a fresh one */
    uint8_t *s[20];
    for (int i = 0; i < 20; i++) s[i] = ds_huge_alloc(7 * MIB);
    for (int i = 0; i < 20; i++) memset(s[i], i, 7 * MIB);
    int ok = 1;
    for (int i = 0; i < 20; i++) ok &= s[i][0] == i && s[i][7 * MIB - 1] == i;
    CHECK(ok, "7 MiB blocks across several chunks keep their bytes");
    ds_huge_free(big);
    for (int i = 19; i >= 0; i--) ds_huge_free(s[i]);
    CHECK(ds_huge_held() == held0, "all returned (%zu held, %zu before)", ds_huge_held(), held0);
    ds_huge_free(NULL);
}

static void *churn(void *arg) {
    uintptr_t seed = (uintptr_t)arg;
    uint8_t *mine[64];
    for (int i = 0; i < 64; i++) {
        mine[i] = ds_huge_alloc(4096 + (seed * 131 + (size_t)i * 4099) % 300000);
        mine[i][0] = (uint8_t)seed;
    }
    int ok = 1;
    for (int i = 0; i < 64; i++) ok &= mine[i][0] == (uint8_t)seed;
    for (int i = 0; i < 64; i++) ds_huge_free(mine[i]);
    return ok ? arg : NULL;
}

TEST(threads_allocate_and_free_at_once) {
    size_t held0 = ds_huge_held();
    pthread_t t[8];
    for (uintptr_t i = 0; i < 8; i++) pthread_create(&t[i], NULL, churn, (void *)(i + 1));
    int ok = 1;
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok &= r != NULL;
    }
    CHECK(ok, "every thread saw its own bytes");
    CHECK(ds_huge_held() == held0, "all returned (%zu held, %zu before)", ds_huge_held(), held0);
}

RUN_ALL()
