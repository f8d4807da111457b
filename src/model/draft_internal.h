/* Pieces of the DSpark draft shared by its files (draft.c, draft_fwd.c, draft_heads.c); not API.
 *
 * Why a private header: the draft pass is split by stage (blocks in draft_fwd.c, heads in
 * draft_heads.c) to keep each file short, and the packed Markov weight is made by the loader. */
#ifndef DS_MODEL_DRAFT_INTERNAL_H
#define DS_MODEL_DRAFT_INTERNAL_H
#include "model/draft.h"
#include "model/forward.h"

/* Keep a transposed copy of a BF16 Markov head in blocks of outputs (d->markov_t; NULL for other formats). */
void ds_draft_pack_markov(ds_model *m, ds_draft *d);

/* Heads of a pass over n sequences whose B rows each sit in st->X (sequence s: rows s·B..s·B+B−1):
 * drafts [n][B], logits [n][B][V] and conf [n][B] as ds_draft_propose_many documents. */
void ds_draft_heads(ds_model *m, ds_step *st, int n, const int32_t *anchors, ds_draft_pick_fn pick, void *const *pick_ctx,
                    const uint8_t *greedy_mask, int32_t *drafts, float *logits, float *conf);

#endif
