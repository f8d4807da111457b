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
 *  - float (BF16/F32 weights): y = fp32(Σ_i f64(W[o][i])·f64(x[i])) (docs/NUMERICS.md rule 2):
 *    products are exact in float64, the sum is accumulated in float64 and rounded once.  The
 *    reduction order is fixed per path (independent of n, of row position in the batch and of
 *    thread count), so results are batch- and chunk-invariant; SIMD paths may differ from the
 *    scalar one only through float64 rounding of the partial sums (in practice the fp32 results
 *    agree; tests allow |diff| <= 1e-6 * Σ|W·x|).
 *
 *  - float, FAST tier (ds_linear.numerics == DS_NUMERICS_FAST; docs/NUMERICS.md, fast tier): fp32
 *    accumulation in one fixed blocked order that every path reproduces bit for bit (vdpbf16ps,
 *    FMA on AVX-512 / AVX2, scalar fmaf).  16 fp32 lanes a[0..15] start at +0; inputs are padded
 *    with zeros to whole blocks.
 *      BF16: blocks of 32 inputs; per block, lane j takes the pair (2j, 2j+1), odd element first:
 *            a[j] = fma(w[2j+1], x[2j+1], a[j]); a[j] = fma(w[2j], x[2j], a[j])  (vdpbf16ps order).
 *            Weights and activations with |v| < 2^-50 (subnormals included) count as 0: then every
 *            nonzero product and partial sum is a multiple of 2^-114 and never subnormal, so the
 *            DAZ/FTZ of vdpbf16ps can never act and FMA paths give the same bits.
 *      F32:  blocks of 16 inputs; lane j takes element j: a[j] = fma(w[j], x[j], a[j]).
 *    Lanes are then combined as h[j] = a[j] + a[j+8], q[j] = h[j] + h[j+4], d[j] = q[j] + q[j+2],
 *    y = d[0] + d[1].  Products, sums and their order depend only on (o, that row), never on n, on
 *    the row's position or on threads.  Identical bits hold for every finite result; once a
 *    product or sum overflows, every path gives a non-finite value (inf vs NaN may differ).
 *
 * Threads: every forward splits its output rows over the persistent pool (base/threadpool.h);
 * results never depend on the thread count.  Called from inside a pool task, a forward runs
 * serially on that thread (the pool does not nest). */
#ifndef DS_KERNELS_H
#define DS_KERNELS_H
#include "base/common.h"
#include "base/bf16.h"

/* FP8 / MXFP4: the official release's formats (CHECKPOINT.md §14), run in place by official.c:
 * FP8 = E4M3 codes [out][in] with E8M0 scales per 32x32 tile (bf16 activations, float contract
 * above); MXFP4 = E2M1 codes [out][in/2] (low nibble = even input) with E8M0 scales per 32 inputs
 * of a row (per-row int8 activations, exact integer block sums; contract in kern_official.h). */
typedef enum { DS_LIN_W8A8 = 0, DS_LIN_W4A8, DS_LIN_BF16, DS_LIN_F32, DS_LIN_FP8, DS_LIN_MXFP4 } ds_lin_fmt;

/* Numerics tier.  EXACT: the contract above (float64 reductions, bit-identical to the NumPy
 * oracle).  FAST: float linears accumulate in fp32 in a fixed blocked order (deterministic,
 * independent of n, of row position and of thread count); quantized linears are exact integer
 * sums in both tiers. */
typedef enum { DS_NUMERICS_EXACT = 0, DS_NUMERICS_FAST = 1 } ds_numerics;
/* "exact" / "fast" -> tier; -1 for anything else. */
int ds_numerics_parse(const char *name);
const char *ds_numerics_name(ds_numerics n);

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
    ds_numerics numerics;  /* tier of float formats (set by the model when binding) */
    const uint8_t *w_e8m0; /* FP8: [ceil(out/32)][ceil(in/32)]; MXFP4: [out][in/32]; else NULL */
    int act_e4m3;          /* FP8 / MXFP4 only: activation rows are quantized to E4M3 per 32 inputs
                              with power-of-two scales first (the official runtime's numerics,
                              `--activations e4m3`); 0 = the default (MXFP4: per-row int8, FP8: bf16) */
} ds_linear;

/* Per-row dynamic int8 quantization of bf16 activations (§2.12): s = amax/127,
 * q = clamp(rne(x/s), -127, 127); amax == 0 gives s = 0 and q = 0.  q is [n][k], s is [n]. */
void ds_quantize_rows(const ds_bf16 *x, int n, int k, int8_t *q, float *s);

/* y[n][out] = W·x for bf16 rows x[n][in] (fp32 result, see contract above). */
void ds_linear_forward(const ds_linear *L, const ds_bf16 *x, int n, float *y);
/* Same for already-quantized rows (quantized formats only): lets several linears share one
 * quantization of the same rows. */
void ds_linear_forward_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y);

/* Load-time repack into kernel tiles; returns bytes allocated (0 if none: float formats, or the
 * reference path).  The published tensors are never modified.  Quantized linears that were not
 * prepared are repacked on first use by a SIMD path (thread-safe); call this at load to pay the
 * cost up front and to report it.  ds_linear_release frees the tiles. */
size_t ds_linear_prepare(ds_linear *L);
void ds_linear_release(ds_linear *L);
/* The row-major matrix of a BF16/F32 linear as the fast tier's kernels read it: the prepared copy
 * (2 MiB pages, already resident; BF16 values below the fast order's flush threshold stored as the
 * zero that order reads them as) when there is one, else the published matrix in the mapping.  For
 * code that reads single rows (the head screen's exact logits): a row of the mapping costs page
 * faults and 4 KiB-page walks the copy does not (decision 189). */
const void *ds_linear_float_rows(const ds_linear *L);
/* Bytes of repacked tiles currently held by all linears (for the load-time memory report). */
size_t ds_kernels_packed_bytes(void);
/* Whether a forward of L streams its kernel-private copy (`packed`: repacked tiles or panels, a
 * flushed float copy) rather than the published weights (benchmarks judge that stream). */
int ds_linear_streams_packed(const ds_linear *L);
/* The published weight codes of L at L->w (its scales apart): what a prepared copy replaces. */
size_t ds_linear_code_bytes(const ds_linear *L);
/* 1 when every forward of L on the active path reads its prepared copy and never L->w: int8
 * tiles, MXFP4 panels without a panel left to the row functions, fast-tier float copies.  The
 * loader then gives the published pages back (model.c). */
int ds_linear_published_idle(const ds_linear *L);
/* Weight bytes streamed by linear forwards since start (each call adds its matrix and scales
 * once, whatever n is): the "bytes read per token" of bench decode.  Relaxed atomic counter. */
uint64_t ds_kernels_weight_bytes_read(void);
/* Multiply-adds issued by linear forwards since start (out * in * n per call). */
uint64_t ds_kernels_macs(void);
/* What a linear's multiply-adds run on, so a benchmark can set each call against the right peak:
 * int8 dot products (W8A8, W4A8, MXFP4 with int8 rows), fp32 FMA on fp32 weights (fast-tier F32),
 * the fast tier's bf16 path (BF16 and FP8 weights: vdpbf16ps where the CPU has it, else widening +
 * FMA), and the exact tier's float64 accumulation (no probe measures its peak). */
typedef enum { DS_MAC_INT8, DS_MAC_F32, DS_MAC_BF16, DS_MAC_F64, DS_MAC_CLASSES } ds_mac_class;
ds_mac_class ds_linear_mac_class(const ds_linear *L);
/* Called once per linear call (n > 0 rows) with its class, weight bytes and multiply-adds, from
 * the calling thread (several at once when forwards run concurrently).  Install or clear (NULL)
 * only while no forward runs. */
typedef void (*ds_kernel_call_fn)(void *ctx, ds_mac_class cls, uint64_t weight_bytes, uint64_t macs);
void ds_kernels_observe(ds_kernel_call_fn fn, void *ctx);

/* Several independent quantized linears in ONE pool dispatch (e.g. w1 and w3 of every expert of a
 * MoE step, or wq_a + wkv on the same rows).  Each job has its own rows; outputs are identical to
 * calling ds_linear_forward_q on each job.  Saves one barrier per job on small matrices. */
typedef struct ds_linear_job {
    const ds_linear *L;
    const int8_t *xq;      /* [n][L->in] */
    const float *xs;       /* [n] */
    int n;
    float *y;              /* [n][L->out] */
} ds_linear_job;
void ds_linear_forward_q_many(const ds_linear_job *jobs, int n_jobs);

/* MoE row grouping (MODEL.md §2.9, SERVING.md §8.6): given the top-k expert ids of n rows
 * (sel[r*k + j]), list for each expert the (row, slot) pairs routed to it, rows ascending.  The
 * model then gathers each expert's rows (ds_gather_rows_q), runs its linears once on that block
 * (each expert's weights streamed once per step), and sums per row in ascending expert id with
 * the shared expert last.  Entries for expert e are idx[off[e] .. off[e+1]); idx = r*k + j
 * identifies the slot (row r = idx / k).  Returns -1 with err if an id is out of [0, n_experts). */
typedef struct ds_moe_groups {
    int n_experts, n_rows, k;
    int *off;              /* [n_experts + 1] */
    int *idx;              /* [n_rows * k] */
} ds_moe_groups;
int ds_moe_group_rows(const int32_t *sel, int n, int k, int n_experts, ds_moe_groups *g, ds_error *err);
/* Same grouping into caller memory: off [n_experts + 1], idx [n * k] (no allocation; what the
 * model's step uses).  O(n·k + n_experts). */
int ds_moe_group_rows_into(const int32_t *sel, int n, int k, int n_experts, int *off, int *idx, ds_error *err);
void ds_moe_groups_free(ds_moe_groups *g);
/* Copy quantized rows src[rows[i]] (row length k) into dst[i]; scales likewise. */
void ds_gather_rows_q(const int8_t *xq, const float *xs, int k, const int *rows, int n,
                      int8_t *dq, float *ds);

/* The fast tier's flush rule (docs/NUMERICS.md "Fast tier"): a bf16 operand whose exponent field
 * is below this (|v| < 2^-50, subnormals included) counts as 0 in every bf16 product of that tier. */
#define DS_FF_MIN_EXP_FIELD 77
/* Fast-tier attention scores on the active path's bf16 dot-product instruction (vdpbf16ps), in
 * the pair order of docs/NUMERICS.md: out[8·u + r] = the pair-order dot of query row r and key u,
 * for 8 query rows (bf16, already flushed, zero padded to n, a multiple of 32, rows n apart) and nk
 * keys (n values each, flushed here).  Only where ds_fast_pair_scores_native() says so; elsewhere
 * the caller's vector code gives the same bits. */
int ds_fast_pair_scores_native(void);
void ds_fast_pair_scores8(const ds_bf16 *q, int n, const ds_bf16 *const *keys, int nk, float *out);

/* Kernel path selection.  name: "auto", "avx512-vnni", "avx2", "reference".  An explicit path the
 * CPU cannot run is an error (never a silent fallback). */
int ds_kernels_select(const char *name, ds_error *err);
const char *ds_kernels_active(void);
/* Whether this CPU can run a named path ("auto" and "reference": always). */
int ds_kernels_available(const char *name);
/* Why "auto" chose what it chose (CPU features), for the start-up echo. */
const char *ds_kernels_reason(void);

/* Self-check (SERVING.md §13 step 3): run the active path and the scalar reference on random
 * tiles of every family and report max |diff|.  Integer families and the fast-tier float
 * families ("bf16-fast", "f32-fast") must give 0; exact-tier float families are within 1e-6
 * relative.  Returns 0 if every family passed, -1 otherwise (err names the
 * family).  families[] receives one line per family ("kernel w4a8: OK avx2 ENGAGED (tiles 64,
 * max |diff| 0)") when non-NULL. */
typedef struct ds_kernel_check {
    char family[16];       /* "w4a8", "w8a8", "bf16", "f32", "quantize" */
    char path[24];
    double max_abs_diff;
    int ok;
    char line[160];
} ds_kernel_check;
int ds_kernels_selfcheck(ds_kernel_check out[8], int *n_out, ds_error *err);

/* ---- scalar reference implementations (ground truth for every SIMD path) ---- */
void ds_ref_linear_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y);
/* Float linear in the tier L->numerics names (exact: float64; fast: the blocked fp32 order). */
void ds_ref_linear_f(const ds_linear *L, const ds_bf16 *x, int n, float *y);

/* Official-format linears (official.c; reached through ds_linear_forward / _forward_q). */
void ds_official_forward(const ds_linear *L, const ds_bf16 *x, int n, float *y);
void ds_official_forward_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y);
/* MXFP4 jobs (default activations) in one pool dispatch; the bits of running them one by one. */
void ds_official_forward_q_many(const ds_linear_job *jobs, int n_jobs);
/* Self-check of the official-format families ("mxfp4", "fp8", "fp8-fast"; selfcheck_official.c),
 * the active path bit for bit against the scalar one.  Fills out[0..2]. */
int ds_official_selfcheck(ds_kernel_check out[3], int *n_out, ds_error *err);
/* Tests and `perf kernels`: allow (1) or forbid (0) the fast-tier FP8 in-register decode (forbidden:
 * every call decodes 16-row bf16 tiles; same bits either way); returns the previous setting. */
int ds_fp8_inreg_allow(int allow);

/* Unpack one int4 code from the W4A8 layout: row o, column i. */
static inline int ds_w4_code(const int8_t *w, int in, int o, int i) {
    uint8_t b = (uint8_t)w[(size_t)(o >> 1) * (size_t)in + (size_t)i];
    int n = (o & 1) ? (b >> 4) : (b & 0x0f);
    return n >= 8 ? n - 16 : n;
}

#endif
