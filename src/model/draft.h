/* The DSpark draft model (MODEL.md §4): three V4.1 blocks (`mtp.0..S_d−1`) that propose the next
 * `dspark_block_size` tokens from the target's own features, with a serial Markov correction and a
 * confidence head.
 *
 * Why it is split this way: the target computes the aux features (the HC-mean of the residual
 * entering each dspark target layer) as a by-product of every step (ds_batch_step_aux), the engine
 * decides which of those rows became committed, and only committed rows enter the draft rings
 * (ds_draft_commit, DRAFT pages addressed by absolute position, so rollback is a length change);
 * a proposal (ds_draft_propose) then reads the rings and never writes them.  Sampling stays with
 * the caller: the Markov correction feeds each chosen token into the next row's logits, so the
 * caller's pick function sees row i's logits before row i+1 exists (greedy: argmax; sampled: the
 * engine's sampler with its masks, recording q_i for the acceptance test of SERVING.md §8.3).
 *
 * Vocabulary (MODEL.md §3 item 2, CHECKPOINT.md §11): `mtp.0.embed.weight` / `mtp.{S−1}.head.weight`
 * when the release ships them; a release without rotation may share the trunk `embed`/`head`; a
 * rotated release without them has its draft disabled by the loader (ERROR line) or, when the
 * draft was required, fails to load.
 *
 * Numerics: the exact tier reduces in float64 with one rounding like the trunk (the NumPy oracle
 * reproduces drafts and draft logits bit for bit); the fast tier runs the attention core in fp32
 * in one fixed order.  Both are batch- and history-invariant. */
#ifndef DS_MODEL_DRAFT_H
#define DS_MODEL_DRAFT_H
#include "model/model.h"

#define DS_DRAFT_MAX_BLOCK 8

typedef struct ds_draft {
    int n_stages;                  /* S_d */
    int block;                     /* dspark_block_size rows per proposal */
    int rank;                      /* Markov rank r */
    int n_targets;                 /* captured target layers (aux = n_targets·D) */
    int trained;                   /* config declares a trained draft (start-up probe applies) */
    ds_config cfg;                 /* the model config with the draft's expert counts */
    const ds_bf16 *embed;          /* [V][D] draft vocabulary (own or shared) */
    ds_linear head;                /* [V, D] draft head (own or shared) */
    ds_linear main_proj;           /* [D, n_targets·D] */
    const float *main_norm;        /* [D] */
    const float *norm;             /* [D] mtp.{S−1}.norm */
    const ds_bf16 *markov_embed;   /* [V][r] lookup table */
    ds_linear markov_head;         /* [V, r] */
    const ds_bf16 *markov_t;       /* [V/64][r][64] blocked transposed copy of a BF16 Markov head (draft_heads.c) */
    const float *markov_norm;      /* [V] upper bounds of ||markov_head[v]||_2 (greedy pruning), or NULL */
    float markov_norm_max;         /* the largest of them */
    struct ds_head_screen *head_screen; /* fast tier: the screen of `head` (model/head_screen.h), own or the
                                      model's; NULL: greedy rows read the whole head */
    int screen_rest;               /* passes left before the screen is tried again after a row it could
                                      not decide (a Markov bound too loose to prune: random drafts) */
    const float *conf_proj;        /* [D + r] confidence head (fp32) */
    int own_vocab;                 /* mtp.0.embed / mtp.{S−1}.head present */
} ds_draft;

/* Load the draft of an opened model (called by ds_model_load when asked).  required: a missing or
 * disabled draft is an error; otherwise the draft is left NULL and the reason logged. */
int ds_draft_load(ds_model *m, int required, ds_error *err);

/* Aux row width (n_targets·D) or 0 when the model has no draft. */
int ds_draft_aux_width(const ds_model *m);

/* Write the draft ring rows of positions p0..p0+n−1 from their aux rows ([n][aux_width] bf16):
 * ring_s[p] = rope_SWA(rmsnorm(bf16(wkv_s·ctx[p]), kv_norm_s), p), ctx = rmsnorm(bf16(main_proj·aux),
 * main_norm).  Positions must continue the rows already written (p0 <= drf_hi); only the blocks
 * holding the last W positions are kept (older DRAFT pages are released), and their rows are
 * written whole, so that a full block's page can serve a prefix-cache hit.  Allocates DRAFT pages through the sequence's
 * allocator; returns -1 (E_KV_EXHAUSTED, nothing changed) when none is free. */
int ds_draft_commit(ds_model *m, ds_seq *s, const ds_bf16 *aux, int64_t p0, int n, ds_error *err);

/* DRAFT pages a commit ending at position `end` (exclusive) would allocate. */
uint32_t ds_draft_pages_needed(const ds_seq *s, int64_t end);

/* Choose row i's token from its Markov-corrected fp32 logits [V] (may modify them in place). */
typedef int32_t (*ds_draft_pick_fn)(void *ctx, int row, float *logits);

/* One draft pass for the anchor token at position P+1 = s->len (rows [anchor, noise…] at positions
 * P+1..P+block).  Writes the proposals drafts[0..block−1] (for positions P+2..P+block+1), and, when
 * not NULL, their logits [block][V] (after pick) and confidence logits conf[block].  pick NULL =
 * greedy (argmax, ties to the lower id).  Reads the draft rings of positions max(0, P−W+1)..P;
 * requires drf_hi == s->len.  Returns 0 or -1 (err). */
int ds_draft_propose(ds_model *m, const ds_seq *s, int32_t anchor, ds_draft_pick_fn pick, void *pick_ctx,
                     int32_t *drafts, float *logits, float *conf, ds_error *err);

/* Whether a draft pass for `anchor` on s may run now (0, or -1 with the reason in err). */
int ds_draft_check(const ds_model *m, const ds_seq *s, int32_t anchor, ds_error *err);

/* The draft passes of n sequences as one: their block rows go through the stages and the head
 * together (one read of every weight), the Markov rows of all sequences share one read of the
 * Markov head, and every row's result equals the one a single-sequence pass gives (the draft is
 * batch-invariant).  Sequence s picks its rows with pick(pick_ctx[s], …) when pick, pick_ctx and
 * pick_ctx[s] are all set, otherwise greedily: the first-index argmax over the ids neither in
 * greedy_mask (V bytes, may be NULL) nor the noise id.  A greedy row whose logits are not asked
 * for may skip the Markov correction of the ids that provably cannot win (same proposals).
 * Writes drafts[s·block..], logits[s·block·V..] and conf[s·block..] (optional).  Every sequence
 * must pass ds_draft_check (otherwise nothing runs: -1).  Returns 0 or -1 (err). */
int ds_draft_propose_many(ds_model *m, int n, const ds_seq *const *seqs, const int32_t *anchors, ds_draft_pick_fn pick,
                          void *const *pick_ctx, const uint8_t *greedy_mask, int32_t *drafts, float *logits, float *conf,
                          ds_error *err);

/* First-index argmax of x[0..V−1] over the ids not masked (masked may be NULL) and not `exclude`
 * (−1: none); NaN is never chosen unless it is the first candidate; 0 when nothing is eligible. */
int32_t ds_draft_argmax(const float *x, int V, const uint8_t *masked, int32_t exclude);

/* Adopt the DRAFT pages of blocks b0..b0+n-1 that a prefix-cache hit brought (the rings of the
 * adopted prefix, positions up to s->len = (b0+n)·bs, written by the request that cached them):
 * the sequence must have just adopted its prefix and hold no ring yet; the pages' references pass
 * to it.  Returns 0 or -1 (err, nothing adopted). */
int ds_draft_adopt(ds_seq *s, int64_t b0, int n, const uint32_t *pages, ds_error *err);

/* Blocks [*from, *to) whose DRAFT page holds every ring row a later pass can read from it (rows
 * from max(b·bs, (b+1)·bs − W) to the block end): those a prefix-cache entry may keep. */
void ds_draft_complete_blocks(const ds_model *m, const ds_seq *s, int *from, int *to);

/* Forget ring rows at positions >= len (rollback below the committed draft context). */
void ds_draft_truncate(ds_seq *s, int64_t len);

/* Release every DRAFT page of a sequence (called when the sequence is freed or reset). */
void ds_draft_release_all(ds_seq *s);

/* Row address of ring row (stage, pos) in its DRAFT page. */
ds_bf16 *ds_seq_draft_row(const ds_seq *s, int stage, int64_t pos);

/* The target step with aux capture: like ds_batch_step, and when aux != NULL and aux[i] != NULL,
 * aux[i] receives [n_rows[i]][aux_width] bf16 features of sequence i's rows (forward.c). */
int ds_batch_step_aux(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                      float *const *logits, const int *n_logits, ds_bf16 *const *aux, char *errbuf, size_t errlen);
/* The same, and where greedy && greedy[i]: sequence i's last n_logits[i] rows get their greedy ids in
 * greedy[i][0..n_logits[i]-1] instead of logits (logits[i] is not written): the first id of the
 * largest logit among the ids `mask` does not mark, -1 when some logit of the row is not finite
 * (model/head_screen.h; the fast tier screens the head; the exact tier and a vocabulary split over
 * several ranks compute full rows). */
int ds_batch_step_greedy(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                         float *const *logits, const int *n_logits, ds_bf16 *const *aux, int32_t *const *greedy,
                         const uint8_t *mask, char *errbuf, size_t errlen);
/* One sequence: tokens[0..n-1], and the greedy ids of its last n_ids rows into ids. */
int ds_seq_step_greedy(ds_model *m, ds_seq *s, const int32_t *tokens, int n, int32_t *ids, int n_ids, const uint8_t *mask,
                       char *errbuf, size_t errlen);

#endif
