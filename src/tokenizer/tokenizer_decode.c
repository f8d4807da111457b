/* Decoding ids to text, whole or incrementally.
 *
 * Why bytes first: a byte-level token can carry part of a UTF-8 character, so text only exists
 * after the bytes of consecutive tokens are joined.  Both paths concatenate each id's bytes
 * (precomputed at load: byte-level characters mapped back, added tokens as their literal) and
 * then apply the same lossy UTF-8 conversion as HF (one U+FFFD per maximal invalid subpart).  The
 * stream holds back only a valid-but-incomplete tail, so its output concatenates to exactly the
 * whole decode, and since an added token's bytes enter in one piece, a token is never split. */
#define _GNU_SOURCE
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"
#include <stdlib.h>
#include <string.h>

static bool skip_id(const ds_tokenizer *t, int32_t id, bool skip_special) {
    return skip_special && t->id_added[id] == 2;
}

static int check_id(const ds_tokenizer *t, int32_t id, size_t index, ds_error *err) {
    if (id < 0 || id >= t->vocab_size)
        return ds_fail(err, "E_TOKENIZER_ID", "token id %d at position %zu is outside the vocabulary [0, %d)", id, index, t->vocab_size);
    if (!t->id_str[id])
        return ds_fail(err, "E_TOKENIZER_ID", "token id %d at position %zu is not defined by %s", id, index, t->path);
    return 0;
}

char *ds_tokenizer_decode(const ds_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                          size_t *out_len, ds_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (check_id(t, ids[i], i, err) < 0) return NULL;
        if (!skip_id(t, ids[i], skip_special)) total += t->id_bytes_len[ids[i]];
    }
    uint8_t *bytes = ds_xmalloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_id(t, ids[i], skip_special)) continue;
        memcpy(bytes + o, t->bytes_pool + t->id_bytes_off[ids[i]], t->id_bytes_len[ids[i]]);
        o += t->id_bytes_len[ids[i]];
    }
    char *text = ds_xmalloc(3 * total + 1);
    size_t len = ds_utf8_lossy(bytes, total, true, text, NULL);
    free(bytes);
    if (out_len) *out_len = len;
    return text;
}

struct ds_detok_stream {
    const ds_tokenizer *tok;
    bool skip_special;
    uint8_t pend[8];     /* an incomplete UTF-8 tail (at most 3 bytes) */
    size_t npend;
    char *out;
    size_t outcap;
    uint8_t *work;
    size_t workcap;
};

ds_detok_stream *ds_detok_stream_new(const ds_tokenizer *tok, bool skip_special) {
    ds_detok_stream *s = ds_xcalloc(1, sizeof *s);
    s->tok = tok;
    s->skip_special = skip_special;
    return s;
}
void ds_detok_stream_free(ds_detok_stream *s) {
    if (!s) return;
    free(s->out);
    free(s->work);
    free(s);
}

static const char *emit(ds_detok_stream *s, const uint8_t *add, size_t addn, bool final, size_t *len) {
    size_t n = s->npend + addn;
    if (n > s->workcap) { s->workcap = 2 * n + 16; s->work = ds_xrealloc(s->work, s->workcap); }
    if (s->npend) memcpy(s->work, s->pend, s->npend); /* work may still be NULL when nothing is pending */
    if (addn) memcpy(s->work + s->npend, add, addn);
    if (3 * n + 1 > s->outcap) { s->outcap = 3 * n + 64; s->out = ds_xrealloc(s->out, s->outcap); }
    size_t consumed;
    *len = ds_utf8_lossy(s->work, n, final, s->out, &consumed);
    s->npend = n - consumed;                /* < 4: only an incomplete sequence is held */
    if (s->npend) memcpy(s->pend, s->work + consumed, s->npend);
    return s->out;
}

const char *ds_detok_stream_push(ds_detok_stream *s, int32_t id, size_t *len, ds_error *err) {
    if (check_id(s->tok, id, 0, err) < 0) return NULL;
    if (skip_id(s->tok, id, s->skip_special)) return emit(s, NULL, 0, false, len);
    return emit(s, s->tok->bytes_pool + s->tok->id_bytes_off[id], s->tok->id_bytes_len[id], false, len);
}

const char *ds_detok_stream_flush(ds_detok_stream *s, size_t *len) {
    return emit(s, NULL, 0, true, len);
}
