/* The fast tier's SwiGLU of one expert row (swiglu_fast.c): a[i] = bf16(silu(gg)·vv [· w]) with
 * gg, vv the bf16 roundings of g[i], v[i] clamped by limit (> 0: vv to [-limit, limit], gg to at most
 * limit) and silu(gg) = gg / (1 + expf(-gg)) — the same bits as libm's expf on every input. */
#ifndef DS_MODEL_SWIGLU_FAST_H
#define DS_MODEL_SWIGLU_FAST_H
#include "base/bf16.h"

void ds_swiglu_row_fast(const float *g, const float *v, int n, float limit, float w, int weighted, ds_bf16 *a);
/* Tests: whether the vector path can run here; allow (1) or forbid (0) it (returns the previous
 * setting); the exp the active path computes, for one value. */
int ds_swiglu_vector_available(void);
int ds_swiglu_allow_vector(int allow);
float ds_swiglu_expf(float x);
#endif
