/* Reassembly of split files (contract and invariant in reassemble.h; steps numbered as TOOLS.md
 * §1.2).  Each target is handled by reassemble_target(), which returns an exit class; the run
 * merges them.  The per-target state (open fds, paths, the journal) lives in one struct so that
 * every failure path can clean up through one function and never leave T.partial behind when the
 * spec says it must go (mismatch, I/O error), while keeping it when a resume is intended (signal). */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define SPACE_MARGIN ((uint64_t)1 << 30)   /* §1.2 step 4: free space >= remaining + 1 GiB */

void ds_reassemble_opts_default(ds_reassemble_opts *o) {
    memset(o, 0, sizeof *o);
    o->dir = ".";
    o->readback = true;
    o->resume = true;
    o->jobs = 2;
}

static int stopped(volatile sig_atomic_t *stop) { return ds_tool_stopped_status(stop); }

/* Hash one whole file with progress; 0 ok, 1 stopped, -1 error. */
static int hash_whole_file(const char *path, const char *label, const char *stage, bool quiet,
                           volatile sig_atomic_t *stop, char hex[DS_SHA256_HEX_LEN + 1], ds_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_fail(err, "E_IO", "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    fstat(fd, &st);
    ds_progress prog;
    ds_progress_init(&prog, label, (uint64_t)st.st_size, quiet);
    ds_progress_stage(&prog, "%s", stage);
    ds_sha256 *h = ds_sha256_new();
    ds_hp_segment seg = {fd, 0, (uint64_t)st.st_size, -1, 0, path, NULL};
    ds_hp_opts o = {.whole = h, .progress = &prog, .stop = stop};
    int r = ds_hp_run(&seg, 1, &o, err);
    if (r == 0) ds_sha256_final_hex(h, hex);
    ds_progress_finish(&prog);
    ds_progress_destroy(&prog);
    ds_sha256_free(h);
    close(fd);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* One target                                                                                   */

typedef struct tctx {
    const ds_reassemble_opts *o;
    const ds_parts_target *t;
    char *path, *partial, *journal, *stamp;
    char label[160];
    int partial_fd;
    int *part_fd;
    uint64_t *end;          /* end[i]: byte offset in T where part i ends */
    int first_seg_part;     /* part index of segment 0 in the current pipeline run */
    int journaled;          /* parts recorded in the journal */
    ds_progress prog;
} tctx;

static char *with_suffix(const char *dir, const char *name, const char *suffix) {
    char *rel = NULL;
    if (asprintf(&rel, "%s%s", name, suffix) < 0) abort();
    char *p = ds_path_join(dir, rel);
    free(rel);
    return p;
}

static int part_width(const ds_parts_target *t, int i, int *idx) {
    int cnt, w = 2;
    *idx = i;
    ds_parts_parse_name(t->parts[i].name, NULL, idx, &cnt, &w);
    return w;
}

static int journal_save(tctx *c, int k, ds_error *err) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "dsflash-reassemble-journal/1");
    cJSON_AddStringToObject(j, "target", c->t->name);
    cJSON_AddStringToObject(j, "sha256", c->t->sha256);
    cJSON *arr = cJSON_AddArrayToObject(j, "parts");
    for (int i = 0; i < k; i++) {
        cJSON *p = cJSON_CreateObject();
        char end[32];
        snprintf(end, sizeof end, "%llu", (unsigned long long)c->end[i]);
        cJSON_AddStringToObject(p, "name", c->t->parts[i].name);
        cJSON_AddStringToObject(p, "sha256", c->t->parts[i].sha256);
        cJSON_AddStringToObject(p, "end", end);
        cJSON_AddItemToArray(arr, p);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    int rc = ds_write_file_atomic(c->journal, text, strlen(text), err);
    free(text);
    if (rc == 0) c->journaled = k;
    return rc;
}

/* Number of parts the journal validly records, or -1 with a reason. */
static int journal_load(tctx *c, char *why, size_t n) {
    char *text = NULL;
    if (ds_read_file(c->journal, &text, NULL, NULL) != 0) { snprintf(why, n, "no journal %s", c->journal); return -1; }
    cJSON *j = cJSON_Parse(text);
    free(text);
    int k = -1;
    const cJSON *tg = cJSON_GetObjectItemCaseSensitive(j, "target"), *h = cJSON_GetObjectItemCaseSensitive(j, "sha256");
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(j, "parts");
    if (!j || !cJSON_IsString(tg) || !cJSON_IsString(h) || !cJSON_IsArray(parts)) {
        snprintf(why, n, "journal %s is not valid", c->journal);
    } else if (strcmp(tg->valuestring, c->t->name) || strcmp(h->valuestring, c->t->sha256)) {
        snprintf(why, n, "journal was written for another PARTS.sha256 entry");
    } else if (cJSON_GetArraySize(parts) > c->t->n_parts) {
        snprintf(why, n, "journal lists more parts than PARTS.sha256");
    } else {
        k = cJSON_GetArraySize(parts);
        for (int i = 0; i < k; i++) {
            const cJSON *p = cJSON_GetArrayItem(parts, i);
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(p, "name"), *ph = cJSON_GetObjectItemCaseSensitive(p, "sha256");
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(p, "end");
            char want[32];
            snprintf(want, sizeof want, "%llu", (unsigned long long)c->end[i]);
            if (!cJSON_IsString(nm) || !cJSON_IsString(ph) || !cJSON_IsString(e) || strcmp(nm->valuestring, c->t->parts[i].name) ||
                strcmp(ph->valuestring, c->t->parts[i].sha256) || strcmp(e->valuestring, want)) {
                snprintf(why, n, "journal entry %d does not match part %s (name, hash or end offset)", i, c->t->parts[i].name);
                k = -1;
                break;
            }
        }
    }
    cJSON_Delete(j);
    return k;
}

/* Remove T.partial and its journal (mismatch or I/O error: nothing half-done may remain). */
static void discard_partial(tctx *c) {
    if (c->partial_fd >= 0) { close(c->partial_fd); c->partial_fd = -1; }
    unlink(c->partial);
    unlink(c->journal);
    ds_fsync_dir_of(c->partial);
}

static int on_reverified(void *user, int seg, const char *hex, ds_error *err) {
    tctx *c = user;
    int i = c->first_seg_part + seg, idx;
    int w = part_width(c->t, i, &idx);
    if (strcmp(hex, c->t->parts[i].sha256) != 0)
        return ds_fail(err, "E_RESUME_MISMATCH", "bytes of part %0*d already in %s do not match its hash", w, idx, c->partial);
    if (i + 1 < c->t->n_parts) ds_progress_stage(&c->prog, "re-verify %d/%d", i + 2, c->t->n_parts);
    return 0;
}

static int on_copied(void *user, int seg, const char *hex, ds_error *err) {
    tctx *c = user;
    int i = c->first_seg_part + seg, idx;
    int w = part_width(c->t, i, &idx);
    if (strcmp(hex, c->t->parts[i].sha256) != 0)
        return ds_fail(err, "E_PART_MISMATCH", "part %0*d sha256 mismatch (%s: expected %s, got %s)", w, idx,
                       c->t->parts[i].name, c->t->parts[i].sha256, hex);
    /* Durable bytes first, then the journal that claims them. */
    if (fdatasync(c->partial_fd) != 0)
        return ds_fail(err, "E_IO", "%s: fdatasync failed: %s", c->partial, strerror(errno));
    if (journal_save(c, i + 1, err) != 0) return -1;
    if (i + 1 < c->t->n_parts) ds_progress_stage(&c->prog, "part %d/%d", i + 2, c->t->n_parts);
    return 0;
}

static void delete_parts(const tctx *c) {
    for (int i = 0; i < c->t->n_parts; i++) {
        char *p = ds_path_join(c->o->dir, c->t->parts[i].name);
        if (unlink(p) == 0) printf("deleted %s\n", c->t->parts[i].name);
        else if (errno != ENOENT) printf("[WARN] %s: cannot delete %s: %s\n", c->t->name, c->t->parts[i].name, strerror(errno));
        free(p);
    }
    ds_fsync_dir_of(c->path);
}

/* Steps 4–7 for a target whose parts passed the set check: returns an exit class. */
static int build_target(tctx *c, bool replacing) {
    const ds_reassemble_opts *o = c->o;
    const ds_parts_target *t = c->t;
    int n = t->n_parts;
    ds_error err;
    ds_error_clear(&err);
    c->part_fd = ds_xmalloc((size_t)n * sizeof *c->part_fd);
    c->end = ds_xmalloc((size_t)n * sizeof *c->end);
    for (int i = 0; i < n; i++) c->part_fd[i] = -1;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        char *p = ds_path_join(o->dir, t->parts[i].name);
        c->part_fd[i] = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (c->part_fd[i] < 0 || fstat(c->part_fd[i], &st) != 0) {
            int e = errno;
            printf("[FAIL] %s: cannot open %s: %s\n", t->name, p, strerror(e));
            free(p);
            return e == ENOENT ? DS_EXIT_MISSING : DS_EXIT_IO;
        }
        free(p);
        total += (uint64_t)st.st_size;
        c->end[i] = total;
    }

    /* Resume: re-hash what the journal claims, feeding the whole-file hash as well. */
    ds_sha256 *whole = ds_sha256_new();
    int rc = DS_EXIT_OK;
    int start = 0;
    char why[512];
    struct stat pst;
    bool have_partial = stat(c->partial, &pst) == 0;
    ds_progress_init(&c->prog, c->label, total, o->quiet);
    if (have_partial && !o->resume) {
        printf("[info] %s: --no-resume: discarding %s from an earlier run\n", t->name, c->partial);
        discard_partial(c);
    } else if (have_partial) {
        int k = journal_load(c, why, sizeof why);
        if (k >= 0 && (uint64_t)pst.st_size < (k ? c->end[k - 1] : 0)) {
            snprintf(why, sizeof why, "%s is %lld bytes, shorter than the %llu the journal records", c->partial,
                     (long long)pst.st_size, (unsigned long long)c->end[k - 1]);
            k = -1;
        }
        if (k > 0) {
            c->partial_fd = open(c->partial, O_RDWR | O_CLOEXEC);
            ds_hp_segment *segs = ds_xcalloc((size_t)k, sizeof *segs);
            for (int i = 0; i < k; i++)
                segs[i] = (ds_hp_segment){c->partial_fd, i ? c->end[i - 1] : 0, c->end[i] - (i ? c->end[i - 1] : 0), -1, 0, c->partial, NULL};
            ds_progress_stage(&c->prog, "re-verify 1/%d", n);
            c->first_seg_part = 0;
            ds_hp_opts ho = {.whole = whole, .seg_hash = true, .on_done = on_reverified, .user = c, .progress = &c->prog, .stop = o->stop};
            int r = c->partial_fd < 0 ? -1 : ds_hp_run(segs, k, &ho, &err);
            free(segs);
            if (r == 1) { rc = stopped(o->stop); goto out; }
            if (r != 0) {
                snprintf(why, sizeof why, "%s", c->partial_fd < 0 ? strerror(errno) : err.msg);
                k = -1;
                ds_sha256_reset(whole);
                ds_progress_restart(&c->prog, c->label, total);
            }
        }
        if (k < 0) {
            printf("[info] %s: discarding %s and starting over (%s)\n", t->name, c->partial, why);
            discard_partial(c);
        } else {
            start = k;
            if (k > 0) printf("[info] %s: resuming after %d of %d parts (%llu bytes re-verified)\n", t->name, k, n,
                              (unsigned long long)c->end[k - 1]);
            c->journaled = k;
            if (c->partial_fd < 0) c->partial_fd = open(c->partial, O_RDWR | O_CLOEXEC);
            if (c->partial_fd < 0 || ftruncate(c->partial_fd, (off_t)(k ? c->end[k - 1] : 0)) != 0) {
                printf("[info] %s: cannot reuse %s (%s); starting over\n", t->name, c->partial, strerror(errno));
                discard_partial(c);
                start = 0;
                ds_sha256_reset(whole);
            }
        }
    } else {
        unlink(c->journal);   /* a journal without its file describes nothing */
    }
    if (c->partial_fd < 0) {
        /* O_EXCL: under our lock nobody else may have created it; if something did, refuse. */
        c->partial_fd = open(c->partial, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (c->partial_fd < 0) {
            printf("[FAIL] %s: cannot create %s: %s\n", t->name, c->partial, strerror(errno));
            rc = errno == EEXIST ? DS_EXIT_LOCK : DS_EXIT_IO;
            goto out;
        }
        c->journaled = 0;
        start = 0;
        if (journal_save(c, 0, &err) != 0) {
            printf("[FAIL] %s: %s\n", t->name, err.msg);
            discard_partial(c);
            rc = DS_EXIT_IO;
            goto out;
        }
    }

    /* Space: remaining bytes + 1 GiB. */
    uint64_t done = start ? c->end[start - 1] : 0, remaining = total - done;
    struct statvfs vfs;
    if (statvfs(o->dir, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (avail < remaining + SPACE_MARGIN) {
            char a[32], need[32];
            ds_format_bytes(avail, a, sizeof a);
            ds_format_bytes(remaining + SPACE_MARGIN, need, sizeof need);
            printf("[FAIL] %s: not enough free space in %s: %s available, %s needed (%llu remaining bytes + 1 GiB margin)\n",
                   t->name, o->dir, a, need, (unsigned long long)remaining);
            if (start == 0) discard_partial(c);
            rc = DS_EXIT_IO;
            goto out;
        }
    }

    /* Step 5: concatenate the remaining parts, hashing while copying. */
    if (start < n) {
        ds_hp_segment *segs = ds_xcalloc((size_t)(n - start), sizeof *segs);
        for (int i = start; i < n; i++) {
            uint64_t b = i ? c->end[i - 1] : 0;
            segs[i - start] = (ds_hp_segment){c->part_fd[i], 0, c->end[i] - b, c->partial_fd, b, t->parts[i].name, c->partial};
        }
        c->first_seg_part = start;
        ds_progress_stage(&c->prog, "part %d/%d", start + 1, n);
        ds_hp_opts ho = {.whole = whole, .seg_hash = true, .on_done = on_copied, .user = c, .progress = &c->prog, .stop = o->stop};
        int r = ds_hp_run(segs, n - start, &ho, &err);
        free(segs);
        if (r == 1) {
            /* Keep the journal's promise: the file ends at the last journaled boundary. */
            uint64_t keep = c->journaled ? c->end[c->journaled - 1] : 0;
            if (ftruncate(c->partial_fd, (off_t)keep) == 0) fsync(c->partial_fd);
            ds_progress_finish(&c->prog);
            printf("[STOP] %s: interrupted; %s keeps %d of %d verified parts, a rerun resumes\n", t->name, c->partial, c->journaled, n);
            rc = stopped(o->stop);
            goto out;
        }
        if (r != 0) {
            ds_progress_finish(&c->prog);
            printf("[FAIL] %s: %s; %s deleted\n", t->name, err.msg, c->partial);
            discard_partial(c);
            rc = !strcmp(err.code, "E_PART_MISMATCH") ? DS_EXIT_CHECK : DS_EXIT_IO;
            goto out;
        }
    }
    ds_progress_finish(&c->prog);

    /* Step 6: whole-file hash, then readback after dropping the page cache. */
    char got[DS_SHA256_HEX_LEN + 1];
    ds_sha256_final_hex(whole, got);
    if (fsync(c->partial_fd) != 0) {
        printf("[FAIL] %s: %s: fsync failed: %s; deleted\n", t->name, c->partial, strerror(errno));
        discard_partial(c);
        rc = DS_EXIT_IO;
        goto out;
    }
    if (strcmp(got, t->sha256) != 0) {
        printf("[FAIL] %s: whole-file sha256 mismatch (expected %s, got %s); %s deleted\n", t->name, t->sha256, got, c->partial);
        discard_partial(c);
        rc = DS_EXIT_CHECK;
        goto out;
    }
    if (o->readback) {
        posix_fadvise(c->partial_fd, 0, 0, POSIX_FADV_DONTNEED);
        char rb[DS_SHA256_HEX_LEN + 1];
        int r = hash_whole_file(c->partial, c->label, "readback", o->quiet, o->stop, rb, &err);
        if (r == 1) {
            printf("[STOP] %s: interrupted during readback; %s keeps all %d parts, a rerun resumes\n", t->name, c->partial, n);
            rc = stopped(o->stop);
            goto out;
        }
        if (r != 0 || strcmp(rb, t->sha256) != 0) {
            if (r != 0) printf("[FAIL] %s: readback: %s; %s deleted\n", t->name, err.msg, c->partial);
            else printf("[FAIL] %s: readback sha256 mismatch (expected %s, got %s): the write path corrupted data; %s deleted\n",
                        t->name, t->sha256, rb, c->partial);
            discard_partial(c);
            rc = r != 0 ? DS_EXIT_IO : DS_EXIT_CHECK;
            goto out;
        }
    }

    /* Step 7: publish with no-replace semantics (plain rename only for --replace). */
    int pr;
    if (replacing) {
        pr = rename(c->partial, c->path);
    } else {
        pr = renameat2(AT_FDCWD, c->partial, AT_FDCWD, c->path, RENAME_NOREPLACE);
        if (pr != 0 && (errno == EINVAL || errno == ENOSYS)) {
            /* File systems without RENAME_NOREPLACE: link() also refuses an existing name. */
            pr = link(c->partial, c->path);
            if (pr == 0) unlink(c->partial);
        }
    }
    if (pr != 0) {
        int e = errno;
        if (e == EEXIST) printf("[FAIL] %s appeared while it was being rebuilt (another writer?); it is left untouched and the new copy deleted\n", t->name);
        else printf("[FAIL] %s: cannot rename %s into place: %s; deleted\n", t->name, c->partial, strerror(e));
        discard_partial(c);
        rc = e == EEXIST ? DS_EXIT_LOCK : DS_EXIT_IO;
        goto out;
    }
    close(c->partial_fd);
    c->partial_fd = -1;
    ds_fsync_dir_of(c->path);
    if (ds_reassemble_stamp_write(c->path, got, &err) != 0)
        printf("[WARN] %s: verified, but the stamp could not be written (%s); the next run re-hashes it\n", t->name, err.msg);
    unlink(c->journal);
    printf("[OK] %s restored and verified (sha256 %s)\n", t->name, got);
    fflush(stdout);
out:
    ds_progress_destroy(&c->prog);
    ds_sha256_free(whole);
    return rc;
}

static int target_body(tctx *c) {
    const ds_reassemble_opts *o = c->o;
    const ds_parts_target *t = c->t;
    ds_error err;
    ds_error_clear(&err);
    bool replacing = false;
    struct stat st;
    if (lstat(c->path, &st) == 0) {
        if (stat(c->path, &st) != 0) {
            printf("[FAIL] %s is a dangling symbolic link; left untouched\n", t->name);
            return DS_EXIT_CHECK;
        }
        if (!S_ISREG(st.st_mode)) {
            printf("[FAIL] %s exists but is not a regular file; left untouched\n", t->name);
            return DS_EXIT_CHECK;
        }
        if (ds_reassemble_stamp_ok(c->path, t->sha256)) {
            printf("[OK] %s already exists and verified\n", t->name);
            goto verified;
        }
        char got[DS_SHA256_HEX_LEN + 1];
        int r = hash_whole_file(c->path, c->label, "checking existing file", o->quiet, o->stop, got, &err);
        if (r == 1) return stopped(o->stop);
        if (r != 0) {
            printf("[FAIL] %s: %s\n", t->name, err.msg);
            return DS_EXIT_IO;
        }
        if (!strcmp(got, t->sha256)) {
            if (!o->check_only && ds_reassemble_stamp_write(c->path, got, &err) != 0)
                printf("[WARN] %s: stamp not written: %s\n", t->name, err.msg);
            printf("[OK] %s already exists and verified\n", t->name);
            goto verified;
        }
        printf("[FAIL] %s exists but sha256 differs (expected %s, got %s); %s\n", t->name, t->sha256, got,
               o->replace && !o->check_only ? "rebuilding it from the parts (--replace)" : "left untouched");
        if (!o->replace || o->check_only) return DS_EXIT_CHECK;
        replacing = true;
        unlink(c->stamp);
    }
    char why[1024];
    int rc = ds_parts_check_set(o->dir, t, why, sizeof why);
    if (rc) {
        printf("[FAIL] %s: part set inconsistent (%s)\n", t->name, why);
        return rc;
    }
    if (o->check_only) {
        rc = ds_parts_verify(o->dir, t, o->jobs, o->quiet, o->stop);
        if (rc) return rc;
        printf("[NEED] %s needs reassembly (parts verified)\n", t->name);
        return DS_EXIT_NEED;
    }
    rc = build_target(c, replacing);
    if (rc != DS_EXIT_OK) return rc;
verified:
    if (o->delete_parts && !o->check_only) delete_parts(c);
    return DS_EXIT_OK;
}

static int reassemble_target(const ds_reassemble_opts *o, const ds_parts_target *t) {
    tctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.t = t;
    c.partial_fd = -1;
    c.path = ds_path_join(o->dir, t->name);
    c.partial = with_suffix(o->dir, t->name, ".partial");
    c.journal = with_suffix(o->dir, t->name, ".partial.json");
    c.stamp = with_suffix(o->dir, t->name, ".verified");
    snprintf(c.label, sizeof c.label, "%s", t->name);
    size_t ll = strlen(c.label);
    if (ll > 12 && !strcmp(c.label + ll - 12, ".safetensors")) c.label[ll - 12] = 0;
    int rc, lock_fd = -1;
    ds_error err;
    ds_error_clear(&err);
    if (!o->check_only) lock_fd = ds_tool_lock(o->dir, t->name, &err);
    if (lock_fd < 0 && !o->check_only) {
        printf("[FAIL] %s: %s\n", t->name, err.msg);
        rc = -lock_fd;
    } else {
        rc = target_body(&c);
    }
    if (c.partial_fd >= 0) close(c.partial_fd);
    for (int i = 0; c.part_fd && i < t->n_parts; i++)
        if (c.part_fd[i] >= 0) close(c.part_fd[i]);
    ds_tool_unlock(o->dir, t->name, lock_fd);
    free(c.part_fd);
    free(c.end);
    free(c.path);
    free(c.partial);
    free(c.journal);
    free(c.stamp);
    fflush(stdout);
    return rc;
}

/* Counters of one run over one or more manifests (for the single summary line). */
typedef struct run_tally {
    int rc, failed, need, done, n;
    bool *target_seen;   /* [o->n_targets]: listed in some manifest */
} run_tally;

/* Every requested target of DIR/PARTS.sha256 (with --target: only those this manifest lists,
 * unless it is the only manifest, where an unlisted name is a failure). */
static void run_manifest(const ds_reassemble_opts *o, bool only_manifest, run_tally *rt) {
    ds_parts_manifest m;
    ds_error err;
    ds_error_clear(&err);
    if (ds_parts_load(o->dir, &m, &err) != 0) {
        printf("[FAIL] %s%s\n", err.msg,
               only_manifest && !strcmp(err.code, "E_MISSING_FILE") ? " (nor does any subdirectory hold one)" : "");
        int r = !strcmp(err.code, "E_MISSING_FILE") ? DS_EXIT_MISSING : !strcmp(err.code, "E_IO") ? DS_EXIT_IO : DS_EXIT_CHECK;
        rt->rc = ds_exit_merge(rt->rc, r);
        return;
    }
    int n = o->n_targets ? o->n_targets : m.n_targets;
    for (int i = 0; i < n && rt->rc < 128; i++) {
        const ds_parts_target *t = o->n_targets ? ds_parts_find(&m, o->targets[i]) : &m.targets[i];
        int r;
        if (!t && !only_manifest) continue;   /* may be listed in another manifest */
        if (o->n_targets && t) rt->target_seen[i] = true;
        if (!t) {
            printf("[FAIL] %s: not listed in %s/%s\n", o->targets[i], o->dir, DS_PARTS_FILE);
            r = DS_EXIT_MISSING;
            rt->target_seen[i] = true;
        } else {
            r = reassemble_target(o, t);
        }
        rt->done++;
        rt->n++;
        rt->rc = ds_exit_merge(rt->rc, r);
        if (r == DS_EXIT_NEED) rt->need++;
        else if (r != DS_EXIT_OK) rt->failed++;
    }
    ds_parts_free(&m);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Subdirectories of a model directory that hold a PARTS.sha256 (e.g. engram_int8/), sorted.  Why:
 * a model directory is what users have at hand (and what the loader's error names), while the
 * manifest sits beside the split tables one level down. */
static int manifest_subdirs(const char *dir, char ***out) {
    DIR *d = opendir(dir);
    int n = 0, cap = 0;
    *out = NULL;
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *sub = ds_path_join(dir, de->d_name);
        char *man = ds_path_join(sub, DS_PARTS_FILE);
        struct stat st;
        if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode) && ds_file_exists(man)) {
            if (n == cap) *out = ds_xrealloc(*out, sizeof(char *) * (size_t)(cap = cap ? 2 * cap : 4));
            (*out)[n++] = sub;
            sub = NULL;
        }
        free(sub);
        free(man);
    }
    closedir(d);
    if (n) qsort(*out, (size_t)n, sizeof(char *), cmp_cstr);
    return n;
}

int ds_reassemble_run(const ds_reassemble_opts *o) {
    if (!o->quiet) printf("reassemble: sha256 via %s\n", ds_sha256_impl());
    run_tally rt = {0};
    rt.target_seen = ds_xcalloc((size_t)(o->n_targets ? o->n_targets : 1), sizeof(bool));
    char *own = ds_path_join(o->dir, DS_PARTS_FILE);
    char **subs = NULL;
    int n_subs = ds_file_exists(own) ? 0 : manifest_subdirs(o->dir, &subs);
    free(own);
    if (n_subs == 0) {
        run_manifest(o, true, &rt);
    } else {
        for (int i = 0; i < n_subs && rt.rc < 128; i++) {
            if (!o->quiet) printf("reassemble: %s: using %s/%s\n", o->dir, subs[i], DS_PARTS_FILE);
            ds_reassemble_opts so = *o;
            so.dir = subs[i];
            run_manifest(&so, false, &rt);
        }
        for (int i = 0; i < o->n_targets; i++)
            if (!rt.target_seen[i]) {
                printf("[FAIL] %s: not listed in any %s under %s\n", o->targets[i], DS_PARTS_FILE, o->dir);
                rt.rc = ds_exit_merge(rt.rc, DS_EXIT_MISSING);
                rt.failed++;
                rt.n++;
            }
    }
    for (int i = 0; i < n_subs; i++) free(subs[i]);
    free(subs);
    free(rt.target_seen);
    if (rt.rc >= 128) printf("reassemble: interrupted after %d targets\n", rt.done);
    else if (rt.failed) printf("reassemble: %d of %d targets failed\n", rt.failed, rt.n);
    else if (rt.need) printf("reassemble: %d targets need reassembly\n", rt.need);
    else if (rt.rc == DS_EXIT_OK) printf("reassemble: all %d targets passed\n", rt.n);
    else printf("reassemble: 0 targets processed\n");
    fflush(stdout);
    return rt.rc;
}
