/* Host-limit probes for the benchmarks (see membench.h).  Each probe runs exactly like a kernel
 * call: its work is cut into 4 tasks per pool thread, claimed dynamically, and the whole region is
 * timed by the caller.  On a quiet host that is every thread streaming at once; on a busy one the
 * probe degrades the same way the kernels do, so their ratio still means something.  SIMD inner
 * loops use target attributes and are only called when CPUID allows them. */
#include "kernels/membench.h"
#include "kernels/kernels.h"
#include "base/hugemem.h"
#include "base/threadpool.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include <cpuid.h>

/* AVX-VNNI (VEX vpdpbusd) is CPUID leaf 7 sub-leaf 1, EAX bit 4; read it directly because not every
 * compiler's __builtin_cpu_supports knows the name. */
static int cpu_avxvnni(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 4) & 1;
}

typedef struct {
    int threads, tasks;       /* tasks = 4 per thread, claimed dynamically like the kernels' */
    void *a, *b, *c;
    size_t n;           /* bytes or elements, per probe */
    int kind;
    double sink[4096];
} probe;

/* Run one probe region; returns its wall time as seen by the caller (the whole region, never one
 * thread's share, so a task that ran serially after another cannot make a pass look faster). */
static double timed_region(probe *p, ds_task_fn fn) {
    double t0 = ds_now();
    ds_pool_run(p->tasks, fn, p);
    return ds_now() - t0;
}

/* Read kernels.  The limit is the best any of them reaches: one stream with few or many
 * accumulators, several interleaved streams (each stream gets its own hardware prefetcher),
 * software prefetch ahead, non-temporal loads, and the walk of the quantized GEMV itself: 4
 * neighbouring panels (80 KB apart in a [*, 5120] W8A8 matrix, so the streams share DRAM pages)
 * advancing one 64-byte line each per step with a prefetch 2 KiB ahead in each — on a host where
 * that walk beat every other probe, a W8A8 GEMV showed 104% of the limit.  The prefetching kernels
 * run twice, with the hint into L1 (T0) and into L2 (T1).  The few-row kernels now take their
 * panels from equal parts of the range (decision 181): each stream reads on sequentially, a line
 * per step; the "parts" probes walk the same way (with only the neighbour walks, the AVX2 W8A8
 * GEMV showed 106%), the AVX-512 ones also with the non-temporal hint those kernels use
 * (kern_internal.h, DS_Q_HINT; decision 195).  A probe weaker than the kernels it judges would
 * report kernels above 100%. */
enum { RK_AVX2_1S, RK_AVX2_PF_L2, RK_AVX512_1S, RK_AVX512_4S, RK_AVX512_8S, RK_AVX512_PF, RK_AVX512_PF_L2, RK_AVX512_NT,
       RK_AVX512_PANELS, RK_AVX512_PANELS_L2, RK_AVX512_HALF_PANELS, RK_AVX512_HALF_PANELS_L2, RK_AVX2_PANELS,
       RK_AVX2_HALF_PANELS, RK_AVX512_PARTS4_L2, RK_AVX512_PARTS6_L2, RK_AVX2_PARTS4, RK_AVX512_PARTS4_NTA,
       RK_AVX512_PARTS6_NTA, RK_COUNT };
static const char *const k_read_names[RK_COUNT] = {"avx2 1 stream", "avx2 4 streams, prefetch 2 KiB to L2",
                                                   "avx512 1 stream x8 acc", "avx512 4 streams", "avx512 8 streams",
                                                   "avx512 prefetch 2 KiB", "avx512 prefetch 2 KiB to L2",
                                                   "avx512 non-temporal", "avx512 4 panels of 80 KiB, prefetch 2 KiB",
                                                   "avx512 4 panels of 80 KiB, prefetch 2 KiB to L2",
                                                   "avx512 4 panels of 40 KiB, prefetch 2 KiB",
                                                   "avx512 4 panels of 40 KiB, prefetch 2 KiB to L2",
                                                   "avx2 4 panels of 80 KiB, prefetch 2 KiB",
                                                   "avx2 4 panels of 40 KiB, prefetch 2 KiB",
                                                   "avx512 4 parts side by side, a line each, prefetch 2 KiB to L2",
                                                   "avx512 6 parts side by side, a line each, prefetch 2 KiB to L2",
                                                   "avx2 4 parts side by side, a line each, prefetch 2 KiB",
                                                   "avx512 4 parts side by side, a line each, prefetchnta 2 KiB",
                                                   "avx512 6 parts side by side, a line each, prefetchnta 2 KiB"};
enum { PANEL_BYTES = 80 << 10, PANEL_PREFETCH = 2048 };

__attribute__((target("avx2"))) static double sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t l[4];   /* unsigned: the sums of hashed contents wrap, by design */
    _mm256_storeu_si256((__m256i *)l, a0);
    return (double)(l[0] + l[1] + l[2] + l[3]);
}

/* 4 interleaved streams, 128 bytes per stream per round, each prefetched 2 KiB ahead into L2. */
__attribute__((target("avx2"))) static double sum_avx2_pf_l2(const uint8_t *p, size_t n) {
    __m256i a[4];
    for (int k = 0; k < 4; k++) a[k] = _mm256_setzero_si256();
    const size_t len = (n / 4) & ~(size_t)127;
    for (size_t i = 0; i < len; i += 128)
        for (int s = 0; s < 4; s++) {
            const uint8_t *q = p + (size_t)s * len + i;
            _mm_prefetch((const char *)(q + 2048), _MM_HINT_T1);
            _mm_prefetch((const char *)(q + 2048 + 64), _MM_HINT_T1);
            for (int k = 0; k < 4; k++) a[k] = _mm256_add_epi64(a[k], _mm256_load_si256((const __m256i *)(q + 32 * k)));
        }
    a[0] = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a[0]);
    return (double)(l[0] + l[1] + l[2] + l[3]);
}

/* `streams` interleaved streams over [p, p+n) (each n/streams bytes), 512 bytes per stream per
 * round into 8 accumulators; prefetch: bytes ahead (0 = none), into L2 when l2; nt: non-temporal
 * loads. */
__attribute__((target("avx512f,avx512bw"))) static double sum_avx512(const uint8_t *p, size_t n, int streams,
                                                                      size_t prefetch, int l2, int nt) {
    __m512i a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm512_setzero_si512();
    const size_t len = (n / (size_t)streams) & ~(size_t)511;
    for (size_t i = 0; i < len; i += 512)
        for (int s = 0; s < streams; s++) {
            const uint8_t *q = p + (size_t)s * len + i;
            if (prefetch && l2) {
                _mm_prefetch((const char *)(q + prefetch), _MM_HINT_T1);
                _mm_prefetch((const char *)(q + prefetch + 256), _MM_HINT_T1);
            } else if (prefetch) {
                _mm_prefetch((const char *)(q + prefetch), _MM_HINT_T0);
                _mm_prefetch((const char *)(q + prefetch + 256), _MM_HINT_T0);
            }
            for (int k = 0; k < 8; k++) {
                __m512i v = nt ? _mm512_stream_load_si512((void *)(q + 64 * k)) : _mm512_load_si512((const void *)(q + 64 * k));
                a[k] = _mm512_add_epi64(a[k], v);
            }
        }
    for (int k = 1; k < 8; k++) a[0] = _mm512_add_epi64(a[0], a[k]);
    uint64_t l[8], t = 0;   /* unsigned (GCC's _mm512_reduce_add_epi64 adds signed: UB on wrap) */
    _mm512_storeu_si512((void *)l, a[0]);
    for (int k = 0; k < 8; k++) t += l[k];
    return (double)t;
}

/* Groups of 4 consecutive panels of `panel` bytes (PANEL_BYTES: W8A8's 16 rows of 5,120 inputs; half
 * that: W4A8's, whose 16 rows of 4-bit codes walk 40 KiB apart), side by side one line per panel
 * per step; l2: the prefetch hint into L2 instead of L1. */
__attribute__((target("avx512f,avx512bw"))) static double sum_panels(const uint8_t *p, size_t n, size_t panel, int l2) {
    __m512i a[4];
    for (int k = 0; k < 4; k++) a[k] = _mm512_setzero_si512();
    const size_t group = 4 * panel;
    for (size_t g = 0; g + group <= n; g += group)
        for (size_t i = 0; i < panel; i += 64)
            for (int k = 0; k < 4; k++) {
                const uint8_t *q = p + g + (size_t)k * panel + i;
                if (l2) _mm_prefetch((const char *)(q + PANEL_PREFETCH), _MM_HINT_T1);
                else _mm_prefetch((const char *)(q + PANEL_PREFETCH), _MM_HINT_T0);
                a[k] = _mm512_add_epi64(a[k], _mm512_load_si512((const void *)q));
            }
    a[0] = _mm512_add_epi64(_mm512_add_epi64(a[0], a[1]), _mm512_add_epi64(a[2], a[3]));
    uint64_t l[8], t = 0;
    _mm512_storeu_si512((void *)l, a[0]);
    for (int k = 0; k < 8; k++) t += l[k];
    return (double)t;
}

/* The AVX2 int8 kernels' one-row walk (decision 180): 4 panels side by side, one line each per step
 * (two 32-byte loads), prefetched 2 KiB ahead into L1 as those kernels do. */
__attribute__((target("avx2"))) static double sum_panels_avx2(const uint8_t *p, size_t n, size_t panel) {
    __m256i a[4];
    for (int k = 0; k < 4; k++) a[k] = _mm256_setzero_si256();
    const size_t group = 4 * panel;
    for (size_t g = 0; g + group <= n; g += group)
        for (size_t i = 0; i < panel; i += 64)
            for (int k = 0; k < 4; k++) {
                const uint8_t *q = p + g + (size_t)k * panel + i;
                _mm_prefetch((const char *)(q + PANEL_PREFETCH), _MM_HINT_T0);
                a[k] = _mm256_add_epi64(a[k], _mm256_add_epi64(_mm256_load_si256((const __m256i *)q),
                                                               _mm256_load_si256((const __m256i *)(q + 32))));
            }
    a[0] = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a[0]);
    return (double)(l[0] + l[1] + l[2] + l[3]);
}

/* `parts` equal parts of [p, p+n) side by side, one 64-byte line of each per step, each prefetched
 * 2 KiB ahead (hint: 0 into L1, 1 into L2, 2 non-temporal): the walk of the few-row kernels over a
 * range of panels.  The parts
 * loop is unrolled, so each stream has its own load instruction, as in the kernels: with one load
 * walking all streams in turn, the CPU's per-instruction stride prefetcher saw no stride and this
 * walk read at 0.8x the kernel it was meant to bound. */
#define SUM_PARTS_BODY(VEC, ZERO, LOAD, ADD)                                                       \
    VEC a[6];                                                                                    \
    for (int k = 0; k < 6; k++) a[k] = ZERO;                                                     \
    const size_t len = (n / (size_t)parts) & ~(size_t)63;                                        \
    for (size_t i = 0; i < len; i += 64) {                                                       \
        _Pragma("GCC unroll 6")                                                                  \
        for (int k = 0; k < parts; k++) {                                                        \
            const uint8_t *q = p + (size_t)k * len + i;                                          \
            if (hint == 2) _mm_prefetch((const char *)(q + PANEL_PREFETCH), _MM_HINT_NTA);       \
            else if (hint == 1) _mm_prefetch((const char *)(q + PANEL_PREFETCH), _MM_HINT_T1);   \
            else _mm_prefetch((const char *)(q + PANEL_PREFETCH), _MM_HINT_T0);                  \
            a[k] = ADD(a[k], LOAD(q));                                                           \
        }                                                                                        \
    }                                                                                            \
    for (int k = 1; k < 6; k++) a[0] = ADD(a[0], a[k])
#define PARTS_AI __attribute__((always_inline)) static inline
PARTS_AI __attribute__((target("avx512f,avx512bw"))) double sum_parts(const uint8_t *p, size_t n, const int parts,
                                                                       const int hint) {
#define LOAD512(q) _mm512_load_si512((const void *)(q))
    SUM_PARTS_BODY(__m512i, _mm512_setzero_si512(), LOAD512, _mm512_add_epi64);
    uint64_t l[8], t = 0;
    _mm512_storeu_si512((void *)l, a[0]);
    for (int k = 0; k < 8; k++) t += l[k];
    return (double)t;
}
__attribute__((target("avx512f,avx512bw"))) static double sum_parts4_l2(const uint8_t *p, size_t n) {
    return sum_parts(p, n, 4, 1);
}
__attribute__((target("avx512f,avx512bw"))) static double sum_parts6_l2(const uint8_t *p, size_t n) {
    return sum_parts(p, n, 6, 1);
}
__attribute__((target("avx512f,avx512bw"))) static double sum_parts4_nta(const uint8_t *p, size_t n) {
    return sum_parts(p, n, 4, 2);
}
__attribute__((target("avx512f,avx512bw"))) static double sum_parts6_nta(const uint8_t *p, size_t n) {
    return sum_parts(p, n, 6, 2);
}
__attribute__((target("avx2"))) static double sum_parts4_avx2(const uint8_t *p, size_t n) {
    const int parts = 4, hint = 0;
#define LOAD256X2(q) _mm256_add_epi64(_mm256_load_si256((const __m256i *)(q)), _mm256_load_si256((const __m256i *)((q) + 32)))
    SUM_PARTS_BODY(__m256i, _mm256_setzero_si256(), LOAD256X2, _mm256_add_epi64);
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a[0]);
    return (double)(l[0] + l[1] + l[2] + l[3]);
}

static double sum_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t s0 = 0, s1 = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) { s0 += q[i]; s1 += q[i + 1]; }
    return (double)(s0 + s1);
}

static int read_kind_runs(int kind) {
    if (kind == RK_AVX2_1S || kind == RK_AVX2_PF_L2 || kind == RK_AVX2_PANELS || kind == RK_AVX2_HALF_PANELS ||
        kind == RK_AVX2_PARTS4)
        return __builtin_cpu_supports("avx2");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

/* Bytes a read kernel touches of an n-byte slice (whole 512-byte rounds per stream). */
static size_t read_kind_bytes(int kind, size_t n) {
    int streams = kind == RK_AVX512_4S || kind == RK_AVX512_PF || kind == RK_AVX512_PF_L2 || kind == RK_AVX512_NT ? 4
                  : kind == RK_AVX512_8S ? 8 : 1;
    if (kind == RK_AVX2_1S) return n & ~(size_t)127;
    if (kind == RK_AVX512_PARTS4_L2 || kind == RK_AVX512_PARTS6_L2 || kind == RK_AVX2_PARTS4 ||
        kind == RK_AVX512_PARTS4_NTA || kind == RK_AVX512_PARTS6_NTA) {
        const size_t parts = kind == RK_AVX512_PARTS6_L2 || kind == RK_AVX512_PARTS6_NTA ? 6 : 4;
        return ((n / parts) & ~(size_t)63) * parts;
    }
    if (kind == RK_AVX2_PF_L2) return ((n / 4) & ~(size_t)127) * 4;
    if (kind == RK_AVX512_PANELS || kind == RK_AVX512_PANELS_L2 || kind == RK_AVX2_PANELS)
        return n / (4 * (size_t)PANEL_BYTES) * (4 * (size_t)PANEL_BYTES);
    if (kind == RK_AVX512_HALF_PANELS || kind == RK_AVX512_HALF_PANELS_L2 || kind == RK_AVX2_HALF_PANELS)
        return n / (2 * (size_t)PANEL_BYTES) * (2 * (size_t)PANEL_BYTES);
    return ((n / (size_t)streams) & ~(size_t)511) * (size_t)streams;
}

static void read_task(void *vctx, int t, int thread) {
    probe *p = vctx;
    size_t per = (p->n / (size_t)p->tasks) & ~(size_t)511;
    const uint8_t *base = (const uint8_t *)p->b + per * (size_t)t; /* b = this pass's slice */
    switch (p->kind) {
    case RK_AVX2_1S: p->sink[t] = sum_avx2(base, per); break;
    case RK_AVX2_PF_L2: p->sink[t] = sum_avx2_pf_l2(base, per); break;
    case RK_AVX512_1S: p->sink[t] = sum_avx512(base, per, 1, 0, 0, 0); break;
    case RK_AVX512_4S: p->sink[t] = sum_avx512(base, per, 4, 0, 0, 0); break;
    case RK_AVX512_8S: p->sink[t] = sum_avx512(base, per, 8, 0, 0, 0); break;
    case RK_AVX512_PF: p->sink[t] = sum_avx512(base, per, 4, 2048, 0, 0); break;
    case RK_AVX512_PF_L2: p->sink[t] = sum_avx512(base, per, 4, 2048, 1, 0); break;
    case RK_AVX512_NT: p->sink[t] = sum_avx512(base, per, 4, 0, 0, 1); break;
    case RK_AVX512_PANELS: p->sink[t] = sum_panels(base, per, PANEL_BYTES, 0); break;
    case RK_AVX512_PANELS_L2: p->sink[t] = sum_panels(base, per, PANEL_BYTES, 1); break;
    case RK_AVX512_HALF_PANELS: p->sink[t] = sum_panels(base, per, PANEL_BYTES / 2, 0); break;
    case RK_AVX512_HALF_PANELS_L2: p->sink[t] = sum_panels(base, per, PANEL_BYTES / 2, 1); break;
    case RK_AVX2_PANELS: p->sink[t] = sum_panels_avx2(base, per, PANEL_BYTES); break;
    case RK_AVX2_HALF_PANELS: p->sink[t] = sum_panels_avx2(base, per, PANEL_BYTES / 2); break;
    case RK_AVX512_PARTS4_L2: p->sink[t] = sum_parts4_l2(base, per); break;
    case RK_AVX512_PARTS6_L2: p->sink[t] = sum_parts6_l2(base, per); break;
    case RK_AVX2_PARTS4: p->sink[t] = sum_parts4_avx2(base, per); break;
    case RK_AVX512_PARTS4_NTA: p->sink[t] = sum_parts4_nta(base, per); break;
    case RK_AVX512_PARTS6_NTA: p->sink[t] = sum_parts6_nta(base, per); break;
    default: p->sink[t] = sum_scalar(base, per); break;
    }
}

static probe *probe_new(void) {
    probe *p = ds_xcalloc(1, sizeof *p);
    p->threads = DS_MIN(ds_pool_threads(), 1024);
    p->tasks = 4 * p->threads;
    return p;
}

struct ds_bwprobe { probe *p; size_t bytes, pass; int next, kind, best_kind; double best; };

/* The largest cache this host reports (sysfs cache/index*, every level; 0 if none is listed, as
 * in VMs that hide the topology). */
size_t ds_bench_llc_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (fgets(buf, sizeof buf, f)) {
            char *end;
            unsigned long long v = strtoull(buf, &end, 10);
            size_t mul = *end == 'K' ? 1024u : *end == 'M' ? (size_t)1 << 20 : *end == 'G' ? (size_t)1 << 30 : 1u;
            if ((size_t)v * mul > best) best = (size_t)v * mul;
        }
        fclose(f);
    }
    return best;
}

size_t ds_bench_read_buffer_bytes(size_t bytes) {
    size_t floor = DS_MAX((size_t)DS_BW_MIN_BUFFER, 8 * ds_bench_llc_bytes());
    return DS_MAX(bytes, floor) & ~(size_t)4095;
}

/* Distinct contents on every page (a mixed hash of the word's index): a buffer of identical pages
 * can be merged into one physical page by same-page merging in the host of a VM (KSM), and then
 * every "memory" read hits the cache.  Written by the pool threads, so it is also the first touch
 * (the pages are faulted in before anything is timed). */
static void fill_task(void *vctx, int t, int thread) {
    probe *p = vctx;
    (void)thread;
    size_t words = p->n / 8, per = (words + (size_t)p->tasks - 1) / (size_t)p->tasks;
    size_t i0 = per * (size_t)t, i1 = DS_MIN(words, i0 + per);
    uint64_t *w = p->a;
    for (size_t i = i0; i < i1; i++) {
        uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
        w[i] = z ^ (z >> 29);
    }
}

ds_bwprobe *ds_bwprobe_new(size_t bytes, size_t pass_bytes) {
    ds_bwprobe *b = ds_xcalloc(1, sizeof *b);
    b->p = probe_new();
    b->bytes = ds_bench_read_buffer_bytes(bytes);
    b->pass = DS_MIN(b->bytes, DS_MAX(pass_bytes, (size_t)1 << 20)) & ~(size_t)4095;
    b->p->a = ds_huge_alloc(b->bytes);   /* 2 MiB pages, as the weights it judges */
    b->p->n = b->bytes;
    ds_pool_run(b->p->tasks, fill_task, b->p);
    b->p->n = b->pass;
    b->best_kind = -1;
    return b;
}

/* One timed pass of the next read kernel (see ds_bwprobe_pass) over `bytes` at `buf`. */
static double bwprobe_pass_at(ds_bwprobe *b, const void *buf, size_t bytes) {
    b->next++;
    b->p->b = (void *)buf;
    b->p->n = bytes;
    /* after two passes of every read kernel, 3 passes in 4 run the best one so far (the 4th keeps
     * trying the others, so a winner picked on a noisy sample can be overtaken): on a shared host
     * the best kernel's best sample must get about as many chances at a quiet moment as the kernel
     * row it judges, one sample per call (with every other pass on it, a W8A8 GEMV showed 101%;
     * with 7 in 8, a W4A8 GEMV 112% of a winner picked minutes earlier) */
    int kind = (b->next > 2 * RK_COUNT && b->next % 4 != 0 && b->best_kind >= 0) ? b->best_kind : -1;
    for (int tries = 0; tries < RK_COUNT && kind < 0; tries++) {
        int k = b->kind++ % RK_COUNT;
        if (read_kind_runs(k)) kind = k;
    }
    b->p->kind = kind;
    double secs = timed_region(b->p, read_task);
    size_t per = (bytes / (size_t)b->p->tasks) & ~(size_t)511;
    size_t used = (kind < 0 ? per : read_kind_bytes(kind, per)) * (size_t)b->p->tasks;
    double gbs = secs > 0 ? (double)used / secs / 1e9 : 0;
    if (gbs > b->best) { b->best = gbs; b->best_kind = kind; }
    return gbs;
}

double ds_bwprobe_pass(ds_bwprobe *b) {
    /* rotate through the slices, as the kernel rows rotate through matrix copies, and through
     * the read kernels this CPU runs (scalar if none) */
    size_t slices = b->bytes / b->pass;
    return bwprobe_pass_at(b, (uint8_t *)b->p->a + (size_t)(b->next % (int)slices) * b->pass, b->pass);
}

double ds_bwprobe_pass_over(ds_bwprobe *b, const void *buf, size_t bytes) {
    const uintptr_t start = ((uintptr_t)buf + 63) & ~(uintptr_t)63;   /* the read kernels load aligned */
    const size_t skip = start - (uintptr_t)buf;
    return bytes > skip ? bwprobe_pass_at(b, (const void *)start, bytes - skip) : 0.0;
}

const void *ds_bwprobe_buffer(const ds_bwprobe *b, size_t *bytes) {
    if (bytes) *bytes = b->bytes;
    return b->p->a;
}

const char *ds_bwprobe_best_kernel(const ds_bwprobe *b) {
    return b->best_kind < 0 ? "scalar" : k_read_names[b->best_kind];
}

void ds_bwprobe_free(ds_bwprobe *b) {
    if (!b) return;
    ds_huge_free(b->p->a);
    free(b->p);
    free(b);
}

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ds_bench_read_bw_stats(size_t bytes, size_t pass_bytes, int reps, double min_secs, ds_bw_stats *st) {
    enum { MAX_PASSES = 4096 };
    ds_bwprobe *b = ds_bwprobe_new(bytes, pass_bytes);
    double *g = ds_xmalloc(sizeof(double) * MAX_PASSES), t_start = ds_now();
    int n = 0;
    reps = DS_MAX(reps, 3 * RK_COUNT); /* every read kernel sampled several times */
    for (int r = 0; (r < reps || ds_now() - t_start < min_secs) && n < MAX_PASSES; r++) g[n++] = ds_bwprobe_pass(b);
    qsort(g, (size_t)n, sizeof(double), cmp_dbl);
    memset(st, 0, sizeof *st);
    st->passes = n;
    st->worst = g[0];
    st->median = n % 2 ? g[n / 2] : 0.5 * (g[n / 2 - 1] + g[n / 2]);
    st->best = g[n - 1];
    st->buffer_bytes = b->bytes;
    st->pass_bytes = b->pass;
    snprintf(st->kernel, sizeof st->kernel, "%s", ds_bwprobe_best_kernel(b));
    free(g);
    ds_bwprobe_free(b);
}

double ds_bench_read_bw_what(size_t bytes, size_t pass_bytes, int reps, double min_secs, const char **what) {
    static char name[64];
    ds_bw_stats st;
    ds_bench_read_bw_stats(bytes, pass_bytes, reps, min_secs, &st);
    snprintf(name, sizeof name, "%s", st.kernel);
    if (what) *what = name;
    return st.best;
}

double ds_bench_read_bw(size_t bytes, size_t pass_bytes, int reps, double min_secs) {
    return ds_bench_read_bw_what(bytes, pass_bytes, reps, min_secs, NULL);
}

static void stream_task(void *vctx, int t, int thread) {
    probe *p = vctx;
    size_t per = p->n / (size_t)p->tasks, i0 = per * (size_t)t, i1 = i0 + per;
    double *a = p->a, *b = p->b, *c = p->c;
    if (p->kind == 0) memcpy(c + i0, a + i0, per * sizeof(double));
    else
        for (size_t i = i0; i < i1; i++) a[i] = b[i] + 3.0 * c[i];
}

void ds_bench_stream(size_t elems, int reps, double *copy_gbs, double *triad_gbs) {
    probe *p = probe_new();
    p->n = elems;
    p->a = ds_huge_alloc(elems * 8);
    p->b = ds_huge_alloc(elems * 8);
    p->c = ds_huge_alloc(elems * 8);
    for (size_t i = 0; i < elems; i++) { ((double *)p->a)[i] = 1; ((double *)p->b)[i] = 2; ((double *)p->c)[i] = 0.5; }
    size_t used = elems / (size_t)p->tasks * (size_t)p->tasks;
    for (int kind = 0; kind < 2; kind++) {
        double best = 0;
        p->kind = kind;
        for (int r = 0; r < reps; r++) {
            double secs = timed_region(p, stream_task), bytes = (double)used * (kind == 0 ? 16.0 : 24.0);
            double gbs = secs > 0 ? bytes / secs / 1e9 : 0;
            if (gbs > best) best = gbs;
        }
        if (kind == 0) *copy_gbs = best;
        else *triad_gbs = best;
    }
    ds_huge_free(p->a); ds_huge_free(p->b); ds_huge_free(p->c);
    free(p);
}

/* ~80 us per task on a VNNI zmm core: short runs, best of many, dodge scheduler noise. */
#define PEAK_ITERS 600000L

/* Peak probes: N independent accumulator chains of one instruction (N = 8 / 16: enough to cover
 * latency x throughput on every core we know; the best of both is taken), operands made opaque to
 * the compiler each round so nothing is hoisted.  Each returns the operations it did (1 multiply-
 * add = 2 ops). */
#define PEAK_BODY(N, STEP, ...)                                                                   \
    for (long it = 0; it < PEAK_ITERS / (N); it++) {                                              \
        _Pragma("GCC unroll 16") for (int k = 0; k < (N); k++) STEP;                              \
        __asm__ volatile("" : __VA_ARGS__);                                                       \
    }

/* VPDPBUSD zmm in inline asm: N accumulators, each its own register and its own dependency
 * chain, operands in two more registers.  Written out by hand because GCC 12 compiles the intrinsic
 * form of this loop with a register copy per instruction and stack spills (measured at half the
 * instruction's throughput on a Zen 5 host): a probe weaker than the kernels it judges would let
 * a kernel show more than 100% of "peak".  12 and 24 chains cover latency x throughput on every
 * core we know (4-5 cycles x 2 per cycle); the best of both is the limit. */
#define DPB(r) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define DPB12 DPB(0) DPB(1) DPB(2) DPB(3) DPB(4) DPB(5) DPB(6) DPB(7) DPB(8) DPB(9) DPB(10) DPB(11)
#define DPB24 DPB12 DPB(12) DPB(13) DPB(14) DPB(15) DPB(16) DPB(17) DPB(18) DPB(19) DPB(20) DPB(21) DPB(22) DPB(23)
#define ZMM_CLOBBER12 "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"
#define ZMM_CLOBBER24 ZMM_CLOBBER12, "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", \
                      "xmm20", "xmm21", "xmm22", "xmm23"
#define VNNI_ZMM(N)                                                                               \
    __attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_vnni##N(void) {     \
        __asm__ volatile("vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"                        \
                         "vpabsb %%zmm30, %%zmm31" ::: "xmm30", "xmm31");                         \
        for (long it = 0; it < PEAK_ITERS / (N); it++) __asm__ volatile(DPB##N ::: ZMM_CLOBBER##N); \
        return (double)(PEAK_ITERS / (N)) * (N) * 64 * 2;                                         \
    }
VNNI_ZMM(12)
VNNI_ZMM(24)

/* AVX-VNNI (VEX vpdpbusd on ymm): the int8 limit of an AVX2-path CPU that has it.  12 chains. */
#define VDPB(r) "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm" #r "\n\t"
__attribute__((target("avx2,avxvnni"))) static double peak_avxvnni(void) {
    __asm__ volatile("vpcmpeqb %%ymm14, %%ymm14, %%ymm14\n\tvpabsb %%ymm14, %%ymm15" ::: "xmm14", "xmm15");
    for (long it = 0; it < PEAK_ITERS / 12; it++)
        __asm__ volatile(VDPB(0) VDPB(1) VDPB(2) VDPB(3) VDPB(4) VDPB(5) VDPB(6) VDPB(7) VDPB(8) VDPB(9) VDPB(10)
                         VDPB(11) ::: ZMM_CLOBBER12);
    return (double)(PEAK_ITERS / 12) * 12 * 32 * 2;
}

/* The fastest AVX2 int8 dot sequence: VPMADDUBSW (32 u8 x s8 products, pairs summed) with an int16
 * VPADDW accumulate, as the W4A8 kernel runs it (the u8 x s8 -> int32 form needs a VPMADDWD too and
 * is slower, so this is the stricter limit).  12 chains, in asm: the intrinsic form let the
 * compiler compute the loop-invariant product once per round for all 12 adds, which overstated
 * this limit 12-fold in the instruction count. */
#define MADD(r) "vpmaddubsw %%ymm15, %%ymm14, %%ymm13\n\tvpaddw %%ymm13, %%ymm" #r ", %%ymm" #r "\n\t"
__attribute__((target("avx2"))) static double peak_avx2(void) {
    __asm__ volatile("vpcmpeqb %%ymm14, %%ymm14, %%ymm14\n\tvpabsb %%ymm14, %%ymm15" ::: "xmm14", "xmm15");
    for (long it = 0; it < PEAK_ITERS / 12; it++)
        __asm__ volatile(MADD(0) MADD(1) MADD(2) MADD(3) MADD(4) MADD(5) MADD(6) MADD(7) MADD(8) MADD(9) MADD(10)
                         MADD(11) ::: ZMM_CLOBBER12, "xmm13");
    return (double)(PEAK_ITERS / 12) * 12 * 32 * 2;
}

/* fp32 FMA peaks and the vdpbf16ps peak (32 bf16 multiply-adds per instruction), for the fast
 * float linears; in asm for the reason given at VNNI_ZMM (operands are zero: no subnormals). */
#define FMAZ(r) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define FMAZ16 FMAZ(0) FMAZ(1) FMAZ(2) FMAZ(3) FMAZ(4) FMAZ(5) FMAZ(6) FMAZ(7) FMAZ(8) FMAZ(9) FMAZ(10) FMAZ(11) \
               FMAZ(12) FMAZ(13) FMAZ(14) FMAZ(15)
#define DPBF(r) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
#define DPBF16X DPBF(0) DPBF(1) DPBF(2) DPBF(3) DPBF(4) DPBF(5) DPBF(6) DPBF(7) DPBF(8) DPBF(9) DPBF(10) DPBF(11) \
                DPBF(12) DPBF(13) DPBF(14) DPBF(15)
#define FMAY(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r "\n\t"
#define ZMM_CLOBBER16 ZMM_CLOBBER12, "xmm12", "xmm13", "xmm14", "xmm15"
#define ZERO_ZMM3031 __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31" ::: "xmm30", "xmm31")

__attribute__((target("avx512f"))) static double peak_fma_zmm(void) {
    ZERO_ZMM3031;
    for (long it = 0; it < PEAK_ITERS / 16; it++) __asm__ volatile(FMAZ16 ::: ZMM_CLOBBER16);
    return (double)(PEAK_ITERS / 16) * 16 * 16 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16_zmm(void) {
    ZERO_ZMM3031;
    for (long it = 0; it < PEAK_ITERS / 16; it++) __asm__ volatile(DPBF16X ::: ZMM_CLOBBER16);
    return (double)(PEAK_ITERS / 16) * 16 * 32 * 2;
}

__attribute__((target("avx2,fma"))) static double peak_fma_ymm(void) {
    __asm__ volatile("vpxor %%ymm14, %%ymm14, %%ymm14\n\tvpxor %%ymm15, %%ymm15, %%ymm15" ::: "xmm14", "xmm15");
    for (long it = 0; it < PEAK_ITERS / 12; it++)
        __asm__ volatile(FMAY(0) FMAY(1) FMAY(2) FMAY(3) FMAY(4) FMAY(5) FMAY(6) FMAY(7) FMAY(8) FMAY(9) FMAY(10)
                         FMAY(11) ::: ZMM_CLOBBER12);
    return (double)(PEAK_ITERS / 12) * 12 * 8 * 2;
}

static double peak_scalar(void) {
    volatile int32_t sink;
    int32_t acc[4] = {0, 0, 0, 0};
    int8_t x = 3, w = -2;
    for (long it = 0; it < PEAK_ITERS / 4; it++) {
        for (int i = 0; i < 4; i++) acc[i] += (int32_t)x * w;
        __asm__ volatile("" : "+r"(x), "+r"(w));
    }
    sink = acc[0] + acc[1] + acc[2] + acc[3];
    (void)sink;
    return (double)(PEAK_ITERS / 4) * 4 * 2;
}

enum { PK_SCALAR, PK_AVX2, PK_AVXVNNI, PK_VNNI12, PK_VNNI24, PK_FMA_YMM, PK_FMA_ZMM, PK_DPBF16 };
static const char *const k_peak_names[] = {"scalar int32 mul-add", "vpmaddubsw+vpaddw ymm", "vpdpbusd ymm (avx-vnni)",
                                           "vpdpbusd zmm", "vpdpbusd zmm", "vfmadd ymm fp32",
                                           "vfmadd zmm fp32", "vdpbf16ps zmm"};

/* Each task times itself: the limit is what one core does when it runs, times the pool's threads
 * (the cores are alike).  Timing the whole region instead made the probe as weak as the slowest
 * wake-up: on a busy host the second thread often started after the first had run every task,
 * and a "2-thread peak" was one core's, below what the kernels reach. */
static void peak_task(void *vctx, int t, int thread) {
    probe *p = vctx;
    double ops, t0 = ds_now();
    switch (p->kind) {
    case PK_AVX2: ops = peak_avx2(); break;
    case PK_AVXVNNI: ops = peak_avxvnni(); break;
    case PK_VNNI12: ops = peak_vnni12(); break;
    case PK_VNNI24: ops = peak_vnni24(); break;
    case PK_FMA_YMM: ops = peak_fma_ymm(); break;
    case PK_FMA_ZMM: ops = peak_fma_zmm(); break;
    case PK_DPBF16: ops = peak_dpbf16_zmm(); break;
    default: ops = peak_scalar(); break;
    }
    double secs = ds_now() - t0;
    p->sink[t] = secs > 0 ? ops / secs : 0;
}

static double peak_run(int kind) {
    probe p;
    memset(&p, 0, sizeof p);
    p.threads = DS_MIN(ds_pool_threads(), 1024);
    p.tasks = 4 * p.threads;
    p.kind = kind;
    ds_pool_run(p.tasks, peak_task, &p);
    double best = 0;
    for (int i = 0; i < p.tasks; i++) best = DS_MAX(best, p.sink[i]);
    return best * p.threads / 1e9;
}

/* int8 candidates of the active path: the instruction its kernels use, plus AVX-VNNI where an
 * AVX2-path CPU has it (a faster int8 unit than the kernels use is still this machine's limit). */
static int int8_kinds(int kinds[3]) {
    const char *path = ds_kernels_active();
    if (!strcmp(path, "avx512-vnni")) { kinds[0] = PK_VNNI12; kinds[1] = PK_VNNI24; return 2; }
    if (!strcmp(path, "avx2")) {
        kinds[0] = PK_AVX2;
        if (cpu_avxvnni()) { kinds[1] = PK_AVXVNNI; return 2; }
        return 1;
    }
    kinds[0] = PK_SCALAR;
    return 1;
}

static int g_peak_turn;

double ds_bench_int8_peak_once(const char **what) {
    int kinds[3], nk = int8_kinds(kinds);
    int kind = kinds[g_peak_turn++ % nk];
    if (what) *what = k_peak_names[kinds[nk - 1]];
    return peak_run(kind);
}

double ds_bench_int8_peak(const char **what) {
    double best = 0;
    for (int r = 0; r < 40; r++) best = DS_MAX(best, ds_bench_int8_peak_once(what));
    return best;
}

double ds_bench_float_peak_once(int bf16, const char **what) {
    const char *path = ds_kernels_active();
    int kind = PK_SCALAR;
    if (!strcmp(path, "avx512-vnni")) kind = bf16 && __builtin_cpu_supports("avx512bf16") ? PK_DPBF16 : PK_FMA_ZMM;
    else if (!strcmp(path, "avx2")) kind = PK_FMA_YMM;
    if (what) *what = kind == PK_SCALAR ? "scalar" : k_peak_names[kind];
    return kind == PK_SCALAR ? peak_run(PK_SCALAR) : peak_run(kind);
}

double ds_bench_float_peak(int bf16, const char **what) {
    double best = 0;
    for (int r = 0; r < 40; r++) best = DS_MAX(best, ds_bench_float_peak_once(bf16, what));
    return best;
}
