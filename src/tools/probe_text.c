/* Filler, needles, nonces and report statistics (see probe_text.h for why they live here). */
#include "tools/probe_text.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t ds_filler_nchar(int64_t target_tokens) {
    return (int64_t)((double)target_tokens / DS_FILLER_TOKENS_PER_CHAR) + 200;
}

typedef struct { char *p; size_t n, cap; } sbuf;
static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = ds_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

int64_t ds_utf8_count(const char *s, size_t n) {
    int64_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}


void ds_filler_build(ds_filler *f, const char *nonce, int64_t nchar) {
    memset(f, 0, sizeof *f);
    sbuf b = {0};
    char head[64];
    int hn = snprintf(head, sizeof head, "会话%s开始。", nonce);
    sb_put(&b, head, (size_t)hn);
    int64_t chars = ds_utf8_count(head, (size_t)hn), cap = 1024;
    f->bound_char = ds_xmalloc(sizeof(int64_t) * (size_t)cap);
    f->bound_byte = ds_xmalloc(sizeof(size_t) * (size_t)cap);
    for (int64_t i = 0; chars < nchar; i++) {
        if (f->n_rec + 2 > cap) {
            cap *= 2;
            f->bound_char = ds_xrealloc(f->bound_char, sizeof(int64_t) * (size_t)cap);
            f->bound_byte = ds_xrealloc(f->bound_byte, sizeof(size_t) * (size_t)cap);
        }
        f->bound_char[f->n_rec] = chars;
        f->bound_byte[f->n_rec] = b.n;
        f->n_rec++;
        char rec[160];
        /* widths are minimums (%0Nlld never truncates) */
        int rn = snprintf(rec, sizeof rec, "记录编号%08lld的内容是：%08lld-%010lld-%012lld。", (long long)i,
                          (long long)(i * 7919), (long long)(i * 104729), (long long)(i * 15485863));
        sb_put(&b, rec, (size_t)rn);
        chars += ds_utf8_count(rec, (size_t)rn);
    }
    f->bound_char[f->n_rec] = chars;
    f->bound_byte[f->n_rec] = b.n;
    f->text = b.p;
    f->bytes = b.n;
    f->chars = chars;
}

void ds_filler_free(ds_filler *f) {
    free(f->text);
    free(f->bound_char);
    free(f->bound_byte);
    memset(f, 0, sizeof *f);
}

/* The boundary (record start, or the end) closest to frac of the document; ties go to the earlier. */
static int64_t closest_boundary(const ds_filler *f, double frac) {
    double want = frac * (double)f->chars;
    int64_t best = 0;
    for (int64_t i = 1; i <= f->n_rec; i++)
        if (fabs((double)f->bound_char[i] - want) < fabs((double)f->bound_char[best] - want)) best = i;
    return best;
}

char *ds_filler_insert(const ds_filler *f, int n, const double *fracs, const char *const *texts, double *depth) {
    sbuf b = {0};
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int64_t i = closest_boundary(f, fracs[k]);
        size_t byte = f->bound_byte[i];
        if (byte < at) byte = at;   /* fractions ascend; a short document cannot reorder needles */
        sb_put(&b, f->text + at, byte - at);
        sb_put(&b, texts[k], strlen(texts[k]));
        at = byte;
        if (depth) depth[k] = f->chars ? (double)ds_utf8_count(f->text, byte) / (double)f->chars : 0;
    }
    sb_put(&b, f->text + at, f->bytes - at);
    return b.p;
}

void ds_probe_rng_seed(ds_probe_rng *r, uint64_t seed) { r->s = seed; }
uint64_t ds_probe_rng_next(ds_probe_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
void ds_probe_nonce(ds_probe_rng *r, char out[7]) {
    snprintf(out, 7, "%06llx", (unsigned long long)(ds_probe_rng_next(r) & 0xFFFFFFu));
}

void ds_wilson95(int64_t k, int64_t n, double *lo, double *hi) {
    if (n <= 0) {
        *lo = 0, *hi = 1;
        return;
    }
    const double z = 1.96, nn = (double)n, p = (double)k / nn, z2 = z * z;
    double center = (p + z2 / (2 * nn)) / (1 + z2 / nn);
    double half = z * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn);
    *lo = center - half < 0 ? 0 : center - half;
    *hi = center + half > 1 ? 1 : center + half;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
double ds_uniq2_ids(const int32_t *ids, size_t n) {
    if (n < 2) return 1.0;
    uint64_t *bg = ds_xmalloc(sizeof(uint64_t) * (n - 1));
    for (size_t i = 0; i + 1 < n; i++) bg[i] = ((uint64_t)(uint32_t)ids[i] << 32) | (uint32_t)ids[i + 1];
    qsort(bg, n - 1, sizeof *bg, cmp_u64);
    size_t distinct = 1;
    for (size_t i = 1; i < n - 1; i++) distinct += bg[i] != bg[i - 1];
    free(bg);
    return (double)distinct / (double)(n - 1);
}
