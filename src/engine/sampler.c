/* Sampler implementation (see sampler.h for the contract and why draws are counter-based).
 *
 * Numerics: the captured log-softmax is evaluated in float64 (max, then log of the sum of
 * exponentials) and rounded once to fp32, matching docs/NUMERICS.md's rule for reductions, so a
 * row's logprobs do not depend on summation order or on the batch. */
#include "engine/sampler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ds_sampler_scratch {
    int vocab;
    float *z;          /* processed logits */
    int32_t *order;    /* candidate ids, sorted when a filter needs it */
    int32_t *count;    /* generated-token counts (penalties), reset after use via `touched` */
    uint8_t *seen;     /* prompt-or-generated flags (repetition penalty) */
    int32_t *touched;  /* ids whose count/seen were set */
    int n_touched, touched_cap;
};

void ds_sampling_defaults(ds_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0;
    p->top_p = 1.0;
    p->top_k = -1;
    p->min_p = 0.0;
    p->repetition_penalty = 1.0;
    p->logprobs = -1;
    p->prompt_logprobs = -1;
    p->max_tokens = 16;
    p->eos_id = -1;
}

void ds_sampling_free(ds_sampling_params *p) {
    free(p->bias_ids);
    free(p->bias_vals);
    free(p->stop_ids);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
}

void ds_sampling_copy(ds_sampling_params *dst, const ds_sampling_params *src) {
    *dst = *src;
    if (src->n_bias) {
        dst->bias_ids = ds_xmalloc(sizeof(int32_t) * (size_t)src->n_bias);
        dst->bias_vals = ds_xmalloc(sizeof(float) * (size_t)src->n_bias);
        memcpy(dst->bias_ids, src->bias_ids, sizeof(int32_t) * (size_t)src->n_bias);
        memcpy(dst->bias_vals, src->bias_vals, sizeof(float) * (size_t)src->n_bias);
    } else {
        dst->bias_ids = NULL;
        dst->bias_vals = NULL;
    }
    if (src->n_stop_ids) {
        dst->stop_ids = ds_xmalloc(sizeof(int32_t) * (size_t)src->n_stop_ids);
        memcpy(dst->stop_ids, src->stop_ids, sizeof(int32_t) * (size_t)src->n_stop_ids);
    } else {
        dst->stop_ids = NULL;
    }
    for (int i = 0; i < src->n_stop; i++) dst->stop[i] = ds_xstrdup(src->stop[i]);
}

static void mask_set(ds_token_mask *m, int64_t id) {
    if (id < 0 || id >= m->vocab || m->masked[id]) return;
    m->masked[id] = 1;
    m->count++;
}

void ds_token_mask_init(ds_token_mask *m, int vocab, int noise_id, int bos_id, int pad_id, int image_id,
                        const ds_int_range *sentinels, int n_sentinels, const int32_t *spare, int n_spare) {
    m->vocab = vocab;
    m->masked = ds_xcalloc((size_t)vocab, 1);
    m->count = 0;
    for (int r = 0; r < n_sentinels; r++)
        for (int64_t id = DS_MAX(sentinels[r].lo, 0); id <= sentinels[r].hi && id < vocab; id++) mask_set(m, id);
    for (int i = 0; i < n_spare; i++) {   /* control tokens are spared inside the sentinel list only */
        int32_t id = spare[i];
        if (id >= 0 && id < vocab && m->masked[id]) {
            m->masked[id] = 0;
            m->count--;
        }
    }
    /* always masked, whatever the spare list holds (SERVING.md §9; BOS is a control token the
     * encoder needs, yet it must never be generated, even under logit_bias) */
    mask_set(m, noise_id);
    mask_set(m, bos_id);
    mask_set(m, pad_id);
    if (image_id >= 0) {
        mask_set(m, image_id);
        mask_set(m, (int64_t)image_id + 1);
    }
}

void ds_token_mask_free(ds_token_mask *m) {
    free(m->masked);
    memset(m, 0, sizeof *m);
}

ds_sampler_scratch *ds_sampler_scratch_new(int vocab) {
    ds_sampler_scratch *s = ds_xcalloc(1, sizeof *s);
    s->vocab = vocab;
    s->z = ds_xmalloc(sizeof(float) * (size_t)vocab);
    s->order = ds_xmalloc(sizeof(int32_t) * (size_t)vocab);
    s->count = ds_xcalloc((size_t)vocab, sizeof(int32_t));
    s->seen = ds_xcalloc((size_t)vocab, 1);
    s->touched_cap = 1024;
    s->touched = ds_xmalloc(sizeof(int32_t) * (size_t)s->touched_cap);
    return s;
}

void ds_sampler_scratch_free(ds_sampler_scratch *s) {
    if (!s) return;
    free(s->z);
    free(s->order);
    free(s->count);
    free(s->seen);
    free(s->touched);
    free(s);
}

/* splitmix64 finaliser: a bijective 64-bit mix with full avalanche. */
static inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

double ds_sampler_exp_draw(int64_t seed, int64_t output_index, int32_t token) {
    uint64_t h = mix64((uint64_t)seed);
    h = mix64(h ^ mix64((uint64_t)output_index * 0xD1B54A32D192ED03ull));
    h = mix64(h ^ ((uint64_t)(uint32_t)token * 0xABC98388FB8FAC03ull));
    double u = ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0, 1) */
    return -log(u);
}

/* Captured distribution: log-sum-exp of the masked raw logits, in float64.  Returns false when
 * any logit is NaN/Inf (masked ids included: a non-finite row is broken whatever the mask). */
static bool capture_lse(const float *x, int vocab, const ds_token_mask *mask, double *lse) {
    double mx = -INFINITY;
    for (int i = 0; i < vocab; i++) {
        if (!isfinite(x[i])) return false;
        if (mask && mask->masked[i]) continue;
        if (x[i] > mx) mx = x[i];
    }
    if (mx == -INFINITY) return false;
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        if (mask && mask->masked[i]) continue;
        sum += exp((double)x[i] - mx);
    }
    *lse = mx + log(sum);
    return true;
}

/* Top-n ids by captured logprob (ties: lower id first), plus the chosen id's logprob and rank. */
static void fill_logprobs(const float *x, int vocab, const ds_token_mask *mask, double lse, int32_t chosen,
                          int n_top, ds_sample_result *res) {
    res->logprob = (float)((double)x[chosen] - lse);
    int rank = 1;
    float xc = x[chosen];
    int n = 0;
    ds_logprob_entry *top = res->top;
    for (int i = 0; i < vocab; i++) {
        if (mask && mask->masked[i]) continue;
        float v = x[i];
        if (v > xc || (v == xc && i < chosen)) rank++;
        if (n_top <= 0) continue;
        if (n == n_top && !(v > x[top[n - 1].id])) continue; /* ties keep the lower id already held */
        int j = n < n_top ? n++ : n - 1;
        while (j > 0 && v > x[top[j - 1].id]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].id = i;
    }
    for (int j = 0; j < n; j++) top[j].logprob = (float)((double)x[top[j].id] - lse);
    res->n_top = n;
    res->rank = rank;
}

int ds_row_logprobs(const float *logits, int vocab, const ds_token_mask *mask, int32_t id, int n_top,
                    ds_sampler_scratch *s, ds_sample_result *res) {
    memset(res, 0, sizeof *res);
    double lse;
    if (!capture_lse(logits, vocab, mask, &lse)) {
        res->nonfinite = true;
        return -1;
    }
    res->token = id;
    if (n_top > DS_MAX_TOP_LOGPROBS) n_top = DS_MAX_TOP_LOGPROBS;
    fill_logprobs(logits, vocab, mask, lse, id, n_top, res);
    if (mask && mask->masked[id]) res->logprob = -INFINITY;
    return 0;
}

static void touch(ds_sampler_scratch *s, int32_t id) {
    if (s->n_touched == s->touched_cap) {
        s->touched_cap *= 2;
        s->touched = ds_xrealloc(s->touched, sizeof(int32_t) * (size_t)s->touched_cap);
    }
    s->touched[s->n_touched++] = id;
}

/* Sort key: processed logit descending, then id ascending (the spec's tie rule).  qsort has no
 * context argument, so the key array is thread-local: rows may be sampled on several threads. */
static __thread const float *g_sort_z;
static int cmp_desc(const void *a, const void *b) {
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    float za = g_sort_z[ia], zb = g_sort_z[ib];
    if (za > zb) return -1;
    if (za < zb) return 1;
    return ia < ib ? -1 : ia > ib;
}

static void sort_candidates(int32_t *ids, int n, const float *z) {
    g_sort_z = z;
    qsort(ids, (size_t)n, sizeof *ids, cmp_desc);
}

static void apply_penalties(const ds_sampling_params *p, const ds_sample_history *h, ds_sampler_scratch *s, float *z) {
    bool rep = p->repetition_penalty != 1.0, pres = p->presence_penalty != 0.0, freq = p->frequency_penalty != 0.0;
    if (!h || (!rep && !pres && !freq)) return;
    s->n_touched = 0;
    for (int64_t i = 0; i < h->n_generated; i++) {
        int32_t id = h->generated[i];
        if (id < 0 || id >= s->vocab) continue;
        if (!s->count[id] && !s->seen[id]) touch(s, id);
        s->count[id]++;
        s->seen[id] = 1;
    }
    if (rep)
        for (int64_t i = 0; i < h->n_prompt; i++) {
            int32_t id = h->prompt[i];
            if (id < 0 || id >= s->vocab || s->seen[id]) continue;
            if (!s->count[id]) touch(s, id);
            s->seen[id] = 1;
        }
    for (int t = 0; t < s->n_touched; t++) {
        int32_t id = s->touched[t];
        if (z[id] == -INFINITY) continue;
        if (rep && s->seen[id]) z[id] = z[id] > 0 ? (float)(z[id] / p->repetition_penalty) : (float)(z[id] * p->repetition_penalty);
        if (s->count[id]) {
            if (pres) z[id] -= (float)p->presence_penalty;
            if (freq) z[id] -= (float)(p->frequency_penalty * s->count[id]);
        }
    }
    for (int t = 0; t < s->n_touched; t++) {
        s->count[s->touched[t]] = 0;
        s->seen[s->touched[t]] = 0;
    }
    s->n_touched = 0;
}

/* Temperature and the top-k / top-p / min-p filters on the processed logits s->z: the candidate
 * ids are s->order[0..n) (sorted by processed logit when a filter needed it), z scaled by 1/T. */
static int candidates(const ds_sampling_params *p, ds_sampler_scratch *s, int vocab) {
    float *z = s->z;
    float inv_t = (float)p->temperature;
    int n = 0;
    for (int i = 0; i < vocab; i++)
        if (z[i] != -INFINITY) {
            z[i] = z[i] / inv_t;
            s->order[n++] = i;
        }
    bool need_sort = (p->top_k > 1 && p->top_k < n) || p->top_p < 1.0 || p->min_p > 0.0;
    if (need_sort) sort_candidates(s->order, n, z);
    if (p->top_k > 1 && p->top_k < n) n = p->top_k;
    if (n > 0 && (p->top_p < 1.0 || p->min_p > 0.0)) {
        double zmax = z[s->order[0]], sum = 0.0;
        for (int j = 0; j < n; j++) sum += exp((double)z[s->order[j]] - zmax);
        if (p->top_p < 1.0) {
            double acc = 0.0;
            int keep = n;
            for (int j = 0; j < n; j++) {
                acc += exp((double)z[s->order[j]] - zmax) / sum;
                if (acc >= p->top_p) { keep = j + 1; break; }
            }
            n = keep;
        }
        if (p->min_p > 0.0) {
            /* p_i >= min_p * p_max  <=>  z_i - z_max >= log(min_p) */
            double lim = log(p->min_p);
            int keep = 0;
            while (keep < n && (double)z[s->order[keep]] - zmax >= lim) keep++;
            n = keep > 0 ? keep : 1;
        }
    }
    return n;
}

/* Greedy without bias, penalties or logprobs: one pass (finiteness + masked argmax) instead of
 * the exponentials of the captured distribution, which dominate sampling at 129,280 ids. */
static bool plain_greedy(const ds_sampling_params *p) {
    return (p->temperature == 0.0 || p->top_k == 1) && p->logprobs < 0 && p->n_bias == 0 &&
           p->repetition_penalty == 1.0 && p->presence_penalty == 0.0 && p->frequency_penalty == 0.0;
}

bool ds_sampling_greedy_only(const ds_sampling_params *p, int64_t output_index) {
    return plain_greedy(p) && output_index >= p->min_tokens;
}

int ds_sample_greedy_id(int32_t id, ds_sample_result *res) {
    memset(res, 0, sizeof *res);
    if (id < 0) {
        res->nonfinite = true;
        return -1;
    }
    res->token = id;
    res->rank = 1;
    return 0;
}

int ds_sample_row(const float *logits, int vocab, const ds_token_mask *mask, const ds_sampling_params *p,
                  int64_t seed, int64_t output_index, const ds_sample_history *hist, ds_sampler_scratch *s,
                  ds_sample_result *res) {
    memset(res, 0, sizeof *res);
    if (ds_sampling_greedy_only(p, output_index)) {
        int32_t best = -1;
        float bv = -INFINITY;
        bool finite = true;
        for (int i = 0; i < vocab; i++) {
            float v = logits[i];
            finite &= isfinite(v);
            if (mask && mask->masked[i]) continue;
            if (v > bv) { bv = v; best = i; }
        }
        if (!finite || best < 0) {
            res->nonfinite = true;
            return -1;
        }
        res->token = best;
        res->rank = 1;
        return 0;
    }
    double lse;
    if (!capture_lse(logits, vocab, mask, &lse)) {
        res->nonfinite = true;
        return -1;
    }
    float *z = s->z;
    for (int i = 0; i < vocab; i++) z[i] = (mask && mask->masked[i]) ? -INFINITY : logits[i];
    for (int b = 0; b < p->n_bias; b++) {
        int32_t id = p->bias_ids[b];
        if (id >= 0 && id < vocab && z[id] != -INFINITY) z[id] += p->bias_vals[b];
    }
    if (output_index < p->min_tokens) { /* min_tokens: whatever would end the request is not drawn yet */
        if (p->eos_id >= 0 && p->eos_id < vocab) z[p->eos_id] = -INFINITY;
        for (int i = 0; i < p->n_stop_ids; i++)
            if (p->stop_ids[i] >= 0 && p->stop_ids[i] < vocab) z[p->stop_ids[i]] = -INFINITY;
    }
    apply_penalties(p, hist, s, z);

    int32_t chosen = -1;
    if (p->temperature == 0.0 || p->top_k == 1) {
        float best = -INFINITY;
        for (int i = 0; i < vocab; i++)
            if (z[i] > best) { best = z[i]; chosen = i; }
    } else {
        int n = candidates(p, s, vocab);
        double best = -INFINITY;
        for (int j = 0; j < n; j++) {
            int32_t id = s->order[j];
            double key = (double)z[id] - log(ds_sampler_exp_draw(seed, output_index, id));
            if (key > best || (key == best && id < chosen)) { best = key; chosen = id; }
        }
    }
    if (chosen < 0) { /* everything masked: cannot happen with a sane mask */
        res->nonfinite = true;
        return -1;
    }
    res->token = chosen;
    int n_top = p->logprobs > 0 ? DS_MIN(p->logprobs, DS_MAX_TOP_LOGPROBS) : 0;
    fill_logprobs(logits, vocab, mask, lse, chosen, n_top, res);
    return 0;
}

int ds_sample_probs(const float *logits, int vocab, const ds_token_mask *mask, const ds_sampling_params *p,
                    const ds_sample_history *hist, ds_sampler_scratch *s, float *probs) {
    double lse;
    if (!capture_lse(logits, vocab, mask, &lse)) return -1;
    float *z = s->z;
    for (int i = 0; i < vocab; i++) z[i] = (mask && mask->masked[i]) ? -INFINITY : logits[i];
    for (int b = 0; b < p->n_bias; b++) {
        int32_t id = p->bias_ids[b];
        if (id >= 0 && id < vocab && z[id] != -INFINITY) z[id] += p->bias_vals[b];
    }
    apply_penalties(p, hist, s, z);
    memset(probs, 0, sizeof(float) * (size_t)vocab);
    if (p->temperature == 0.0 || p->top_k == 1) { /* one-hot on the greedy choice */
        int32_t best = -1;
        for (int i = 0; i < vocab; i++)
            if (z[i] != -INFINITY && (best < 0 || z[i] > z[best])) best = i;
        if (best < 0) return -1;
        probs[best] = 1.0f;
        return 0;
    }
    int n = candidates(p, s, vocab);
    if (n <= 0) return -1;
    double zmax = -INFINITY, sum = 0.0;
    for (int j = 0; j < n; j++) zmax = z[s->order[j]] > zmax ? z[s->order[j]] : zmax;
    for (int j = 0; j < n; j++) sum += exp((double)z[s->order[j]] - zmax);
    for (int j = 0; j < n; j++) probs[s->order[j]] = (float)(exp((double)z[s->order[j]] - zmax) / sum);
    return 0;
}
