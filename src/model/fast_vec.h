/* Vector helpers shared by the fast-tier cores (fast_ops.c, attn_tile.c, index_tile.c): the
 * clone attribute, GCC vector-extension types and the loaders that widen bf16.
 *
 * Why one header: these files hold the order of NUMERICS rule 1 in portable vector C, compiled as
 * AVX-512/AVX2/baseline clones so every host gives the same bits; the types and loaders are the
 * same in all of them, and a second copy could drift (a loader that rounded instead of shifting
 * would silently change bits in one file only).  Internal to src/model; include it from .c files
 * only (it turns off -Wpsabi for the including file: the helpers pass vectors by value, but they
 * are static and always inlined, so no ABI boundary exists for the baseline clone to disagree on). */
#ifndef DS_MODEL_FAST_VEC_H
#define DS_MODEL_FAST_VEC_H
#include <stdint.h>
#include <string.h>
#include "base/bf16.h"
#include "base/clones.h"
#define DS_AI static inline __attribute__((always_inline))

#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

/* ds_vN_ld_f: N floats; ds_vN_ld_b: N bf16 widened to fp32, which is exact (the 16 bits become the
 * high half of the float).  One definition for both widths. */
#define DS_VEC_LOADERS(N, VF, VU, VH)                                   \
    DS_AI VF ds_v##N##_ld_f(const float *p) {                           \
        VF v;                                                           \
        memcpy(&v, p, sizeof v);                                        \
        return v;                                                       \
    }                                                                   \
    DS_AI VF ds_v##N##_ld_b(const ds_bf16 *p) {                         \
        VH h;                                                           \
        memcpy(&h, p, sizeof h);                                        \
        const VU u = __builtin_convertvector(h, VU) << 16;              \
        return (VF)u;                                                   \
    }
DS_VEC_LOADERS(8, v8f, v8u, v8h)
DS_VEC_LOADERS(16, v16f, v16u, v16h)
#define DS_V16_ST(p, v) do { const v16f ds_st_v_ = (v); memcpy((p), &ds_st_v_, sizeof ds_st_v_); } while (0)

#endif
