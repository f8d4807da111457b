/* Token choice for one logits row (SERVING.md §9).
 *
 * Why it is built this way: the order of operations is part of the contract (logprobs are
 * captured from the masked *raw* logits, before bias, penalties and temperature), and random
 * choices must not depend on the batch a row happened to be in.  So the sampler is a pure
 * function of (row logits, request parameters, request history, output index): randomness comes
 * from a counter-based generator keyed by (seed, output index, token id), never from a stream
 * whose position depends on how many other rows were sampled before.  A sample is
 * argmax_i p_i / E_i with E_i ~ Exp(1) (the exponential form of Gumbel-max), so it needs no
 * sorting and no cumulative sums, and top-k / top-p / min-p only decide which ids take part.
 *
 * Everything that scales with the vocabulary (probabilities, sort order) lives in a per-thread
 * scratch object so rows can be sampled in parallel without allocation in the hot loop. */
#ifndef DS_ENGINE_SAMPLER_H
#define DS_ENGINE_SAMPLER_H
#include "base/flags.h"
#include "base/common.h"

#define DS_MAX_TOP_LOGPROBS 20
#define DS_MAX_STOP_STRINGS 16

typedef struct ds_sampling_params {
    double temperature;          /* [0, 2]; 0 = greedy */
    double top_p;                /* (0, 1] */
    int top_k;                   /* -1 or 0 = off; 1 = greedy */
    double min_p;                /* [0, 1] */
    bool has_seed;
    int64_t seed;                /* when !has_seed the engine draws one per request */
    double presence_penalty;     /* [-2, 2], over generated tokens */
    double frequency_penalty;    /* [-2, 2], over generated tokens */
    double repetition_penalty;   /* (0, 2], over prompt and generated tokens */
    int n_bias;
    int32_t *bias_ids;           /* owned */
    float *bias_vals;            /* owned, [-100, 100] */
    int logprobs;                /* -1: none; 0..20: chosen token's logprob plus top-N */
    int prompt_logprobs;         /* -1: none; 0..20 */
    bool ignore_eos;
    int n_stop_ids;
    int32_t *stop_ids;           /* owned */
    int n_stop;
    char *stop[DS_MAX_STOP_STRINGS]; /* owned */
    int64_t max_tokens;          /* >= 1 */
    int64_t min_tokens;          /* EOS (eos_id) and stop_ids are never sampled before this many outputs */
    int32_t eos_id;              /* set by the engine at submit for min_tokens; -1 = none */
    bool include_stop_str;       /* a matched stop string stays in the released text */
} ds_sampling_params;

void ds_sampling_defaults(ds_sampling_params *p);
void ds_sampling_free(ds_sampling_params *p);
/* Deep copy (dst is overwritten). */
void ds_sampling_copy(ds_sampling_params *dst, const ds_sampling_params *src);

/* The forbidden-id mask (§9 "Forbidden mask"): a byte per id, 1 = never sampled, never listed. */
typedef struct ds_token_mask {
    int vocab;
    uint8_t *masked;
    int count;
} ds_token_mask;
/* The sampler mask of a vocabulary: noise id, BOS, PAD, the image placeholder and its successor,
 * and every id of the `sentinels` ranges (the multimodal sentinels; the engine's default list is
 * DS_DEFAULT_SENTINEL_IDS in engine_setup.h), minus every id in `spare` (chat-control tokens the
 * encoder or parsers need).  Ids outside [0, vocab) are ignored. */
void ds_token_mask_init(ds_token_mask *m, int vocab, int noise_id, int bos_id, int pad_id, int image_id,
                        const ds_int_range *sentinels, int n_sentinels, const int32_t *spare, int n_spare);
void ds_token_mask_free(ds_token_mask *m);

typedef struct ds_logprob_entry {
    int32_t id;
    float logprob;
} ds_logprob_entry;

/* What one sampling call reports. */
typedef struct ds_sample_result {
    int32_t token;
    float logprob;                          /* of `token` under the captured distribution */
    int rank;                               /* 1-based rank of `token` in that distribution */
    int n_top;
    ds_logprob_entry top[DS_MAX_TOP_LOGPROBS];
    bool nonfinite;                          /* the row held NaN or Inf: no token was chosen */
} ds_sample_result;

/* Per-thread scratch sized for a vocabulary. */
typedef struct ds_sampler_scratch ds_sampler_scratch;
ds_sampler_scratch *ds_sampler_scratch_new(int vocab);
void ds_sampler_scratch_free(ds_sampler_scratch *s);

/* History the penalties need: prompt ids and generated ids (counts are derived here). */
typedef struct ds_sample_history {
    const int32_t *prompt;
    int64_t n_prompt;
    const int32_t *generated;
    int64_t n_generated;
} ds_sample_history;

/* Sample one token from `logits` [vocab] (not modified).  `output_index` is the 0-based index
 * of the token being generated (the RNG counter); `seed` is the request's effective seed.  EOS
 * is an ordinary id here: whether it stops generation is the engine's business (ignore_eos).
 * Returns 0, or -1 when the row holds NaN or Inf (res->nonfinite set, no token chosen). */
int ds_sample_row(const float *logits, int vocab, const ds_token_mask *mask, const ds_sampling_params *p,
                  int64_t seed, int64_t output_index, const ds_sample_history *hist, ds_sampler_scratch *s,
                  ds_sample_result *res);

/* Whether ds_sample_row at this output index is plain greedy (temperature 0 or top-k 1, no bias,
 * penalties or logprobs, past min_tokens): the first id of the largest logit among the ids not
 * masked, which the model can find without every logit (model/head_screen.h). */
bool ds_sampling_greedy_only(const ds_sampling_params *p, int64_t output_index);
/* ds_sample_row's result for a plain greedy row whose id the model chose (id < 0: the row was not
 * finite; -1 with res->nonfinite set, as ds_sample_row). */
int ds_sample_greedy_id(int32_t id, ds_sample_result *res);

/* The distribution ds_sample_row samples from, written to probs [vocab]: masks, bias, penalties,
 * temperature and the top-k / top-p / min-p filters exactly as there (one-hot at temperature 0);
 * used by speculative decoding's acceptance test (SERVING.md §8.3).  -1 when the row is not finite. */
int ds_sample_probs(const float *logits, int vocab, const ds_token_mask *mask, const ds_sampling_params *p,
                    const ds_sample_history *hist, ds_sampler_scratch *s, float *probs);

/* Logprob of `id` and the top-n entries of the captured (masked, raw) distribution of a row;
 * used for prompt logprobs.  Returns -1 when the row is not finite. */
int ds_row_logprobs(const float *logits, int vocab, const ds_token_mask *mask, int32_t id, int n_top,
                    ds_sampler_scratch *s, ds_sample_result *res);

/* The counter-based Exp(1) draw for (seed, output index, token id); exposed for tests. */
double ds_sampler_exp_draw(int64_t seed, int64_t output_index, int32_t token);

#endif
