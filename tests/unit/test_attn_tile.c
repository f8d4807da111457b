/* The fast tier's blocked attention (model/attn_tile.c) against the per-row fast core and against
 * a float64 softmax attention written here.
 *
 * Why these oracles: the tiled path is only allowed if a row's output keeps its bits whatever block
 * it lands in (the invariance tests of test_model_forward.c compare whole models; this one pins the
 * kernel itself, on shapes those small models never reach: d_h 512, blocks of 1..8 rows, sparse
 * per-row key subsets, keys one row takes and another skips, inf and NaN in skipped keys).  The
 * per-row core ds_attn_head_fast is the fast tier's definition of a row's attention; the float64
 * computation (an independent formula: softmax with the sink in the denominator, weighted sum of
 * the keys) checks that both compute attention at all, to bf16 accuracy. */
#include "check.h"
#include "model/attn_tile.h"
#include "model/fast_ops.h"
#include "kernels/kern_internal.h"
#include "base/common.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define QB DS_ATTN_QB
#define NU_MAX 96

static uint32_t g_seed = 12345;
static float frand(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}
/* Equal bits, or both NaN: a NaN's sign and payload follow which operand of a commutative add the
 * compiler put first, which no fp32 order pins down (the row that takes an inf/NaN key is NaN
 * through both routes). */
static int is_nan_bf16(ds_bf16 v) { return (v & 0x7fff) > 0x7f80; }
static int same_bf16(ds_bf16 a, ds_bf16 b) { return a == b || (is_nan_bf16(a) && is_nan_bf16(b)); }

/* float64 attention of one row with the sink: Σ_k softmax_k · k */
static void ref_attention(const ds_bf16 *q, const ds_bf16 *const *keys, int nk, float sink, float scale, int dh, double *o) {
    double s[NU_MAX], mx = sink, den = 0;
    for (int i = 0; i < nk; i++) {
        double d = 0;
        for (int j = 0; j < dh; j++) d += (double)ds_bf16_to_f32(q[j]) * ds_bf16_to_f32(keys[i][j]);
        s[i] = d * scale;
        if (s[i] > mx) mx = s[i];
    }
    for (int i = 0; i < nk; i++) den += exp(s[i] - mx);
    den += exp(sink - mx);
    for (int j = 0; j < dh; j++) o[j] = 0;
    for (int i = 0; i < nk; i++)
        for (int j = 0; j < dh; j++) o[j] += exp(s[i] - mx) / den * ds_bf16_to_f32(keys[i][j]);
}

/* The score and value routes a block can take: 0 the 8-wide vector tiles, 1 the 16-wide ones, 2 the
 * CPU's choice (vdpbf16ps scores where the kernels have it, ds_fast_pair_scores8).  Every route
 * must give the bits of the per-row core; 3 puts everything back. */
static void set_route(int route) {
    static int selected;
    if (!selected) {   /* the CPU's kernel path, as a loaded model has it */
        ds_error err;
        selected = ds_kernels_select("auto", &err) == 0;
    }
    ds_kernels_allow_bf16dot(route >= 2);
    ds_fast_tile_width(route < 2 ? route + 1 : 0);
}

/* A bf16 whose magnitude the fast tier flushes (|v| < 2^-50, subnormals included), varied by i. */
static ds_bf16 tiny_bf16(int i) {
    static const ds_bf16 t[] = {0x0001, 0x8040, 0x007f, 0x2100, 0xa5ff, 0x2680};   /* 2^-50 is 0x2680 */
    return t[i % 6];
}

typedef struct {
    int bad_bits, bad_ref, poisoned;
    double worst_rel;
} outcome;

/* One random block: B rows, nu union keys, each row taking key u with probability `take` (every row
 * at least one key); poison != 0 fills one key that only row 0 takes with inf and NaN. */
static void run_block(int dh, int B, int nu, double take, int poison, int dense, outcome *out) {
    ds_bf16 *kmem = malloc(sizeof(ds_bf16) * (size_t)nu * dh), *qmem = malloc(sizeof(ds_bf16) * QB * (size_t)dh);
    ds_bf16 *ot = malloc(sizeof(ds_bf16) * QB * (size_t)dh), *orow = malloc(sizeof(ds_bf16) * (size_t)dh);
    const ds_bf16 *keys[NU_MAX], *rowkeys[NU_MAX];
    int32_t idx[NU_MAX * QB];
    for (int i = 0; i < nu * dh; i++) kmem[i] = i % 37 == 5 ? tiny_bf16(i) : ds_f32_to_bf16(frand() * 2.0f);
    for (int i = 0; i < QB * dh; i++) qmem[i] = i % 29 == 3 ? tiny_bf16(i) : ds_f32_to_bf16(frand() * 1.5f);
    for (int u = 0; u < nu; u++) keys[u] = kmem + (size_t)u * dh;
    ds_attn_block b = {.B = B, .dh = dh, .scale = 1.0f / sqrtf((float)dh), .nu = nu, .keys = keys,
                       .idx = idx, .dense = dense};
    for (int r = 0; r < QB; r++) {
        b.sink[r] = frand() * 2.0f;     /* a sink per row, as the heads of one token row have */
        b.q[r] = qmem + (size_t)r * dh;
        b.o[r] = ot + (size_t)r * dh;
        b.nk[r] = 0;
    }
    int skipped_by_all_but_one = -1;
    for (int u = 0; u < nu; u++)
        for (int r = 0; r < QB; r++) {
            int t = r < B && (frand() * 0.5f + 0.5f < take || (u == nu - 1 && b.nk[r] == 0));
            idx[u * QB + r] = t ? b.nk[r]++ : -1;
        }
    if (poison && B > 1) {
        /* a key only row 0 takes, filled with inf and NaN: the other rows must not see it */
        skipped_by_all_but_one = nu / 2;
        for (int r = 0; r < QB; r++) {
            if (r == 0 && idx[skipped_by_all_but_one * QB] < 0) {
                /* make row 0 take it: renumber row 0's list */
                idx[skipped_by_all_but_one * QB] = 0;
                b.nk[0] = 0;
                for (int u = 0; u < nu; u++)
                    if (idx[u * QB] >= 0) idx[u * QB] = b.nk[0]++;
            } else if (r > 0 && r < B && idx[skipped_by_all_but_one * QB + r] >= 0) {
                idx[skipped_by_all_but_one * QB + r] = -1;
                b.nk[r] = 0;
                for (int u = 0; u < nu; u++)
                    if (idx[u * QB + r] >= 0) idx[u * QB + r] = b.nk[r]++;
            }
        }
        for (int r = 1; r < B; r++)
            if (b.nk[r] == 0) b.B = B = r;      /* a row left without keys ends the block */
        ds_bf16 *pk = kmem + (size_t)skipped_by_all_but_one * dh;
        for (int j = 0; j < dh; j++) pk[j] = j % 2 ? 0x7f80 : 0x7fc1;   /* +inf, NaN */
    }
    ds_attn_scratch s = {.max_keys = nu};
    s.sc = malloc(sizeof(float) * QB * (size_t)nu);
    s.qf = malloc(sizeof(float) * QB * (size_t)dh);
    s.acc = malloc(sizeof(float) * QB * (size_t)dh);
    s.w = malloc(sizeof(float) * QB * (size_t)nu);
    s.mask = malloc(sizeof(uint32_t) * QB * (size_t)nu);
    s.full = malloc((size_t)nu);
    ds_attn_block_fast(&b, &s);
    float *sc = malloc(sizeof(float) * (size_t)nu), *acc = malloc(sizeof(float) * (size_t)dh);
    double *ref = malloc(sizeof(double) * (size_t)dh);
    for (int r = 0; r < B; r++) {
        int n = 0;
        for (int u = 0; u < nu; u++)
            if (idx[u * QB + r] >= 0) rowkeys[idx[u * QB + r]] = keys[u], n++;
        ds_attn_head_fast(b.q[r], rowkeys, n, b.sink[r], b.scale, dh, sc, acc, orow);
        for (int j = 0; j < dh; j++) out->bad_bits += !same_bf16(orow[j], b.o[r][j]);
        if (poison && r == 0) continue;          /* row 0 took the inf/NaN key: no finite reference */
        ref_attention(b.q[r], rowkeys, n, b.sink[r], b.scale, dh, ref);
        double err = 0, nrm = 0;
        for (int j = 0; j < dh; j++) {
            const double d = ds_bf16_to_f32(b.o[r][j]) - ref[j];
            err += d * d, nrm += ref[j] * ref[j];
            out->poisoned += !isfinite(ds_bf16_to_f32(b.o[r][j]));
        }
        const double rel = sqrt(err / (nrm > 0 ? nrm : 1));
        if (rel > out->worst_rel) out->worst_rel = rel;
        out->bad_ref += rel > 8e-3;      /* bf16 output rounding is 2^-9 relative per element */
    }
    free(sc), free(acc), free(ref), free(s.sc), free(s.qf), free(s.acc), free(s.w), free(s.mask), free(s.full);
    free(kmem), free(qmem), free(ot), free(orow);
}

TEST(tiled_rows_equal_the_per_row_core_bit_for_bit) {
    outcome o = {0};
    int blocks = 0;
    static const int dhs[] = {64, 512};
    for (int route = 0; route <= 2; route++)    /* the 8-wide and 16-wide tiles on every host, then vdpbf16ps */
    for (size_t d = 0; d < sizeof dhs / sizeof dhs[0]; d++)
        for (int B = 1; B <= QB; B++) {
            set_route(route);
            for (int dense = 0; dense <= 1; dense++)   /* every row takes every key: both block kinds */
                run_block(dhs[d], B, 1 + (B * 11) % NU_MAX, 1.0, 0, dense, &o);
            run_block(dhs[d], B, 40 + B, 0.6, 0, 0, &o);                    /* sparse per-row subsets */
            run_block(dhs[d], B, NU_MAX, 0.95, 0, 0, &o);
            blocks += 4;
        }
    set_route(3);
    printf("  %d blocks (8- and 16-wide tiles, then the CPU's route: scores on vdpbf16ps %s): %d output values differ from "
           "ds_attn_head_fast, worst relative L2 vs float64 %.2e\n", blocks,
           ds_fast_pair_scores_native() ? "yes" : "no, not on this CPU; test_kernels_avx512_emu checks that kernel", o.bad_bits,
           o.worst_rel);
    CHECK(o.bad_bits == 0, "%d bf16 outputs differ from the per-row fast core", o.bad_bits);
    CHECK(o.bad_ref == 0, "%d rows farther than 8e-3 (relative L2) from float64 attention", o.bad_ref);
}

TEST(a_key_a_row_skips_never_reaches_it) {
    outcome o = {0};
    for (int route = 0; route <= 2; route++) {
        set_route(route);
        for (int B = 2; B <= QB; B++) run_block(512, B, 50, 0.8, 1, 0, &o);
    }
    set_route(3);
    CHECK(o.bad_bits == 0, "%d outputs differ from the per-row core", o.bad_bits);
    CHECK(o.poisoned == 0, "%d outputs of rows that skip the inf/NaN key are not finite", o.poisoned);
    CHECK(o.bad_ref == 0, "%d rows off the float64 reference (worst %.2e)", o.bad_ref, o.worst_rel);
}

/* Not a pass/fail figure (the host is shared): the speed of a mini-sized block, tiled vs per row,
 * printed so a regression is visible in the log.  The check is that both produce the same bits. */
TEST(tiled_speed_on_a_mini_sized_block) {
    enum { DH = 512, NK = 640, REPS = 8 };
    ds_bf16 *k = malloc(sizeof(ds_bf16) * NK * DH), *q = malloc(sizeof(ds_bf16) * QB * DH);
    ds_bf16 *ot = malloc(sizeof(ds_bf16) * QB * DH), *orow = malloc(sizeof(ds_bf16) * QB * DH);
    const ds_bf16 **keys = malloc(sizeof(ds_bf16 *) * NK);
    int32_t *idx = malloc(sizeof(int32_t) * NK * QB);
    for (int i = 0; i < NK * DH; i++) k[i] = ds_f32_to_bf16(frand());
    for (int i = 0; i < QB * DH; i++) q[i] = ds_f32_to_bf16(frand());
    for (int u = 0; u < NK; u++) {
        keys[u] = k + (size_t)u * DH;
        for (int r = 0; r < QB; r++) idx[u * QB + r] = u;
    }
    ds_attn_block b = {.B = QB, .dh = DH, .scale = 1.0f / sqrtf(DH), .nu = NK, .keys = keys, .idx = idx};
    for (int r = 0; r < QB; r++) b.q[r] = q + r * DH, b.o[r] = ot + r * DH, b.nk[r] = NK, b.sink[r] = 0.5f - 0.1f * r;
    ds_attn_scratch s = {.max_keys = NK, .sc = malloc(sizeof(float) * QB * NK), .qf = malloc(sizeof(float) * QB * DH),
                         .acc = malloc(sizeof(float) * QB * DH), .w = malloc(sizeof(float) * QB * NK),
                         .mask = malloc(sizeof(uint32_t) * QB * NK), .full = malloc(NK)};
    float *sc = malloc(sizeof(float) * NK), *acc = malloc(sizeof(float) * DH);
    ds_bf16 *od = malloc(sizeof(ds_bf16) * QB * DH);
    ds_attn_block bd = b;
    bd.dense = 1;
    for (int r = 0; r < QB; r++) bd.o[r] = od + r * DH;
    double t_tile = 1e9, t_dense = 1e9, t_row = 1e9, t_narrow = 1e9;
    set_route(3);
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = ds_now();
        ds_attn_block_fast(&b, &s);
        double t1 = ds_now();
        for (int r = 0; r < QB; r++) ds_attn_head_fast(b.q[r], keys, NK, b.sink[r], b.scale, DH, sc, acc, orow + r * DH);
        double t2 = ds_now();
        ds_attn_block_fast(&bd, &s);
        double t3 = ds_now();
        set_route(0);
        ds_attn_block_fast(&bd, &s);
        set_route(3);
        double t4 = ds_now();
        if (t4 - t3 < t_narrow) t_narrow = t4 - t3;
        if (t1 - t0 < t_tile) t_tile = t1 - t0;
        if (t2 - t1 < t_row) t_row = t2 - t1;
        if (t3 - t2 < t_dense) t_dense = t3 - t2;
    }
    const double flop = 4.0 * QB * NK * DH;
    printf("  %d rows x %d keys x d_h %d: tiled dense %.3f ms (%.1f GFLOP/s), tiled with per-row lists %.3f ms (%.1f), "
           "per row %.3f ms (%.1f); dense with 8-wide tiles %.3f ms (%.1f)\n", QB, NK, DH, 1e3 * t_dense,
           flop / t_dense / 1e9, 1e3 * t_tile, flop / t_tile / 1e9, 1e3 * t_row, flop / t_row / 1e9, 1e3 * t_narrow,
           flop / t_narrow / 1e9);
    CHECK(!memcmp(ot, orow, sizeof(ds_bf16) * QB * DH), "tiled and per-row outputs differ");
    CHECK(!memcmp(od, orow, sizeof(ds_bf16) * QB * DH), "dense tiled and per-row outputs differ");
    free(od);
    free(k), free(q), free(ot), free(orow), free(keys), free(idx), free(sc), free(acc);
    free(s.sc), free(s.qf), free(s.acc), free(s.w), free(s.mask), free(s.full);
}

RUN_ALL()
