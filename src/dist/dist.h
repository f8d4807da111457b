/* Tensor and expert parallelism over MPI (SERVING.md §14): who this process is, how the model is
 * split across the ranks, and the few collectives the forward pass needs.
 *
 * Why it is built this way: the forward pass keeps one code path; a rank computes only the rows of
 * the linears it owns (attention heads and their output groups, wo_b output rows, routed experts,
 * head vocabulary rows) and the pieces are gathered, never summed across ranks, in ordered mode:
 * every value is then computed by exactly one rank with the single-process arithmetic and lands in
 * the same buffer position, so every later reduction runs in the single-process order and the
 * result is bit-identical to one process for any R (docs/DECISIONS.md).  Fast mode sums the
 * routed-expert partials with MPI_Allreduce instead (fewer bytes, order depends on R).
 * Without MPI_Init (a binary run without mpirun, or any command other than generate/serve/bench)
 * the world is one rank and every hook is a no-op.  Dependencies: base, io/config, MPI; the model
 * calls in, nothing here calls the model. */
#ifndef DS_DIST_H
#define DS_DIST_H
#include "base/common.h"
#include "io/config.h"

typedef enum { DS_REDUCE_ORDERED = 0, DS_REDUCE_FAST = 1 } ds_reduce_mode;

/* One rank's share of the model.  Ranges are [lo, hi); an empty range is allowed (e.g. 2 output
 * groups over 4 ranks: two ranks own no heads and only take part in the gathers). */
typedef struct ds_shard {
    int rank, size;          /* size 1: the whole model, no collectives */
    int g0, g1;              /* attention output groups */
    int h0, h1;              /* heads: those of the owned groups */
    int e0, e1;              /* routed experts (all of them without --expert-parallel) */
    int d0, d1;              /* wo_b output rows */
    int v0, v1;              /* head (vocabulary) rows */
    int expert_parallel;
    ds_reduce_mode mode;
} ds_shard;

/* Balanced split of n items in units of `unit` over `parts`: part i gets [lo, hi). */
void ds_split_range(int n, int unit, int parts, int i, int *lo, int *hi);
/* The shard of `rank` among `size` for config c (R must divide nothing: ranges may be uneven). */
void ds_shard_plan(const ds_config *c, int rank, int size, int expert_parallel, ds_reduce_mode mode, ds_shard *out);

/* ---- process-wide state ---- */
/* Settings of this run (the CLI sets them before loading the model; defaults: ordered, no EP). */
void ds_dist_configure(int expert_parallel, ds_reduce_mode mode);
ds_reduce_mode ds_dist_mode(void);
/* The shard of this process for config c (the whole model when the world is one rank). */
void ds_dist_plan(const ds_config *c, ds_shard *out);
/* MPI_Init (thread level SERIALIZED) when launched by mpirun or when force is set; returns 0, or -1
 * with err.  Sets PR_SET_PDEATHSIG so a rank never outlives its launcher. */
int ds_dist_init(int force, ds_error *err);
int ds_dist_active(void);             /* MPI initialized and world size > 1 */
int ds_dist_rank(void);
int ds_dist_size(void);
int ds_dist_host_size(void);          /* ranks on this host (MPI_COMM_TYPE_SHARED); 1 without MPI */
void ds_dist_finalize(void);
/* Abort the whole job (every rank exits non-zero); never returns. */
void ds_dist_abort(int code);
/* Seconds spent inside collectives since start (the communication share of a run). */
double ds_dist_comm_seconds(void);
uint64_t ds_dist_comm_bytes(void);

/* ---- collectives used by the forward pass (no-ops when size == 1) ---- */
/* bounds[size+1]: rank r owns columns [bounds[r], bounds[r+1]) of every row of dst[rows][total].
 * `mine` holds this rank's columns packed ([rows][own]); NULL: they are already in place in dst. */
void ds_dist_gather_cols(const void *mine, void *dst, int rows, int total, size_t elem, const int *bounds);
/* The same for the split of n items in units of `unit` (ds_split_range), each item `scale` columns
 * wide: dst is [rows][n·scale]. */
void ds_dist_gather_split(const void *mine, void *dst, int rows, int n, int unit, int scale, size_t elem);
/* In place: rank r owns rows [bounds[r], bounds[r+1]) of buf (row_bytes each). */
void ds_dist_gather_rows(void *buf, const int *bounds, size_t row_bytes);
void ds_dist_allreduce_f32(float *buf, size_t n);
void ds_dist_bcast(void *buf, size_t bytes, int root);
/* Column bounds of a split in units: bounds[r] = lo of rank r, scaled by `scale`. */
void ds_dist_bounds(int n, int unit, int size, int scale, int *bounds);

/* ---- start-up agreement ---- */
/* Every rank hashes its config, checkpoint index and flags; on any mismatch with rank 0 every rank
 * fails with a message naming the first differing rank and field.  0 or -1 (err). */
int ds_dist_agree(const char *model_dir, int argc, char **argv, ds_error *err);
/* Gathers each rank's resident bytes after load and, on rank 0, prints one line per rank. */
void ds_dist_report_resident(const char *what);
/* Watchdog: a collective that waits longer than `seconds` aborts the job (0 disables). */
void ds_dist_watchdog_start(double seconds);

#endif
