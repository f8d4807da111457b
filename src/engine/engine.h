/* The serving engine (SERVING.md §1–§7, §9): request queue, continuous batching, chunked
 * prefill, the admission gate, preemption by recompute, paged KV with prefix caching, sampling
 * and stop conditions.
 *
 * Why it is built this way: one engine thread owns every piece of scheduler and KV state, so
 * none of it needs locks; the HTTP threads talk to it only through submit/cancel (a locked
 * inbox drained once per step) and read results from the request object, whose output part is
 * guarded by the request's own mutex and signalled with its condition variable.  A slow or dead
 * client therefore never stalls a step.  A request object is reference counted because both
 * sides hold it: the front end until its response is written, the engine until it is finished.
 *
 * Detokenization and stop strings run on the engine thread (stop conditions are checked token by
 * token in commit order, §2 rule 2) through a small callback interface, so the engine does not
 * depend on the tokenizer module; the server plugs its tokenizer in. */
#ifndef DS_ENGINE_ENGINE_H
#define DS_ENGINE_ENGINE_H
#include "base/common.h"
#include "engine/backend.h"
#include "engine/metrics.h"
#include "engine/sampler.h"
#include "engine/stop_match.h"
#include "engine/textbuf.h"
#include <pthread.h>
#include <stdatomic.h>

typedef struct ds_engine ds_engine;

typedef struct ds_engine_config {
    int max_num_seqs;                 /* 32 */
    int max_num_batched_tokens;       /* 8192 */
    int block_size;                   /* 128 */
    bool prefix_caching;              /* true */
    bool admission_gate;              /* true */
    int max_prefill_seqs;             /* 1 */
    int gate_decode_steps_per_chunk;  /* 1 */
    int64_t max_model_len;
    int max_pending;                  /* 1024 */
    uint64_t kv_budget_bytes;         /* B_kv */
    bool kv_high_first;               /* --debug-kv-alloc-order high-first */
    bool kv_fault;                    /* --debug-kv-fault-page given: corrupt CKV page kv_fault_page */
    uint32_t kv_fault_page;           /* (ds_kvm_debug_fault; zero-initialised configs leave it off) */
    const char *fingerprint;          /* model + KV format identity (prefix-cache seed) */
    int prompt_logprobs_chunk;        /* row cap per step for requests with prompt_logprobs (256) */
    /* speculative decoding (SERVING.md §8): S, the batch-size schedule, the collapse guard */
    int spec_tokens;                  /* S: 0 = off (needs a backend with a draft) */
    int n_spec_sched;                 /* ranges of --spec-tokens-per-batch-size (0 = K = S always) */
    struct { int lo, hi, k; } spec_sched[16];
    int spec_guard;                   /* DS_SPEC_GUARD_* */
    double spec_min_accept;           /* per-request guard: drafting pauses when the mean acceptance length
                                         of a request's last 16 verify steps is below this (SERVING.md
                                         §8.5: 1.5, also what 0 means; serve raises it to the break-even
                                         it measures, ds_spec_measure_cost) */
    bool spec_backoff;                /* each further pause of a request in a row lasts twice as long,
                                         up to 16x (serve --spec-policy measured; the spec: 64 steps each) */
} ds_engine_config;

enum { DS_SPEC_GUARD_OFF = 0, DS_SPEC_GUARD_WARN, DS_SPEC_GUARD_ON };
/* Parse "lo-hi:K,..." into cfg (ranges non-overlapping, covering 1..max_num_seqs, K <= S);
 * -1 with err naming the offending range. */
int ds_spec_schedule_parse(ds_engine_config *cfg, const char *text, ds_error *err);
void ds_engine_config_defaults(ds_engine_config *c);

/* Incremental detokenizer plugged in by the server. */
typedef struct ds_detok_ops {
    void *ctx;
    void *(*open)(void *ctx);
    /* newly completed text for one id (NULL + *len 0 when none) */
    const char *(*push)(void *st, int32_t id, size_t *len);
    const char *(*flush)(void *st, size_t *len);
    void (*close)(void *st);
    /* optional: true for ids that skip_special drops besides BOS/EOS/PAD (tokenizer "special" flag) */
    bool (*is_special)(void *ctx, int32_t id);
} ds_detok_ops;

typedef enum { DS_REQ_WAITING = 0, DS_REQ_PREFILL, DS_REQ_DECODE, DS_REQ_DONE } ds_req_state;
typedef enum { DS_END_NONE = 0, DS_END_STOP, DS_END_LENGTH, DS_END_CANCELLED, DS_END_ERROR } ds_req_end;

typedef struct ds_req {
    /* ---- set by the creator before submit, then read-only ---- */
    char id[64];
    int32_t *prompt;
    int64_t n_prompt;
    ds_sampling_params sp;
    int64_t seed;                 /* effective seed */
    char *cache_salt;
    bool skip_special;            /* drop BOS/EOS/PAD and other special ids from text */
    bool want_text;               /* run the detokenizer */
    bool exclude_metrics;         /* self-check traffic */
    double t_arrival;

    /* ---- engine thread only ---- */
    ds_req_state state;
    int32_t *tokens;              /* prompt + generated */
    int64_t n_tokens, cap_tokens;
    int64_t n_computed;
    ds_kv_seqtab tab;
    void *seq;
    uint64_t admit_order;
    void *detok;
    ds_stop_matcher stopm;
    int64_t n_plp_done;           /* prompt-logprob positions captured */
    bool reached_decode;
    bool in_step;                 /* has a row in the step being built */
    /* speculative decoding (spec_engine.c) */
    int32_t drafts[8];            /* proposals for the positions after tokens[n_tokens-1] */
    int n_drafts;                 /* proposals held (valid while drafts_at == n_tokens) */
    int64_t drafts_at;
    int spec_k;                   /* drafts verified by this request's row in the current step */
    float *spec_q;                /* [block][vocab] draft distributions (sampled requests) */
    uint8_t spec_hist[16];        /* accepted drafts of the last 16 verify steps (per-request guard) */
    int spec_hist_n;
    int spec_off;                 /* verify steps left with K = 0 after the per-request guard fired */
    int spec_pauses;              /* pauses in a row (ds_engine_config.spec_backoff lengthens each) */

    /* ---- output, guarded by mu ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t version;             /* bumped on every change */
    int32_t *out_ids;
    ds_sample_result *out_lp;     /* per output token when sp.logprobs >= 0 */
    int64_t n_out, cap_out;
    ds_tbuf text;                 /* released text (stop strings held back and removed) */
    ds_sample_result *plp;        /* prompt logprobs, [n_prompt]; entry 0 unused (null) */
    int64_t n_plp;
    bool finished;
    ds_req_end end;
    bool stopped_by_eos;          /* EOS (not a stop string or stop id) ended it */
    int err_status;
    char err_code[40];
    char err_msg[256];
    int64_t cached_tokens;        /* prefix-cache hit of the first admission */
    double t_first_token, t_finish;

    atomic_bool cancel;
    atomic_bool cancel_shutdown;  /* the cancel comes from the shutdown deadline (for the log line) */
    atomic_int refs;
} ds_req;

/* A request holding a copy of the prompt and parameters; refs = 1 (the creator's). */
ds_req *ds_req_new(const char *id, const int32_t *prompt, int64_t n, const ds_sampling_params *sp);
void ds_req_ref(ds_req *r);
void ds_req_unref(ds_req *r);
/* Wait until r->version differs from `seen` or `timeout_s` passes.  Call with r->mu held. */
void ds_req_wait_locked(ds_req *r, uint64_t seen, double timeout_s);

ds_engine *ds_engine_create(const ds_engine_config *cfg, ds_backend *be, const ds_token_mask *mask,
                            ds_metrics *metrics, const ds_detok_ops *detok, ds_error *err);
/* Stop the engine thread; unfinished requests end with a 503 error. */
void ds_engine_destroy(ds_engine *e);
/* Queue a request (the engine takes a reference).  Returns 0, or -1 when running + waiting has
 * reached max_pending (429), or the engine is stopping. */
int ds_engine_submit(ds_engine *e, ds_req *r);
/* Ask the engine to drop a request at the next step boundary (client disconnect). */
void ds_engine_cancel(ds_engine *e, ds_req *r);
/* Drop evictable prefix-cache entries at the next step boundary; returns after it happened. */
void ds_engine_reset_prefix_cache(ds_engine *e);
void ds_engine_gauges(ds_engine *e, ds_metrics_gauges *g);
const ds_kv_budget *ds_engine_kv_plan(const ds_engine *e);
/* §4.5 addressing self-test over the engine's pools; report receives the PASS/FAIL line. */
int ds_engine_kv_selftest(ds_engine *e, char *report, size_t len);
/* Block until no request is running or waiting, or timeout; returns 0 when idle. */
int ds_engine_wait_idle(ds_engine *e, double timeout_s);
/* Page-accounting audit run between steps (tests); 0 = consistent. */
int ds_engine_audit(ds_engine *e, char *msg, size_t len);

#endif
