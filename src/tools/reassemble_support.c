/* The pieces of reassembly that split and verify (and mkmodel) reuse: exit-class merging, the
 * per-target lock, the part-set consistency check, parallel part verification, the .verified
 * stamp, and the stop-signal handlers of the CLI layer.  The reassembly flow itself is in
 * reassemble.c. */
#define _GNU_SOURCE
#include "tools/reassemble.h"
#include "base/fsutil.h"
#include "base/sha256.h"
#include "tools/hash_pipeline.h"
#include "tools/progress.h"
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int exit_rank(int c) {
    switch (c) {
    case DS_EXIT_USAGE: return 6;
    case DS_EXIT_IO: return 5;
    case DS_EXIT_LOCK: return 4;
    case DS_EXIT_MISSING: return 3;
    case DS_EXIT_CHECK: return 2;
    case DS_EXIT_NEED: return 1;
    case DS_EXIT_OK: return 0;
    default: return 7;   /* 128+signal */
    }
}

int ds_exit_merge(int a, int b) { return exit_rank(b) > exit_rank(a) ? b : a; }

int ds_tool_stopped_status(volatile sig_atomic_t *stop) { return stop && *stop ? 128 + (int)*stop : 0; }

/* ------------------------------------------------------------------------------------------ */
/* Locking                                                                                      */

int ds_tool_lock(const char *dir, const char *name, ds_error *err) {
    char *rel = NULL;
    if (asprintf(&rel, "%s.lock", name) < 0) abort();
    char *path = ds_path_join(dir, rel);
    free(rel);
    /* The lock file is removed on release, so a process may lock an inode that was just unlinked;
     * re-check that the path still names the locked inode and retry if not. */
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            ds_fail(err, "E_IO", "%s: cannot create lock file: %s", path, strerror(errno));
            free(path);
            return -DS_EXIT_IO;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK) {
                ds_fail(err, "E_LOCK", "%s is held by another process (a reassemble or split of the same file is running)", path);
                free(path);
                return -DS_EXIT_LOCK;
            }
            ds_fail(err, "E_IO", "%s: flock failed: %s", path, strerror(e));
            free(path);
            return -DS_EXIT_IO;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            free(path);
            return fd;
        }
        close(fd);
    }
    ds_fail(err, "E_LOCK", "%s: lock file keeps being replaced by other processes", path);
    free(path);
    return -DS_EXIT_LOCK;
}

void ds_tool_unlock(const char *dir, const char *name, int fd) {
    if (fd < 0) return;
    char *rel = NULL;
    if (asprintf(&rel, "%s.lock", name) < 0) abort();
    char *path = ds_path_join(dir, rel);
    unlink(path);          /* while still holding the lock: see the inode re-check above */
    close(fd);
    free(path);
    free(rel);
}

/* ------------------------------------------------------------------------------------------ */
/* Part-set consistency (step 1)                                                                */

typedef struct { char *name; int idx, cnt, width; } found_part;

static int cmp_found(const void *a, const void *b) {
    const found_part *x = a, *y = b;
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void appendf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t n, const char *fmt, ...) {
    size_t k = strlen(buf);
    if (k + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
}

int ds_parts_check_set(const char *dir, const ds_parts_target *t, char *why, size_t why_len) {
    why[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(why, why_len, "cannot list %s: %s", dir, strerror(errno));
        return DS_EXIT_IO;
    }
    found_part *f = NULL;
    int nf = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *base = NULL;
        int idx, cnt, w;
        if (!ds_parts_parse_name(de->d_name, &base, &idx, &cnt, &w)) continue;
        int mine = !strcmp(base, t->name);
        free(base);
        if (!mine) continue;
        f = ds_xrealloc(f, (size_t)(nf + 1) * sizeof *f);
        f[nf++] = (found_part){ds_xstrdup(de->d_name), idx, cnt, w};
    }
    closedir(d);
    qsort(f, (size_t)nf, sizeof *f, cmp_found);

    int rc = 0;
    /* Listed parts that are not on disk make this "input missing" (class 5). */
    int n_missing = 0;
    for (int i = 0; i < t->n_parts; i++) {
        char *p = ds_path_join(dir, t->parts[i].name);
        struct stat st;
        if (stat(p, &st) != 0) {
            if (n_missing++ < 4) appendf(why, why_len, "%smissing %s", why[0] ? "; " : "", t->parts[i].name);
        } else if (!S_ISREG(st.st_mode)) {
            appendf(why, why_len, "%s%s is not a regular file", why[0] ? "; " : "", t->parts[i].name);
            rc = DS_EXIT_CHECK;
        }
        free(p);
    }
    if (n_missing > 4) appendf(why, why_len, " (and %d more)", n_missing - 4);
    if (t->n_parts == 0) {
        appendf(why, why_len, "%sPARTS.sha256 lists no parts for it", why[0] ? "; " : "");
        rc = DS_EXIT_MISSING;
    } else if (nf == 0) {
        appendf(why, why_len, "%sno part files found", why[0] ? "; " : "");
        rc = DS_EXIT_MISSING;
    }
    for (int i = 0; i < nf && rc != DS_EXIT_MISSING; i++) {
        if (f[i].cnt != nf) {
            appendf(why, why_len, "%s%s says %d parts, %d found", why[0] ? "; " : "", f[i].name, f[i].cnt, nf);
            rc = DS_EXIT_CHECK;
            break;
        }
    }
    for (int i = 0; i < nf && rc == 0; i++) {
        if (f[i].idx != i) {
            appendf(why, why_len, "%sindices not contiguous from 0: %s at position %d", why[0] ? "; " : "", f[i].name, i);
            rc = DS_EXIT_CHECK;
        } else if (i + 1 < nf && f[i + 1].idx == f[i].idx) {
            appendf(why, why_len, "%sduplicate index: %s and %s", why[0] ? "; " : "", f[i].name, f[i + 1].name);
            rc = DS_EXIT_CHECK;
        }
    }
    if (rc == 0 && nf != t->n_parts) {
        appendf(why, why_len, "%s%d part files found, PARTS.sha256 lists %d", why[0] ? "; " : "", nf, t->n_parts);
        rc = DS_EXIT_CHECK;
    }
    for (int i = 0; i < nf && rc == 0; i++)
        if (strcmp(f[i].name, t->parts[i].name) != 0) {
            appendf(why, why_len, "%sfound %s where PARTS.sha256 lists %s", why[0] ? "; " : "", f[i].name, t->parts[i].name);
            rc = DS_EXIT_CHECK;
        }
    if (n_missing) rc = DS_EXIT_MISSING;   /* missing input outranks the inconsistency it causes */

    /* Sizes: all parts but the last equal (and equal part_size= when given), the last no larger
     * and non-empty, the sum equal to size= when given.  A truncated part fails here, before any
     * byte is read. */
    if (rc == 0) {
        int64_t first = -1, sum = 0;
        for (int i = 0; i < nf && rc == 0; i++) {
            char *p = ds_path_join(dir, f[i].name);
            int64_t sz = ds_file_size(p);
            free(p);
            sum += sz;
            bool last = i == nf - 1;
            int64_t want_full = t->part_size > 0 ? t->part_size : first;
            if (i == 0 && !last) first = sz;
            if (!last && want_full >= 0 && sz != want_full) {
                snprintf(why, why_len, "%s is %lld bytes, expected %lld like every part but the last (truncated?)",
                         f[i].name, (long long)sz, (long long)want_full);
                rc = DS_EXIT_CHECK;
            } else if (last && nf > 1 && (sz > want_full || sz == 0)) {
                snprintf(why, why_len, "last part %s is %lld bytes, expected 1..%lld", f[i].name, (long long)sz, (long long)want_full);
                rc = DS_EXIT_CHECK;
            } else if (last && nf == 1 && t->part_size > 0 && sz > t->part_size) {
                snprintf(why, why_len, "%s is %lld bytes, more than part_size=%lld", f[i].name, (long long)sz, (long long)t->part_size);
                rc = DS_EXIT_CHECK;
            }
        }
        if (rc == 0 && t->size >= 0 && sum != t->size) {
            snprintf(why, why_len, "parts total %lld bytes, PARTS.sha256 says size=%lld (a part is truncated or extended)",
                     (long long)sum, (long long)t->size);
            rc = DS_EXIT_CHECK;
        }
    }
    for (int i = 0; i < nf; i++) free(f[i].name);
    free(f);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Parallel part verification (check-only, split's verify pass)                                 */

typedef struct {
    const char *dir;
    const ds_parts_target *t;
    int next;                     /* next part index to take (under mu) */
    pthread_mutex_t mu;
    char (*got)[DS_SHA256_HEX_LEN + 1];
    int *status;                  /* per part: 0 hashed, 3 I/O error, 128+n stopped */
    ds_error *errs;
    ds_progress *progress;
    volatile sig_atomic_t *stop;
} verify_job;

static int store_hex(void *user, int seg, const char *hex, ds_error *err) {
    memcpy(user, hex, DS_SHA256_HEX_LEN + 1);
    return 0;
}

static void *verify_worker(void *p) {
    verify_job *j = p;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->t->n_parts) break;
        char *path = ds_path_join(j->dir, j->t->parts[i].name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            ds_fail(&j->errs[i], "E_IO", "%s: cannot open: %s", path, strerror(errno));
            j->status[i] = DS_EXIT_IO;
        } else {
            struct stat st;
            fstat(fd, &st);
            ds_hp_segment seg = {fd, 0, (uint64_t)st.st_size, -1, 0, path, NULL};
            ds_hp_opts o = {.seg_hash = true, .on_done = store_hex, .user = j->got[i], .progress = j->progress, .stop = j->stop};
            int r = ds_hp_run(&seg, 1, &o, &j->errs[i]);
            j->status[i] = r == 0 ? 0 : r == 1 ? ds_tool_stopped_status(j->stop) : DS_EXIT_IO;
            close(fd);
        }
        free(path);
    }
    return NULL;
}

int ds_parts_verify(const char *dir, const ds_parts_target *t, int jobs, bool quiet, volatile sig_atomic_t *stop) {
    verify_job j = {.dir = dir, .t = t, .stop = stop};
    pthread_mutex_init(&j.mu, NULL);
    int n = t->n_parts;
    j.got = ds_xcalloc((size_t)(n ? n : 1), sizeof *j.got);
    j.status = ds_xcalloc((size_t)(n ? n : 1), sizeof *j.status);
    j.errs = ds_xcalloc((size_t)(n ? n : 1), sizeof *j.errs);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        char *p = ds_path_join(dir, t->parts[i].name);
        int64_t sz = ds_file_size(p);
        total += sz > 0 ? (uint64_t)sz : 0;
        free(p);
    }
    ds_progress prog;
    char label[160];
    snprintf(label, sizeof label, "%s parts", t->name);
    ds_progress_init(&prog, label, total, quiet);
    ds_progress_stage(&prog, "verify %d part%s, %d at a time", n, n == 1 ? "" : "s", jobs);
    j.progress = &prog;
    if (jobs < 1) jobs = 1;
    if (jobs > n) jobs = n ? n : 1;
    pthread_t *th = ds_xmalloc((size_t)jobs * sizeof *th);
    for (int i = 0; i < jobs; i++) pthread_create(&th[i], NULL, verify_worker, &j);
    for (int i = 0; i < jobs; i++) pthread_join(th[i], NULL);
    ds_progress_finish(&prog);
    ds_progress_destroy(&prog);
    int rc = ds_tool_stopped_status(stop);
    for (int i = 0; i < n && !rc; i++) {
        if (j.status[i] == DS_EXIT_IO) {
            printf("[FAIL] %s: %s\n", t->name, j.errs[i].msg);
            rc = ds_exit_merge(rc, DS_EXIT_IO);
        } else if (j.status[i] == 0 && strcmp(j.got[i], t->parts[i].sha256) != 0) {
            int idx = 0, cnt, w = 2;
            ds_parts_parse_name(t->parts[i].name, NULL, &idx, &cnt, &w);
            printf("[FAIL] %s: part %0*d sha256 mismatch (%s: expected %s, got %s)\n", t->name, w, idx,
                   t->parts[i].name, t->parts[i].sha256, j.got[i]);
            rc = ds_exit_merge(rc, DS_EXIT_CHECK);
        }
    }
    free(th);
    free(j.got);
    free(j.status);
    free(j.errs);
    pthread_mutex_destroy(&j.mu);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Stamp T.verified (step 2)                                                                    */

static int64_t mtime_ns(const struct stat *st) { return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec; }

/* The stamp is JSON {sha256, size, inode, mtime_ns, verified_utc}.  size and inode are JSON integers
 * (exact below 2^53); mtime_ns exceeds 2^53, so it is written as a decimal string, and a reader
 * accepts a number too (compared in double precision, as other readers of the stamp do). */
static bool json_u64_is(const cJSON *it, uint64_t want) {
    if (cJSON_IsString(it)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)want);
        return !strcmp(it->valuestring, buf);
    }
    return cJSON_IsNumber(it) && it->valuedouble == (double)want;
}

bool ds_reassemble_stamp_ok(const char *target_path, const char *want_hex) {
    char *sp = NULL, *text = NULL;
    if (asprintf(&sp, "%s.verified", target_path) < 0) abort();
    struct stat st;
    bool ok = false;
    if (stat(target_path, &st) == 0 && ds_read_file(sp, &text, NULL, NULL) == 0) {
        cJSON *j = cJSON_Parse(text);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "sha256");
        ok = j && cJSON_IsString(h) && ds_sha256_is_hex(h->valuestring, strlen(h->valuestring)) &&
             (!want_hex || !strcmp(h->valuestring, want_hex)) &&
             json_u64_is(cJSON_GetObjectItemCaseSensitive(j, "size"), (uint64_t)st.st_size) &&
             json_u64_is(cJSON_GetObjectItemCaseSensitive(j, "inode"), (uint64_t)st.st_ino) &&
             json_u64_is(cJSON_GetObjectItemCaseSensitive(j, "mtime_ns"), (uint64_t)mtime_ns(&st));
        cJSON_Delete(j);
    }
    free(text);
    free(sp);
    return ok;
}

int ds_reassemble_stamp_write(const char *target_path, const char *hex, ds_error *err) {
    char *stamp_path = NULL;
    if (asprintf(&stamp_path, "%s.verified", target_path) < 0) abort();
    struct stat st;
    if (stat(target_path, &st) != 0) {
        free(stamp_path);
        return ds_fail(err, "E_IO", "%s: stat failed: %s", target_path, strerror(errno));
    }
    char mt[32], utc[32];
    snprintf(mt, sizeof mt, "%lld", (long long)mtime_ns(&st));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "sha256", hex);
    cJSON_AddNumberToObject(j, "size", (double)st.st_size);
    cJSON_AddStringToObject(j, "mtime_ns", mt);
    cJSON_AddNumberToObject(j, "inode", (double)st.st_ino);
    cJSON_AddStringToObject(j, "verified_utc", utc);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = ds_write_file_atomic(stamp_path, text, strlen(text), err);
    free(text);
    free(stamp_path);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Signals (used by the CLI layer of reassemble and split)                                      */

static volatile sig_atomic_t *g_stop_flag;

static void on_stop_signal(int sig) {
    if (*g_stop_flag) {            /* second signal: the user insists; die the default way */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    *g_stop_flag = sig;
}

void ds_tool_install_stop_handlers(volatile sig_atomic_t *flag) {
    g_stop_flag = flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A file-size limit must surface as EFBIG (an I/O error, exit 3), not kill the process. */
    signal(SIGXFSZ, SIG_IGN);
}
