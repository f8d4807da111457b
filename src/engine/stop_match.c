/* Stop-string matcher (see stop_match.h for the hold-back rule). */
#include "engine/stop_match.h"
#include <stdlib.h>
#include <string.h>

void ds_stop_init(ds_stop_matcher *m, const char *const *stops, int n) {
    memset(m, 0, sizeof *m);
    m->n = n;
    m->stops = stops;
    m->lens = ds_xcalloc((size_t)(n ? n : 1), sizeof(size_t));
    for (int i = 0; i < n; i++) m->lens[i] = strlen(stops[i]);
}

void ds_stop_free(ds_stop_matcher *m) {
    free(m->lens);
    ds_tbuf_free(&m->pending);
    memset(m, 0, sizeof *m);
}

static void release(ds_stop_matcher *m, size_t n, ds_tbuf *out) {
    if (!n) return;
    ds_tbuf_append(out, m->pending.s, n);
    memmove(m->pending.s, m->pending.s + n, m->pending.n - n);
    m->pending.n -= n;
    m->pending.s[m->pending.n] = 0;
}

int ds_stop_push(ds_stop_matcher *m, const char *text, size_t len, ds_tbuf *out) {
    if (m->stopped) return 1;
    if (len) ds_tbuf_append(&m->pending, text, len);
    if (!m->n) {
        release(m, m->pending.n, out);
        return 0;
    }
    if (!m->pending.n) return 0;
    const char *s = m->pending.s;
    size_t n = m->pending.n;
    /* earliest complete match; on equal starts any match ends generation the same way */
    size_t best = SIZE_MAX, best_len = 0;
    for (int i = 0; i < m->n; i++) {
        size_t L = m->lens[i];
        if (!L || L > n) continue;
        for (size_t at = 0; at + L <= n && at < best; at++)
            if (s[at] == m->stops[i][0] && !memcmp(s + at, m->stops[i], L)) {
                best = at;
                best_len = L;
                break;
            }
    }
    if (best != SIZE_MAX) {
        release(m, m->keep_match ? best + best_len : best, out);
        m->pending.n = 0;
        m->pending.s[0] = 0;
        m->stopped = true;
        return 1;
    }
    /* hold back the longest suffix that is a proper prefix of some stop string */
    size_t hold = 0;
    for (int i = 0; i < m->n; i++) {
        size_t L = m->lens[i];
        for (size_t k = DS_MIN(L - 1, n); k > hold; k--)
            if (!memcmp(s + n - k, m->stops[i], k)) {
                hold = k;
                break;
            }
    }
    release(m, n - hold, out);
    return 0;
}

void ds_stop_flush(ds_stop_matcher *m, ds_tbuf *out) {
    if (m->stopped || !m->pending.n) return;
    release(m, m->pending.n, out);
}
