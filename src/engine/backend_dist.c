/* The model backend across MPI ranks (SERVING.md §14): rank 0's engine drives a wrapper that
 * broadcasts a compact descriptor of every state-changing backend call, and every other rank
 * replays it on its own shard of the model with its own page pools.
 *
 * Why at the backend interface: the scheduler, sampler, HTTP and speculation stay on rank 0 and
 * unchanged; the other ranks only need what changes the model's per-sequence state — open, a step's
 * rows (sequence id, first position, row count, logit rows, the tokens), the committed length
 * after a step (rollback of rejected verify rows), release — so the descriptor is small and the
 * ranks' KV pages hold the same values (every rank keeps the full KV: one latent head, §14).
 * Draft passes (propose) run only on rank 0: the draft is replicated and never collective, and
 * the other ranks' main-model state depends only on the tokens a step feeds.  Prefix caching: rank 0
 * alone decides (docs/DECISIONS.md).  Its page manager takes every CKV, WIN and STATE page of a step
 * before the step and sends their ids with the descriptor; the other ranks write the same rows into
 * the pages of the same ids, so page p holds the same KV on every rank for as long as rank 0 keeps
 * p, and a sequence that opens on a cached prefix names the cached page ids.  While the engine is idle rank 0
 * broadcasts a heartbeat each second, so a peer that waits longer than --dist-timeout knows that
 * rank 0 died or hangs (the collective watchdog stops it). */
#include "engine/backend_dist.h"
#include "engine/backend_dist_proto.h"
#include "dist/dist.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ---- rank 0 ---- */

typedef struct dseq { void *inner; int64_t sid; } dseq;

typedef struct dback {
    ds_backend *inner;
    ds_backend *self;
    ds_kvm *km;                    /* the engine's page manager (every sequence opens with it) */
    int64_t next_sid;
    int inited;
    pthread_mutex_t mu;            /* one descriptor (and its collectives) at a time */
    double last_op;
    pthread_t hb;
    int hb_stop;
    uint8_t *buf;
    size_t cap;
    void **handles;                /* scratch for handle swaps (engine thread only), grown, never shrunk */
    int cap_handles;
} dback;

/* The scratch handle array, at least n long: no allocation per step once it has grown. */
static void **handle_scratch(dback *d, int n) {
    if (n > d->cap_handles) {
        d->cap_handles = n + n / 2 + 8;
        d->handles = ds_xrealloc(d->handles, sizeof(void *) * (size_t)d->cap_handles);
    }
    return d->handles;
}

static uint8_t *grow_buf(dback *d, size_t bytes) {
    if (bytes > d->cap) {
        free(d->buf);
        d->cap = bytes + bytes / 2;
        d->buf = ds_xmalloc(d->cap);
    }
    return d->buf;
}

static void send_op(dback *d, op_head h, const void *payload) {
    ds_dist_bcast(&h, sizeof h, 0);
    if (h.payload) ds_dist_bcast((void *)payload, h.payload, 0);
    d->last_op = ds_now();
}

static void *heartbeat_main(void *arg) {
    dback *d = arg;
    for (;;) {
        usleep(250000);
        pthread_mutex_lock(&d->mu);
        if (d->hb_stop) { pthread_mutex_unlock(&d->mu); break; }
        if (ds_now() - d->last_op >= 1.0) send_op(d, (op_head){.op = OP_HEARTBEAT}, NULL);
        pthread_mutex_unlock(&d->mu);
    }
    return NULL;
}

static void sync_flags(dback *d) { d->inner->spec_active = d->self->spec_active; }

static void db_layout(void *impl, int bs, ds_kv_layout *out) {
    dback *d = impl;
    d->inner->layout(d->inner->impl, bs, out);
}

/* The descriptor of an opening sequence; on a prefix hit it carries the prompt's first `start`
 * ids and the cached pages the sequence adopts (backend_dist_proto.h). */
static void send_open(dback *d, const dseq *q, const ds_kv_seqtab *tab, const int32_t *tokens, int64_t start) {
    if (start == 0) {
        send_op(d, (op_head){.op = OP_OPEN, .sid = q->sid}, NULL);
        return;
    }
    const int k = (int)(start / d->km->bs);
    int64_t lo = start - d->km->window;
    lo = lo < 0 ? 0 : lo / d->km->bs;
    op_open oo = {start, k, (int)(k - lo)};
    size_t bytes = sizeof oo + sizeof(int32_t) * (size_t)start + sizeof(uint32_t) * (size_t)(k + oo.n_win);
    uint8_t *p = grow_buf(d, bytes);
    memcpy(p, &oo, sizeof oo);
    memcpy(p + sizeof oo, tokens, sizeof(int32_t) * (size_t)start);
    uint32_t *ids = (uint32_t *)(p + sizeof oo + sizeof(int32_t) * (size_t)start);
    const ds_block_tab *pg = ds_kv_tab_c(tab);
    memcpy(ids, pg->ckv, sizeof(uint32_t) * (size_t)k);
    memcpy(ids + k, pg->win + lo, sizeof(uint32_t) * (size_t)oo.n_win);
    send_op(d, (op_head){.op = OP_OPEN, .sid = q->sid, .a = start, .payload = bytes}, p);
}

static void *db_open(void *impl, ds_kvm *km, ds_kv_seqtab *tab, const int32_t *tokens, int64_t start, ds_error *err) {
    dback *d = impl;
    pthread_mutex_lock(&d->mu);
    sync_flags(d);
    d->km = km;
    if (!d->inited) {
        op_init in = {km->plan, km->bs, km->window, km->high_first};
        send_op(d, (op_head){.op = OP_INIT, .payload = sizeof in}, &in);
        d->inited = 1;
    }
    dseq *q = NULL;
    /* on a hit the table names the cached pages after the open (the sequence's table, which adopted them) */
    void *s = d->inner->seq_open(d->inner->impl, km, tab, tokens, start, err);
    if (s) {
        q = ds_xcalloc(1, sizeof *q);
        q->inner = s;
        q->sid = d->next_sid++;
        send_open(d, q, tab, tokens, start);
    }
    pthread_mutex_unlock(&d->mu);
    return q;
}

static void db_needed(void *impl, ds_kvm *km, void *seq, const ds_kv_seqtab *tab, int64_t a, int64_t b, uint64_t need[DS_KV_KINDS]) {
    dback *d = impl;
    sync_flags(d);
    d->inner->pages_needed(d->inner->impl, km, ((dseq *)seq)->inner, tab, a, b, need);
}

static int db_prepare(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, int64_t a, int64_t b) {
    dback *d = impl;
    return d->inner->prepare(d->inner->impl, km, ((dseq *)seq)->inner, tab, a, b);
}

static void db_after(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, const int32_t *tokens, int64_t L, const char *salt) {
    dback *d = impl;
    dseq *q = seq;
    pthread_mutex_lock(&d->mu);
    sync_flags(d);
    send_op(d, (op_head){.op = OP_AFTER, .sid = q->sid, .a = L}, NULL);
    d->inner->after_step(d->inner->impl, km, q->inner, tab, tokens, L, salt);
    pthread_mutex_unlock(&d->mu);
}

static void db_release(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab) {
    dback *d = impl;
    dseq *q = seq;
    pthread_mutex_lock(&d->mu);
    send_op(d, (op_head){.op = OP_RELEASE, .sid = q->sid}, NULL);
    d->inner->release(d->inner->impl, km, q->inner, tab);
    pthread_mutex_unlock(&d->mu);
    free(q);
}

static const ds_kv_kind k_dictated[3] = {DS_KV_CKV, DS_KV_WIN, DS_KV_STATE};

/* Gives back the dictated pages the step did not take (it failed before its reservation). */
static void end_dictation(ds_kvm *km) {
    km->dict_on = false;
    for (int j = 0; j < 3; j++) {
        const ds_kv_kind k = k_dictated[j];
        for (uint32_t i = km->dict.at[k]; i < km->dict.n[k]; i++) ds_kvm_page_unref(km, k, km->dict.ids[k][i]);
    }
    ds_kv_dict_clear(&km->dict);
}

/* Takes the step's CKV, WIN and STATE pages now, per item in the order the model's reservation asks
 * for them (blocks, window pages, state), so that their ids travel with the descriptor; the inner
 * step then takes exactly these (ds_kvm dict_on).  0, or -1 (err) when a pool ran dry. */
static int dictate_pages(dback *d, ds_backend_item *items, int n, ds_error *err) {
    ds_kvm *km = d->km;
    ds_kv_dict_clear(&km->dict);
    for (int i = 0; i < n; i++) {
        uint64_t need[DS_KV_KINDS];
        d->inner->pages_needed(d->inner->impl, km, ((dseq *)items[i].seq)->inner, items[i].tab, items[i].pos0,
                               items[i].pos0 + items[i].n, need);
        for (int j = 0; j < 3; j++)
            for (uint64_t c = 0; c < need[k_dictated[j]]; c++) {
                uint32_t id;
                if (ds_kvm_page_alloc(km, k_dictated[j], &id)) {
                    end_dictation(km);
                    return ds_fail(err, "E_KV_EXHAUSTED", "KV pool %d: expected a free page for the step, found none",
                                   (int)k_dictated[j]);
                }
                ds_kv_dict_push(&km->dict, k_dictated[j], id);
            }
    }
    km->dict_on = true;
    return 0;
}

/* The OP_STEP payload: items, their fed tokens, the dictated page ids (backend_dist_proto.h). */
static size_t pack_step(dback *d, const ds_backend_item *items, int n) {
    const ds_kv_dict *dc = &d->km->dict;
    size_t bytes = sizeof(op_item) * (size_t)n + sizeof(op_dict);
    for (int i = 0; i < n; i++) bytes += sizeof(int32_t) * (size_t)items[i].n;
    for (int j = 0; j < 3; j++) bytes += sizeof(uint32_t) * dc->n[k_dictated[j]];
    op_item *it = (op_item *)grow_buf(d, bytes);
    int32_t *tok = (int32_t *)(it + n);
    for (int i = 0; i < n; i++) {
        it[i] = (op_item){((dseq *)items[i].seq)->sid, items[i].pos0, items[i].n, items[i].n_logits};
        memcpy(tok, items[i].tokens + items[i].pos0, sizeof(int32_t) * (size_t)items[i].n);
        tok += items[i].n;
    }
    op_dict od = {dc->n[DS_KV_CKV], dc->n[DS_KV_WIN], dc->n[DS_KV_STATE], 0};
    memcpy(tok, &od, sizeof od);
    uint32_t *ids = (uint32_t *)((uint8_t *)tok + sizeof od);
    for (int j = 0; j < 3; j++) {
        memcpy(ids, dc->ids[k_dictated[j]], sizeof(uint32_t) * dc->n[k_dictated[j]]);
        ids += dc->n[k_dictated[j]];
    }
    return bytes;
}

static int db_step(void *impl, ds_kv_pools *pools, ds_backend_item *items, int n, float *logits, ds_error *err) {
    dback *d = impl;
    pthread_mutex_lock(&d->mu);
    sync_flags(d);
    if (dictate_pages(d, items, n, err)) {
        pthread_mutex_unlock(&d->mu);
        return -1;
    }
    size_t bytes = pack_step(d, items, n);
    send_op(d, (op_head){.op = OP_STEP, .n_items = n, .payload = bytes}, d->buf);
    /* the inner backend sees its own sequence handles */
    void **outer = handle_scratch(d, n);
    for (int i = 0; i < n; i++) {
        outer[i] = items[i].seq;
        items[i].seq = ((dseq *)outer[i])->inner;
    }
    int rc = d->inner->step(d->inner->impl, pools, items, n, logits, err);
    for (int i = 0; i < n; i++) items[i].seq = outer[i];
    end_dictation(d->km);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

static int db_propose(void *impl, int n, void *const *seqs, const int32_t *anchors,
                      int32_t (*pick)(void *ctx, int row, float *logits), void *const *pick_ctx, const uint8_t *greedy_mask,
                      int32_t *drafts, bool *ok, ds_error *err) {
    dback *d = impl;
    sync_flags(d);
    /* the draft is replicated and runs on rank 0 only: the inner backend sees its own handles */
    void **inner = handle_scratch(d, n);
    for (int i = 0; i < n; i++) inner[i] = ((dseq *)seqs[i])->inner;
    return d->inner->propose(d->inner->impl, n, inner, anchors, pick, pick_ctx, greedy_mask, drafts, ok, err);
}

static void db_destroy(void *impl) {
    dback *d = impl;
    pthread_mutex_lock(&d->mu);
    d->hb_stop = 1;
    send_op(d, (op_head){.op = OP_SHUTDOWN}, NULL);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->hb, NULL);
    ds_backend_free(d->inner);
    pthread_mutex_destroy(&d->mu);
    free(d->buf);
    free(d->handles);
    free(d);
}

ds_backend *ds_backend_dist_wrap(ds_backend *inner) {
    dback *d = ds_xcalloc(1, sizeof *d);
    ds_backend *b = ds_xcalloc(1, sizeof *b);
    *b = *inner;
    d->inner = inner;
    d->self = b;
    d->last_op = ds_now();
    pthread_mutex_init(&d->mu, NULL);
    b->name = "model (MPI ranks)";
    b->impl = d;
    b->layout = db_layout;
    b->seq_open = db_open;
    b->pages_needed = db_needed;
    b->prepare = db_prepare;
    b->after_step = db_after;
    b->release = db_release;
    b->step = db_step;
    b->destroy = db_destroy;
    b->propose = inner->propose ? db_propose : NULL;
    pthread_create(&d->hb, NULL, heartbeat_main, d);
    return b;
}
