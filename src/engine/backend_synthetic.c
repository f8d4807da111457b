/* The deterministic test backend (see backend.h).  It exists so that the scheduler, page policy,
 * prefix cache and sampler can be tested without a model; it is never offered by `dsflash serve`.
 *
 * Page use mirrors the real model's contract: the CKV row of position p holds H_p (a running
 * hash of tokens 0..p), the WIN row of p holds v_p (a hash of token p and p), and at an even
 * position p the STATE slot p mod 32 holds v_p until the odd position completes the "pair".
 * A row's logits depend on H_p and on the W-1 preceding window values, so any page the engine
 * maps wrongly (a stale tail, a block of another request, a missing window page) changes the
 * output, and every read is also verified against the token array. */
#include "engine/backend.h"
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct syn {
    ds_synthetic_options o;
    atomic_uint_fast64_t corruptions;
} syn;

static inline uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline uint64_t vpos(int32_t tok, int64_t p) { return mix(((uint64_t)(uint32_t)tok << 32) ^ (uint64_t)p ^ 0x5151ull); }
static inline uint64_t hstep(uint64_t prev, int32_t tok, int64_t p) { return mix(prev ^ vpos(tok, p)); }
#define H_SEED 0x0123456789ABCDEFull

static void syn_layout(void *impl, int bs, ds_kv_layout *lay) {
    memset(lay, 0, sizeof *lay);
    lay->bs = bs;
    lay->n_src = 1;
    lay->d_h = 4;
    lay->d_idx = 4;
    lay->page_bytes[DS_KV_CKV] = (uint64_t)bs * 8u;
    lay->page_bytes[DS_KV_IDX] = (uint64_t)bs * 8u;
    lay->page_bytes[DS_KV_WIN] = (uint64_t)bs * 8u;
    lay->page_bytes[DS_KV_DRAFT] = (uint64_t)bs * 8u;
    lay->page_bytes[DS_KV_STATE] = DS_STATE_SLOTS * 8u;
}

static uint64_t *row(ds_kv_pools *p, ds_kv_kind k, uint32_t page, int64_t slot) {
    return (uint64_t *)(void *)ds_kv_page(p, k, page) + slot;
}

static void *syn_open(void *impl, ds_kvm *km, ds_kv_seqtab *tab, const int32_t *tokens, int64_t start, ds_error *err) {
    return ds_xcalloc(1, 8); /* no per-sequence state: everything lives in pages */
}
static void syn_needed(void *impl, ds_kvm *km, void *seq, const ds_kv_seqtab *tab, int64_t a, int64_t b,
                       uint64_t need[DS_KV_KINDS]) {
    ds_kvm_pages_needed(km, tab, a, b, need);
}
static int syn_prepare(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, int64_t a, int64_t b) {
    return ds_kvm_prepare(km, tab, a, b);
}
static void syn_after(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab, const int32_t *tokens, int64_t L,
                      const char *salt) {
    ds_kvm_after_step(km, tab, tokens, L, salt);
}
static void syn_release(void *impl, ds_kvm *km, void *seq, ds_kv_seqtab *tab) {
    ds_kvm_release(km, tab);
    free(seq);
}

static void logits_from(const syn *s, uint64_t seed, float *out) {
    double peak = s->o.peak > 0 ? s->o.peak : 8.0;
    for (int v = 0; v < s->o.vocab; v++) {
        uint64_t h = mix(seed ^ ((uint64_t)v * 0x9E3779B97F4A7C15ull));
        double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
        out[v] = (float)(peak * (u * u * u) - 1.0); /* skewed: few large logits, many small */
    }
}

static uint64_t fold_window(const syn *s, uint64_t hp, const uint64_t *win_vals, int nwin) {
    uint64_t seed = hp;
    for (int j = 0; j < nwin; j++) seed = mix(seed + win_vals[j] * (uint64_t)(j + 1));
    return seed;
}

static int syn_step(void *impl, ds_kv_pools *pools, ds_backend_item *items, int n_items, float *logits, ds_error *err) {
    syn *s = impl;
    int bs = pools->lay.bs, W = s->o.window;
    size_t out_row = 0;
    uint64_t *wv = ds_xmalloc(sizeof(uint64_t) * (size_t)W);
    for (int it = 0; it < n_items; it++) {
        ds_backend_item *x = &items[it];
        const ds_block_tab *t = ds_kv_tab_c(x->tab);
        int64_t a = x->pos0, b = x->pos0 + x->n;
        if ((b + bs - 1) / bs > t->n_blk || t->state == DS_KV_NONE) {
            free(wv);
            return ds_fail(err, "E_SYNTH_PAGES", "synthetic backend: item %d positions [%lld, %lld) lack pages", it,
                           (long long)a, (long long)b);
        }
        uint64_t h = H_SEED;
        if (a > 0) {
            h = *row(pools, DS_KV_CKV, t->ckv[(a - 1) / bs], (a - 1) % bs);
            uint64_t want = H_SEED;
            for (int64_t q = 0; q < a; q++) want = hstep(want, x->tokens[q], q);
            if (h != want) atomic_fetch_add(&s->corruptions, 1);
        }
        for (int64_t p = a; p < b; p++) {
            int32_t tok = x->tokens[p];
            uint64_t v = vpos(tok, p);
            h = hstep(h, tok, p);
            *row(pools, DS_KV_CKV, t->ckv[p / bs], p % bs) = h;
            *row(pools, DS_KV_IDX, t->ckv[p / bs], p % bs) = ~h;
            /* ratio-2 pair through the STATE ring */
            uint64_t *st = row(pools, DS_KV_STATE, t->state, p % DS_STATE_SLOTS);
            if (p % 2 == 0) {
                *st = v;
            } else {
                uint64_t prev = *row(pools, DS_KV_STATE, t->state, (p - 1) % DS_STATE_SLOTS);
                if (prev != vpos(x->tokens[p - 1], p - 1)) atomic_fetch_add(&s->corruptions, 1);
            }
            /* window: rows p-W+1 .. p-1; those before the chunk come from WIN pages */
            int nw = 0;
            for (int64_t q = p - W + 1; q < p; q++) {
                if (q < 0) continue;
                uint64_t val = vpos(x->tokens[q], q);
                if (q < a) {
                    uint32_t wp = t->win[q / bs];
                    if (wp == DS_KV_NONE) {
                        free(wv);
                        return ds_fail(err, "E_SYNTH_PAGES", "synthetic backend: window row %lld of item %d has no WIN page",
                                       (long long)q, it);
                    }
                    uint64_t got = *row(pools, DS_KV_WIN, wp, q % bs);
                    if (got != val) atomic_fetch_add(&s->corruptions, 1);
                    val = got;
                }
                wv[nw++] = val;
            }
            if (p >= b - x->n_logits) {
                float *out = logits + out_row * (size_t)s->o.vocab;
                if (s->o.nan_token >= 0 && tok == s->o.nan_token) {
                    for (int i = 0; i < s->o.vocab; i++) out[i] = NAN;
                } else {
                    logits_from(s, fold_window(s, h, wv, nw), out);
                }
                out_row++;
            }
            if (s->o.row_delay_us > 0) {
                struct timespec ts = {0, (long)(s->o.row_delay_us * 1000.0)};
                nanosleep(&ts, NULL);
            }
        }
        /* persist window rows of the blocks the table provides near the chunk end */
        int64_t lo = b - W < 0 ? 0 : b - W;
        for (int64_t q = DS_MAX(lo, a); q < b; q++) {
            uint32_t wp = t->win[q / bs];
            if (wp != DS_KV_NONE) *row(pools, DS_KV_WIN, wp, q % bs) = vpos(x->tokens[q], q);
        }
        /* whole blocks: rows of the chunk before b-W inside a persisted block */
        for (int64_t q = a; q < lo; q++) {
            uint32_t wp = t->win[q / bs];
            if (wp != DS_KV_NONE) *row(pools, DS_KV_WIN, wp, q % bs) = vpos(x->tokens[q], q);
        }
    }
    free(wv);
    return 0;
}

void ds_synthetic_reference_logits(const ds_backend *b, const int32_t *tokens, int64_t p, float *out) {
    const syn *s = b->impl;
    uint64_t h = H_SEED;
    for (int64_t q = 0; q <= p; q++) h = hstep(h, tokens[q], q);
    if (s->o.nan_token >= 0 && tokens[p] == s->o.nan_token) {
        for (int i = 0; i < s->o.vocab; i++) out[i] = NAN;
        return;
    }
    uint64_t wv[4096];
    int nw = 0;
    for (int64_t q = p - s->o.window + 1; q < p; q++)
        if (q >= 0 && nw < 4096) wv[nw++] = vpos(tokens[q], q);
    logits_from(s, fold_window(s, h, wv, nw), out);
}

uint64_t ds_synthetic_corruptions(const ds_backend *b) { return atomic_load(&((syn *)b->impl)->corruptions); }

static void syn_destroy(void *impl) { free(impl); }

ds_backend *ds_backend_synthetic_new(const ds_synthetic_options *o) {
    syn *s = ds_xcalloc(1, sizeof *s);
    s->o = *o;
    ds_backend *b = ds_xcalloc(1, sizeof *b);
    b->name = "synthetic";
    b->impl = s;
    b->vocab = o->vocab;
    b->window = o->window;
    b->eos_id = o->eos_id;
    b->bos_id = o->bos_id;
    b->pad_id = o->pad_id;
    b->noise_id = o->noise_id;
    b->image_id = o->image_id;
    b->layout = syn_layout;
    b->seq_open = syn_open;
    b->pages_needed = syn_needed;
    b->prepare = syn_prepare;
    b->after_step = syn_after;
    b->release = syn_release;
    b->step = syn_step;
    b->destroy = syn_destroy;
    return b;
}

void ds_backend_free(ds_backend *b) {
    if (!b) return;
    if (b->destroy) b->destroy(b->impl);
    free(b);
}
