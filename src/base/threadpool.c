/* Persistent compute thread pool.
 *
 * Why this design: a decode step issues hundreds of small parallel regions (one per linear,
 * attention head group, indexer scan), each only tens of microseconds long, so the cost of waking
 * threads must be far below that.  Workers therefore spin on a shared "ticket" for a short while
 * after each region (~100 µs) before sleeping on a condition variable; the caller runs tasks
 * itself too.  Tasks are handed out dynamically from the ticket, a single 64-bit atomic that
 * packs (generation, task count, next task): a worker claims task k of generation g with one
 * compare-and-swap, which also proves the region it read the function pointer for is still the
 * current one (a region cannot finish, and the next cannot be posted, while a task is unclaimed).
 * Which thread runs which task never changes results: tasks write disjoint outputs.
 * Nested calls (a task that calls ds_pool_run) run serially on the calling thread. */
#define _GNU_SOURCE
#include "base/threadpool.h"
#include "base/common.h"
#include "base/numa.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GEN_BITS 24
#define CNT_BITS 20
#define MAX_TASKS ((1 << CNT_BITS) - 1)
#define SPIN_SECONDS 100e-6

static inline uint64_t tk_make(uint64_t gen, uint64_t cnt, uint64_t next) {
    return (gen << (2 * CNT_BITS)) | (cnt << CNT_BITS) | next;
}
static inline uint32_t tk_gen(uint64_t t) { return (uint32_t)(t >> (2 * CNT_BITS)); }
static inline uint32_t tk_cnt(uint64_t t) { return (uint32_t)((t >> CNT_BITS) & MAX_TASKS); }
static inline uint32_t tk_next(uint64_t t) { return (uint32_t)(t & MAX_TASKS); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static struct {
    int n;                        /* threads including the caller */
    pthread_t *th;
    _Atomic uint64_t ticket;
    _Atomic int done;             /* tasks finished in the current region */
    _Atomic int sleepers;
    _Atomic int stop;
    ds_task_fn fn;
    void *ctx;
    pthread_mutex_t mu;           /* sleeping workers */
    pthread_cond_t cv;
    pthread_mutex_t run_mu;       /* one region at a time from non-pool threads */
    uint32_t start_gen;
    int pin[1024];                /* worker i runs on CPU pin[i % n_pin] (ds_pool_place); n_pin 0: not pinned */
    int n_pin;
} P = {.n = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
       .run_mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int tl_in_pool;

/* Claim and run tasks of generation g until none are left; returns how many ran. */
static int run_tasks(uint32_t g, int thread) {
    int ran = 0;
    for (;;) {
        uint64_t t = atomic_load_explicit(&P.ticket, memory_order_acquire);
        if (tk_gen(t) != g || tk_next(t) >= tk_cnt(t)) break;
        ds_task_fn fn = P.fn;
        void *ctx = P.ctx;
        if (!atomic_compare_exchange_weak_explicit(&P.ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        fn(ctx, (int)tk_next(t), thread);
        ran++;
    }
    if (ran) atomic_fetch_add_explicit(&P.done, ran, memory_order_release);
    return ran;
}

static void *worker_main(void *arg) {
    int id = (int)(intptr_t)arg;
    tl_in_pool = 1;
    if (P.n_pin) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(P.pin[id % P.n_pin], &set);
        if (pthread_setaffinity_np(pthread_self(), sizeof set, &set))
            ds_log(DS_LOG_WARN, "thread pool: could not pin thread %d to CPU %d", id, P.pin[id % P.n_pin]);
    }
    /* The generation current when the pool was (re)started, not when this thread got going: a
     * region posted in between must still be seen as new. */
    uint32_t seen = P.start_gen;
    for (;;) {
        double t0 = 0;
        unsigned spins = 0;
        uint32_t g;
        for (;;) {
            if (atomic_load_explicit(&P.stop, memory_order_acquire)) return NULL;
            g = tk_gen(atomic_load_explicit(&P.ticket, memory_order_acquire));
            if (g != seen) break;
            cpu_relax();
            if ((++spins & 255) == 0) {
                double now = ds_now();
                if (t0 == 0) t0 = now;
                else if (now - t0 > SPIN_SECONDS) {
                    pthread_mutex_lock(&P.mu);
                    atomic_fetch_add(&P.sleepers, 1);
                    while (tk_gen(atomic_load(&P.ticket)) == seen && !atomic_load(&P.stop))
                        pthread_cond_wait(&P.cv, &P.mu);
                    atomic_fetch_sub(&P.sleepers, 1);
                    pthread_mutex_unlock(&P.mu);
                    t0 = 0;
                }
            }
        }
        seen = g;
        run_tasks(g, id);
    }
}

void ds_pool_shutdown(void) {
    if (P.n <= 1 || !P.th) { P.n = 1; return; }
    atomic_store(&P.stop, 1);
    pthread_mutex_lock(&P.mu);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    for (int i = 1; i < P.n; i++) pthread_join(P.th[i], NULL);
    free(P.th);
    P.th = NULL;
    P.n = 1;
    atomic_store(&P.stop, 0);
}

/* (Re)start the workers for n threads; run_mu held. */
static void start_workers(int n_threads) {
    ds_pool_shutdown();
    if (n_threads <= 1) return;
    P.th = ds_xcalloc((size_t)n_threads, sizeof(pthread_t));
    P.start_gen = tk_gen(atomic_load(&P.ticket));
    P.n = n_threads;
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&P.th[i], NULL, worker_main, (void *)(intptr_t)i) != 0) {
            ds_log(DS_LOG_ERROR, "thread pool: could not start thread %d of %d", i, n_threads);
            P.n = i; /* keep the threads that did start */
            break;
        }
    }
}

static int clamp_threads(int n_threads) {
    if (n_threads <= 0) {   /* one per physical core the process may run on */
        ds_numa_plan plan;
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = !ds_numa_plan_make("all", NULL, NULL, &plan, NULL) ? plan.n_cores : c > 0 ? (int)c : 1;
    }
    return n_threads > 1024 ? 1024 : n_threads;
}

void ds_pool_init(int n_threads) {
    if (tl_in_pool) return; /* resizing from inside a task would deadlock; ignore */
    pthread_mutex_lock(&P.run_mu);
    n_threads = clamp_threads(n_threads);
    if (n_threads != P.n || (n_threads > 1 && !P.th)) start_workers(n_threads);
    pthread_mutex_unlock(&P.run_mu);
}

void ds_pool_place(int n_threads, const int *cpus, int n_cpus) {
    if (tl_in_pool) return;
    pthread_mutex_lock(&P.run_mu);
    n_threads = clamp_threads(n_threads);
    if (!cpus) n_cpus = 0;
    if (n_cpus > (int)DS_ARRAY_LEN(P.pin)) n_cpus = (int)DS_ARRAY_LEN(P.pin);
    bool same = n_threads == P.n && (n_threads <= 1 || P.th) && n_cpus == P.n_pin &&
                (!n_cpus || !memcmp(cpus, P.pin, (size_t)n_cpus * sizeof *cpus));
    if (!same) {
        ds_pool_shutdown();   /* workers read the pins as they start */
        P.n_pin = n_cpus;
        if (P.n_pin) memcpy(P.pin, cpus, (size_t)P.n_pin * sizeof *cpus);
        start_workers(n_threads);
    }
    pthread_mutex_unlock(&P.run_mu);
}

int ds_pool_threads(void) { return P.n; }

void ds_pool_run(int n_tasks, ds_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    /* Serial cases: nested call, single thread, single task, or more tasks than the ticket can
     * count (2^20; no caller comes close). */
    if (tl_in_pool || P.n <= 1 || n_tasks == 1 || n_tasks > MAX_TASKS) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&P.run_mu);
    tl_in_pool = 1;
    P.fn = fn;
    P.ctx = ctx;
    atomic_store_explicit(&P.done, 0, memory_order_relaxed);
    uint32_t g = (tk_gen(atomic_load(&P.ticket)) + 1) & ((1u << GEN_BITS) - 1);
    atomic_store_explicit(&P.ticket, tk_make(g, (uint64_t)n_tasks, 0), memory_order_seq_cst);
    if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.cv);
        pthread_mutex_unlock(&P.mu);
    }
    run_tasks(g, 0);
    unsigned spins = 0;
    while (atomic_load_explicit(&P.done, memory_order_acquire) < n_tasks) {
        cpu_relax();
        if ((++spins & 1023) == 0) sched_yield(); /* a worker holding a task may be descheduled */
    }
    tl_in_pool = 0;
    pthread_mutex_unlock(&P.run_mu);
}
