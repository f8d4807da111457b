/* The per-step scratch arena (base/arena.h): alignment, marks, zeroing, and growth that happens
 * once.  The oracle is plain arithmetic on addresses and the arena's own block count: after a use
 * that needed more than the arena held, a reset merges the blocks into one, and repeating the same
 * use then adds no block (this is what makes steady-state steps allocation-free). */
#include "check.h"
#include "base/arena.h"
#include <stdint.h>

TEST(allocations_are_aligned_disjoint_and_rewound_by_marks) {
    ds_arena a;
    ds_arena_init(&a, 4096, "test");
    char *p = ds_arena_alloc(&a, 1), *q = ds_arena_alloc(&a, 100);
    CHECK((uintptr_t)p % 64 == 0 && (uintptr_t)q % 64 == 0, "64-byte alignment");
    CHECK(q >= p + 64, "disjoint: a 1-byte allocation takes a whole line");
    ds_arena_mark mk = ds_arena_mark_get(&a);
    char *r = ds_arena_alloc(&a, 200);
    ds_arena_release(&a, mk);
    CHECK(ds_arena_alloc(&a, 200) == r, "after a release the same memory is handed out again");
    unsigned char *z = ds_arena_zalloc(&a, 300);
    int zero = 1;
    for (int i = 0; i < 300; i++) zero &= z[i] == 0;
    CHECK(zero, "zalloc zero-fills");
    CHECK(ds_arena_alloc(&a, 0) != NULL, "a zero-byte allocation is a valid pointer");
    ds_arena_free(&a);
}

static void use(ds_arena *a) {
    for (int i = 0; i < 10; i++) {
        ds_arena_mark mk = ds_arena_mark_get(a);
        char *p = ds_arena_alloc(a, 3000 + (size_t)i * 500);
        memset(p, i, 3000 + (size_t)i * 500);
        if (i % 3 == 0) ds_arena_release(a, mk);
    }
}

TEST(growth_happens_once_then_the_same_use_fits) {
    ds_arena a;
    ds_arena_init(&a, 4096, "test");
    use(&a);
    CHECK(a.grows > 0, "the first use outgrew 4 KiB");
    ds_arena_reset(&a);
    CHECK(a.n_blk == 1, "reset merged the blocks into one, found %d", a.n_blk);
    unsigned g = a.grows;
    size_t cap = ds_arena_capacity(&a);
    for (int k = 0; k < 3; k++) {
        use(&a);
        ds_arena_reset(&a);
    }
    CHECK(a.grows == g && ds_arena_capacity(&a) == cap, "the same use grew again (%u -> %u blocks added)", g, a.grows);
    ds_arena_free(&a);
}

TEST(empty_arena_grows_on_first_use) {
    ds_arena a;
    ds_arena_init(&a, 0, "test");
    CHECK(ds_arena_capacity(&a) == 0);
    char *p = ds_arena_alloc(&a, 10000);
    CHECK(p != NULL && (uintptr_t)p % 64 == 0);
    CHECK(ds_arena_capacity(&a) >= 10000);
    ds_arena_free(&a);
}

RUN_ALL()
