/* The linears' floor of a benchmarked step: what its linear calls cannot beat on this host.
 *
 * Why per call, and why raw: the batched roofline (bytes of the distinct weights a step read over
 * the read bandwidth) is the limit the serving targets are written against, but a step whose float
 * linears run 16 rows is bound by multiply-adds, not bytes, on a host without wide float units.
 * Each call is bound by the larger of its two costs (its weight bytes over the read bandwidth, its
 * operations over the peak of the units it runs on), so the floor is the sum over calls of that
 * larger cost: tighter than either total alone, and still a limit no schedule of those calls can
 * beat.  The calls are tallied raw (class, bytes, multiply-adds, count) while the step runs and
 * turned into seconds only at the report, against the best limits sampled through the whole run.
 * Attention, norms, mixes and sampling are not linears and are not in the floor: the gap between
 * a step and its floor is theirs plus the kernels' own inefficiency. */
#ifndef DS_CLI_BENCH_FLOOR_H
#define DS_CLI_BENCH_FLOOR_H
#include "kernels/kernels.h"
#include "base/phase_prof.h"
#include <pthread.h>
#include <stdint.h>

#define BS_KINDS_MAX 1024   /* distinct (class, phase, bytes, multiply-adds) per tally; a power of two */

typedef struct {
    uint64_t bytes, macs;   /* of one call */
    uint64_t calls;         /* 0: free slot */
    int cls;                /* ds_mac_class */
    int phase;              /* ds_phase open on the calling thread (OTHER unless profiling) */
} bs_call_kind;

typedef struct {
    pthread_mutex_t mu;
    int n;                  /* distinct kinds */
    uint64_t calls, lost;   /* calls seen; calls not recorded (table full) */
    bs_call_kind k[BS_KINDS_MAX];   /* open addressing on (class, phase, bytes, multiply-adds) */
} bs_tally;

bs_tally *bs_tally_new(void);
void bs_tally_free(bs_tally *t);
/* The kernel layer's call observer (ds_kernels_observe(bs_tally_observe, tally)); files the call
 * under the calling thread's open phase (ds_prof_current). */
void bs_tally_observe(void *tally, ds_mac_class cls, uint64_t bytes, uint64_t macs);

/* Seconds of the tallied calls' floor: sum over calls of max(bytes / read_bw, 2 * macs / peak of
 * the class), GB/s and GOP/s.  *compute_s: the share of it from calls bound by operations.
 * Returns -1 when there is no floor to give: a call lost, or one in a class without a peak (the
 * exact tier's float64 linears: no probe measures that path). */
double bs_tally_floor(const bs_tally *t, double read_bw, const double peak_gops[DS_MAC_CLASSES], double *compute_s);
/* The same floor split by phase: per_phase[DS_PH_COUNT] seconds.  Returns what bs_tally_floor does. */
double bs_tally_floor_phases(const bs_tally *t, double read_bw, const double peak_gops[DS_MAC_CLASSES], double *compute_s,
                             double *per_phase);

/* Class names in reports: "int8", "f32", "bf16", "f64". */
const char *bs_mac_class_name(int cls);
#endif
