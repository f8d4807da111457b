/* Read-once hash-and-copy pipeline (design in hash_pipeline.h).
 *
 * Synchronisation is one mutex and one condition variable over a ring of two slots.  A slot
 * carries a sequence number; consumer c processes sequence k when slot k%2 holds it, then
 * decrements the slot's pending count; the reader refills a slot only when its count is zero.
 * Every wait also watches `abort`, so an error in any thread (or a stop request) unblocks all. */
#define _GNU_SOURCE
#include "tools/hash_pipeline.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NSLOT 2
enum { C_SEGHASH = 0, C_WHOLE, C_WRITE, NCONS };

typedef struct slot {
    uint8_t *buf;
    size_t len;
    int seg;                  /* -1 = end of stream */
    bool seg_last;
    uint64_t out_off;
    long seq;
    int pending;
} slot;

typedef struct pipe_state {
    const ds_hp_segment *segs;
    const ds_hp_opts *o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slot slots[NSLOT];
    bool abort;
    int n_active;             /* consumers running */
    bool active[NCONS];
    ds_error err;             /* first error */
    bool failed;
    ds_sha256 *seg_ctx;
    char (*seg_hex)[DS_SHA256_HEX_LEN + 1];
    int64_t corrupt_at;       /* test hook DSFLASH_TEST_CORRUPT_WRITE_AT, -1 = off */
} pipe_state;

ssize_t ds_pread_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int ds_pwrite_full(int fd, const void *buf, size_t n, uint64_t off) {
    size_t put = 0;
    while (put < n) {
        ssize_t r = pwrite(fd, (const uint8_t *)buf + put, n - put, (off_t)(off + put));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) { errno = EIO; return -1; }
        put += (size_t)r;
    }
    return 0;
}

size_t ds_hp_block_size(void) {
    const char *e = getenv("DSFLASH_TEST_BLOCK_BYTES");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end == 0 && v >= 512 && v <= ((unsigned long long)1 << 30)) return (size_t)v;
        ds_log(DS_LOG_WARN, "DSFLASH_TEST_BLOCK_BYTES=%s ignored (expected 512..1073741824)", e);
    }
    return DS_HP_DEFAULT_BLOCK;
}

static void set_error(pipe_state *st, const ds_error *e) {
    pthread_mutex_lock(&st->mu);
    if (!st->failed) { st->err = *e; st->failed = true; }
    st->abort = true;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

typedef struct { pipe_state *st; int which; } cons_arg;

/* Write-behind: start writeback of each block as soon as it is written and wait for the previous
 * one, so the disk works while the next block is read and hashed, dirty memory stays at about two
 * blocks, and the per-segment fdatasync finds little left to do.  Written pages are then dropped
 * from the cache: a 98 GB output would otherwise evict everything else (readback re-reads from
 * disk on purpose).  Best effort: file systems without these calls simply ignore them. */
typedef struct { int fd; uint64_t off, len; } write_behind;
static void stream_out(write_behind *w, int fd, uint64_t off, uint64_t len) {
    sync_file_range(fd, (off64_t)off, (off64_t)len, SYNC_FILE_RANGE_WRITE);
    if (w->len && w->fd == fd) {
        sync_file_range(fd, (off64_t)w->off, (off64_t)w->len, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
        posix_fadvise(fd, (off_t)w->off, (off_t)w->len, POSIX_FADV_DONTNEED);
    }
    *w = (write_behind){fd, off, len};
}

static void *consumer(void *p) {
    cons_arg *a = p;
    pipe_state *st = a->st;
    write_behind ws = {-1, 0, 0};
    const ds_hp_opts *o = st->o;
    for (long k = 0;; k++) {
        slot *s = &st->slots[k % NSLOT];
        pthread_mutex_lock(&st->mu);
        while (!st->abort && s->seq != k) pthread_cond_wait(&st->cv, &st->mu);
        bool stop = st->abort;
        pthread_mutex_unlock(&st->mu);
        if (stop) break;
        if (s->seg < 0) {   /* end of stream: acknowledge and leave */
            pthread_mutex_lock(&st->mu);
            s->pending--;
            pthread_cond_broadcast(&st->cv);
            pthread_mutex_unlock(&st->mu);
            break;
        }
        const ds_hp_segment *g = &st->segs[s->seg];
        if (a->which == C_SEGHASH) {
            ds_sha256_update(st->seg_ctx, s->buf, s->len);
            if (s->seg_last) {
                ds_sha256_final_hex(st->seg_ctx, st->seg_hex[s->seg]);
                ds_sha256_reset(st->seg_ctx);
            }
        } else if (a->which == C_WHOLE) {
            ds_sha256_update(o->whole, s->buf, s->len);
        } else if (g->out_fd >= 0 && s->len) {
            int wr = ds_pwrite_full(g->out_fd, s->buf, s->len, s->out_off);
            if (wr == 0 && st->corrupt_at >= 0 && (uint64_t)st->corrupt_at >= s->out_off && (uint64_t)st->corrupt_at < s->out_off + s->len) {
                /* test hook: the disk "stores" one wrong byte; only a readback can notice */
                uint8_t bad = (uint8_t)~s->buf[st->corrupt_at - (int64_t)s->out_off];
                wr = ds_pwrite_full(g->out_fd, &bad, 1, (uint64_t)st->corrupt_at);
            }
            if (wr == 0) stream_out(&ws, g->out_fd, s->out_off, s->len);
            if (wr != 0) {
                ds_error e;
                int en = errno;
                ds_fail(&e, "E_IO", "%s: write of %zu bytes at offset %llu failed: %s%s", g->out_name, s->len,
                        (unsigned long long)s->out_off, strerror(en),
                        (en == ENOSPC || en == EDQUOT || en == EFBIG) ? " (disk full or file size limit)" : "");
                set_error(st, &e);
                break;
            }
        }
        pthread_mutex_lock(&st->mu);
        s->pending--;
        pthread_cond_broadcast(&st->cv);
        pthread_mutex_unlock(&st->mu);
    }
    return NULL;
}

/* Wait until slot `s` is free (all consumers done with it); false when aborted. */
static bool wait_free(pipe_state *st, slot *s) {
    pthread_mutex_lock(&st->mu);
    while (!st->abort && s->pending > 0) pthread_cond_wait(&st->cv, &st->mu);
    bool ok = !st->abort;
    pthread_mutex_unlock(&st->mu);
    return ok;
}

static void publish(pipe_state *st, slot *s, long seq) {
    pthread_mutex_lock(&st->mu);
    s->pending = st->n_active;
    s->seq = seq;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static void delay_hook(void) {
    const char *e = getenv("DSFLASH_TEST_BLOCK_DELAY_MS");
    long ms = e ? atol(e) : 0;
    if (ms > 0 && ms < 60000) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

int ds_hp_run(const ds_hp_segment *segs, int n, const ds_hp_opts *o, ds_error *err) {
    pipe_state st;
    memset(&st, 0, sizeof st);
    st.segs = segs;
    st.o = o;
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    size_t block = o->block ? o->block : ds_hp_block_size();
    const char *cw = getenv("DSFLASH_TEST_CORRUPT_WRITE_AT");
    st.corrupt_at = cw && *cw ? atoll(cw) : -1;
    for (int i = 0; i < NSLOT; i++) {
        st.slots[i].buf = ds_amalloc(block);
        st.slots[i].seq = -1;
    }
    st.seg_hex = ds_xcalloc((size_t)(n ? n : 1), sizeof *st.seg_hex);
    st.active[C_SEGHASH] = o->seg_hash;
    st.active[C_WHOLE] = o->whole != NULL;
    for (int i = 0; i < n; i++)
        if (segs[i].out_fd >= 0) st.active[C_WRITE] = true;
    if (o->seg_hash) st.seg_ctx = ds_sha256_new();
    pthread_t th[NCONS];
    cons_arg args[NCONS];
    for (int c = 0; c < NCONS; c++) {
        if (!st.active[c]) continue;
        args[c] = (cons_arg){&st, c};
        st.n_active++;
    }
    for (int c = 0; c < NCONS; c++)
        if (st.active[c]) pthread_create(&th[c], NULL, consumer, &args[c]);

    int result = 0;
    long seq = 0;
    for (int sg = 0; sg < n && result == 0; sg++) {
        const ds_hp_segment *g = &segs[sg];
        posix_fadvise(g->in_fd, (off_t)g->in_off, (off_t)g->len, POSIX_FADV_SEQUENTIAL);
        uint64_t done = 0;
        do {
            if (o->stop && *o->stop) { result = 1; break; }
            slot *s = &st.slots[seq % NSLOT];
            if (!wait_free(&st, s)) { result = -1; break; }
            size_t want = (size_t)DS_MIN((uint64_t)block, g->len - done);
            ssize_t got = want ? ds_pread_full(g->in_fd, s->buf, want, g->in_off + done) : 0;
            if (got < 0 || (size_t)got != want) {
                ds_error e;
                if (got < 0)
                    ds_fail(&e, "E_IO", "%s: read of %zu bytes at offset %llu failed: %s", g->in_name, want,
                            (unsigned long long)(g->in_off + done), strerror(errno));
                else
                    ds_fail(&e, "E_IO", "%s: file ended at offset %llu, %llu bytes expected (file shrank while reading?)",
                            g->in_name, (unsigned long long)(g->in_off + done + (uint64_t)got),
                            (unsigned long long)(g->in_off + g->len));
                set_error(&st, &e);
                result = -1;
                break;
            }
            s->len = want;
            s->seg = sg;
            s->out_off = g->out_off + done;
            done += want;
            s->seg_last = done == g->len;
            publish(&st, s, seq++);
            if (o->progress) ds_progress_add(o->progress, want);
            delay_hook();
        } while (done < g->len);
        if (result != 0) break;
        /* Drain so on_done sees the segment fully hashed and written. */
        for (int i = 0; i < NSLOT; i++)
            if (!wait_free(&st, &st.slots[i])) { result = -1; break; }
        if (result == 0 && o->on_done) {
            ds_error e;
            ds_error_clear(&e);
            if (o->on_done(o->user, sg, o->seg_hash ? st.seg_hex[sg] : "", &e) != 0) {
                set_error(&st, &e);
                result = -1;
            }
        }
    }
    if (result == 0) {
        slot *s = &st.slots[seq % NSLOT];
        if (wait_free(&st, s)) {
            s->seg = -1;
            s->len = 0;
            publish(&st, s, seq++);
        }
    } else {
        pthread_mutex_lock(&st.mu);
        st.abort = true;
        pthread_cond_broadcast(&st.cv);
        pthread_mutex_unlock(&st.mu);
    }
    for (int c = 0; c < NCONS; c++)
        if (st.active[c]) pthread_join(th[c], NULL);
    if (st.failed) {
        result = -1;
        if (err) *err = st.err;
    }
    for (int i = 0; i < NSLOT; i++) ds_afree(st.slots[i].buf);
    free(st.seg_hex);
    ds_sha256_free(st.seg_ctx);
    pthread_cond_destroy(&st.cv);
    pthread_mutex_destroy(&st.mu);
    return result;
}
