/* Encoding: added-token extraction, normalization, pre-tokenizer splits, byte-level BPE.
 *
 * Why it follows HF's order literally: ids must match HF `tokenizers` byte for byte.  Its
 * pipeline is (1) cut non-normalized added tokens out of the raw text, leftmost-longest;
 * (2) normalize each remaining piece and cut normalized added tokens out of it; (3) run the Split
 * rules in sequence, each on every piece the previous one produced (so a lookahead never sees
 * past its piece); (4) merge each piece's bytes by merge rank, lowest rank first and leftmost
 * first among equal ranks (HF's priority queue order).  Words are cached (piece bytes → ids) in
 * a sharded, mutex-protected table, because natural text repeats words heavily. */
#define _GNU_SOURCE
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"
#include <utf8proc.h>
#include <stdlib.h>
#include <string.h>

void ds_tokens_push(ds_tokens *t, int32_t id) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->ids = ds_xrealloc(t->ids, t->cap * sizeof *t->ids);
    }
    t->ids[t->n++] = id;
}
void ds_tokens_free(ds_tokens *t) {
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* ---- word cache ----------------------------------------------------------------------------- */

#define WC_SLOTS 16384          /* per shard, power of two */
#define WC_MAX_ENTRIES 10000    /* per shard; beyond this the cache stops growing */
#define WC_MAX_WORD 128         /* longer words are not cached */

void ds_wcache_init(ds_tokenizer *t) {
    for (int i = 0; i < DS_WCACHE_SHARDS; i++) {
        wcache_shard *s = &t->cache[i];
        pthread_mutex_init(&s->mu, NULL);
        s->cap = WC_SLOTS;
        s->hash = ds_xcalloc(s->cap, sizeof *s->hash);
        s->off = ds_xcalloc(s->cap, sizeof *s->off);
    }
}
void ds_wcache_free(ds_tokenizer *t) {
    for (int i = 0; i < DS_WCACHE_SHARDS; i++) {
        wcache_shard *s = &t->cache[i];
        if (!s->hash) continue;
        pthread_mutex_destroy(&s->mu);
        free(s->hash); free(s->off); free(s->arena);
    }
}

static bool wcache_get(ds_tokenizer *t, const char *w, uint32_t len, uint64_t h, ds_tokens *out) {
    wcache_shard *s = &t->cache[h & (DS_WCACHE_SHARDS - 1)];
    uint64_t key = h | 1;
    bool hit = false;
    pthread_mutex_lock(&s->mu);
    uint32_t i = (uint32_t)(h >> 8) & (s->cap - 1);
    while (s->hash[i]) {
        if (s->hash[i] == key) {
            const char *e = s->arena + s->off[i];
            uint32_t kl, ni;
            memcpy(&kl, e, 4); memcpy(&ni, e + 4, 4);
            if (kl == len && !memcmp(e + 8, w, len)) {
                const char *ids = e + 8 + ((len + 3) & ~3u);
                for (uint32_t j = 0; j < ni; j++) {
                    int32_t id;
                    memcpy(&id, ids + 4 * j, 4);
                    ds_tokens_push(out, id);
                }
                hit = true;
                break;
            }
        }
        i = (i + 1) & (s->cap - 1);
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

static void wcache_put(ds_tokenizer *t, const char *w, uint32_t len, uint64_t h, const int32_t *ids, uint32_t n) {
    wcache_shard *s = &t->cache[h & (DS_WCACHE_SHARDS - 1)];
    uint64_t key = h | 1;
    pthread_mutex_lock(&s->mu);
    if (s->n < WC_MAX_ENTRIES) {
        uint32_t i = (uint32_t)(h >> 8) & (s->cap - 1);
        bool present = false;
        while (s->hash[i]) {
            if (s->hash[i] == key) {
                uint32_t kl;
                memcpy(&kl, s->arena + s->off[i], 4);
                if (kl == len && !memcmp(s->arena + s->off[i] + 8, w, len)) { present = true; break; }
            }
            i = (i + 1) & (s->cap - 1);
        }
        if (!present) {
            size_t need = 8 + ((len + 3) & ~3u) + 4 * (size_t)n;
            if (s->arena_n + need > s->arena_cap) {
                s->arena_cap = DS_MAX(s->arena_cap * 2, s->arena_n + need + 65536);
                s->arena = ds_xrealloc(s->arena, s->arena_cap);
            }
            char *e = s->arena + s->arena_n;
            memcpy(e, &len, 4); memcpy(e + 4, &n, 4);
            memcpy(e + 8, w, len);
            memcpy(e + 8 + ((len + 3) & ~3u), ids, 4 * (size_t)n);
            s->hash[i] = key;
            s->off[i] = (uint32_t)s->arena_n;
            s->arena_n += need;
            s->n++;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- BPE ------------------------------------------------------------------------------------ */

static inline bool merge_lookup(const merge_map *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint64_t x = key;
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    uint32_t i = (uint32_t)x & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == key) { *rank = m->rank[i]; *merged = m->merged[i]; return true; }
        i = (i + 1) & (m->cap - 1);
    }
    return false;
}

typedef struct sym { int32_t id, prev, next, len; } sym;
typedef struct hent { int32_t rank, pos, merged; } hent;

static inline bool hless(const hent *a, const hent *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}
static void hpush(hent *h, int *n, hent e) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!hless(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}
static hent hpop(hent *h, int *n) {
    hent top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const hent *best = &last;
        if (l < *n && hless(&h[l], best)) { m = l; best = &h[l]; }
        if (r < *n && hless(&h[r], best)) { m = r; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Merge the bytes of one pre-token into ids, appended to out. */
static void bpe_word(const ds_tokenizer *t, const uint8_t *w, int n, ds_tokens *out) {
    if (n == 1) { ds_tokens_push(out, t->byte_id[w[0]]); return; }
    if (t->ignore_merges) {
        char buf[4 * 256];
        if (n <= 256) {
            int k = 0;
            for (int i = 0; i < n; i++) k += ds_utf8_encode(ds_byte_to_char[w[i]], buf + k);
            int32_t id = ds_strmap_get(&t->vocab, buf, (uint32_t)k);
            if (id >= 0) { ds_tokens_push(out, id); return; }
        }
    }
    sym stack_s[64];
    hent stack_h[128];
    sym *s = n <= 64 ? stack_s : ds_xmalloc((size_t)n * sizeof *s);
    int hcap = 2 * n;
    hent *h = n <= 64 ? stack_h : ds_xmalloc((size_t)hcap * sizeof *h);
    int hn = 0;
    for (int i = 0; i < n; i++) s[i] = (sym){t->byte_id[w[i]], i - 1, i + 1 < n ? i + 1 : -1, 1};
    for (int i = 0; i + 1 < n; i++) {
        int32_t rank, merged;
        if (merge_lookup(&t->merges, s[i].id, s[i + 1].id, &rank, &merged)) hpush(h, &hn, (hent){rank, i, merged});
    }
    while (hn > 0) {
        hent top = hpop(h, &hn);
        sym *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int nx = cur->next;
        int32_t rank, merged;
        /* stale entry: the pair at this position changed since it was queued */
        if (!merge_lookup(&t->merges, cur->id, s[nx].id, &rank, &merged) || merged != top.merged) continue;
        cur->id = top.merged;
        cur->len += s[nx].len;
        cur->next = s[nx].next;
        s[nx].len = 0;
        if (cur->next >= 0) s[cur->next].prev = top.pos;
        if (hn + 2 > hcap) {   /* cannot happen for n <= 64 (at most 2 pushes per merge) */
            hcap *= 2;
            h = ds_xrealloc(h, (size_t)hcap * sizeof *h);
        }
        if (cur->prev >= 0 && merge_lookup(&t->merges, s[cur->prev].id, cur->id, &rank, &merged))
            hpush(h, &hn, (hent){rank, cur->prev, merged});
        if (cur->next >= 0 && merge_lookup(&t->merges, cur->id, s[cur->next].id, &rank, &merged))
            hpush(h, &hn, (hent){rank, top.pos, merged});
    }
    for (int i = 0; i >= 0 && i < n; i = s[i].next) ds_tokens_push(out, s[i].id);
    if (s != stack_s) free(s);
    if (h != stack_h) free(h);
}

static void encode_word(const ds_tokenizer *tc, const char *w, int n, ds_tokens *out) {
    ds_tokenizer *t = (ds_tokenizer *)tc;   /* only the internal cache is mutated */
    if (n <= 0) return;
    if (n == 1 || n > WC_MAX_WORD) { bpe_word(t, (const uint8_t *)w, n, out); return; }
    uint64_t h = ds_hash_bytes(w, (size_t)n);
    if (wcache_get(t, w, (uint32_t)n, h, out)) return;
    size_t before = out->n;
    bpe_word(t, (const uint8_t *)w, n, out);
    wcache_put(t, w, (uint32_t)n, h, out->ids + before, (uint32_t)(out->n - before));
}

/* ---- pre-tokenization ----------------------------------------------------------------------- */

typedef struct seg { int a, b; bool m; } seg;
typedef struct segvec { seg *v; int n, cap; } segvec;
static void segpush(segvec *s, int a, int b, bool m) {
    if (s->n == s->cap) { s->cap = s->cap ? 2 * s->cap : 64; s->v = ds_xrealloc(s->v, (size_t)s->cap * sizeof *s->v); }
    s->v[s->n++] = (seg){a, b, m};
}

typedef struct pctx {
    const ds_tokenizer *t;
    const char *text;          /* the piece's UTF-8 */
    const uint32_t *cps;
    const int *offs;           /* byte offset of each code point, offs[n] = length */
    segvec lv[16];             /* per-level scratch */
    ds_tokens *out;
} pctx;

/* Apply split rule `level` to cps[a..b) and recurse into each resulting piece. */
static void pretok(pctx *c, int level, int a, int b) {
    if (a >= b) return;
    if (level == c->t->n_splits) {
        encode_word(c->t, c->text + c->offs[a], c->offs[b] - c->offs[a], c->out);
        return;
    }
    const split_step *st = &c->t->splits[level];
    segvec *sv = &c->lv[level];
    sv->n = 0;
    int n = b - a, prev = 0, pos = 0, ms, me;
    const uint32_t *s = c->cps + a;
    while (pos <= n && ds_uregex_find(st->re, s, n, pos, &ms, &me)) {
        if (prev != ms) segpush(sv, prev, ms, false);
        segpush(sv, ms, me, true);
        prev = me;
        pos = me > ms ? me : ms + 1;
    }
    if (prev != n) segpush(sv, prev, n, false);
    if (st->invert) for (int i = 0; i < sv->n; i++) sv->v[i].m = !sv->v[i].m;
    /* behaviour: rewrite the segment list in place (HF NormalizedString::split) */
    int k = 0;
    bool prev_match = false;
    switch (st->behavior) {
    case SPLIT_ISOLATED: k = sv->n; break;
    case SPLIT_REMOVED:
        for (int i = 0; i < sv->n; i++) if (!sv->v[i].m) sv->v[k++] = sv->v[i];
        break;
    case SPLIT_MERGED_PREV:
        for (int i = 0; i < sv->n; i++) {
            seg g = sv->v[i];
            if (g.m && !prev_match && k > 0) sv->v[k - 1].b = g.b;
            else sv->v[k++] = g;
            prev_match = g.m;
        }
        break;
    case SPLIT_MERGED_NEXT:
        for (int i = sv->n - 1; i >= 0; i--) {   /* built back to front, then reversed */
            seg g = sv->v[i];
            if (g.m && !prev_match && k > 0) sv->v[sv->n - k].a = g.a;
            else { k++; sv->v[sv->n - k] = g; }
            prev_match = g.m;
        }
        memmove(sv->v, sv->v + sv->n - k, (size_t)k * sizeof *sv->v);
        break;
    case SPLIT_CONTIGUOUS:
        for (int i = 0; i < sv->n; i++) {
            seg g = sv->v[i];
            if (g.m == prev_match && k > 0) sv->v[k - 1].b = g.b;
            else sv->v[k++] = g;
            prev_match = g.m;
        }
        break;
    }
    /* the deeper levels reuse their own vectors, so iterate over a private copy of the bounds */
    int cnt = k;
    seg small[64];
    seg *copy = cnt <= 64 ? small : ds_xmalloc((size_t)cnt * sizeof *copy);
    memcpy(copy, sv->v, (size_t)cnt * sizeof *copy);
    for (int i = 0; i < cnt; i++) pretok(c, level + 1, a + copy[i].a, a + copy[i].b);
    if (copy != small) free(copy);
}

/* Normalize (if configured) and pre-tokenize + BPE one span free of added tokens. */
static void encode_plain(const ds_tokenizer *t, const char *text, size_t len, ds_tokens *out) {
    if (!len) return;
    size_t n = 0;
    uint32_t *cps = ds_xmalloc((len + 1) * sizeof *cps);
    int *offs = ds_xmalloc((len + 1) * sizeof *offs);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = ds_utf8_decode((const uint8_t *)text + i, len - i, &cp);
        if (k == 0) { cp = 0xFFFD; k = 1; }     /* unreachable: input was validated */
        cps[n] = cp;
        offs[n++] = (int)i;
        i += (size_t)k;
    }
    offs[n] = (int)len;
    pctx c = {.t = t, .text = text, .cps = cps, .offs = offs, .out = out};
    pretok(&c, 0, 0, (int)n);
    for (int i = 0; i < 16; i++) free(c.lv[i].v);
    free(cps);
    free(offs);
}

static bool is_ws_at(const char *s, size_t n, size_t i, size_t *clen, bool backwards) {
    uint32_t cp;
    if (!backwards) {
        int k = ds_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!k || !ds_uwhite(cp)) return false;
        *clen = (size_t)k;
        return true;
    }
    size_t j = i;
    while (j > 0 && ((uint8_t)s[j - 1] & 0xC0) == 0x80) j--;
    if (j == 0) return false;
    j--;
    int k = ds_utf8_decode((const uint8_t *)s + j, n - j, &cp);
    if (!k || !ds_uwhite(cp)) return false;
    *clen = i - j;
    return true;
}

/* Cut the literals of `trie` out of text[0..len) (leftmost-longest, lstrip/rstrip honoured);
 * gaps go to `gap` (normalization pass or plain encoding). */
typedef void (*gap_fn)(const ds_tokenizer *t, const char *s, size_t n, ds_tokens *out);
static void split_added(const ds_tokenizer *t, const lit_trie *trie, const char *text, size_t len,
                        gap_fn gap, ds_tokens *out) {
    size_t prev = 0, i = 0;
    while (i < len) {
        size_t ml = 0;
        int32_t ai = trie->first[(uint8_t)text[i]] ? ds_lit_trie_longest(trie, text + i, len - i, &ml) : -1;
        if (ai < 0) { i++; continue; }
        const added_token *a = &t->added[ai];
        size_t s = i, e = i + ml, cl;
        if (a->lstrip) while (s > prev && is_ws_at(text, len, s, &cl, true)) s -= cl;
        if (a->rstrip) while (e < len && is_ws_at(text, len, e, &cl, false)) e += cl;
        if (s > prev) gap(t, text + prev, s - prev, out);
        ds_tokens_push(out, a->id);
        prev = i = e;
    }
    if (prev < len) gap(t, text + prev, len - prev, out);
}

static void gap_plain(const ds_tokenizer *t, const char *s, size_t n, ds_tokens *out) { encode_plain(t, s, n, out); }

char *ds_tokenizer_normalize(const ds_tokenizer *t, const char *s, size_t n, size_t *out_len) {
    char *cur = ds_xmalloc(n + 1);
    memcpy(cur, s, n);
    cur[n] = 0;
    size_t curlen = n;
    for (int i = 0; i < t->n_normalizers && curlen; i++) {
        int opt = UTF8PROC_STABLE;
        switch (t->normalizers[i]) {
        case NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
        case NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
        case NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)curlen, &dst, (utf8proc_option_t)opt);
        if (r < 0) { free(dst); break; }   /* input is valid UTF-8, so this does not happen */
        free(cur);
        cur = (char *)dst;
        curlen = (size_t)r;
    }
    *out_len = curlen;
    return cur;
}

static void normalize_then_encode(const ds_tokenizer *t, const char *s, size_t n, bool cut_added, ds_tokens *out) {
    size_t curlen;
    char *cur = ds_tokenizer_normalize(t, s, n, &curlen);
    if (cut_added && t->n_norm) split_added(t, &t->trie_norm, cur, curlen, gap_plain, out);
    else encode_plain(t, cur, curlen, out);
    free(cur);
}
static void gap_normalize(const ds_tokenizer *t, const char *s, size_t n, ds_tokens *out) {
    normalize_then_encode(t, s, n, true, out);
}

int ds_tokenizer_encode(const ds_tokenizer *t, const char *text, size_t len, bool parse_special,
                        ds_tokens *out, ds_error *err) {
    size_t bad = ds_utf8_validate((const uint8_t *)text, len);
    if (bad != len)
        return ds_fail(err, "E_TOKENIZER_UTF8", "text to encode is not valid UTF-8: byte 0x%02X at offset %zu (of %zu)",
                       (uint8_t)text[bad], bad, len);
    if (!parse_special) {
        normalize_then_encode(t, text, len, false, out);
        return 0;
    }
    bool need_norm_pass = t->n_normalizers || t->n_norm;
    gap_fn second = need_norm_pass ? gap_normalize : gap_plain;
    if (t->n_raw) split_added(t, &t->trie_raw, text, len, second, out);
    else second(t, text, len, out);
    return 0;
}
