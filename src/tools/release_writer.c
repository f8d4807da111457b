/* Writing the tensor files of a plan (release_writer.h).
 *
 * A "unit" is a set of files committed together (one shard, the Engram weight+scale pair of one
 * layer, engram_extra, vision).  For each unit the files are created as `<name>.partial` with their
 * planned header and size, then worker threads take the unit's groups (one source tensor each)
 * from a shared counter, read the source in row chunks, quantize, and pwrite every output at its
 * planned offset.  Because offsets are fixed by the plan and every group is computed by exactly
 * one thread in row order, the bytes and the statistics are the same for any thread count.
 * After the workers finish, each file is fsynced and renamed, and the directory fsynced.
 *
 * Resume: a unit whose files all exist under their final names with the planned size and header
 * is not rewritten; its groups are still quantized in memory (without writing) so the manifest
 * statistics are complete and identical to an uninterrupted run. */
#define _GNU_SOURCE
#include "tools/release_writer.h"
#include "base/fsutil.h"
#include "tools/progress.h"
#include "tools/reassemble.h"
#include "tools/split.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_BYTES ((size_t)4 << 20)   /* source bytes per read: bounded memory per worker */

int ds_rw_json_outputs(ds_rw_plan *p, ds_fsrc *src, const char *dst, ds_error *err);  /* release_writer_json.c */

typedef struct unit_job {
    ds_rw_plan *p;
    ds_fsrc *src;
    int *groups;
    int n_groups;
    int *fds;                 /* per plan file: fd of the open .partial, or -1 */
    bool dry;                 /* compute only (resumed unit) */
    atomic_int next;
    pthread_mutex_t mu;
    int failed;
    ds_error err;
    ds_progress *prog;
} unit_job;

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *what, ds_error *err) {
    const uint8_t *b = buf;
    while (n) {
        ssize_t k = pwrite(fd, b, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return ds_fail(err, "E_IO", "%s: write failed at offset %llu: %s", what, (unsigned long long)off, k < 0 ? strerror(errno) : "no progress");
        b += k; n -= (size_t)k; off += (uint64_t)k;
    }
    return 0;
}

static int out_write(unit_job *j, int ti, const void *buf, size_t n, uint64_t rel, ds_error *err) {
    if (j->dry || !n) return 0;
    const ds_rw_tensor *t = &j->p->tensors[ti];
    return pwrite_all(j->fds[t->file], buf, n, t->offset + rel, j->p->files[t->file].relpath, err);
}

static int nonfinite(const ds_fsrc_tensor *st, const float *x, int64_t n, int64_t r0, ds_error *err) {
    if (ds_all_finite(x, n)) return 0;
    int64_t i = 0;
    while (i < n && x[i] - x[i] == 0.0f) i++;
    return ds_fail(err, "E_SRC_NONFINITE", "%s: expected finite values, found %g at row %lld column %lld",
                   st->name, (double)x[i], (long long)(r0 + i / st->cols), (long long)(i % st->cols));
}

static int run_float(unit_job *j, ds_rw_group *g, ds_error *err) {
    const ds_fsrc_tensor *st = &j->src->t[g->src];
    size_t isz = (size_t)ds_dtype_size(st->dtype), row_bytes = (size_t)st->cols * isz;
    const ds_dtype out_dt = j->p->tensors[g->out[0]].dtype;
    const size_t out_row = (size_t)st->cols * (size_t)ds_dtype_size(out_dt);
    int64_t chunk = row_bytes ? (int64_t)(CHUNK_BYTES / row_bytes) : 1;
    if (chunk < 1) chunk = 1;
    void *raw = ds_xmalloc((size_t)chunk * row_bytes + 16);
    float *f = ds_xmalloc(sizeof(float) * (size_t)chunk * (size_t)st->cols + 16);
    int rc = 0;
    for (int64_t r0 = 0; r0 < st->rows && !rc; r0 += chunk) {
        int64_t r1 = DS_MIN(st->rows, r0 + chunk);
        rc = j->src->read_raw(j->src, g->src, r0, r1, raw, err);
        if (!rc) {
            ds_widen_to_f32(st->dtype, raw, (r1 - r0) * st->cols, f);
            rc = nonfinite(st, f, (r1 - r0) * st->cols, r0, err);
        }
        if (!rc && out_dt != st->dtype) { /* a converted copy (F32 head -> BF16 draft head) */
            ds_narrow_from_f32(out_dt, f, (r1 - r0) * st->cols, raw);
            rc = out_write(j, g->out[0], raw, (size_t)(r1 - r0) * out_row, (uint64_t)r0 * out_row, err);
            continue;
        }
        if (!rc) rc = out_write(j, g->out[0], raw, (size_t)(r1 - r0) * row_bytes, (uint64_t)r0 * row_bytes, err);
    }
    free(raw);
    free(f);
    return rc;
}

static int run_zero(unit_job *j, ds_rw_group *g, ds_error *err) {
    const ds_rw_tensor *t = &j->p->tensors[g->out[0]];
    void *z = ds_xcalloc(1, t->nbytes ? t->nbytes : 1);
    int rc = out_write(j, g->out[0], z, t->nbytes, 0, err);
    free(z);
    return rc;
}

static int run_quant(unit_job *j, ds_rw_group *g, ds_error *err) {
    const ds_fsrc_tensor *st = &j->src->t[g->src];
    const int64_t in = st->cols, out = st->rows;
    const bool w4 = g->kind == DS_QK_W4A8;
    const int steps = j->p->opts.ssz_steps;
    int64_t chunk = (int64_t)(CHUNK_BYTES / ((size_t)in * sizeof(float)));
    chunk = DS_MAX(2, chunk & ~(int64_t)1); /* even: int4 rows are packed in pairs */
    float *w = ds_xmalloc(sizeof(float) * (size_t)(chunk * in));
    int8_t *q = ds_xmalloc((size_t)(chunk * in));
    int8_t *packed = ds_xmalloc((size_t)((chunk / 2 + 1) * in));
    float *scale = ds_xmalloc(sizeof(float) * (size_t)chunk);
    float *zero = ds_xcalloc((size_t)chunk, sizeof(float));
    float *sb = ds_xmalloc(sizeof(float) * (size_t)(chunk * (g->sb_chunks ? g->sb_chunks : 1)));
    int rc = 0;
    for (int64_t r0 = 0; r0 < out && !rc; r0 += chunk) {
        int64_t r1 = DS_MIN(out, r0 + chunk), nr = r1 - r0;
        rc = j->src->read_f32(j->src, g->src, r0, r1, w, err);
        if (!rc) rc = nonfinite(st, w, nr * in, r0, err);
        if (rc) break;
        for (int64_t r = 0; r < nr; r++) {
            const float *wr = w + r * in;
            int8_t *qr = q + r * in;
            if (w4) {
                ds_quant_w4_row(wr, in, steps, qr, &scale[r]);
                ds_quant_scale_bias(qr, in, scale[r], g->sb_chunks, sb + r * g->sb_chunks);
            } else {
                ds_quant_w8_row(wr, in, qr, &scale[r]);
            }
            ds_qerr_add_row(&g->qerr, wr, qr, in, scale[r]);
        }
        if (w4) {
            int64_t np = (nr + 1) / 2;
            for (int64_t k = 0; k < np; k++)
                ds_quant_w4_pack(q + 2 * k * in, 2 * k + 1 < nr ? q + (2 * k + 1) * in : NULL, in, packed + k * in);
            rc = out_write(j, g->out[0], packed, (size_t)(np * in), (uint64_t)(r0 / 2 * in), err);
        } else {
            rc = out_write(j, g->out[0], q, (size_t)(nr * in), (uint64_t)(r0 * in), err);
        }
        if (!rc) rc = out_write(j, g->out[1], scale, sizeof(float) * (size_t)nr, sizeof(float) * (uint64_t)r0, err);
        if (!rc) rc = out_write(j, g->out[2], zero, sizeof(float) * (size_t)nr, sizeof(float) * (uint64_t)r0, err);
        if (!rc && w4)
            rc = out_write(j, g->out[3], sb, sizeof(float) * (size_t)(nr * g->sb_chunks), sizeof(float) * (uint64_t)(r0 * g->sb_chunks), err);
    }
    free(w); free(q); free(packed); free(scale); free(zero); free(sb);
    return rc;
}

static int run_engram(unit_job *j, ds_rw_group *g, ds_error *err) {
    const ds_fsrc_tensor *st = &j->src->t[g->src];
    const int64_t width = st->cols, rows = st->rows, ng = width / 32;
    int64_t chunk = DS_MAX(1, (int64_t)(CHUNK_BYTES / ((size_t)width * sizeof(float))));
    float *x = ds_xmalloc(sizeof(float) * (size_t)(chunk * width));
    int8_t *codes = ds_xmalloc((size_t)(chunk * width));
    float *scales = ds_xmalloc(sizeof(float) * (size_t)(chunk * ng));
    int rc = 0;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += chunk) {
        int64_t r1 = DS_MIN(rows, r0 + chunk), nr = r1 - r0;
        rc = j->src->read_f32(j->src, g->src, r0, r1, x, err);
        if (!rc) rc = nonfinite(st, x, nr * width, r0, err);
        if (rc) break;
        for (int64_t r = 0; r < nr && !rc; r++) {
            if (ds_quant_engram_row(x + r * width, (int)width, codes + r * width, scales + r * ng))
                rc = ds_fail(err, "E_SRC_RANGE", "%s: row %lld: expected group maxima whose power-of-two scale is a normal fp32 value, found a group below 2^-119",
                             st->name, (long long)(r0 + r));
            for (int64_t k = 0; k < ng && !rc; k++) {
                /* a group is all-zero iff its codes are (a nonzero maximum always maps to |code| >= 64) */
                int nz = 0;
                for (int i = 0; i < 32; i++) nz |= codes[r * width + k * 32 + i];
                if (!nz) { g->zero_groups++; continue; }
                int ex;
                frexpf(scales[r * ng + k], &ex);
                g->min_exp = DS_MIN(g->min_exp, ex - 1); /* scale = 2^(ex-1) */
                g->max_exp = DS_MAX(g->max_exp, ex - 1);
            }
        }
        if (!rc) rc = out_write(j, g->out[0], codes, (size_t)(nr * width), (uint64_t)(r0 * width), err);
        if (!rc) rc = out_write(j, g->out[1], scales, sizeof(float) * (size_t)(nr * ng), sizeof(float) * (uint64_t)(r0 * ng), err);
    }
    free(x); free(codes); free(scales);
    return rc;
}

static void *unit_worker(void *arg) {
    unit_job *j = arg;
    for (;;) {
        int k = atomic_fetch_add(&j->next, 1);
        if (k >= j->n_groups) break;
        pthread_mutex_lock(&j->mu);
        int stop = j->failed;
        pthread_mutex_unlock(&j->mu);
        if (stop) break;
        ds_rw_group *g = &j->p->groups[j->groups[k]];
        ds_error e = {0};
        int rc;
        switch (g->kind) {
        case DS_QK_FLOAT: rc = run_float(j, g, &e); break;
        case DS_QK_ZERO: rc = run_zero(j, g, &e); break;
        case DS_QK_ENGRAM: rc = run_engram(j, g, &e); break;
        default: rc = run_quant(j, g, &e); break;
        }
        if (rc) {
            pthread_mutex_lock(&j->mu);
            if (!j->failed) { j->failed = 1; j->err = e; }
            pthread_mutex_unlock(&j->mu);
            break;
        }
        if (j->prog) ds_progress_add(j->prog, g->src_bytes);
    }
    return NULL;
}

/* A final file matches the plan: same size and the same header bytes. */
static bool file_complete(const char *path, const ds_rw_file *f) {
    struct stat st;
    if (stat(path, &st) || (uint64_t)st.st_size != f->size) return false;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    uint8_t *buf = ds_xmalloc(8 + f->header_len);
    ssize_t k = pread(fd, buf, 8 + f->header_len, 0);
    close(fd);
    bool ok = k == (ssize_t)(8 + f->header_len);
    uint64_t hl = 0;
    for (int i = 0; ok && i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
    ok = ok && hl == f->header_len && !memcmp(buf + 8, f->header, f->header_len);
    free(buf);
    return ok;
}

static int open_partial(const char *dst, const ds_rw_file *f, int *fd_out, ds_error *err) {
    char *path = ds_path_join(dst, f->relpath);
    size_t n = strlen(path) + 16;
    char *tmp = ds_xmalloc(n);
    snprintf(tmp, n, "%s.partial", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = 0;
    if (fd < 0) {
        rc = ds_fail(err, "E_IO", "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(f->header_len >> (8 * i));
        if (ftruncate(fd, (off_t)f->size))
            rc = ds_fail(err, "E_IO", "%s: cannot size to %llu bytes: %s", tmp, (unsigned long long)f->size, strerror(errno));
        if (!rc) rc = pwrite_all(fd, len8, 8, 0, tmp, err);
        if (!rc) rc = pwrite_all(fd, f->header, f->header_len, 8, tmp, err);
        if (rc) { close(fd); unlink(tmp); fd = -1; }
    }
    free(path); free(tmp);
    *fd_out = fd;
    return rc;
}

static int commit_partial(const char *dst, const ds_rw_file *f, int fd, ds_error *err) {
    char *path = ds_path_join(dst, f->relpath);
    size_t n = strlen(path) + 16;
    char *tmp = ds_xmalloc(n);
    snprintf(tmp, n, "%s.partial", path);
    int rc = 0;
    if (fsync(fd)) rc = ds_fail(err, "E_IO", "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) && !rc) rc = ds_fail(err, "E_IO", "%s: close failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path)) rc = ds_fail(err, "E_IO", "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (!rc) ds_fsync_dir_of(path);
    if (rc) unlink(tmp);
    free(path); free(tmp);
    return rc;
}

static int split_engram(const ds_rw_plan *p, const char *dst, const ds_rw_file *f, ds_error *err) {
    char *path = ds_path_join(dst, f->relpath);
    ds_split_opts so;
    ds_split_opts_default(&so);
    so.file = path;
    so.part_size = p->opts.split_engram;
    so.quiet = true;
    so.verify = true;
    int rc = ds_split_run(&so);
    if (rc) {
        ds_fail(err, "E_IO", "%s: splitting into %llu-byte parts failed (exit %d)", path, (unsigned long long)p->opts.split_engram, rc);
    } else if (p->opts.split_only) {
        if (unlink(path)) rc = ds_fail(err, "E_IO", "%s: cannot remove the reassembled file after --split-only: %s", path, strerror(errno));
    } else {
        /* Keeping the whole file next to its parts: let reassemble verify it against PARTS.sha256
         * and write its `.verified` stamp, which the loader requires (CHECKPOINT.md §15 check 22). */
        char *dir = ds_xstrdup(path), *slash = strrchr(dir, '/');
        const char *target = slash ? slash + 1 : path;
        if (slash) *slash = 0;
        ds_reassemble_opts ro;
        ds_reassemble_opts_default(&ro);
        ro.dir = slash ? dir : ".";
        ro.targets = &target;
        ro.n_targets = 1;
        ro.quiet = true;
        rc = ds_reassemble_run(&ro);
        if (rc) ds_fail(err, "E_IO", "%s: verifying the split against PARTS.sha256 failed (exit %d)", path, rc);
        free(dir);
    }
    free(path);
    return rc ? -1 : 0;
}

/* Returns 0 when the unit is complete on disk afterwards, 1 when it was left out (a unit filtered
 * by --no-engram / --engram-only that is not already there), -1 on error. */
static int run_unit(ds_rw_plan *p, ds_fsrc *src, const char *dst, int unit, bool filtered, int n_threads, ds_progress *prog,
                    ds_error *err) {
    unit_job j;
    memset(&j, 0, sizeof j);
    j.p = p;
    j.src = src;
    j.prog = prog;
    pthread_mutex_init(&j.mu, NULL);
    j.groups = ds_xmalloc(sizeof(int) * (size_t)(p->n_groups ? p->n_groups : 1));
    for (int g = 0; g < p->n_groups; g++)
        if (p->groups[g].unit == unit) j.groups[j.n_groups++] = g;
    j.fds = ds_xmalloc(sizeof(int) * (size_t)(p->n_files ? p->n_files : 1));
    bool complete = true, any = false;
    for (int fi = 0; fi < p->n_files; fi++) {
        j.fds[fi] = -1;
        if (p->files[fi].unit != unit) continue;
        any = true;
        char *path = ds_path_join(dst, p->files[fi].relpath);
        if (!file_complete(path, &p->files[fi])) complete = false;
        free(path);
    }
    int rc = 0;
    j.dry = any && complete;
    if (filtered && !j.dry) {
        pthread_mutex_destroy(&j.mu);
        free(j.groups);
        free(j.fds);
        return 1;
    }
    for (int fi = 0; fi < p->n_files && !rc && !j.dry; fi++)
        if (p->files[fi].unit == unit) rc = open_partial(dst, &p->files[fi], &j.fds[fi], err);
    if (!rc) {
        int nt = DS_MAX(1, DS_MIN(n_threads, j.n_groups));
        pthread_t *th = ds_xmalloc(sizeof(pthread_t) * (size_t)nt);
        for (int t = 1; t < nt; t++) pthread_create(&th[t], NULL, unit_worker, &j);
        unit_worker(&j);
        for (int t = 1; t < nt; t++) pthread_join(th[t], NULL);
        free(th);
        if (j.failed) { *err = j.err; rc = -1; }
    }
    for (int fi = 0; fi < p->n_files; fi++) {
        if (j.fds[fi] < 0) continue;
        if (!rc) rc = commit_partial(dst, &p->files[fi], j.fds[fi], err);
        else {
            close(j.fds[fi]);
            char *path = ds_path_join(dst, p->files[fi].relpath);
            size_t n = strlen(path) + 16;
            char *tmp = ds_xmalloc(n);
            snprintf(tmp, n, "%s.partial", path);
            unlink(tmp);
            free(tmp); free(path);
        }
    }
    if (!rc && p->opts.split_engram)
        for (int fi = 0; fi < p->n_files && !rc; fi++)
            if (p->files[fi].unit == unit && p->files[fi].kind == DS_RF_ENGRAM_W) rc = split_engram(p, dst, &p->files[fi], err);
    for (int fi = 0; fi < p->n_files; fi++)
        if (p->files[fi].unit == unit) p->files[fi].skip = j.dry;
    pthread_mutex_destroy(&j.mu);
    free(j.groups);
    free(j.fds);
    return rc;
}

int ds_rw_write(ds_rw_plan *p, ds_fsrc *src, const char *dst, ds_error *err) {
    const char *subdirs[] = {"engram_int8", "optional"};
    for (size_t i = 0; i < DS_ARRAY_LEN(subdirs); i++) {
        char *d = ds_path_join(dst, subdirs[i]);
        int rc = ds_mkdir_p(d, err);
        free(d);
        if (rc) return -1;
    }
    int n_threads = p->opts.threads > 0 ? p->opts.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    uint64_t total = 0;
    for (int g = 0; g < p->n_groups; g++) total += p->groups[g].src_bytes;
    ds_progress prog;
    ds_progress_init(&prog, p->opts.float_export ? "float-export" : "quantize", total, p->opts.quiet || total < ((uint64_t)256 << 20));
    double t0 = ds_now();
    int left_out = 0;
    for (int u = 0; u < p->n_units; u++) {
        bool engram_unit = false;
        for (int fi = 0; fi < p->n_files; fi++)
            if (p->files[fi].unit == u && p->files[fi].kind == DS_RF_ENGRAM_W) engram_unit = true;
        /* a filtered unit is only read back (for the manifest statistics) when a previous run wrote it */
        bool filtered = (p->opts.no_engram && engram_unit) || (p->opts.engram_only && !engram_unit);
        int r = run_unit(p, src, dst, u, filtered, n_threads, &prog, err);
        if (r < 0) {
            ds_progress_finish(&prog);
            ds_progress_destroy(&prog);
            return -1;
        }
        left_out += r;
    }
    ds_progress_finish(&prog);
    ds_progress_destroy(&prog);
    if (!p->opts.quiet) {
        int skipped = 0;
        for (int fi = 0; fi < p->n_files; fi++) skipped += p->files[fi].skip;
        fprintf(stderr, "%s: %d tensor files (%d already complete) in %.1f s\n", p->opts.float_export ? "float-export" : "quantize",
                p->n_files, skipped, ds_now() - t0);
    }
    if (left_out) {
        /* an intentionally partial run: no index (its presence marks a complete directory) */
        fprintf(stderr, "%s: %d of %d write units left out (%s); run again with %s to complete the release; no index written\n",
                dst, left_out, p->n_units, p->opts.no_engram ? "--no-engram" : "--engram-only",
                p->opts.no_engram ? "--engram-only" : "--no-engram");
        return 0;
    }
    return ds_rw_json_outputs(p, src, dst, err);
}
