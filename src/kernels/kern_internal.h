/* Private contract between the dispatcher (dispatch.c) and the per-ISA kernel files.
 *
 * Why a repacked tile layout: the published W4A8 layout packs two output rows per byte along the
 * output axis, and W8A8 is plain row-major; neither lets one 64-byte load feed an int8 dot-product
 * instruction for 16 outputs at once.  The load-time repack turns each linear into panels of 16
 * output rows; a panel is a sequence of 64-byte tiles along the input axis:
 *   W8A8 tile = 16 rows x 4 inputs  (byte 4*r + j = W[o0+r][4s+j], signed int8)
 *   W4A8 tile = 16 rows x 8 inputs  (byte 4*r + j: low nibble = W[o0+r][8s+j] + 8,
 *                                    high nibble = W[o0+r][8s+4+j] + 8, i.e. unsigned 0..15)
 * so an AVX-512 register holds one tile and VPDPBUSD against 4 broadcast activation bytes
 * accumulates 16 outputs; AVX2 reads the same tile as two 8-row halves.  One layout serves both
 * SIMD paths, so switching --kernels never needs a second copy.  Padding (rows past `out`, inputs
 * past `in`) holds code 0.  The biases (+8 for int4, x+128 for the unsigned VPDPBUSD operand on
 * W8A8) are removed exactly in int32 with per-row sums, so every path stays bit-exact. */
#ifndef DS_KERNELS_INTERNAL_H
#define DS_KERNELS_INTERNAL_H
#include "kernels/kernels.h"

#define DS_PANEL_ROWS 16
#define DS_TILE_BYTES 64
/* Software prefetch distance, in bytes ahead in each weight panel, of the int8 kernels' few-row
 * product (AVX-512 and AVX2).  Expert matrices are short (mini's panels are 6-16 KiB, a
 * DeepSeek-sized expert's 18-40 KiB) and a batched-decode step walks a hundred of them, so the
 * hardware prefetchers ramp up again on every panel and 4 KiB page.  `perf kernels`' MoE row
 * (48 experts' w1+w3 of [768,2048], 1-4 rows each): +15-25% at 2 KiB, less at 1 or 4 KiB.
 * AVX-512 prefetches non-temporally (DS_Q_HINT), AVX2 into L1 (T0).  On the AVX-512 host the L2
 * hint (T1) beat L1 (decision 145: +6-10% on that MoE row, 1.3-1.4x on mini's 1- and 4-row
 * decode steps; the AVX2 path lost 25-45% with it, so it keeps T0), and the non-temporal hint
 * beat L2 (decision 195: in-process alternation, whole decode steps 1.05-1.06x, MoE expert sets
 * of 2 rows 1.06-1.08x): a weight line is read once per step, and marked so it leaves first it
 * stops evicting the activations, KV rows and partial sums the step does reuse.  The fast float
 * few-row GEMV and, in the official release, the MXFP4 panels and FP8 in-register tiles of one or
 * two activation rows take the same hint. */
#define DS_Q_PREFETCH 2048
#define DS_Q_HINT _MM_HINT_NTA
#define DS_PACK_KIND_TILES16 1

typedef struct ds_packed {
    ds_lin_fmt fmt;
    int out, in;
    int npanels;          /* ceil(out / 16) */
    int ksteps;           /* tiles per panel: W8 ceil(in/4), W4 ceil(in/8) */
    size_t panel_bytes;   /* 64 * ksteps */
    float *scale;         /* [npanels*16] s_w, 0 for padding rows */
    int32_t *wsum;        /* [npanels*16] Σ_i W[o][i] (W8 only; removes the x+128 bias) */
    uint8_t *tiles;       /* npanels * panel_bytes, 64-byte aligned */
} ds_packed;

/* Quantized activations as the SIMD kernels read them. */
typedef struct ds_qact {
    const int8_t *q;      /* [n][kpad] codes, zero past `in` */
    const uint8_t *qu;    /* [n][kpad] q + 128 (q ^ 0x80), or NULL when the path does not use it */
    const float *s;       /* [n] */
    const int32_t *xsum;  /* [n] Σ_i q[i] (removes the +8 bias of int4 tiles) */
    int n, kpad;
} ds_qact;

/* ---- fast-tier float linears (the blocked fp32 order of kernels.h) ----
 * Weights stay in the published row-major layout: one 64-byte load already holds 32 bf16 (the
 * 16 pairs of one block, pair j in 32-bit word j) or 16 fp32 of one row, exactly what the lanes
 * of the order want, so a repack would buy nothing.  The only copy ever made is a flushed one,
 * for a BF16 matrix that holds values below 2^-50 (none in trained checkpoints; the load-time
 * scan proves it).  Tail blocks are read through a zero-padded copy on the stack. */
#define DS_PACK_KIND_FF 2
float ds_ff_bf16_value(ds_bf16 v);          /* the flush rule: |v| < 2^-50 -> 0 */
float ds_ff_reduce16(const float a[16]);    /* the fixed lane-combination tree */

typedef struct ds_ffw {
    ds_lin_fmt fmt;       /* DS_LIN_BF16 or DS_LIN_F32 (DS_LIN_FP8: only inside the AVX2 FP8 route) */
    int out, in;
    const void *w;        /* row-major [out][in]: the published matrix or its flushed copy (FP8: codes) */
    const uint8_t *e8m0;  /* FP8: block scales [ceil(out/32)][ceil(in/32)]; else NULL */
} ds_ffw;

/* Activation layouts (rows zero padded to kpad = in rounded up to 32 (BF16) / 16 (F32)):
 *   DS_FF_BF16_DOT: flushed bf16 rows, as vdpbf16ps reads them;
 *   DS_FF_BF16_FMA: fp32; per 32-block the 16 odd elements (2j+1), then the 16 even ones (2j);
 *   DS_FF_F32:      fp32 rows. */
enum { DS_FF_F32 = 0, DS_FF_BF16_FMA = 1, DS_FF_BF16_DOT = 2 };
typedef struct ds_ffact {
    const void *x;
    int n, kpad, kind;
    int halves;           /* F32 / BF16_FMA: 1 = a row holds the lanes 0-7 of every 16-value step
                             first (kpad / 2 floats), then the lanes 8-15: the layout above with
                             its 8-lane halves gathered, so that an 8-lane kernel reading one half
                             at a time reads whole cache lines (the AVX2 multi-row path) */
    int stride;           /* elements from one row to the next: kpad + one cache line, so rows
                             whose byte length is a multiple of 4 KiB do not all fall into the
                             same L1 sets */
} ds_ffact;
/* Load-time header (+ flushed copy if needed) of a fast-tier float linear (fastfloat.c). */
ds_ffw *ds_ff_pack(const ds_linear *L, size_t *bytes);
/* Build X's rows from bf16 activations x[n][in] into buf (n * (kpad + 32) * 4 bytes suffice);
 * halves (F32 / BF16_FMA only): the gathered-halves layout (ds_ffact.halves). */
void ds_ff_prepare_act(int kind, int halves, const ds_bf16 *x, int n, int in, void *buf, ds_ffact *X);

/* One kernel path.  q_panels: y[r][o] for rows r in [r0,r1) and outputs of panels [p0,p1)
 * (stride ystride floats per row; outputs >= out are not written).  f_rows: float linear for
 * outputs [o0,o1), x given as exact float64 rows of stride xstride (zero padded). */
typedef struct ds_kern_ops {
    const char *name;
    int wants_qu;
    int ff_halves;        /* ff_rows reads more than one row faster in the gathered-halves layout */
    int fp8_plain_map;    /* its FP8 decode reads the plain-tile map (ds_fp8_plain_map): make it at load */
    void (*q_panels)(const ds_packed *P, const ds_qact *X, int r0, int r1, int p0, int p1, float *y,
                     int ystride);
    void (*f_rows)(const ds_linear *L, const double *xd, int xstride, int n, int o0, int o1, float *y);
    void (*quantize_row)(const ds_bf16 *x, int k, int8_t *q, float *s);
    /* fast tier: outputs [o0,o1) of every row of X (layout X->kind); ff_dot is NULL where the
     * path has no native bf16 dot product (X->kind DS_FF_BF16_DOT goes only there). */
    void (*ff_rows)(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride);
    void (*ff_dot)(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride);
    /* ds_fast_pair_scores8 on vdpbf16ps (NULL where the path has none) */
    void (*pair_scores8)(const ds_bf16 *q, int n, const ds_bf16 *const *keys, int nk, float *out);
} ds_kern_ops;

/* Whether the AVX-512 path may use vdpbf16ps: CPUID reports avx512-bf16 and a probe on
 * discriminating operands shows the instruction rounds exactly as the fast-tier order (kern_avx512.c). */
int ds_avx512_bf16dot_matches(void);
/* Tests: allow (1) or forbid (0) vdpbf16ps where available; returns the previous setting. */
int ds_kernels_allow_bf16dot(int allow);
/* Whether fast-tier BF16 linears run vdpbf16ps on the active path right now. */
int ds_kernels_bf16dot_active(void);

extern const ds_kern_ops ds_kern_avx2;
extern const ds_kern_ops ds_kern_avx512;
void ds_avx2_quantize_row(const ds_bf16 *x, int k, int8_t *q, float *s);
/* The AVX2 fast-tier float linears (kern_avx2_fast.c): outputs [o0, o1) of every row of X. */
void ds_avx2_ff_rows(const ds_ffw *W, const ds_ffact *X, int o0, int o1, float *y, int ystride);

/* Reference pieces on output-row ranges (threaded by the dispatcher). */
void ds_ref_quantize_rows(const ds_bf16 *x, int n, int k, int8_t *q, float *s);
void ds_ref_linear_q_rows(const ds_linear *L, const int8_t *xq, const float *xs, int n, int o0, int o1,
                          float *y);
void ds_ref_linear_f_rows(const ds_linear *L, const ds_bf16 *x, int n, int o0, int o1, float *y);

/* Build the tile layout of a quantized linear (repack.c).  Returns NULL for float formats. */
ds_packed *ds_pack_linear(const ds_linear *L, size_t *bytes);

/* Per-thread scratch of the calling thread (dispatch.c): one slot per use, grown on demand and
 * reused by later calls, so a warm forward allocates nothing and takes no page fault; freed when
 * the thread exits.  A slot is its caller's until the call returns: two buffers alive at once in
 * one call take two slots. */
enum {
    DS_SLOT_Q, DS_SLOT_QU, DS_SLOT_S, DS_SLOT_XSUM, DS_SLOT_XD, DS_SLOT_TASKS, DS_SLOT_ACT, DS_SLOT_ACTS,
    DS_SLOT_OFF_ACT, DS_SLOT_OFF_TILES, DS_SLOT_OFF_Q, DS_SLOT_OFF_S, DS_SLOT_OFF_E4M3, DS_SLOT_OFF_JOBS, DS_SLOT_MX_BATCH,   /* official*.c */
    DS_SLOT_N
};
void *ds_kern_scratch(int slot, size_t bytes);

#endif
