/* Shared preamble of the AVX-512 kernel files (kern_avx512.c: integer and exact float linears;
 * kern_avx512_fast.c: fast-tier float linears and attention scores).
 *
 * Why a header: both files are compiled twice, natively under the AVX-512 target pragma and by
 * test_kernels_avx512_emu.c with DS_AVX512_EMULATE (SIMDe), which includes both .c files in one
 * unit; the intrinsic set, the emulated stand-ins and the inlining macros must be the same in
 * both.  The native branch pushes the target options; each .c file pops them before its end. */
#ifndef DS_KERNELS_KERN_AVX512_PRE_H
#define DS_KERNELS_KERN_AVX512_PRE_H

#include "kernels/kern_internal.h"
#include <math.h>
#include <string.h>

#ifdef DS_AVX512_EMULATE
#pragma GCC optimize("O1")
#pragma GCC diagnostic ignored "-Wpsabi" /* SIMDe passes 64-byte vectors by value */
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include "kernels/avx512_emu.h"
#define DS_AVX512_OPS ds_kern_avx512_emu
#define DS_QUANTIZE_ROW ds_ref_quantize_row_emu
static void ds_ref_quantize_row_emu(const ds_bf16 *x, int k, int8_t *q, float *s) { ds_ref_quantize_rows(x, 1, k, q, s); }
/* Intrinsics this SIMDe release lacks, written from their documented per-lane semantics. */
typedef simde__mmask16 __mmask16;
static inline simde__m512 emu_cvtepi32_ps(simde__m512i a) {
    int32_t t[16]; float f[16];
    simde_mm512_storeu_si512(t, a);
    for (int i = 0; i < 16; i++) f[i] = (float)t[i]; /* VCVTDQ2PS: round to nearest even */
    return simde_mm512_loadu_ps(f);
}
static inline void emu_mask_storeu_ps(float *p, simde__mmask16 m, simde__m512 v) {
    float f[16];
    simde_mm512_storeu_ps(f, v);
    for (int i = 0; i < 16; i++) if (m & (1u << i)) p[i] = f[i];
}
static inline simde__m512i emu_cvtepu16_epi32(simde__m256i a) {
    uint16_t h[16]; int32_t t[16];
    simde_mm256_storeu_si256((simde__m256i *)h, a);
    for (int i = 0; i < 16; i++) t[i] = h[i];
    return simde_mm512_loadu_si512(t);
}
static inline simde__m512d emu_cvtps_pd(simde__m256 a) {
    float f[8]; double d[8];
    simde_mm256_storeu_ps(f, a);
    for (int i = 0; i < 8; i++) d[i] = f[i]; /* exact widening */
    return simde_mm512_loadu_pd(d);
}
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps ds_emu_fmadd_ps
#define _mm512_cvtps_pd emu_cvtps_pd
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_mask_storeu_ps emu_mask_storeu_ps
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#else
#pragma GCC push_options
/* avx512bf16 is reached only through the vdpbf16ps intrinsic of ff_dot (the compiler never emits
 * it on its own), and ff_dot runs only when CPUID reports it. */
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")
#include <immintrin.h>
#define DS_AVX512_OPS ds_kern_avx512
#define DS_QUANTIZE_ROW ds_avx2_quantize_row
#endif

#ifdef DS_AVX512_EMULATE
/* Emulated intrinsics are loops; forced inlining and unrolling would make this test translation
 * unit take minutes to compile for no benefit. */
#define AI static inline
#define UNROLL8
#define UNROLL12
#define UNROLL16
#else
#define AI static inline __attribute__((always_inline))
#define UNROLL8 _Pragma("GCC unroll 8")
#define UNROLL12 _Pragma("GCC unroll 12")
#define UNROLL16 _Pragma("GCC unroll 16")
#endif

/* vdpbf16ps: real instruction, or its per-lane emulation (avx512_emu.h) */
#ifndef DS_AVX512_EMULATE
#define DPBF16(acc, w, x) _mm512_dpbf16_ps((acc), (__m512bh)(w), (__m512bh)(x))
#else
#define DPBF16(acc, w, x) ds_emu_dpbf16((acc), (w), (x))
#endif

/* The fast-tier entry points of kern_avx512_fast.c, named per build (native or emulated). */
#ifdef DS_AVX512_EMULATE
#define DS_AVX512_FAST(name) ds_avx512_##name##_emu
#else
#define DS_AVX512_FAST(name) ds_avx512_##name
#endif
void DS_AVX512_FAST(ff_rows)(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride);
void DS_AVX512_FAST(ff_dot)(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride);
void DS_AVX512_FAST(pair_scores8)(const ds_bf16 *q, int n, const ds_bf16 *const *keys, int nk, float *out);

#endif
