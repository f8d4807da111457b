/* Kernel path selection and the threaded drivers behind ds_linear_forward*.
 *
 * Why here and not in each ISA file: the parts that decide *what* runs where (path choice, lazy
 * repack, activation preparation, splitting work over the pool) are the same for every path, and
 * keeping them in one place means a SIMD file contains only arithmetic.  Work is split by output
 * panels (16 rows) and, when there are fewer panels than threads, by activation rows; every
 * output is produced whole by one task, so results never depend on the split.
 * Path choice: "auto" takes AVX-512 VNNI if CPUID reports it, else AVX2+FMA, else the scalar
 * reference, and says why.  An explicit path the CPU cannot run is an error (PITFALLS §A.1).
 * The first forward of each family after a selection logs "kernel <family>: <path> ENGAGED". */
#include "kernels/kern_official.h"
#include "base/hugemem.h"
#include "base/threadpool.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

static const ds_kern_ops *g_ops;      /* NULL = scalar reference */
static int g_resolved;
static char g_reason[160] = "not selected yet";
static atomic_int g_announced[8];     /* per ds_lin_fmt, then the fast-tier float families */
static atomic_int g_announced_q;
static _Atomic uint64_t g_weight_bytes;
static _Atomic uint64_t g_macs;
static _Atomic size_t g_packed_bytes;

static int cpu_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
static int cpu_avx512vnni(void) {
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

static int cpu_avx512bf16(void) { return cpu_avx512vnni() && __builtin_cpu_supports("avx512bf16"); }
static int g_bf16dot_allowed = 1;
static int g_bf16dot;                 /* vdpbf16ps in use for fast BF16 linears */

int ds_kernels_allow_bf16dot(int allow) {
    int prev = g_bf16dot_allowed;
    g_bf16dot_allowed = allow;
    return prev;
}

int ds_kernels_bf16dot_active(void) {
    return g_ops && g_ops->ff_dot && g_bf16dot && g_bf16dot_allowed;
}

int ds_fast_pair_scores_native(void) { return ds_kernels_bf16dot_active() && g_ops->pair_scores8; }

void ds_fast_pair_scores8(const ds_bf16 *q, int n, const ds_bf16 *const *keys, int nk, float *out) {
    g_ops->pair_scores8(q, n, keys, nk, out);
}

int ds_kernels_available(const char *name) {
    __builtin_cpu_init();
    if (!name || !strcmp(name, "auto") || !strcmp(name, "reference")) return 1;
    if (!strcmp(name, "avx2")) return cpu_avx2();
    if (!strcmp(name, "avx512-vnni")) return cpu_avx512vnni();
    return 0;
}

static void reset_announcements(void) {
    for (int i = 0; i < 8; i++) atomic_store(&g_announced[i], 0);
    atomic_store(&g_announced_q, 0);
}

int ds_kernels_select(const char *name, ds_error *err) {
    __builtin_cpu_init();
    if (!name) name = "auto";
    if (!strcmp(name, "auto")) {
        if (cpu_avx512vnni()) {
            g_ops = &ds_kern_avx512;
            snprintf(g_reason, sizeof g_reason, "auto: CPU reports avx512f/bw/vl/dq + avx512-vnni");
        } else if (cpu_avx2()) {
            g_ops = &ds_kern_avx2;
            snprintf(g_reason, sizeof g_reason, "auto: CPU reports avx2 + fma, no avx512-vnni");
        } else {
            g_ops = NULL;
            snprintf(g_reason, sizeof g_reason, "auto: CPU has neither avx2+fma nor avx512-vnni");
        }
    } else if (!strcmp(name, "reference")) {
        g_ops = NULL;
        snprintf(g_reason, sizeof g_reason, "requested: reference");
    } else if (!strcmp(name, "avx2") || !strcmp(name, "avx512-vnni")) {
        if (!ds_kernels_available(name))
            return ds_fail(err, "E_KERNELS",
                           "--kernels %s: this CPU cannot run it (CPUID lacks %s); available: %s",
                           name, !strcmp(name, "avx2") ? "avx2/fma" : "avx512f/bw/vl/dq/vnni",
                           cpu_avx512vnni() ? "auto, avx512-vnni, avx2, reference"
                           : cpu_avx2()     ? "auto, avx2, reference"
                                            : "auto, reference");
        g_ops = !strcmp(name, "avx2") ? &ds_kern_avx2 : &ds_kern_avx512;
        snprintf(g_reason, sizeof g_reason, "requested: %s", name);
    } else {
        return ds_fail(err, "E_KERNELS",
                       "--kernels %s: unknown kernel path (expected auto, avx512-vnni, avx2 or reference)", name);
    }
    g_bf16dot = 0;
    if (g_ops == &ds_kern_avx512 && cpu_avx512bf16()) {
        g_bf16dot = ds_avx512_bf16dot_matches();
        size_t len = strlen(g_reason);
        snprintf(g_reason + len, sizeof g_reason - len, "%s",
                 g_bf16dot ? "; fast bf16 via vdpbf16ps (avx512-bf16, rounding probe matches)"
                           : "; avx512-bf16 present but vdpbf16ps rounds unlike the fast order: fast bf16 via FMA");
    }
    g_resolved = 1;
    reset_announcements();
    ds_log(DS_LOG_INFO, "kernels: %s selected (%s)", ds_kernels_active(), g_reason);
    return 0;
}

static const ds_kern_ops *ops(void) {
    if (!g_resolved) ds_kernels_select("auto", NULL);
    return g_ops;
}

const char *ds_kernels_active(void) {
    const ds_kern_ops *o = ops();
    return o ? o->name : "reference";
}
const char *ds_kernels_reason(void) { ops(); return g_reason; }

int ds_numerics_parse(const char *name) {
    if (name && !strcmp(name, "exact")) return DS_NUMERICS_EXACT;
    if (name && !strcmp(name, "fast")) return DS_NUMERICS_FAST;
    return -1;
}
const char *ds_numerics_name(ds_numerics n) { return n == DS_NUMERICS_FAST ? "fast" : "exact"; }

static void announce(ds_lin_fmt fmt, int fast) {
    static const char *fam[] = {"w8a8", "w4a8", "bf16", "f32", "", "", "bf16-fast", "f32-fast"};
    int k = fmt + (fast ? 4 : 0);
    if (atomic_exchange(&g_announced[k], 1)) return;
    ds_log(DS_LOG_INFO, "kernel %s: %s%s ENGAGED", fam[k], ds_kernels_active(),
           fast && fmt == DS_LIN_BF16 && ds_kernels_bf16dot_active() ? " (vdpbf16ps)" : "");
}

uint64_t ds_kernels_weight_bytes_read(void) { return atomic_load_explicit(&g_weight_bytes, memory_order_relaxed); }
uint64_t ds_kernels_macs(void) { return atomic_load_explicit(&g_macs, memory_order_relaxed); }
size_t ds_kernels_packed_bytes(void) { return atomic_load(&g_packed_bytes); }

static uint64_t weight_bytes(const ds_linear *L) {
    uint64_t o = (uint64_t)L->out, i = (uint64_t)L->in;
    switch (L->fmt) {
    case DS_LIN_W8A8: return o * i + 4 * o;
    case DS_LIN_W4A8: return (o + 1) / 2 * i + 4 * o;
    case DS_LIN_BF16: return 2 * o * i;
    case DS_LIN_FP8: return o * i + ((o + 31) / 32) * ((i + 31) / 32);
    case DS_LIN_MXFP4: return o * i / 2 + o * (i / 32);
    default: return 4 * o * i;
    }
}

ds_mac_class ds_linear_mac_class(const ds_linear *L) {
    switch (L->fmt) {
    case DS_LIN_W8A8:
    case DS_LIN_W4A8: return DS_MAC_INT8;
    case DS_LIN_MXFP4: if (!L->act_e4m3) return DS_MAC_INT8; break;   /* e4m3 rows: the float paths */
    default: break;
    }
    if (L->numerics != DS_NUMERICS_FAST) return DS_MAC_F64;
    return L->fmt == DS_LIN_F32 ? DS_MAC_F32 : DS_MAC_BF16;
}

/* Set and cleared by a benchmark while no forward runs; read by every call after that. */
static ds_kernel_call_fn g_observer;
static void *g_observer_ctx;
void ds_kernels_observe(ds_kernel_call_fn fn, void *ctx) {
    g_observer = fn;
    g_observer_ctx = ctx;
}

/* Every linear call counts once, whatever its row count, before it runs. */
static void count_call(const ds_linear *L, int n) {
    if (n <= 0) return;
    const uint64_t bytes = weight_bytes(L), macs = (uint64_t)L->out * (uint64_t)L->in * (uint64_t)n;
    atomic_fetch_add_explicit(&g_weight_bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_macs, macs, memory_order_relaxed);
    if (g_observer) g_observer(g_observer_ctx, ds_linear_mac_class(L), bytes, macs);
}

/* ---- per-thread scratch: slots that grow and are reused (no page faults per call) ---- */
typedef struct { void *p; size_t cap; } scratch_slot;
static _Thread_local scratch_slot tl_scratch[DS_SLOT_N];
/* Threads come and go (HTTP and engine threads, tests): a key destructor frees a thread's slots
 * when it exits, so scratch never outlives its thread. */
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free_thread(void *slots) {
    scratch_slot *s = slots;
    for (int i = 0; i < DS_SLOT_N; i++) {
        ds_afree(s[i].p);
        s[i].p = NULL;
        s[i].cap = 0;
    }
}
static void scratch_key_init(void) { pthread_key_create(&g_scratch_key, scratch_free_thread); }
void *ds_kern_scratch(int slot, size_t bytes) {
    if (bytes > tl_scratch[slot].cap) {
        pthread_once(&g_scratch_once, scratch_key_init);
        if (!pthread_getspecific(g_scratch_key)) pthread_setspecific(g_scratch_key, tl_scratch);
        ds_afree(tl_scratch[slot].p);
        size_t cap = bytes + bytes / 4 + 4096;
        tl_scratch[slot].p = ds_amalloc(cap);
        tl_scratch[slot].cap = cap;
    }
    return tl_scratch[slot].p;
}

/* ---- preparation ---- */

/* A linear's kernel-private copy, made once (at load, or on first use) and published with one
 * compare-and-swap so that concurrent first uses agree on one copy.  The struct is the caller's
 * (heap) object; filling this cache is the one write a forward makes. */
typedef void *(*copy_maker)(const ds_linear *L, size_t *bytes);
static void *ensure_copy(const ds_linear *L, copy_maker make, int kind) {
    void *cur = __atomic_load_n((void *const *)&L->packed, __ATOMIC_ACQUIRE);
    if (cur) return cur;
    size_t bytes = 0;
    void *mine = make(L, &bytes), *expected = NULL;
    if (!mine) {
        fprintf(stderr, "dsflash: out of memory repacking a linear [%d, %d]\n", L->out, L->in);
        abort();
    }
    ds_linear *Lw = (ds_linear *)L;
    if (__atomic_compare_exchange_n(&Lw->packed, &expected, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        Lw->packed_bytes = bytes;
        Lw->packed_kind = kind;
        atomic_fetch_add(&g_packed_bytes, bytes);
        return mine;
    }
    ds_huge_free(mine);
    return expected;
}

static void *make_tiles(const ds_linear *L, size_t *bytes) { return ds_pack_linear(L, bytes); }
static void *make_ffw(const ds_linear *L, size_t *bytes) { return ds_ff_pack(L, bytes); }
static void *make_mx_panels(const ds_linear *L, size_t *bytes) { return ds_mx_pack(L, bytes); }
static void *make_fp8_plain(const ds_linear *L, size_t *bytes) { return ds_fp8_plain_map(L, bytes); }

/* W8A8 / W4A8: the 16-row tiles of repack.c. */
static ds_packed *ensure_packed(const ds_linear *L) { return ensure_copy(L, make_tiles, DS_PACK_KIND_TILES16); }
/* Fast-tier BF16 / F32: the load-time scan (fastfloat.c). */
static const ds_ffw *ensure_ffw(const ds_linear *L) { return ensure_copy(L, make_ffw, DS_PACK_KIND_FF); }
/* MXFP4 panels for the SIMD paths (official_pack.c); linears whose activations take the official
 * E4M3 numerics never use them. */
const ds_mxpack *ds_mx_ensure_pack(const ds_linear *L) {
    if (L->fmt != DS_LIN_MXFP4 || L->act_e4m3) return NULL;
    return ensure_copy(L, make_mx_panels, DS_PACK_KIND_MX);
}

size_t ds_linear_prepare(ds_linear *L) {
    if (!ops()) return 0; /* the reference path reads the published layout */
    if (L->packed) return L->packed_bytes;
    if ((L->fmt == DS_LIN_BF16 || L->fmt == DS_LIN_F32) && L->numerics == DS_NUMERICS_FAST) ensure_ffw(L);
    else if (L->fmt == DS_LIN_W8A8 || L->fmt == DS_LIN_W4A8) ensure_packed(L);
    else if (L->fmt == DS_LIN_MXFP4) ds_mx_ensure_pack(L);   /* both SIMD paths run MXFP4 panels */
    else if (L->fmt == DS_LIN_FP8 && L->numerics == DS_NUMERICS_FAST && !L->act_e4m3 && ops()->fp8_plain_map)
        ds_fp8_ensure_plain_map(L);   /* the AVX-512 decode reads it; elsewhere it would be a scan for nothing */
    return L->packed_bytes;
}

void ds_fp8_ensure_plain_map(ds_linear *L) { ensure_copy(L, make_fp8_plain, DS_PACK_KIND_FP8_PLAIN); }

const void *ds_linear_float_rows(const ds_linear *L) {
    return L->packed && L->packed_kind == DS_PACK_KIND_FF ? ((const ds_ffw *)L->packed)->w : L->w;
}

int ds_linear_streams_packed(const ds_linear *L) {
    return L->packed && L->packed_kind != DS_PACK_KIND_FP8_PLAIN;   /* that one is a map beside the codes */
}

size_t ds_linear_code_bytes(const ds_linear *L) {
    const size_t out = (size_t)L->out, in = (size_t)L->in;
    switch (L->fmt) {
    case DS_LIN_W8A8: case DS_LIN_FP8: return out * in;
    case DS_LIN_W4A8: return (out + 1) / 2 * in;
    case DS_LIN_BF16: return 2 * out * in;
    case DS_LIN_F32: return 4 * out * in;
    case DS_LIN_MXFP4: return out * (in / 2);
    }
    return 0;
}

int ds_linear_published_idle(const ds_linear *L) {
    if (!ops() || !L->packed) return 0;
    switch (L->packed_kind) {
    case DS_PACK_KIND_TILES16: case DS_PACK_KIND_FF: return 1;
    case DS_PACK_KIND_MX: return ((const ds_mxpack *)L->packed)->row_panels == 0;
    default: return 0;   /* the FP8 map of plain tiles sits beside the codes the kernels read */
    }
}

void ds_linear_release(ds_linear *L) {
    if (L->packed) {
        atomic_fetch_sub(&g_packed_bytes, L->packed_bytes);
        ds_huge_free(L->packed);
    }
    L->packed = NULL;
    L->packed_bytes = 0;
    L->packed_kind = 0;
}

/* ---- quantized forward ---- */

typedef struct {
    const ds_linear *L;
    const ds_packed *P;
    ds_qact X;
    const int8_t *xq;      /* reference path: caller's rows */
    const float *xs;
    float *y;
} qjob;

typedef struct { int job, r0, r1, p0, p1; } qtask;

typedef struct {
    const ds_kern_ops *ops;
    qjob *jobs;
    qtask *tasks;
    int n_jobs, n_prep;
} qrun;

/* Activation preparation of rows [r0, r1) of one job: the zero-padded copy (when the row length
 * is not a multiple of 64), the row sums and the x+128 copy, each in blocks of 64 bytes (a fixed
 * trip count the compiler vectorizes). */
enum { PREP_TASK_BYTES = 256 << 10 };
static void prep_rows(qjob *j, int r0, int r1) {
    const int in = j->L->in, kpad = j->X.kpad;
    for (int r = r0; r < r1; r++) {
        const int8_t *src = j->xq + (size_t)r * in;
        int8_t *q = (int8_t *)j->X.q + (size_t)r * kpad;
        if (q != src) {
            memcpy(q, src, (size_t)in);
            memset(q + in, 0, (size_t)(kpad - in));
        }
        int32_t sum = 0;
        for (int i = 0; i < kpad; i += 64) {
            int32_t part = 0;
            for (int k = 0; k < 64; k++) part += q[i + k];
            sum += part;
        }
        ((int32_t *)j->X.xsum)[r] = sum;
        if (j->X.qu) {
            uint8_t *u = (uint8_t *)j->X.qu + (size_t)r * kpad;
            for (int i = 0; i < kpad; i += 64)
                for (int k = 0; k < 64; k++) u[i + k] = (uint8_t)q[i + k] ^ 0x80u;
        }
    }
}

/* Prep task t: the jobs' rows cut into ranges of about PREP_TASK_BYTES (same cut as counted). */
static void prep_task(void *vctx, int t, int thread) {
    (void)thread;
    qrun *c = vctx;
    for (int j = 0; j < c->n_jobs; j++) {
        qjob *q = &c->jobs[j];
        if (!q->L || q->X.n <= 0 || !q->P) continue;
        const int n = q->X.n;
        const int parts = (int)DS_MIN((size_t)n, ((size_t)n * (size_t)q->X.kpad + PREP_TASK_BYTES - 1) / PREP_TASK_BYTES);
        if (t < parts) {
            prep_rows(q, (int)((long)n * t / parts), (int)((long)n * (t + 1) / parts));
            return;
        }
        t -= parts;
    }
}

static void q_task(void *vctx, int t, int thread) {
    (void)thread;
    qrun *c = vctx;
    const qtask *k = &c->tasks[t];
    qjob *j = &c->jobs[k->job];
    if (!c->ops) {
        int o0 = k->p0 * DS_PANEL_ROWS, o1 = DS_MIN(j->L->out, k->p1 * DS_PANEL_ROWS);
        ds_ref_linear_q_rows(j->L, j->xq + (size_t)k->r0 * j->L->in, j->xs + k->r0, k->r1 - k->r0, o0, o1,
                             j->y + (size_t)k->r0 * j->L->out);
    } else {
        c->ops->q_panels(j->P, &j->X, k->r0, k->r1, k->p0, k->p1, j->y, j->L->out);
    }
}

/* Split one job into tasks: by panels; by rows too when panels are fewer than threads.
 * task_work: the call's total multiply-adds / (4 x threads). */
static int plan_tasks(const ds_linear *L, int n, int job, int threads, double task_work, qtask *out) {
    int np = (L->out + DS_PANEL_ROWS - 1) / DS_PANEL_ROWS;
    double work = (double)L->out * L->in * n;
    if (threads <= 1 || work < 65536.0) {
        out[0] = (qtask){job, 0, n, 0, np};
        return 1;
    }
    /* About 4 tasks per thread over the whole call: claimed dynamically, so a thread that is
     * descheduled for a moment (a shared host) holds up only a small slice instead of half the
     * work.  A job gets its share of them by its work, so one big matrix is cut in 4 x threads
     * slices while the hundred small expert matrices of a batched MoE step stay whole: each then
     * streams as one run the prefetchers follow, instead of 8 slices each started cold (measured
     * on `perf kernels`' MoE row: +15-20%). */
    int pch = DS_MAX(1, DS_MIN(DS_MIN(np, 4 * threads), (int)ceil(work / task_work)));
    int rch = 1;
    if (np < threads && n >= 2) rch = DS_MIN(n, (threads + np - 1) / np);
    int cnt = 0;
    for (int a = 0; a < pch; a++)
        for (int b = 0; b < rch; b++) {
            int p0 = (int)((long)np * a / pch), p1 = (int)((long)np * (a + 1) / pch);
            int r0 = (int)((long)n * b / rch), r1 = (int)((long)n * (b + 1) / rch);
            if (p1 > p0 && r1 > r0) out[cnt++] = (qtask){job, r0, r1, p0, p1};
        }
    return cnt;
}

static int max_tasks(int threads) { return 4 * threads * 2 + 4; }

void ds_linear_forward_q_many(const ds_linear_job *jobs, int n_jobs) {
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].L->fmt == DS_LIN_MXFP4) {   /* official format in the batch: its jobs in one dispatch (official.c) */
            ds_linear_job *mx = ds_kern_scratch(DS_SLOT_MX_BATCH, sizeof(ds_linear_job) * (size_t)n_jobs);
            int nm = 0;
            for (int k = 0; k < n_jobs; k++) {
                const ds_linear *L = jobs[k].L;
                if (jobs[k].n <= 0) continue;
                if (L->fmt != DS_LIN_MXFP4) { ds_linear_forward_q_many(&jobs[k], 1); continue; }
                count_call(L, jobs[k].n);
                mx[nm++] = jobs[k];
            }
            ds_official_forward_q_many(mx, nm);
            return;
        }
    const ds_kern_ops *o = ops();
    int threads = ds_pool_threads();
    size_t qbytes = 0, qubytes = 0, xsums = 0;
    double total_work = 0;
    for (int j = 0; j < n_jobs; j++) {
        const ds_linear *L = jobs[j].L;
        if (jobs[j].n <= 0) continue;
        total_work += (double)L->out * L->in * jobs[j].n;
        count_call(L, jobs[j].n);
        announce(L->fmt, 0);
        if (o) {
            size_t kpad = (size_t)((L->in + 63) & ~63);
            if (L->in % 64) qbytes += kpad * (size_t)jobs[j].n;
            if (o->wants_qu && L->fmt == DS_LIN_W8A8) qubytes += kpad * (size_t)jobs[j].n;
            xsums += (size_t)jobs[j].n;
        }
    }
    qjob *qj = ds_kern_scratch(DS_SLOT_ACTS, sizeof(qjob) * (size_t)n_jobs);
    qtask *tasks = ds_kern_scratch(DS_SLOT_TASKS, sizeof(qtask) * (size_t)n_jobs * (size_t)max_tasks(threads));
    int8_t *qbuf = o ? ds_kern_scratch(DS_SLOT_Q, qbytes) : NULL;
    uint8_t *qubuf = o ? ds_kern_scratch(DS_SLOT_QU, qubytes) : NULL;
    int32_t *xsbuf = o ? ds_kern_scratch(DS_SLOT_XSUM, sizeof(int32_t) * xsums) : NULL;
    int ntask = 0, nprep = 0;
    size_t prep_bytes = 0;
    for (int j = 0; j < n_jobs; j++) {
        const ds_linear *L = jobs[j].L;
        int n = jobs[j].n, in = L->in;
        qj[j] = (qjob){.L = L, .xq = jobs[j].xq, .xs = jobs[j].xs, .y = jobs[j].y};
        if (n <= 0) continue;
        if (o) {
            qj[j].P = ensure_packed(L);
            int kpad = (in + 63) & ~63;
            int8_t *q = NULL;
            if (in % 64) { /* zero-padded copy, so kernels never read past a row */
                q = qbuf;
                qbuf += (size_t)kpad * n;
            }
            uint8_t *qu = NULL;
            if (o->wants_qu && L->fmt == DS_LIN_W8A8) {
                qu = qubuf;
                qubuf += (size_t)kpad * n;
            }
            qj[j].X = (ds_qact){.q = q ? q : jobs[j].xq, .qu = qu, .s = jobs[j].xs, .xsum = xsbuf, .n = n, .kpad = kpad};
            xsbuf += n;
            nprep += (int)DS_MIN((size_t)n, ((size_t)n * (size_t)kpad + PREP_TASK_BYTES - 1) / PREP_TASK_BYTES);
            prep_bytes += (size_t)n * (size_t)kpad;
        }
        ntask += plan_tasks(L, n, j, threads, total_work / (4.0 * threads), tasks + ntask);
    }
    qrun run = {o, qj, tasks, n_jobs, nprep};
    /* the activation copies and row sums: inline when small (decode), else one pool pass over row
     * ranges (a 512-row prefill chunk, or its MoE experts' grouped rows, have megabytes of them) */
    if (o && nprep > 0) {
        if (threads <= 1 || prep_bytes < PREP_TASK_BYTES) {
            for (int j = 0; j < n_jobs; j++)
                if (jobs[j].n > 0) prep_rows(&qj[j], 0, jobs[j].n);
        } else {
            ds_pool_run(nprep, prep_task, &run);
        }
    }
    ds_pool_run(ntask, q_task, &run);
}

void ds_linear_forward_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y) {
    ds_linear_job j = {L, xq, xs, n, y};
    ds_linear_forward_q_many(&j, 1);
}

/* ---- activation quantization ---- */

typedef struct { const ds_bf16 *x; int n, k, per; int8_t *q; float *s; const ds_kern_ops *ops; } quant_ctx;

static void quant_task(void *vctx, int t, int thread) {
    (void)thread;
    quant_ctx *c = vctx;
    int r0 = t * c->per, r1 = DS_MIN(c->n, r0 + c->per);
    for (int r = r0; r < r1; r++) {
        if (c->ops) c->ops->quantize_row(c->x + (size_t)r * c->k, c->k, c->q + (size_t)r * c->k, c->s + r);
        else ds_ref_quantize_rows(c->x + (size_t)r * c->k, 1, c->k, c->q + (size_t)r * c->k, c->s + r);
    }
}

void ds_quantize_rows(const ds_bf16 *x, int n, int k, int8_t *q, float *s) {
    if (n <= 0) return;
    quant_ctx c = {x, n, k, 1, q, s, ops()};
    int threads = ds_pool_threads();
    int tasks = ((double)n * k < 262144.0 || threads <= 1) ? 1 : DS_MIN(n, 2 * threads);
    c.per = (n + tasks - 1) / tasks;
    tasks = (n + c.per - 1) / c.per;
    ds_pool_run(tasks, quant_task, &c);
}

/* ---- float forward ---- */

typedef struct {
    const ds_linear *L;
    const ds_kern_ops *ops;
    const ds_bf16 *x;
    const double *xd;
    int xstride, n, per;
    float *y;
} frun;

static void f_task(void *vctx, int t, int thread) {
    (void)thread;
    frun *c = vctx;
    int o0 = t * c->per, o1 = DS_MIN(c->L->out, o0 + c->per);
    if (o0 >= o1) return;
    if (c->ops) c->ops->f_rows(c->L, c->xd, c->xstride, c->n, o0, o1, c->y);
    else ds_ref_linear_f_rows(c->L, c->x, c->n, o0, o1, c->y);
}

/* ---- fast-tier float forward ---- */

typedef struct {
    const ds_kern_ops *ops;
    ds_ffw W;
    ds_ffact X;
    int dot, per;
    float *y;
} ffrun;

static void ff_task(void *vctx, int t, int thread) {
    (void)thread;
    ffrun *c = vctx;
    int o0 = t * c->per, o1 = DS_MIN(c->W.out, o0 + c->per);
    if (o0 >= o1) return;
    if (c->dot) c->ops->ff_dot(&c->W, &c->X, o0, o1, c->y, c->W.out);
    else c->ops->ff_rows(&c->W, &c->X, o0, o1, c->y, c->W.out);
}

static void ff_forward(const ds_linear *L, const ds_kern_ops *o, const ds_bf16 *x, int n, float *y) {
    ffrun c = {.ops = o, .y = y};
    c.W = *ensure_ffw(L);
    c.dot = L->fmt == DS_LIN_BF16 && ds_kernels_bf16dot_active();
    int kind = L->fmt == DS_LIN_F32 ? DS_FF_F32 : c.dot ? DS_FF_BF16_DOT : DS_FF_BF16_FMA;
    void *buf = ds_kern_scratch(DS_SLOT_XD, sizeof(float) * (size_t)n * (size_t)(((L->in + 31) & ~31) + 32));
    ds_ff_prepare_act(kind, o->ff_halves && n > 1, x, n, L->in, buf, &c.X);
    int threads = ds_pool_threads();
    double work = (double)L->out * L->in * n;
    int tasks = (threads <= 1 || work < 32768.0) ? 1 : DS_MIN(L->out, 4 * threads);
    c.per = (L->out + tasks - 1) / tasks;
    c.per = (c.per + 3) & ~3; /* whole 4-output tiles; results do not depend on it */
    tasks = (L->out + c.per - 1) / c.per;
    ds_pool_run(tasks, ff_task, &c);
}

void ds_linear_forward(const ds_linear *L, const ds_bf16 *x, int n, float *y) {
    if (n <= 0) return;
    if (L->fmt == DS_LIN_FP8 || L->fmt == DS_LIN_MXFP4) {   /* official formats: official.c */
        count_call(L, n);
        ds_official_forward(L, x, n, y);
        return;
    }
    if (L->fmt == DS_LIN_W8A8 || L->fmt == DS_LIN_W4A8) {
        int8_t *q = ds_kern_scratch(DS_SLOT_ACT, (size_t)n * L->in);
        float *s = ds_kern_scratch(DS_SLOT_S, sizeof(float) * (size_t)n);
        ds_quantize_rows(x, n, L->in, q, s);
        ds_linear_forward_q(L, q, s, n, y);
        return;
    }
    const ds_kern_ops *o = ops();
    count_call(L, n);
    int fast = L->numerics == DS_NUMERICS_FAST;
    announce(L->fmt, fast);
    if (fast && o) {
        ff_forward(L, o, x, n, y);
        return;
    }
    frun c = {L, o, x, NULL, 0, n, 1, y};
    if (o) { /* exact float64 copy of the activations, shared by every output row */
        c.xstride = (L->in + 15) & ~15;
        double *xd = ds_kern_scratch(DS_SLOT_XD, sizeof(double) * (size_t)c.xstride * n);
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < L->in; i++) xd[(size_t)r * c.xstride + i] = ds_bf16_to_f32(x[(size_t)r * L->in + i]);
            for (int i = L->in; i < c.xstride; i++) xd[(size_t)r * c.xstride + i] = 0.0;
        }
        c.xd = xd;
    }
    int threads = ds_pool_threads();
    double work = (double)L->out * L->in * n;
    int tasks = (threads <= 1 || work < 32768.0) ? 1 : DS_MIN(L->out, 4 * threads);
    c.per = (L->out + tasks - 1) / tasks;
    c.per = (c.per + 3) & ~3; /* keep row blocks whole; results do not depend on it */
    tasks = (L->out + c.per - 1) / c.per;
    ds_pool_run(tasks, f_task, &c);
}
