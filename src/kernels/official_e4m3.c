/* The official release's activation numerics (`--activations e4m3`, CHECKPOINT.md §14, MODEL.md
 * Appendix C): in front of every linear the official runtime keeps in FP8 or FP4 (all of them
 * except `wo_a`), each activation row is quantized per 32 inputs to E4M3 with a power-of-two scale.
 *
 * Why integers: a quantized value is q·2^kb with q an E4M3 value, so u = q·2^9 is an integer of at
 * most 4 significant bits, |u| <= 448·2^9 = 229,376.  Carrying u and kb (the "units" of a row)
 * keeps the quantization exact and makes the two consumers simple:
 *   FP8 dense linears and the fast tier of MXFP4 take the rows as bf16 (u·2^(kb-9) has 4 significant
 *   bits, exact in bf16) and run their usual bf16 paths (official.c);
 *   MXFP4 in the exact tier multiplies u by the doubled E2M1 codes in int32 (|2·e2m1| <= 12, so a
 *   32-input block sums below 2^27) and adds the blocks exactly, as the int8 route of kern_official.h
 *   does, with the activation's per-block exponent now beside the weight's.
 *
 * The contract of the exact MXFP4 route, per activation row r and output row o:
 *     bsum[b] = Σ_{i in block b} 2·e2m1(code[o][i]) · u[r][i]                 (int32, exact)
 *     E[b]    = (scale byte[o][b] - 127) + kb[r][b] - 10       (2^-1 for the doubled code, 2^-9 for u)
 *     spread  = max_b E[b] - min_b E[b]
 *     spread <= 24 and nb <= 4096: acc = Σ_b bsum[b] << (E[b] - E_min) in int64 (|term| < 2^51,
 *                   no overflow), converted to double once, times 2^E_min;
 *     otherwise:    acc = Σ_b bsum[b]·2^E[b] in float64, b ascending;
 *     y = (float)acc.
 * Both tiers of FP8 and the fast tier of MXFP4 keep the contracts of official.c on the quantized
 * rows.  There is one scalar routine for the exact MXFP4 route: it is the option that follows the
 * official runtime, not the serving default, and every kernel path gives the same bits. */
#include "kernels/kern_official.h"
#include "base/threadpool.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define E4M3_UNITS_MAX 229376   /* 448·2^9 */
#define MX8_EXACT_SPREAD 24
#define MX8_EXACT_MAX_BLOCKS 4096

int ds_e4m3_block_exp(float amax) {
    amax = fmaxf(amax, 1e-4f);                     /* NaN-safe: fmaxf(NaN, y) = y */
    float v = amax * (1.0f / 448.0f);
    uint32_t u;
    memcpy(&u, &v, 4);
    return (int)((u >> 23) & 0xff) - 127 + ((u & 0x7fffff) != 0);
}

/* |q|·2^9 for t = |x|·2^(9-kb) >= 0: E4M3 rounding to nearest, ties to the even code, saturating.
 * Below 8 (the subnormal codes, steps of 2^-9) the step is one unit; above, 4 significant bits. */
static int32_t e4m3_units_of(float t) {
    if (!(t < (float)E4M3_UNITS_MAX)) return t == t ? E4M3_UNITS_MAX : 0;
    if (t < 8.0f) return (int32_t)rintf(t);
    uint32_t b;
    memcpy(&b, &t, 4);
    float step = ldexpf(1.0f, (int)(b >> 23) - 127 - 3);
    return (int32_t)(rintf(t / step) * step);     /* t/step in [8, 16): the integer's parity is the code's */
}

void ds_e4m3_row_units(const ds_bf16 *x, int k, int32_t *u, int16_t *kb) {
    for (int b0 = 0, b = 0; b0 < k; b0 += 32, b++) {
        const int b1 = DS_MIN(k, b0 + 32);
        float amax = 0.0f;
        for (int i = b0; i < b1; i++) amax = fmaxf(amax, fabsf(ds_bf16_to_f32(x[i])));
        const int e = ds_e4m3_block_exp(amax);
        kb[b] = (int16_t)e;
        for (int i = b0; i < b1; i++) {
            float v = ds_bf16_to_f32(x[i]);
            int32_t m = e4m3_units_of(ldexpf(fabsf(v), 9 - e));
            u[i] = signbit(v) ? -m : m;
        }
    }
}

void ds_e4m3_rows_bf16(const ds_bf16 *x, int n, int k, ds_bf16 *xq) {
    int32_t *u = ds_kern_scratch(DS_SLOT_OFF_Q, sizeof(int32_t) * (size_t)k + 4);
    int16_t *kb = ds_kern_scratch(DS_SLOT_OFF_S, sizeof(int16_t) * (size_t)(k + 31) / 32 + 4);
    for (int r = 0; r < n; r++) {
        ds_e4m3_row_units(x + (size_t)r * k, k, u, kb);
        for (int i = 0; i < k; i++) xq[(size_t)r * k + i] = ds_f32_to_bf16(ldexpf((float)u[i], kb[i / 32] - 9));
    }
}

double ds_mx8_row_ref(const uint8_t *codes, const uint8_t *sc, const int32_t *u, const int16_t *kb, int nb) {
    static const int8_t c2[16] = {DS_MX_SIGNED_LUT};
    int32_t stack[256], *bs = nb <= 256 ? stack : malloc(sizeof(int32_t) * (size_t)nb);
    int emin = 1 << 20, emax = -(1 << 20);
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            uint8_t c = codes[16 * b + j];
            s += c2[c & 15] * u[32 * b + 2 * j] + c2[c >> 4] * u[32 * b + 2 * j + 1];
        }
        bs[b] = s;
        int e = (int)sc[b] - 137 + kb[b];
        emin = DS_MIN(emin, e);
        emax = DS_MAX(emax, e);
    }
    double acc = 0.0;
    if (emax - emin <= MX8_EXACT_SPREAD && nb <= MX8_EXACT_MAX_BLOCKS) {
        int64_t total = 0;
        for (int b = 0; b < nb; b++) total += (int64_t)bs[b] * ((int64_t)1 << ((int)sc[b] - 137 + kb[b] - emin));
        acc = ldexp((double)total, emin);
    } else {
        for (int b = 0; b < nb; b++) acc += (double)bs[b] * ldexp(1.0, (int)sc[b] - 137 + kb[b]);
    }
    if (bs != stack) free(bs);
    return acc;
}

typedef struct mx8run {
    const ds_linear *L;
    const int32_t *u;    /* [n][in] */
    const int16_t *kb;   /* [n][nb] */
    int n, nb, per;
    float *y;
} mx8run;

static void mx8_task(void *vctx, int t, int thread) {
    (void)thread;
    mx8run *c = vctx;
    const ds_linear *L = c->L;
    const int o0 = t * c->per, o1 = DS_MIN(L->out, o0 + c->per), in = L->in;
    const uint8_t *W = L->w;
    for (int o = o0; o < o1; o++)
        for (int r = 0; r < c->n; r++)
            c->y[(size_t)r * L->out + o] = (float)ds_mx8_row_ref(W + (size_t)o * (in / 2), L->w_e8m0 + (size_t)o * c->nb,
                                                                 c->u + (size_t)r * in, c->kb + (size_t)r * c->nb, c->nb);
}

void ds_mx_e4m3_exact(const ds_linear *L, const ds_bf16 *x, int n, float *y) {
    const int in = L->in, nb = in / 32;
    int32_t *u = ds_kern_scratch(DS_SLOT_OFF_Q, sizeof(int32_t) * (size_t)n * in + 4);
    int16_t *kb = ds_kern_scratch(DS_SLOT_OFF_S, sizeof(int16_t) * (size_t)n * nb + 4);
    for (int r = 0; r < n; r++) ds_e4m3_row_units(x + (size_t)r * in, in, u + (size_t)r * in, kb + (size_t)r * nb);
    mx8run c = {.L = L, .u = u, .kb = kb, .n = n, .nb = nb, .y = y};
    ds_pool_run(ds_official_task_split(L->out, (double)L->out * in * n, &c.per), mx8_task, &c);
}

/* One MXFP4 weight row as flushed bf16 (the fast tier's tile): e2m1(code)·2^(s-127) has at most
 * 2 significant bits, exact in bf16 unless below 2^-50, where the fast BF16 rule flushes it. */
void ds_mx_decode_bf16(const uint8_t *codes, const uint8_t *sc, int in, ds_bf16 *dst) {
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int i = 0; i < in; i++) {
        uint8_t c = codes[i / 2];
        float v = e2m1[i % 2 ? c >> 4 : c & 15] * ds_fp8_scale_f(sc[i / 32]);
        ds_bf16 h = ds_f32_to_bf16(v);
        dst[i] = ((h >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0 : h;
    }
}
