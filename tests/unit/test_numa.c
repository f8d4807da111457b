/* --numa-nodes: the plan read from a sysfs tree written here (two nodes of four CPUs, SMT pairs,
 * known memory), the refusals, and the pool's pinning checked from inside its own threads. */
#define _GNU_SOURCE
#include "check.h"
#include "base/numa.h"
#include "base/threadpool.h"
#include "engine/engine_setup.h"
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/mempolicy.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void put(const char *root, const char *rel, const char *text) {
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(root) + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(dir, 0755); *p = '/'; }
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* Node 0: CPUs 0-3, cores {0,2} {1,3}, 8 GiB; node 1: CPUs 4-7, cores {4,5} {6,7}, 4 GiB. */
static void two_node_tree(char *root, size_t n) {
    snprintf(root, n, "/tmp/dsflash_numa_XXXXXX");
    if (!mkdtemp(root)) return;
    put(root, "node/online", "0-1\n");
    put(root, "node/node0/cpulist", "0-3\n");
    put(root, "node/node1/cpulist", "4-7\n");
    put(root, "node/node0/meminfo", "Node 0 MemTotal:        8388608 kB\nNode 0 MemFree:         1048576 kB\n"
                                    "Node 0 MemUsed:         7340032 kB\nNode 0 FilePages:       2097152 kB\n");
    put(root, "node/node1/meminfo", "Node 1 MemTotal:        4194304 kB\nNode 1 MemFree:          524288 kB\n"
                                    "Node 1 FilePages:        262144 kB\n");
    const char *sib[8] = {"0,2\n", "1,3\n", "0,2\n", "1,3\n", "4-5\n", "4-5\n", "6-7\n", "6-7\n"};
    for (int c = 0; c < 8; c++) {
        char rel[128];
        snprintf(rel, sizeof rel, "cpu/cpu%d/topology/thread_siblings_list", c);
        put(root, rel, sib[c]);
    }
}

static void rm_tree(const char *root) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "removing %s", root);
}

static ds_cpumask cpus_upto(int n) {
    ds_cpumask m = {{0}};
    for (int c = 0; c < n; c++) ds_cpumask_add(&m, c);
    return m;
}

TEST(cpulist_parse_and_refusals) {
    ds_cpumask m;
    ds_error e;
    CHECK(ds_cpulist_parse("0-3,8,10-11\n", "t", &m, &e) == 0, "%s", e.msg);
    int n = 0;
    for (int c = 0; c < DS_MAX_CPUS; c++) n += ds_cpumask_has(&m, c);
    CHECK(n == 7 && ds_cpumask_has(&m, 8) && ds_cpumask_has(&m, 11) && !ds_cpumask_has(&m, 9), "count %d", n);
    CHECK(ds_cpulist_parse("\n", "t", &m, &e) == 0 && !ds_cpumask_has(&m, 0), "an empty list (a node without CPUs)");
    CHECK(ds_cpulist_parse("3-1", "t", &m, &e) == -1 && strstr(e.msg, "3-1"), "%s", e.msg);
    CHECK(ds_cpulist_parse("1024", "t", &m, &e) == -1 && strstr(e.msg, "1023"), "%s", e.msg);
    CHECK(ds_cpulist_parse("0,a", "some/file", &m, &e) == -1 && strstr(e.msg, "some/file"), "%s", e.msg);
}

TEST(plan_of_all_and_of_named_nodes) {
    char root[64];
    two_node_tree(root, sizeof root);
    ds_cpumask allowed = cpus_upto(8);
    ds_numa_plan *p = calloc(1, sizeof *p);
    ds_error e;
    CHECK(ds_numa_plan_make("all", root, &allowed, p, &e) == 0, "%s", e.msg);
    CHECK(p->all && p->n_nodes == 2 && p->n_cpus == 8 && p->n_cores == 4, "all: nodes %d cpus %d cores %d", p->n_nodes, p->n_cpus,
          p->n_cores);
    CHECK(p->core_cpu[0] == 0 && p->core_cpu[1] == 1 && p->core_cpu[2] == 4 && p->core_cpu[3] == 6, "cores %d %d %d %d",
          p->core_cpu[0], p->core_cpu[1], p->core_cpu[2], p->core_cpu[3]);
    CHECK(!strcmp(p->text, "all") && p->mem_total == 0, "all reads no node memory");

    CHECK(ds_numa_plan_make("1", root, &allowed, p, &e) == 0, "%s", e.msg);
    CHECK(!p->all && p->n_nodes == 1 && p->nodes[0] == 1 && p->n_cpus == 4 && p->n_cores == 2, "node 1: cpus %d cores %d",
          p->n_cpus, p->n_cores);
    CHECK(p->core_cpu[0] == 4 && p->core_cpu[1] == 6 && !ds_cpumask_has(&p->cpus, 3), "node 1's cores");
    CHECK(p->mem_total == 4194304ull << 10 && p->mem_free == (524288ull + 262144ull) << 10, "node 1 memory %llu / %llu",
          (unsigned long long)p->mem_total, (unsigned long long)p->mem_free);

    CHECK(ds_numa_plan_make("1,0", root, &allowed, p, &e) == 0, "%s", e.msg);
    CHECK(p->n_nodes == 2 && p->nodes[0] == 0 && !strcmp(p->text, "0,1") && p->n_cores == 4, "text %s", p->text);
    CHECK(p->mem_total == (8388608ull + 4194304ull) << 10, "both nodes' memory");

    /* a process allowed only on CPUs 0-1 (taskset): node 0 gives two cores, node 1 none */
    ds_cpumask two = cpus_upto(2);
    CHECK(ds_numa_plan_make("0", root, &two, p, &e) == 0 && p->n_cpus == 2 && p->n_cores == 2, "taskset 0-1: %s", e.msg);
    CHECK(ds_numa_plan_make("all", root, &two, p, &e) == 0 && p->n_cores == 2, "all under taskset: %d cores", p->n_cores);
    CHECK(ds_numa_plan_make("1", root, &two, p, &e) == -1 && strstr(e.msg, "0-1"), "%s", e.msg);

    const char *bad[] = {"2", "x", "0,0", "0,", ",0", "0-1", ""};
    const char *says[] = {"not online", "comma list", "twice", "comma list", "comma list", "comma list", NULL};
    for (int i = 0; i < (int)DS_ARRAY_LEN(bad); i++) {
        int rc = ds_numa_plan_make(bad[i], root, &allowed, p, &e);
        if (!says[i]) CHECK(rc == 0 && p->all, "empty text is all");
        else CHECK(rc == -1 && strstr(e.msg, says[i]) && strstr(e.msg, "--numa-nodes"), "'%s': %s", bad[i], e.msg);
    }
    rm_tree(root);
    free(p);
}

TEST(host_without_node_directory) {
    char root[64] = "/tmp/dsflash_numa_XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    ds_cpumask allowed = cpus_upto(3);
    ds_numa_plan *p = calloc(1, sizeof *p);
    ds_error e;
    CHECK(ds_numa_plan_make("all", root, &allowed, p, &e) == 0, "%s", e.msg);
    CHECK(p->n_nodes == 1 && p->n_cpus == 3 && p->n_cores == 3, "no sysfs: one node, each CPU its own core (%d)", p->n_cores);
    CHECK(ds_numa_plan_make("0", root, &allowed, p, &e) == -1 && strstr(e.msg, "no NUMA topology"), "%s", e.msg);
    rm_tree(root);
    free(p);
}

/* The memory plan with nodes named: their MemTotal, MemAvailable capped at their free memory. */
TEST(memory_plan_counts_the_nodes_only) {
    char path[] = "/tmp/dsflash_meminfo_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *mi = "MemTotal:       67108864 kB\nMemFree:        50331648 kB\nMemAvailable:   60000000 kB\n";
    CHECK(write(fd, mi, strlen(mi)) == (ssize_t)strlen(mi));
    close(fd);
    setenv("DSFLASH_MEMINFO", path, 1);
    ds_mem_inputs in = {.utilization = 0.9, .max_num_batched_tokens = 64, .max_num_seqs = 4, .vocab = 1000, .dim = 64,
                        .nodes = "1", .node_mem_total = 16ull << 30, .node_mem_free = 8ull << 30};
    ds_mem_plan plan;
    ds_error e;
    CHECK(ds_mem_plan_compute(&in, &plan, &e) == 0, "%s", e.msg);
    CHECK(plan.mem_total == 16ull << 30 && plan.mem_available == 8ull << 30, "total %llu available %llu",
          (unsigned long long)plan.mem_total, (unsigned long long)plan.mem_available);
    CHECK(strstr(plan.meminfo, "NUMA nodes 1"), "%s", plan.meminfo);
    in.nodes = NULL;
    CHECK(ds_mem_plan_compute(&in, &plan, &e) == 0 && plan.mem_total == 67108864ull << 10, "all: the host's MemTotal");
    unsetenv("DSFLASH_MEMINFO");
    unlink(path);
}

/* ds_numa_apply on this host, checked with the kernel's own answers (sched_getaffinity,
 * get_mempolicy): node 0 binds; two nodes interleave where the host has a node 1 and fail naming
 * the call where it does not.  The thread's affinity and policy are restored afterwards. */
TEST(apply_sets_affinity_and_memory_policy) {
    if (access("/sys/devices/system/node/node0/cpulist", R_OK)) {
        ds_numa_plan *p = calloc(1, sizeof *p);
        ds_error e;
        CHECK(ds_numa_plan_make("0", NULL, NULL, p, &e) == -1 && strstr(e.msg, "no NUMA topology"), "%s", e.msg);
        free(p);
        return;
    }
    cpu_set_t before;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    ds_numa_plan *p = calloc(1, sizeof *p);
    ds_error e;
    CHECK(ds_numa_plan_make("0", NULL, NULL, p, &e) == 0, "%s", e.msg);
    CHECK(ds_numa_apply(p, &e) == 0, "%s", e.msg);
    int mode = -1;
    unsigned long mask[16] = {0};
    CHECK(syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)(8 * sizeof mask + 1), NULL, 0ul) == 0, "get_mempolicy");
    CHECK(mode == MPOL_BIND && mask[0] == 1ul, "node 0: mode %d mask %lx", mode, mask[0]);
    cpu_set_t now;
    CHECK(sched_getaffinity(0, sizeof now, &now) == 0);
    int same = 1;
    for (int c = 0; c < CPU_SETSIZE && c < DS_MAX_CPUS; c++) same &= !!CPU_ISSET(c, &now) == ds_cpumask_has(&p->cpus, c);
    CHECK(same, "affinity = node 0's CPUs");
    /* two nodes: node 1 may not exist here; build the plan by hand */
    p->n_nodes = 2;
    p->nodes[1] = 1;
    snprintf(p->text, sizeof p->text, "0,1");
    int rc = ds_numa_apply(p, &e);
    if (!access("/sys/devices/system/node/node1", F_OK)) {
        CHECK(rc == 0, "%s", e.msg);
        CHECK(syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)(8 * sizeof mask + 1), NULL, 0ul) == 0 &&
              mode == MPOL_INTERLEAVE && mask[0] == 3ul, "nodes 0,1: mode %d mask %lx", mode, mask[0]);
    } else {   /* the kernel drops nodes it does not have from the mask (the plan refuses them first) */
        CHECK(rc == 0 && syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)(8 * sizeof mask + 1), NULL, 0ul) == 0 &&
              mode == MPOL_INTERLEAVE && (mask[0] & 1ul), "nodes 0,(1): rc %d mode %d mask %lx", rc, mode, mask[0]);
    }
    CHECK(syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0ul) == 0, "policy restored");
    CHECK(sched_setaffinity(0, sizeof before, &before) == 0, "affinity restored");
    free(p);
}

/* Each pool thread records its own CPU affinity in its first task, then holds that task until every
 * thread has claimed one (so no thread can take all the tasks), up to 20 s on a loaded host. */
typedef struct { cpu_set_t seen[8]; _Atomic int ran[8]; int threads; } affinity_ctx;
static int all_ran(affinity_ctx *c) {
    int all = 1;
    for (int i = 0; i < c->threads; i++) all &= atomic_load(&c->ran[i]);
    return all;
}
static void affinity_task(void *vctx, int t, int thread) {
    (void)t;
    affinity_ctx *c = vctx;
    if (thread >= 8 || atomic_load(&c->ran[thread])) return;
    sched_getaffinity(0, sizeof c->seen[thread], &c->seen[thread]);
    atomic_store(&c->ran[thread], 1);
    for (int i = 0; i < 20000 && !all_ran(c); i++) usleep(1000);
}

static int run_until_all_ran(affinity_ctx *c, int threads) {
    c->threads = threads;
    ds_pool_run(64, affinity_task, c);
    return all_ran(c);
}

TEST(pool_workers_pinned_one_per_cpu) {
    cpu_set_t mine;
    CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
    int cpus[2] = {-1, -1}, k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &mine)) cpus[k++] = c;
    if (k == 1) cpus[1] = cpus[0];   /* a one-CPU host: both on it */
    ds_pool_place(3, cpus, 2);       /* worker 1 -> cpus[1], worker 2 -> cpus[0] */
    affinity_ctx *c = calloc(1, sizeof *c);
    CHECK(run_until_all_ran(c, 3), "every thread ran a task");
    for (int w = 1; w < 3; w++) {
        int want = cpus[w % 2];
        CHECK(CPU_COUNT(&c->seen[w]) == 1 && CPU_ISSET(want, &c->seen[w]), "worker %d: %d CPUs, on CPU %d: %d", w,
              CPU_COUNT(&c->seen[w]), want, CPU_ISSET(want, &c->seen[w]));
    }
    CHECK(CPU_EQUAL(&c->seen[0], &mine), "the calling thread keeps its affinity");
    memset(c, 0, sizeof *c);
    ds_pool_place(3, NULL, 0);   /* unpinned again: workers restarted with the process's affinity */
    CHECK(run_until_all_ran(c, 3), "every thread ran a task");
    for (int w = 1; w < 3; w++) CHECK(CPU_EQUAL(&c->seen[w], &mine), "worker %d unpinned", w);
    ds_pool_shutdown();
    free(c);
}

RUN_ALL()
