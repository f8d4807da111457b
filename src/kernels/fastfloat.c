/* Fast-tier float linears: the parts shared by every SIMD path (activation layouts, the load-time
 * weight scan) — see the order in kernels.h and the layouts in kern_internal.h.
 *
 * Why a flush rule at all: vdpbf16ps treats subnormal inputs as zero and flushes subnormal
 * results, FMA does neither, and both must give the same bits.  With every nonzero weight and
 * activation at least 2^-50 in magnitude, each product is a multiple of 2^-114, so is every
 * rounded partial sum, and no value can ever be subnormal: the two instruction families then
 * compute the same IEEE operations.  Activations are flushed when they are laid out per call
 * (cheap: n x in); weights are flushed once, in the load-time copy (ds_ff_pack). */
#include "kernels/kern_internal.h"
#include "base/clones.h"
#include "base/hugemem.h"
#include "base/threadpool.h"
#include <string.h>

static ds_bf16 bf16_flushed(ds_bf16 v) { return ((v >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : v; }

static float f32_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The activation layouts are laid out per call, n x in values each time: the loops below are
 * branch-free per element so that the compiler vectorizes them (a 16-row BF16 call of 4096 inputs
 * spent ~40 us here element by element, as long as its 64-output matrix product); pure data
 * movement, so no bit depends on how it runs. */
DS_CLONES static void act_row_dot(const ds_bf16 *xr, int in, int kpad, ds_bf16 *d) {
#pragma omp simd
    for (int i = 0; i < in; i++) {
        const ds_bf16 v = xr[i];
        d[i] = ((v >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : v;
    }
    memset(d + in, 0, sizeof(ds_bf16) * (size_t)(kpad - in));
}

/* per 32-block: the 16 odd elements (2j+1), then the 16 even ones (2j), widened and flushed */
DS_CLONES static void act_row_fma(const ds_bf16 *xr, int in, int kpad, float *d) {
    const int full = in & ~31;
    for (int b = 0; b < full; b += 32) {
#pragma omp simd
        for (int j = 0; j < 16; j++) {
            const ds_bf16 o = xr[b + 2 * j + 1], e = xr[b + 2 * j];
            d[b + j] = f32_of_bits((uint32_t)(((o >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : o) << 16);
            d[b + 16 + j] = f32_of_bits((uint32_t)(((e >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : e) << 16);
        }
    }
    for (int b = full; b < kpad; b += 32)
        for (int j = 0; j < 16; j++) {
            int i1 = b + 2 * j + 1, i0 = b + 2 * j;
            d[b + j] = i1 < in ? f32_of_bits((uint32_t)bf16_flushed(xr[i1]) << 16) : 0.f;
            d[b + 16 + j] = i0 < in ? f32_of_bits((uint32_t)bf16_flushed(xr[i0]) << 16) : 0.f;
        }
}

DS_CLONES static void act_row_f32(const ds_bf16 *xr, int in, int kpad, float *d) {
#pragma omp simd
    for (int i = 0; i < in; i++) d[i] = f32_of_bits((uint32_t)xr[i] << 16);
    for (int i = in; i < kpad; i++) d[i] = 0.f;
}

/* The gathered-halves form of a row: built in the plain layout 512 values at a time (the blocks
 * of 32 never straddle a piece), each 16-value step's lanes 0-7 then sent to the first half of
 * the row and its lanes 8-15 to the second. */
static void act_row_halves(int kind, const ds_bf16 *xr, int in, int kpad, float *d) {
    enum { PIECE = 512 };
    float tmp[PIECE];
    const int half = kpad / 2;
    for (int p0 = 0; p0 < kpad; p0 += PIECE) {
        const int len = DS_MIN(PIECE, kpad - p0), valid = DS_MAX(0, DS_MIN(len, in - p0));
        const ds_bf16 *src = valid ? xr + p0 : xr; /* a piece wholly past `in` reads nothing */
        if (kind == DS_FF_BF16_FMA) act_row_fma(src, valid, len, tmp);
        else act_row_f32(src, valid, len, tmp);
        for (int s = 0; s < len / 16; s++) {
            memcpy(d + p0 / 2 + 8 * s, tmp + 16 * s, 8 * sizeof(float));
            memcpy(d + half + p0 / 2 + 8 * s, tmp + 16 * s + 8, 8 * sizeof(float));
        }
    }
}

static void prepare_rows(const ds_ffact *X, const ds_bf16 *x, int in, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        const ds_bf16 *xr = x + (size_t)r * in;
        if (X->kind == DS_FF_BF16_DOT) act_row_dot(xr, in, X->kpad, (ds_bf16 *)X->x + (size_t)r * X->stride);
        else if (X->halves) act_row_halves(X->kind, xr, in, X->kpad, (float *)X->x + (size_t)r * X->stride);
        else if (X->kind == DS_FF_BF16_FMA) act_row_fma(xr, in, X->kpad, (float *)X->x + (size_t)r * X->stride);
        else act_row_f32(xr, in, X->kpad, (float *)X->x + (size_t)r * X->stride);
    }
}

typedef struct { const ds_ffact *X; const ds_bf16 *x; int in, per; } prepare_ctx;
static void prepare_task(void *vctx, int t, int thread) {
    (void)thread;
    const prepare_ctx *c = vctx;
    prepare_rows(c->X, c->x, c->in, t * c->per, DS_MIN(c->X->n, (t + 1) * c->per));
}

/* Rows are laid out by the pool from 32 on: a prefill chunk's conversion (512 rows x 4096 inputs
 * for wo_a) ran on the calling thread alone while the others waited, 4-6% of the float linears'
 * time (decision 189).  Each row's layout is its own: no bit depends on the split. */
void ds_ff_prepare_act(int kind, int halves, const ds_bf16 *x, int n, int in, void *buf, ds_ffact *X) {
    const int kpad = kind == DS_FF_F32 ? (in + 15) & ~15 : (in + 31) & ~31;
    const int stride = kpad + (kind == DS_FF_BF16_DOT ? 32 : 16);
    halves = halves && kind != DS_FF_BF16_DOT;
    *X = (ds_ffact){.x = buf, .n = n, .kpad = kpad, .kind = kind, .stride = stride, .halves = halves};
    const int threads = ds_pool_threads();
    if (n < 32 || threads <= 1) {
        prepare_rows(X, x, in, 0, n);
        return;
    }
    const int per = DS_MAX(8, (n + 4 * threads - 1) / (4 * threads));
    prepare_ctx c = {X, x, in, per};
    ds_pool_run((n + per - 1) / per, prepare_task, &c);
}

/* Load-time form of a fast-tier float linear: a header naming the matrix the kernels read and a
 * copy of the matrix on 2 MiB pages (base/hugemem.h: the published matrix sits in 4 KiB file
 * pages, and the head alone is a gigabyte streamed every token).  BF16 values below the flush
 * threshold are copied as zero (the rule above); F32 is copied as is.  One block, freed by
 * ds_linear_release. */
ds_ffw *ds_ff_pack(const ds_linear *L, size_t *bytes) {
    const size_t count = (size_t)L->out * (size_t)L->in, head = 64;
    const size_t esz = L->fmt == DS_LIN_BF16 ? sizeof(ds_bf16) : sizeof(float);
    *bytes = head + count * esz;
    uint8_t *base = ds_huge_alloc(*bytes);
    ds_ffw *W = (ds_ffw *)base;
    *W = (ds_ffw){.fmt = L->fmt, .out = L->out, .in = L->in, .w = base + head};
    if (L->fmt == DS_LIN_BF16) {
        ds_bf16 *d = (ds_bf16 *)(base + head);
        const ds_bf16 *w = L->w;
        for (size_t i = 0; i < count; i++) d[i] = bf16_flushed(w[i]);
    } else {
        memcpy(base + head, L->w, count * esz);
    }
    return W;
}
