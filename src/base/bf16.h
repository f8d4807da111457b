/* bfloat16 <-> fp32.  bf16 values are carried as uint16_t bit patterns everywhere (no compiler
 * extension types), so storage, hashing and bitwise comparisons are exact and portable.
 * Rounding is round-to-nearest-even; NaN stays NaN (MODEL.md §0). */
#ifndef DS_BASE_BF16_H
#define DS_BASE_BF16_H
#include <stdint.h>
#include <string.h>

typedef uint16_t ds_bf16;

static inline float ds_bf16_to_f32(ds_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; a NaN keeps its high half, quieted.  Written as a select, not a branch,
 * so that loops of it vectorize (ds_round_rows_bf16, the MoE sums). */
static inline ds_bf16 ds_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (ds_bf16)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* fp32 -> bf16 -> fp32: the value a bf16 store would keep. */
static inline float ds_round_bf16(float f) { return ds_bf16_to_f32(ds_f32_to_bf16(f)); }

/* IEEE half -> fp32 (F16 tensors are accepted for float weights and widened). */
static inline float ds_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
