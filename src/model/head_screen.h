/* The greedy token of a row without computing all of its logits (fast numerics tier).
 *
 * Why: the output head is the largest single linear of a decode step ([V, D] fp32 in the W4A8
 * release: 1 GiB on mini, 2 GiB on the real model; 41% of a single-stream step on mini), and a
 * greedy request reads only the argmax of its row.  The screen keeps an int8 copy of the head (a
 * quarter of its bytes) with per-row error coefficients, so every id's logit is known to lie in
 * [approx − ε, approx + ε]; only the ids whose interval reaches the exact logit of the approximate
 * winner are recomputed exactly (in the fast tier's own order, so the values are the bits the full
 * head gives), and the argmax over them is the argmax over the whole row, ties to the lower id.
 * The bound is rigorous (docs/DECISIONS.md 161): int8 rounding of the weights and of the row,
 * fp32 accumulation of the fast tier, its flush of tiny operands and the rounding of the
 * approximate logits are all covered, so the chosen id is the one plain greedy sampling of the full
 * logits would choose.  When the interval test leaves too many ids, or a value is not finite, the
 * row's full logits are computed instead.
 *
 * The exact tier never screens: its float64 sums may be ordered differently per kernel path, so no
 * single-output recompute reproduces its bits; it computes full rows for the same answer. */
#ifndef DS_MODEL_HEAD_SCREEN_H
#define DS_MODEL_HEAD_SCREEN_H
#include "base/arena.h"
#include "kernels/kernels.h"

typedef struct ds_head_screen ds_head_screen;

/* The screen of a fast-tier F32 or BF16 head [V, D]; NULL when the head is of another format or
 * tier, or holds a non-finite weight.  *bytes receives the memory it holds (int8 copy, its kernel
 * tiles, coefficients). */
ds_head_screen *ds_head_screen_new(const ds_linear *head, size_t *bytes);
void ds_head_screen_free(ds_head_screen *hs);

/* ids[r] = the first id of the largest logit of row r (logits = head · x[r]) among the ids `mask`
 * does not mark (mask may be NULL); -1 when some logit of the row, masked or not, is not finite
 * (the answer of the engine's plain greedy sampling over the full row).  hs == NULL computes every
 * row in full.  Temporaries come from `ar` (released before return). */
void ds_head_greedy(const ds_linear *head, const ds_head_screen *hs, const ds_bf16 *x, int n, const uint8_t *mask,
                    ds_arena *ar, int32_t *ids);

/* The screen in two steps, for a caller that picks from corrected logits (the DSpark draft adds its
 * Markov correction to each id): the int8 products of n rows at once, then one row's pick. */
typedef struct ds_head_approx {
    int n;
    int8_t *xq;            /* [n][D] the rows quantized as the W8A8 kernels quantize them */
    float *xs;             /* [n] */
    float *ya;             /* [n][V] approximate logits */
} ds_head_approx;
void ds_head_approx_rows(const ds_head_screen *hs, const ds_bf16 *x, int n, ds_arena *ar, ds_head_approx *a);

/* A correction added to every logit: |correction of v| <= norm[v]·scale (norm_max >= every
 * norm[v]); value() returns the corrected value exactly as the caller's full path computes it
 * (one fp32 add of the correction: the screen allows a relative 2^-20 for it). */
typedef struct ds_head_corr {
    const float *norm;     /* [V] */
    float norm_max, scale;
    float (*value)(const void *ctx, int32_t v, float logit);
    const void *ctx;
    int32_t exclude;       /* an id never chosen (-1: none) */
} ds_head_corr;

/* The first id of the largest corrected value of row r (x: that row) among the ids neither masked
 * nor excluded, or -2 when the screen cannot decide (the caller computes the row in full). */
int32_t ds_head_screen_pick(const ds_linear *head, const ds_head_screen *hs, const ds_bf16 *x, const ds_head_approx *a,
                            int r, const uint8_t *mask, const ds_head_corr *corr, ds_arena *ar);

/* The same answer from a full row of logits y [V]. */
int32_t ds_head_pick_full(const float *y, int V, const uint8_t *mask);

/* Logit v of row x in the fast tier's order: the bits ds_linear_forward gives (F32 / BF16 head). */
float ds_head_logit(const ds_linear *head, const ds_bf16 *x, int v);

/* Since start: rows screened, candidate ids recomputed, rows that fell back to full logits. */
typedef struct ds_head_screen_stats {
    uint64_t rows, candidates, full_rows;
} ds_head_screen_stats;
ds_head_screen_stats ds_head_screen_stats_get(void);

#endif
