/* Loading and validating tokenizer.json into the tables of tokenizer_internal.h.
 *
 * Why it is strict: a tokenizer that is only approximately HF's produces ids the model was never
 * trained on, silently.  So every component is checked against what this implementation
 * reproduces exactly (BPE model; NFC/NFD/NFKC/NFKD normalizers; Split, Digits and ByteLevel
 * pre-tokenizers; ByteLevel decoder) and anything else is refused with an error that names the
 * file, the field and the value.  The post-processor is ignored on purpose: encode never adds
 * special tokens (the chat encoder writes BOS itself), which is HF's add_special_tokens=false. */
#define _GNU_SOURCE
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"
#include "base/fsutil.h"
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hashing and maps ----------------------------------------------------------------------- */

uint64_t ds_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}
static uint32_t pow2_at_least(uint32_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

void ds_strmap_init(ds_strmap *m, uint32_t expected) {
    m->cap = pow2_at_least(expected * 2 + 16);
    m->n = 0;
    m->keys = ds_xcalloc(m->cap, sizeof *m->keys);
    m->lens = ds_xcalloc(m->cap, sizeof *m->lens);
    m->vals = ds_xcalloc(m->cap, sizeof *m->vals);
}
void ds_strmap_free(ds_strmap *m) {
    free(m->keys); free(m->lens); free(m->vals);
    memset(m, 0, sizeof *m);
}
static void strmap_grow(ds_strmap *m) {
    ds_strmap big;
    ds_strmap_init(&big, m->cap);
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->keys[i]) ds_strmap_put(&big, m->keys[i], m->lens[i], m->vals[i]);
    ds_strmap_free(m);
    *m = big;
}
bool ds_strmap_put(ds_strmap *m, const char *key, uint32_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) strmap_grow(m);
    uint32_t i = (uint32_t)ds_hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) return false;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key; m->lens[i] = len; m->vals[i] = val;
    m->n++;
    return true;
}
int32_t ds_strmap_get(const ds_strmap *m, const char *key, uint32_t len) {
    if (!m->cap) return -1;
    uint32_t i = (uint32_t)ds_hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static void merge_map_init(merge_map *m, uint32_t expected) {
    m->cap = pow2_at_least(expected * 2 + 16);
    m->n = 0;
    m->keys = ds_xcalloc(m->cap, sizeof *m->keys);
    m->rank = ds_xcalloc(m->cap, sizeof *m->rank);
    m->merged = ds_xcalloc(m->cap, sizeof *m->merged);
}
static void merge_map_free(merge_map *m) { free(m->keys); free(m->rank); free(m->merged); }
/* First occurrence of a pair wins, as in HF (later duplicates cannot be reached). */
static void merge_map_put(merge_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = (uint32_t)mix64(key) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->keys[i] == key) return;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key; m->rank[i] = rank; m->merged[i] = merged;
    m->n++;
}

/* ---- literal trie --------------------------------------------------------------------------- */

void ds_lit_trie_init(lit_trie *t) {
    memset(t, 0, sizeof *t);
    t->cap = 1024;
    t->keys = ds_xcalloc(t->cap, sizeof *t->keys);
    t->child = ds_xcalloc(t->cap, sizeof *t->child);
    t->capnodes = 64;
    t->term = ds_xmalloc((size_t)t->capnodes * sizeof *t->term);
    t->term[0] = -1;
    t->nnodes = 1;
}
void ds_lit_trie_free(lit_trie *t) { free(t->keys); free(t->child); free(t->term); memset(t, 0, sizeof *t); }
static int32_t trie_get(const lit_trie *t, int32_t node, uint8_t b) {
    uint64_t key = (((uint64_t)node << 8) | b) + 1;
    uint32_t i = (uint32_t)mix64(key) & (t->cap - 1);
    while (t->keys[i]) {
        if (t->keys[i] == key) return t->child[i];
        i = (i + 1) & (t->cap - 1);
    }
    return -1;
}
static void trie_set(lit_trie *t, int32_t node, uint8_t b, int32_t child) {
    if ((t->n + 1) * 2 > t->cap) {
        lit_trie big = *t;
        big.cap = t->cap * 2;
        big.n = 0;
        big.keys = ds_xcalloc(big.cap, sizeof *big.keys);
        big.child = ds_xcalloc(big.cap, sizeof *big.child);
        for (uint32_t i = 0; i < t->cap; i++) {
            if (!t->keys[i]) continue;
            uint64_t key = t->keys[i];
            uint32_t j = (uint32_t)mix64(key) & (big.cap - 1);
            while (big.keys[j]) j = (j + 1) & (big.cap - 1);
            big.keys[j] = key; big.child[j] = t->child[i]; big.n++;
        }
        free(t->keys); free(t->child);
        t->keys = big.keys; t->child = big.child; t->cap = big.cap; t->n = big.n;
    }
    uint64_t key = (((uint64_t)node << 8) | b) + 1;
    uint32_t i = (uint32_t)mix64(key) & (t->cap - 1);
    while (t->keys[i]) i = (i + 1) & (t->cap - 1);
    t->keys[i] = key; t->child[i] = child; t->n++;
}
void ds_lit_trie_add(lit_trie *t, const char *s, size_t len, int32_t value) {
    if (!len) return;
    int32_t node = 0;
    t->first[(uint8_t)s[0]] = true;
    for (size_t i = 0; i < len; i++) {
        int32_t c = trie_get(t, node, (uint8_t)s[i]);
        if (c < 0) {
            if (t->nnodes == t->capnodes) {
                t->capnodes *= 2;
                t->term = ds_xrealloc(t->term, (size_t)t->capnodes * sizeof *t->term);
            }
            c = t->nnodes++;
            t->term[c] = -1;
            trie_set(t, node, (uint8_t)s[i], c);
        }
        node = c;
    }
    if (t->term[node] < 0) t->term[node] = value;
}
int32_t ds_lit_trie_longest(const lit_trie *t, const char *s, size_t n, size_t *mlen) {
    if (!t->nnodes || !n || !t->first[(uint8_t)s[0]]) return -1;
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        node = trie_get(t, node, (uint8_t)s[i]);
        if (node < 0) break;
        if (t->term[node] >= 0) { best = t->term[node]; *mlen = i + 1; }
    }
    return best;
}

/* ---- byte-level table ----------------------------------------------------------------------- */

uint32_t ds_byte_to_char[256];
static int16_t g_char_to_byte[324];
static pthread_once_t g_bl_once = PTHREAD_ONCE_INIT;
static void bl_init(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        ds_byte_to_char[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
    for (int i = 0; i < 324; i++) g_char_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) g_char_to_byte[ds_byte_to_char[b]] = (int16_t)b;
}
void ds_bytelevel_init(void) { pthread_once(&g_bl_once, bl_init); }
int ds_char_to_byte(uint32_t cp) { return cp < 324 ? g_char_to_byte[cp] : -1; }

/* ---- loader --------------------------------------------------------------------------------- */

typedef struct lctx {
    const char *file;
    ds_error *err;
} lctx;

static int bad(lctx *c, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(lctx *c, const char *field, const char *fmt, ...) {
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return ds_fail(c->err, "E_TOKENIZER_FIELD", "%s: field %s: %s", c->file, field, m);
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool jtrue(const cJSON *o, const char *k) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k)); }

static int add_normalizer(ds_tokenizer *t, lctx *c, const cJSON *n, const char *field) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = jstr(n, "type");
    if (!type) return bad(c, field, "missing \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(arr)) return bad(c, field, "Sequence without a \"normalizers\" array");
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) if (add_normalizer(t, c, it, field) < 0) return -1;
        return 0;
    }
    int kind = !strcmp(type, "NFC") ? NORM_NFC : !strcmp(type, "NFD") ? NORM_NFD
             : !strcmp(type, "NFKC") ? NORM_NFKC : !strcmp(type, "NFKD") ? NORM_NFKD : 0;
    if (!kind) return bad(c, field, "normalizer type \"%s\" is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD)", type);
    if (t->n_normalizers >= (int)DS_ARRAY_LEN(t->normalizers)) return bad(c, field, "more than 8 normalizers");
    t->normalizers[t->n_normalizers++] = kind;
    return 0;
}

static int add_split(ds_tokenizer *t, lctx *c, const char *pattern, int behavior, bool invert, const char *field) {
    char eb[256];
    ds_uregex *re = ds_uregex_compile(pattern, eb, sizeof eb);
    if (!re) return bad(c, field, "pattern \"%.200s\": %s", pattern, eb);
    t->splits = ds_xrealloc(t->splits, (size_t)(t->n_splits + 1) * sizeof *t->splits);
    t->splits[t->n_splits++] = (split_step){re, behavior, invert};
    return 0;
}

/* Escape a literal String pattern into regex syntax. */
static char *regex_quote(const char *s) {
    size_t n = strlen(s);
    char *o = ds_xmalloc(2 * n + 1), *p = o;
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\^$.|?*+()[]{}", s[i])) *p++ = '\\';
        *p++ = s[i];
    }
    *p = 0;
    return o;
}

static const char *GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pretokenizer(ds_tokenizer *t, lctx *c, const cJSON *p, bool *saw_bytelevel, const char *field) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = jstr(p, "type");
    if (!type) return bad(c, field, "missing \"type\"");
    if (*saw_bytelevel) return bad(c, field, "a %s step after ByteLevel is not supported", type);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(arr)) return bad(c, field, "Sequence without a \"pretokenizers\" array");
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) if (add_pretokenizer(t, c, it, saw_bytelevel, field) < 0) return -1;
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *rx = pat ? jstr(pat, "Regex") : NULL, *lit = pat ? jstr(pat, "String") : NULL;
        if (!rx && !lit) return bad(c, field, "Split without pattern.Regex or pattern.String");
        const char *b = jstr(p, "behavior");
        int beh = !b ? -1 : !strcmp(b, "Isolated") ? SPLIT_ISOLATED : !strcmp(b, "Removed") ? SPLIT_REMOVED
                : !strcmp(b, "MergedWithPrevious") ? SPLIT_MERGED_PREV : !strcmp(b, "MergedWithNext") ? SPLIT_MERGED_NEXT
                : !strcmp(b, "Contiguous") ? SPLIT_CONTIGUOUS : -1;
        if (beh < 0) return bad(c, field, "Split behavior \"%s\" is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous", b ? b : "(missing)");
        if (rx) return add_split(t, c, rx, beh, jtrue(p, "invert"), field);
        char *q = regex_quote(lit);
        int r = add_split(t, c, q, beh, jtrue(p, "invert"), field);
        free(q);
        return r;
    }
    if (!strcmp(type, "Digits")) {
        return add_split(t, c, jtrue(p, "individual_digits") ? "\\p{N}" : "\\p{N}+", SPLIT_ISOLATED, false, field);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (jtrue(p, "add_prefix_space"))
            return bad(c, field, "ByteLevel add_prefix_space=true is not supported");
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (!ur || cJSON_IsTrue(ur))
            if (add_split(t, c, GPT2_PATTERN, SPLIT_ISOLATED, false, field) < 0) return -1;
        *saw_bytelevel = true;
        return 0;
    }
    return bad(c, field, "pre-tokenizer type \"%s\" is not supported (supported: Sequence, Split, Digits, ByteLevel)", type);
}

static int check_decoder(lctx *c, const cJSON *d) {
    const char *type = d ? jstr(d, "type") : NULL;
    if (!type) return bad(c, "decoder", "missing; a ByteLevel decoder is required");
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (cJSON_GetArraySize(arr) == 1) return check_decoder(c, cJSON_GetArrayItem(arr, 0));
    }
    return bad(c, "decoder", "type \"%s\" is not supported (a ByteLevel decoder is required)", type);
}

/* Bytes an id decodes to: its characters through the byte table when all of them are byte-level
 * characters, else its UTF-8 as is (HF's ByteLevel decoder, token by token). */
static void token_bytes(const char *s, uint8_t *out, uint32_t *len) {
    size_t n = strlen(s), i = 0;
    uint32_t o = 0;
    while (i < n) {
        uint32_t cp;
        int k = ds_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        int b = k ? ds_char_to_byte(cp) : -1;
        if (b < 0) { memcpy(out, s, n); *len = (uint32_t)n; return; }
        out[o++] = (uint8_t)b;
        i += (size_t)k;
    }
    *len = o;
}

static void tokenizer_free_tables(ds_tokenizer *t) {
    if (t->id_str) for (int i = 0; i < t->vocab_size; i++) free(t->id_str[i]);
    free(t->id_str); free(t->id_bytes_off); free(t->id_bytes_len); free(t->bytes_pool); free(t->id_added);
    ds_strmap_free(&t->vocab);
    merge_map_free(&t->merges);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    ds_strmap_free(&t->added_map);
    ds_lit_trie_free(&t->trie_raw);
    ds_lit_trie_free(&t->trie_norm);
    for (int i = 0; i < t->n_splits; i++) ds_uregex_free(t->splits[i].re);
    free(t->splits);
}

void ds_tokenizer_free(ds_tokenizer *t) {
    if (!t) return;
    ds_wcache_free(t);
    tokenizer_free_tables(t);
    free(t->path);
    free(t);
}

static int load_model(ds_tokenizer *t, lctx *c, const cJSON *model, const cJSON *added, int *max_id) {
    const char *type = jstr(model, "type");
    if (type && strcmp(type, "BPE")) return bad(c, "model.type", "\"%s\" is not supported (BPE required)", type);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab)) return bad(c, "model.vocab", "missing or not an object");
    if (!cJSON_IsArray(merges)) return bad(c, "model.merges", "missing or not an array");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0))
        return bad(c, "model.dropout", "%g: BPE dropout is random and not supported", drop->valuedouble);
    if (jtrue(model, "byte_fallback")) return bad(c, "model.byte_fallback", "true is not supported");
    const char *csp = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return bad(c, "model.continuing_subword_prefix", "subword prefixes/suffixes are not supported");
    t->ignore_merges = jtrue(model, "ignore_merges");

    /* ids: the vocabulary and the added tokens together define the id space */
    *max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 16777215 ||
            it->valuedouble != (double)(int)it->valuedouble)
            return bad(c, "model.vocab", "token \"%.80s\": id %g is not an integer in [0, 16777215]", it->string, it->valuedouble);
        if (it->valueint > *max_id) *max_id = it->valueint;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const char *content = jstr(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777215 || !content)
            return bad(c, "added_tokens", "entry without a valid \"id\" (0..16777215) and \"content\"");
        if (id->valueint > *max_id) *max_id = id->valueint;
    }
    if (*max_id < 0) return bad(c, "model.vocab", "empty vocabulary");
    t->vocab_size = *max_id + 1;
    t->id_str = ds_xcalloc((size_t)t->vocab_size, sizeof *t->id_str);
    t->id_added = ds_xcalloc((size_t)t->vocab_size, 1);
    ds_strmap_init(&t->vocab, (uint32_t)cJSON_GetArraySize(vocab));
    char **vocab_str = ds_xcalloc((size_t)t->vocab_size, sizeof *vocab_str);  /* model strings by id */
    int rc = 0;
    cJSON_ArrayForEach(it, vocab) {
        int id = it->valueint;
        if (vocab_str[id]) { rc = bad(c, "model.vocab", "id %d is used by \"%.80s\" and \"%.80s\"", id, vocab_str[id], it->string); break; }
        vocab_str[id] = ds_xstrdup(it->string);
        if (!ds_strmap_put(&t->vocab, vocab_str[id], (uint32_t)strlen(vocab_str[id]), id)) {
            rc = bad(c, "model.vocab", "duplicate token \"%.80s\"", it->string);
            break;
        }
    }
    if (rc == 0) {
        /* single-byte symbols */
        for (int b = 0; b < 256 && rc == 0; b++) {
            char s[8];
            int k = ds_utf8_encode(ds_byte_to_char[b], s);
            int32_t id = ds_strmap_get(&t->vocab, s, (uint32_t)k);
            if (id < 0) rc = bad(c, "model.vocab", "no symbol for byte 0x%02X (\"%.*s\"): a byte-level BPE must cover all 256 bytes", b, k, s);
            t->byte_id[b] = id;
        }
    }
    if (rc == 0) {
        merge_map_init(&t->merges, (uint32_t)cJSON_GetArraySize(merges));
        int rank = 0;
        char *buf = NULL;
        size_t bufcap = 0;
        cJSON_ArrayForEach(it, merges) {
            const char *a, *b;
            size_t la, lb;
            if (cJSON_IsString(it)) {
                const char *s = it->valuestring, *sp = strchr(s, ' ');
                if (!sp || strchr(sp + 1, ' ')) { rc = bad(c, "model.merges", "entry %d \"%.80s\" is not two symbols separated by one space", rank, s); break; }
                a = s; la = (size_t)(sp - s); b = sp + 1; lb = strlen(b);
            } else if (cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                       cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
                a = cJSON_GetArrayItem(it, 0)->valuestring; la = strlen(a);
                b = cJSON_GetArrayItem(it, 1)->valuestring; lb = strlen(b);
            } else {
                rc = bad(c, "model.merges", "entry %d is neither \"a b\" nor [\"a\", \"b\"]", rank);
                break;
            }
            int32_t ia = ds_strmap_get(&t->vocab, a, (uint32_t)la), ib = ds_strmap_get(&t->vocab, b, (uint32_t)lb);
            if (la + lb + 1 > bufcap) { bufcap = 2 * (la + lb + 1); buf = ds_xrealloc(buf, bufcap); }
            memcpy(buf, a, la); memcpy(buf + la, b, lb);
            int32_t im = ds_strmap_get(&t->vocab, buf, (uint32_t)(la + lb));
            if (ia < 0 || ib < 0 || im < 0) {
                rc = bad(c, "model.merges", "entry %d \"%.*s %.*s\": %s is not in the vocabulary", rank, (int)la, a, (int)lb, b,
                         ia < 0 ? "left symbol" : ib < 0 ? "right symbol" : "merged symbol");
                break;
            }
            merge_map_put(&t->merges, ia, ib, rank, im);
            rank++;
        }
        free(buf);
    }
    /* the model strings become the id strings; added tokens may override below */
    for (int i = 0; i < t->vocab_size; i++) t->id_str[i] = vocab_str[i];
    free(vocab_str);
    return rc;
}

static int load_added(ds_tokenizer *t, lctx *c, const cJSON *added) {
    int n = cJSON_GetArraySize(added);
    t->added = ds_xcalloc((size_t)(n ? n : 1), sizeof *t->added);
    ds_strmap_init(&t->added_map, (uint32_t)n);
    ds_lit_trie_init(&t->trie_raw);
    ds_lit_trie_init(&t->trie_norm);
    const cJSON *it;
    cJSON_ArrayForEach(it, added) {
        added_token *a = &t->added[t->n_added];
        a->content = ds_xstrdup(jstr(it, "content"));
        a->len = strlen(a->content);
        a->id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        a->special = jtrue(it, "special");
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(it, "normalized");
        a->normalized = norm ? cJSON_IsTrue(norm) : !a->special;
        a->lstrip = jtrue(it, "lstrip");
        a->rstrip = jtrue(it, "rstrip");
        t->n_added++;
        if (jtrue(it, "single_word"))
            return bad(c, "added_tokens", "\"%.80s\": single_word=true is not supported", a->content);
        if (!a->len) return bad(c, "added_tokens", "id %d has empty content", a->id);
        if (ds_utf8_validate((const uint8_t *)a->content, a->len) != a->len)
            return bad(c, "added_tokens", "id %d: content is not valid UTF-8", a->id);
        if (!ds_strmap_put(&t->added_map, a->content, (uint32_t)a->len, a->id))
            return bad(c, "added_tokens", "duplicate content \"%.80s\"", a->content);
        if (t->id_added[a->id])
            return bad(c, "added_tokens", "id %d is given twice", a->id);
        free(t->id_str[a->id]);
        t->id_str[a->id] = ds_xstrdup(a->content);
        t->id_added[a->id] = a->special ? 2 : 1;
        /* HF cuts non-normalized literals from the raw text first, normalized ones from the
         * normalized pieces afterwards; the two passes differ when literals overlap */
        if (a->normalized) {
            /* matched against normalized text, so stored normalized; HF also decodes such a token
             * to its normalized form (while token_id still finds it by the original literal) */
            size_t nl;
            char *nc = ds_tokenizer_normalize(t, a->content, a->len, &nl);
            ds_lit_trie_add(&t->trie_norm, nc, nl, t->n_added - 1);
            if (t->n_normalizers) { free(t->id_str[a->id]); t->id_str[a->id] = nc; }
            else free(nc);
            t->n_norm++;
        }
        else { ds_lit_trie_add(&t->trie_raw, a->content, a->len, t->n_added - 1); t->n_raw++; }
    }
    return 0;
}

int ds_tokenizer_load_mem(const char *json, size_t len, const char *name, ds_tokenizer **out, ds_error *err) {
    *out = NULL;
    ds_bytelevel_init();
    lctx c = {name, err};
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *e = cJSON_GetErrorPtr();
        return ds_fail(err, "E_TOKENIZER_JSON", "%s: not valid JSON (near byte %td)", name,
                       e && e >= json && e <= json + len ? e - json : (ptrdiff_t)-1);
    }
    ds_tokenizer *t = ds_xcalloc(1, sizeof *t);
    t->path = ds_xstrdup(name);
    int rc = 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(model)) rc = bad(&c, "model", "missing or not an object");
    else if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added)) rc = bad(&c, "added_tokens", "not an array");
    if (rc == 0) rc = add_normalizer(t, &c, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer");
    if (rc == 0) {
        bool saw_bl = false;
        rc = add_pretokenizer(t, &c, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &saw_bl, "pre_tokenizer");
        if (rc == 0 && !saw_bl) rc = bad(&c, "pre_tokenizer", "no ByteLevel step: only byte-level BPE tokenizers are supported");
    }
    if (rc == 0) rc = check_decoder(&c, cJSON_GetObjectItemCaseSensitive(root, "decoder"));
    int max_id = -1;
    if (rc == 0) rc = load_model(t, &c, model, added, &max_id);
    if (rc == 0) rc = load_added(t, &c, added);
    if (rc == 0) {
        size_t pool = 0;
        for (int i = 0; i < t->vocab_size; i++) if (t->id_str[i]) pool += strlen(t->id_str[i]);
        t->bytes_pool = ds_xmalloc(pool + 1);
        t->id_bytes_off = ds_xcalloc((size_t)t->vocab_size, sizeof *t->id_bytes_off);
        t->id_bytes_len = ds_xcalloc((size_t)t->vocab_size, sizeof *t->id_bytes_len);
        uint32_t off = 0;
        for (int i = 0; i < t->vocab_size; i++) {
            if (!t->id_str[i]) continue;
            t->id_bytes_off[i] = off;
            token_bytes(t->id_str[i], t->bytes_pool + off, &t->id_bytes_len[i]);
            off += t->id_bytes_len[i];
        }
        ds_wcache_init(t);
    }
    cJSON_Delete(root);
    if (rc < 0) {
        ds_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int ds_tokenizer_load(const char *path, ds_tokenizer **out, ds_error *err) {
    char *data;
    size_t len;
    *out = NULL;
    if (ds_read_file(path, &data, &len, err) < 0) return -1;
    int rc = ds_tokenizer_load_mem(data, len, path, out, err);
    free(data);
    return rc;
}

int ds_tokenizer_vocab_size(const ds_tokenizer *t) { return t->vocab_size; }

int32_t ds_tokenizer_token_id(const ds_tokenizer *t, const char *token) {
    uint32_t n = (uint32_t)strlen(token);
    int32_t id = ds_strmap_get(&t->added_map, token, n);
    return id >= 0 ? id : ds_strmap_get(&t->vocab, token, n);
}
const char *ds_tokenizer_id_to_token(const ds_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->vocab_size ? t->id_str[id] : NULL;
}
const uint8_t *ds_tokenizer_token_bytes(const ds_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size || !t->id_str[id]) return NULL;
    *len = t->id_bytes_len[id];
    return t->bytes_pool + t->id_bytes_off[id];
}
bool ds_tokenizer_is_added(const ds_tokenizer *t, int32_t id, bool *special) {
    bool a = id >= 0 && id < t->vocab_size && t->id_added[id];
    if (special) *special = a && t->id_added[id] == 2;
    return a;
}
int ds_tokenizer_added_count(const ds_tokenizer *t) { return t->n_added; }
const char *ds_tokenizer_added_content(const ds_tokenizer *t, int i, int32_t *id, bool *special) {
    if (i < 0 || i >= t->n_added) return NULL;
    if (id) *id = t->added[i].id;
    if (special) *special = t->added[i].special;
    return t->added[i].content;
}
