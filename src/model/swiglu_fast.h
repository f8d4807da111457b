/* The fast tier's SwiGLU of one expert row (swiglu_fast.c): a[i] = bf16(silu(gg)·vv [· w]) with
 * gg, vv the bf16 roundings of g[i], v[i] clamped by limit (> 0: vv to [-limit, limit], gg to at most
 * limit) and silu(gg) = gg / (1 + expf(-gg)) — the same bits as libm's expf on every input. */
#ifndef DS_MODEL_SWIGLU_FAST_H
#define DS_MODEL_SWIGLU_FAST_H
#include "base/bf16.h"

/* The SwiGLU inputs of both tiers: bf16 roundings of the w1 / w3 outputs, clamped (limit > 0). */
static inline void ds_swiglu_inputs(float g, float v, float limit, float *gg, float *vv) {
    *gg = ds_round_bf16(g);
    *vv = ds_round_bf16(v);
    if (limit > 0) {
        if (*vv > limit) *vv = limit;
        if (*vv < -limit) *vv = -limit;
        if (*gg > limit) *gg = limit;
    }
}

void ds_swiglu_row_fast(const float *g, const float *v, int n, float limit, float w, int weighted, ds_bf16 *a);

/* Tests: the paths, whether one can run here (vector paths: this CPU has the ISA and the build is
 * not a sanitizer build), forcing one (-1: the best available; returns the previous setting), and
 * the exp the active path computes for one value. */
enum { DS_SWIGLU_SCALAR = 0, DS_SWIGLU_AVX2 = 1, DS_SWIGLU_AVX512 = 2 };
int ds_swiglu_path_available(int path);
int ds_swiglu_force_path(int path);
float ds_swiglu_expf(float x);
#endif
