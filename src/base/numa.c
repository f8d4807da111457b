/* NUMA placement plan: the topology read from sysfs, the nodes chosen, their cores and memory
 * (see numa.h for why). */
#define _GNU_SOURCE
#include "base/numa.h"
#include "base/flags.h"
#include "base/threadpool.h"
#include <ctype.h>
#include <errno.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int ds_cpulist_parse(const char *text, const char *what, ds_cpumask *set, ds_error *err) {
    memset(set, 0, sizeof *set);
    char list[4096];
    snprintf(list, sizeof list, "%s", text);
    size_t n = strlen(list);
    while (n && isspace((unsigned char)list[n - 1])) list[--n] = 0;   /* sysfs ends with a newline */
    if (!n) return 0;                                                  /* a node without CPUs */
    ds_int_range *r = ds_xcalloc(DS_MAX_CPUS, sizeof *r);
    char why[256];
    int k = ds_parse_int_ranges(list, 0, DS_MAX_CPUS - 1, r, DS_MAX_CPUS, why, sizeof why);
    for (int i = 0; i < k; i++)
        for (int64_t c = r[i].lo; c <= r[i].hi; c++) ds_cpumask_add(set, (int)c);
    free(r);
    return k < 0 ? ds_fail(err, "E_ARG", "%s: %s", what, why) : 0;
}

/* The first line of sysfs/<rel> into buf; -1 (errno kept) when the file cannot be read. */
static int read_line(const char *sysfs, const char *rel, char *buf, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", sysfs, rel);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *ok = fgets(buf, (int)n, f);
    fclose(f);
    if (!ok) buf[0] = 0;
    return 0;
}

static int mask_count(const ds_cpumask *m) {
    int c = 0;
    for (int i = 0; i < DS_MAX_CPUS / 64; i++) c += __builtin_popcountll(m->bits[i]);
    return c;
}

static void mask_text(const ds_cpumask *m, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int c = 0; c < DS_MAX_CPUS && k + 16 < n; c++) {
        if (!ds_cpumask_has(m, c)) continue;
        int e = c;
        while (e + 1 < DS_MAX_CPUS && ds_cpumask_has(m, e + 1)) e++;
        k += (size_t)snprintf(buf + k, n - k, e > c ? "%s%d-%d" : "%s%d", k ? "," : "", c, e);
        c = e;
    }
}

/* "all" or a comma list of node ids, each online, none twice, into p->nodes (ascending). */
static int parse_nodes(const char *spec, const ds_cpumask *online, ds_numa_plan *p, ds_error *err) {
    char have[256];
    mask_text(online, have, sizeof have);
    ds_int_range r[DS_NUMA_MAX_NODES + 1];
    char why[256];
    int k = ds_parse_int_ranges(spec, 0, INT32_MAX, r, DS_NUMA_MAX_NODES + 1, why, sizeof why);
    for (int i = 0; i < k; i++)
        if (r[i].lo != r[i].hi) k = -1;   /* ids only: no ranges ("none" gives k = 0) */
    if (k <= 0)
        return ds_fail(err, "E_ARG", "--numa-nodes: expected all or a comma list of node ids (online: %s), got '%s'", have, spec);
    if (k > DS_NUMA_MAX_NODES) return ds_fail(err, "E_ARG", "--numa-nodes: more than %d nodes in '%s'", DS_NUMA_MAX_NODES, spec);
    ds_cpumask want = {{0}};
    for (int i = 0; i < k; i++) {
        const int64_t id = r[i].lo;
        if (id >= DS_MAX_CPUS || !ds_cpumask_has(online, (int)id))
            return ds_fail(err, "E_ARG", "--numa-nodes: node %lld is not online on this host (online nodes: %s)", (long long)id, have);
        if (ds_cpumask_has(&want, (int)id)) return ds_fail(err, "E_ARG", "--numa-nodes: node %lld is named twice in '%s'", (long long)id, spec);
        ds_cpumask_add(&want, (int)id);
    }
    for (int id = 0; id < DS_MAX_CPUS; id++)
        if (ds_cpumask_has(&want, id)) p->nodes[p->n_nodes++] = id;
    return 0;
}

/* Node id's CPUs (∩ allowed) into p->cpus and, for named nodes, its memory into the sums. */
static int add_node(const char *sysfs, int id, const ds_cpumask *allowed, ds_numa_plan *p, ds_error *err) {
    char rel[128], line[4096], what[600];
    snprintf(rel, sizeof rel, "node/node%d/cpulist", id);
    snprintf(what, sizeof what, "%s/%s", sysfs, rel);
    if (read_line(sysfs, rel, line, sizeof line)) return ds_fail(err, "E_IO", "%s: cannot read (%s)", what, strerror(errno));
    ds_cpumask cpus;
    if (ds_cpulist_parse(line, what, &cpus, err)) return -1;
    for (int i = 0; i < DS_MAX_CPUS / 64; i++) p->cpus.bits[i] |= cpus.bits[i] & allowed->bits[i];
    if (p->all) return 0;
    snprintf(what, sizeof what, "%s/node/node%d/meminfo", sysfs, id);
    FILE *f = fopen(what, "r");
    if (!f) return ds_fail(err, "E_IO", "%s: cannot read (%s)", what, strerror(errno));
    unsigned long long total = 0, free_kb = 0, file_kb = 0, v;
    bool have_total = false;
    while (fgets(line, sizeof line, f)) {
        const char *c = strchr(line, ':');   /* "Node 0 MemTotal:       24683748 kB" */
        if (!c || sscanf(c + 1, "%llu", &v) != 1) continue;
        if (strstr(line, " MemTotal:")) total = v, have_total = true;
        else if (strstr(line, " MemFree:")) free_kb = v;
        else if (strstr(line, " FilePages:")) file_kb = v;
    }
    fclose(f);
    if (!have_total) return ds_fail(err, "E_IO", "%s: no MemTotal line", what);
    p->mem_total += total << 10;
    p->mem_free += (free_kb + file_kb) << 10;
    return 0;
}

/* One core per group of SMT siblings, named by its lowest CPU in p->cpus (siblings unreadable: the
 * CPU is its own core). */
static void find_cores(const char *sysfs, ds_numa_plan *p) {
    ds_cpumask seen = {{0}};
    p->n_cores = 0;
    for (int c = 0; c < DS_MAX_CPUS; c++) {
        if (!ds_cpumask_has(&p->cpus, c) || ds_cpumask_has(&seen, c)) continue;
        p->core_cpu[p->n_cores++] = c;
        char rel[128], line[4096];
        ds_cpumask sib;
        snprintf(rel, sizeof rel, "cpu/cpu%d/topology/thread_siblings_list", c);
        if (!read_line(sysfs, rel, line, sizeof line) && !ds_cpulist_parse(line, rel, &sib, NULL))
            for (int i = 0; i < DS_MAX_CPUS / 64; i++) seen.bits[i] |= sib.bits[i];
    }
}

static void current_affinity(ds_cpumask *m) {
    cpu_set_t set;
    memset(m, 0, sizeof *m);
    if (sched_getaffinity(0, sizeof set, &set)) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (int c = 0; c < n && c < DS_MAX_CPUS; c++) ds_cpumask_add(m, c);
        return;
    }
    for (int c = 0; c < CPU_SETSIZE && c < DS_MAX_CPUS; c++)
        if (CPU_ISSET(c, &set)) ds_cpumask_add(m, c);
}

int ds_numa_plan_make(const char *spec, const char *sysfs, const ds_cpumask *allowed, ds_numa_plan *p, ds_error *err) {
    memset(p, 0, sizeof *p);
    if (!spec || !*spec) spec = "all";
    if (!sysfs) sysfs = DS_SYSFS_SYSTEM;
    ds_cpumask own;
    if (!allowed) current_affinity(&own), allowed = &own;
    p->all = !strcmp(spec, "all");
    char line[4096], what[600];
    ds_cpumask online;
    snprintf(what, sizeof what, "%s/node/online", sysfs);
    if (read_line(sysfs, "node/online", line, sizeof line)) {
        if (!p->all)
            return ds_fail(err, "E_ARG", "--numa-nodes %s: this host shows no NUMA topology (%s: %s); use all", spec, what,
                           strerror(errno));
        p->cpus = *allowed;   /* no node/: one node holding every CPU the process may use */
        p->n_nodes = 1;
    } else {
        if (ds_cpulist_parse(line, what, &online, err)) return -1;
        if (p->all) {
            for (int id = 0; id < DS_MAX_CPUS && p->n_nodes < DS_NUMA_MAX_NODES; id++)
                if (ds_cpumask_has(&online, id)) p->nodes[p->n_nodes++] = id;
        } else if (parse_nodes(spec, &online, p, err)) {
            return -1;
        }
        for (int i = 0; i < p->n_nodes; i++)
            if (add_node(sysfs, p->nodes[i], allowed, p, err)) return -1;
    }
    p->n_cpus = mask_count(&p->cpus);
    if (p->n_cpus == 0) {
        char mine[256];
        mask_text(allowed, mine, sizeof mine);
        return ds_fail(err, "E_ARG", "--numa-nodes %s: none of the nodes' CPUs is among the CPUs this process may use (%s)", spec, mine);
    }
    find_cores(sysfs, p);
    snprintf(p->text, sizeof p->text, "%s", p->all ? "all" : "");
    for (int i = 0, k = 0; !p->all && i < p->n_nodes && k + 8 < (int)sizeof p->text; i++)
        k += snprintf(p->text + k, sizeof p->text - (size_t)k, "%s%d", i ? "," : "", p->nodes[i]);
    return 0;
}

int ds_numa_apply(const ds_numa_plan *p, ds_error *err) {
    if (p->all) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < DS_MAX_CPUS && c < CPU_SETSIZE; c++)
        if (ds_cpumask_has(&p->cpus, c)) CPU_SET(c, &set);
    if (sched_setaffinity(0, sizeof set, &set))
        return ds_fail(err, "E_IO", "--numa-nodes %s: sched_setaffinity: %s", p->text, strerror(errno));
    unsigned long mask[DS_MAX_CPUS / (8 * sizeof(unsigned long))] = {0};
    for (int i = 0; i < p->n_nodes; i++) mask[p->nodes[i] / (8 * sizeof(unsigned long))] |= 1ul << (p->nodes[i] % (8 * sizeof(unsigned long)));
    const int mode = p->n_nodes == 1 ? MPOL_BIND : MPOL_INTERLEAVE;
    /* the kernel reads maxnode - 1 bits */
    if (syscall(SYS_set_mempolicy, mode, mask, (unsigned long)(8 * sizeof mask + 1)))
        return ds_fail(err, "E_IO",
                       "--numa-nodes %s: set_mempolicy(%s): %s (a container may need the SYS_NICE capability; "
                       "--numa-nodes all leaves placement to the kernel)",
                       p->text, mode == MPOL_BIND ? "MPOL_BIND" : "MPOL_INTERLEAVE", strerror(errno));
    return 0;
}

static int place(const char *spec, int threads, ds_numa_plan *p, ds_error *err) {
    if (ds_numa_plan_make(spec, NULL, NULL, p, err) || ds_numa_apply(p, err)) return -1;
    ds_pool_place(threads > 0 ? threads : p->n_cores, p->all ? NULL : p->core_cpu, p->all ? 0 : p->n_cores);
    if (!p->all) {
        char cpus[256];
        mask_text(&p->cpus, cpus, sizeof cpus);
        ds_log(DS_LOG_INFO, "numa: nodes %s: %d threads on CPUs %s (%d physical cores, one worker pinned per core), memory %s, "
                            "%.1f GiB installed", p->text, ds_pool_threads(), cpus, p->n_cores,
               p->n_nodes == 1 ? "bound to the node" : "interleaved over the nodes", (double)p->mem_total / (1u << 30));
    }
    return 0;
}

int ds_numa_place(const char *spec, int threads, ds_numa_plan *out, ds_error *err) {
    ds_numa_plan *p = out ? out : ds_xcalloc(1, sizeof *p);
    int rc = place(spec, threads, p, err);
    if (!out) free(p);
    return rc;
}
