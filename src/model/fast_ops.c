/* Fast-tier float math (see fast_ops.h for the contract and docs/NUMERICS.md "Fast tier").
 *
 * Why portable C and not intrinsics: the evaluation order is what must not change between hosts, and
 * in these loops the order is written in the source — 32 independent fp32 lanes (held as four
 * 8-wide GCC vector-extension values in the dot products), a fixed tree, or an element-wise update —
 * so the compiler can only map lanes to vector elements.  The hot
 * loops are compiled as clones for AVX-512, AVX2 and baseline x86-64 (selected by the loader at
 * start-up); -ffp-contract=off forbids fused multiply-adds in all of them, and nothing here calls
 * libm except sqrtf (correctly rounded by IEEE 754), so every clone gives the same bits. */
#include "model/fast_ops.h"
#include "model/fast_vec.h"
#include <math.h>

#define LANES DS_FAST_LANES

/* ds_f32_to_bf16 without a branch (same bits: NaN stays a quiet NaN, otherwise round to nearest
 * even), so that element-wise loops storing bf16 vectorize. */
static inline ds_bf16 to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (ds_bf16)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static inline float tree(float *l) { return ds_ftree(l); }

/* The 32 lanes as four 8-wide vectors (GCC vector extensions: lowered to whatever the clone's ISA
 * offers, element-wise, so the bits do not depend on it): v[q] holds lanes 8q..8q+7.  The tree of
 * ds_ftree in vector form: l[j] += l[j+16] is v0+v2, v1+v3; l[j] += l[j+8] adds those two; the last
 * three levels run on the remaining eight lanes in ds_ftree's order. */
static inline __attribute__((always_inline)) float vtree(v8f v0, v8f v1, v8f v2, v8f v3, float *l) {
    const v8f s = (v0 + v2) + (v1 + v3);
    memcpy(l, &s, sizeof s);
    for (int j = 0; j < 4; j++) l[j] = l[j] + l[j + 4];
    l[0] = l[0] + l[2];
    l[1] = l[1] + l[3];
    return l[0] + l[1];
}
/* Lanes of a tail (n mod 32 elements, in index order) added to the vectors lane by lane. */
static inline __attribute__((always_inline)) float vfinish(v8f v0, v8f v1, v8f v2, v8f v3, const float *tail, int nt) {
    float l[LANES];
    memcpy(l, &v0, sizeof v0);
    memcpy(l + 8, &v1, sizeof v1);
    memcpy(l + 16, &v2, sizeof v2);
    memcpy(l + 24, &v3, sizeof v3);
    for (int j = 0; j < nt; j++) l[j] = l[j] + tail[j];
    return vtree(ds_v8_ld_f(l), ds_v8_ld_f(l + 8), ds_v8_ld_f(l + 16), ds_v8_ld_f(l + 24), l);
}

static _Atomic int g_tile_width;   /* 0: by the CPU, 1: narrow, 2: wide */
void ds_fast_tile_width(int width) { g_tile_width = width; }
int ds_fast_wide_tiles(void) {
    const int w = g_tile_width;
    if (w) return w == 2;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

DS_CLONES float ds_fdot_bb(const ds_bf16 *a, const ds_bf16 *b, int n) {
    v8f v0 = {0}, v1 = {0}, v2 = {0}, v3 = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        v0 = v0 + ds_v8_ld_b(a + i) * ds_v8_ld_b(b + i);
        v1 = v1 + ds_v8_ld_b(a + i + 8) * ds_v8_ld_b(b + i + 8);
        v2 = v2 + ds_v8_ld_b(a + i + 16) * ds_v8_ld_b(b + i + 16);
        v3 = v3 + ds_v8_ld_b(a + i + 24) * ds_v8_ld_b(b + i + 24);
    }
    float t[LANES];
    const int nt = n - i;
    for (int j = 0; j < nt; j++) t[j] = ds_bf16_to_f32(a[i + j]) * ds_bf16_to_f32(b[i + j]);
    return vfinish(v0, v1, v2, v3, t, nt);
}

/* The pair order (fast_ops.h): lanes 0-7 in l0, 8-15 in l1; a partial last block through zero-padded
 * copies (its missing pairs add +0, which changes no lane: a lane is never -0). */
DS_CLONES float ds_fdot_bb_pair(const ds_bf16 *a, const ds_bf16 *b, int n) {
    v8f l0 = {0}, l1 = {0};
    int i = 0;
    for (; i < n; i += 32) {
        _Alignas(64) ds_bf16 ta[32], tb[32];
        const ds_bf16 *pa = a + i, *pb = b + i;
        if (n - i < 32) {
            memset(ta, 0, sizeof ta);
            memset(tb, 0, sizeof tb);
            memcpy(ta, pa, sizeof(ds_bf16) * (size_t)(n - i));
            memcpy(tb, pb, sizeof(ds_bf16) * (size_t)(n - i));
            pa = ta, pb = tb;
        }
        v8f ao0, ae0, ao1, ae1, bo0, be0, bo1, be1;
        ds_v8_ld_pairs(pa, &ao0, &ae0);
        ds_v8_ld_pairs(pa + 16, &ao1, &ae1);
        ds_v8_ld_pairs(pb, &bo0, &be0);
        ds_v8_ld_pairs(pb + 16, &bo1, &be1);
        l0 = l0 + ao0 * bo0;
        l0 = l0 + ae0 * be0;
        l1 = l1 + ao1 * bo1;
        l1 = l1 + ae1 * be1;
    }
    float l[16];
    memcpy(l, &l0, sizeof l0);
    memcpy(l + 8, &l1, sizeof l1);
    return ds_pair_tree(l);
}

/* ds_fdot_fb's order for n = 32 (each lane holds 0 + one product; then vtree), with the 32 outputs
 * as the vector dimension: every step below is the same IEEE operation on each output's operands. */
DS_CLONES void ds_frot32_fb(const float *Bt, const ds_bf16 *x, float *o) {
    float z[32][32], s[8][32];
    for (int j = 0; j < 32; j++) {
        const float xj = ds_bf16_to_f32(x[j]);
#pragma omp simd
        for (int i = 0; i < 32; i++) z[j][i] = 0.0f + Bt[32 * j + i] * xj;
    }
    for (int j = 0; j < 8; j++)   /* lanes j, j+16 (v0 + v2) and j+8, j+24 (v1 + v3), then their sum */
#pragma omp simd
        for (int i = 0; i < 32; i++) s[j][i] = (z[j][i] + z[j + 16][i]) + (z[j + 8][i] + z[j + 24][i]);
    for (int j = 0; j < 4; j++)
#pragma omp simd
        for (int i = 0; i < 32; i++) s[j][i] = s[j][i] + s[j + 4][i];
#pragma omp simd
    for (int i = 0; i < 32; i++) o[i] = (s[0][i] + s[2][i]) + (s[1][i] + s[3][i]);
}

DS_CLONES float ds_fdot_fb(const float *a, const ds_bf16 *b, int n) {
    v8f v0 = {0}, v1 = {0}, v2 = {0}, v3 = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        v0 = v0 + ds_v8_ld_f(a + i) * ds_v8_ld_b(b + i);
        v1 = v1 + ds_v8_ld_f(a + i + 8) * ds_v8_ld_b(b + i + 8);
        v2 = v2 + ds_v8_ld_f(a + i + 16) * ds_v8_ld_b(b + i + 16);
        v3 = v3 + ds_v8_ld_f(a + i + 24) * ds_v8_ld_b(b + i + 24);
    }
    float t[LANES];
    const int nt = n - i;
    for (int j = 0; j < nt; j++) t[j] = a[i + j] * ds_bf16_to_f32(b[i + j]);
    return vfinish(v0, v1, v2, v3, t, nt);
}

DS_CLONES float ds_fdot_ff(const float *a, const float *b, int n) {
    v8f v0 = {0}, v1 = {0}, v2 = {0}, v3 = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES) {
        v0 = v0 + ds_v8_ld_f(a + i) * ds_v8_ld_f(b + i);
        v1 = v1 + ds_v8_ld_f(a + i + 8) * ds_v8_ld_f(b + i + 8);
        v2 = v2 + ds_v8_ld_f(a + i + 16) * ds_v8_ld_f(b + i + 16);
        v3 = v3 + ds_v8_ld_f(a + i + 24) * ds_v8_ld_f(b + i + 24);
    }
    float t[LANES];
    const int nt = n - i;
    for (int j = 0; j < nt; j++) t[j] = a[i + j] * b[i + j];
    return vfinish(v0, v1, v2, v3, t, nt);
}

float ds_fsum(const float *a, int n) {
    float l[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 32
        for (int j = 0; j < LANES; j++) l[j] = l[j] + a[i + j];
    for (int j = 0; i + j < n; j++) l[j] = l[j] + a[i + j];
    return tree(l);
}

DS_CLONES void ds_faxpy_bf16(float *restrict acc, float p, const ds_bf16 *restrict k, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) acc[i] = acc[i] + p * ds_bf16_to_f32(k[i]);
}

/* exp(x) = 2^k · e^r, k = round(x·log2 e) (the 1.5·2^23 trick rounds to nearest even in fp32),
 * r = (x − k·ln2_hi) − k·ln2_lo (ln2_hi has 9 significant bits, so k·ln2_hi is exact), e^r by
 * the Taylor polynomial of degree 7 on |r| ≤ 0.347 (truncation < 1e-8 relative).  FEXP_CORE is
 * that reduction and polynomial as one text for the scalar and the 8-lane form (T = float or
 * v8f), so the two cannot drift apart: it sets kf = k and p = e^r from the clamped input xc. */
#define FEXP_CORE(T, xc, kf, p)                                          \
    const T kf = ((xc) * 1.44269504f + 12582912.0f) - 12582912.0f;      \
    const T r_ = ((xc) - kf * 0.693359375f) - kf * -2.12194440e-4f;     \
    T p = (T){0} + 1.0f / 5040.0f;                                       \
    p = p * r_ + 1.0f / 720.0f;                                          \
    p = p * r_ + 1.0f / 120.0f;                                          \
    p = p * r_ + 1.0f / 24.0f;                                           \
    p = p * r_ + 1.0f / 6.0f;                                            \
    p = p * r_ + 0.5f;                                                   \
    p = p * r_ + 1.0f;                                                   \
    p = p * r_ + 1.0f

static inline float fexp_inline(float x) {
    float xc = x > 88.0f ? 88.0f : x;
    xc = xc < -87.0f ? -87.0f : xc;
    xc = xc == xc ? xc : 0.0f;   /* NaN: keep the float->int conversion below defined; NaN is returned */
    FEXP_CORE(float, xc, kf, p);
    uint32_t bits = (uint32_t)((int32_t)kf + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    float y = p * s;
    y = x < -87.0f ? 0.0f : y;
    return x == x ? y : x;
}

float ds_fexp(float x) { return fexp_inline(x); }

/* fexp_inline on 8 lanes: the same operations in the same order, each clamp and NaN rule as a
 * lane select, so every lane has the scalar function's bits.  GCC does not vectorize the scalar
 * form (its selects become branches): softmax over a 640-key list spent as long in it as in a
 * quarter of the attention products. */
typedef int32_t v8i __attribute__((vector_size(32)));
DS_AI v8f vsel(v8i m, v8f a, v8f b) { return (v8f)(((v8u)m & (v8u)a) | (~(v8u)m & (v8u)b)); }
DS_AI v8f fexp_v8(v8f x) {
    const v8f zero = (v8f){0};
    v8f xc = vsel(x > 88.0f, zero + 88.0f, x);
    xc = vsel(xc < -87.0f, zero - 87.0f, xc);
    xc = vsel(xc == xc, xc, zero);
    FEXP_CORE(v8f, xc, kf, p);
    const v8i bits = (__builtin_convertvector(kf, v8i) + 127) << 23;
    v8f y = p * (v8f)bits;
    y = vsel(x < -87.0f, zero, y);
    return vsel(x == x, y, x);
}

DS_CLONES void ds_fexp_sub(float *x, float sub, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f v;
        memcpy(&v, x + i, sizeof v);
        v = fexp_v8(v - sub);
        memcpy(x + i, &v, sizeof v);
    }
    for (; i < n; i++) x[i] = fexp_inline(x[i] - sub);
}

/* ---- building blocks ---- */

DS_CLONES void ds_rmsnorm_bf16_fast(const ds_bf16 *x, const float *w, int n, double eps, ds_bf16 *y) {
    const float ss = ds_fdot_bb(x, x, n);
    const float rs = 1.0f / sqrtf(ss / (float)n + (float)eps);
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] = to_bf16(ds_bf16_to_f32(x[i]) * rs * w[i]);
}

void ds_rope_apply_fast(ds_bf16 *v, int len, int rd, const float *cs, int inverse) {
    ds_bf16 *tail = v + (len - rd);
    const float sg = inverse ? -1.0f : 1.0f;     /* exact: inverse rotation = angle negated */
    for (int i = 0; i < rd / 2; i++) {
        const float a = ds_bf16_to_f32(tail[2 * i]), b = ds_bf16_to_f32(tail[2 * i + 1]);
        const float c = cs[2 * i], s = sg * cs[2 * i + 1];
        tail[2 * i] = ds_f32_to_bf16(a * c - b * s);
        tail[2 * i + 1] = ds_f32_to_bf16(a * s + b * c);
    }
}

/* 2 mixes x up to 4 rows of ds_fdot_fb in one pass: every accumulator takes that function's
 * operations (0 + products, lane k mod 32, the tail added lane by lane, vtree).  The 32 lanes are
 * held as two 16-wide vectors here (lanes 0-15, 16-31: the same lanes, so the same bits; one zmm
 * each on the AVX-512 clone). */
static inline __attribute__((always_inline)) float finish16(v16f lo, v16f hi, const float *w, const ds_bf16 *x, int nt) {
    float l[LANES], t[LANES];
    memcpy(l, &lo, sizeof lo);
    memcpy(l + 16, &hi, sizeof hi);
    for (int j = 0; j < nt; j++) t[j] = w[j] * ds_bf16_to_f32(x[j]);
    return vfinish(ds_v8_ld_f(l), ds_v8_ld_f(l + 8), ds_v8_ld_f(l + 16), ds_v8_ld_f(l + 24), t, nt);
}

/* R activation rows (xs apart) x the weight rows W0, W1 (W1 may equal W0: that mix is then computed
 * twice and stored once); d[m·R + r].  Why 4 rows: the weights (2 x HC·D fp32, 64 KiB on mini) come
 * from L2, the rows' bf16 from L1; each weight chunk loaded serves R rows, and at 2 rows those loads
 * bound the tile (a site's mix dots per row, one thread, 2 x 2 -> 4 x 2: 5.5 -> 3.2 us; 4 x 3 was no
 * faster, 6 x 2 and 8 x 1 slower).  16 accumulators + 8 row vectors stay in registers (AVX-512). */
static inline __attribute__((always_inline)) void mix_tile(const float *W0, const float *W1, const ds_bf16 *X, size_t xs,
                                                          int n, const int R, float *d) {
    v16f a[2][4], b[2][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) a[0][r] = b[0][r] = a[1][r] = b[1][r] = (v16f){0};
    int k = 0;
    for (; k + LANES <= n; k += LANES) {
        v16f xa[4], xb[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            xa[r] = ds_v16_ld_b(X + (size_t)r * xs + k);
            xb[r] = ds_v16_ld_b(X + (size_t)r * xs + k + 16);
        }
        /* 2 KiB ahead in both weight rows (into L2): a site's rows are not in cache at a decode step
         * (every other weight of the layer streamed through since), and two streams per task
         * left the memory idle (decision 189) */
        __builtin_prefetch(W0 + k + 512, 0, 2);
        __builtin_prefetch(W0 + k + 528, 0, 2);
        __builtin_prefetch(W1 + k + 512, 0, 2);
        __builtin_prefetch(W1 + k + 528, 0, 2);
        const v16f wa0 = ds_v16_ld_f(W0 + k), wb0 = ds_v16_ld_f(W0 + k + 16);
        const v16f wa1 = ds_v16_ld_f(W1 + k), wb1 = ds_v16_ld_f(W1 + k + 16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            a[0][r] = a[0][r] + wa0 * xa[r];
            b[0][r] = b[0][r] + wb0 * xb[r];
            a[1][r] = a[1][r] + wa1 * xa[r];
            b[1][r] = b[1][r] + wb1 * xb[r];
        }
    }
    const int nt = n - k;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        d[r] = finish16(a[0][r], b[0][r], W0 + k, X + (size_t)r * xs + k, nt);
        d[R + r] = finish16(a[1][r], b[1][r], W1 + k, X + (size_t)r * xs + k, nt);
    }
}

DS_CLONES void ds_hc_mix_dots_fast(const ds_hc_params *p, const ds_bf16 *X, int nr, int i0, int ni, float *dots) {
    const int n = p->hc * p->dim, nmix = (2 + p->hc) * p->hc;
    const float *W0 = p->fn + (size_t)i0 * n, *W1 = ni == 2 ? W0 + n : W0;
    float d[8];
    if (ds_fast_wide_tiles()) {
        switch (nr) {
        case 4: mix_tile(W0, W1, X, (size_t)n, n, 4, d); break;
        case 3: mix_tile(W0, W1, X, (size_t)n, n, 3, d); break;
        case 2: mix_tile(W0, W1, X, (size_t)n, n, 2, d); break;
        default: mix_tile(W0, W1, X, (size_t)n, n, 1, d); break;
        }
    } else {   /* without AVX-512 the 16-wide tile lives in memory (13x slower than these, same bits) */
        for (int r = 0; r < nr; r++) {
            d[r] = ds_fdot_fb(W0, X + (size_t)r * n, n);
            d[nr + r] = ni == 2 ? ds_fdot_fb(W1, X + (size_t)r * n, n) : d[r];
        }
    }
    for (int r = 0; r < nr; r++) {
        dots[(size_t)r * nmix + i0] = d[r];
        if (ni == 2) dots[(size_t)r * nmix + i0 + 1] = d[nr + r];
    }
}

/* Row softmax (+eps), then alternating column/row normalizations, all sums in index order. */
void ds_hc_sinkhorn_fast(float *C, int hc, int iters, float eps) {
    for (int i = 0; i < hc; i++) {
        float *r = C + i * hc;
        float mx = r[0];
        for (int j = 1; j < hc; j++) if (r[j] > mx) mx = r[j];
        float den = 0.0f;
        for (int j = 0; j < hc; j++) {
            r[j] = ds_fexp(r[j] - mx);
            den = den + r[j];
        }
        for (int j = 0; j < hc; j++) r[j] = r[j] / den + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int i = 0; i < hc; i++) {
                float s = 0.0f;
                for (int j = 0; j < hc; j++) s = s + C[i * hc + j];
                const float t = s + eps;
                for (int j = 0; j < hc; j++) C[i * hc + j] /= t;
            }
        for (int j = 0; j < hc; j++) {
            float s = 0.0f;
            for (int i = 0; i < hc; i++) s = s + C[i * hc + j];
            const float t = s + eps;
            for (int i = 0; i < hc; i++) C[i * hc + j] /= t;
        }
    }
}

void ds_hc_mixes_from_dots_fast(const ds_hc_params *p, const ds_bf16 *X, const float *dots, ds_hc_mix *out) {
    const int hc = p->hc, n = hc * p->dim, nmix = (2 + hc) * hc;
    const float ss = ds_fdot_bb(X, X, n);
    const float rs = 1.0f / sqrtf(ss / (float)n + (float)p->norm_eps);
    float m[(2 + DS_HC_MAX) * DS_HC_MAX];
    for (int i = 0; i < nmix; i++) m[i] = dots[i] * rs;
    const float s0 = p->scale[0], s1 = p->scale[1], s2 = p->scale[2];
    for (int k = 0; k < hc; k++) {
        out->pre[k] = ds_fsigmoid(m[k] * s0 + p->base[k]) + p->hc_eps;
        out->post[k] = 2.0f * ds_fsigmoid(m[hc + k] * s1 + p->base[hc + k]);
    }
    for (int i = 0; i < hc * hc; i++) out->comb[i] = m[2 * hc + i] * s2 + p->base[2 * hc + i];
    ds_hc_sinkhorn_fast(out->comb, hc, p->iters, p->hc_eps);
}

/* The collapse and the expand on chunks of W channels held in registers: W = 16 where the CPU has
 * AVX-512 (ds_fast_wide_tiles), else 8 (GCC keeps 64-byte vectors in memory without 512-bit
 * registers: 10x slower than the loops these replace on an AVX2 host).  Both widths do the same
 * operations per channel, so the same bits.  to_bf16_vW is to_bf16 lane by lane. */
#define HC_CHUNKS(W, VF, VU, VH)                                                                      \
    static inline __attribute__((always_inline)) VH to_bf16_v##W(VF f) {                             \
        VU u;                                                                                         \
        memcpy(&u, &f, sizeof u);                                                                     \
        const VU r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;                   \
        const VU nan = (VU)((u & 0x7fffffffu) > 0x7f800000u);                                         \
        return __builtin_convertvector((nan & q) | (~nan & r), VH);                                   \
    }                                                                                                 \
    /* y[d] = bf16(0 + Σ_k w[k]·X[k][d]) in copy order, for the chunks of [0, dim - dim % W) */        \
    static inline __attribute__((always_inline)) void collapse_chunks##W(const ds_bf16 *X, const float *w, int hc,     \
                                                                        int dim, ds_bf16 *y) {        \
        for (int d0 = 0; d0 + W <= dim; d0 += W) {                                                    \
            VF acc = (VF){0};                                                                         \
            for (int k = 0; k < hc; k++) acc = acc + w[k] * ds_v##W##_ld_b(X + (size_t)k * dim + d0); \
            const VH h = to_bf16_v##W(acc);                                                           \
            memcpy(y + d0, &h, sizeof h);                                                             \
        }                                                                                             \
    }                                                                                                 \
    /* X[j][d] = bf16(post_j·y[d] + Σ_i comb[i][j]·R[i][d]), i ascending, for the chunks of           \
     * [0, dim - dim % W): each chunk of y and of the HC copies of R widened once for all HC outputs   \
     * (HC a constant per instance, so the accumulators are registers), every source of a chunk read  \
     * before its outputs are written, so R may be X itself */                                        \
    static inline __attribute__((always_inline)) void expand_chunks##W(const ds_bf16 *y, const ds_bf16 *R,             \
                                                                      const ds_hc_mix *mx, const int HC, int dim,     \
                                                                      ds_bf16 *X) {                   \
        for (int d0 = 0; d0 + W <= dim; d0 += W) {                                                    \
            VF acc[DS_HC_MAX];                                                                        \
            const VF yv = ds_v##W##_ld_b(y + d0);                                                     \
            _Pragma("GCC unroll 8") for (int j = 0; j < HC; j++) acc[j] = mx->post[j] * yv;           \
            _Pragma("GCC unroll 8") for (int i = 0; i < HC; i++) {                                    \
                const VF rv = ds_v##W##_ld_b(R + (size_t)i * dim + d0);                               \
                _Pragma("GCC unroll 8") for (int j = 0; j < HC; j++) acc[j] = acc[j] + mx->comb[i * HC + j] * rv; \
            }                                                                                         \
            _Pragma("GCC unroll 8") for (int j = 0; j < HC; j++) {                                    \
                const VH h = to_bf16_v##W(acc[j]);                                                    \
                memcpy(X + (size_t)j * dim + d0, &h, sizeof h);                                       \
            }                                                                                         \
        }                                                                                             \
    }
HC_CHUNKS(8, v8f, v8u, v8h)
HC_CHUNKS(16, v16f, v16u, v16h)

DS_CLONES void ds_hc_collapse_fast(const ds_bf16 *X, const float *w, int hc, int dim, ds_bf16 *y) {
    const int wide = ds_fast_wide_tiles(), W = wide ? 16 : 8;
    if (wide) collapse_chunks16(X, w, hc, dim, y);
    else collapse_chunks8(X, w, hc, dim, y);
    for (int d0 = dim - dim % W; d0 < dim; d0++) {   /* the tail, channel by channel */
        float acc = 0.0f;
        for (int k = 0; k < hc; k++) acc = acc + w[k] * ds_bf16_to_f32(X[(size_t)k * dim + d0]);
        y[d0] = to_bf16(acc);
    }
}

#define EXPAND_CASE(W, HC) case HC: expand_chunks##W(y, R, mx, HC, dim, X); break
#define EXPAND_CASES(W)                                                                                        \
    switch (hc) {                                                                                              \
        EXPAND_CASE(W, 1); EXPAND_CASE(W, 2); EXPAND_CASE(W, 3); EXPAND_CASE(W, 4);                             \
        EXPAND_CASE(W, 5); EXPAND_CASE(W, 6); EXPAND_CASE(W, 7);                                                \
    default: expand_chunks##W(y, R, mx, 8, dim, X); break;   /* hc == 8: model.c refuses more than DS_HC_MAX */ \
    }

DS_CLONES void ds_hc_expand_fast(const ds_bf16 *y, const ds_bf16 *R, const ds_hc_mix *mx, int hc, int dim, ds_bf16 *X) {
    const int wide = ds_fast_wide_tiles(), W = wide ? 16 : 8;
    if (wide) EXPAND_CASES(16)
    else EXPAND_CASES(8)
    for (int d0 = dim - dim % W; d0 < dim; d0++) {   /* the tail, channel by channel (sources read first) */
        float acc[DS_HC_MAX];
        for (int j = 0; j < hc; j++) acc[j] = mx->post[j] * ds_bf16_to_f32(y[d0]);
        for (int i = 0; i < hc; i++)
            for (int j = 0; j < hc; j++) acc[j] = acc[j] + mx->comb[i * hc + j] * ds_bf16_to_f32(R[(size_t)i * dim + d0]);
        for (int j = 0; j < hc; j++) X[(size_t)j * dim + d0] = to_bf16(acc[j]);
    }
}
