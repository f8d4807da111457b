/* The official runtime's activation numerics (src/kernels/official_e4m3.c, `--activations e4m3`).
 *
 * Independent oracles, written here from CHECKPOINT.md §14 and MODEL.md Appendix C rather than from
 * the kernel's bit manipulation:
 *   - the block exponent is the smallest k with 2^k >= fp32(amax · fp32(1/448)) (amax floored at
 *     1e-4), found by counting up; each value is rounded to the nearest of the 127 finite E4M3
 *     magnitudes by scanning them (ties to the even code), saturating at 448;
 *   - the exact MXFP4 route equals the exact sum of every weight·activation product (each an integer
 *     times a power of two, summed in __int128 above the smallest exponent), rounded once to float64
 *     and then to fp32, whenever the block exponents span <= 24; wider rows equal the float64 sum of
 *     the exact block sums with blocks ascending;
 *   - the fast MXFP4 route and both FP8 tiers equal the bf16 linears of the matrices decoded here,
 *     run on the quantized rows, on every kernel path this CPU runs, bit for bit. */
#include "check.h"
#include "test_kernels_util.h"
#include "kernels/kern_official.h"
#include "tools/quant_fp8.h"
#include <math.h>
#include <stdio.h>

/* ---- independent quantizer ---- */

static int oracle_block_exp(float amax) {
    float a = amax > 1e-4f ? amax : 1e-4f;
    float v = a * (1.0f / 448.0f);
    int k = -160;
    while (ldexp(1.0, k) < (double)v) k++;
    return k;
}

/* Nearest finite E4M3 magnitude to t >= 0 (ties to the even code), saturating. */
static double oracle_e4m3(double t) {
    int best = 0;
    for (int c = 1; c < 0x7f; c++) {
        double d = fabs(ds_e4m3_to_f32((uint8_t)c) - t), db = fabs(ds_e4m3_to_f32((uint8_t)best) - t);
        if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return ds_e4m3_to_f32((uint8_t)best);
}

static void oracle_units(const ds_bf16 *x, int k, int32_t *u, int16_t *kb) {
    for (int b = 0; b * 32 < k; b++) {
        int i1 = b * 32 + 32 < k ? b * 32 + 32 : k;
        float amax = 0;
        for (int i = b * 32; i < i1; i++) amax = fmaxf(amax, fabsf(ds_bf16_to_f32(x[i])));
        kb[b] = (int16_t)oracle_block_exp(amax);
        for (int i = b * 32; i < i1; i++) {
            double v = ds_bf16_to_f32(x[i]);
            double q = oracle_e4m3(fabs(v) * ldexp(1.0, -kb[b]));
            u[i] = (int32_t)(q * 512.0) * (v < 0 ? -1 : 1);
        }
    }
}

/* Rows whose blocks test the corners: ties between codes, subnormal codes, saturation, zero and
 * tiny blocks (the 1e-4 floor), mixed magnitudes. */
static void fill_rows(ds_bf16 *x, int n, int k, int trial) {
    tk_fill_bf16(x, (size_t)n * k, trial % 2 ? 3.0f : 0.02f);
    for (int i = 0; i < n * k; i++) {
        int kind = (int)(tk_rand() % 11);
        float v = ds_bf16_to_f32(x[i]);
        if (kind == 0) v = 0.0f;
        else if (kind == 1) v = ldexpf((float)tk_range(-31, 31) + 0.5f, tk_range(-12, 2));   /* halfway cases */
        else if (kind == 2) v = ldexpf((float)tk_range(-9, 9), -30);                         /* below the floor */
        else if (kind == 3 && trial % 3 == 0) v = ldexpf(1.0f + (float)tk_range(0, 7) / 8.0f, 20);   /* large */
        x[i] = ds_f32_to_bf16(v);
    }
    if (trial % 4 == 0)
        for (int i = 0; i < 32 && i < k; i++) x[i] = 0;   /* an all-zero block */
}

TEST(e4m3_units_follow_the_table_rounding) {
    static const int ks[] = {32, 45, 64, 100, 256};
    int blocks = 0;
    for (int trial = 0; trial < 60; trial++) {
        int k = ks[trial % 5], nb = (k + 31) / 32;
        ds_bf16 x[256];
        int32_t u[256], uo[256];
        int16_t kb[8], kbo[8];
        fill_rows(x, 1, k, trial);
        ds_e4m3_row_units(x, k, u, kb);
        oracle_units(x, k, uo, kbo);
        for (int b = 0; b < nb; b++) CHECK(kb[b] == kbo[b], "trial %d block %d: exponent %d vs %d", trial, b, kb[b], kbo[b]);
        for (int i = 0; i < k; i++)
            CHECK(u[i] == uo[i], "trial %d i %d (x %.9g, kb %d): units %d vs %d", trial, i, (double)ds_bf16_to_f32(x[i]),
                  kbo[i / 32], u[i], uo[i]);
        blocks += nb;
        ds_bf16 xq[256];
        ds_e4m3_rows_bf16(x, 1, k, xq);
        for (int i = 0; i < k; i++)
            CHECK(ds_bf16_to_f32(xq[i]) == (float)ldexp((double)uo[i], kbo[i / 32] - 9), "trial %d i %d: bf16 row value", trial, i);
    }
    printf("  %d blocks checked\n", blocks);
}

/* ---- MXFP4 ---- */

typedef struct { ds_linear L; uint8_t *codes, *sc; } mx_lin;

static mx_lin mx_make(int out, int in, int emin, int emax, ds_numerics nm) {
    mx_lin m;
    m.codes = malloc((size_t)out * in / 2);
    m.sc = malloc((size_t)out * in / 32);
    for (size_t i = 0; i < (size_t)out * in / 2; i++) m.codes[i] = (uint8_t)tk_rand();
    for (size_t i = 0; i < (size_t)out * in / 32; i++) m.sc[i] = (uint8_t)tk_range(127 + emin, 127 + emax);
    m.L = (ds_linear){.fmt = DS_LIN_MXFP4, .out = out, .in = in, .w = m.codes, .w_e8m0 = m.sc, .numerics = nm, .act_e4m3 = 1};
    return m;
}

/* 2·e2m1 of weight (o, i) and its scale byte. */
static int mx_c2(const mx_lin *m, int o, int i) {
    uint8_t b = m->codes[(size_t)o * m->L.in / 2 + i / 2];
    return (int)(2.0f * ds_e2m1_to_f32(i % 2 ? b >> 4 : b & 15));
}
static int mx_s(const mx_lin *m, int o, int i) { return m->sc[(size_t)o * m->L.in / 32 + i / 32]; }

/* The expected exact-route output of one (row, output) pair. */
static float oracle_mx_exact(const mx_lin *m, int o, const int32_t *u, const int16_t *kb) {
    const int in = m->L.in, nb = in / 32;
    int emin = 1 << 20, emax = -(1 << 20);
    for (int b = 0; b < nb; b++) {
        int e = mx_s(m, o, 32 * b) - 137 + kb[b];
        emin = e < emin ? e : emin;
        emax = e > emax ? e : emax;
    }
    if (emax - emin <= 24) {
        __int128 total = 0;
        for (int i = 0; i < in; i++) total += (__int128)((int64_t)mx_c2(m, o, i) * u[i]) * ((__int128)1 << (mx_s(m, o, i) - 137 + kb[i / 32] - emin));
        return (float)ldexp((double)total, emin);
    }
    double acc = 0;
    for (int b = 0; b < nb; b++) {
        int64_t s = 0;
        for (int i = 32 * b; i < 32 * b + 32; i++) s += (int64_t)mx_c2(m, o, i) * u[i];
        acc += (double)s * ldexp(1.0, mx_s(m, o, 32 * b) - 137 + kb[b]);
    }
    return (float)acc;
}

static const char *k_paths[3] = {"reference", "avx2", "avx512-vnni"};

TEST(mxfp4_exact_route_is_the_exact_sum) {
    static const int outs[] = {1, 7, 16, 33};
    static const int ins[] = {32, 64, 160, 512};
    ds_error err;
    int pairs = 0, wide = 0;
    for (int trial = 0; trial < 24; trial++) {
        int out = outs[trial % 4], in = ins[(trial / 4) % 4], n = tk_range(1, 4);
        mx_lin m = mx_make(out, in, trial % 3 ? -6 : -40, trial % 3 ? 3 : 30, DS_NUMERICS_EXACT);   /* every third: wide spread */
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in);
        fill_rows(x, n, in, trial);
        int32_t *u = malloc(sizeof(int32_t) * n * in);
        int16_t *kb = malloc(sizeof(int16_t) * n * (in / 32));
        for (int r = 0; r < n; r++) oracle_units(x + (size_t)r * in, in, u + (size_t)r * in, kb + (size_t)r * (in / 32));
        float *y = malloc(sizeof(float) * n * out);
        for (int p = 0; p < 3; p++) {
            if (!ds_kernels_available(k_paths[p])) continue;
            CHECK(ds_kernels_select(k_paths[p], &err) == 0, "select %s", k_paths[p]);
            tk_poison(y, (size_t)n * out);
            ds_linear_forward(&m.L, x, n, y);
            for (int r = 0; r < n; r++)
                for (int o = 0; o < out; o++) {
                    float want = oracle_mx_exact(&m, o, u + (size_t)r * in, kb + (size_t)r * (in / 32));
                    CHECK(!memcmp(&want, &y[(size_t)r * out + o], 4), "%s out=%d in=%d r=%d o=%d: %.9g vs %.9g", k_paths[p], out, in,
                          r, o, (double)want, (double)y[(size_t)r * out + o]);
                    pairs++;
                    wide += trial % 3 == 0;
                }
        }
        ds_kernels_select("auto", &err);
        free(x); free(u); free(kb); free(y); free(m.codes); free(m.sc);
    }
    printf("  %d (row, output) pairs checked, %d of them with wide scale spreads\n", pairs, wide);
    CHECK(wide > 0, "no wide-spread case ran");
}

/* A decisive row for the exact branch: ten blocks of the largest sums (2^26.4 each, 24 exponents
 * above the smallest) push a float64 running sum past 2^53, one block adds 1 at the smallest
 * exponent, ten more cancel the large ones.  The exact total is that 1; a float64 walk loses it. */
TEST(mxfp4_exact_route_keeps_a_small_term_beside_cancelling_large_ones) {
    enum { NB = 21 };
    uint8_t codes[NB * 16], sc[NB];
    int32_t u[NB * 32];
    int16_t kb[NB];
    for (int b = 0; b < NB; b++) {
        sc[b] = b == 10 ? 100 : 124;
        kb[b] = 0;
        for (int j = 0; j < 16; j++) codes[16 * b + j] = b == 10 ? (j == 0 ? 0x01 : 0x00) : b < 10 ? 0x77 : 0xff;
        for (int i = 0; i < 32; i++) u[32 * b + i] = b == 10 ? (i == 0) : 229376;
    }
    double acc = ds_mx8_row_ref(codes, sc, u, kb, NB);
    CHECK(acc == ldexp(1.0, 100 - 137), "exact total 2^-37 expected, got %.17g", acc);
    double walk = 0;
    for (int b = 0; b < NB; b++) walk += (b == 10 ? 1.0 : (b < 10 ? 1 : -1) * 32.0 * 12 * 229376) * ldexp(1.0, sc[b] - 137);
    CHECK(walk != acc, "the case is not decisive: a float64 walk gives the exact total too");
}

/* The fast route: the fast BF16 linear of the decoded matrix (flushed below 2^-50) on the
 * quantized rows, on every path and with and without vdpbf16ps. */
TEST(mxfp4_fast_route_equals_the_bf16_linear_of_the_decoded_matrix) {
    ds_error err;
    int runs = 0;
    for (int trial = 0; trial < 12; trial++) {
        int out = 5 + 9 * (trial % 4), in = 32 * (1 + trial % 5), n = tk_range(1, 7);
        mx_lin m = mx_make(out, in, trial % 4 ? -8 : -80, 2, DS_NUMERICS_FAST);   /* every fourth: values below 2^-50 */
        ds_bf16 *dec = malloc(sizeof(ds_bf16) * out * in), *x = malloc(sizeof(ds_bf16) * n * in), *xq = malloc(sizeof(ds_bf16) * n * in);
        for (int o = 0; o < out; o++)
            for (int i = 0; i < in; i++) {
                double v = 0.5 * mx_c2(&m, o, i) * ldexp(1.0, mx_s(&m, o, i) - 127);
                dec[(size_t)o * in + i] = fabs(v) < ldexp(1.0, -50) ? 0 : ds_f32_to_bf16((float)v);
            }
        fill_rows(x, n, in, trial);
        int32_t u[160];
        int16_t kb[5];
        for (int r = 0; r < n; r++) {
            oracle_units(x + (size_t)r * in, in, u, kb);
            for (int i = 0; i < in; i++) xq[(size_t)r * in + i] = ds_f32_to_bf16((float)ldexp((double)u[i], kb[i / 32] - 9));
        }
        ds_linear B = {.fmt = DS_LIN_BF16, .out = out, .in = in, .w = dec, .numerics = DS_NUMERICS_FAST};
        float *want = malloc(sizeof(float) * n * out), *got = malloc(sizeof(float) * n * out);
        ds_ref_linear_f(&B, xq, n, want);
        for (int p = 0; p < 3; p++) {
            if (!ds_kernels_available(k_paths[p])) continue;
            for (int dot = 0; dot < (p == 2 ? 2 : 1); dot++) {
                CHECK(ds_kernels_select(k_paths[p], &err) == 0, "select %s", k_paths[p]);
                int prev = ds_kernels_allow_bf16dot(dot || p != 2);
                tk_poison(got, (size_t)n * out);
                ds_linear_forward(&m.L, x, n, got);
                ds_kernels_allow_bf16dot(prev);
                CHECK(!memcmp(want, got, sizeof(float) * n * out), "%s%s out=%d in=%d n=%d differs", k_paths[p], dot ? "+dot" : "", out,
                      in, n);
                runs++;
            }
        }
        ds_kernels_select("auto", &err);
        free(dec); free(x); free(xq); free(want); free(got); free(m.codes); free(m.sc);
    }
    printf("  %d fast MXFP4 runs compared\n", runs);
}

/* FP8 with E4M3 activations = FP8 without them on the rows quantized here, both tiers, every path. */
TEST(fp8_with_e4m3_rows_equals_fp8_on_the_quantized_rows) {
    ds_error err;
    int runs = 0;
    for (int trial = 0; trial < 12; trial++) {
        ds_numerics nm = trial % 2 ? DS_NUMERICS_FAST : DS_NUMERICS_EXACT;
        int out = 3 + 11 * (trial % 4), in = 20 + 37 * (trial % 5), n = tk_range(1, 6);   /* inputs not a multiple of 32 too */
        uint8_t *codes = malloc((size_t)out * in), *sc = malloc((size_t)((out + 31) / 32) * ((in + 31) / 32));
        for (int i = 0; i < out * in; i++) {
            uint8_t c = (uint8_t)tk_rand();
            codes[i] = (c & 0x7f) == 0x7f ? 0x7e : c;
        }
        for (int i = 0; i < ((out + 31) / 32) * ((in + 31) / 32); i++) sc[i] = (uint8_t)tk_range(115, 123);
        ds_linear L = {.fmt = DS_LIN_FP8, .out = out, .in = in, .w = codes, .w_e8m0 = sc, .numerics = nm, .act_e4m3 = 1};
        ds_linear P = L;
        P.act_e4m3 = 0;
        ds_bf16 *x = malloc(sizeof(ds_bf16) * n * in), *xq = malloc(sizeof(ds_bf16) * n * in);
        fill_rows(x, n, in, trial);
        int32_t u[200];
        int16_t kb[8];
        for (int r = 0; r < n; r++) {
            oracle_units(x + (size_t)r * in, in, u, kb);
            for (int i = 0; i < in; i++) xq[(size_t)r * in + i] = ds_f32_to_bf16((float)ldexp((double)u[i], kb[i / 32] - 9));
        }
        float *want = malloc(sizeof(float) * n * out), *got = malloc(sizeof(float) * n * out);
        CHECK(ds_kernels_select("reference", &err) == 0, "select reference");
        ds_linear_forward(&P, xq, n, want);
        for (int p = 0; p < 3; p++) {
            if (!ds_kernels_available(k_paths[p])) continue;
            CHECK(ds_kernels_select(k_paths[p], &err) == 0, "select %s", k_paths[p]);
            tk_poison(got, (size_t)n * out);
            ds_linear_forward(&L, x, n, got);
            CHECK(!memcmp(want, got, sizeof(float) * n * out), "%s %s out=%d in=%d n=%d differs", k_paths[p], ds_numerics_name(nm), out,
                  in, n);
            runs++;
        }
        ds_kernels_select("auto", &err);
        free(codes); free(sc); free(x); free(xq); free(want); free(got);
    }
    printf("  %d FP8 runs compared\n", runs);
}

/* The tile decoder: the AVX2 version equals the scalar rule on every code byte and every scale byte
 * (in-register inside [78, 252], scalar fallback outside), and the scalar rule equals the value. */
TEST(mxfp4_tile_decode_equal_scalar_on_every_code_and_scale) {
    uint8_t codes[16 * 16];
    for (int i = 0; i < 256; i++) codes[i] = (uint8_t)i;
    int checked = 0;
    for (int s = 0; s < 255; s++) {
        uint8_t sc[16];
        memset(sc, s, sizeof sc);
        ds_bf16 a[512], b[512];
        ds_mx_decode_bf16(codes, sc, 512, a);
        for (int i = 0; i < 512; i++) {
            uint8_t c = codes[i / 2];
            double v = ds_e2m1_to_f32(i % 2 ? c >> 4 : c & 15) * ldexp(1.0, s - 127);
            ds_bf16 want = fabs(v) < ldexp(1.0, -50) ? 0 : ds_f32_to_bf16((float)v);
            CHECK(a[i] == want, "scalar s=%d code %02x input %d: %04x vs %04x", s, c, i % 2, a[i], want);
        }
        if (!ds_kernels_available("avx2")) continue;
        ds_mx_decode_bf16_avx2(codes, sc, 512, b);
        CHECK(!memcmp(a, b, sizeof a), "avx2 decode differs at scale byte %d", s);
        checked++;
    }
    printf("  %d scale bytes checked on the AVX2 decoder\n", checked);
}

RUN_ALL()
