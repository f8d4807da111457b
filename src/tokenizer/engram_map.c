/* The Engram token normalization map (MODEL.md §2.10.1); see engram_map.h.
 *
 * Each step is the spec's, in the spec's order, on utf8proc's tables: NFKC, then NFD, then every
 * General Category M code point removed, then per-code-point lowercase (utf8proc's simple
 * mapping equals the full unconditional mapping here: the only character whose full lowercase
 * differs, U+0130, has already been decomposed by NFD), then runs of space/TAB/CR/LF → one space,
 * the single-space sentinel U+E000, White_Space stripped at both ends, sentinel back to a space.
 * Classes are numbered in first-seen order through a string → class hash map. */
#define _GNU_SOURCE
#include "tokenizer/engram_map.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"
#include "base/fsutil.h"
#include <utf8proc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *umap(const char *s, size_t n, int opts, size_t *out_len) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)(opts | UTF8PROC_STABLE));
    if (r < 0) { free(dst); return NULL; }
    *out_len = (size_t)r;
    return (char *)dst;
}

char *ds_engram_normalize(const char *text, size_t len, size_t *out_len) {
    size_t n1, n2;
    char *a = len ? umap(text, len, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, &n1) : ds_xstrdup("");
    if (!len) n1 = 0;
    if (!a) return NULL;
    char *b = n1 ? umap(a, n1, UTF8PROC_DECOMPOSE, &n2) : ds_xstrdup("");
    if (!n1) n2 = 0;
    free(a);
    if (!b) return NULL;
    /* decode, drop marks, lowercase, collapse space runs */
    uint32_t *cp = ds_xmalloc((n2 + 1) * sizeof *cp);
    size_t m = 0;
    bool in_space = false;
    for (size_t i = 0; i < n2;) {
        uint32_t c;
        int k = ds_utf8_decode((const uint8_t *)b + i, n2 - i, &c);
        if (!k) { free(b); free(cp); return NULL; }
        i += (size_t)k;
        int cat = utf8proc_category((utf8proc_int32_t)c);
        if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) continue;
        c = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            if (in_space) continue;
            in_space = true;
            c = ' ';
        } else {
            in_space = false;
        }
        cp[m++] = c;
    }
    free(b);
    if (m == 1 && cp[0] == ' ') cp[0] = 0xE000;
    size_t s = 0, e = m;
    while (s < e && ds_uwhite(cp[s])) s++;
    while (e > s && ds_uwhite(cp[e - 1])) e--;
    char *out = ds_xmalloc(4 * (e - s) + 1);
    size_t o = 0;
    for (size_t i = s; i < e; i++) o += (size_t)ds_utf8_encode(cp[i] == 0xE000 ? ' ' : cp[i], out + o);
    out[o] = 0;
    free(cp);
    *out_len = o;
    return out;
}

int ds_engram_map_compute(const ds_tokenizer *tok, uint32_t **classes, int *n_classes, ds_error *err) {
    int V = ds_tokenizer_vocab_size(tok);
    uint32_t *cls = ds_xmalloc((size_t)V * sizeof *cls);
    ds_strmap keys;
    ds_strmap_init(&keys, (uint32_t)V);
    char **owned = ds_xcalloc((size_t)V, sizeof *owned);   /* key strings referenced by the map */
    int next = 0, rc = 0;
    for (int v = 0; v < V; v++) {
        size_t tl;
        int32_t id = v;
        char *text = ds_tokenizer_decode(tok, &id, 1, false, &tl, err);
        if (!text) { rc = -1; break; }
        char *key;
        size_t kl;
        if (strstr(text, "\xEF\xBF\xBD")) {
            key = ds_xstrdup(ds_tokenizer_id_to_token(tok, v));
            kl = strlen(key);
        } else {
            key = ds_engram_normalize(text, tl, &kl);
            if (!key) { rc = ds_fail(err, "E_TOKEN_MAP", "token %d: utf8proc rejected its text", v); free(text); break; }
            if (kl == 0) { free(key); key = ds_xstrdup(text); kl = tl; }
        }
        free(text);
        int32_t c = ds_strmap_get(&keys, key, (uint32_t)kl);
        if (c < 0) {
            c = next++;
            ds_strmap_put(&keys, key, (uint32_t)kl, c);
            owned[v] = key;
        } else {
            free(key);
        }
        cls[v] = (uint32_t)c;
    }
    for (int v = 0; v < V; v++) free(owned[v]);
    free(owned);
    ds_strmap_free(&keys);
    if (rc < 0) { free(cls); return -1; }
    *classes = cls;
    *n_classes = next;
    return 0;
}

int ds_engram_map_write(const char *path, const uint32_t *classes, int vocab_size, ds_error *err) {
    uint8_t *buf = ds_xmalloc((size_t)vocab_size * 4);
    for (int i = 0; i < vocab_size; i++) {
        uint32_t c = classes[i];
        buf[4 * i] = (uint8_t)c; buf[4 * i + 1] = (uint8_t)(c >> 8);
        buf[4 * i + 2] = (uint8_t)(c >> 16); buf[4 * i + 3] = (uint8_t)(c >> 24);
    }
    int rc = ds_write_file_atomic(path, buf, (size_t)vocab_size * 4, err);
    free(buf);
    return rc;
}

int ds_engram_map_read(const char *path, int expected_vocab, uint32_t **classes, int *n_classes, ds_error *err) {
    char *data;
    size_t len;
    if (ds_read_file(path, &data, &len, err) < 0) return -1;
    if (len != (size_t)expected_vocab * 4) {
        free(data);
        return ds_fail(err, "E_TOKEN_MAP_SIZE", "%s: %zu bytes, expected %d (vocab_size %d x 4)", path, len, expected_vocab * 4, expected_vocab);
    }
    uint32_t *cls = ds_xmalloc((size_t)expected_vocab * sizeof *cls);
    uint32_t maxc = 0;
    const uint8_t *b = (const uint8_t *)data;
    for (int i = 0; i < expected_vocab; i++) {
        uint32_t c = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
        if ((i == 0 && c != 0) || (i > 0 && c > maxc + 1)) {
            free(data);
            free(cls);
            return ds_fail(err, "E_TOKEN_MAP_SIZE", "%s: entry %d has class %u, but classes must appear in first-seen order (next new class would be %u)",
                           path, i, c, i == 0 ? 0 : maxc + 1);
        }
        if (c > maxc) maxc = c;
        cls[i] = c;
    }
    free(data);
    *classes = cls;
    *n_classes = expected_vocab ? (int)maxc + 1 : 0;
    return 0;
}
