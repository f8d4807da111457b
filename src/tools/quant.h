/* The offline quantizers of `dsflash quantize` and `dsflash mkmodel` (TOOLS.md §3.3, §3.4).
 *
 * Why one module: a release written by mkmodel and one written by quantize from the same float
 * weights must be identical byte for byte, so there is exactly one implementation of each scheme
 * and both tools call it.  Every function works on one output row (or one Engram row) of fp32
 * values, because rows are independent: that is what makes the result the same for any thread
 * count and lets callers stream a tensor in row chunks.
 *
 * Arithmetic contract (the NumPy oracle in tests/quantize/ repeats it exactly):
 *  - every rounding to an integer code is round-half-to-even of an fp32 quotient `w / s`
 *    (IEEE fp32 division, no reciprocal multiply);
 *  - W8A8: m = max|w| (exact), s = fp32(m / 127) (fp32 division), or s = 1 when m == 0;
 *  - W4A8 "ssz": for k = 0..steps-1, s_k = fp32((1 - 0.05·k) · m / 7) evaluated in float64 and
 *    rounded once (k = 0 is therefore the correctly rounded m / 7); the error
 *    e_k = Σ_i (w_i - s_k·q_i)² is accumulated in float64; the smallest e_k wins and ties keep the
 *    earlier k (the larger clipping ratio).  A step whose s_k underflows to 0 is skipped;
 *  - scale_bias = fp32(8·s) · fp32(Σ q) over the row (or over each of `chunks` equal input chunks);
 *  - Engram: per group of 32, a = max|x|; a == 0 gives scale 1 and zero codes; otherwise
 *    scale = 2^e with e = k - 1 if f == 0.5 else k, where frexp((double)a / 127) = f·2^k — never a
 *    floating log2, which misrounds at exact powers of two (PITFALLS.md 17). */
#ifndef DS_TOOLS_QUANT_H
#define DS_TOOLS_QUANT_H
#include "base/common.h"

#define DS_SSZ_STEPS_DEFAULT 10
#define DS_SSZ_STEPS_MAX 20          /* r = 1 - 0.05k must stay positive */
#define DS_SCALE_BIAS_W2_CHUNKS 16   /* CHECKPOINT.md §6.1: w2 scale_bias is [out, 16] */

/* Round-half-to-even of an fp32 value, exact for |x| < 2^22 (the only range the quantizers
 * use after clamping); written so the compiler can vectorize it. */
static inline float ds_rne_small(float x) {
    const float magic = 12582912.0f; /* 1.5 · 2^23 */
    return (x + magic) - magic;
}

/* W8A8_DYNAMIC, one row of n weights: q[i] in [-127, 127], *scale as in the contract above. */
void ds_quant_w8_row(const float *w, int64_t n, int8_t *q, float *scale);

/* W4A8_DYNAMIC, one row: codes q[i] in [-8, 7] (one per int8), *scale the chosen s_k.
 * steps = 1 is the `minmax` search (r = 1 only).  Returns the chosen k.  An all-zero row gives
 * scale 1 and zero codes (returns 0). */
int ds_quant_w4_row(const float *w, int64_t n, int steps, int8_t *q, float *scale);

/* Pack two rows of int4 codes into one packed row along the output dimension:
 * byte[i] = (even[i] & 0xF) | ((odd[i] & 0xF) << 4); odd == NULL pads with a zero row. */
void ds_quant_w4_pack(const int8_t *even, const int8_t *odd, int64_t n, int8_t *packed);

/* scale_bias of one row: sb[c] = fp32(8·scale) · Σ_{i in chunk c} q[i] for c < chunks, chunk c
 * covering inputs [c·n/chunks, (c+1)·n/chunks) (integer division). */
void ds_quant_scale_bias(const int8_t *q, int64_t n, float scale, int chunks, float *sb);

/* Engram power-of-two exponent for a group maximum a > 0: the smallest e with 2^e >= a / 127. */
int ds_engram_exponent(float a);
/* One Engram row of `width` values (a multiple of 32): codes[width] and scales[width / 32].
 * Returns 0, or -1 when a scale would not be a normal fp32 power of two (|x| below ~2^-120:
 * no real table has such values; the caller reports the tensor). */
int ds_quant_engram_row(const float *x, int width, int8_t *codes, float *scales);

/* Reconstruction error bookkeeping: rel_rmse = sqrt(err2 / ref2) = ‖W − Ŵ‖ / ‖W‖. */
typedef struct ds_qerr {
    double err2;   /* Σ (w − ŵ)² */
    double ref2;   /* Σ w² */
} ds_qerr;
/* Add one row's contribution; codes are int8 (W8/W4 codes), ŵ = code · scale. */
void ds_qerr_add_row(ds_qerr *e, const float *w, const int8_t *q, int64_t n, float scale);
double ds_qerr_rel_rmse(const ds_qerr *e);

/* 1 when every value is finite. */
int ds_all_finite(const float *x, int64_t n);

#endif
