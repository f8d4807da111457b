/* Numeric building blocks (see ops.h for the evaluation contract). */
#include "model/ops.h"
#include "base/clones.h"
#include <stdlib.h>
#include <string.h>

void ds_rmsnorm_bf16(const ds_bf16 *x, const float *w, int n, double eps, ds_bf16 *y) {
    float ss = ds_sumsq_b(x, n);
    float rs = (float)(1.0 / sqrt((double)ss / n + eps));
    for (int i = 0; i < n; i++) {
        float t = ds_bf16_to_f32(x[i]) * rs;
        y[i] = ds_f32_to_bf16(t * w[i]);
    }
}

/* every linear output a sublayer keeps in bf16 passes here: vectorized (the same bits) */
DS_CLONES void ds_round_rows_bf16(const float *x, size_t n, ds_bf16 *y) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) y[i] = ds_f32_to_bf16(x[i]);
}

void ds_linear_bf16(const ds_linear *L, const ds_bf16 *x, int n, float *tmp, ds_bf16 *y) {
    if (n <= 0) return;
    ds_linear_forward(L, x, n, tmp);
    ds_round_rows_bf16(tmp, (size_t)n * L->out, y);
}

/* "a ranks before b": higher score, or equal score and lower index. */
static inline int better(const float *s, int32_t a, int32_t b) {
    return s[a] > s[b] || (s[a] == s[b] && a < b);
}

/* Min-heap on the ranking (root = worst kept entry). */
static void sift_down(const float *s, int32_t *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(s, h[w], h[l])) w = l;
        if (r < n && better(s, h[w], h[r])) w = r;
        if (w == i) return;
        int32_t t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}
static void sift_up(const float *s, int32_t *h, int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!better(s, h[p], h[i])) return;
        int32_t t = h[i]; h[i] = h[p]; h[p] = t;
        i = p;
    }
}

int ds_topk_next(const float *score, int64_t n, int k, int32_t *out, int32_t *h, float *next) {
    int m = 0;
    float nxt = -INFINITY;
    if (k <= 0) { if (next) *next = -INFINITY; return 0; }
    for (int64_t i = 0; i < n; i++) {
        if (score[i] == -INFINITY) continue;
        if (m < k) {
            h[m] = (int32_t)i;
            sift_up(score, h, m);
            m++;
        } else if (better(score, (int32_t)i, h[0])) {
            /* the evicted root becomes a candidate for "best not kept" */
            if (score[h[0]] > nxt) nxt = score[h[0]];
            h[0] = (int32_t)i;
            sift_down(score, h, m, 0);
        } else if (score[i] > nxt) {
            nxt = score[i];
        }
    }
    /* heap-sort into descending ranking */
    int cnt = m;
    while (m > 0) {
        out[m - 1] = h[0];
        h[0] = h[m - 1];
        m--;
        sift_down(score, h, m, 0);
    }
    if (next) *next = nxt;
    return cnt;
}

int ds_topk(const float *score, int64_t n, int k, int32_t *out, int32_t *heap_tmp) {
    return ds_topk_next(score, n, k, out, heap_tmp, NULL);
}

/* Order key of a score: unsigned and increasing with the float (-0 taken as +0, as the float
 * comparisons of `better` see them). */
static inline uint32_t order_key(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (u == 0x80000000u) u = 0;
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/* The key of the k-th best finite entry, found a byte at a time from the top (one pass over the
 * scores per byte, over the entries whose higher bytes match); *ties: how many entries of that key
 * the k best hold.  Returns -1 on a NaN (the heap decides then), 1 when at most k are finite. */
static int kth_key(const float *score, int64_t n, int k, uint32_t *key, int64_t *ties) {
    uint32_t prefix = 0, mask = 0;
    int64_t above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        int64_t hist[256] = {0}, finite = 0;
        for (int64_t i = 0; i < n; i++) {
            const float f = score[i];
            if (f != f) return -1;
            if (f == -INFINITY) continue;
            const uint32_t q = order_key(f);
            if ((q & mask) != prefix) continue;
            hist[(q >> shift) & 255]++;
            finite++;
        }
        if (shift == 24 && finite <= k) return 1;
        int d = 255;
        while (above + hist[d] < k) above += hist[d--];
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
        if (shift == 0) *ties = k - above;
    }
    *key = prefix;
    return 0;
}

static int cmp_index(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Up to this many scores the radix selection wins: k = 512, n = 1,024 / 4,096 / 16,384 took
 * 0.25 / 0.54 / 0.83 of the heap and its sorts; at 65,536 it took 1.37 (four full passes: the heap
 * there mostly compares with its root). */
#define TOPK_RADIX_MAX_N 16384

int ds_topk_set(const float *score, int64_t n, int k, int32_t *out, int32_t *heap_tmp, float *kth, float *next) {
    uint32_t key = 0;
    int64_t ties = 0;
    const int r = k <= 0 ? 1 : n > TOPK_RADIX_MAX_N ? -1 : kth_key(score, n, k, &key, &ties);
    if (r < 0) {   /* many scores, or a NaN: the heap's own rule, then index order */
        const int m = ds_topk_next(score, n, k, out, heap_tmp, next);
        if (m > 0 && kth) *kth = score[out[m - 1]];
        qsort(out, (size_t)m, sizeof(int32_t), cmp_index);
        return m;
    }
    int m = 0;
    float nxt = -INFINITY, worst = INFINITY;
    for (int64_t i = 0; i < n && k > 0; i++) {
        const float f = score[i];
        if (f == -INFINITY) continue;
        const uint32_t q = order_key(f);
        if (r == 1 || q > key || (q == key && ties-- > 0)) {
            out[m++] = (int32_t)i;
            if (f < worst) worst = f;
        } else if (f > nxt) {
            nxt = f;
        }
    }
    if (m > 0 && kth) *kth = worst;
    if (next) *next = nxt;
    return m;
}

float ds_e4m3_value(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, mn = b & 7;
    if (e == 15 && mn == 7) return NAN;
    float v = e ? ldexpf(1.0f + (float)mn / 8.0f, e - 7) : ldexpf((float)mn / 8.0f, -6);
    return s ? -v : v;
}

float ds_e2m1_value(int nibble) {
    static const float t[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (nibble & 8) ? -t[nibble & 7] : t[nibble & 7];
}

float ds_e8m0_value(uint8_t b) { return b == 255 ? NAN : ldexpf(1.0f, (int)b - 127); }
