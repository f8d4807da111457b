/* The final rows of a step: what each item asks of the backend (logits, or greedy ids where every
 * row of the item is plain greedy) and how the rows become sampled tokens.
 *
 * Why a file of its own: the step loop (engine.c) decides which items run; this is the per-row
 * contract between the scheduler, the backend and the sampler, the one place that knows a plain
 * greedy row needs no logits (the model then screens its head, model/head_screen.h) and that a
 * row's sampling runs on the compute pool. */
#include "engine/engine_internal.h"
#include "base/threadpool.h"
#include <stdlib.h>

/* Items whose every logits row is plain greedy get their ids from the backend instead of logits
 * (the model then screens its head: model/head_screen.h); prompt-logprobs rows need full rows. */
void ds_engine_ask_greedy_ids(ds_engine *e, size_t n_logits) {
    if (n_logits > e->greedy_cap) {
        free(e->greedy_ids);
        e->greedy_ids = ds_xmalloc(sizeof(int32_t) * n_logits);
        e->greedy_cap = n_logits;
    }
    size_t row = 0;
    for (int k = 0; k < e->n_items; k++) {
        ds_backend_item *it = &e->items[k];
        const ds_req *r = e->item_req[k];
        const bool plp = r->sp.prompt_logprobs >= 0 && r->n_plp_done < r->n_prompt;
        const bool ok = e->be->greedy_ids && it->n_logits > 0 && !plp &&
                        ds_sampling_greedy_only(&r->sp, r->n_tokens - r->n_prompt);
        it->greedy = ok ? e->greedy_ids + row : NULL;
        it->greedy_mask = e->mask ? e->mask->masked : NULL;
        row += (size_t)it->n_logits;
    }
}

/* Sampling of the step's final rows runs on the compute pool, one task per row: rows are
 * independent (counter-based draws, per-row history) and a 129,280-wide row costs about a
 * millisecond, which a batch of 32 must not pay serially.  Commits stay serial, in item order. */
typedef struct sample_job {
    ds_engine *e;
    const int *item;           /* item index of each job */
    ds_sample_result *res;
    int *rc;
} sample_job;

static void sample_task(void *ctx, int t, int thread) {
    sample_job *j = ctx;
    ds_engine *e = j->e;
    int k = j->item[t];
    ds_backend_item *it = &e->items[k];
    ds_req *r = e->item_req[k];
    int V = e->be->vocab;
    const float *last = e->logits + (e->item_row[k] + (size_t)(it->n_logits - 1)) * (size_t)V;
    ds_sample_history h = {r->tokens, r->n_prompt, r->tokens + r->n_prompt, r->n_tokens - r->n_prompt};
    if (it->greedy) {
        j->rc[t] = ds_sample_greedy_id(it->greedy[it->n_logits - 1], &j->res[t]);
        return;
    }
    j->rc[t] = ds_sample_row(last, V, e->mask, &r->sp, r->seed, r->n_tokens - r->n_prompt, &h,
                             e->ss_pool[thread < e->n_ss ? thread : 0], &j->res[t]);
}

void ds_engine_sample_items(ds_engine *e, const int *item, int n, ds_sample_result *res, int *rc) {
    sample_job job = {e, item, res, rc};
    if (n > 1) ds_pool_run(n, sample_task, &job);
    else if (n == 1) sample_task(&job, 0, 0);
}
