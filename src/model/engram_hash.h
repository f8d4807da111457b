/* Engram hashing constants and row ids (MODEL.md §2.10.2–§2.10.3, Appendix A).
 *
 * Everything here is exact integer arithmetic: the multipliers exceed 2^53 and the seed sequence and
 * the 128-bit permuted congruential generator wrap modulo 2^32/2^64/2^128, so the code uses uint32,
 * uint64 and unsigned __int128 and never a double.  The module depends only on the config so the
 * loader can check its results (prime sum, multipliers) before any weight is touched, and unit tests
 * can compare them with the check values of the spec. */
#ifndef DS_MODEL_ENGRAM_HASH_H
#define DS_MODEL_ENGRAM_HASH_H
#include <stdint.h>
#include "io/config.h"

#define DS_ENGRAM_MAX_COLS 64        /* (max_ngram-1)·n_heads upper bound (V4.1-Flash: 24) */

/* Multiplier bound of Appendix A: max(1, ((2^63-1) div n_classes) div 2). */
uint64_t ds_engram_mult_bound(int64_t n_classes);
/* M[k] = 2·draw(bound)+1 for k < count, generator seeded with 10007·layer_id.  Returns -1 when the
 * bound needs the 32-bit draw (bound-1 < 2^32), which this engine does not implement. */
int ds_engram_multipliers(int layer_id, int64_t n_classes, int count, int64_t *out);

/* The raw PCG64 stream of Appendix A (exposed for tests). */
typedef struct ds_pcg64 { unsigned __int128 st, inc; } ds_pcg64;
void ds_pcg64_seed(ds_pcg64 *g, uint64_t seed);
uint64_t ds_pcg64_next(ds_pcg64 *g);
uint64_t ds_pcg64_draw(ds_pcg64 *g, uint64_t bound);

/* Hashing constants of one model: per Engram layer (config order) its primes and offsets in column
 * order [2-gram h0..h(n-1), 3-gram ..., max-gram ...], and its multipliers. */
typedef struct ds_engram_consts {
    int n_layers;                                    /* |E| */
    int max_ngram;                                   /* largest n-gram */
    int n_heads;                                     /* heads per n-gram size */
    int n_cols;                                      /* (max_ngram-1)·n_heads */
    int64_t primes[DS_MAX_LIST][DS_ENGRAM_MAX_COLS];  /* [|E|][n_cols] */
    int64_t offsets[DS_MAX_LIST][DS_ENGRAM_MAX_COLS]; /* [|E|][n_cols] exclusive prefix sums */
    int64_t prime_sum[DS_MAX_LIST];                   /* [|E|] must equal engram_num_embeddings */
    int64_t mult[DS_MAX_LIST][DS_MAX_NGRAM];          /* [|E|][max_ngram] */
} ds_engram_consts;

/* Compute primes, offsets and multipliers from the config (multipliers always computed, never read
 * from the config; the loader compares).  Returns -1 with err (E_CONFIG) on an unsupported shape. */
int ds_engram_consts_init(ds_engram_consts *c, const ds_config *cfg, ds_error *err);

/* Smallest prime strictly greater than n (deterministic trial division; n < 2^40 in practice). */
int64_t ds_next_prime(int64_t n);

/* Row ids of one row of one Engram layer e: t[s] = class of the token at p-s (already padded),
 * rows[n_cols] receives table row ids. */
void ds_engram_row_ids(const ds_engram_consts *c, int e, const int64_t *t, int64_t *rows);

#endif
