/* Helpers shared by the kernel tests: deterministic random data, NaN poisoning, and an oracle for
 * the quantized linear written independently of src/kernels/reference.c (int64 accumulation,
 * nibbles decoded from the CHECKPOINT.md §6.1 text: low nibble = even row). */
#ifndef TEST_KERNELS_UTIL_H
#define TEST_KERNELS_UTIL_H
#include "kernels/kernels.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t tk_seed = 0x2545F4914F6CDD1Dull;
static inline uint64_t tk_rand(void) {
    tk_seed ^= tk_seed << 13; tk_seed ^= tk_seed >> 7; tk_seed ^= tk_seed << 17;
    return tk_seed;
}
static inline int tk_range(int lo, int hi) { return lo + (int)(tk_rand() % (uint64_t)(hi - lo + 1)); }

/* bf16 activations with a spread of magnitudes, some exact zeros and some rows of large values. */
static inline void tk_fill_bf16(ds_bf16 *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        int u = (int)(tk_rand() % 20001) - 10000;
        float v = (tk_rand() % 17 == 0) ? 0.f : (float)u / 997.f * scale;
        x[i] = ds_f32_to_bf16(v);
    }
}

static inline void tk_poison(float *y, size_t n) { for (size_t i = 0; i < n; i++) y[i] = NAN; }

typedef struct {
    ds_linear L;
    void *w;
    float *sw;
} tk_lin;

static inline tk_lin tk_make(ds_lin_fmt fmt, int out, int in) {
    tk_lin t;
    memset(&t, 0, sizeof t);
    size_t bytes = fmt == DS_LIN_W8A8 ? (size_t)out * in : fmt == DS_LIN_W4A8 ? (size_t)(out + 1) / 2 * in
                 : fmt == DS_LIN_BF16 ? 2 * (size_t)out * in : 4 * (size_t)out * in;
    t.w = malloc(bytes ? bytes : 1);
    if (fmt == DS_LIN_BF16) tk_fill_bf16(t.w, (size_t)out * in, 1.f);
    else if (fmt == DS_LIN_F32)
        for (size_t i = 0; i < (size_t)out * in; i++) ((float *)t.w)[i] = (float)((int)(tk_rand() % 2000001) - 1000000) / 777777.f;
    else
        for (size_t i = 0; i < bytes; i++) ((uint8_t *)t.w)[i] = (uint8_t)tk_rand();
    t.sw = malloc(sizeof(float) * (size_t)(out ? out : 1));
    for (int o = 0; o < out; o++) t.sw[o] = (float)(1 + tk_rand() % 100000) * 3.1e-6f;
    t.L.fmt = fmt;
    t.L.out = out;
    t.L.in = in;
    t.L.w = t.w;
    t.L.w_scale = fmt <= DS_LIN_W4A8 ? t.sw : NULL;
    return t;
}
static inline void tk_free(tk_lin *t) { ds_linear_release(&t->L); free(t->w); free(t->sw); }

/* Independent oracle of CHECKPOINT.md §7 for one output. */
static inline float tk_oracle_q(const tk_lin *t, const int8_t *q, float s, int o) {
    int64_t acc = 0;
    const int in = t->L.in;
    for (int i = 0; i < in; i++) {
        int w;
        if (t->L.fmt == DS_LIN_W8A8) w = ((const int8_t *)t->w)[(size_t)o * in + i];
        else {
            uint8_t b = ((const uint8_t *)t->w)[(size_t)(o / 2) * in + i];
            int nib = (o % 2 == 0) ? (b & 15) : (b >> 4);
            w = nib >= 8 ? nib - 16 : nib;
        }
        acc += (int64_t)q[i] * w;
    }
    float sc = s * t->sw[o];
    return (float)(int32_t)acc * sc;
}

/* Independent float oracle: long double accumulation, rounded to fp32. */
static inline float tk_oracle_f(const tk_lin *t, const ds_bf16 *x, int o, double *mag) {
    long double acc = 0;
    double m = 0;
    for (int i = 0; i < t->L.in; i++) {
        long double w = t->L.fmt == DS_LIN_BF16 ? (long double)ds_bf16_to_f32(((const ds_bf16 *)t->w)[(size_t)o * t->L.in + i])
                                                : (long double)((const float *)t->w)[(size_t)o * t->L.in + i];
        long double v = w * (long double)ds_bf16_to_f32(x[i]);
        acc += v;
        m += fabs((double)v);
    }
    if (mag) *mag = m;
    return (float)(double)acc;
}
#endif
