/* Linears stored in the official release's formats (CHECKPOINT.md §14), run without expanding the
 * weights in memory.
 *
 * MXFP4 (routed experts): the integer path of kern_official.h — activations quantized per row to
 * int8 exactly as for W4A8/W8A8 (ds_quantize_rows: this engine's default activation numerics for
 * the format, in both tiers), exact int32 block sums and their exact scaled int64 total by the
 * active ISA, rounded once.  Every path gives the same bits.
 *
 * FP8 E4M3 with 32x32 E8M0 tiles (dense linears): the activations stay bf16 (the float-math reading
 * §14 permits).  An E4M3 code times a power of two has 4 significant bits, so it converts exactly
 * to bf16 / float64:
 *   exact tier: y = fp32(Σ_i f64(W[o][i])·f64(x[i])), i ascending — NUMERICS rule 2 as for BF16
 *               linears, one scalar routine on every path;
 *   fast tier:  up to FP8_INREG_MAX_ROWS_AVX2 / _AVX512 activation rows the codes are decoded in
 *               registers (to bf16 for vdpbf16ps, to fp32 for FMA: kern_official_fp8_*.c); beyond,
 *               each block of codes is decoded once for the blocked row tiles (into fp32 on AVX2,
 *               ds_fp8_ff_blocked_avx2; into bf16 words on AVX-512, ds_fp8_ff_blocked_avx512).
 *               Elsewhere (and with the in-register routes forbidden, for A/B runs) 16 output rows
 *               at a time are converted to bf16 into a per-task buffer (16·in·2 bytes, cache
 *               resident) and fed to the active path's fast BF16 kernel.  All equal the fast BF16
 *               linear of the dequantized matrix bit for bit.
 * Weights below 2^-50 are flushed as the fast BF16 rule says; no copy of the matrix is kept.
 *
 * With `--activations e4m3` (ds_linear.act_e4m3) the rows are first quantized as the official
 * runtime does (official_e4m3.c): FP8 linears then run the paths above on the quantized rows, MXFP4
 * runs an exact integer route in the exact tier and the 16-row bf16 tiles (decoded from E2M1) in
 * the fast tier. */
#include "kernels/kern_official.h"
#include "base/threadpool.h"
#include "base/clones.h"
#include "base/hugemem.h"
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float g_e4m3_lut[256];
static double g_pow2_127[256];   /* 2^(e-127): FP8 tile scale */
static int g_tables;

static void tables_init(void) {
    if (g_tables) return;
    for (int b = 0; b < 256; b++) {
        int e = (b >> 3) & 15, m = b & 7;
        float v = (b & 0x7f) == 0x7f ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
        g_e4m3_lut[b] = (b & 0x80) ? -v : v;
        g_pow2_127[b] = b == 255 ? NAN : ldexp(1.0, b - 127);
    }
    g_tables = 1;   /* idempotent: racing initializers write the same values */
}

void ds_mx_bsum_ref(const uint8_t *codes, const int8_t *xe, const int8_t *xo, int nb, int32_t *bsum) {
    static const int8_t mag[16] = {DS_MX_MAG_LUT};
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            uint8_t c = codes[16 * b + j];
            int lo = c & 15, hi = c >> 4;
            s += (lo & 8 ? -mag[lo] : mag[lo]) * xe[16 * b + j];
            s += (hi & 8 ? -mag[hi] : mag[hi]) * xo[16 * b + j];
        }
        bsum[b] = s;
    }
}

double ds_mx_row_sequential(ds_mx_bsum_fn fn, const uint8_t *codes, const uint8_t *sc, const int8_t *xe, const int8_t *xo, int nb) {
    int32_t stack[256], *bs = nb <= 256 ? stack : malloc(sizeof(int32_t) * (size_t)nb);
    fn(codes, xe, xo, nb, bs);
    double acc = 0.0;
    for (int b = 0; b < nb; b++) acc += (double)bs[b] * ldexp(1.0, sc[b] - 128);
    if (bs != stack) free(bs);
    return acc;
}

double ds_mx_row_ref(const uint8_t *codes, const uint8_t *sc, const ds_mx_act *a, int nb) {
    const int8_t *xe = a->xe, *xo = a->xo;
    int lo, hi;
    ds_mx_exp_range(sc, nb, &lo, &hi);
    if (hi - lo > DS_MX_EXACT_SPREAD) return ds_mx_row_sequential(ds_mx_bsum_ref, codes, sc, xe, xo, nb);
    int64_t total = 0;
    for (int b = 0; b < nb; b++) {
        int32_t one;
        ds_mx_bsum_ref(codes + 16 * b, xe + 16 * b, xo + 16 * b, 1, &one);
        total += (int64_t)one * ((int64_t)1 << (sc[b] - lo));
    }
    return ldexp((double)total, lo - 128);
}

static ds_mx_row_fn active_row(void) {
    const char *p = ds_kernels_active();
    if (!strcmp(p, "avx512-vnni")) return ds_mx_row_avx512;
    if (!strcmp(p, "avx2")) return ds_mx_row_avx2;
    return ds_mx_row_ref;
}

static ds_mx_panels_fn active_panels(void) {
    const char *p = ds_kernels_active();
    return !strcmp(p, "avx512-vnni") ? ds_mx_panels_avx512 : !strcmp(p, "avx2") ? ds_mx_panels_avx2 : NULL;
}

static const ds_kern_ops *active_ops(void) {
    const char *p = ds_kernels_active();
    if (!strcmp(p, "avx512-vnni")) return &ds_kern_avx512;
    if (!strcmp(p, "avx2")) return &ds_kern_avx2;
    return NULL;
}

/* ---- MXFP4 ---- */

/* One MXFP4 job of a batch: its weights, its rows in the row functions' layout, its outputs. */
typedef struct mxjob {
    const ds_linear *L;
    const uint8_t *act;      /* [n][MX_PLANES][part]: xe, xo, ae, ao, se, so, then the panels'
                                int32 block starts (-12·Σ of each block's inputs) */
    const float *xs;
    int n;
    float *y;
} mxjob;
typedef struct mxtask { int job, o0, o1; } mxtask;
typedef struct mxrun {
    const mxjob *jobs;
    const mxtask *tasks;
    ds_mx_row_fn fn;
    ds_mx_panels_fn panels;  /* the panel route, for linears with panels (else NULL) */
} mxrun;

enum { MX_PLANES = 7, MX_INIT_PLANE = 6 };
static size_t mx_part(int in) { return ((size_t)(in / 32) * 16 + 63) & ~(size_t)63; }   /* 64-byte aligned rows */

/* Activation rows [r0, r1) of output row o, one at a time. */
static void mx_rows_single(const mxrun *c, const mxjob *j, int o, int r0, int r1, size_t part) {
    const ds_linear *L = j->L;
    const int nb = L->in / 32;
    const uint8_t *W = (const uint8_t *)L->w + (size_t)o * nb * 16;
    for (int r = r0; r < r1; r++) {
        const uint8_t *base = j->act + (size_t)r * MX_PLANES * part;
        ds_mx_act a = {(const int8_t *)base, (const int8_t *)(base + part), base + 2 * part, base + 3 * part,
                       base + 4 * part, base + 5 * part};
        double acc = c->fn(W, L->w_e8m0 + (size_t)o * nb, &a, nb);
        j->y[(size_t)r * L->out + o] = (float)(acc * (double)j->xs[r]);
    }
}

/* One task: whole panels through the panel route where the linear has panels (a panel holding a
 * row of wide exponent spread by the row function), else output row by output row, every
 * activation row of the job against it (the scalar path).  Every output is computed by the
 * same arithmetic whatever the task cut: no bit depends on it. */
static void mx_task(void *vctx, int t, int thread) {
    (void)thread;
    const mxrun *c = vctx;
    const mxtask *k = &c->tasks[t];
    const mxjob *j = &c->jobs[k->job];
    const ds_linear *L = j->L;
    const size_t part = mx_part(L->in);
    if (c->panels && L->packed_kind == DS_PACK_KIND_MX) {
        const ds_mxpack *P = L->packed;
        const int p0 = k->o0 / 16, p1 = (k->o1 + 15) / 16;   /* tasks hold whole panels */
        c->panels(P, j->act, MX_PLANES * part, part, MX_INIT_PLANE * part, j->xs, j->n, p0, p1, j->y, L->out);
        for (int p = p0; p < p1; p++)
            if (!P->chunk[p])
                for (int o = 16 * p; o < DS_MIN(k->o1, 16 * p + 16); o++) mx_rows_single(c, j, o, 0, j->n, part);
        return;
    }
    for (int o = k->o0; o < k->o1; o++) mx_rows_single(c, j, o, 0, j->n, part);
}

/* Tasks of one MXFP4 job in a batch of `total` multiply-adds: about 4 per thread over the whole
 * batch, each job getting its share by work (whole 16-row panels, at least one task).  One big
 * matrix is cut 4 x threads ways, while the ~100 expert matrices of a batched MoE step stay
 * whole, so each streams as one run the hardware prefetchers follow (cut 8 ways, as each job was
 * before, every slice of an expert started cold: decision 113 for W4A8, 142 here). */
static int mx_job_tasks(int out, double work, double total, int *per) {
    const int threads = ds_pool_threads(), panels = (out + 15) / 16;
    int tasks = 1;
    if (threads > 1 && total >= 32768.0) {
        const double task_work = total / (4.0 * threads);
        tasks = DS_MAX(1, DS_MIN(DS_MIN(panels, 4 * threads), (int)ceil(work / task_work)));
    }
    *per = 16 * ((panels + tasks - 1) / tasks);
    return (out + *per - 1) / *per;
}

int ds_official_task_split(int out, double work, int *per) {
    int threads = ds_pool_threads();
    int tasks = (threads <= 1 || work < 32768.0) ? 1 : DS_MIN((out + 15) / 16, 4 * threads);
    *per = (out + tasks - 1) / tasks;
    *per = (*per + 15) & ~15;   /* whole 16-row tiles; results do not depend on the split */
    return (out + *per - 1) / *per;
}

/* Rows [r0, r1) of xq [n][in] into the layout of kern_official.h at dst ([n][MX_PLANES][part]), one
 * 32-input block at a time: its 16 even and 16 odd inputs to the xe / xo planes, the block's start
 * for the panel route and, when a row function will read them (`planes`), the magnitudes and sign
 * bytes (8 where negative).  Vector
 * code (pure data movement, compiled per ISA): element by element, the layout of a 2-row expert
 * call of a batched decode step cost about as much as its multiply-adds. */
typedef int8_t mx_v16 __attribute__((vector_size(16)));
typedef int8_t mx_v32 __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) void mx_planes16(mx_v16 v, uint8_t *o, size_t part, int planes) {
    memcpy(o, &v, 16);
    if (!planes) return;
    const mx_v16 neg = v < 0, mag = (v ^ neg) - neg, sgn = neg & 8;   /* |q| <= 127: the magnitude is exact */
    memcpy(o + 2 * part, &mag, 16);
    memcpy(o + 4 * part, &sgn, 16);
}
DS_CLONES static void mx_layout_rows(const int8_t *xq, int r0, int r1, int in, uint8_t *dst, int planes) {
    const size_t part = mx_part(in);
    for (int r = r0; r < r1; r++) {
        const int8_t *x = xq + (size_t)r * in;
        uint8_t *d = dst + (size_t)r * MX_PLANES * part;
        for (int b = 0; b < in / 32; b++) {
            mx_v32 v;
            memcpy(&v, x + 32 * b, 32);
            const mx_v16 even = __builtin_shufflevector(v, v, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const mx_v16 odd = __builtin_shufflevector(v, v, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            mx_planes16(even, d + 16 * (size_t)b, part, planes);          /* xe, ae, se */
            mx_planes16(odd, d + part + 16 * (size_t)b, part, planes);    /* xo, ao, so */
            int32_t sum = 0;
            for (int k = 0; k < 32; k++) sum += x[32 * b + k];
            const int32_t start = -12 * sum;
            memcpy(d + MX_INIT_PLANE * part + 4 * (size_t)b, &start, 4);
        }
    }
}

/* Whether a job's layout needs the row functions' magnitude and sign planes: the scalar path and
 * panels of wide exponent spread (chunk 0) read them, the panel route only xe / xo and the starts. */
static int mx_row_planes(const ds_linear *L, ds_mx_panels_fn panels) {
    return !panels || L->packed_kind != DS_PACK_KIND_MX || ((const ds_mxpack *)L->packed)->row_panels > 0;
}

/* One layout task: rows [r0, r1) of one job. */
typedef struct mxlay { const int8_t *xq; uint8_t *dst; int in, r0, r1, planes; } mxlay;
/* mx_run_many carves jobs, then layout tasks, then output tasks from one scratch block */
_Static_assert(sizeof(mxjob) % _Alignof(mxlay) == 0 && sizeof(mxlay) % _Alignof(mxtask) == 0,
               "scratch records must keep the next array aligned");
static void mx_layout_task(void *vctx, int t, int thread) {
    (void)thread;
    const mxlay *l = &((const mxlay *)vctx)[t];
    mx_layout_rows(l->xq, l->r0, l->r1, l->in, l->dst, l->planes);
}

/* Every job's rows laid out, every job cut into output slices, one pool dispatch for all of them
 * (the experts of a MoE layer are many small matrices: one dispatch each would cost more in
 * synchronization than in arithmetic at one decode row).  Each slice's results do not depend on
 * the cut. */
static void mx_run_many(const ds_linear_job *jobs, int n_jobs, ds_mx_row_fn fn, ds_mx_panels_fn panels) {
    tables_init();
    size_t bytes = 64;
    int n_tasks = 0;
    double total_work = 0;
    for (int j = 0; j < n_jobs; j++) {
        bytes += (size_t)DS_MAX(jobs[j].n, 0) * MX_PLANES * mx_part(jobs[j].L->in);
        n_tasks += (jobs[j].L->out + 15) / 16;
        total_work += (double)jobs[j].L->out * jobs[j].L->in * DS_MAX(jobs[j].n, 0);
    }
    uint8_t *buf = ds_kern_scratch(DS_SLOT_OFF_ACT, bytes);
    /* layout tasks of about MX_LAYOUT_BYTES input bytes: a 512-row prefill chunk's rows are laid
     * out by every thread (one thread alone took ~5% of an official prefill, the others waiting) */
    enum { MX_LAYOUT_BYTES = 64 << 10 };
    int n_lay = 0;
    size_t lay_bytes = 0;
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].n > 0) {
            n_lay += (int)DS_MIN((size_t)jobs[j].n, ((size_t)jobs[j].n * jobs[j].L->in + MX_LAYOUT_BYTES - 1) / MX_LAYOUT_BYTES);
            lay_bytes += (size_t)jobs[j].n * jobs[j].L->in;
        }
    mxjob *mj = ds_kern_scratch(DS_SLOT_OFF_JOBS, sizeof(mxjob) * (size_t)n_jobs + sizeof(mxtask) * (size_t)n_tasks +
                                                      sizeof(mxlay) * (size_t)n_lay + 64);
    mxlay *lay = (mxlay *)(mj + n_jobs);            /* pointer-aligned after the jobs (both hold pointers) */
    mxtask *tasks = (mxtask *)(lay + n_lay);        /* int-only records last */
    int nt = 0, nj = 0, nl = 0, prev_l0 = 0;
    const ds_linear_job *prev = NULL;
    const uint8_t *prev_act = NULL;
    for (int j = 0; j < n_jobs; j++) {
        const ds_linear *L = jobs[j].L;
        const int n = jobs[j].n;
        if (n <= 0) continue;
        const int planes = mx_row_planes(L, panels);
        if (prev && prev->xq == jobs[j].xq && prev->n == n && prev->L->in == L->in) {
            /* the same rows (w1 and w3 of an expert): one layout, with the planes either needs */
            for (int l = prev_l0; l < nl; l++) lay[l].planes |= planes;
        } else {
            const int parts = (int)DS_MIN((size_t)n, ((size_t)n * L->in + MX_LAYOUT_BYTES - 1) / MX_LAYOUT_BYTES);
            prev_l0 = nl;
            for (int p = 0; p < parts; p++)
                lay[nl++] = (mxlay){jobs[j].xq, buf, L->in, (int)((long)n * p / parts), (int)((long)n * (p + 1) / parts), planes};
            prev = &jobs[j];
            prev_act = buf;
            buf += (size_t)n * MX_PLANES * mx_part(L->in);
        }
        mj[nj] = (mxjob){.L = L, .act = prev_act, .xs = jobs[j].xs, .n = n, .y = jobs[j].y};
        int per, cnt = mx_job_tasks(L->out, (double)L->out * L->in * n, total_work, &per);
        for (int t = 0; t < cnt; t++) tasks[nt++] = (mxtask){nj, t * per, DS_MIN(L->out, (t + 1) * per)};
        nj++;
    }
    if (lay_bytes >= 4 * (size_t)MX_LAYOUT_BYTES && nl > 1) {
        ds_pool_run(nl, mx_layout_task, lay);
    } else {   /* a decode step's few rows: inline, no extra pool round */
        for (int l = 0; l < nl; l++) mx_layout_task(lay, l, 0);
    }
    mxrun c = {.jobs = mj, .tasks = tasks, .fn = fn, .panels = panels};
    if (nt) ds_pool_run(nt, mx_task, &c);
}

void ds_mx_forward_q_many_with(const ds_linear_job *jobs, int n_jobs, ds_mx_row_fn fn, ds_mx_panels_fn panels) {
    mx_run_many(jobs, n_jobs, fn, panels);
}

void ds_mx_forward_q_with(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y, ds_mx_row_fn fn,
                          ds_mx_panels_fn panels) {
    ds_linear_job job = {L, xq, xs, n, y};
    mx_run_many(&job, 1, fn, panels);
}

/* ---- FP8 ---- */

/* Clears mrow[b] for every block b of one row (32 codes, fewer at the row's end) holding a code
 * with a zero exponent field.  One call per row: the clone dispatch stays off the per-block loop. */
DS_CLONES static void fp8_row_plain(const uint8_t *row, int in, uint8_t *mrow) {
    for (int b = 0; 32 * b < in; b++) {
        const int n = DS_MIN(32, in - 32 * b);
        int zero = 0;
        for (int k = 0; k < n; k++) zero |= (row[32 * b + k] & 0x78) == 0;
        if (zero) mrow[b] = 0;
    }
}

void *ds_fp8_plain_map(const ds_linear *L, size_t *bytes) {
    const int rt = (L->out + 31) / 32, ct = (L->in + 31) / 32;
    *bytes = (size_t)rt * ct;
    uint8_t *m = ds_huge_alloc(*bytes);
    memset(m, 1, *bytes);
    for (int o = 0; o < L->out; o++)
        fp8_row_plain((const uint8_t *)L->w + (size_t)o * L->in, L->in, m + (size_t)(o / 32) * ct);
    return m;
}

/* Row o of an FP8 linear as exact doubles / flushed bf16. */
static double fp8_value(const ds_linear *L, int o, int i) {
    const int sc = (L->in + 31) / 32;
    const uint8_t *q = L->w;
    return (double)g_e4m3_lut[q[(size_t)o * L->in + i]] * g_pow2_127[L->w_e8m0[(size_t)(o / 32) * sc + i / 32]];
}

/* One row as flushed bf16, scalar (the rule is ds_fp8_bf16_one in kern_official.h: a normal E4M3
 * code's magnitude bits shifted into an fp32's exponent/mantissa position, plus 120 in the exponent
 * field, are the fp32 (1+m/8)·2^(e-7); a subnormal code is m·2^-9 from the integer m, so no
 * subnormal fp32 is formed; one multiply by 2^(s-127) applies the scale; results >= 2^-50 are
 * normal with 4 significant bits, exact in bf16, smaller ones flushed by the fast-tier rule). */
void ds_fp8_decode_ref(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst) {
    for (int i = 0; i < in; i++) dst[i] = ds_fp8_bf16_one(codes[i], ds_fp8_scale_f(sc[i / 32]));
}

/* Rows [o0, o1) as flushed bf16 through fn: an FP8 decoder (a row's codes, its tile-scale row) or,
 * for MXFP4 (the fast tier with E4M3 activations), an MXFP4 one (the row's packed codes and scales). */
static void decode_rows_bf16(const ds_linear *L, ds_fp8_decode_fn fn, int o0, int o1, ds_bf16 *dst) {
    const int in = L->in, sc_cols = (in + 31) / 32, mx = L->fmt == DS_LIN_MXFP4;
    const uint8_t *w = L->w;
    for (int o = o0; o < o1; o++)
        fn(mx ? w + (size_t)o * (in / 2) : w + (size_t)o * in, L->w_e8m0 + (size_t)(mx ? o : o / 32) * sc_cols, in,
           dst + (size_t)(o - o0) * in);
}

typedef struct fprun {
    const ds_linear *L;
    const ds_kern_ops *ops;
    const ds_bf16 *x;
    ds_ffact X;
    int n, per, dot;
    float *y;
    ds_bf16 *tiles;          /* [tasks][16][in] */
    ds_fp8_decode_fn decode;
} fprun;

static void fp8_fast_task(void *vctx, int t, int thread) {
    (void)thread;
    fprun *c = vctx;
    const ds_linear *L = c->L;
    const int o0 = t * c->per, o1 = DS_MIN(L->out, o0 + c->per);
    ds_bf16 *tile = c->tiles + (size_t)t * 16 * L->in;
    for (int a = o0; a < o1; a += 16) {
        int b = DS_MIN(o1, a + 16);
        decode_rows_bf16(L, c->decode, a, b, tile);
        if (!c->ops) {
            ds_linear T = {.fmt = DS_LIN_BF16, .out = b - a, .in = L->in, .w = tile, .numerics = DS_NUMERICS_FAST};
            float *tmp = malloc(sizeof(float) * (size_t)c->n * (size_t)(b - a));
            ds_ref_linear_f_rows(&T, c->x, c->n, 0, b - a, tmp);
            for (int r = 0; r < c->n; r++) memcpy(c->y + (size_t)r * L->out + a, tmp + (size_t)r * (b - a), sizeof(float) * (size_t)(b - a));
            free(tmp);
            continue;
        }
        ds_ffw W = {.fmt = DS_LIN_BF16, .out = b - a, .in = L->in, .w = tile};
        if (c->dot) c->ops->ff_dot(&W, &c->X, 0, b - a, c->y + a, L->out);
        else c->ops->ff_rows(&W, &c->X, 0, b - a, c->y + a, L->out);
    }
}

/* In-register decode (kern_official_fp8_*.c) up to this many activation rows: it decodes every
 * weight once per 8 (AVX-512, from 5 rows) or 2 (AVX2) rows.  Past that the blocked kernels decode
 * each block of codes once for every row tile.  AVX-512 (decision 167; alternated calls in one
 * process, 2 threads, the mini's attention shapes [2048, 4096], [2048, 2048], [8192, 512]):
 * blocked against in-register 0.66x at 6 rows, 0.82x at 8, 1.03-1.06x at 12, 1.07-1.12x at 16,
 * 1.3-1.5x at 32; against the decoded bf16 tiles it replaced past 24 rows 1.3-1.4x at 32 rows,
 * 1.03x at 128.  With decision 177's prefetch and 2,048-input blocks, the blocked kernel against
 * in-register (calls alternated in both orders): 0.85-1.0x at 8 rows, 1.02-1.14x at 9-10,
 * 0.98-1.10x at 11, 1.14-1.23x at 12, so it takes over from 9 rows. */
/* AVX2: past 4 rows the 2 x 2 in-register tiles, which decode each weight once per two rows, give
 * way to the blocked kernel that decodes each block of codes once into fp32 for every row tile
 * (alternated calls, 2 threads, the mini's attention shapes [2048, 4096], [8192, 512], [2048,
 * 2048] and [4608, 5120]: 4 rows 0.9-1.1x, 5-6 rows 1.05-1.5x, 8-16 rows 1.2-1.65x against the
 * better of in-register and the decoded bf16 tiles, 512 rows equal; decision 151). */
enum { FP8_INREG_MAX_ROWS_AVX2 = 4, FP8_INREG_MAX_ROWS_AVX512 = 8 };
static _Atomic int g_fp8_inreg_allowed = 1;

int ds_fp8_inreg_allow(int allow) { return atomic_exchange(&g_fp8_inreg_allowed, allow); }

typedef struct firun { const ds_linear *L; const ds_ffact *X; ds_fp8_ff_fn fn; int per; float *y; } firun;

static void fp8_inreg_task(void *vctx, int t, int thread) {
    (void)thread;
    firun *c = vctx;
    const int o0 = t * c->per, o1 = DS_MIN(c->L->out, o0 + c->per);
    c->fn(c->L, c->X, o0, o1, c->y, c->L->out);
}

/* The route that decodes FP8 codes inside the kernel for n rows, or NULL for the decoded tiles. */
static ds_fp8_ff_fn fp8_inreg_fn(const ds_linear *L, const ds_kern_ops *o, int n) {
    if (!o || L->fmt != DS_LIN_FP8 || !atomic_load(&g_fp8_inreg_allowed)) return NULL;
    if (o == &ds_kern_avx2) return n > FP8_INREG_MAX_ROWS_AVX2 ? ds_fp8_ff_blocked_avx2 : ds_fp8_ff_avx2;
    if (o != &ds_kern_avx512) return NULL;
    return n <= FP8_INREG_MAX_ROWS_AVX512 ? ds_fp8_ff_avx512 : ds_fp8_ff_blocked_avx512;
}

void ds_fp8_forward_fast_with(const ds_linear *L, const ds_kern_ops *o, int use_dot, const ds_bf16 *x, int n, float *y) {
    tables_init();
    ds_fp8_ff_fn inreg = fp8_inreg_fn(L, o, n);
    if (inreg) {
        ds_ffact X;
        void *xbuf = ds_kern_scratch(DS_SLOT_OFF_ACT, sizeof(float) * (size_t)n * (size_t)(((L->in + 31) & ~31) + 32));
        ds_ff_prepare_act(use_dot && o->ff_dot ? DS_FF_BF16_DOT : DS_FF_BF16_FMA, inreg == ds_fp8_ff_blocked_avx2, x, n, L->in, xbuf, &X);
        firun c = {.L = L, .X = &X, .fn = inreg, .y = y};
        int tasks = ds_official_task_split(L->out, (double)L->out * L->in * n, &c.per);
        ds_pool_run(tasks, fp8_inreg_task, &c);
        return;
    }
    fprun c = {.L = L, .ops = o, .x = x, .n = n, .y = y, .dot = o && use_dot && o->ff_dot,
               .decode = o == &ds_kern_avx512 ? ds_fp8_decode_avx512 : o == &ds_kern_avx2 ? ds_fp8_decode_avx2 : ds_fp8_decode_ref};
    if (L->fmt == DS_LIN_MXFP4) c.decode = o ? ds_mx_decode_bf16_avx2 : ds_mx_decode_bf16;
    int tasks = ds_official_task_split(L->out, (double)L->out * L->in * n, &c.per);
    c.tiles = ds_kern_scratch(DS_SLOT_OFF_TILES, sizeof(ds_bf16) * (size_t)tasks * 16 * (size_t)L->in);
    if (o) {
        void *xbuf = ds_kern_scratch(DS_SLOT_OFF_ACT, sizeof(float) * (size_t)n * (size_t)(((L->in + 31) & ~31) + 32));
        ds_ff_prepare_act(c.dot ? DS_FF_BF16_DOT : DS_FF_BF16_FMA, o->ff_halves && n > 1, x, n, L->in, xbuf, &c.X);
    }
    ds_pool_run(tasks, fp8_fast_task, &c);
}

typedef struct fxrun { const ds_linear *L; const ds_bf16 *x; int n, per; float *y; } fxrun;

static void fp8_exact_task(void *vctx, int t, int thread) {
    (void)thread;
    fxrun *c = vctx;
    const ds_linear *L = c->L;
    const int o0 = t * c->per, o1 = DS_MIN(L->out, o0 + c->per);
    for (int r = 0; r < c->n; r++) {
        const ds_bf16 *xr = c->x + (size_t)r * L->in;
        for (int o = o0; o < o1; o++) {
            double acc = 0.0;
            for (int i = 0; i < L->in; i++) acc += fp8_value(L, o, i) * (double)ds_bf16_to_f32(xr[i]);
            c->y[(size_t)r * L->out + o] = (float)acc;
        }
    }
}

/* ---- entry points (dispatch.c) ---- */

void ds_official_forward_q_many(const ds_linear_job *jobs, int n_jobs) {
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].L->act_e4m3 || jobs[j].L->fmt != DS_LIN_MXFP4) {   /* a caller bug, never input */
            fprintf(stderr, "ds_official_forward_q: linear [%d, %d] does not take int8 rows\n", jobs[j].L->out, jobs[j].L->in);
            abort();
        }
    ds_mx_panels_fn panels = active_panels();
    if (panels)   /* the panels of each linear (made at load; here for one bound later) */
        for (int j = 0; j < n_jobs; j++) ds_mx_ensure_pack(jobs[j].L);
    mx_run_many(jobs, n_jobs, active_row(), panels);
}

void ds_official_forward_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y) {
    ds_linear_job job = {L, xq, xs, n, y};
    ds_official_forward_q_many(&job, 1);
}

void ds_official_forward(const ds_linear *L, const ds_bf16 *x, int n, float *y) {
    tables_init();
    if (L->act_e4m3) {   /* the official activation numerics (official_e4m3.c) */
        if (L->fmt == DS_LIN_MXFP4 && L->numerics != DS_NUMERICS_FAST) {
            ds_mx_e4m3_exact(L, x, n, y);
            return;
        }
        ds_bf16 *xq = ds_kern_scratch(DS_SLOT_OFF_E4M3, sizeof(ds_bf16) * (size_t)n * (size_t)L->in + 64);
        ds_e4m3_rows_bf16(x, n, L->in, xq);
        x = xq;   /* FP8 (both tiers) and fast-tier MXFP4: the bf16 paths below on the quantized rows */
    }
    if (L->fmt == DS_LIN_MXFP4 && !L->act_e4m3) {
        int8_t *q = ds_kern_scratch(DS_SLOT_OFF_Q, (size_t)n * L->in + 1);
        float *s = ds_kern_scratch(DS_SLOT_OFF_S, sizeof(float) * (size_t)n);
        ds_quantize_rows(x, n, L->in, q, s);
        ds_official_forward_q(L, q, s, n, y);
        return;
    }
    if (L->numerics == DS_NUMERICS_FAST) {
        ds_fp8_forward_fast_with(L, active_ops(), ds_kernels_bf16dot_active(), x, n, y);
        return;
    }
    fxrun c = {.L = L, .x = x, .n = n, .y = y};
    int tasks = ds_official_task_split(L->out, (double)L->out * L->in * n, &c.per);
    ds_pool_run(tasks, fp8_exact_task, &c);
}
