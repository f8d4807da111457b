/* `dsflash split`: cut one large file into `NAME.part-NN-of-MM` pieces and record their hashes in
 * PARTS.sha256 (TOOLS.md §1.3), the inverse of reassemble.
 *
 * One read pass over the source computes every part hash and the whole-file hash while writing
 * the parts (the same pipeline as reassemble).  Parts are first written as `….partial`, fsynced,
 * and renamed only after all of them are complete, so a failure or an interrupt leaves the
 * previous split (parts and PARTS.sha256 block) untouched; PARTS.sha256 is then updated under its
 * own lock, replacing only this target's block.  The same `NAME.lock` as reassemble keeps a split
 * and a reassembly of one file from running at once.  The source is never modified, and a source
 * that changes while it is read (size or mtime) fails the run.  Idempotent: when the recorded
 * block still describes the source and the parts verify, nothing is rewritten. */
#ifndef DS_TOOLS_SPLIT_H
#define DS_TOOLS_SPLIT_H
#include "base/common.h"
#include <signal.h>

#define DS_SPLIT_DEFAULT_PART ((uint64_t)16 << 30)   /* 16 GiB, the published layout */
#define DS_SPLIT_MAX_PARTS 9999

typedef struct ds_split_opts {
    const char *file;
    uint64_t part_size;
    const char *out_dir;           /* NULL: the source's directory */
    bool verify;                   /* re-read the parts afterwards (default true) */
    bool quiet;
    int jobs;                      /* parallel part verification */
    volatile sig_atomic_t *stop;
} ds_split_opts;

void ds_split_opts_default(ds_split_opts *o);
/* Prints result lines, returns the exit status of TOOLS.md §0. */
int ds_split_run(const ds_split_opts *o);

#endif
