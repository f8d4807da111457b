/* File-system helpers shared by every writer.  The rule (DEVELOPERS.md): never leave a partial or
 * corrupt output under its final name.  Writers therefore go through ds_afile: write to a unique
 * temporary name in the destination directory, fsync, rename, fsync the directory. */
#ifndef DS_BASE_FSUTIL_H
#define DS_BASE_FSUTIL_H
#include "base/common.h"
#include <stdio.h>

typedef struct ds_afile {
    FILE *fp;
    char *final_path;
    char *tmp_path;
    int failed;      /* a write failed; commit will refuse */
} ds_afile;

/* Open `<path>.tmp.<pid>.<n>` for writing.  Returns 0 or -1 with err set (E_IO). */
int ds_afile_open(ds_afile *f, const char *path, ds_error *err);
/* fwrite with error tracking. */
int ds_afile_write(ds_afile *f, const void *data, size_t n, ds_error *err);
/* Flush, fsync, rename onto the final name, fsync the directory.  On any failure the temporary
 * file is removed and -1 returned.  `no_replace` refuses to overwrite an existing target. */
int ds_afile_commit(ds_afile *f, int no_replace, ds_error *err);
/* Close and delete the temporary file (error paths). */
void ds_afile_abort(ds_afile *f);

/* Whole-file helpers. */
int ds_read_file(const char *path, char **data, size_t *len, ds_error *err);  /* NUL-terminated */
/* the rest of an open stream (stdin), NUL-terminated; name is for the error message */
int ds_read_stream(FILE *fp, const char *name, char **data, size_t *len, ds_error *err);
int ds_write_file_atomic(const char *path, const void *data, size_t len, ds_error *err);
int ds_mkdir_p(const char *path, ds_error *err);
int ds_file_exists(const char *path);
int64_t ds_file_size(const char *path); /* -1 when missing */
/* Join dir + "/" + rel into a newly allocated string. */
char *ds_path_join(const char *dir, const char *rel);
int ds_fsync_dir_of(const char *path);
/* MemTotal and MemAvailable (bytes) from `path` (NULL: $DSFLASH_MEMINFO, else /proc/meminfo). */
int ds_meminfo_read(const char *path, uint64_t *total, uint64_t *available, ds_error *err);

#endif
