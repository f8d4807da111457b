/* Start-up cross-check of the engaged kernel path against the scalar reference (SERVING.md §13
 * step 3, PITFALLS §A.1).  Random tiles with odd sizes exercise padding and tails; the integer
 * families and the fast-tier float families ("bf16-fast", "f32-fast": one fixed fp32 order on
 * every path) must agree bit for bit, the exact-tier float families within 1e-6 of Σ|W·x|.  A
 * mismatch is reported as a failure, never as a reason to switch paths. */
#include "kernels/kern_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static void fill_bf16(ds_bf16 *x, size_t n, uint64_t *s) {
    for (size_t i = 0; i < n; i++) x[i] = ds_f32_to_bf16((float)((int)(rng_next(s) % 2001) - 1000) / 317.f);
}

static void check_family(ds_lin_fmt fmt, ds_numerics tier, ds_kernel_check *c, uint64_t *seed) {
    static const char *fam[] = {"w8a8", "w4a8", "bf16", "f32"};
    const int out = 67, in = 301, n = 5;
    /* the fast tier must be bit-exact: integer-like comparison */
    const int exact_bits = fmt <= DS_LIN_W4A8 || tier == DS_NUMERICS_FAST;
    snprintf(c->family, sizeof c->family, "%s%s", fam[fmt], tier == DS_NUMERICS_FAST ? "-fast" : "");
    snprintf(c->path, sizeof c->path, "%s%s", ds_kernels_active(),
             fmt == DS_LIN_BF16 && tier == DS_NUMERICS_FAST && ds_kernels_bf16dot_active() ? "+vdpbf16ps" : "");
    size_t wbytes = fmt == DS_LIN_W8A8 ? (size_t)out * in : fmt == DS_LIN_W4A8 ? (size_t)(out + 1) / 2 * in
                  : fmt == DS_LIN_BF16 ? 2 * (size_t)out * in : 4 * (size_t)out * in;
    uint8_t *w = ds_xmalloc(wbytes);
    float *sw = ds_xmalloc(sizeof(float) * out);
    ds_bf16 *x = ds_xmalloc(sizeof(ds_bf16) * (size_t)n * in);
    float *y = ds_xmalloc(sizeof(float) * (size_t)n * out), *yr = ds_xmalloc(sizeof(float) * (size_t)n * out);
    if (fmt == DS_LIN_BF16) fill_bf16((ds_bf16 *)w, (size_t)out * in, seed);
    else if (fmt == DS_LIN_F32)
        for (size_t i = 0; i < (size_t)out * in; i++) ((float *)w)[i] = (float)((int)(rng_next(seed) % 20001) - 10000) / 3001.f;
    else
        for (size_t i = 0; i < wbytes; i++) w[i] = (uint8_t)rng_next(seed);
    for (int o = 0; o < out; o++) sw[o] = (float)(1 + rng_next(seed) % 1000) * 1e-4f;
    fill_bf16(x, (size_t)n * in, seed);
    ds_linear L = {.fmt = fmt, .out = out, .in = in, .w = w, .w_scale = (fmt <= DS_LIN_W4A8) ? sw : NULL,
                   .numerics = tier};
    for (size_t i = 0; i < (size_t)n * out; i++) { y[i] = NAN; yr[i] = NAN; }
    ds_linear_forward(&L, x, n, y);
    double maxd = 0, lim = 0;
    int ok = 1;
    if (fmt <= DS_LIN_W4A8) {
        int8_t *q = ds_xmalloc((size_t)n * in);
        float *s = ds_xmalloc(sizeof(float) * n);
        ds_ref_quantize_rows(x, n, in, q, s);
        ds_ref_linear_q(&L, q, s, n, yr);
        for (size_t i = 0; i < (size_t)n * out; i++) {
            if (memcmp(&y[i], &yr[i], 4)) ok = 0;
            double d = fabs((double)y[i] - (double)yr[i]);
            if (!(d <= maxd)) maxd = isnan(d) ? INFINITY : d;
        }
        free(q);
        free(s);
    } else if (exact_bits) {
        ds_ref_linear_f(&L, x, n, yr);
        for (size_t i = 0; i < (size_t)n * out; i++) {
            if (memcmp(&y[i], &yr[i], 4)) ok = 0;
            double d = fabs((double)y[i] - (double)yr[i]);
            if (!(d <= maxd)) maxd = isnan(d) ? INFINITY : d;
        }
    } else {
        ds_ref_linear_f(&L, x, n, yr);
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                double mag = 0;
                for (int i = 0; i < in; i++) {
                    double wv = fmt == DS_LIN_BF16 ? ds_bf16_to_f32(((ds_bf16 *)w)[(size_t)o * in + i])
                                                   : ((float *)w)[(size_t)o * in + i];
                    mag += fabs(wv * ds_bf16_to_f32(x[(size_t)r * in + i]));
                }
                double d = fabs((double)y[(size_t)r * out + o] - (double)yr[(size_t)r * out + o]);
                if (!(d <= 1e-6 * mag + 1e-30)) ok = 0;
                if (!(d <= maxd)) maxd = isnan(d) ? INFINITY : d;
                if (mag > lim) lim = mag;
            }
    }
    ds_linear_release(&L);
    c->max_abs_diff = maxd;
    c->ok = ok;
    snprintf(c->line, sizeof c->line, "kernel %s: %s %s ENGAGED (tiles %d, max |diff| %g%s)", c->family,
             ok ? "OK" : "FAIL", c->path, (out + 15) / 16 * n, maxd,
             exact_bits ? ", bit-exact required" : ", tolerance 1e-6 relative");
    free(w); free(sw); free(x); free(y); free(yr);
}

int ds_kernels_selfcheck(ds_kernel_check out[8], int *n_out, ds_error *err) {
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int n = 0, fail = -1;
    for (int f = 0; f < 6; f++) { /* the four formats, then BF16 and F32 in the fast tier */
        check_family(f < 4 ? (ds_lin_fmt)f : (ds_lin_fmt)(f - 2), f < 4 ? DS_NUMERICS_EXACT : DS_NUMERICS_FAST,
                     &out[n], &seed);
        if (!out[n].ok && fail < 0) fail = n;
        n++;
    }
    /* activation quantization: the active path vs the reference, bit for bit */
    {
        const int rows = 7, k = 1037;
        ds_bf16 *x = ds_xmalloc(sizeof(ds_bf16) * rows * k);
        int8_t *q = ds_xmalloc((size_t)rows * k), *qr = ds_xmalloc((size_t)rows * k);
        float s[7], sr[7];
        fill_bf16(x, (size_t)rows * k, &seed);
        memset(x + k, 0, sizeof(ds_bf16) * k); /* an all-zero row */
        ds_quantize_rows(x, rows, k, q, s);
        ds_ref_quantize_rows(x, rows, k, qr, sr);
        int ok = !memcmp(q, qr, (size_t)rows * k) && !memcmp(s, sr, sizeof s);
        int maxd = 0;
        for (int i = 0; i < rows * k; i++) maxd = DS_MAX(maxd, abs(q[i] - qr[i]));
        ds_kernel_check *c = &out[n];
        snprintf(c->family, sizeof c->family, "quantize");
        snprintf(c->path, sizeof c->path, "%s", ds_kernels_active());
        c->max_abs_diff = maxd;
        c->ok = ok;
        snprintf(c->line, sizeof c->line, "kernel quantize: %s %s ENGAGED (rows %d, max |diff| %d codes)",
                 ok ? "OK" : "FAIL", c->path, rows, maxd);
        if (!ok && fail < 0) fail = n;
        n++;
        free(x); free(q); free(qr);
    }
    *n_out = n;
    if (fail >= 0)
        return ds_fail(err, "E_KERNEL_SELFCHECK", "kernel self-check failed: %s", out[fail].line);
    return 0;
}
