/* Host-limit probes for the benchmarks (see membench.h).  Each probe runs exactly like a kernel
 * call: its work is cut into 4 tasks per pool thread, claimed dynamically, and the whole region is
 * timed by the caller.  On a quiet host that is every thread streaming at once; on a busy one the
 * probe degrades the same way the kernels do, so their ratio still means something.  SIMD inner
 * loops use target attributes and are only called when CPUID allows them. */
#include "kernels/membench.h"
#include "kernels/kernels.h"
#include "base/threadpool.h"
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

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

__attribute__((target("avx2"))) static double sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    int64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a0);
    return (double)(l[0] + l[1] + l[2] + l[3]);
}

static double sum_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t s0 = 0, s1 = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) { s0 += q[i]; s1 += q[i + 1]; }
    return (double)(s0 + s1);
}

static void read_task(void *vctx, int t, int thread) {
    probe *p = vctx;
    size_t per = (p->n / (size_t)p->tasks) & ~(size_t)127;
    const uint8_t *base = (const uint8_t *)p->b + per * (size_t)t; /* b = this pass's slice */
    p->sink[t] = __builtin_cpu_supports("avx2") ? sum_avx2(base, per) : sum_scalar(base, per);
}

static probe *probe_new(void) {
    probe *p = ds_xcalloc(1, sizeof *p);
    p->threads = DS_MIN(ds_pool_threads(), 1024);
    p->tasks = 4 * p->threads;
    return p;
}

struct ds_bwprobe { probe *p; size_t bytes, pass; int next; };

ds_bwprobe *ds_bwprobe_new(size_t bytes, size_t pass_bytes) {
    ds_bwprobe *b = ds_xcalloc(1, sizeof *b);
    b->p = probe_new();
    b->bytes = bytes & ~(size_t)4095;
    b->pass = DS_MIN(b->bytes, DS_MAX(pass_bytes, (size_t)1 << 20)) & ~(size_t)4095;
    b->p->a = ds_amalloc(b->bytes);
    memset(b->p->a, 1, b->bytes); /* fault the pages in before timing */
    b->p->n = b->pass;
    return b;
}

double ds_bwprobe_pass(ds_bwprobe *b) {
    size_t slices = b->bytes / b->pass;
    /* rotate through the slices, as the kernel rows rotate through matrix copies */
    b->p->b = (uint8_t *)b->p->a + (size_t)(b->next++ % (int)slices) * b->pass;
    double secs = timed_region(b->p, read_task);
    size_t used = ((b->pass / (size_t)b->p->tasks) & ~(size_t)127) * (size_t)b->p->tasks;
    return secs > 0 ? (double)used / secs / 1e9 : 0;
}

void ds_bwprobe_free(ds_bwprobe *b) {
    if (!b) return;
    ds_afree(b->p->a);
    free(b->p);
    free(b);
}

double ds_bench_read_bw(size_t bytes, size_t pass_bytes, int reps, double min_secs) {
    ds_bwprobe *b = ds_bwprobe_new(bytes, pass_bytes);
    double best = 0, t_start = ds_now();
    for (int r = 0; r < reps || ds_now() - t_start < min_secs; r++) best = DS_MAX(best, ds_bwprobe_pass(b));
    ds_bwprobe_free(b);
    return best;
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
    p->a = ds_amalloc(elems * 8);
    p->b = ds_amalloc(elems * 8);
    p->c = ds_amalloc(elems * 8);
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
    ds_afree(p->a); ds_afree(p->b); ds_afree(p->c);
    free(p);
}

#define PEAK_ITERS 300000L /* ~1-3 ms per run: short runs, best of many, dodge scheduler noise */

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_vnni(void) {
    /* Eight independent VPDPBUSD chains (enough to cover its latency on every VNNI core). */
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (long it = 0; it < PEAK_ITERS / 8; it++) {
        a0 = _mm512_dpbusd_epi32(a0, u, s);
        a1 = _mm512_dpbusd_epi32(a1, u, s);
        a2 = _mm512_dpbusd_epi32(a2, u, s);
        a3 = _mm512_dpbusd_epi32(a3, u, s);
        a4 = _mm512_dpbusd_epi32(a4, u, s);
        a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s);
        a7 = _mm512_dpbusd_epi32(a7, u, s);
        __asm__ volatile("" : "+v"(u), "+v"(s));
    }
    __m512i t = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    int32_t out[16];
    _mm512_storeu_si512(out, t);
    __asm__ volatile("" : : "r"(out[0]) : "memory");
    return (double)(PEAK_ITERS / 8) * 8 * 64 * 2;
}

__attribute__((target("avx2"))) static double peak_avx2(void) {
    /* The fastest AVX2 int8 dot sequence: VPMADDUBSW (32 u8 x s8 products, pairs summed) with an
     * int16 VPADDW accumulate, as the W4A8 kernel runs it.  Six independent chains, each with its
     * own weight register made opaque to the compiler, so no product can be hoisted out of the
     * loop.  (The generic u8 x s8 -> int32 form needs a VPMADDWD too and is slower, so this is the
     * stricter limit.)  Named variables, not arrays, so everything stays in registers. */
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    __m256i u0 = _mm256_set1_epi8(3), u1 = _mm256_set1_epi8(4), u2 = _mm256_set1_epi8(5);
    __m256i u3 = _mm256_set1_epi8(6), u4 = _mm256_set1_epi8(7), u5 = _mm256_set1_epi8(8);
    __m256i s = _mm256_set1_epi8(-2);
    for (long it = 0; it < PEAK_ITERS / 6; it++) {
        a0 = _mm256_add_epi16(a0, _mm256_maddubs_epi16(u0, s));
        a1 = _mm256_add_epi16(a1, _mm256_maddubs_epi16(u1, s));
        a2 = _mm256_add_epi16(a2, _mm256_maddubs_epi16(u2, s));
        a3 = _mm256_add_epi16(a3, _mm256_maddubs_epi16(u3, s));
        a4 = _mm256_add_epi16(a4, _mm256_maddubs_epi16(u4, s));
        a5 = _mm256_add_epi16(a5, _mm256_maddubs_epi16(u5, s));
        __asm__ volatile("" : "+x"(u0), "+x"(u1), "+x"(u2), "+x"(u3), "+x"(u4), "+x"(u5), "+x"(s));
    }
    __m256i t = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                                 _mm256_add_epi16(a4, a5));
    int32_t out[8];
    _mm256_storeu_si256((__m256i *)out, t);
    __asm__ volatile("" : : "r"(out[0]) : "memory");
    return (double)(PEAK_ITERS / 6) * 6 * 32 * 2;
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

static void peak_task(void *vctx, int t, int thread) {
    probe *p = vctx;
    p->sink[t] = p->kind == 2 ? peak_vnni() : p->kind == 1 ? peak_avx2() : peak_scalar();
}

double ds_bench_int8_peak_once(const char **what) {
    probe p;
    memset(&p, 0, sizeof p);
    p.threads = DS_MIN(ds_pool_threads(), 1024);
    p.tasks = 4 * p.threads;
    const char *path = ds_kernels_active();
    p.kind = !strcmp(path, "avx512-vnni") ? 2 : !strcmp(path, "avx2") ? 1 : 0;
    if (what)
        *what = p.kind == 2 ? "vpdpbusd zmm" : p.kind == 1 ? "vpmaddubsw+vpaddw ymm" : "scalar int32 mul-add";
    double secs = timed_region(&p, peak_task);
    double ops = 0;
    for (int i = 0; i < p.tasks; i++) ops += p.sink[i];
    return ops / secs / 1e9;
}

double ds_bench_int8_peak(const char **what) {
    double best = 0;
    for (int r = 0; r < 40; r++) best = DS_MAX(best, ds_bench_int8_peak_once(what));
    return best;
}
