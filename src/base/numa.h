/* Where the compute threads run and where the process's memory comes from (`--numa-nodes`).
 *
 * Why: a host big enough for the release is usually two sockets, each with its own memory.  A
 * decode step streams every weight once, so its speed is the bandwidth of the memory the weights
 * sit on as seen from the cores that read them.  Left alone, threads wander between sockets and
 * the pages land wherever the first touch happened.  Naming nodes binds both: the process runs on
 * their CPUs only, one compute thread per physical core (SMT siblings share a core's load ports,
 * so a second thread per core adds no bandwidth), each worker pinned to its core, and memory comes
 * from those nodes (bound for one node, interleaved page by page over several, so that every core
 * reads every node's controllers alike).  `all` keeps the kernel's placement and pins nothing,
 * because two servers on one host would otherwise pin onto the same cores.
 *
 * The topology is read from sysfs (a root a test can replace): `node/online`,
 * `node/nodeN/cpulist`, `node/nodeN/meminfo` and `cpu/cpuN/topology/thread_siblings_list`.  A
 * host without `node/` (some containers) is one node holding every CPU the process may use. */
#ifndef DS_BASE_NUMA_H
#define DS_BASE_NUMA_H
#include "base/common.h"
#include <stdbool.h>

#define DS_NUMA_MAX_NODES 64
#define DS_MAX_CPUS 1024                 /* CPU_SETSIZE of glibc */
typedef struct { uint64_t bits[DS_MAX_CPUS / 64]; } ds_cpumask;   /* plain bits: no _GNU_SOURCE for includers */
static inline bool ds_cpumask_has(const ds_cpumask *m, int c) { return c >= 0 && c < DS_MAX_CPUS && (m->bits[c / 64] >> (c % 64)) & 1; }
static inline void ds_cpumask_add(ds_cpumask *m, int c) { if (c >= 0 && c < DS_MAX_CPUS) m->bits[c / 64] |= 1ull << (c % 64); }
#define DS_SYSFS_SYSTEM "/sys/devices/system"

typedef struct ds_numa_plan {
    bool all;                       /* --numa-nodes all: no memory policy, no pinning */
    int n_nodes;                    /* nodes bound (all: the nodes sysfs lists, or 1 without node/) */
    int nodes[DS_NUMA_MAX_NODES];   /* [n_nodes] their ids, ascending */
    ds_cpumask cpus;                /* the nodes' CPUs the process may run on */
    int n_cpus;                     /* CPUs in `cpus` */
    int n_cores;                    /* physical cores among them (>= 1) */
    int core_cpu[DS_MAX_CPUS];      /* [n_cores] lowest CPU of each core in `cpus`, ascending */
    uint64_t mem_total;             /* sum of the nodes' MemTotal, bytes (0: not read, `all`) */
    uint64_t mem_free;              /* sum of the nodes' MemFree + FilePages, bytes (0: not read) */
    char text[160];                 /* "0,1" or "all": the echo */
} ds_numa_plan;

/* Parse a kernel CPU or node list ("0-3,8,10-11") into `set` (ids below DS_MAX_CPUS).  `what`
 * names the source in the error (a file, or the flag). */
int ds_cpulist_parse(const char *text, const char *what, ds_cpumask *set, ds_error *err);

/* The plan for `spec` ("all" or a comma list of node ids) on the topology under `sysfs` (NULL: the
 * host's) for a process allowed on `allowed` (NULL: its current affinity).  Refuses (E_ARG) a node
 * the host lacks, a repeated node, text that is not a list, and nodes without usable CPUs. */
int ds_numa_plan_make(const char *spec, const char *sysfs, const ds_cpumask *allowed, ds_numa_plan *p, ds_error *err);

/* For named nodes: the calling thread's CPU affinity and memory policy (threads it starts later
 * inherit both).  `all`: nothing.  Fails (E_IO) naming the call and errno. */
int ds_numa_apply(const ds_numa_plan *p, ds_error *err);

/* Plan `spec` on this host, apply it, and (re)start the compute pool on it: `threads` workers (0:
 * one per core of the plan), pinned one per core for named nodes.  The plan goes to `p` (NULL: not
 * kept). */
int ds_numa_place(const char *spec, int threads, ds_numa_plan *p, ds_error *err);

#endif
