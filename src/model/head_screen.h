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
