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
 * the other ranks' main-model state depends only on the tokens a step feeds.  Prefix caching is off
 * under R > 1 (docs/DECISIONS.md), so a sequence always opens empty.  While the engine is idle rank 0
 * broadcasts a heartbeat each second, so a peer that waits longer than --dist-timeout knows that
 * rank 0 died or hangs (the collective watchdog stops it). */
#include "engine/backend_dist.h"
#include "dist/dist.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OP_INIT = 1, OP_OPEN, OP_STEP, OP_AFTER, OP_RELEASE, OP_HEARTBEAT, OP_SHUTDOWN };

typedef struct op_head { int32_t op, n_items; int64_t sid, a; uint64_t payload; } op_head;
typedef struct op_item { int64_t sid, pos0; int32_t n, n_logits; } op_item;
typedef struct op_init { ds_kv_budget plan; int32_t bs, window, high_first; } op_init;

/* ---- rank 0 ---- */

typedef struct dseq { void *inner; int64_t sid; } dseq;

typedef struct dback {
    ds_backend *inner;
    ds_backend *self;
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

static void *db_open(void *impl, ds_kvm *km, ds_kv_seqtab *tab, const int32_t *tokens, int64_t start, ds_error *err) {
    dback *d = impl;
    pthread_mutex_lock(&d->mu);
    sync_flags(d);
    if (!d->inited) {
        op_init in = {km->plan, km->bs, km->window, km->high_first};
        send_op(d, (op_head){.op = OP_INIT, .payload = sizeof in}, &in);
        d->inited = 1;
    }
    dseq *q = NULL;
    void *s = start == 0 ? d->inner->seq_open(d->inner->impl, km, tab, tokens, start, err) : NULL;
    if (start != 0) ds_fail(err, "E_DIST", "a sequence with a cached prefix cannot open across ranks");
    if (s) {
        q = ds_xcalloc(1, sizeof *q);
        q->inner = s;
        q->sid = d->next_sid++;
        send_op(d, (op_head){.op = OP_OPEN, .sid = q->sid}, NULL);
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

static int db_step(void *impl, ds_kv_pools *pools, ds_backend_item *items, int n, float *logits, ds_error *err) {
    dback *d = impl;
    size_t bytes = sizeof(op_item) * (size_t)n;
    for (int i = 0; i < n; i++) bytes += sizeof(int32_t) * (size_t)items[i].n;
    if (bytes > d->cap) {
        free(d->buf);
        d->cap = bytes + bytes / 2;
        d->buf = ds_xmalloc(d->cap);
    }
    op_item *it = (op_item *)d->buf;
    int32_t *tok = (int32_t *)(it + n);
    for (int i = 0; i < n; i++) {
        it[i] = (op_item){((dseq *)items[i].seq)->sid, items[i].pos0, items[i].n, items[i].n_logits};
        memcpy(tok, items[i].tokens + items[i].pos0, sizeof(int32_t) * (size_t)items[i].n);
        tok += items[i].n;
    }
    pthread_mutex_lock(&d->mu);
    sync_flags(d);
    send_op(d, (op_head){.op = OP_STEP, .n_items = n, .payload = bytes}, d->buf);
    /* the inner backend sees its own sequence handles */
    void **outer = handle_scratch(d, n);
    for (int i = 0; i < n; i++) {
        outer[i] = items[i].seq;
        items[i].seq = ((dseq *)outer[i])->inner;
    }
    int rc = d->inner->step(d->inner->impl, pools, items, n, logits, err);
    for (int i = 0; i < n; i++) items[i].seq = outer[i];
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
