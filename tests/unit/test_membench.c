/* The read-bandwidth probe (kernels/membench.c) measures memory, not a cache.
 *
 * Why these checks: the probe is the denominator of every "% of read bandwidth" figure, and on the
 * 2-core VM it once swung from 28 to 77 GB/s within one run — a probe that reads from a cache (a
 * buffer the caches hold, or identical pages a host merged into one) makes every kernel look slow.
 * So: the buffer is at least 1 GiB and 8× the largest cache sysfs lists; its pages have distinct
 * contents (nothing to merge); and the summary of the passes (best >= median >= worst > 0) is
 * consistent.  What the probe reads is not asserted against a speed (a shared host moves it). */
#include "check.h"
#include "kernels/membench.h"
#include "base/common.h"
#include "base/threadpool.h"
#include <stdint.h>

TEST(buffer_defeats_the_caches_and_has_distinct_pages) {
    const size_t llc = ds_bench_llc_bytes(), got = ds_bench_read_buffer_bytes((size_t)64 << 20);
    printf("  largest cache listed: %zu KiB; probe buffer for a 64 MiB request: %zu MiB\n", llc >> 10, got >> 20);
    CHECK(got >= ((size_t)1 << 30) && got >= 8 * llc, "buffer %zu B, cache %zu B", got, llc);
    ds_bwprobe *b = ds_bwprobe_new((size_t)64 << 20, (size_t)16 << 20);
    size_t n = 0;
    const uint8_t *buf = ds_bwprobe_buffer(b, &n);
    CHECK(n == got, "probe buffer %zu B, expected %zu B", n, got);
    /* 97 pages spread over the buffer: no two share their first 64 bytes */
    enum { P = 97 };
    int same = 0;
    for (int i = 0; i < P; i++)
        for (int j = i + 1; j < P; j++)
            same += !memcmp(buf + (n / P) * (size_t)i / 4096 * 4096, buf + (n / P) * (size_t)j / 4096 * 4096, 64);
    CHECK(same == 0, "%d pairs of sampled pages start with the same bytes", same);
    ds_bwprobe_free(b);
}

TEST(stats_summarize_every_pass) {
    ds_pool_init(2);
    ds_bw_stats mem;
    ds_bench_read_bw_stats((size_t)64 << 20, (size_t)64 << 20, 18, 0.1, &mem);
    printf("  probe: best %.1f GB/s, median %.1f, worst %.1f over %d passes of %zu MiB in %zu MiB (%s)\n", mem.best,
           mem.median, mem.worst, mem.passes, mem.pass_bytes >> 20, mem.buffer_bytes >> 20, mem.kernel);
    CHECK(mem.passes >= 18 && mem.best >= mem.median && mem.median >= mem.worst && mem.worst > 0,
          "best %.2f median %.2f worst %.2f passes %d", mem.best, mem.median, mem.worst, mem.passes);
    CHECK(mem.buffer_bytes >= ((size_t)1 << 30) && mem.pass_bytes == ((size_t)64 << 20), "buffer %zu B, pass %zu B",
          mem.buffer_bytes, mem.pass_bytes);
    CHECK(ds_bench_read_bw((size_t)64 << 20, (size_t)64 << 20, 1, 0.0) > 0);
}

TEST(pass_over_a_callers_buffer_stays_inside_it) {
    /* perf kernels judges a row against passes over its own weights (decision 169): every read
     * kernel must run over any caller's region — unaligned start, odd length — without reading
     * past either end (the ASan build checks the bounds; the buffer is an exactly sized heap block) */
    ds_pool_init(2);
    const size_t n = ((size_t)5 << 20) + 77;
    uint8_t *buf = ds_xmalloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 131u >> 3);
    ds_bwprobe *b = ds_bwprobe_new((size_t)64 << 20, (size_t)16 << 20);
    int positive = 0;
    enum { PASSES = 64 };   /* more than two of every read kernel, then the exploring passes */
    for (int i = 0; i < PASSES; i++) {
        const double gbs = ds_bwprobe_pass_over(b, buf + 3, n - 3);
        positive += gbs > 0 && gbs < 1e6;
    }
    CHECK(positive == PASSES, "%d of %d passes gave a finite positive rate", positive, PASSES);
    CHECK(ds_bwprobe_pass_over(b, buf + 1, 40) == 0.0, "a region too short for one 512-byte round reads nothing");
    printf("  %d passes over a caller's %zu-byte block, best read kernel %s\n", PASSES, n - 3, ds_bwprobe_best_kernel(b));
    ds_bwprobe_free(b);
    free(buf);
}

RUN_ALL()
