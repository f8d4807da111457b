/* The byte-streaming engine behind reassemble, split and part verification: each byte is read
 * once and, from that one buffer, hashed for its segment, hashed for the whole stream, and written.
 *
 * A stream is an ordered list of segments; a segment is a byte range of an input file and,
 * optionally, the place it goes in an output file.  Reassembly = one segment per part, all going
 * into T.partial; split = ranges of one source, each going to its own part file; verification =
 * segments without output.  The calling thread reads 64 MiB blocks into two buffers (double
 * buffering) while up to three consumer threads — segment hasher, whole-stream hasher, writer —
 * work on the other buffer.  The two hashes run on different cores, so the copy runs at about the
 * speed of one SHA-256 stream rather than half of it.  At each segment end the pipeline drains and
 * calls `on_done` with that segment's hash, so the caller can compare it, fsync and update a
 * journal before the next segment starts: a crash then never leaves a journal claiming bytes that
 * are not on disk.  `*stop` (set by a signal handler) is polled between blocks.
 *
 * Test hooks (environment, read per run): DSFLASH_TEST_BLOCK_BYTES overrides the 64 MiB block so
 * small test files still span many blocks; DSFLASH_TEST_BLOCK_DELAY_MS sleeps after each block so
 * a test can interrupt or kill a run at a known point; DSFLASH_TEST_CORRUPT_WRITE_AT=N makes the
 * writer store a flipped byte at output offset N after hashing the right one (a failing disk),
 * which only reassemble's readback can detect. */
#ifndef DS_TOOLS_HASH_PIPELINE_H
#define DS_TOOLS_HASH_PIPELINE_H
#include "base/common.h"
#include "base/sha256.h"
#include "tools/progress.h"
#include <signal.h>

#define DS_HP_DEFAULT_BLOCK ((size_t)64 << 20)

typedef struct ds_hp_segment {
    int in_fd;
    uint64_t in_off, len;
    int out_fd;               /* -1: hash only */
    uint64_t out_off;
    const char *in_name;      /* for messages */
    const char *out_name;
} ds_hp_segment;

/* Called on the reading thread after segment `seg` is fully hashed and written.  `hex` is its
 * sha256 (or "" when seg_hash is off).  Return 0 to continue, -1 (err set) to abort the run. */
typedef int (*ds_hp_done_fn)(void *user, int seg, const char *hex, ds_error *err);

typedef struct ds_hp_opts {
    ds_sha256 *whole;          /* NULL: no whole-stream hash; else updated in stream order */
    bool seg_hash;
    ds_hp_done_fn on_done;
    void *user;
    ds_progress *progress;     /* may be NULL */
    volatile sig_atomic_t *stop;
    size_t block;              /* 0 = default */
} ds_hp_opts;

/* 0 done, 1 stopped by *stop (partially written output is the caller's to clean), -1 error
 * (E_IO with file, offset and errno text; or the code on_done set). */
int ds_hp_run(const ds_hp_segment *segs, int n, const ds_hp_opts *o, ds_error *err);

/* The block size a run will use (default or test override). */
size_t ds_hp_block_size(void);

/* Read/write helpers that retry short transfers and EINTR; -1 with errno on failure, and
 * ds_pread_full returns the byte count actually read (short only at end of file). */
ssize_t ds_pread_full(int fd, void *buf, size_t n, uint64_t off);
int ds_pwrite_full(int fd, const void *buf, size_t n, uint64_t off);

#endif
