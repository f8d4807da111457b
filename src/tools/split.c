/* Split a file into verified parts (design in split.h). */
#define _GNU_SOURCE
#include "tools/split.h"
#include "base/fsutil.h"
#include "base/sha256.h"
#include "tools/hash_pipeline.h"
#include "tools/parts_manifest.h"
#include "tools/progress.h"
#include "tools/reassemble.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

void ds_split_opts_default(ds_split_opts *o) {
    memset(o, 0, sizeof *o);
    o->part_size = DS_SPLIT_DEFAULT_PART;
    o->verify = true;
    o->jobs = 2;
}

typedef struct split_ctx {
    const ds_split_opts *o;
    char *dir, *name, *src_path;
    int src_fd;
    uint64_t size;
    int mm;
    ds_parts_target blk;          /* the new block being computed */
    char **partial;               /* per part: NAME.part-NN-of-MM.partial path */
    char **final;
    int cur_fd;
    int n_written;                /* partial files created (for cleanup) */
    ds_progress prog;
} split_ctx;

static uint64_t part_len(const split_ctx *c, int i) {
    uint64_t b = (uint64_t)i * c->o->part_size;
    return DS_MIN(c->o->part_size, c->size - b);
}

static int store_hex(void *user, int seg, const char *hex, ds_error *err) {
    memcpy(user, hex, DS_SHA256_HEX_LEN + 1);
    return 0;
}

static void cleanup_partials(split_ctx *c) {
    if (c->cur_fd >= 0) { close(c->cur_fd); c->cur_fd = -1; }
    for (int i = 0; i < c->n_written; i++) unlink(c->partial[i]);
    c->n_written = 0;
}

/* Hash the source per part range without writing: does the recorded block still describe it? */
static int source_matches_block(split_ctx *c, const ds_parts_target *old, int *stop_rc) {
    ds_sha256 *whole = ds_sha256_new();
    ds_progress_restart(&c->prog, c->name, c->size);
    ds_progress_stage(&c->prog, "checking existing parts");
    bool same = true;
    *stop_rc = 0;
    for (int i = 0; i < c->mm && same; i++) {
        char hex[DS_SHA256_HEX_LEN + 1];
        ds_hp_segment seg = {c->src_fd, (uint64_t)i * c->o->part_size, part_len(c, i), -1, 0, c->src_path, NULL};
        ds_hp_opts ho = {.whole = whole, .seg_hash = true, .on_done = store_hex, .user = hex, .progress = &c->prog, .stop = c->o->stop};
        ds_error err;
        int r = ds_hp_run(&seg, 1, &ho, &err);
        if (r == 1) { *stop_rc = 128 + (int)*c->o->stop; same = false; break; }
        if (r != 0 || strcmp(hex, old->parts[i].sha256) != 0) same = false;
    }
    char hex[DS_SHA256_HEX_LEN + 1];
    ds_sha256_final_hex(whole, hex);
    ds_sha256_free(whole);
    ds_progress_finish(&c->prog);
    return same && !strcmp(hex, old->sha256);
}

/* True when `old` has exactly the layout this split would produce and every part file exists
 * with the right size. */
static bool block_layout_matches(const split_ctx *c, const ds_parts_target *old) {
    if (!old || old->n_parts != c->mm || (old->size >= 0 && (uint64_t)old->size != c->size)) return false;
    for (int i = 0; i < c->mm; i++) {
        if (strcmp(old->parts[i].name, c->blk.parts[i].name) != 0) return false;
        char *p = ds_path_join(c->dir, old->parts[i].name);
        int64_t sz = ds_file_size(p);
        free(p);
        if (sz < 0 || (uint64_t)sz != part_len(c, i)) return false;
    }
    return true;
}

static int update_manifest(split_ctx *c, char **stale, int *n_stale, ds_error *err) {
    int lk = ds_tool_lock(c->dir, DS_PARTS_FILE, err);
    if (lk < 0) return -lk;
    ds_parts_manifest m;
    ds_error e2;
    char *path = ds_path_join(c->dir, DS_PARTS_FILE);
    int rc = 0;
    if (ds_file_exists(path)) {
        if (ds_parts_load(c->dir, &m, &e2) != 0) {
            *err = e2;
            rc = DS_EXIT_CHECK;
        }
    } else {
        memset(&m, 0, sizeof m);
    }
    if (rc == 0) {
        /* Parts of the block being replaced that the new split does not reuse are stale. */
        const ds_parts_target *old = ds_parts_find(&m, c->name);
        for (int i = 0; old && i < old->n_parts; i++) {
            bool reused = false;
            for (int k = 0; k < c->mm; k++) reused |= !strcmp(old->parts[i].name, c->blk.parts[k].name);
            if (!reused) stale[(*n_stale)++] = ds_xstrdup(old->parts[i].name);
        }
        ds_parts_set_target(&m, &c->blk);
        if (ds_parts_save(c->dir, &m, err) != 0) rc = DS_EXIT_IO;
        ds_parts_free(&m);
    }
    free(path);
    ds_tool_unlock(c->dir, DS_PARTS_FILE, lk);
    return rc;
}

static int split_locked(split_ctx *c) {
    const ds_split_opts *o = c->o;
    ds_error err;
    ds_error_clear(&err);
    struct stat st0;
    fstat(c->src_fd, &st0);

    /* Existing manifest: must parse (we will rewrite it, and must not clobber what we cannot read). */
    ds_parts_manifest m;
    memset(&m, 0, sizeof m);
    char *mpath = ds_path_join(c->dir, DS_PARTS_FILE);
    bool have_manifest = ds_file_exists(mpath);
    free(mpath);
    if (have_manifest && ds_parts_load(c->dir, &m, &err) != 0) {
        printf("[FAIL] %s; not touching it\n", err.msg);
        return DS_EXIT_CHECK;
    }
    const ds_parts_target *old = ds_parts_find(&m, c->name);
    if (block_layout_matches(c, old)) {
        int stop_rc;
        bool same = source_matches_block(c, old, &stop_rc);
        if (stop_rc) { ds_parts_free(&m); return stop_rc; }
        if (same) {
            int vr = o->verify ? ds_parts_verify(c->dir, old, o->jobs, o->quiet, o->stop) : 0;
            if (vr >= 128) { ds_parts_free(&m); return vr; }
            if (vr == 0) {
                printf("[OK] %s: %d parts already up to date in %s (sha256 %s)\n", c->name, c->mm, c->dir, old->sha256);
                ds_parts_free(&m);
                return DS_EXIT_OK;
            }
            printf("[info] %s: rewriting the parts\n", c->name);
        }
    }
    ds_parts_free(&m);

    struct statvfs vfs;
    if (statvfs(c->dir, &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (avail < c->size + ((uint64_t)1 << 30)) {
            char a[32], need[32];
            ds_format_bytes(avail, a, sizeof a);
            ds_format_bytes(c->size + ((uint64_t)1 << 30), need, sizeof need);
            printf("[FAIL] %s: not enough free space in %s: %s available, %s needed (file size + 1 GiB margin)\n", c->name, c->dir, a, need);
            return DS_EXIT_IO;
        }
    }

    /* One read pass: every part hash and the whole hash, parts written as .partial. */
    ds_sha256 *whole = ds_sha256_new();
    ds_progress_restart(&c->prog, c->name, c->size);
    int rc = DS_EXIT_OK;
    for (int i = 0; i < c->mm && rc == DS_EXIT_OK; i++) {
        unlink(c->partial[i]);   /* a leftover of an interrupted run; we hold the lock */
        c->cur_fd = open(c->partial[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (c->cur_fd < 0) {
            printf("[FAIL] %s: cannot create %s: %s\n", c->name, c->partial[i], strerror(errno));
            rc = DS_EXIT_IO;
            break;
        }
        c->n_written = i + 1;
        ds_progress_stage(&c->prog, "part %d/%d", i + 1, c->mm);
        ds_hp_segment seg = {c->src_fd, (uint64_t)i * o->part_size, part_len(c, i), c->cur_fd, 0, c->src_path, c->partial[i]};
        ds_hp_opts ho = {.whole = whole, .seg_hash = true, .on_done = store_hex, .user = c->blk.parts[i].sha256,
                         .progress = &c->prog, .stop = o->stop};
        int r = ds_hp_run(&seg, 1, &ho, &err);
        if (r == 1) {
            rc = 128 + (int)*o->stop;
        } else if (r != 0) {
            printf("[FAIL] %s: %s\n", c->name, err.msg);
            rc = DS_EXIT_IO;
        } else if (fsync(c->cur_fd) != 0 || close(c->cur_fd) != 0) {
            printf("[FAIL] %s: %s: fsync/close failed: %s\n", c->name, c->partial[i], strerror(errno));
            c->cur_fd = -1;
            rc = DS_EXIT_IO;
        } else {
            c->cur_fd = -1;
        }
    }
    ds_progress_finish(&c->prog);
    ds_sha256_final_hex(whole, c->blk.sha256);
    ds_sha256_free(whole);
    struct stat st1;
    if (rc == DS_EXIT_OK && (fstat(c->src_fd, &st1) != 0 || st1.st_size != st0.st_size ||
                             st1.st_mtim.tv_sec != st0.st_mtim.tv_sec || st1.st_mtim.tv_nsec != st0.st_mtim.tv_nsec)) {
        printf("[FAIL] %s changed while it was being split; nothing published\n", c->src_path);
        rc = DS_EXIT_CHECK;
    }
    if (rc != DS_EXIT_OK) {
        cleanup_partials(c);
        if (rc >= 128) printf("[STOP] %s: interrupted; temporary parts deleted, previous parts and PARTS.sha256 untouched\n", c->name);
        else printf("[FAIL] %s: temporary parts deleted; previous parts and PARTS.sha256 untouched\n", c->name);
        return rc;
    }

    /* Publish: rename every part, then replace this target's block in PARTS.sha256. */
    for (int i = 0; i < c->mm; i++) {
        if (rename(c->partial[i], c->final[i]) != 0) {
            printf("[FAIL] %s: cannot rename %s: %s\n", c->name, c->partial[i], strerror(errno));
            cleanup_partials(c);
            return DS_EXIT_IO;
        }
    }
    c->n_written = 0;
    ds_fsync_dir_of(c->final[0]);
    char **stale = ds_xcalloc(DS_SPLIT_MAX_PARTS + 1, sizeof *stale);
    int n_stale = 0;
    rc = update_manifest(c, stale, &n_stale, &err);
    if (rc != 0) {
        printf("[FAIL] %s: parts written but PARTS.sha256 not updated: %s\n", c->name, err.msg);
    } else {
        for (int i = 0; i < n_stale; i++) {
            char *p = ds_path_join(c->dir, stale[i]);
            if (unlink(p) == 0) printf("removed stale part %s (from the previous split)\n", stale[i]);
            free(p);
        }
    }
    for (int i = 0; i < n_stale; i++) free(stale[i]);
    free(stale);
    if (rc != 0) return rc;
    if (o->verify) {
        for (int i = 0; i < c->mm; i++) {   /* make the verify pass read the disk, not the cache */
            int fd = open(c->final[i], O_RDONLY | O_CLOEXEC);
            if (fd >= 0) { posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); close(fd); }
        }
        rc = ds_parts_verify(c->dir, &c->blk, o->jobs, o->quiet, o->stop);
        if (rc) {
            if (rc < 128) printf("[FAIL] %s: the parts just written do not verify; do not publish them\n", c->name);
            return rc;
        }
    }
    char sz[32];
    ds_format_bytes(o->part_size, sz, sizeof sz);
    printf("[OK] %s split into %d part%s of %s in %s (sha256 %s)%s\n", c->name, c->mm, c->mm == 1 ? "" : "s", sz, c->dir,
           c->blk.sha256, o->verify ? ", parts verified" : "");
    return DS_EXIT_OK;
}

int ds_split_run(const ds_split_opts *o) {
    split_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o;
    c.cur_fd = -1;
    c.src_path = ds_xstrdup(o->file);
    char *tmp = ds_xstrdup(o->file);
    c.name = ds_xstrdup(basename(tmp));
    free(tmp);
    tmp = ds_xstrdup(o->file);
    c.dir = ds_xstrdup(o->out_dir ? o->out_dir : dirname(tmp));
    free(tmp);
    int rc = DS_EXIT_OK, lk = -1;
    ds_error err;
    ds_error_clear(&err);
    struct stat st;
    if (!o->quiet) printf("split: sha256 via %s\n", ds_sha256_impl());
    c.src_fd = open(o->file, O_RDONLY | O_CLOEXEC);
    if (c.src_fd < 0 || fstat(c.src_fd, &st) != 0) {
        int e = errno;
        printf("[FAIL] %s: cannot open: %s\n", o->file, strerror(e));
        rc = e == ENOENT ? DS_EXIT_MISSING : DS_EXIT_IO;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        printf("[FAIL] %s is not a regular file\n", o->file);
        rc = DS_EXIT_CHECK;
        goto out;
    }
    c.size = (uint64_t)st.st_size;
    if (c.size == 0) {
        printf("[FAIL] %s is empty; there is nothing to split\n", o->file);
        rc = DS_EXIT_CHECK;
        goto out;
    }
    uint64_t mm = (c.size + o->part_size - 1) / o->part_size;
    if (mm > DS_SPLIT_MAX_PARTS) {
        printf("[FAIL] %s: --part-size %llu would make %llu parts; the limit is %d\n", o->file,
               (unsigned long long)o->part_size, (unsigned long long)mm, DS_SPLIT_MAX_PARTS);
        rc = DS_EXIT_USAGE;
        goto out;
    }
    c.mm = (int)mm;
    if (ds_parts_parse_name(c.name, NULL, NULL, NULL, NULL)) {
        printf("[FAIL] %s: the file name already looks like a part; refusing to split a part\n", c.name);
        rc = DS_EXIT_USAGE;
        goto out;
    }
    if (ds_mkdir_p(c.dir, &err) != 0) {
        printf("[FAIL] %s\n", err.msg);
        rc = DS_EXIT_IO;
        goto out;
    }
    /* Never write parts over the source itself. */
    c.blk.name = c.name;
    c.blk.size = (int64_t)c.size;
    c.blk.part_size = (int64_t)o->part_size;
    c.blk.declared_parts = c.mm;
    c.blk.n_parts = c.mm;
    c.blk.parts = ds_xcalloc((size_t)c.mm, sizeof *c.blk.parts);
    c.partial = ds_xcalloc((size_t)c.mm, sizeof *c.partial);
    c.final = ds_xcalloc((size_t)c.mm, sizeof *c.final);
    for (int i = 0; i < c.mm; i++) {
        c.blk.parts[i].name = ds_parts_make_name(c.name, i, c.mm);
        c.final[i] = ds_path_join(c.dir, c.blk.parts[i].name);
        if (asprintf(&c.partial[i], "%s.partial", c.final[i]) < 0) abort();
    }
    lk = ds_tool_lock(c.dir, c.name, &err);
    if (lk < 0) {
        printf("[FAIL] %s: %s\n", c.name, err.msg);
        rc = -lk;
        goto out;
    }
    ds_progress_init(&c.prog, c.name, c.size, o->quiet);
    rc = split_locked(&c);
    ds_progress_destroy(&c.prog);
out:
    ds_tool_unlock(c.dir, c.name, lk);
    if (c.src_fd >= 0) close(c.src_fd);
    for (int i = 0; i < c.mm && c.final; i++) {
        free(c.blk.parts[i].name);
        free(c.partial[i]);
        free(c.final[i]);
    }
    free(c.blk.parts);
    free(c.partial);
    free(c.final);
    free(c.name);
    free(c.dir);
    free(c.src_path);
    fflush(stdout);
    return rc;
}
