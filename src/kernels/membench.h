/* Probes of this host's limits, measured in the same run and with the same thread count as the
 * kernels they judge (a concurrent job halves them, so only ratios measured together mean
 * anything).  Used by `dsflash bench kernels` and `bench decode`. */
#ifndef DS_KERNELS_MEMBENCH_H
#define DS_KERNELS_MEMBENCH_H
#include <stddef.h>

/* Read-only bandwidth in GB/s (1e9 B/s): all pool threads sum their share of one `pass_bytes`
 * slice per pass, rotating through a `bytes` buffer (sized beyond every cache); best pass of at
 * least `reps` passes and `min_secs` seconds.  Passes as long as one kernel call and best-of
 * sampling, exactly as the kernel rows are timed, so the ratio compares like with like. */
double ds_bench_read_bw(size_t bytes, size_t pass_bytes, int reps, double min_secs);
/* STREAM copy (c = a, 16 B/element) and triad (a = b + s*c, 24 B/element), GB/s, best of reps. */
void ds_bench_stream(size_t elems, int reps, double *copy_gbs, double *triad_gbs);
/* int8 dot-product peak in GOP/s (1 multiply-add = 2 ops) with all pool threads: VPDPBUSD zmm on
 * the avx512-vnni path, VPMADDUBSW+VPADDW ymm on avx2 (its fastest int8 dot sequence), a scalar int32 loop otherwise.
 * *what names the instruction sequence measured. */
double ds_bench_int8_peak(const char **what);

#endif
