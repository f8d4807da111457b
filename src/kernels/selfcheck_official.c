/* Start-up self-check of the official-format families (SERVING.md §13 step 3, beside
 * selfcheck.c): the active path against the scalar one on random tiles with tails.
 *   mxfp4:    the active ISA's integer path (16-row panels on AVX-512) vs the scalar rows — bit for bit;
 *   fp8-fast: the fast-tier FP8 forward vs the scalar fast order on the decoded bf16 matrix — bit
 *             for bit (the fast tier's one fixed order);
 *   fp8:      the exact-tier FP8 forward vs the float64 reference of the decoded matrix — bit for bit
 *             (one scalar routine on every path, so any difference is a defect).
 * Kept apart from ds_kernels_selfcheck so its fixed-size report stays as callers size it. */
#include "kernels/kern_official.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static void report(ds_kernel_check *c, const char *family, int ok, double maxd, int out, int in) {
    snprintf(c->family, sizeof c->family, "%s", family);
    snprintf(c->path, sizeof c->path, "%s", ds_kernels_active());
    c->ok = ok;
    c->max_abs_diff = maxd;
    snprintf(c->line, sizeof c->line, "kernel %s: %s %s ENGAGED ([%d, %d], max |diff| %g, bit-exact required)", family,
             ok ? "OK" : "FAIL", c->path, out, in, maxd);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = DS_MAX(m, (double)(a[i] > b[i] ? a[i] - b[i] : b[i] - a[i]));
    return m;
}

int ds_official_selfcheck(ds_kernel_check out[3], int *n_out, ds_error *err) {
    enum { O = 37, I = 224, N = 3 };
    uint64_t s = 0x51ed270b27d3a1f5ull;
    uint8_t *codes = malloc((size_t)O * I), *sc = malloc((size_t)O * I / 32);
    ds_bf16 *x = malloc(sizeof(ds_bf16) * N * I), *dec = malloc(sizeof(ds_bf16) * O * I);
    float *y = malloc(sizeof(float) * N * O), *yr = malloc(sizeof(float) * N * O);
    int8_t *q = malloc((size_t)N * I);
    float xs[N];
    for (int i = 0; i < N * I; i++) x[i] = ds_f32_to_bf16((float)((int)(next(&s) % 2001) - 1000) / 317.f);
    /* MXFP4 */
    for (int i = 0; i < O * I / 2; i++) codes[i] = (uint8_t)next(&s);
    for (int i = 0; i < O * I / 32; i++) sc[i] = (uint8_t)(120 + next(&s) % 8);
    ds_linear L = {.fmt = DS_LIN_MXFP4, .out = O, .in = I, .w = codes, .w_e8m0 = sc};
    ds_quantize_rows(x, N, I, q, xs);
    ds_official_forward_q(&L, q, xs, N, y);
    ds_mx_forward_q_with(&L, q, xs, N, yr, ds_mx_row_ref, NULL);
    report(&out[0], "mxfp4", !memcmp(y, yr, sizeof(float) * N * O), max_diff(y, yr, (size_t)N * O), O, I);
    ds_linear_release(&L);   /* the panels the AVX-512 path made for it */
    /* FP8, both tiers, against the BF16 linear of the decoded matrix */
    for (int i = 0; i < O * I; i++) codes[i] = (uint8_t)(next(&s) & 0xbf);   /* no NaN codes */
    for (int i = 0; i < 32 * I; i++)   /* the first 32-row scale tiles plain (decision 176), the others not */
        if (!(codes[i] & 0x78)) codes[i] |= 0x08;
    for (int i = 0; i < 2 * ((I + 31) / 32); i++) sc[i] = (uint8_t)(118 + next(&s) % 6);
    for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) {
            int b = codes[o * I + i], e = (b >> 3) & 15, m = b & 7;
            float v = ldexpf(e ? (float)(8 + m) : (float)m, (e ? e - 10 : -9) + sc[(o / 32) * ((I + 31) / 32) + i / 32] - 127);
            dec[o * I + i] = ds_f32_to_bf16(b & 0x80 ? -v : v);
        }
    for (int t = 0; t < 2; t++) {
        ds_numerics nm = t ? DS_NUMERICS_FAST : DS_NUMERICS_EXACT;
        ds_linear F = {.fmt = DS_LIN_FP8, .out = O, .in = I, .w = codes, .w_e8m0 = sc, .numerics = nm};
        ds_linear B = {.fmt = DS_LIN_BF16, .out = O, .in = I, .w = dec, .numerics = nm};
        ds_linear_prepare(&F);   /* as at load: the map of plain tiles where the path reads it */
        ds_official_forward(&F, x, N, y);
        ds_linear_release(&F);
        ds_ref_linear_f(&B, x, N, yr);
        report(&out[1 + t], t ? "fp8-fast" : "fp8", !memcmp(y, yr, sizeof(float) * N * O), max_diff(y, yr, (size_t)N * O), O, I);
    }
    free(codes); free(sc); free(x); free(dec); free(y); free(yr); free(q);
    *n_out = 3;
    for (int i = 0; i < 3; i++)
        if (!out[i].ok) return ds_fail(err, "E_KERNEL_SELFCHECK", "kernel self-check failed: %s", out[i].line);
    return 0;
}
