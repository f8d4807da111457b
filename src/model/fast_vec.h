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
#include "kernels/kernels.h"
#define DS_AI static inline __attribute__((always_inline))

#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint16_t v32h __attribute__((vector_size(64)));
typedef int16_t v16s __attribute__((vector_size(32)));
typedef int16_t v32s __attribute__((vector_size(64)));

/* ds_vN_ld_f: N floats; ds_vN_ld_b: N bf16 widened to fp32, which is exact (the 16 bits become the
 * high half of the float).  One definition for both widths. */
#define DS_VEC_LOADERS(N, VF, VH, VW)                                   \
    DS_AI VF ds_v##N##_ld_f(const float *p) {                           \
        VF v;                                                           \
        memcpy(&v, p, sizeof v);                                        \
        return v;                                                       \
    }                                                                   \
    DS_AI VF ds_v##N##_ld_b(const ds_bf16 *p) {                         \
        VH h;                                                           \
        memcpy(&h, p, sizeof h);                                        \
        const VH z = {0};                                               \
        const VW w = __builtin_shufflevector(z, h, DS_INTERLEAVE##N);   \
        return (VF)w;                                                   \
    }
/* (0, h[i]) pairs: little-endian, each pair is the 32-bit word h[i] << 16.  Written as a shuffle
 * with zero rather than __builtin_convertvector(h, v16u) << 16, which GCC 12 splits into 128-bit
 * halves (extract, two widenings, insert) in the AVX-512 clone: one vpermt2w here. */
#define DS_INTERLEAVE8 0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15
#define DS_INTERLEAVE16 0, 16, 0, 17, 0, 18, 0, 19, 0, 20, 0, 21, 0, 22, 0, 23, \
                        0, 24, 0, 25, 0, 26, 0, 27, 0, 28, 0, 29, 0, 30, 0, 31
DS_VEC_LOADERS(8, v8f, v8h, v16h)
DS_VEC_LOADERS(16, v16f, v16h, v32h)
/* The bf16 pair order (docs/NUMERICS.md, rule of the attention scores): 2N bf16 values from p as
 * N 32-bit words, word j = elements (2j, 2j+1); *odd gets element 2j+1 widened into lane j, *even
 * element 2j, each flushed (|v| < 2^-50 counts as 0, DS_FF_MIN_EXP_FIELD): exactly the operands
 * vdpbf16ps multiplies. */
#define DS_PAIR_LOADER(N, VF, VU, VS)                                                    \
    DS_AI void ds_v##N##_ld_pairs(const ds_bf16 *p, VF *odd, VF *even) {                \
        VS h;                                                                            \
        memcpy(&h, p, sizeof h);                                                         \
        /* one 16-bit compare flushes both halves of every word (exponent field < 77) */ \
        const VU w = (VU)(h & ((h & 0x7f80) >= (DS_FF_MIN_EXP_FIELD << 7)));            \
        *odd = (VF)(w & 0xffff0000u);                                                    \
        *even = (VF)(w << 16);                                                           \
    }
DS_PAIR_LOADER(8, v8f, v8u, v16s)
DS_PAIR_LOADER(16, v16f, v16u, v32s)
/* The pair order's tree over 16 lanes: l[j] + l[j+8], then +4, +2, +1. */
DS_AI float ds_pair_tree(const float *lanes) {
    float l[16];
    memcpy(l, lanes, sizeof l);
    for (int j = 0; j < 8; j++) l[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) l[j] = l[j] + l[j + 4];
    l[0] = l[0] + l[2];
    l[1] = l[1] + l[3];
    return l[0] + l[1];
}
#define DS_V16_ST(p, v) do { const v16f ds_st_v_ = (v); memcpy((p), &ds_st_v_, sizeof ds_st_v_); } while (0)

/* The dots of two fp32 rows (q, q + stride) with one fp32 key k of n elements (n a multiple of 32)
 * in the 32-lane order of NUMERICS rule 1, as 8-wide vectors (12 live: the indexer tile's 8-wide
 * route): out[r] holds the tree's first two levels, (l[j] + l[j+16]) + (l[j+8] + l[j+24]), j < 8. */
DS_AI void ds_dot2_levels(const float *q, size_t stride, const float *k, int n, v8f out[2]) {
    v8f a[2][4];
    for (int r = 0; r < 2; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = (v8f){0};
    for (int i = 0; i < n; i += 32) {
        v8f kv[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) kv[j] = ds_v8_ld_f(k + i + 8 * j);
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) a[r][j] = a[r][j] + ds_v8_ld_f(q + (size_t)r * stride + i + 8 * j) * kv[j];
    }
    for (int r = 0; r < 2; r++) out[r] = (a[r][0] + a[r][2]) + (a[r][1] + a[r][3]);
}

#endif
