/* Decoding the official FP8 / MXFP4 checkpoint for `dsflash quantize --src-format fp8`
 * (TOOLS.md §3.1, CHECKPOINT.md §14).
 *
 * Every encoded weight is turned into exact fp32 values before the ordinary quantizers see it:
 * E4M3 times an E8M0 power of two (dense 32×32 tiles, or per-32 row groups for the Engram rows) and
 * E2M1 pairs packed along the input dimension times per-32 E8M0 scales (routed experts).  Those
 * products have at most 4 significant bits, so they are also exact in BF16, which is how FLOAT
 * tensors of an FP8 source are written.  NaN codes (E4M3 0x7F/0xFF, E8M0 255) abort the run naming
 * the tensor, row and column. */
#ifndef DS_TOOLS_QUANT_FP8_H
#define DS_TOOLS_QUANT_FP8_H
#include "base/common.h"

typedef enum {
    DS_FP8_TILE = 1,     /* F8_E4M3 [out, in] + F8_E8M0 [ceil(out/32), ceil(in/32)] */
    DS_FP8_ROWGROUP,     /* F8_E4M3 [rows, w] + F8_E8M0 [rows, w/32] (Engram rows) */
    DS_FP8_MXFP4,        /* I8/U8 [out, in/2] + F8_E8M0 [out, in/32] (routed experts) */
    DS_I8_ROWGROUP       /* I8 [rows, w] + F32 [rows, w/32]: an Engram table already in release form
                          * inside a float source (codes times power-of-two scales, exact in BF16) */
} ds_fp8_kind;

float ds_e4m3_to_f32(uint8_t b);          /* NaN for 0x7F / 0xFF */
float ds_e2m1_to_f32(uint8_t nibble);     /* bit 3 sign, bits 0-2 index into {0,.5,1,1.5,2,3,4,6} */
float ds_e8m0_to_f32(uint8_t b);          /* 2^(b-127); NaN for 255 */

/* Decode rows [r0, r1) of a logical [rows, cols] weight into out ([r1-r0][cols] fp32).
 * `w` and `s` are the stored weight and scale bytes; s_cols is the scale tensor's column count.
 * Returns 0, or -1 with err (E_SRC_NONFINITE naming `name`, the row and column) on a NaN code. */
int ds_fp8_decode_rows(ds_fp8_kind kind, const uint8_t *w, const uint8_t *s, int64_t cols, int64_t s_cols,
                       int64_t r0, int64_t r1, float *out, const char *name, ds_error *err);

#endif
