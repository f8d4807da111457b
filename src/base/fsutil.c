/* Atomic file writing and small file helpers (see fsutil.h for the rule they enforce). */
#define _GNU_SOURCE
#include "base/fsutil.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdatomic.h>

static atomic_int g_tmp_counter;

char *ds_path_join(const char *dir, const char *rel) {
    size_t a = strlen(dir), b = strlen(rel);
    char *p = ds_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, rel, b + 1);
    return p;
}

int ds_file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
int64_t ds_file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

int ds_fsync_dir_of(const char *path) {
    char *copy = ds_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    free(copy);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int ds_afile_open(ds_afile *f, const char *path, ds_error *err) {
    memset(f, 0, sizeof *f);
    f->final_path = ds_xstrdup(path);
    size_t n = strlen(path) + 64;
    f->tmp_path = ds_xmalloc(n);
    snprintf(f->tmp_path, n, "%s.tmp.%d.%d", path, (int)getpid(), atomic_fetch_add(&g_tmp_counter, 1));
    int fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        int e = errno;
        free(f->final_path); free(f->tmp_path);
        memset(f, 0, sizeof *f);
        return ds_fail(err, "E_IO", "%s: cannot create temporary file: %s", path, strerror(e));
    }
    f->fp = fdopen(fd, "wb");
    return 0;
}

int ds_afile_write(ds_afile *f, const void *data, size_t n, ds_error *err) {
    if (f->failed) return -1;
    if (n && fwrite(data, 1, n, f->fp) != n) {
        f->failed = 1;
        return ds_fail(err, "E_IO", "%s: write failed: %s", f->final_path, strerror(errno));
    }
    return 0;
}

void ds_afile_abort(ds_afile *f) {
    if (f->fp) fclose(f->fp);
    if (f->tmp_path) unlink(f->tmp_path);
    free(f->tmp_path); free(f->final_path);
    memset(f, 0, sizeof *f);
}

int ds_afile_commit(ds_afile *f, int no_replace, ds_error *err) {
    int rc = -1;
    if (f->failed) { ds_afile_abort(f); return -1; }
    if (fflush(f->fp) != 0 || fsync(fileno(f->fp)) != 0) {
        ds_fail(err, "E_IO", "%s: flush/fsync failed: %s", f->final_path, strerror(errno));
        goto out;
    }
    if (fclose(f->fp) != 0) {
        f->fp = NULL;
        ds_fail(err, "E_IO", "%s: close failed: %s", f->final_path, strerror(errno));
        goto out;
    }
    f->fp = NULL;
    if (no_replace) {
        if (renameat2(AT_FDCWD, f->tmp_path, AT_FDCWD, f->final_path, RENAME_NOREPLACE) != 0) {
            ds_fail(err, "E_IO", "%s: cannot rename into place: %s", f->final_path, strerror(errno));
            goto out;
        }
    } else if (rename(f->tmp_path, f->final_path) != 0) {
        ds_fail(err, "E_IO", "%s: cannot rename into place: %s", f->final_path, strerror(errno));
        goto out;
    }
    ds_fsync_dir_of(f->final_path);
    free(f->tmp_path); free(f->final_path);
    memset(f, 0, sizeof *f);
    return 0;
out:
    ds_afile_abort(f);
    return rc;
}

int ds_write_file_atomic(const char *path, const void *data, size_t len, ds_error *err) {
    ds_afile f;
    if (ds_afile_open(&f, path, err)) return -1;
    if (ds_afile_write(&f, data, len, err)) { ds_afile_abort(&f); return -1; }
    return ds_afile_commit(&f, 0, err);
}

int ds_read_stream(FILE *fp, const char *name, char **data, size_t *len, ds_error *err) {
    size_t cap = 1 << 16, n = 0;
    char *buf = ds_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) { cap *= 2; buf = ds_xrealloc(buf, cap); }
        size_t r = fread(buf + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    if (ferror(fp)) { free(buf); return ds_fail(err, "E_IO", "%s: read error", name); }
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return 0;
}

int ds_read_file(const char *path, char **data, size_t *len, ds_error *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return ds_fail(err, "E_MISSING_FILE", "%s: cannot open: %s", path, strerror(errno));
    int rc = ds_read_stream(fp, path, data, len, err);
    fclose(fp);
    return rc;
}

int ds_mkdir_p(const char *path, ds_error *err) {
    char *p = ds_xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) goto fail;
            *s = '/';
        }
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) goto fail;
    free(p);
    return 0;
fail:
    ds_fail(err, "E_IO", "%s: cannot create directory: %s", path, strerror(errno));
    free(p);
    return -1;
}

int ds_meminfo_read(const char *path, uint64_t *total, uint64_t *available, ds_error *err) {
    if (!path) path = getenv("DSFLASH_MEMINFO");
    if (!path || !*path) path = "/proc/meminfo";
    FILE *f = fopen(path, "r");
    if (!f) return ds_fail(err, "E_IO", "%s: cannot open: %s", path, strerror(errno));
    unsigned long long t = 0, a = 0, kb;
    bool have_t = false, have_a = false;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) t = kb, have_t = true;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) a = kb, have_a = true;
    }
    fclose(f);
    if (!have_t || !have_a)
        return ds_fail(err, "E_IO", "%s: expected MemTotal and MemAvailable lines in kB, found %s", path,
                       have_t ? "no MemAvailable" : have_a ? "no MemTotal" : "neither");
    *total = (uint64_t)t * 1024u;
    *available = (uint64_t)a * 1024u;
    return 0;
}
