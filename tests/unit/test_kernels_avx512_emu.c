/* The AVX-512 VNNI kernel source compiled against SIMDe's portable implementations of the same
 * intrinsics (DS_AVX512_EMULATE), so its arithmetic — tile walking, bias removal, tails, masked
 * stores, float64 reductions — is checked bit for bit against the scalar reference on every host,
 * including CI machines without AVX-512.  On a CPU with AVX-512 VNNI, test_kernels additionally
 * runs the real instructions. */
#include "check.h"
#include "base/hugemem.h"
#include "test_kernels_util.h"
#define DS_AVX512_EMULATE 1
#include "kernels/kern_avx512.c"
#include "kernels/kern_avx512_fast.c"
#include <stdio.h>

/* Build the activations exactly as the dispatcher does (padded rows, x+128 copy, row sums). */
static ds_qact make_qact(const int8_t *q, const float *s, int n, int in, int8_t **qp, uint8_t **qu, int32_t **xsum) {
    int kpad = (in + 63) & ~63;
    *qp = calloc((size_t)n * kpad, 1);
    *qu = malloc((size_t)n * kpad);
    *xsum = malloc(sizeof(int32_t) * n);
    for (int r = 0; r < n; r++) {
        memcpy(*qp + (size_t)r * kpad, q + (size_t)r * in, (size_t)in);
        int32_t sum = 0;
        for (int i = 0; i < in; i++) sum += q[(size_t)r * in + i];
        (*xsum)[r] = sum;
    }
    for (size_t i = 0; i < (size_t)n * kpad; i++) (*qu)[i] = (uint8_t)(*qp)[i] ^ 0x80u;
    return (ds_qact){.q = *qp, .qu = *qu, .s = s, .xsum = *xsum, .n = n, .kpad = kpad};
}

/* One integer linear through the emulated kernel against the reference: codes in [-127, 127]
 * (the first row alternating +-127 when `extremes`); `split`: panels in two ranges and rows in two
 * ranges, as the dispatcher may cut a call.  Returns 1 when every output is bit-identical. */
static int emu_q_matches(ds_lin_fmt fmt, int out, int in, int n, int split, int extremes) {
    tk_lin t = tk_make(fmt, out, in);
    int8_t *q = malloc((size_t)n * in);
    float *s = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n * out), *yr = malloc(sizeof(float) * n * out);
    for (size_t i = 0; i < (size_t)n * in; i++) q[i] = (int8_t)tk_range(-127, 127);
    if (extremes) for (int i = 0; i < in; i++) q[i] = (int8_t)(i % 2 ? 127 : -127);
    for (int r = 0; r < n; r++) s[r] = (float)tk_range(1, 1000) * 1e-3f;
    size_t bytes;
    ds_packed *P = ds_pack_linear(&t.L, &bytes);
    int8_t *qp; uint8_t *qu; int32_t *xsum;
    ds_qact X = make_qact(q, s, n, in, &qp, &qu, &xsum);
    tk_poison(y, (size_t)n * out);
    int np = P->npanels, pm = split ? np / 2 : 0, rm = split ? n / 2 : 0;
    if (rm > 0) {
        ds_kern_avx512_emu.q_panels(P, &X, 0, rm, 0, pm, y, out);
        ds_kern_avx512_emu.q_panels(P, &X, 0, rm, pm, np, y, out);
    }
    ds_kern_avx512_emu.q_panels(P, &X, rm, n, 0, np, y, out);
    ds_ref_linear_q(&t.L, q, s, n, yr);
    int same = !memcmp(y, yr, sizeof(float) * n * out);
    ds_huge_free(P);
    free(q); free(s); free(y); free(yr); free(qp); free(qu); free(xsum);
    tk_free(&t);
    return same;
}

TEST(emulated_avx512_integer_kernels_equal_reference) {
    static const int outs[] = {1, 15, 16, 17, 33, 64, 65, 100};
    static const int ins[] = {1, 3, 4, 5, 8, 9, 63, 64, 65, 130, 257};
    static const int ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 40};
    int runs = 0;
    for (int trial = 0; trial < 96; trial++) {
        ds_lin_fmt fmt = trial % 2 ? DS_LIN_W4A8 : DS_LIN_W8A8;
        int out = outs[tk_range(0, DS_ARRAY_LEN(outs) - 1)], in = ins[tk_range(0, DS_ARRAY_LEN(ins) - 1)];
        int n = ns[tk_range(0, DS_ARRAY_LEN(ns) - 1)];
        CHECK(emu_q_matches(fmt, out, in, n, 1, trial % 3 == 0), "fmt %d out=%d in=%d n=%d differs", fmt, out, in, n);
        runs++;
    }
    printf("  %d emulated integer linears compared\n", runs);
}

/* Few-row tiles walk several panels side by side from equal parts of the range (decision 181),
 * then the panels left over as neighbours: W4A8 6 at 1-2 rows (decision 178), 4 at 3-4, 3 at 5-8;
 * W8A8 4.  6, 11, 13 and 25 panels run parts 1 to 6 panels apart with 0 to 5 left over, from panel
 * 0 and from the middle (the split call), both formats, 1 to 8 rows. */
TEST(emulated_avx512_few_row_panel_groups_equal_reference) {
    static const int outs[] = {96, 176, 200, 393}, ins[] = {64, 130, 257};
    int runs = 0;
    for (int f = 0; f < 2; f++)
        for (size_t o = 0; o < DS_ARRAY_LEN(outs); o++)
            for (size_t i = 0; i < DS_ARRAY_LEN(ins); i++)
                for (int n = 1; n <= 8; n++) {
                    const ds_lin_fmt fmt = f ? DS_LIN_W8A8 : DS_LIN_W4A8;
                    CHECK(emu_q_matches(fmt, outs[o], ins[i], n, n > 2, n == 1), "fmt %d out=%d in=%d n=%d differs", fmt,
                          outs[o], ins[i], n);
                    runs++;
                }
    printf("  %d emulated few-row linears compared\n", runs);
}

/* The cache blocking of the many-row product: row chunks (513 rows), input blocks with partial sums
 * parked and resumed (inputs past 512 for W8A8 and 1024 for W4A8), 12-row tiles and their tails. */
TEST(emulated_avx512_blocked_products_equal_reference) {
    static const struct { int out, in, n; } shapes[] = {
        {50, 1100, 13}, {33, 2085, 40}, {50, 1100, 200}, {33, 2085, 513}, {17, 4096, 25}, {96, 520, 12}};
    int runs = 0;
    for (size_t k = 0; k < DS_ARRAY_LEN(shapes); k++)
        for (int f = 0; f < 2; f++) {
            int out = shapes[k].out, in = shapes[k].in, n = shapes[k].n;
            CHECK(emu_q_matches(f ? DS_LIN_W4A8 : DS_LIN_W8A8, out, in, n, 0, 0), "fmt %d out=%d in=%d n=%d differs", f,
                  out, in, n);
            runs++;
        }
    printf("  %d emulated blocked products compared\n", runs);
}

TEST(emulated_avx512_float_kernels_within_tolerance) {
    double worst = 0;
    for (int trial = 0; trial < 24; trial++) {
        ds_lin_fmt fmt = trial % 2 ? DS_LIN_F32 : DS_LIN_BF16;
        int out = tk_range(1, 23), in = tk_range(1, 300), n = tk_range(1, 4);
        tk_lin t = tk_make(fmt, out, in);
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x, (size_t)n * in, 1.f);
        int xstride = (in + 15) & ~15;
        double *xd = calloc((size_t)n * xstride, sizeof(double));
        for (int r = 0; r < n; r++)
            for (int i = 0; i < in; i++) xd[(size_t)r * xstride + i] = ds_bf16_to_f32(x[(size_t)r * in + i]);
        float *y = malloc(sizeof(float) * n * out), *yr = malloc(sizeof(float) * n * out);
        tk_poison(y, (size_t)n * out);
        ds_kern_avx512_emu.f_rows(&t.L, xd, xstride, n, 0, out, y);
        ds_ref_linear_f(&t.L, x, n, yr);
        int bad = 0;
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                double mag;
                tk_oracle_f(&t, x + (size_t)r * in, o, &mag);
                double d = fabs((double)y[(size_t)r * out + o] - yr[(size_t)r * out + o]);
                if (isnan(y[(size_t)r * out + o]) || d > 1e-6 * mag + 1e-30) bad++;
                if (mag > 0 && d / mag > worst) worst = d / mag;
            }
        CHECK(bad == 0, "fmt %d out=%d in=%d n=%d: %d outputs off", fmt, out, in, n, bad);
        free(x); free(xd); free(y); free(yr);
        tk_free(&t);
    }
    printf("  worst float rel diff %.3g\n", worst);
}

/* Fast tier: the FMA and the vdpbf16ps (emulated as documented: odd product first, one rounding
 * each, DAZ/FTZ) kernels against the scalar reference, bit for bit, split over output ranges as
 * the dispatcher may, including tiny values that the flush rule removes before DAZ could act. */
TEST(emulated_avx512_fast_float_kernels_equal_reference) {
    static const int ins[] = {1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 100, 130, 2085}; /* 2085: several input blocks */
    int runs = 0;
    for (int trial = 0; trial < 45; trial++) {
        int kind = trial % 3; /* DS_FF_F32, DS_FF_BF16_FMA, DS_FF_BF16_DOT */
        ds_lin_fmt fmt = kind == DS_FF_F32 ? DS_LIN_F32 : DS_LIN_BF16;
        int out = tk_range(1, 29), in = ins[tk_range(0, DS_ARRAY_LEN(ins) - 1)], n = 1 + trial / 3 % 9; /* every kind at 1-9 rows; halves of 6+ outputs: the 6-output groups */
        if (trial % 5 == 4) in = 2085; /* every kind meets long rows */
        tk_lin t = tk_make(fmt, out, in);
        t.L.numerics = DS_NUMERICS_FAST;
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        tk_fill_bf16(x, (size_t)n * in, 1.f);
        if (trial % 4 == 1 && fmt == DS_LIN_BF16) { /* tiny and subnormal values */
            for (int i = 0; i < out * in; i += 3) ((ds_bf16 *)t.w)[i] = ds_f32_to_bf16(i % 2 ? 0x1p-130f : 0x1p-52f);
            for (int i = 0; i < n * in; i += 4) x[i] = ds_f32_to_bf16(i % 2 ? -0x1p-128f : 0x1p-49f);
        }
        size_t bytes;
        ds_ffw *W = ds_ff_pack(&t.L, &bytes);
        void *buf = malloc(sizeof(float) * (size_t)n * (((in + 31) & ~31) + 32));
        ds_ffact X;
        ds_ff_prepare_act(kind, 0, x, n, in, buf, &X);
        float *y = malloc(sizeof(float) * n * out), *yr = malloc(sizeof(float) * n * out);
        tk_poison(y, (size_t)n * out);
        int om = out / 2;
        for (int part = 0; part < 2; part++) {
            int o0 = part ? om : 0, o1 = part ? out : om;
            if (o0 >= o1) continue;
            if (kind == DS_FF_BF16_DOT) ds_kern_avx512_emu.ff_dot(W, &X, o0, o1, y, out);
            else ds_kern_avx512_emu.ff_rows(W, &X, o0, o1, y, out);
        }
        ds_ref_linear_f(&t.L, x, n, yr);
        CHECK(!memcmp(y, yr, sizeof(float) * n * out), "kind %d out=%d in=%d n=%d differs", kind, out, in, n);
        runs++;
        free(x); free(buf); free(y); free(yr);
        ds_huge_free(W);
        tk_free(&t);
    }
    printf("  %d emulated fast-tier float linears compared\n", runs);
}

/* The attention scores on vdpbf16ps (ds_fast_pair_scores8) against the pair order written out per
 * lane (flush rule, odd product first, the combination tree of the fast linears), bit for bit: key
 * counts odd and even (the pair loop's last single key), tiny and subnormal values, wide magnitudes. */
TEST(emulated_avx512_attention_scores_equal_the_pair_order) {
    enum { N = 96, NK = 13, R = 8 };
    ds_bf16 q[R * N], kmem[NK * N];
    const ds_bf16 *keys[NK];
    int bad = 0, runs = 0;
    for (int trial = 0; trial < 12; trial++) {
        const int nk = 1 + (trial * 5) % NK;
        tk_fill_bf16(kmem, NK * N, trial % 3 ? 1.f : 1e4f);
        tk_fill_bf16(q, R * N, 1.f);
        for (int i = trial % 4; i < NK * N; i += 7) kmem[i] = ds_f32_to_bf16(i % 2 ? 0x1p-130f : 0x1p-52f);
        for (int i = 0; i < R * N; i++)   /* the queries arrive flushed (attn_tile.c lays them out so) */
            if (ds_ff_bf16_value(q[i]) == 0.0f) q[i] = 0;
        for (int u = 0; u < NK; u++) keys[u] = kmem + (size_t)u * N;
        float out[NK * R];
        tk_poison(out, NK * R);
        ds_kern_avx512_emu.pair_scores8(q, N, keys, nk, out);
        for (int u = 0; u < nk; u++)
            for (int r = 0; r < R; r++) {
                float l[16] = {0};
                for (int i0 = 0; i0 < N; i0 += 32)
                    for (int j = 0; j < 16; j++)
                        for (int e = 1; e >= 0; e--)
                            l[j] = l[j] + ds_ff_bf16_value(q[r * N + i0 + 2 * j + e]) * ds_ff_bf16_value(keys[u][i0 + 2 * j + e]);
                const float want = ds_ff_reduce16(l);
                bad += memcmp(&want, &out[u * R + r], sizeof want) != 0;
                runs++;
            }
    }
    printf("  %d emulated attention scores compared\n", runs);
    CHECK(bad == 0, "%d of %d scores differ from the pair order", bad, runs);
}

RUN_ALL()
