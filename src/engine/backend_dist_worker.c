/* Ranks > 0 of a multi-process serve: replay rank 0's backend descriptors (backend_dist.c) on this
 * rank's shard, with page pools of the same plan, until rank 0 shuts down.
 *
 * Why a mirror of each sequence's tokens: a step item names its rows by first position and count,
 * and the model backend reads a request's token array at those positions; keeping the fed tokens
 * per sequence gives the backend the same view as on rank 0.  A step that fails on rank 0 fails
 * the same way here (same inputs, same pools), and changes nothing on either side.
 * Pages: this rank's page manager is a mirror (kv_manager.h): every CKV, WIN and STATE page a step
 * takes is the one rank 0 names in the descriptor, and a step that does not take exactly those is
 * a divergence that stops the job — the run-time proof that page p holds the same KV on every rank,
 * which a sequence opening on rank 0's cached prefix relies on. */
#include "engine/backend_dist.h"
#include "engine/backend_dist_proto.h"
#include "engine/backend_model.h"
#include "dist/dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct wseq {
    int64_t sid;
    void *inner;
    ds_kv_seqtab tab;
    int32_t *tok;
    int64_t cap;
} wseq;

typedef struct worker {
    ds_model *m;
    ds_backend *be;
    ds_kvm km;
    int have_km;
    wseq **seqs;
    int n, cap;
    uint8_t *buf;
    size_t buf_cap;
    float *logits;
    size_t logits_cap;
    ds_backend_item *items;
    int items_cap;
} worker;

static wseq *find(worker *w, int64_t sid, int *at) {
    for (int i = 0; i < w->n; i++)
        if (w->seqs[i]->sid == sid) {
            if (at) *at = i;
            return w->seqs[i];
        }
    fprintf(stderr, "dsflash: E_DIST: rank %d: descriptor names unknown sequence %lld; stopping\n", ds_dist_rank(), (long long)sid);
    ds_dist_abort(70);
    return NULL;
}

static int op_init_kvm(worker *w, const op_init *in) {
    ds_kv_layout lay;
    ds_error err = {{0}, {0}};
    w->be->layout(w->be->impl, in->bs, &lay);
    if (ds_kvm_init(&w->km, &lay, &in->plan, in->window, false, in->high_first, "", &err)) {
        fprintf(stderr, "dsflash: rank %d: KV pools: %s: %s\n", ds_dist_rank(), err.code, err.msg);
        return -1;
    }
    w->km.mirror = true;
    w->have_km = 1;
    return 0;
}

static void mirror_tokens(wseq *q, int64_t need) {
    if (need > q->cap) {
        q->cap = need + need / 2 + 16;
        q->tok = ds_xrealloc(q->tok, sizeof(int32_t) * (size_t)q->cap);
    }
}

/* A prefix hit (backend_dist_proto.h): the table names rank 0's cached pages, which hold the same
 * rows here (this rank wrote them under the same ids). */
static void open_table(wseq *q, int64_t start, const uint8_t *payload, int window, int bs) {
    op_open oo;
    memcpy(&oo, payload, sizeof oo);
    mirror_tokens(q, start);
    memcpy(q->tok, payload + sizeof oo, sizeof(int32_t) * (size_t)start);
    const uint32_t *ids = (const uint32_t *)(payload + sizeof oo + sizeof(int32_t) * (size_t)start);
    ds_kvm_seqtab_reserve(&q->tab, oo.k + 1);
    memcpy(q->tab.own.ckv, ids, sizeof(uint32_t) * (size_t)oo.k);
    int64_t lo = start - window;
    lo = lo < 0 ? 0 : lo / bs;
    memcpy(q->tab.own.win + lo, ids + oo.k, sizeof(uint32_t) * (size_t)oo.n_win);
    q->tab.own.n_blk = oo.k;
    q->tab.n_hashed = oo.k;
}

static int open_seq(worker *w, int64_t sid, int64_t start, const uint8_t *payload) {
    ds_error err = {{0}, {0}};
    wseq *q = ds_xcalloc(1, sizeof *q);
    q->sid = sid;
    ds_kvm_seqtab_init(&q->tab);
    if (start > 0) open_table(q, start, payload, w->km.window, w->km.bs);
    q->inner = w->be->seq_open(w->be->impl, &w->km, &q->tab, q->tok, start, &err);
    if (!q->inner) {
        fprintf(stderr, "dsflash: rank %d: open sequence: %s: %s\n", ds_dist_rank(), err.code, err.msg);
        ds_kvm_seqtab_free(&q->tab);
        free(q->tok);
        free(q);
        return -1;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->seqs = ds_xrealloc(w->seqs, sizeof(*w->seqs) * (size_t)w->cap);
    }
    w->seqs[w->n++] = q;
    return 0;
}

static const ds_kv_kind k_dictated[3] = {DS_KV_CKV, DS_KV_WIN, DS_KV_STATE};

/* The page ids rank 0 took for this step (after the fed tokens in the payload). */
static void dictation_load(ds_kvm *km, const int32_t *after_tokens) {
    op_dict od;
    memcpy(&od, after_tokens, sizeof od);
    const uint32_t *ids = (const uint32_t *)((const uint8_t *)after_tokens + sizeof od);
    const uint32_t cnt[3] = {od.n_ckv, od.n_win, od.n_state};
    ds_kv_dict_clear(&km->dict);
    for (int j = 0; j < 3; j++)
        for (uint32_t i = 0; i < cnt[j]; i++) ds_kv_dict_push(&km->dict, k_dictated[j], *ids++);
}

/* A step here must take exactly the pages rank 0 took; anything else means the ranks' KV differ. */
static void dictation_check(const ds_kvm *km) {
    for (int j = 0; j < 3; j++) {
        const ds_kv_kind k = k_dictated[j];
        if (km->dict.at[k] == km->dict.n[k]) continue;
        fprintf(stderr, "dsflash: E_DIST: rank %d: a step took %u of the %u pages of kind %d that rank 0 took; "
                "the ranks' KV pages differ, stopping\n", ds_dist_rank(), km->dict.at[k], km->dict.n[k], (int)k);
        ds_dist_abort(70);
    }
}

static void op_step(worker *w, int n, const uint8_t *payload) {
    const op_item *it = (const op_item *)payload;
    const int32_t *tok = (const int32_t *)(it + n);
    if (n > w->items_cap) {
        w->items_cap = n;
        w->items = ds_xrealloc(w->items, sizeof(*w->items) * (size_t)n);
    }
    size_t rows = 0;
    for (int i = 0; i < n; i++) {
        wseq *q = find(w, it[i].sid, NULL);
        mirror_tokens(q, it[i].pos0 + it[i].n);
        memcpy(q->tok + it[i].pos0, tok, sizeof(int32_t) * (size_t)it[i].n);
        tok += it[i].n;
        w->items[i] = (ds_backend_item){q->inner, &q->tab, q->tok, it[i].pos0, it[i].n, it[i].n_logits, NULL, NULL};
        rows += (size_t)it[i].n_logits;
    }
    size_t need = rows * (size_t)w->be->vocab;
    if (need > w->logits_cap) {
        free(w->logits);
        w->logits_cap = need;
        w->logits = ds_xmalloc(sizeof(float) * (need ? need : 1));
    }
    dictation_load(&w->km, tok);
    ds_error err = {{0}, {0}};
    if (w->be->step(w->be->impl, &w->km.pools, w->items, n, w->logits, &err) == 0) /* else it failed alike on rank 0 */
        dictation_check(&w->km);
    ds_kv_dict_clear(&w->km.dict);
}

static void op_release(worker *w, int64_t sid) {
    int at = 0;
    wseq *q = find(w, sid, &at);
    w->be->release(w->be->impl, &w->km, q->inner, &q->tab);
    ds_kvm_seqtab_free(&q->tab);
    free(q->tok);
    free(q);
    w->seqs[at] = w->seqs[--w->n];
}

int ds_backend_dist_worker(ds_model *m) {
    worker w = {.m = m, .be = ds_backend_model_new(m)};
    int rc = 0;
    for (int done = 0; !done && !rc;) {
        op_head h;
        ds_dist_bcast(&h, sizeof h, 0);
        if (h.payload > w.buf_cap) {
            free(w.buf);
            w.buf_cap = h.payload;
            w.buf = ds_xmalloc(w.buf_cap);
        }
        if (h.payload) ds_dist_bcast(w.buf, h.payload, 0);
        switch (h.op) {
        case OP_INIT: rc = op_init_kvm(&w, (const op_init *)w.buf); break;
        case OP_OPEN: rc = open_seq(&w, h.sid, h.a, w.buf); break;
        case OP_STEP: op_step(&w, h.n_items, w.buf); break;
        case OP_AFTER: {
            wseq *q = find(&w, h.sid, NULL);
            w.be->after_step(w.be->impl, &w.km, q->inner, &q->tab, q->tok, h.a, "");
            break;
        }
        case OP_RELEASE: op_release(&w, h.sid); break;
        case OP_HEARTBEAT: break;
        case OP_SHUTDOWN: done = 1; break;
        default:
            fprintf(stderr, "dsflash: E_DIST: rank %d: unknown descriptor %d\n", ds_dist_rank(), h.op);
            rc = -1;
        }
    }
    while (w.n) op_release(&w, w.seqs[w.n - 1]->sid);
    free(w.seqs);
    if (w.have_km) ds_kvm_destroy(&w.km);
    ds_backend_free(w.be);
    free(w.buf);
    free(w.logits);
    free(w.items);
    if (rc) ds_dist_abort(70);
    return 0;
}
