/* `dsflash reassemble`: rebuild split files from their parts, verified by PARTS.sha256
 * (TOOLS.md §1.2, CHECKPOINT.md §10).
 *
 * The invariant everything here serves: the target name never refers to a partial or unverified
 * file.  Bytes go to `T.partial` (created with O_EXCL under an flock on `T.lock`, so two runs can
 * never write one temporary file), every part is hashed while it is copied, the whole file is
 * hashed in the same pass and again on readback after its page cache was dropped, and only then
 * does `renameat2(RENAME_NOREPLACE)` publish it.  A journal `T.partial.json` records completed
 * parts (updated only after the bytes are fsynced), so a crash or a signal costs at most one part
 * and a rerun resumes after re-hashing what is already there.  A stamp `T.verified` (size, mtime,
 * inode, hash) makes reruns instant.  Parts are deleted only on request, after success, by the
 * exact names in PARTS.sha256.
 *
 * Library code prints the result lines ([OK]/[FAIL]/[NEED]/[STOP] and the summary) to stdout and
 * returns the exit status of TOOLS.md §0; the CLI layer only parses options and installs the signal
 * handlers that set `*stop`. */
#ifndef DS_TOOLS_REASSEMBLE_H
#define DS_TOOLS_REASSEMBLE_H
#include "base/common.h"
#include "tools/parts_manifest.h"
#include <signal.h>

/* Exit statuses of TOOLS.md §0. */
enum {
    DS_EXIT_OK = 0, DS_EXIT_CHECK = 1, DS_EXIT_USAGE = 2, DS_EXIT_IO = 3, DS_EXIT_LOCK = 4,
    DS_EXIT_MISSING = 5, DS_EXIT_NEED = 10
};
/* Combine two statuses: the first in the order 2, 3, 4, 5, 1, 10 (then 0) wins.  Signal exits
 * (128+n) win over everything, since the run did not finish. */
int ds_exit_merge(int a, int b);

typedef struct ds_reassemble_opts {
    const char *dir;               /* default "." */
    const char *const *targets;    /* NULL/0: every target of PARTS.sha256 */
    int n_targets;
    bool check_only, delete_parts, replace, quiet;
    bool readback;                 /* default true */
    bool resume;                   /* default true */
    int jobs;                      /* parallel part hashing in check-only mode (default 2) */
    volatile sig_atomic_t *stop;   /* set to the signal number by the caller's handler */
} ds_reassemble_opts;

void ds_reassemble_opts_default(ds_reassemble_opts *o);
/* Run over all requested targets; prints per-target results and the summary line. */
int ds_reassemble_run(const ds_reassemble_opts *o);

/* --- pieces shared with split --- */

/* Non-blocking exclusive lock on `<dir>/<name>.lock`.  Returns the fd (>= 0), or -DS_EXIT_LOCK
 * when another process holds it, or -DS_EXIT_IO (err set). */
int ds_tool_lock(const char *dir, const char *name, ds_error *err);
/* Release and remove the lock file. */
void ds_tool_unlock(const char *dir, const char *name, int fd);

/* Part-set consistency of step 1 plus the size rules of CHECKPOINT.md §10: returns 0, or an exit
 * class (1 inconsistent, 5 parts missing) with a human description in `why`. */
int ds_parts_check_set(const char *dir, const ds_parts_target *t, char *why, size_t why_len);
/* Hash every part of `t` (`jobs` files at a time) and compare with PARTS.sha256.  Prints a
 * `[FAIL] T: part NN sha256 mismatch …` line per bad part.  Returns 0, 1 (mismatch), 3 (I/O), or
 * 128+signal when stopped. */
int ds_parts_verify(const char *dir, const ds_parts_target *t, int jobs, bool quiet, volatile sig_atomic_t *stop);

/* True when `<target_path>.verified` matches the file's current size, inode and mtime (ns) and,
 * if want_hex is not NULL, records that hash.  Used by verify and usable by any loader. */
bool ds_reassemble_stamp_ok(const char *target_path, const char *want_hex);
/* Write `<target_path>.verified` for the file as it is now (size, inode, mtime) with hash `hex`
 * (atomically).  Only for a file whose whole-file hash was just verified. */
int ds_reassemble_stamp_write(const char *target_path, const char *hex, ds_error *err);
/* 128 + the signal number recorded in *stop, or 0. */
int ds_tool_stopped_status(volatile sig_atomic_t *stop);

/* CLI helper: SIGINT/SIGTERM set *flag to the signal number (a second one kills at once);
 * SIGXFSZ is ignored so that a file-size limit becomes an I/O error. */
void ds_tool_install_stop_handlers(volatile sig_atomic_t *flag);

#endif
