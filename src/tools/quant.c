/* Quantizers of TOOLS.md §3.3–§3.4; the arithmetic contract is spelled out in quant.h.
 *
 * The loops are written as plain element-wise code with `omp simd` so that gcc vectorizes them
 * (mkmodel's mini model pushes ~4.5 G expert weights through the ten-step int4 search, so this is
 * the hot loop of both tools).  Rounding uses the 1.5·2^23 trick after clamping the quotient to a
 * small range, which is exact round-half-to-even there and vectorizes with plain SSE2, unlike
 * rintf.  The float64 error sums may be reassociated by the vectorizer: the result is still
 * deterministic for a given binary, and only an exact tie between two search steps (which the
 * contract resolves toward the earlier step) could in principle be perturbed. */
#include "tools/quant.h"
#include <math.h>
#include <string.h>

/* max |w| via the bit patterns: for finite values, |x| orders like its bits with the sign
 * cleared, and integer max vectorizes where a float compare-and-select would not. */
static float row_absmax(const float *w, int64_t n) {
    uint32_t m = 0;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &w[i], 4);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    float f;
    memcpy(&f, &m, 4);
    return f;
}

int ds_all_finite(const float *x, int64_t n) {
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

void ds_quant_w8_row(const float *w, int64_t n, int8_t *q, float *scale) {
    float m = row_absmax(w, n);
    if (m == 0.0f) {
        memset(q, 0, (size_t)n);
        *scale = 1.0f;
        return;
    }
    float s = m / 127.0f;
    if (!(s > 0.0f)) { /* subnormal row maximum: numerically a zero row */
        memset(q, 0, (size_t)n);
        *scale = 1.0f;
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        int c = (int)ds_rne_small(w[i] / s); /* |w / s| <= 127 (1 + 2^-23): the trick is exact */
        c = c < -127 ? -127 : c;
        c = c > 127 ? 127 : c;
        q[i] = (int8_t)c;
    }
    *scale = s;
}

/* Σ (w − s·q)² for the int4 codes of scale s (codes not stored). */
/* The int4 code of w / s.  |w / s| <= 7 / 0.05 at any search step, so the rounding trick is exact
 * without a pre-clamp; the clamp is done on integers so the loops vectorize. */
static inline int w4_code(float w, float s) {
    int c = (int)ds_rne_small(w / s);
    c = c < -8 ? -8 : c;
    return c > 7 ? 7 : c;
}

/* Σ (w − s·q)² for the int4 codes of scale s (codes not stored). */
static double w4_error(const float *w, int64_t n, float s) {
    double e = 0.0;
    const double sd = (double)s;
#pragma omp simd reduction(+ : e)
    for (int64_t i = 0; i < n; i++) {
        double d = (double)w[i] - sd * (double)w4_code(w[i], s);
        e += d * d;
    }
    return e;
}

static void w4_codes(const float *w, int64_t n, float s, int8_t *q) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) q[i] = (int8_t)w4_code(w[i], s);
}

int ds_quant_w4_row(const float *w, int64_t n, int steps, int8_t *q, float *scale) {
    float m = row_absmax(w, n);
    if (m == 0.0f) {
        memset(q, 0, (size_t)n);
        *scale = 1.0f;
        return 0;
    }
    if (steps < 1) steps = 1;
    if (steps > DS_SSZ_STEPS_MAX) steps = DS_SSZ_STEPS_MAX;
    int best = -1;
    float best_s = 1.0f;
    double best_e = 0.0;
    for (int k = 0; k < steps; k++) {
        float s = (float)((1.0 - 0.05 * (double)k) * (double)m / 7.0);
        if (!(s > 0.0f)) continue; /* underflow: a subnormal row maximum */
        double e = w4_error(w, n, s);
        if (best < 0 || e < best_e) { best = k; best_e = e; best_s = s; }
    }
    if (best < 0) { /* every scale underflowed: the row is numerically zero */
        memset(q, 0, (size_t)n);
        *scale = 1.0f;
        return 0;
    }
    w4_codes(w, n, best_s, q);
    *scale = best_s;
    return best;
}

void ds_quant_w4_pack(const int8_t *even, const int8_t *odd, int64_t n, int8_t *packed) {
    if (odd) {
#pragma omp simd
        for (int64_t i = 0; i < n; i++)
            packed[i] = (int8_t)(uint8_t)(((uint8_t)even[i] & 0x0fu) | (((uint8_t)odd[i] & 0x0fu) << 4));
    } else {
#pragma omp simd
        for (int64_t i = 0; i < n; i++) packed[i] = (int8_t)(uint8_t)((uint8_t)even[i] & 0x0fu);
    }
}

void ds_quant_scale_bias(const int8_t *q, int64_t n, float scale, int chunks, float *sb) {
    const float s8 = 8.0f * scale;
    for (int c = 0; c < chunks; c++) {
        int64_t a = (int64_t)c * n / chunks, b = (int64_t)(c + 1) * n / chunks;
        int64_t sum = 0;
        for (int64_t i = a; i < b; i++) sum += q[i];
        sb[c] = s8 * (float)sum; /* |sum| <= 8·n is exact in fp32 for every n here */
    }
}

int ds_engram_exponent(float a) {
    int k;
    double f = frexp((double)a / 127.0, &k);
    return f == 0.5 ? k - 1 : k;
}

int ds_quant_engram_row(const float *x, int width, int8_t *codes, float *scales) {
    for (int g = 0; g < width / 32; g++) {
        const float *xg = x + 32 * g;
        int8_t *cg = codes + 32 * g;
        float a = row_absmax(xg, 32);
        if (a == 0.0f) {
            memset(cg, 0, 32);
            scales[g] = 1.0f;
            continue;
        }
        int e = ds_engram_exponent(a);
        if (e < -126 || e > 127) return -1;
        float scale = ldexpf(1.0f, e);
        for (int i = 0; i < 32; i++) {
            int c = (int)ds_rne_small(xg[i] / scale); /* exact: power-of-two divisor, |t| <= 127 */
            c = c < -127 ? -127 : c;
            cg[i] = (int8_t)(c > 127 ? 127 : c);
        }
        scales[g] = scale;
    }
    return 0;
}

void ds_qerr_add_row(ds_qerr *e, const float *w, const int8_t *q, int64_t n, float scale) {
    double err2 = 0.0, ref2 = 0.0;
    const double sd = (double)scale;
#pragma omp simd reduction(+ : err2, ref2)
    for (int64_t i = 0; i < n; i++) {
        double wd = (double)w[i];
        double d = wd - sd * (double)q[i];
        err2 += d * d;
        ref2 += wd * wd;
    }
    e->err2 += err2;
    e->ref2 += ref2;
}

double ds_qerr_rel_rmse(const ds_qerr *e) {
    if (e->ref2 <= 0.0) return e->err2 > 0.0 ? INFINITY : 0.0;
    return sqrt(e->err2 / e->ref2);
}
