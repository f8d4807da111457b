/* Progress reporting for long runs: byte-streaming tools (reassemble, split, hashing a 98 GB file)
 * and counted work (bench requests, probe samples: ds_progress_init_count).
 *
 * Two modes, chosen once from isatty(stderr): on a terminal one line refreshed in place at most
 * 4 times per second; otherwise (logs, CI, pipes) a plain line every 5% or 30 s, whichever comes
 * first, so a log stays short yet proves the run is alive.  Progress goes to stderr: stdout carries
 * only the result lines ([OK]/[FAIL]/[NEED] and the summary) so that it reads the same with and
 * without a terminal.  The line looks like
 *   [layers_1_engram_embed.weight] part 3/6  52.1 GiB / 91.6 GiB  56.9%  1.84 GiB/s  ETA 0:21
 * or, counting items,
 *   [bench c=8 rep 1/2] 12/64 req  18.8%  3.20 req/s  ETA 0:16
 * The reporter is thread-safe (parallel part verification updates one reporter from several
 * threads). */
#ifndef DS_TOOLS_PROGRESS_H
#define DS_TOOLS_PROGRESS_H
#include "base/common.h"
#include <pthread.h>
#include <stdio.h>

typedef struct ds_progress {
    pthread_mutex_t mu;
    FILE *out;
    bool tty, quiet, line_open;
    char label[128];
    char stage[64];
    uint64_t total, done;
    double t0, last_print;
    int next_pct;          /* plain mode: next multiple of 5% to report */
    char unit[16];         /* counting mode: the item name ("req"); empty = bytes */
} ds_progress;

/* `label` is shown in brackets; `total` bytes expected; quiet suppresses everything. */
void ds_progress_init(ds_progress *p, const char *label, uint64_t total, bool quiet);
/* Counting mode: `total` items of `unit` (e.g. "req"); ds_progress_add then adds items. */
void ds_progress_init_count(ds_progress *p, const char *label, uint64_t total, const char *unit, bool quiet);
/* Restart for a new pass over `total` bytes or items with a new label (keeps modes). */
void ds_progress_restart(ds_progress *p, const char *label, uint64_t total);
/* Free-form stage text, e.g. "part 3/6" or "readback". */
void ds_progress_stage(ds_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ds_progress_add(ds_progress *p, uint64_t bytes);
/* End the pass: clears the in-place line on a terminal; plain mode prints a closing line. */
void ds_progress_finish(ds_progress *p);
void ds_progress_destroy(ds_progress *p);

/* Helpers also used in result lines: "52.1 GiB", "0:21" / "1:02:03". */
void ds_format_bytes(uint64_t bytes, char *buf, size_t n);
void ds_format_duration(double seconds, char *buf, size_t n);

/* Test hook: DSFLASH_PROGRESS=tty|plain forces the mode (a test cannot always get a terminal). */
#endif
