/* Process-wide MPI state and the collectives of the sharded forward pass (dist.h).
 *
 * Why gathers and not reductions in ordered mode: a gather moves values that exactly one rank
 * computed, so the receiving buffer is bit-for-bit the single-process buffer; a sum across ranks
 * would depend on R.  Every collective is timed (the communication share of a step) and marks the
 * time it started, which the watchdog (shard.c) reads to turn a hung peer into a bounded failure.
 * MPI is initialized only under mpirun (OMPI_COMM_WORLD_SIZE set) so that every other use of the
 * binary stays a plain process.  DSFLASH_DEBUG_HANG=R:N (fault injection for tests/dist) makes rank R
 * stop responding before its N-th collective, as a rank stuck in a step would. */
#include "dist/dist.h"
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static int g_init, g_rank, g_size = 1;
static double g_comm_s;
static uint64_t g_comm_bytes;
/* start time of the collective in progress (0 = none), read by the watchdog thread */
static _Atomic double g_coll_since;
static void *g_pack, *g_recv;
static size_t g_pack_cap, g_recv_cap;
static int *g_counts, *g_displs;
/* DSFLASH_DEBUG_HANG=R:N (tests only): rank R stops responding before its N-th collective */
static int g_hang_rank = -1;
static long g_hang_at, g_coll_count;
static int g_host_size = 1;

static void read_debug_hang(void) {
    const char *v = getenv("DSFLASH_DEBUG_HANG");
    int r = -1;
    long n = 0;
    if (v && sscanf(v, "%d:%ld", &r, &n) == 2 && r >= 0 && n > 0) {
        g_hang_rank = r;
        g_hang_at = n;
    }
}

int ds_dist_init(int force, ds_error *err) {
    if (g_init) return 0;
    if (!force && !getenv("OMPI_COMM_WORLD_SIZE")) return 0;
    /* a rank must never outlive the launcher that started it (no orphans after mpirun dies) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return ds_fail(err, "E_MPI", "MPI_Init_thread failed");
    if (provided < MPI_THREAD_SERIALIZED)
        return ds_fail(err, "E_MPI", "the MPI library gives thread level %d, expected MPI_THREAD_SERIALIZED", provided);
    /* errors come back as codes: a failed collective becomes a clean job abort with a message */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm host;   /* the ranks that share this host's memory */
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
        MPI_Comm_size(host, &g_host_size);
        MPI_Comm_free(&host);
    }
    read_debug_hang();
    g_counts = ds_xcalloc((size_t)g_size, sizeof(int));
    g_displs = ds_xcalloc((size_t)g_size, sizeof(int));
    g_init = 1;
    return 0;
}

static int g_expert_parallel;
static ds_reduce_mode g_mode = DS_REDUCE_ORDERED;

void ds_dist_configure(int expert_parallel, ds_reduce_mode mode) {
    g_expert_parallel = expert_parallel;
    g_mode = mode;
}

ds_reduce_mode ds_dist_mode(void) { return g_mode; }

void ds_dist_plan(const ds_config *c, ds_shard *out) {
    ds_shard_plan(c, g_init ? g_rank : 0, g_init ? g_size : 1, g_expert_parallel, g_mode, out);
}

int ds_dist_active(void) { return g_init && g_size > 1; }
int ds_dist_host_size(void) { return g_init ? g_host_size : 1; }
int ds_dist_rank(void) { return g_rank; }
int ds_dist_size(void) { return g_size; }
double ds_dist_comm_seconds(void) { return g_comm_s; }
uint64_t ds_dist_comm_bytes(void) { return g_comm_bytes; }

void ds_dist_finalize(void) {
    if (!g_init) return;
    MPI_Finalize();
    free(g_pack);
    free(g_recv);
    free(g_counts);
    free(g_displs);
    g_pack = g_recv = NULL;
    g_counts = g_displs = NULL;
    g_init = 0;
}

void ds_dist_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    if (g_init) MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

/* ---- timing and failure of one collective ---- */

static double coll_begin(void) {
    if (g_rank == g_hang_rank && ++g_coll_count == g_hang_at) {
        /* a rank stuck in its own work (not in a collective: its watchdog stays quiet): the peers'
         * watchdogs must stop the job */
        fprintf(stderr, "dsflash: rank %d: DSFLASH_DEBUG_HANG: not responding from collective %ld on\n", g_rank, g_hang_at);
        for (;;) pause();
    }
    double t = ds_now();
    atomic_store(&g_coll_since, t);
    return t;
}

static void coll_end(double t0, int rc, const char *what, size_t bytes) {
    atomic_store(&g_coll_since, 0.0);
    g_comm_s += ds_now() - t0;
    g_comm_bytes += bytes;
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "dsflash: E_MPI: rank %d: %s failed: %s; stopping every rank\n", g_rank, what, msg);
        ds_dist_abort(70);
    }
}

double ds_dist_collective_since(void) { return atomic_load(&g_coll_since); }

static void *grow(void **buf, size_t *cap, size_t need) {
    if (need > *cap) {
        free(*buf);
        *cap = need + need / 2;
        *buf = ds_xmalloc(*cap);
    }
    return *buf;
}

/* ---- collectives ---- */

void ds_dist_bounds(int n, int unit, int size, int scale, int *bounds) {
    for (int r = 0; r < size; r++) {
        int lo, hi;
        ds_split_range(n, unit, size, r, &lo, &hi);
        bounds[r] = lo * scale;
        if (r == size - 1) bounds[size] = hi * scale;
    }
}

void ds_dist_gather_cols(const void *mine, void *dst, int rows, int total, size_t elem, const int *bounds) {
    if (!ds_dist_active() || rows <= 0) return;
    const int lo = bounds[g_rank], own = bounds[g_rank + 1] - lo;
    const size_t row_bytes = (size_t)total * elem;
    uint8_t *pack = grow(&g_pack, &g_pack_cap, (size_t)rows * (size_t)(own > 0 ? own : 1) * elem);
    for (int r = 0; r < rows; r++) {
        const uint8_t *src = mine ? (const uint8_t *)mine + (size_t)r * own * elem
                                  : (const uint8_t *)dst + (size_t)r * row_bytes + (size_t)lo * elem;
        memcpy(pack + (size_t)r * own * elem, src, (size_t)own * elem);
    }
    size_t off = 0;
    for (int q = 0; q < g_size; q++) {
        g_counts[q] = (int)((size_t)rows * (size_t)(bounds[q + 1] - bounds[q]) * elem);
        g_displs[q] = (int)off;
        off += (size_t)g_counts[q];
    }
    uint8_t *recv = grow(&g_recv, &g_recv_cap, off ? off : 1);
    double t0 = coll_begin();
    int rc = MPI_Allgatherv(pack, g_counts[g_rank], MPI_BYTE, recv, g_counts, g_displs, MPI_BYTE, MPI_COMM_WORLD);
    coll_end(t0, rc, "all-gather of column shards", off);
    for (int q = 0; q < g_size; q++) {
        const int qlo = bounds[q], qn = bounds[q + 1] - qlo;
        for (int r = 0; r < rows; r++)
            memcpy((uint8_t *)dst + (size_t)r * row_bytes + (size_t)qlo * elem, recv + g_displs[q] + (size_t)r * qn * elem,
                   (size_t)qn * elem);
    }
}

void ds_dist_gather_split(const void *mine, void *dst, int rows, int n, int unit, int scale, size_t elem) {
    if (!ds_dist_active()) return;
    int bounds[257];
    if (g_size > 256) ds_dist_abort(70);
    ds_dist_bounds(n, unit, g_size, scale, bounds);
    ds_dist_gather_cols(mine, dst, rows, n * scale, elem, bounds);
}

void ds_dist_gather_rows(void *buf, const int *bounds, size_t row_bytes) {
    if (!ds_dist_active()) return;
    for (int q = 0; q < g_size; q++) {
        g_counts[q] = (int)((size_t)(bounds[q + 1] - bounds[q]) * row_bytes);
        g_displs[q] = (int)((size_t)bounds[q] * row_bytes);
    }
    double t0 = coll_begin();
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, g_counts, g_displs, MPI_BYTE, MPI_COMM_WORLD);
    coll_end(t0, rc, "all-gather of row shards", (size_t)(bounds[g_size] - bounds[0]) * row_bytes);
}

void ds_dist_allreduce_f32(float *buf, size_t n) {
    if (!ds_dist_active() || !n) return;
    double t0 = coll_begin();
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    coll_end(t0, rc, "all-reduce", n * sizeof(float));
}

void ds_dist_bcast(void *buf, size_t bytes, int root) {
    if (!ds_dist_active() || !bytes) return;
    double t0 = coll_begin();
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    coll_end(t0, rc, "broadcast", bytes);
}
