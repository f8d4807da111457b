/* No allocation on the hot path: a forward step in steady state calls no allocator.
 *
 * Why a link-time wrap and not a hook in the library: this program is linked with
 * -Wl,--wrap=malloc,calloc,realloc,posix_memalign,aligned_alloc (Makefile), so every call the
 * library's objects make to those functions lands in the counters below, whatever file or thread
 * it comes from (pool workers included), and the library carries no test-only code.  The count is
 * taken around steps only after warm-up steps of the same shape, so one-time growth (the step
 * arena sized for more rows, kernel scratch, per-sequence tables that double) is not counted; what
 * is left are per-step allocations, and there must be none.  Checked for single-sequence decode,
 * prefill chunks and mixed batches, in both numerics tiers.  Also reports the count per step on
 * stderr so a regression names its size. */
#include "check.h"
#include "dsflash.h"
#include "base/threadpool.h"
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

static _Atomic long g_allocs;
static _Atomic int g_counting;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);

static void count(void) {
    if (atomic_load_explicit(&g_counting, memory_order_relaxed)) atomic_fetch_add(&g_allocs, 1);
}
void *__wrap_malloc(size_t n) { count(); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t s) { count(); return __real_calloc(n, s); }
void *__wrap_realloc(void *p, size_t n) { count(); return __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { count(); return __real_posix_memalign(p, a, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { count(); return __real_aligned_alloc(a, n); }

static ds_model *load(const char *numerics) {
    const char *d = ds_test_tiny_fixture();
    if (!d) return NULL;
    char eb[1024];
    ds_load_options o = {.kernels = "auto", .threads = 2, .numerics = numerics};
    ds_model *m = ds_model_load(d, &o, eb, sizeof eb);
    if (!m) fprintf(stderr, "  load: %s\n", eb);
    return m;
}

static void prompt(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((seed >> 8) % 997);
    }
}

/* Counts allocations over `steps` steps of n_seq sequences with `rows` rows each, after `warm`
 * steps of the same shape.  Returns allocations per counted step (-1 on a step error). */
static double allocs_per_step(ds_model *m, int n_seq, int rows, int warm, int steps) {
    enum { MAXS = 4, MAXT = 512 };
    const int V = ds_model_vocab_size(m);
    ds_seq *seqs[MAXS];
    static int32_t tok[MAXS][MAXT];
    const int32_t *tk[MAXS];
    int nr[MAXS], nl[MAXS];
    float *lg[MAXS];
    for (int i = 0; i < n_seq; i++) {
        seqs[i] = ds_seq_new(m);
        prompt(tok[i], MAXT, 11u + (uint32_t)i);
        lg[i] = malloc(sizeof(float) * (size_t)V);
        nr[i] = rows;
        nl[i] = 1;
    }
    char eb[512];
    double per = -1;
    long n0 = 0;
    int pos = 0;
    for (int s = 0; s < warm + steps; s++, pos += rows) {
        if (pos + rows > MAXT) break;
        if (s == warm) {
            n0 = atomic_load(&g_allocs);
            atomic_store(&g_counting, 1);
        }
        for (int i = 0; i < n_seq; i++) tk[i] = tok[i] + pos;
        int rc = ds_batch_step(m, n_seq, seqs, tk, nr, lg, nl, eb, sizeof eb);
        if (rc < 0) { fprintf(stderr, "  step: %s\n", eb); atomic_store(&g_counting, 0); goto done; }
        if (s == warm + steps - 1) {
            atomic_store(&g_counting, 0);
            per = (double)(atomic_load(&g_allocs) - n0) / steps;
        }
    }
done:
    for (int i = 0; i < n_seq; i++) { ds_seq_free(seqs[i]); free(lg[i]); }
    return per;
}

static void check_tier(const char *numerics) {
    ds_model *m = load(numerics);
    if (!m) { CHECK(0, "tiny fixture"); return; }
    struct { const char *what; int n_seq, rows, warm, steps; } cases[] = {
        {"decode, 1 sequence", 1, 1, 40, 60},
        {"decode, 4 sequences", 4, 1, 40, 60},
        {"prefill chunks of 16 rows", 1, 16, 6, 10},
        {"batch of 3 x 7 rows", 3, 7, 8, 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double per = allocs_per_step(m, cases[i].n_seq, cases[i].rows, cases[i].warm, cases[i].steps);
        fprintf(stderr, "  %s tier, %s: %.2f allocator calls per step\n", numerics, cases[i].what, per);
        CHECK(per == 0, "%s tier, %s: expected 0 allocator calls per steady-state step, found %.2f", numerics,
              cases[i].what, per);
    }
    ds_model_free(m);
}

TEST(steady_state_steps_allocate_nothing_exact) { check_tier("exact"); }
TEST(steady_state_steps_allocate_nothing_fast) { check_tier("fast"); }

/* The counter itself works: an allocation made inside the library (ds_seq_new allocates its
 * tables) is counted, so a 0 above is not a wrap that was never linked in. */
TEST(counter_sees_library_allocations) {
    ds_model *m = load("exact");
    if (!m) { CHECK(0, "tiny fixture"); return; }
    long n0 = atomic_load(&g_allocs);
    atomic_store(&g_counting, 1);
    ds_seq *s = ds_seq_new(m);
    atomic_store(&g_counting, 0);
    CHECK(atomic_load(&g_allocs) > n0, "the allocator wrap counted nothing (not linked with --wrap?)");
    ds_seq_free(s);
    ds_model_free(m);
}

RUN_ALL()
