/* `dsflash quantize` (TOOLS.md §3) and the shared "write a release from a float source" driver
 * that `dsflash mkmodel` also uses.
 *
 * The driver owns the rules about the destination directory: it is created if missing; a
 * non-empty destination is refused unless it holds a quant_plan.json identical to the new plan
 * (then the run resumes, skipping complete files); nothing is ever deleted (PITFALLS.md 28); a
 * lock file keeps two runs out of one directory.  Errors map to the exit statuses of TOOLS.md §0. */
#ifndef DS_TOOLS_QUANTIZE_H
#define DS_TOOLS_QUANTIZE_H
#include "base/common.h"
#include "tools/release_writer.h"

typedef struct ds_release_job {
    ds_rw_opts rw;
    bool resume;       /* allow resuming into a directory with the same plan (quantize default) */
    bool dry_run;      /* print the plan and byte model, write nothing */
    bool fp8;          /* --src-format fp8: the official FP8/MXFP4 checkpoint as input */
} ds_release_job;

/* Plan and write; returns an exit status (0, 1, 2, 3, 4, 5) with a message in err when != 0. */
int ds_release_run(ds_fsrc *src, const char *dst, const ds_release_job *job, ds_error *err);

/* Map an error code to the TOOLS.md §0 exit class. */
int ds_exit_for_error(const ds_error *err);

/* quantize --src DIR --dst DIR: open the float directory and run.  Returns the exit status. */
int ds_quantize_dir(const char *src_dir, const char *dst, const ds_release_job *job, ds_error *err);

#endif
