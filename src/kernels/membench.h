/* Probes of this host's limits, measured in the same run and with the same thread count as the
 * kernels they judge (a concurrent job halves them, so only ratios measured together mean
 * anything).  Used by `dsflash perf kernels` and `perf decode`. */
#ifndef DS_KERNELS_MEMBENCH_H
#define DS_KERNELS_MEMBENCH_H
#include <stddef.h>

/* Read-only bandwidth in GB/s (1e9 B/s): all pool threads sum their share of one `pass_bytes`
 * slice per pass, rotating through a `bytes` buffer (sized beyond every cache); best pass of at
 * least `reps` passes and `min_secs` seconds.  Passes as long as one kernel call and best-of
 * sampling, exactly as the kernel rows are timed, so the ratio compares like with like. */
double ds_bench_read_bw(size_t bytes, size_t pass_bytes, int reps, double min_secs);
/* The buffer a read probe really uses for a requested `bytes`: at least DS_BW_MIN_BUFFER and 8× the
 * largest cache sysfs reports, so no pass can be served from a cache (a VM may hide or understate
 * its caches, hence the fixed floor), rounded down to pages.  Its pages hold distinct contents
 * (a hash of the offset, written before timing), so a host's same-page merging cannot fold them
 * into one cached page. */
#define DS_BW_MIN_BUFFER ((size_t)1 << 30)
size_t ds_bench_read_buffer_bytes(size_t bytes);
size_t ds_bench_llc_bytes(void);            /* largest cache sysfs lists, 0 if none */
/* Every pass of one probe run, summarized: the limit is the best pass; the spread (median, worst)
 * says how much the host's load moved it. */
typedef struct {
    double best, median, worst;   /* GB/s */
    int passes;
    size_t buffer_bytes, pass_bytes;
    char kernel[64];              /* read kernel of the best pass */
} ds_bw_stats;
void ds_bench_read_bw_stats(size_t bytes, size_t pass_bytes, int reps, double min_secs, ds_bw_stats *st);
/* The same, naming the read kernel that reached the best pass (several are tried: one stream
 * with 4 / 8 accumulators, 4 and 8 interleaved streams, software prefetch, non-temporal loads). */
double ds_bench_read_bw_what(size_t bytes, size_t pass_bytes, int reps, double min_secs, const char **what);
/* The same probe one sample at a time, so a benchmark can interleave probe samples with the
 * samples it judges (both then see the same load on a shared host). */
typedef struct ds_bwprobe ds_bwprobe;
ds_bwprobe *ds_bwprobe_new(size_t bytes, size_t pass_bytes);
double ds_bwprobe_pass(ds_bwprobe *b);   /* GB/s of one pass */
/* One pass of the same read kernels over a caller's region (a kernel row's own weights: on a VM two
 * allocations can sit on host memory of different speed, and the limit must be the faster). */
double ds_bwprobe_pass_over(ds_bwprobe *b, const void *buf, size_t bytes);
void ds_bwprobe_free(ds_bwprobe *b);
const char *ds_bwprobe_best_kernel(const ds_bwprobe *b);
const void *ds_bwprobe_buffer(const ds_bwprobe *b, size_t *bytes);   /* the buffer it reads (tests) */
/* STREAM copy (c = a, 16 B/element) and triad (a = b + s*c, 24 B/element), GB/s, best of reps. */
void ds_bench_stream(size_t elems, int reps, double *copy_gbs, double *triad_gbs);
/* int8 dot-product peak in GOP/s (1 multiply-add = 2 ops) of all pool threads: the best rate one
 * core reaches (every task times itself; independent accumulator chains written in asm) times the
 * pool's thread count.  VPDPBUSD zmm on the avx512-vnni path, VPMADDUBSW+VPADDW ymm on avx2 (its
 * fastest int8 dot sequence) or AVX-VNNI ymm where the CPU has it, a scalar int32 loop otherwise.
 * *what names the instruction sequence measured. */
double ds_bench_int8_peak(const char **what);
/* One short (< 1 ms) sample of the same, for interleaving (alternates 12 and 24 chains, and on
 * the avx2 path AVX-VNNI where the CPU has it). */
double ds_bench_int8_peak_once(const char **what);
/* fp32 peak of the fast float linears in GOP/s (1 multiply-add = 2 ops), measured the same way:
 * vdpbf16ps zmm for bf16 where the CPU has avx512-bf16 (bf16 != 0), else FMA zmm / ymm per path,
 * scalar otherwise. */
double ds_bench_float_peak(int bf16, const char **what);
double ds_bench_float_peak_once(int bf16, const char **what);

#endif
