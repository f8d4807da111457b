/* Where the Engram tables live (`--engram-residency`, SERVING.md §12): page-cache (the file mapping,
 * default; every page read in and mapped at load, below), huge-pages (a copy, below), locked (the mapping's pages mlock'ed: never evicted, read in
 * at load), disk (the mapping, left out of the memory plan: evictable); and the resident share that
 * `serve` samples at start-up (§13 step 4).
 *
 * huge-pages, why: every token row of a step reads 24 random rows of each Engram table (two tables of about
 * 100 GiB in the release), so nearly every lookup misses the TLB.  Through the file mapping each
 * miss walks 4 KiB page tables far too large for any cache, and on a virtualised host that walk is
 * two-dimensional.  Measured on mini (2 threads, `perf serve --quick`, the gather timed inside the
 * layer): 16 token rows took 4.9-5.9 ms per Engram layer through the mapping and 0.5 ms from a copy
 * on 2 MiB pages — more than the layer's projection itself.  madvise(MADV_HUGEPAGE) on the mapping
 * does nothing for ext4 files, so the copy is the way to get huge pages (decision 187).
 *
 * How: at load, after the weights are bound, each table's codes and scales are copied by the pool
 * into ds_huge_alloc blocks, 32 MiB per task; each task then gives the file pages of its range back
 * (MADV_DONTNEED on our mapping, POSIX_FADV_DONTNEED on the file), so the table is held once, not
 * twice, and at no moment more than a few chunks twice.  The memory plan then counts those bytes as
 * repacked instead of mapped.  The load fails, naming the reason, where the copy cannot help or
 * cannot fit: transparent huge pages set to "never" (or unreadable), or less MemAvailable than
 * the copy.  The share the kernel really backed with huge pages is read back from /proc/self/smaps
 * and logged (WARN below 90%: fragmented memory gives 4 KiB pages and the gain shrinks).
 * The values are the same bytes, so no result changes. */
#define _GNU_SOURCE
#include "base/fsutil.h"
#include "base/hugemem.h"
#include "base/threadpool.h"
#include "model/model.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define COPY_CHUNK ((size_t)32 << 20)

typedef struct copy_job {
    uint8_t *dst;
    const ds_tensor *t;           /* source: t->data, t->nbytes */
} copy_job;

/* Give back the file pages of [off, off + n) of t (nothing when t is an aligned heap copy). */
static void release_range(const ds_tensor *t, size_t off, size_t n) {
    if (t->file) (void)ds_st_release(t->file, (const uint8_t *)t->data + off, n);
}

static void copy_task(void *vctx, int i, int thread) {
    (void)thread;
    const copy_job *j = vctx;
    const size_t off = (size_t)i * COPY_CHUNK, n = DS_MIN(COPY_CHUNK, (size_t)j->t->nbytes - off);
    memcpy(j->dst + off, (const uint8_t *)j->t->data + off, n);
    release_range(j->t, off, n);
}

static void *copy_tensor(ds_model *m, const ds_tensor *t) {
    uint8_t *dst = ds_huge_alloc((size_t)t->nbytes);
    copy_job j = {dst, t};
    ds_pool_run((int)((t->nbytes + COPY_CHUNK - 1) / COPY_CHUNK), copy_task, &j);
    m->packed_bytes += (size_t)t->nbytes;
    m->uncounted_bytes += (size_t)t->nbytes;
    return dst;
}

/* The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise", "never"). */
static int thp_mode(char *mode, size_t n, ds_error *err) {
    const char *path = "/sys/kernel/mm/transparent_hugepage/enabled";
    char *text = NULL;
    size_t len = 0;
    if (ds_read_file(path, &text, &len, err) < 0) return -1;
    const char *a = strchr(text, '['), *b = a ? strchr(a, ']') : NULL;
    if (!b) {
        free(text);
        return ds_fail(err, "E_ENGRAM_RESIDENCY", "%s: expected the active mode in brackets, found none", path);
    }
    snprintf(mode, n, "%.*s", (int)(b - a - 1), a + 1);
    free(text);
    if (!strcmp(mode, "never"))
        return ds_fail(err, "E_ENGRAM_RESIDENCY", "engram residency huge-pages: %s: expected always or madvise, found never "
                       "(the copy would only add load time; use page-cache)", path);
    return 0;
}

/* Bytes of [lo, hi) the kernel backs with huge pages: AnonHugePages of the overlapping mappings,
 * each capped at its overlap (a mapping may be larger than the block). */
static size_t huge_bytes_in(uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[512];
    size_t total = 0, overlap = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b, kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            const uintptr_t s = DS_MAX((uintptr_t)a, lo), e = DS_MIN((uintptr_t)b, hi);
            overlap = e > s ? e - s : 0;
        } else if (overlap && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) {
            total += DS_MIN((size_t)kb * 1024, overlap);
        }
    }
    fclose(f);
    return total;
}

static size_t block_huge_bytes(const void *p, size_t n) { return huge_bytes_in((uintptr_t)p, (uintptr_t)p + n); }

static size_t table_bytes(const ds_model *m) {
    size_t bytes = 0;
    for (int e = 0; e < m->cfg.n_engram; e++) bytes += (size_t)(m->engram[e].t_codes->nbytes + m->engram[e].t_scales->nbytes);
    return bytes;
}

static int make_huge_pages(ds_model *m, ds_error *err) {
    const size_t bytes = table_bytes(m);
    /* page-cache tables are shared by the ranks of one host; copies would be one per rank */
    if (ds_dist_host_size() > 1)
        return ds_fail(err, "E_ENGRAM_RESIDENCY", "engram residency huge-pages: %d ranks share this host and each would hold "
                       "its own copy of the tables (%zu B); use page-cache (one page cache for all) or one rank per host",
                       ds_dist_host_size(), bytes);
    char mode[32];
    uint64_t total = 0, avail = 0;
    if (thp_mode(mode, sizeof mode, err) < 0 || ds_meminfo_read(NULL, &total, &avail, err) < 0) return -1;
    if (avail < bytes)
        return ds_fail(err, "E_ENGRAM_RESIDENCY", "engram residency huge-pages: the tables need %zu B of anonymous memory, "
                       "MemAvailable is %llu B; use page-cache or free memory", bytes, (unsigned long long)avail);
    const double t0 = ds_now();
    size_t huge = 0;
    for (int e = 0; e < m->cfg.n_engram; e++) {
        ds_engram_weights *ew = &m->engram[e];
        ew->codes = ew->copy_codes = copy_tensor(m, ew->t_codes);
        ew->scales = ew->copy_scales = copy_tensor(m, ew->t_scales);
        huge += block_huge_bytes(ew->copy_codes, (size_t)ew->t_codes->nbytes) +
                block_huge_bytes(ew->copy_scales, (size_t)ew->t_scales->nbytes);
    }
    const double share = bytes ? (double)huge / (double)bytes : 1.0;
    ds_log(share < 0.9 ? DS_LOG_WARN : DS_LOG_INFO,
           "engram residency huge-pages: %d tables, %.1f MiB copied in %.2f s, %.0f%% on huge pages (transparent huge "
           "pages: %s), their file pages given back", m->cfg.n_engram, (double)bytes / 1048576.0, ds_now() - t0,
           100.0 * share, mode);
    return 0;
}

/* mlock the whole pages of a tensor's bytes (reading them in from the file where needed). */
static int lock_tensor(const ds_tensor *t, ds_error *err) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)t->data & ~(page - 1);
    const size_t n = (uintptr_t)t->data + (size_t)t->nbytes - a;
    /* the system call itself: sanitizer runtimes replace mlock() with a no-op that reports success */
    if (!syscall(SYS_mlock, (const void *)a, n)) return 0;
    const int e = errno;
    struct rlimit rl = {0};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    char lim[32];
    if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
    else snprintf(lim, sizeof lim, "%llu B", (unsigned long long)rl.rlim_cur);
    return ds_fail(err, "E_ENGRAM_RESIDENCY", "engram residency locked: %s: %s: mlock of %zu B failed: %s (RLIMIT_MEMLOCK "
                   "%s; raise it with ulimit -l or LimitMEMLOCK, or use page-cache)", t->file ? t->file->path : "?", t->name,
                   n, strerror(e), lim);
}

static int make_locked(ds_model *m, ds_error *err) {
    const double t0 = ds_now();
    for (int e = 0; e < m->cfg.n_engram; e++)
        if (lock_tensor(m->engram[e].t_codes, err) < 0 || lock_tensor(m->engram[e].t_scales, err) < 0) return -1;
    ds_log(DS_LOG_INFO, "engram residency locked: %d tables, %.1f MiB of page cache locked in %.2f s", m->cfg.n_engram,
           (double)table_bytes(m) / 1048576.0, ds_now() - t0);
    return 0;
}

/* page-cache, why populate: a lookup's first touch of a table page through our mapping is a minor
 * fault even when the page sits in the page cache, and two tables of ~100 GiB are far too large for
 * a server ever to touch them all, so on demand nearly every lookup of a long-running server
 * faults.  On this kind of VM a fault costs ~30 us: mini's 1-row steps spent 1.0-1.6 ms of a
 * 36-39 ms step gathering table rows after 200 steps (40 faults a step), 0.5 ms with the pages
 * mapped.  MADV_POPULATE_READ (Linux 5.14) maps every page at load, reading in from the file what
 * the page cache lacks, so the lookups then find cached, mapped pages (PITFALLS 14 wants them
 * resident anyway); page tables add 1/512 of the tables' bytes (~0.4 GiB for the release), within
 * the plan's misc reservation.  The pool maps chunks side by side (decision 199). */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#define POPULATE_CHUNK ((size_t)64 << 20)

typedef struct populate_job {
    uintptr_t start;              /* page-aligned start of the range */
    size_t bytes;                 /* whole pages covering the tensor */
} populate_job;

typedef struct populate_ctx {
    populate_job *jobs;
    int n_jobs;
    int *first_chunk;             /* [n_jobs + 1] running chunk count */
    int *errs;                    /* [chunks] errno of each chunk's madvise, 0 when mapped */
} populate_ctx;

static void populate_task(void *vctx, int chunk, int thread) {
    (void)thread;
    populate_ctx *c = vctx;
    int j = 0;
    while (c->first_chunk[j + 1] <= chunk) j++;
    const populate_job *job = &c->jobs[j];
    const size_t off = (size_t)(chunk - c->first_chunk[j]) * POPULATE_CHUNK;
    const size_t n = DS_MIN(POPULATE_CHUNK, job->bytes - off);
    c->errs[chunk] = madvise((void *)(job->start + off), n, MADV_POPULATE_READ) ? errno : 0;
}

static int populate_tables(ds_model *m, ds_error *err) {
    const int n_jobs = 2 * m->cfg.n_engram;
    if (n_jobs == 0) return 0;
    const double t0 = ds_now();
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    populate_job *jobs = ds_xcalloc((size_t)n_jobs, sizeof *jobs);
    const ds_tensor **ts = ds_xcalloc((size_t)n_jobs, sizeof *ts);
    int *first = ds_xcalloc((size_t)n_jobs + 1, sizeof *first);
    for (int j = 0; j < n_jobs; j++) {
        const ds_engram_weights *ew = &m->engram[j / 2];
        ts[j] = j % 2 ? ew->t_scales : ew->t_codes;
        const uintptr_t a = (uintptr_t)ts[j]->data & ~(page - 1);
        jobs[j] = (populate_job){a, (uintptr_t)ts[j]->data + (size_t)ts[j]->nbytes - a};
        first[j + 1] = first[j] + (int)((jobs[j].bytes + POPULATE_CHUNK - 1) / POPULATE_CHUNK);
    }
    int *errs = ds_xcalloc((size_t)first[n_jobs] + 1, sizeof *errs);
    populate_ctx c = {jobs, n_jobs, first, errs};
    ds_pool_run(first[n_jobs], populate_task, &c);
    int rc = 0, unsupported = 0;
    for (int j = 0; j < n_jobs && !rc; j++)
        for (int k = first[j]; k < first[j + 1] && !rc; k++) {
            if (errs[k] == EINVAL) unsupported = 1;
            else if (errs[k])
                rc = ds_fail(err, "E_IO", "engram residency page-cache: %s: %s: reading the table in at load failed: %s "
                             "(a truncated or unreadable file)", ts[j]->file ? ts[j]->file->path : "?", ts[j]->name,
                             strerror(errs[k]));
        }
    if (!rc && unsupported)
        ds_log(DS_LOG_INFO, "engram residency page-cache: this kernel has no MADV_POPULATE_READ (Linux 5.14+): table pages "
               "are read in and mapped at their first lookup");
    else if (!rc)
        ds_log(DS_LOG_INFO, "engram residency page-cache: %d tables, %.1f MiB read in and mapped in %.2f s",
               m->cfg.n_engram, (double)table_bytes(m) / 1048576.0, ds_now() - t0);
    free(jobs);
    free(ts);
    free(first);
    free(errs);
    return rc;
}

int ds_engram_make_resident(ds_model *m, const char *residency, ds_error *err) {
    if (!residency || !strcmp(residency, "page-cache")) return populate_tables(m, err);
    if (!strcmp(residency, "huge-pages")) return make_huge_pages(m, err);
    if (!strcmp(residency, "locked")) return make_locked(m, err);
    if (!strcmp(residency, "disk")) {
        m->uncounted_bytes += table_bytes(m);
        ds_log(DS_LOG_WARN, "engram residency disk: the %.1f MiB of Engram tables are left out of the memory plan; "
               "lookups whose pages the kernel evicted wait for the disk", (double)table_bytes(m) / 1048576.0);
        return 0;
    }
    return ds_fail(err, "E_ARG", "engram residency: expected \"page-cache\", \"huge-pages\", \"locked\" or \"disk\", "
                   "found \"%s\"", residency);
}

/* SERVING.md §13 step 4: the resident share of each table, from mincore on `samples` random pages
 * of its codes (the mapping, or the copy), drawn by a fixed generator so that a restart samples the
 * same pages. */
int ds_engram_resident_share(const ds_model *m, int samples, double *share) {
    const long page = sysconf(_SC_PAGESIZE);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int e = 0; e < m->cfg.n_engram; e++) {
        const ds_engram_weights *ew = &m->engram[e];
        const uintptr_t lo = (uintptr_t)ew->codes & ~(uintptr_t)(page - 1);
        const size_t pages = ((uintptr_t)ew->codes + (size_t)ew->t_codes->nbytes - lo + (size_t)page - 1) / (size_t)page;
        int resident = 0;
        for (int i = 0; i < samples; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            unsigned char v = 0;
            if (mincore((void *)(lo + (seed >> 16) % pages * (size_t)page), (size_t)page, &v) < 0) return -1;
            resident += v & 1;
        }
        share[e] = samples ? (double)resident / samples : 1.0;
    }
    return m->cfg.n_engram;
}

void ds_engram_free_resident(ds_model *m) {
    for (int e = 0; e < DS_MAX_LIST; e++) {
        ds_huge_free(m->engram[e].copy_codes);
        ds_huge_free(m->engram[e].copy_scales);
        m->engram[e].copy_codes = m->engram[e].copy_scales = NULL;
    }
}
