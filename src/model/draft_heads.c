/* The end of a DSpark draft pass (MODEL.md §4.1): the draft head over every row of the pass, the
 * serial Markov correction, the pick of each row and the confidence head.
 *
 * Why the Markov head has its own routine: its weight is [V, r] with a small rank r (16 on the
 * tiny fixture, 256 on the release), and it runs once per draft row, serially, because row i's
 * correction reads the token chosen at row i−1.  Through the generic linear every one of the V
 * outputs is a short dot product ending in a horizontal reduction, which made five Markov rows cost
 * more than the whole draft head.  Here the weight is kept transposed in blocks of MK_BLOCK outputs
 * ([V/MK_BLOCK][r][MK_BLOCK], packed once at load) and each output is an element-wise accumulation
 * over j = 0..r−1 in that order, so the compiler vectorizes across outputs, the accumulators stay
 * in registers and nothing is reduced horizontally; a block is one contiguous stretch of memory
 * (a plain [r][V] transpose read each block as r pieces of 512 bytes, V·2 bytes apart, which the
 * prefetchers could not follow: a full correction ran at ~2 GFLOP/s); the rows of every sequence
 * of a batched pass share one read of each weight block.  Numerics: the exact tier accumulates the
 * (exact) bf16·bf16 products in float64 and rounds once (docs/NUMERICS.md "float linear"), the
 * fast tier accumulates fp32 products in ascending j (its own fixed order), both independent of
 * the batch and of the thread count.
 *
 * A greedy row whose logits nobody reads skips most of the Markov correction: a Cauchy–Schwarz
 * bound on every id's correction leaves only the ids that could still beat the best corrected value
 * found so far (pick_pruned; the full correction runs when too many remain), so the proposals are
 * those of the full correction while the Markov head is read for a handful of ids.
 *
 * The greedy pick is a vectorized first-index argmax with the same answer as the scalar loop it
 * replaces (ties to the lower id, NaN never chosen unless the first candidate is NaN). */
#include "model/draft_internal.h"
#include "model/head_screen.h"
#include "model/fast_ops.h"
#include "base/threadpool.h"
#include <math.h>
#include <string.h>
#include "model/fast_vec.h"


enum { MK_BLOCK = 64, MK_TASK_BLOCKS = 32, AM_LANES = 16, PF_BLOCK = 64 };

/* Where W[v][j] sits in the packed copy (zero padded to whole blocks). */
static size_t markov_at(int r, int v, int j) {
    return ((size_t)(v / MK_BLOCK) * (size_t)r + (size_t)j) * MK_BLOCK + (size_t)(v % MK_BLOCK);
}

void ds_draft_pack_markov(ds_model *m, ds_draft *d) {
    const ds_linear *L = &d->markov_head;
    d->markov_t = NULL;
    if (L->fmt != DS_LIN_BF16) return;   /* other formats go through the generic linear */
    const size_t V = (size_t)L->out, r = (size_t)L->in, Vpad = (V + MK_BLOCK - 1) / MK_BLOCK * MK_BLOCK;
    ds_bf16 *t = ds_model_own(m, ds_amalloc(sizeof(ds_bf16) * Vpad * r));
    memset(t + V / MK_BLOCK * MK_BLOCK * r, 0, sizeof(ds_bf16) * (Vpad - V / MK_BLOCK * MK_BLOCK) * r);
    const ds_bf16 *w = L->w;
    for (size_t v = 0; v < V; v++)
        for (size_t j = 0; j < r; j++) t[markov_at((int)r, (int)v, (int)j)] = w[v * r + j];
    d->markov_t = t;
    /* ||W[v]||_2 rounded up, for the greedy bound below; a non-finite weight disables the bound */
    float *nv = ds_model_own(m, ds_xmalloc(sizeof(float) * V));
    for (size_t v = 0; v < V; v++) {
        double ss = 0;
        for (size_t j = 0; j < r; j++) ss += (double)ds_bf16_to_f32(w[v * r + j]) * ds_bf16_to_f32(w[v * r + j]);
        nv[v] = (float)(sqrt(ss) * (1.0 + 1e-6));
        if (!isfinite(nv[v])) return;
        d->markov_norm_max = nv[v] > d->markov_norm_max ? nv[v] : d->markov_norm_max;
    }
    d->markov_norm = nv;
}

enum { MK_VECS = MK_BLOCK / 8 };   /* the block's accumulators: eight 8-lane vectors (fast_vec.h) */
/* Software prefetch distance of the fast block routine, bytes: a full correction streams [V, r] bf16
 * from memory (66 MB per row on mini), one stream per task, which the hardware prefetcher alone
 * kept at ~21 GB/s; 2 KiB ahead into L2 (as the read probe's best kernel) measured 15-20% less
 * time for the five rows of a mini draft pass (decision 158).  No arithmetic changes. */
enum { MK_PREFETCH = 2048 };

/* out[i] += fp32(Σ_j e_j·W[v0+i][j]) for the nb outputs of the packed block blk (fast tier: fp32,
 * j ascending, a product then a sum as markov_one; the padding past V is computed and dropped). */
DS_CLONES static void markov_block_fast(const ds_bf16 *blk, int r, const float *e, int nb, float *out) {
    v8f acc[MK_VECS];   /* in registers on every clone (a plain float array stayed in memory) */
#pragma GCC unroll 8
    for (int k = 0; k < MK_VECS; k++) acc[k] = (v8f){0};
    for (int j = 0; j < r; j++) {
        const float x = e[j];
        const v8f ej = {x, x, x, x, x, x, x, x};
        const ds_bf16 *w = blk + (size_t)j * MK_BLOCK;
        /* the task's blocks are one contiguous stream: its two lines 2 KiB ahead, into L2 */
        __builtin_prefetch((const char *)w + MK_PREFETCH, 0, 2);
        __builtin_prefetch((const char *)w + MK_PREFETCH + 64, 0, 2);
#pragma GCC unroll 8
        for (int k = 0; k < MK_VECS; k++) acc[k] = acc[k] + ej * ds_v8_ld_b(w + 8 * k);
    }
    for (int i = 0; i < nb; i++) out[i] = out[i] + acc[i / 8][i % 8];
}

/* The same in float64 (exact tier): products of bf16 values are exact, one rounding to fp32. */
DS_CLONES static void markov_block_exact(const ds_bf16 *blk, int r, const float *e, int nb, float *out) {
    double acc[MK_BLOCK];
    for (int i = 0; i < MK_BLOCK; i++) acc[i] = 0.0;
    for (int j = 0; j < r; j++) {
        const double ej = e[j];
        const ds_bf16 *w = blk + (size_t)j * MK_BLOCK;
#pragma omp simd
        for (int i = 0; i < MK_BLOCK; i++) acc[i] = acc[i] + ej * (double)ds_bf16_to_f32(w[i]);
    }
    for (int i = 0; i < nb; i++) out[i] = out[i] + (float)acc[i];
}

typedef struct markov_ctx {
    const ds_draft *d;
    int n, V, exact;
    const float *e;               /* [n][r] Markov embeddings of the previous tokens */
    float *const *rows;           /* n logits rows [V], corrected in place */
} markov_ctx;

static void markov_task(void *vctx, int t, int thread) {
    (void)thread;
    const markov_ctx *c = vctx;
    const int r = c->d->rank;
    const int v_end = c->V < (t + 1) * MK_BLOCK * MK_TASK_BLOCKS ? c->V : (t + 1) * MK_BLOCK * MK_TASK_BLOCKS;
    for (int v0 = t * MK_BLOCK * MK_TASK_BLOCKS; v0 < v_end; v0 += MK_BLOCK) {
        const int nb = v_end - v0 < MK_BLOCK ? v_end - v0 : MK_BLOCK;
        const ds_bf16 *blk = c->d->markov_t + markov_at(r, v0, 0);
        for (int s = 0; s < c->n; s++) {   /* the block of weights stays in cache across sequences */
            if (c->exact) markov_block_exact(blk, r, c->e + (size_t)s * r, nb, c->rows[s] + v0);
            else markov_block_fast(blk, r, c->e + (size_t)s * r, nb, c->rows[s] + v0);
        }
    }
}

/* rows[s][v] += markov_head(markov_embed[prev[s]])[v] for the n rows. */
static void markov_correct(ds_model *m, ds_arena *ar, int n, const int32_t *prev, float *const *rows) {
    const ds_draft *d = m->draft;
    const int V = m->cfg.vocab_size, r = d->rank;
    ds_arena_mark mk = ds_arena_mark_get(ar);
    if (!d->markov_t) {
        ds_bf16 *me = DS_ARENA_NEW(ar, ds_bf16, (size_t)n * r);
        float *y = DS_ARENA_NEW(ar, float, (size_t)n * V);
        for (int s = 0; s < n; s++) memcpy(me + (size_t)s * r, d->markov_embed + (size_t)prev[s] * r, sizeof(ds_bf16) * (size_t)r);
        ds_linear_forward(&d->markov_head, me, n, y);
        for (int s = 0; s < n; s++)
            for (int v = 0; v < V; v++) rows[s][v] = rows[s][v] + y[(size_t)s * V + v];
        ds_arena_release(ar, mk);
        return;
    }
    float *e = DS_ARENA_NEW(ar, float, (size_t)n * r);
    for (int s = 0; s < n; s++)
        for (int j = 0; j < r; j++) e[(size_t)s * r + j] = ds_bf16_to_f32(d->markov_embed[(size_t)prev[s] * r + j]);
    markov_ctx c = {d, n, V, m->numerics != DS_NUMERICS_FAST, e, rows};
    const int per = MK_BLOCK * MK_TASK_BLOCKS;
    ds_pool_run((V + per - 1) / per, markov_task, &c);
    ds_arena_release(ar, mk);
}

/* Largest eligible value, NaN ignored (comparisons with NaN are false); -INFINITY when none. */
DS_CLONES static float eligible_max(const float *x, int V, const uint8_t *masked, int32_t exclude) {
    float l[AM_LANES];
    for (int k = 0; k < AM_LANES; k++) l[k] = -INFINITY;
    int v = 0;
    for (; v + AM_LANES <= V; v += AM_LANES)
#pragma omp simd
        for (int k = 0; k < AM_LANES; k++) {
            const float xv = x[v + k];
            const int ok = (!masked || !masked[v + k]) & (v + k != exclude);
            l[k] = ok && xv > l[k] ? xv : l[k];
        }
    for (; v < V; v++)
        if ((!masked || !masked[v]) && v != exclude && x[v] > l[0]) l[0] = x[v];
    float mx = l[0];
    for (int k = 1; k < AM_LANES; k++) mx = l[k] > mx ? l[k] : mx;
    return mx;
}

/* The first index i in [from, V) with x[i] == v, or V; blocks without it are skipped whole (one
 * call for the whole row: a cloned function costs an indirect call). */
DS_CLONES static int first_equal(const float *x, int from, int V, float v) {
    int i = from;
    for (; i + AM_LANES <= V; i += AM_LANES) {
        int any = 0;
#pragma omp simd reduction(| : any)
        for (int k = 0; k < AM_LANES; k++) any |= x[i + k] == v;
        if (any) break;
    }
    for (; i < V; i++)
        if (x[i] == v) return i;
    return V;
}

int32_t ds_draft_argmax(const float *x, int V, const uint8_t *masked, int32_t exclude) {
    int32_t first = -1;
    for (int v = 0; v < V && first < 0; v++)
        if ((!masked || !masked[v]) && v != exclude) first = v;
    if (first < 0) return 0;
    if (isnan(x[first])) return first;   /* the scalar rule keeps its first candidate then */
    const float mx = eligible_max(x, V, masked, exclude);
    for (int v = first_equal(x, first, V, mx); v < V; v = first_equal(x, v + 1, V, mx))
        if ((!masked || !masked[v]) && v != exclude) return v;
    return first;   /* every eligible value NaN but the first: unreachable, kept for safety */
}

/* Markov correction of one output, with the arithmetic of the block routines (same bits). */
static float markov_one(const ds_draft *d, const float *e, int32_t v, int exact) {
    const ds_bf16 *w = d->markov_t + markov_at(d->rank, v, 0);
    if (exact) {
        double acc = 0.0;
        for (int j = 0; j < d->rank; j++) acc = acc + (double)e[j] * (double)ds_bf16_to_f32(w[(size_t)j * MK_BLOCK]);
        return (float)acc;
    }
    float acc = 0.0f;
    for (int j = 0; j < d->rank; j++) acc = acc + e[j] * ds_bf16_to_f32(w[(size_t)j * MK_BLOCK]);
    return acc;
}

/* Whether any of the nb ids could pass pick_pruned's exact test, or is NaN (the exact test then
 * decides).  fp32 with a relative slack of 2^-20 on |b| + bound, far above the few fp32 roundings
 * of b + bound (p >= 0), so no id that passes the float64 test is ever skipped; the scan over V is
 * branch-free and vectorized, and only the rare blocks with a hit run the exact test. */
DS_CLONES static int prefilter_hits(const float *b, const float *norm, int nb, float Ef, float thr_f) {
    int any = 0;
#pragma omp simd reduction(| : any)
    for (int i = 0; i < nb; i++) {
        const float p = norm[i] * Ef, x = b[i];
        any |= (x + p + (fabsf(x) + p) * 0x1p-20f >= thr_f) | (x != x);
    }
    return any;
}

/* Greedy pick of row b (uncorrected draft logits) without correcting every id: with
 * T = fp32(b[v0] + mk[v0]) at the argmax v0 of b, an id v can only reach T when
 * b[v] + ||W[v]||·||e||·(1 + 1e-3) >= T − |T|·2^-20 − 1e-30 (Cauchy–Schwarz; the factor covers
 * the fp32/float64 rounding of mk, the 2^-20 the final fp32 add, so every id outside this set
 * has a corrected value strictly below T).  The argmax over the set, ties to the lower id, is the
 * argmax of the fully corrected row.  Returns -1 (full correction needed) when the set exceeds
 * max_cand or any value involved is not finite. */
static int32_t pick_pruned(const ds_draft *d, const float *b, const float *e, int V, const uint8_t *mask, int32_t noise,
                           int exact, int32_t *cand, int max_cand) {
    double E = 0.0;
    for (int j = 0; j < d->rank; j++) E += (double)e[j] * (double)e[j];
    E = sqrt(E) * (1.0 + 1e-3);
    const int32_t v0 = ds_draft_argmax(b, V, mask, noise);
    if (!isfinite(E) || (mask && mask[v0]) || v0 == noise || !isfinite(b[v0])) return -1;
    const float T = b[v0] + markov_one(d, e, v0, exact);
    if (!isfinite(T)) return -1;
    const double thr = (double)T - fabs((double)T) * 0x1p-20 - 1e-30;
    /* fp32 bounds no smaller than E and no larger than thr: the prefilter's set contains the exact one */
    /* (1e-35 below thr: covers the absolute rounding of fp32 sums near the subnormal range) */
    float Ef = (float)E, thr_f = (float)(thr - 1e-35);
    if ((double)Ef < E) Ef = nextafterf(Ef, INFINITY);
    if ((double)thr_f > thr - 1e-35) thr_f = nextafterf(thr_f, -INFINITY);
    int n = 0;
    for (int v0b = 0; v0b < V; v0b += PF_BLOCK) {
        const int nb = V - v0b < PF_BLOCK ? V - v0b : PF_BLOCK;
        if (!prefilter_hits(b + v0b, d->markov_norm + v0b, nb, Ef, thr_f)) continue;
        for (int v = v0b; v < v0b + nb; v++) {   /* the exact test, ids ascending as before */
            if ((mask && mask[v]) || v == noise) continue;
            if (isnan(b[v])) return -1;
            if ((double)b[v] + (double)d->markov_norm[v] * E >= thr) {
                if (n == max_cand) return -1;
                cand[n++] = v;
            }
        }
    }
    int32_t best = -1;
    float bv = 0.0f;
    for (int k = 0; k < n; k++) {
        const float val = b[cand[k]] + markov_one(d, e, cand[k], exact);
        if (!isfinite(val)) return -1;
        if (best < 0 || val > bv) best = cand[k], bv = val;
    }
    return best;
}

/* The corrected value of a screened id: its head logit plus its Markov correction, one fp32 add,
 * as markov_correct and pick_pruned compute it (fast tier). */
typedef struct screen_corr_ctx {
    const ds_draft *d;
    const float *e;
} screen_corr_ctx;
static float screened_value(const void *vctx, int32_t v, float logit) {
    const screen_corr_ctx *c = vctx;
    return logit + markov_one(c->d, c->e, v, 0);
}

/* Passes that read the whole head after a pass in which the screen left a row undecided: such a pass
 * pays for the int8 copy and then the whole head (missing_rows), and a random draft's Markov bound
 * never prunes, so there every pass would. */
enum { SCREEN_REST = 15 };

/* The screened greedy pick of draft row x (its head logits never computed): the head's screen with
 * the Markov correction as a per-id bound (ds_head_corr), the answer of pick_pruned on the full
 * row; -1 when undecided. */
static int32_t screened_pick(const ds_draft *d, const ds_bf16 *x, const ds_head_approx *ap, int row,
                             const uint8_t *mask, int32_t noise, const float *e, ds_arena *ar) {
    double E = 0.0;
    for (int j = 0; j < d->rank; j++) E += (double)e[j] * (double)e[j];
    E = sqrt(E) * (1.0 + 1e-3);   /* as pick_pruned: covers the rounding of the correction */
    float Ef = (float)E;
    if ((double)Ef < E) Ef = nextafterf(Ef, INFINITY);
    const screen_corr_ctx cc = {d, e};
    const ds_head_corr corr = {d->markov_norm, d->markov_norm_max, Ef, screened_value, &cc, noise};
    const int32_t t = ds_head_screen_pick(&d->head, d->head_screen, x, ap, row, mask, &corr, ar);
    return t >= 0 ? t : -1;
}

/* conf = proj · fp32(concat(hid, me)): float64 with one rounding (exact), fp32 in order (fast). */
static float confidence(const ds_draft *d, const ds_bf16 *hid, const ds_bf16 *me, int D, int fast) {
    if (fast) {
        float s = 0.0f;
        for (int j = 0; j < D; j++) s += d->conf_proj[j] * ds_bf16_to_f32(hid[j]);
        for (int j = 0; j < d->rank; j++) s += d->conf_proj[D + j] * ds_bf16_to_f32(me[j]);
        return s;
    }
    return (float)(ds_dot_fb(d->conf_proj, hid, D) + ds_dot_fb(d->conf_proj + D, me, d->rank));
}

/* Rows of the sequences with `want` set, gathered (bf16 [k][D] into dst), and their count. */
static int gather_rows(const ds_bf16 *hn, int n, int B, int D, const uint8_t *sel, int want, ds_bf16 *dst) {
    int k = 0;
    for (int s = 0; s < n; s++)
        if (!!sel[s] == want) memcpy(dst + (size_t)k * B * D, hn + (size_t)s * B * D, sizeof(ds_bf16) * (size_t)B * D), k++;
    return k * B;
}

/* The head's logits of the rows that need them: every row, or (screen on) the rows of sequences
 * that do not screen; screened sequences get their rows' int8 approximations instead. */
static void head_rows(const ds_draft *d, int n, int B, int D, int V, const ds_bf16 *hn, const uint8_t *scr, int n_scr,
                      ds_arena *ar, float *base, ds_head_approx *ap) {
    if (!n_scr) {
        ds_linear_forward(&d->head, hn, n * B, base);   /* every row of every sequence: one read of the head */
        return;
    }
    ds_bf16 *g = DS_ARENA_NEW(ar, ds_bf16, (size_t)n * B * D);
    const int nf = gather_rows(hn, n, B, D, scr, 0, g);
    if (nf) {
        float *y = DS_ARENA_NEW(ar, float, (size_t)nf * V);
        ds_linear_forward(&d->head, g, nf, y);
        for (int s = 0, k = 0; s < n; s++)
            if (!scr[s]) memcpy(base + (size_t)s * B * V, y + (size_t)k++ * B * V, sizeof(float) * (size_t)B * V);
    }
    const int ns = gather_rows(hn, n, B, D, scr, 1, g);
    ds_head_approx_rows(d->head_screen, g, ns, ar, ap);
}

/* The head's logits of every row that has none yet (a screened row left undecided: the rest of the
 * pass reads the whole head once, as without the screen). */
static void missing_rows(const ds_draft *d, int N, int D, int V, const ds_bf16 *hn, uint8_t *have, ds_arena *ar,
                         float *base) {
    ds_bf16 *g = DS_ARENA_NEW(ar, ds_bf16, (size_t)N * D);
    int *at = DS_ARENA_NEW(ar, int, (size_t)N), k = 0;
    for (int j = 0; j < N; j++)
        if (!have[j]) memcpy(g + (size_t)k * D, hn + (size_t)j * D, sizeof(ds_bf16) * (size_t)D), at[k++] = j;
    float *y = DS_ARENA_NEW(ar, float, (size_t)k * V);
    ds_linear_forward(&d->head, g, k, y);
    for (int q = 0; q < k; q++) memcpy(base + (size_t)at[q] * V, y + (size_t)q * V, sizeof(float) * (size_t)V), have[at[q]] = 1;
}

void ds_draft_heads(ds_model *m, ds_step *st, int n, const int32_t *anchors, ds_draft_pick_fn pick, void *const *pick_ctx,
                    const uint8_t *greedy_mask, int32_t *drafts, float *logits, float *conf) {
    ds_draft *d = m->draft;
    const ds_config *c = &m->cfg;
    const ds_numerics nt = m->numerics;
    const int B = d->block, D = c->dim, HC = c->hc_mult, V = c->vocab_size, r = d->rank, N = n * B;
    ds_arena *ar = st->arena;
    ds_bf16 *hid = DS_ARENA_NEW(ar, ds_bf16, (size_t)N * D), *hn = DS_ARENA_NEW(ar, ds_bf16, (size_t)N * D);
    for (int i = 0; i < N; i++) {
        ds_hc_collapse_t(nt, st->X + (size_t)i * HC * D, st->pre + (size_t)i * HC, HC, D, hid + (size_t)i * D);
        ds_rmsnorm_t(nt, hid + (size_t)i * D, d->norm, D, c->norm_eps, hn + (size_t)i * D);
    }
    /* greedy sequences whose logits nobody reads pick through the head's screen (decision 163),
     * unless a recent row showed the Markov bound too loose to decide */
    uint8_t *scr = DS_ARENA_NEW(ar, uint8_t, (size_t)n), *have = DS_ARENA_NEW(ar, uint8_t, (size_t)N);
    const int eligible = d->head_screen && !logits && d->markov_t && d->markov_norm && nt == DS_NUMERICS_FAST;
    const int can_screen = eligible && __atomic_load_n(&d->screen_rest, __ATOMIC_RELAXED) <= 0;
    if (eligible && !can_screen) __atomic_fetch_sub(&d->screen_rest, 1, __ATOMIC_RELAXED);
    int n_scr = 0, slot = 0;
    for (int s = 0; s < n; s++) n_scr += scr[s] = can_screen && !(pick && pick_ctx && pick_ctx[s]);
    for (int s = 0; s < n; s++)
        for (int i = 0; i < B; i++) have[(size_t)s * B + i] = !scr[s];
    float *base = DS_ARENA_NEW(ar, float, (size_t)N * V);
    ds_head_approx ap = {0};
    head_rows(d, n, B, D, V, hn, scr, n_scr, ar, base, &ap);
    int *aslot = DS_ARENA_NEW(ar, int, (size_t)n);   /* each screened sequence's first row in ap */
    for (int s = 0; s < n; s++) aslot[s] = scr[s] ? (slot += B) - B : -1;
    int missed = 0;
    int32_t *prev = DS_ARENA_NEW(ar, int32_t, (size_t)n), *full_prev = DS_ARENA_NEW(ar, int32_t, (size_t)n);
    int32_t *chosen = DS_ARENA_NEW(ar, int32_t, (size_t)n);
    float **rows = DS_ARENA_NEW(ar, float *, (size_t)n);
    const int max_cand = V / 16 > 64 ? V / 16 : 64;
    int32_t *cand = DS_ARENA_NEW(ar, int32_t, (size_t)max_cand);
    float *e = DS_ARENA_NEW(ar, float, (size_t)r);
    const int exact = nt != DS_NUMERICS_FAST;
    memcpy(prev, anchors, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < B; i++) {
        int nf = 0;
        for (int s = 0; s < n; s++) {   /* greedy rows nobody reads the logits of: the bounded pick */
            float *li = base + ((size_t)s * B + i) * V;
            const int greedy = !(pick && pick_ctx && pick_ctx[s]);
            chosen[s] = -1;
            if (greedy && !logits && d->markov_t && d->markov_norm) {
                for (int j = 0; j < r; j++) e[j] = ds_bf16_to_f32(d->markov_embed[(size_t)prev[s] * r + j]);
                if (scr[s] && !missed)
                    chosen[s] = screened_pick(d, hn + ((size_t)s * B + i) * D, &ap, aslot[s] + i, greedy_mask,
                                              c->dspark_noise_id, e, ar);
                if (chosen[s] < 0 && !have[(size_t)s * B + i]) {   /* undecided: the logits of every row left, at once */
                    missing_rows(d, N, D, V, hn, have, ar, base);
                    missed = 1;
                }
                if (chosen[s] < 0) chosen[s] = pick_pruned(d, li, e, V, greedy_mask, c->dspark_noise_id, exact, cand, max_cand);
            }
            if (chosen[s] < 0) rows[nf] = li, full_prev[nf++] = prev[s];
        }
        if (nf) markov_correct(m, ar, nf, full_prev, rows);
        for (int s = 0; s < n; s++) {
            float *li = base + ((size_t)s * B + i) * V;
            const ds_bf16 *me = d->markov_embed + (size_t)prev[s] * r;
            int32_t t = chosen[s];
            if (t < 0) t = pick && pick_ctx && pick_ctx[s] ? pick(pick_ctx[s], i, li) : ds_draft_argmax(li, V, greedy_mask, c->dspark_noise_id);
            drafts[(size_t)s * B + i] = t;
            if (conf) conf[(size_t)s * B + i] = confidence(d, hid + ((size_t)s * B + i) * D, me, D, nt == DS_NUMERICS_FAST);
            if (logits) memcpy(logits + ((size_t)s * B + i) * V, li, sizeof(float) * (size_t)V);
            prev[s] = t;
        }
    }
    if (missed) __atomic_store_n(&d->screen_rest, SCREEN_REST, __ATOMIC_RELAXED);
}
