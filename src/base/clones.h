/* DS_CLONES: compile a function as AVX-512, AVX2 and baseline versions, picked at load by the CPU.
 *
 * Why one definition: the loops that carry it are written so that every version computes the same
 * IEEE operations in the same order (element-wise work, or the fixed lane order of the fast tier),
 * so the clones change speed, never bits.  The AVX-512 version targets x86-64-v4 (F, BW, CD, DQ, VL,
 * as every AVX-512 server CPU has): with F alone GCC widens and narrows 16-bit lanes through
 * 128-bit pieces.  Sanitizer builds and clang get one version (the same
 * bits; ASan and target_clones do not mix well, and clang spells the attribute differently). */
#ifndef DS_BASE_CLONES_H
#define DS_BASE_CLONES_H
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
#define DS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DS_CLONES
#endif
#endif
