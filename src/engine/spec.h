/* Speculative decoding with the built-in DSpark draft (MODEL.md §4.2, SERVING.md §8): the verify
 * step, the acceptance rules (greedy prefix match; rejection sampling for temperature > 0), the
 * commit that moves the draft rings forward, and the rollback through the processed length.
 *
 * Why these are small functions over one sequence: the engine batches the verify rows of many
 * requests into one target step (ds_batch_step_aux) and then runs accept/commit per request, while
 * the measurement commands (`dsflash eval acceptance`) and the tests drive a single sequence; both
 * use the same accept and commit code, so what the benchmarks measure is what the server does.
 *
 * Lossless by construction: at temperature 0 every emitted token is the target's argmax of a row
 * that is bit-identical to the row a plain decode step would compute (MODEL.md §6.4), so the output
 * equals the non-speculative one; at temperature > 0 the accept/replace rule of §8.3 makes each
 * emitted token distributed exactly as p. */
#ifndef DS_ENGINE_SPEC_H
#define DS_ENGINE_SPEC_H
#include "model/draft.h"

/* Prefill `n` prompt tokens of a fresh (or continued) sequence in chunks of at most `chunk` rows,
 * writing the draft rings of the processed positions; the logits of the last row go to
 * last_logits [V].  Returns 0 or -1 (err). */
int ds_spec_prefill(ds_model *m, ds_seq *s, const int32_t *tokens, int n, int chunk, float *last_logits, ds_error *err);

/* Greedy acceptance: the longest prefix of drafts[0..K-1] equal to the masked argmax of
 * logits rows 0..K-1 ([K+1][V]); *bonus = masked argmax of row acc.  `masked` (V bytes, may be
 * NULL) lists ids never chosen. */
int ds_spec_accept_greedy(const float *logits, int V, const uint8_t *masked, const int32_t *drafts, int K, int32_t *bonus);

/* Rejection sampling of SERVING.md §8.3 on explicit distributions: p rows [K+1][V] (target, after
 * every mask, penalty, temperature and filter), q rows [K][V] (draft, same processing), draws u
 * in [0,1) from `uniform(ctx, j)` (j = 0..K−1 accept tests, K + j the replacement / bonus draw).
 * Returns acc and sets *bonus (the replacement at the first rejection, or a sample of p_K). */
typedef double (*ds_uniform_fn)(void *ctx, int j);
int ds_spec_accept_sampled(const float *p, const float *q, int V, const int32_t *drafts, int K, ds_uniform_fn uniform,
                           void *ctx, int32_t *bonus);

/* After a verify step of K+1 rows that started at position p0 (the anchor's position): keep the
 * anchor and `acc` accepted drafts (processed length p0 + acc + 1) and write their draft rings from
 * the step's aux rows.  Returns 0 or -1 (err). */
int ds_spec_commit(ds_model *m, ds_seq *s, int64_t p0, int acc, const ds_bf16 *aux, ds_error *err);

/* What a step may report besides its tokens (every pointer optional). */
typedef struct ds_spec_trace {
    int32_t *drafts;              /* [block] every proposal of the draft pass */
    float *draft_logits;          /* [block][V] Markov-corrected draft logits */
    float *conf;                  /* [block] confidence logits */
    float *verify_logits;         /* [K+1][V] target logits of the verify rows */
} ds_spec_trace;

/* One greedy speculative step of a single sequence: draft from `anchor`, verify K (<= block)
 * drafts, accept, commit.  out receives the acc + 1 committed tokens' successors: out[0..acc−1] =
 * accepted drafts, out[acc] = bonus (the next anchor).  Returns acc (>= 0) or -1 (err). */
int ds_spec_greedy_step(ds_model *m, ds_seq *s, int32_t anchor, int K, const uint8_t *masked, int32_t *out,
                        const ds_spec_trace *tr, ds_error *err);

/* What speculation costs on this host, measured on two scratch sequences of the model (32 prompt
 * ids, then `reps` alternated pairs after one warm-up pair): the median time of a plain greedy
 * decode step (one row, greedy id) and of a greedy speculative step with K drafts (draft pass,
 * (K+1)-row verify, accept, commit).  break_even = spec_s / plain_s: the mean acceptance length a
 * request needs for speculation to emit tokens faster than plain decoding (docs/DECISIONS.md 165). */
typedef struct ds_spec_cost {
    double plain_s, spec_s;       /* seconds per step, medians */
    double break_even;            /* spec_s / plain_s */
    int reps;
} ds_spec_cost;
int ds_spec_measure_cost(ds_model *m, int K, int reps, ds_spec_cost *out, ds_error *err);

/* The per-request guard's threshold for a measured cost (ds_engine_config.spec_min_accept): the
 * break-even, at least the 1.5 of SERVING.md §8.5; 0 when no acceptance can pay (break_even >= K+1,
 * the most a verify step can emit) and speculation should stay off. */
double ds_spec_min_accept(const ds_spec_cost *c, int K);

#endif
