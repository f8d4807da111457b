/* The greedy screen of the output head (head_screen.h says why; docs/DECISIONS.md 161 gives the
 * bound in full).
 *
 * The bound, per id v and row x.  The copy holds q_v = rne(w_v / s_v) with s_v = max|w_v| / 127,
 * so w_v = s_v·q_v + r_v; the kernel quantizes the row the same way, x = s_x·q_x + e_x, and returns
 * approx_v = fp32(acc·s_x·s_v) with acc = q_v·q_x exact.  Then
 *     w_v·x − acc·s_x·s_v = s_v·q_v·e_x + r_v·x,  so |w_v·x − acc·s_x·s_v| ≤ s_v‖q_v‖‖e_x‖ + ‖r_v‖‖x‖
 * (Cauchy–Schwarz), and the fast tier's logit differs from w_v·x by its fp32 accumulation,
 * at most γ_k·Σ|w_i x_i| ≤ γ_k‖w_v‖‖x‖ with k = ⌈D/16⌉ + 8 roundings along any path (each of the
 * 16 lanes takes ⌈D/16⌉ fused product-adds, four sums combine them), and by its flush of operands
 * below 2^-50, at most 2^-50·√D·(‖w_v‖ + ‖x‖).  So
 *     |logit_v − approx_v| ≤ ca_v·‖e_x‖ + cb_v·‖x‖ + cc_v   (+ the rounding of approx_v itself)
 * with ca_v = s_v‖q_v‖, cb_v = ‖r_v‖ + γ_k‖w_v‖ + 2^-50√D, cc_v = 2^-50√D‖w_v‖ + D·2^-130, each
 * rounded up at load; the test below adds 2^-19·|approx_v| for the three fp32 roundings of
 * approx_v (and an underflowing s_x·s_v), and a factor 1 + 2^-16 for its own arithmetic. */
#include "model/head_screen.h"
#include "model/draft.h"
#include "base/common.h"
#include "base/threadpool.h"
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Candidate ids beyond which a row is computed in full (a flat row, where few ids can be ruled
 * out: recomputing thousands of ids one by one would cost more than the full head's row). */
enum { MAX_CAND = 1024, SCAN_BLOCK = 64, APPROX_CHUNK = 64 };

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
/* x86-64-v3 rather than plain avx2 for the middle version: the exact recompute is fused
 * product-adds, which AVX2 alone would turn into calls. */
#define SCREEN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SCREEN_CLONES
#endif

struct ds_head_screen {
    ds_linear q8;          /* W8A8 [V, D]: the int8 copy and its per-row scales */
    int8_t *w8;            /* [V][D] row-major codes; NULL once the SIMD tiles of q8 hold them */
    float *s8;             /* [V] */
    float *ca, *cb, *cc;   /* [V] error coefficients (above) */
    float ca_max, cb_max, cc_max;   /* their largest values: the row scan's coarse bound */
    size_t bytes;
};

static atomic_uint_fast64_t g_rows, g_cands, g_full;

ds_head_screen_stats ds_head_screen_stats_get(void) {
    return (ds_head_screen_stats){atomic_load(&g_rows), atomic_load(&g_cands), atomic_load(&g_full)};
}

/* Smallest float not below v (v >= 0, finite or not). */
static float up(double v) {
    float f = (float)v;
    if ((double)f < v) f = nextafterf(f, INFINITY);
    return f;
}

static float weight_at(const ds_linear *L, size_t v, int i) {
    return L->fmt == DS_LIN_F32 ? ((const float *)L->w)[v * (size_t)L->in + (size_t)i]
                                : ds_bf16_to_f32(((const ds_bf16 *)L->w)[v * (size_t)L->in + (size_t)i]);
}

typedef struct build_ctx {
    const ds_linear *L;
    ds_head_screen *hs;
    double gamma, flush;
    int per;
    atomic_int bad;        /* a non-finite weight was seen */
} build_ctx;

/* Rows [t·per, (t+1)·per): int8 codes, scale and the three coefficients of each. */
static void build_task(void *vctx, int t, int thread) {
    (void)thread;
    build_ctx *c = vctx;
    const ds_linear *L = c->L;
    ds_head_screen *hs = c->hs;
    const int D = L->in, v1 = DS_MIN(L->out, (t + 1) * c->per);
    for (int v = t * c->per; v < v1; v++) {
        float amax = 0.0f;
        for (int i = 0; i < D; i++) {
            const float w = weight_at(L, (size_t)v, i);
            if (!isfinite(w)) {
                atomic_store(&c->bad, 1);
                return;
            }
            amax = fabsf(w) > amax ? fabsf(w) : amax;
        }
        const float s = amax / 127.0f;
        int8_t *q = hs->w8 + (size_t)v * D;
        double rr = 0.0, qq = 0.0, ww = 0.0;
        for (int i = 0; i < D; i++) {
            const float w = weight_at(L, (size_t)v, i);
            float r = s > 0.0f ? rintf(w / s) : 0.0f;
            r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
            q[i] = (int8_t)r;
            const double res = (double)w - (double)s * (double)r;   /* exact: 24-bit s times 8-bit code */
            rr += res * res, qq += (double)r * r, ww += (double)w * w;
        }
        const double slack = 1.0 + 1e-9, wn = sqrt(ww) * slack;
        hs->s8[v] = s;
        hs->ca[v] = up((double)s * sqrt(qq) * slack);
        hs->cb[v] = up(sqrt(rr) * slack + c->gamma * wn + c->flush);
        hs->cc[v] = up(c->flush * wn + (double)D * 0x1p-130);
    }
}

ds_head_screen *ds_head_screen_new(const ds_linear *head, size_t *bytes) {
    *bytes = 0;
    if ((head->fmt != DS_LIN_F32 && head->fmt != DS_LIN_BF16) || head->numerics != DS_NUMERICS_FAST || !head->w ||
        head->out <= 0 || head->in <= 0)
        return NULL;
    const size_t V = (size_t)head->out, D = (size_t)head->in;
    ds_head_screen *hs = ds_xcalloc(1, sizeof *hs);
    hs->w8 = ds_amalloc(V * D);
    hs->s8 = ds_xmalloc(sizeof(float) * V);
    hs->ca = ds_xmalloc(sizeof(float) * V);
    hs->cb = ds_xmalloc(sizeof(float) * V);
    hs->cc = ds_xmalloc(sizeof(float) * V);
    const double k = (double)((D + 15) / 16 + 8), u = 0x1p-24;
    build_ctx c = {head, hs, k * u / (1.0 - k * u), 0x1p-50 * sqrt((double)D), 256, 0};
    ds_pool_run((int)((V + (size_t)c.per - 1) / (size_t)c.per), build_task, &c);
    if (atomic_load(&c.bad)) {
        ds_head_screen_free(hs);
        return NULL;
    }
    for (size_t v = 0; v < V; v++) {
        hs->ca_max = hs->ca[v] > hs->ca_max ? hs->ca[v] : hs->ca_max;
        hs->cb_max = hs->cb[v] > hs->cb_max ? hs->cb[v] : hs->cb_max;
        hs->cc_max = hs->cc[v] > hs->cc_max ? hs->cc[v] : hs->cc_max;
    }
    hs->q8 = (ds_linear){.fmt = DS_LIN_W8A8, .out = (int)V, .in = (int)D, .w = hs->w8, .w_scale = hs->s8,
                         .numerics = DS_NUMERICS_FAST};
    const size_t tiles = ds_linear_prepare(&hs->q8);
    if (tiles) {   /* the SIMD paths read only their tiles: the row-major codes can go */
        ds_afree(hs->w8);
        hs->w8 = NULL;
        hs->q8.w = NULL;
    }
    hs->bytes = tiles + (hs->w8 ? V * D : 0) + 4 * sizeof(float) * V;
    *bytes = hs->bytes;
    return hs;
}

void ds_head_screen_free(ds_head_screen *hs) {
    if (!hs) return;
    ds_linear_release(&hs->q8);
    ds_afree(hs->w8);
    free(hs->s8);
    free(hs->ca);
    free(hs->cb);
    free(hs->cc);
    free(hs);
}

/* ---- the exact logit of one id: the fast tier's blocked order (kernels.h), same bits ---- */

static inline float ff_bf16(ds_bf16 v) { return ((v >> 7) & 0xff) < DS_FF_MIN_EXP_FIELD ? 0.f : ds_bf16_to_f32(v); }

static inline float reduce16(const float a[16]) {
    float h[8], q[4];
    for (int j = 0; j < 8; j++) h[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++) q[j] = h[j] + h[j + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

SCREEN_CLONES static float exact_f32(const float *w, const ds_bf16 *x, int D) {
    float a[16] = {0};
    int b = 0;
    for (; b + 16 <= D; b += 16)
#pragma omp simd
        for (int j = 0; j < 16; j++) a[j] = fmaf(w[b + j], ds_bf16_to_f32(x[b + j]), a[j]);
    if (b < D)   /* the last block, zero padded as every path pads it */
        for (int j = 0; j < 16; j++) a[j] = fmaf(b + j < D ? w[b + j] : 0.f, b + j < D ? ds_bf16_to_f32(x[b + j]) : 0.f, a[j]);
    return reduce16(a);
}

SCREEN_CLONES static float exact_bf16(const ds_bf16 *w, const ds_bf16 *x, int D) {
    float a[16] = {0};
    for (int b = 0; b < D; b += 32)
#pragma omp simd
        for (int j = 0; j < 16; j++) {
            const int i1 = b + 2 * j + 1, i0 = b + 2 * j;   /* past D: the zero padding */
            a[j] = fmaf(i1 < D ? ff_bf16(w[i1]) : 0.f, i1 < D ? ff_bf16(x[i1]) : 0.f, a[j]);
            a[j] = fmaf(i0 < D ? ff_bf16(w[i0]) : 0.f, i0 < D ? ff_bf16(x[i0]) : 0.f, a[j]);
        }
    return reduce16(a);
}

/* Ask for the head row of id v (into L2): a candidate's row is a random 4-8 KiB of a matrix far
 * larger than the caches, so computed one after another each exact logit waited for its row from
 * memory (decision 189). */
static void prefetch_head_row(const ds_linear *head, int v) {
    const size_t rowb = (size_t)head->in * (head->fmt == DS_LIN_F32 ? sizeof(float) : sizeof(ds_bf16));
    const char *p = (const char *)ds_linear_float_rows(head) + (size_t)v * rowb;
    for (size_t o = 0; o < rowb; o += 64) __builtin_prefetch(p + o, 0, 2);
}

float ds_head_logit(const ds_linear *head, const ds_bf16 *x, int v) {
    const size_t off = (size_t)v * (size_t)head->in;
    const void *w = ds_linear_float_rows(head);   /* the resident copy where there is one */
    return head->fmt == DS_LIN_F32 ? exact_f32((const float *)w + off, x, head->in)
                                   : exact_bf16((const ds_bf16 *)w + off, x, head->in);
}

/* ---- the screen of one row ---- */

/* Whether block [v0, v0 + nb) may hold an id whose upper bound reaches thr, with the row's largest
 * ε (E, every coefficient at its maximum) and a looser fp32 slack than the float64 test that
 * follows, so it never drops an id that test keeps; it reads only the approximate logits.  And
 * whether every id's |approx| + E stays far below FLT_MAX (then no logit of the block can be
 * infinite, nor any partial sum: ‖w_v‖‖x‖ < 2^121). */
SCREEN_CLONES static void block_scan(const float *ya, int V, float E, float thr, uint8_t *hit, int *all_small) {
    int big = 0;
    for (int v0 = 0; v0 < V; v0 += SCAN_BLOCK) {   /* the whole row in one call (clones cost an indirect call) */
        const int nb = DS_MIN(SCAN_BLOCK, V - v0);
        int any = 0;
#pragma omp simd reduction(| : any, big)
        for (int i = 0; i < nb; i++) {
            const float y = ya[v0 + i], ay = fabsf(y), e = E + ay * 0x1p-18f;
            any |= y + e >= thr;
            big |= !(ay + e < 0x1p100f);
        }
        hit[v0 / SCAN_BLOCK] = (uint8_t)any;
    }
    if (big) *all_small = 0;
}

/* The bound of id v, in float64 (the test that decides membership). */
static double upper(const ds_head_screen *hs, const float *ya, int v, double en, double xn) {
    const double y = ya[v];
    const double e = ((double)hs->ca[v] * en + (double)hs->cb[v] * xn + (double)hs->cc[v]) * (1.0 + 0x1p-16) +
                     fabs(y) * 0x1p-19 + 0x1p-126;
    return y + e;
}

static int32_t first_max(const float *y, int V, const uint8_t *mask) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (int v = 0; v < V; v++)
        if (!(mask && mask[v]) && (best < 0 || y[v] > bv)) best = v, bv = y[v];
    return best;
}

/* ‖x‖ and ‖x − s·q‖ rounded up; 0 when not finite. */
static int row_norms(const ds_bf16 *x, const int8_t *q, float s, int D, float *xn, float *en) {
    double xx = 0.0, ee = 0.0;
    for (int i = 0; i < D; i++) {
        const double xi = ds_bf16_to_f32(x[i]), ei = xi - (double)s * (double)q[i];
        xx += xi * xi, ee += ei * ei;
    }
    *xn = up(sqrt(xx) * (1.0 + 1e-9));
    *en = up(sqrt(ee) * (1.0 + 1e-9));
    return isfinite(*xn) && isfinite(*en) && *xn < 0x1p60f;
}

/* The screened argmax of one row; -2 when the row must be computed in full. */
/* The corrected value of id v (its logit plus the correction), as the caller's full path computes it. */
static float value_of(const ds_linear *head, const ds_bf16 *x, int32_t v, const ds_head_corr *corr) {
    const float logit = ds_head_logit(head, x, v);
    return corr ? corr->value(corr->ctx, v, logit) : logit;
}

/* The screened argmax of one row; -2 when the row must be computed in full. */
static int32_t screen_row(const ds_linear *head, const ds_head_screen *hs, const ds_bf16 *x, const int8_t *xq,
                          float xs, const float *ya, const uint8_t *mask, const ds_head_corr *corr, int32_t *cand,
                          uint8_t *hit, uint64_t *n_cand) {
    const int V = head->out, D = head->in;
    const int32_t exclude = corr ? corr->exclude : -1;
    float xn, en;
    if (!row_norms(x, xq, xs, D, &xn, &en)) return -2;
    if (corr && !(corr->scale >= 0.0f && corr->scale * corr->norm_max < 0x1p100f)) return -2;
    const int32_t v0 = ds_draft_argmax(ya, V, mask, exclude);   /* vectorized; the approximations are finite */
    if ((mask && mask[v0]) || v0 == exclude) return -2;         /* every id ruled out */
    const float T = value_of(head, x, v0, corr);
    if (!isfinite(T)) return -2;
    /* every id whose value can reach T (a correction's final fp32 add: the relative 2^-20); the fp32
     * prefilter is looser still */
    const double thr = (double)T - fabs((double)T) * 0x1p-20 - 0x1p-126;
    const float E = (hs->ca_max * en + hs->cb_max * xn + hs->cc_max) * (1.0f + 0x1p-15f) +
                    (corr ? corr->norm_max * corr->scale * (1.0f + 0x1p-15f) : 0.0f);
    int n = 0, small = 1;
    block_scan(ya, V, E, T - fabsf(T) * 0x1p-19f - 0x1p-125f, hit, &small);
    for (int b = 0; b < V; b += SCAN_BLOCK) {
        const int nb = DS_MIN(SCAN_BLOCK, V - b);
        if (!hit[b / SCAN_BLOCK]) continue;
        for (int v = b; v < b + nb; v++) {
            if ((mask && mask[v]) || v == exclude) continue;
            const double c = corr ? (double)corr->norm[v] * corr->scale : 0.0;
            if (upper(hs, ya, v, en, xn) + c < thr) continue;
            if (n == MAX_CAND) return -2;
            cand[n++] = v;
        }
    }
    if (!small) return -2;   /* some logit might not be finite: the full row decides */
    *n_cand += (uint64_t)n;
    int32_t best = -1;
    float bv = 0.0f;
    enum { AHEAD = 4 };   /* rows in flight while one is computed */
    for (int k = 0; k < n && k < AHEAD; k++) prefetch_head_row(head, cand[k]);
    for (int k = 0; k < n; k++) {   /* ids ascending: ties keep the lower one */
        if (k + AHEAD < n) prefetch_head_row(head, cand[k + AHEAD]);
        const float val = cand[k] == v0 ? T : value_of(head, x, cand[k], corr);
        if (!isfinite(val)) return -2;
        if (best < 0 || val > bv) best = cand[k], bv = val;
    }
    return best;
}

void ds_head_approx_rows(const ds_head_screen *hs, const ds_bf16 *x, int n, ds_arena *ar, ds_head_approx *a) {
    const int V = hs->q8.out, D = hs->q8.in;
    a->n = n;
    a->xq = DS_ARENA_NEW(ar, int8_t, (size_t)n * D);
    a->xs = DS_ARENA_NEW(ar, float, n);
    a->ya = DS_ARENA_NEW(ar, float, (size_t)n * V);
    ds_quantize_rows(x, n, D, a->xq, a->xs);
    for (int r0 = 0; r0 < n; r0 += APPROX_CHUNK)   /* one read of the int8 copy per chunk of rows */
        ds_linear_forward_q(&hs->q8, a->xq + (size_t)r0 * D, a->xs + r0, DS_MIN(APPROX_CHUNK, n - r0),
                            a->ya + (size_t)r0 * V);
}

int32_t ds_head_screen_pick(const ds_linear *head, const ds_head_screen *hs, const ds_bf16 *x, const ds_head_approx *a,
                            int r, const uint8_t *mask, const ds_head_corr *corr, ds_arena *ar) {
    const int V = head->out, D = head->in;
    if (!hs || (!hs->w8 && !strcmp(ds_kernels_active(), "reference"))) return -2;
    ds_arena_mark mk = ds_arena_mark_get(ar);
    uint64_t nc = 0;
    atomic_fetch_add(&g_rows, 1);
    const int32_t id = screen_row(head, hs, x, a->xq + (size_t)r * D, a->xs[r], a->ya + (size_t)r * V, mask, corr,
                                  DS_ARENA_NEW(ar, int32_t, MAX_CAND), DS_ARENA_NEW(ar, uint8_t, V / SCAN_BLOCK + 1), &nc);
    atomic_fetch_add(&g_cands, nc);
    if (id < 0) atomic_fetch_add(&g_full, 1);
    ds_arena_release(ar, mk);
    return id;
}

int32_t ds_head_pick_full(const float *y, int V, const uint8_t *mask) {
    for (int v = 0; v < V; v++)
        if (!isfinite(y[v])) return -1;
    return first_max(y, V, mask);
}

typedef struct screen_ctx {
    const ds_linear *head;
    const ds_head_screen *hs;
    const ds_bf16 *x;
    const int8_t *xq;
    const float *xs, *ya;
    const uint8_t *mask;
    int32_t *cand;         /* [rows][MAX_CAND] */
    uint8_t *hit;          /* [rows][V / SCAN_BLOCK + 1] blocks the row scan kept */
    int32_t *ids;
    atomic_uint_fast64_t n_cand;
} screen_ctx;

static void screen_task(void *vctx, int r, int thread) {
    (void)thread;
    screen_ctx *c = vctx;
    const int V = c->head->out, D = c->head->in;
    uint64_t nc = 0;
    c->ids[r] = screen_row(c->head, c->hs, c->x + (size_t)r * D, c->xq + (size_t)r * D, c->xs[r], c->ya + (size_t)r * V,
                           c->mask, NULL, c->cand + (size_t)r * MAX_CAND, c->hit + (size_t)r * (size_t)(V / SCAN_BLOCK + 1), &nc);
    atomic_fetch_add(&c->n_cand, nc);
}

/* Rows whose id is still open (-2 in ids) get their full logits, a chunk at a time. */
static void full_rows(const ds_linear *head, const ds_bf16 *x, int n, const uint8_t *mask, ds_arena *ar, int32_t *ids) {
    const int V = head->out, D = head->in;
    int *open = DS_ARENA_NEW(ar, int, n), m = 0;
    for (int r = 0; r < n; r++)
        if (ids[r] == -2) open[m++] = r;
    if (!m) return;
    atomic_fetch_add(&g_full, (uint64_t)m);
    ds_bf16 *xg = DS_ARENA_NEW(ar, ds_bf16, (size_t)DS_MIN(m, APPROX_CHUNK) * D);
    float *y = DS_ARENA_NEW(ar, float, (size_t)DS_MIN(m, APPROX_CHUNK) * V);
    for (int r0 = 0; r0 < m; r0 += APPROX_CHUNK) {
        const int k = DS_MIN(APPROX_CHUNK, m - r0);
        for (int j = 0; j < k; j++) memcpy(xg + (size_t)j * D, x + (size_t)open[r0 + j] * D, sizeof(ds_bf16) * (size_t)D);
        ds_linear_forward(head, xg, k, y);
        for (int j = 0; j < k; j++) ids[open[r0 + j]] = ds_head_pick_full(y + (size_t)j * V, V, mask);
    }
}

void ds_head_greedy(const ds_linear *head, const ds_head_screen *hs, const ds_bf16 *x, int n, const uint8_t *mask,
                    ds_arena *ar, int32_t *ids) {
    if (n <= 0) return;
    const int V = head->out, D = head->in;
    ds_arena_mark mk = ds_arena_mark_get(ar);
    for (int r = 0; r < n; r++) ids[r] = -2;
    if (hs && !hs->w8 && !strcmp(ds_kernels_active(), "reference")) hs = NULL;   /* no codes for that path */
    if (hs) {
        atomic_fetch_add(&g_rows, (uint64_t)n);
        for (int r0 = 0; r0 < n; r0 += APPROX_CHUNK) {
            const int k = DS_MIN(APPROX_CHUNK, n - r0);
            ds_arena_mark inner = ds_arena_mark_get(ar);
            int8_t *xq = DS_ARENA_NEW(ar, int8_t, (size_t)k * D);
            float *xs = DS_ARENA_NEW(ar, float, k), *ya = DS_ARENA_NEW(ar, float, (size_t)k * V);
            const ds_bf16 *xr = x + (size_t)r0 * D;
            ds_quantize_rows(xr, k, D, xq, xs);
            ds_linear_forward_q(&hs->q8, xq, xs, k, ya);   /* one read of the int8 copy for the chunk */
            screen_ctx c = {head, hs, xr, xq, xs, ya, mask, DS_ARENA_NEW(ar, int32_t, (size_t)k * MAX_CAND),
                            DS_ARENA_NEW(ar, uint8_t, (size_t)k * (size_t)(V / SCAN_BLOCK + 1)), ids + r0, 0};
            ds_pool_run(k, screen_task, &c);
            atomic_fetch_add(&g_cands, atomic_load(&c.n_cand));
            ds_arena_release(ar, inner);
        }
    }
    full_rows(head, x, n, mask, ar, ids);
    ds_arena_release(ar, mk);
}
