/* The one kernel interface every heavy linear goes through (MODEL.md §2.12, CHECKPOINT.md §7).
 *
 * Why this shape: the model code describes *what* a linear is (format, shape, the published
 * tensors) in a ds_linear and asks for y = W·x on n activation rows.  *How* it runs (scalar
 * reference, AVX2, AVX-512 VNNI, repacked tiles, threads) is this module's business and can change
 * without touching the model.  Outputs are fp32 *before* the bf16 rounding the spec applies to
 * linear outputs, because some consumers keep fp32 (router logits, ratio-2 compressor, head);
 * callers round with ds_f32_to_bf16 where MODEL.md says bf16.
 *
 * Exactness contract (tests rely on it):
 *  - quantized (W8A8/W4A8): acc is an exact int32 sum, y = (float)acc * (s_x * s_w[o]), computed
 *    as written (s_x*s_w first, in fp32).  Every path must be bit-identical to the scalar one.
 *  - float (BF16/F32 weights): y = Σ_i fp32(W[o][i])·fp32(x[i]) in fp32.  The reduction order is
 *    fixed per path (independent of n, of row position in the batch and of thread count), so
 *    results are batch- and chunk-invariant; SIMD paths may differ from scalar by rounding. */
#ifndef DS_KERNELS_H
#define DS_KERNELS_H
#include "base/common.h"
#include "base/bf16.h"

typedef enum { DS_LIN_W8A8 = 0, DS_LIN_W4A8, DS_LIN_BF16, DS_LIN_F32 } ds_lin_fmt;

typedef struct ds_linear {
    ds_lin_fmt fmt;
    int out, in;           /* logical shape [out, in] */
    const void *w;         /* W8A8: int8 [out][in]; W4A8: int8 [ceil(out/2)][in], two int4 codes per
                              byte packed along out (low nibble = even row); BF16: uint16 [out][in];
                              F32: float [out][in].  Points into the mmap'd checkpoint. */
    const float *w_scale;  /* [out] per-output-channel scale (quantized formats), else NULL */
    void *packed;          /* kernel-private repacked copy (NULL = use w directly) */
    size_t packed_bytes;
    int packed_kind;       /* which path produced `packed` */
} ds_linear;

/* Per-row dynamic int8 quantization of bf16 activations (§2.12): s = amax/127,
 * q = clamp(rne(x/s), -127, 127); amax == 0 gives s = 0 and q = 0.  q is [n][k], s is [n]. */
void ds_quantize_rows(const ds_bf16 *x, int n, int k, int8_t *q, float *s);

/* y[n][out] = W·x for bf16 rows x[n][in] (fp32 result, see contract above). */
void ds_linear_forward(const ds_linear *L, const ds_bf16 *x, int n, float *y);
/* Same for already-quantized rows (quantized formats only): lets several linears share one
 * quantization of the same rows. */
void ds_linear_forward_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y);

/* Optional load-time repack into kernel tiles; returns bytes allocated (0 if none). */
size_t ds_linear_prepare(ds_linear *L);
void ds_linear_release(ds_linear *L);

/* Kernel path selection.  name: "auto", "avx512-vnni", "avx2", "reference".  An explicit path the
 * CPU cannot run is an error (never a silent fallback). */
int ds_kernels_select(const char *name, ds_error *err);
const char *ds_kernels_active(void);

/* ---- scalar reference implementations (ground truth for every SIMD path) ---- */
void ds_ref_linear_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y);
void ds_ref_linear_f(const ds_linear *L, const ds_bf16 *x, int n, float *y);

/* Unpack one int4 code from the W4A8 layout: row o, column i. */
static inline int ds_w4_code(const int8_t *w, int in, int o, int i) {
    uint8_t b = (uint8_t)w[(size_t)(o >> 1) * (size_t)in + (size_t)i];
    int n = (o & 1) ? (b >> 4) : (b & 0x0f);
    return n >= 8 ? n - 16 : n;
}

#endif
