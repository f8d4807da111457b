/* Thread pool tests: every task runs exactly once across many regions and pool sizes, thread ids
 * stay in range, nested regions run serially, tasks really run concurrently (two tasks that wait
 * for each other only finish if two threads run them), resizing and sleeping/waking work. */
#define _GNU_SOURCE
#include "check.h"
#include "base/threadpool.h"
#include "base/common.h"
#include <stdatomic.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct { _Atomic int *hits; int n; _Atomic int bad_thread; int threads; } count_ctx;

static void count_task(void *vctx, int t, int thread) {
    count_ctx *c = vctx;
    atomic_fetch_add(&c->hits[t], 1);
    if (thread < 0 || thread >= c->threads) atomic_store(&c->bad_thread, 1);
}

TEST(every_task_runs_exactly_once) {
    for (int th = 1; th <= 4; th++) {
        ds_pool_init(th);
        CHECK(ds_pool_threads() == th, "threads %d", ds_pool_threads());
        for (int round = 0; round < 300; round++) {
            int n = 1 + (round * 37) % 200;
            _Atomic int hits[200];
            for (int i = 0; i < n; i++) atomic_init(&hits[i], 0);
            count_ctx c = {hits, n, 0, th};
            ds_pool_run(n, count_task, &c);
            int bad = 0;
            for (int i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
            CHECK(bad == 0, "threads %d round %d: %d tasks not run exactly once", th, round, bad);
            CHECK(!atomic_load(&c.bad_thread), "thread id out of range");
            if (bad) return;
        }
    }
}

typedef struct { _Atomic int inner_total; } nest_ctx;
static void inner_task(void *vctx, int t, int thread) {
    nest_ctx *c = vctx;
    atomic_fetch_add(&c->inner_total, t + 1);
}
static void outer_task(void *vctx, int t, int thread) { ds_pool_run(4, inner_task, vctx); }

TEST(nested_regions_run_serially_and_complete) {
    ds_pool_init(3);
    nest_ctx c;
    atomic_init(&c.inner_total, 0);
    ds_pool_run(6, outer_task, &c);
    CHECK(atomic_load(&c.inner_total) == 6 * (1 + 2 + 3 + 4), "total %d", atomic_load(&c.inner_total));
}

typedef struct { _Atomic int arrived; _Atomic int timed_out; } rendezvous_ctx;
static void rendezvous_task(void *vctx, int t, int thread) {
    rendezvous_ctx *c = vctx;
    atomic_fetch_add(&c->arrived, 1);
    double t0 = ds_now();
    while (atomic_load(&c->arrived) < 2) {
        if (ds_now() - t0 > 5.0) { atomic_store(&c->timed_out, 1); return; }
    }
}

TEST(tasks_run_concurrently) {
    ds_pool_init(2);
    for (int round = 0; round < 20; round++) {
        rendezvous_ctx c;
        atomic_init(&c.arrived, 0);
        atomic_init(&c.timed_out, 0);
        if (round % 5 == 4) usleep(2000); /* let the workers fall asleep first */
        ds_pool_run(2, rendezvous_task, &c);
        CHECK(!atomic_load(&c.timed_out), "round %d: the two tasks never overlapped", round);
        if (atomic_load(&c.timed_out)) return;
    }
}

/* Cores the process may run on, counted here from sysfs: distinct sibling lists of its CPUs (a CPU
 * without one is a core of its own). */
static int physical_cores(void) {
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine)) return -1;
    char seen[256][64];
    int n = 0, lone = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &mine)) continue;
        char path[128], sib[64] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
        FILE *f = fopen(path, "r");
        if (!f || !fgets(sib, sizeof sib, f)) { lone++; if (f) fclose(f); continue; }
        fclose(f);
        int dup = 0;
        for (int i = 0; i < n; i++) dup |= !strcmp(seen[i], sib);
        if (!dup && n < 256) snprintf(seen[n++], sizeof seen[0], "%s", sib);
    }
    return n + lone;
}

static void sum_task(void *vctx, int t, int thread) {
    long *out = vctx;
    long s = 0;
    for (int i = 0; i <= t; i++) s += i;
    out[t] = s;
}

TEST(many_small_regions_and_resizes) {
    long out[64];
    for (int round = 0; round < 20000; round++) {
        if (round % 5000 == 0) ds_pool_init(1 + (round / 5000) % 3);
        int n = 2 + round % 63;
        ds_pool_run(n, sum_task, out);
        if (out[n - 1] != (long)(n - 1) * n / 2) { CHECK(0, "round %d wrong", round); return; }
    }
    ds_pool_init(0);
    CHECK(ds_pool_threads() == physical_cores(), "init(0): one thread per physical core (%d, expected %d)", ds_pool_threads(),
          physical_cores());
    ds_pool_run(0, sum_task, out); /* no tasks: returns */
    ds_pool_shutdown();
    CHECK(ds_pool_threads() == 1);
    ds_pool_run(3, sum_task, out);
    CHECK(out[2] == 3, "runs serially after shutdown");
}

RUN_ALL()
