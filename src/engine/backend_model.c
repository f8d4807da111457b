/* The real model behind the engine's backend interface (include/dsflash.h, model/model.h).
 *
 * Why it is built this way: the model keeps its own block tables and takes pages through an
 * allocator during a step (ds_seq_new_paged + ds_kv_alloc_ops), reserving all of a step's pages
 * up front so a step never fails half-way.  The engine owns the pools, so the allocator handed to
 * the model is the engine's page manager: allocation evicts prefix-cache entries when needed and
 * release drops a reference.  The block tables have one owner, the sequence: once it is open the
 * engine's table for the request (ds_kv_seqtab) points at the sequence's own (a prefix hit's pages
 * are adopted first), and the prefix cache and the audit read it in place.  CKV and IDX pages are
 * handed out as pairs with the same id (the engine sizes both pools alike): the model asks for a
 * CKV page and then the IDX page of the same block, so the IDX request returns the id of the CKV
 * page just given. */
#include "engine/backend_model.h"
#include "model/draft.h"
#include <stdlib.h>
#include <string.h>

typedef struct mseq {
    ds_seq *s;
    ds_kvm *km;
    uint32_t pair[8];       /* CKV ids whose IDX twin has not been asked for yet */
    int n_pair;
    ds_bf16 *aux;           /* draft features of the last step's rows (model with a draft) */
    int64_t aux_p0;         /* position of aux row 0 */
    int aux_n, aux_cap;     /* rows held, rows allocated */
} mseq;

typedef struct mback {
    ds_model *m;
    const struct ds_backend *be;   /* its own interface (spec_active) */
    /* step argument arrays, grown to the largest batch seen (only the engine thread steps) */
    int cap;
    ds_seq **seqs;
    const int32_t **toks;
    int *rows, *nl;
    float **out;
    int32_t **greedy;              /* greedy ids of each item (NULL: logits) */
    ds_bf16 **auxp;                /* draft features of each item (while drafting) */
} mback;

/* The draft context (aux features, rings in DRAFT pages) is kept only while the engine speculates. */
static bool drafting(const mback *b) { return b->m->draft && b->be && b->be->spec_active; }

static int ops_alloc(void *ctx, ds_kv_kind kind, uint32_t *page) {
    mseq *q = ctx;
    if (kind == DS_KV_IDX) {
        if (!q->n_pair) return -1;
        *page = q->pair[0];
        memmove(q->pair, q->pair + 1, sizeof(uint32_t) * (size_t)--q->n_pair);
        return 0;
    }
    if (kind == DS_KV_CKV && q->n_pair == (int)DS_ARRAY_LEN(q->pair)) return -1;
    if (ds_kvm_page_alloc(q->km, kind, page)) return -1;
    if (kind == DS_KV_CKV) q->pair[q->n_pair++] = *page;
    return 0;
}

static void ops_release(void *ctx, ds_kv_kind kind, uint32_t page) {
    mseq *q = ctx;
    if (kind == DS_KV_IDX) return; /* released with its CKV twin */
    ds_kvm_page_unref(q->km, kind, page);
}

static void mb_layout(void *impl, int bs, ds_kv_layout *out) {
    mback *b = impl;
    ds_kv_layout_init(out, &b->m->cfg, bs);
}

/* Draft ring pages that came with a prefix hit: the sequence adopts those its draft window reads
 * (blocks from keep), so speculation continues at once; the others go back to the cache.  Without
 * drafting, or when the run does not reach down to the window, all go back (the draft re-warms). */
static void adopt_draft_tails(mback *b, mseq *q, ds_kv_seqtab *tab, int64_t k) {
    const int64_t bs = q->km->bs, start = k * bs;
    int64_t keep = start - b->m->cfg.window;
    keep = keep < 0 ? 0 : keep / bs;
    int64_t lo = k;
    ds_block_tab *own = &tab->own;   /* the hit, not yet bound to the sequence */
    while (lo > 0 && lo - 1 < own->cap && own->drf[lo - 1] != DS_KV_NONE) lo--;
    bool use = drafting(b) && lo <= keep && keep < k;
    if (use) {
        ds_error e2 = {{0}, {0}};
        use = ds_draft_adopt(q->s, keep, (int)(k - keep), own->drf + keep, &e2) == 0;
        if (!use) ds_log(DS_LOG_WARN, "draft rings of a cached prefix not adopted: %s", e2.msg);
    }
    for (int64_t j = 0; j < k && j < own->cap; j++) {
        if (own->drf[j] == DS_KV_NONE || (use && j >= keep)) continue;
        ds_kvm_page_unref(q->km, DS_KV_DRAFT, own->drf[j]);
        own->drf[j] = DS_KV_NONE;
    }
}

static void *mb_open(void *impl, ds_kvm *km, ds_kv_seqtab *tab, const int32_t *tokens, int64_t start, ds_error *err) {
    mback *b = impl;
    mseq *q = ds_xcalloc(1, sizeof *q);
    q->km = km;
    ds_kv_alloc_ops ops = {q, ops_alloc, ops_release};
    q->s = ds_seq_new_paged(b->m, &km->pools, ops);
    if (!q->s) {
        free(q);
        ds_fail(err, "E_SEQ", "cannot create a paged sequence");
        return NULL;
    }
    if (start > 0) {
        int64_t k = start / km->bs;
        int64_t lo = start - km->window;
        lo = lo < 0 ? 0 : lo / km->bs;
        int n_win = (int)(k - lo);
        uint32_t *win = ds_xmalloc(sizeof(uint32_t) * (size_t)(n_win ? n_win : 1));
        for (int i = 0; i < n_win; i++) win[i] = tab->own.win[lo + i];
        /* the table's references pass to the sequence, which releases them through ops_release */
        int rc = ds_seq_adopt_prefix(q->s, k, tab->own.ckv, tab->own.ckv, n_win, win, tokens, err);
        free(win);
        if (rc) {
            ds_seq_free(q->s); /* adopted nothing: the references are still the table's */
            free(q);
            return NULL;
        }
        adopt_draft_tails(b, q, tab, k);
    }
    ds_kvm_seqtab_bind(tab, &q->s->pg);   /* the sequence's table is the request's from now on */
    return q;
}

static void mb_needed(void *impl, ds_kvm *km, void *seq, const ds_kv_seqtab *tab, int64_t a, int64_t b,
                      uint64_t need[DS_KV_KINDS]) {
    mseq *q = seq;
    uint32_t c[DS_KV_KINDS];
    ds_seq_pages_needed(q->s, (int)(b - a), c);
    mback *mb = impl;
    if (drafting(mb)) c[DS_KV_DRAFT] = ds_draft_pages_needed(q->s, b);
    for (int k = 0; k < DS_KV_KINDS; k++) need[k] = c[k];
}

static int mb_prepare(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, int64_t a, int64_t b) { return 0; }

static void mb_after(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, const int32_t *tokens, int64_t L,
                     const char *salt) {
    mseq *q = seq;
    ds_seq *s = q->s;
    mback *mb = impl;
    if (L < s->len) ds_seq_truncate(s, L);   /* rejected verify rows (§6.3: only the length moves) */
    if (drafting(mb) && q->aux_n > 0 && L > q->aux_p0) {
        /* the draft context follows the committed rows; an allocation failure only leaves the
         * rings short, which stops drafting for this sequence (ds_draft_propose refuses) */
        ds_error e2 = {{0}, {0}};
        int64_t n = L - q->aux_p0 < q->aux_n ? L - q->aux_p0 : q->aux_n;
        if (ds_draft_commit(mb->m, s, q->aux, q->aux_p0, (int)n, &e2) < 0)
            ds_log(DS_LOG_WARN, "draft context not written: %s", e2.msg);
        q->aux_n = 0;
    }
    ds_draft_complete_blocks(mb->m, s, &tab->drf_from, &tab->drf_to);
    ds_kvm_after_step(km, tab, tokens, L, salt);
}

static void mb_release(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab) {
    mseq *q = seq;
    ds_seq_free(q->s); /* hands every page back through ops_release; its table goes with it */
    ds_afree(q->aux);
    free(q);
    ds_kvm_seqtab_clear(tab);
}

static int mb_step(void *impl, ds_kv_pools *pools, ds_backend_item *items, int n, float *logits, ds_error *err) {
    mback *b = impl;
    if (n > b->cap) {
        b->cap = n;
        b->seqs = ds_xrealloc(b->seqs, sizeof(ds_seq *) * (size_t)n);
        b->toks = ds_xrealloc(b->toks, sizeof(int32_t *) * (size_t)n);
        b->rows = ds_xrealloc(b->rows, sizeof(int) * (size_t)n);
        b->nl = ds_xrealloc(b->nl, sizeof(int) * (size_t)n);
        b->out = ds_xrealloc(b->out, sizeof(float *) * (size_t)n);
        b->greedy = ds_xrealloc(b->greedy, sizeof(int32_t *) * (size_t)n);
        b->auxp = ds_xrealloc(b->auxp, sizeof(ds_bf16 *) * (size_t)n);
    }
    ds_seq **seqs = b->seqs;
    const int32_t **toks = b->toks;
    int *rows = b->rows, *nl = b->nl;
    float **out = b->out;
    size_t off = 0;
    int V = ds_model_vocab_size(b->m), W = drafting(b) ? ds_draft_aux_width(b->m) : 0;
    ds_bf16 **aux = W ? b->auxp : NULL;
    const uint8_t *mask = NULL;
    bool any_greedy = false;
    for (int i = 0; i < n; i++) {
        mseq *q = items[i].seq;
        if (aux) { /* every row's features: which of them become committed is known after sampling */
            if (q->aux_cap < items[i].n) {
                ds_afree(q->aux);
                q->aux_cap = items[i].n;
                q->aux = ds_amalloc(sizeof(ds_bf16) * (size_t)q->aux_cap * W);
            }
            q->aux_p0 = items[i].pos0;
            q->aux_n = items[i].n;
            aux[i] = q->aux;
        }
        seqs[i] = q->s;
        toks[i] = items[i].tokens + items[i].pos0;
        rows[i] = items[i].n;
        nl[i] = items[i].n_logits;
        out[i] = nl[i] ? logits + off * (size_t)V : NULL;
        off += (size_t)nl[i];
        b->greedy[i] = items[i].greedy;
        if (items[i].greedy) any_greedy = true, mask = items[i].greedy_mask;
    }
    char eb[512] = "";
    int rc = ds_batch_step_greedy(b->m, n, seqs, toks, rows, out, nl, aux, any_greedy ? b->greedy : NULL, mask, eb, sizeof eb);
    if (rc) ds_fail(err, "E_FORWARD", "%s", eb);
    if (rc && aux)
        for (int i = 0; i < n; i++) ((mseq *)items[i].seq)->aux_n = 0;
    return rc;
}

static void mb_destroy(void *impl) {
    mback *b = impl;
    free(b->seqs);
    free(b->toks);
    free(b->rows);
    free(b->nl);
    free(b->out);
    free(b->greedy);
    free(b->auxp);
    free(b);
}

/* Sequences that cannot draft now drop out; the others run as one batched draft pass. */
static int mb_propose(void *impl, int n, void *const *seqs, const int32_t *anchors,
                      int32_t (*pick)(void *ctx, int row, float *logits), void *const *pick_ctx, const uint8_t *greedy_mask,
                      int32_t *drafts, bool *ok, ds_error *err) {
    mback *b = impl;
    enum { GROUP = 16 };
    const int B = b->m->draft->block;
    for (int g0 = 0; g0 < n; g0 += GROUP) {
        const ds_seq *ss[GROUP];
        int32_t an[GROUP], dr[GROUP * DS_DRAFT_MAX_BLOCK];
        void *pc[GROUP];
        int idx[GROUP], k = 0;
        for (int i = g0; i < n && i < g0 + GROUP; i++) {
            ds_error ce = {{0}, {0}};
            const ds_seq *s = ((const mseq *)seqs[i])->s;
            ok[i] = ds_draft_check(b->m, s, anchors[i], &ce) == 0;
            if (!ok[i]) {
                ds_log(DS_LOG_DEBUG, "no draft for a sequence this step: %s", ce.msg);
                continue;
            }
            ss[k] = s;
            an[k] = anchors[i];
            pc[k] = pick_ctx ? pick_ctx[i] : NULL;
            idx[k++] = i;
        }
        if (k && ds_draft_propose_many(b->m, k, ss, an, pick, pc, greedy_mask, dr, NULL, NULL, err) < 0) {
            for (int j = 0; j < k; j++) ok[idx[j]] = false;
            return -1;
        }
        for (int j = 0; j < k; j++) memcpy(drafts + (size_t)idx[j] * B, dr + (size_t)j * B, sizeof(int32_t) * (size_t)B);
    }
    return 0;
}

ds_backend *ds_backend_model_new(ds_model *m) {
    mback *mb = ds_xcalloc(1, sizeof *mb);
    mb->m = m;
    ds_backend *b = ds_xcalloc(1, sizeof *b);
    mb->be = b;
    b->name = "model";
    b->impl = mb;
    b->vocab = ds_model_vocab_size(m);
    b->window = m->cfg.window + DS_MAX_ROLLBACK;
    b->eos_id = m->cfg.eos_id;
    b->bos_id = m->cfg.bos_id;
    b->pad_id = m->cfg.pad_id;
    b->noise_id = m->cfg.dspark_noise_id;
    b->image_id = m->cfg.image_token_id;
    b->lazy_pages = true;
    b->greedy_ids = true;
    b->layout = mb_layout;
    b->seq_open = mb_open;
    b->pages_needed = mb_needed;
    b->prepare = mb_prepare;
    b->after_step = mb_after;
    b->release = mb_release;
    b->step = mb_step;
    b->destroy = mb_destroy;
    if (m->draft) {
        b->spec_block = m->draft->block;
        b->spec_trained = m->draft->trained;
        b->propose = mb_propose;
    }
    return b;
}
