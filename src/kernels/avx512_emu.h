/* AVX-512 instructions as documented, for the SIMDe-emulated builds of the AVX-512 kernel files.
 *
 * Why: the unit tests compile kern_avx512.c and kern_official_fp8_avx512.c a second time with
 * DS_AVX512_EMULATE so that a host without AVX-512 still checks the same source bit for bit.  Where
 * this SIMDe release differs from the instruction (its fmadd rounds the product first; its dpbf16
 * takes a pair in the other order and keeps subnormals), the kernels use these instead.  Included
 * only after <simde/x86/avx512.h>, only in emulated builds. */
#ifndef DS_KERNELS_AVX512_EMU_H
#define DS_KERNELS_AVX512_EMU_H
#ifndef DS_AVX512_EMULATE
#error "avx512_emu.h is for the emulated (DS_AVX512_EMULATE) builds only"
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

/* VFMADD: one rounding per lane */
static inline simde__m512 ds_emu_fmadd_ps(simde__m512 a, simde__m512 b, simde__m512 c) {
    float fa[16], fb[16], fc[16];
    simde_mm512_storeu_ps(fa, a);
    simde_mm512_storeu_ps(fb, b);
    simde_mm512_storeu_ps(fc, c);
    for (int i = 0; i < 16; i++) fc[i] = fmaf(fa[i], fb[i], fc[i]);
    return simde_mm512_loadu_ps(fc);
}

static inline float ds_emu_daz(float v) { return fabsf(v) < 0x1p-126f ? 0.f * v : v; }

/* VDPBF16PS: per lane, the odd product then the even one, one rounding each, inputs DAZ, result FTZ */
static inline simde__m512 ds_emu_dpbf16(simde__m512 acc, simde__m512i w, simde__m512i x) {
    float a[16];
    uint16_t wh[32], xh[32];
    simde_mm512_storeu_ps(a, acc);
    simde_mm512_storeu_si512(wh, w);
    simde_mm512_storeu_si512(xh, x);
    for (int j = 0; j < 16; j++)
        for (int e = 1; e >= 0; e--) {
            uint32_t wb = (uint32_t)wh[2 * j + e] << 16, xb = (uint32_t)xh[2 * j + e] << 16;
            float wf, xf;
            memcpy(&wf, &wb, 4);
            memcpy(&xf, &xb, 4);
            a[j] = ds_emu_daz(fmaf(ds_emu_daz(wf), ds_emu_daz(xf), ds_emu_daz(a[j])));
        }
    return simde_mm512_loadu_ps(a);
}
#endif
