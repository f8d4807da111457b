/* What the engine needs from a model: a forward step over several sequences' rows, reading and
 * writing KV through engine-owned page tables.
 *
 * Why an interface and not direct calls: the scheduler, the page policy and the sampler are
 * tested on their own against a small deterministic backend (backend_synthetic.c) that obeys
 * the same page contract as the real model (it reads its history only through the pages it is
 * handed, so a wrong page table shows up as a wrong token), while production plugs in the real
 * model (backend_model.c).  The contract, for each item of a step:
 *   - positions [pos0, pos0+n) are computed from tokens[pos0 .. pos0+n-1];
 *   - everything before pos0 is read from the pages in `tab` (CKV/IDX blocks 0..n_blk-1, WIN
 *     pages of blocks intersecting [pos0-W, pos0), the STATE page);
 *   - the step writes CKV/IDX rows of its positions, the WIN rows of blocks intersecting
 *     [pos0+n-W, pos0+n) that `tab` provides, and STATE slots;
 *   - logits are written for the last n_logits rows, items in order, each row `vocab` floats
 *     (rows of an item with `greedy` set get their ids there instead; the logits rows stay unused).
 * Results of a row must not depend on the other items of the step (batch invariance, §8.6). */
#ifndef DS_ENGINE_BACKEND_H
#define DS_ENGINE_BACKEND_H
#include "base/common.h"
#include "engine/kv_manager.h"

typedef struct ds_backend_item {
    void *seq;                 /* from seq_open */
    const ds_kv_seqtab *tab;
    const int32_t *tokens;     /* the request's whole token array */
    int64_t pos0;
    int n;
    int n_logits;
    /* Set by the engine only where the backend says greedy_ids and every logits row of the item is
     * plain greedy (ds_sampling_greedy_only): the backend writes each row's greedy id here
     * ([n_logits]; -1 when the row is not finite) instead of its logits, the ids mask marks never
     * chosen.  NULL: logits as usual.  One mask for every item of a step. */
    int32_t *greedy;
    const uint8_t *greedy_mask;
} ds_backend_item;

typedef struct ds_backend {
    const char *name;
    void *impl;
    int vocab;
    int window;                /* window rows a sequence keeps behind its length (positions) */
    int eos_id, bos_id, pad_id, noise_id, image_id;
    /* true: pages are taken during step() through the engine's allocator, so the engine must
     * count what it promised while building a step; false: prepare() allocates at once. */
    bool lazy_pages;
    /* true: step() can answer greedy rows with their ids alone (ds_backend_item.greedy) */
    bool greedy_ids;
    /* Page layout for a block size. */
    void (*layout)(void *impl, int bs, ds_kv_layout *out);
    /* A sequence whose first `start` positions are already in the pages of `tab` (prefix hit;
     * the references in `tab` pass to the sequence). */
    void *(*seq_open)(void *impl, ds_kvm *km, ds_kv_seqtab *tab, const int32_t *tokens, int64_t start, ds_error *err);
    /* Pages computing [a, b) would newly take. */
    void (*pages_needed)(void *impl, ds_kvm *km, void *seq, const ds_kv_seqtab *tab, int64_t a, int64_t b,
                         uint64_t need[DS_KV_KINDS]);
    /* Make sure the pages of [a, b) are there (may be a no-op for lazy backends); 0 or -1. */
    int (*prepare)(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, int64_t a, int64_t b);
    /* After a step that left L computed positions: window retention, `tab` brought up to date,
     * full blocks offered to the prefix cache. */
    void (*after_step)(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, const int32_t *tokens, int64_t L,
                       const char *salt);
    /* Release every page of the sequence and close it; `tab` ends empty. */
    void (*release)(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab);
    int (*step)(void *impl, ds_kv_pools *pools, ds_backend_item *items, int n_items, float *logits, ds_error *err);
    void (*destroy)(void *impl);
    /* Speculative decoding (SERVING.md §8; 0 / NULL when the backend has no draft).  A verify
     * item computes K+1 rows; after_step is then called with the committed length L <= pos0+n,
     * which rolls the sequence back past the rejected rows and moves the draft context to L.
     * propose: the draft passes of n sequences as one batch, each for its anchor at the
     * sequence's length (all earlier positions committed); pick chooses row i of sequence s from
     * its draft logits with pick_ctx[s] (NULL: greedy, the first-index argmax over the ids not in
     * greedy_mask, which may be NULL); drafts[s·spec_block..] receive the
     * proposals where ok[s] (a sequence that cannot draft now gets ok[s] = false, the others still
     * run).  Returns 0, or -1 (err) when the pass itself failed. */
    int spec_block;
    bool spec_trained;         /* the checkpoint declares a trained draft (start-up probe applies) */
    bool spec_active;          /* set by the engine: the draft context is kept only while it speculates */
    int (*propose)(void *impl, int n, void *const *seqs, const int32_t *anchors,
                   int32_t (*pick)(void *ctx, int row, float *logits), void *const *pick_ctx, const uint8_t *greedy_mask,
                   int32_t *drafts, bool *ok, ds_error *err);
} ds_backend;

/* The deterministic test backend.  Its "hidden state" at position p is a running hash of the
 * tokens 0..p kept in CKV rows, its window rows are per-position values kept in WIN pages, and
 * ratio-2 pairs pass through STATE slots; logits are a pseudo-random function of that state.
 * Every value read from a page is checked against the value recomputed from the token array,
 * and mismatches are counted (ds_synthetic_corruptions). */
typedef struct ds_synthetic_options {
    int vocab;            /* >= 16 */
    int window;           /* >= 2 */
    int eos_id, bos_id, pad_id, noise_id, image_id;
    int nan_token;        /* rows right after this token give NaN logits (-1: never) */
    double row_delay_us;  /* simulated compute per row */
    double peak;          /* logit spread: larger = more peaked distributions (default 8) */
} ds_synthetic_options;
ds_backend *ds_backend_synthetic_new(const ds_synthetic_options *o);
uint64_t ds_synthetic_corruptions(const ds_backend *b);
/* Reference logits of the synthetic model for position p of `tokens` (no pages involved):
 * the oracle the engine tests compare against. */
void ds_synthetic_reference_logits(const ds_backend *b, const int32_t *tokens, int64_t p, float *out);
void ds_backend_free(ds_backend *b);

#endif
