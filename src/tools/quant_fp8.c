/* FP8 / MXFP4 decoding (see quant_fp8.h).  The formats are decoded from their definitions in
 * CHECKPOINT.md §14 by bit manipulation, with ldexp for the power-of-two scales, so every value is
 * exact: no table of floats to drift, no rounding anywhere. */
#include "tools/quant_fp8.h"
#include <math.h>

float ds_e4m3_to_f32(uint8_t b) {
    if ((b & 0x7f) == 0x7f) return NAN;
    int sign = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10); /* m/8·2^-6, (1+m/8)·2^(e-7) */
    return sign ? -v : v;
}

float ds_e2m1_to_f32(uint8_t nib) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[nib & 7];
    return (nib & 8) ? -v : v;
}

float ds_e8m0_to_f32(uint8_t b) { return b == 255 ? NAN : ldexpf(1.0f, (int)b - 127); }

static int nan_at(const char *name, const char *what, int64_t r, int64_t c, ds_error *err) {
    return ds_fail(err, "E_SRC_NONFINITE", "%s: expected finite FP8 codes, found a NaN %s at row %lld column %lld", name, what,
                   (long long)r, (long long)c);
}

int ds_fp8_decode_rows(ds_fp8_kind kind, const uint8_t *w, const uint8_t *s, int64_t cols, int64_t s_cols,
                       int64_t r0, int64_t r1, float *out, const char *name, ds_error *err) {
    for (int64_t r = r0; r < r1; r++) {
        float *o = out + (r - r0) * cols;
        if (kind == DS_I8_ROWGROUP) { /* codes in [-127, 127] times a float scale: exact */
            const float *fs = (const float *)(const void *)s;
            for (int64_t c = 0; c < cols; c++) o[c] = (float)(int8_t)w[r * cols + c] * fs[r * s_cols + c / 32];
            continue;
        }
        for (int64_t c = 0; c < cols; c++) {
            uint8_t sb;
            float v;
            if (kind == DS_FP8_MXFP4) {
                uint8_t byte = w[r * (cols / 2) + c / 2];
                v = ds_e2m1_to_f32((c & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 0xf)); /* low nibble = even input */
                sb = s[r * s_cols + c / 32];
            } else {
                v = ds_e4m3_to_f32(w[r * cols + c]);
                if (isnan(v)) return nan_at(name, "E4M3 weight", r, c, err);
                sb = kind == DS_FP8_TILE ? s[(r / 32) * s_cols + c / 32] : s[r * s_cols + c / 32];
            }
            if (sb == 255) return nan_at(name, "E8M0 scale", r, c, err);
            o[c] = (float)ldexp((double)v, (int)sb - 127); /* exact: 4 significant bits */
        }
    }
    return 0;
}
