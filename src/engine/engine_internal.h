/* The engine object (private to src/engine).  Fields below `state_mu` are owned by the engine
 * thread and touched by other threads only while holding state_mu (audit, self-test); the inbox
 * and flags are guarded by mu; gauges are atomics so /metrics never waits for a step. */
#ifndef DS_ENGINE_INTERNAL_H
#define DS_ENGINE_INTERNAL_H
#include "engine/engine.h"

struct ds_engine {
    ds_engine_config cfg;
    ds_backend *be;
    const ds_token_mask *mask;
    ds_metrics *m;
    ds_detok_ops detok;
    bool has_detok;
    ds_kvm km;
    pthread_t thr;

    pthread_mutex_t mu;          /* inbox, stopping, reset flags */
    pthread_cond_t cv;           /* wakes the engine thread */
    pthread_cond_t idle_cv;      /* prefix-cache reset completion */
    ds_req **inbox;
    int n_inbox, cap_inbox;
    bool stopping, reset_pc;
    uint64_t reset_done;
    atomic_int n_live;           /* submitted and not finished */

    pthread_mutex_t state_mu;    /* held by the engine thread for a whole step */
    ds_req **waiting;
    int n_waiting, cap_waiting;
    ds_req **running;            /* admission order */
    int n_running, cap_running;
    uint64_t admit_counter;
    int forced_decode, empty_streak;
    int decode_since_prefill;    /* decode steps since the last prefill-only step */
    int prefill_since_decode;    /* prefill steps since the last decode step (stall) */
    int prefill_episode;
    uint64_t steps;
    bool warned_preempt;
    ds_backend_item *items;
    ds_req **item_req;
    int n_items, cap_items;
    float *logits;
    size_t logits_cap;
    int32_t *greedy_ids;           /* [logits rows] ids of the items answered greedily (backend.h) */
    size_t greedy_cap;
    ds_sampler_scratch *ss;
    ds_sampler_scratch **ss_pool;    /* one per compute-pool thread (ss_pool[0] == ss) */
    int n_ss;
    size_t *item_row;                /* first logits row of each item */
    int cap_item_row;
    uint64_t promised[DS_KV_KINDS];  /* pages promised to lazy-backend rows of the step being built */

    /* speculative decoding (spec_engine.c) */
    bool spec_on;                    /* drafting enabled (cleared by the global guard) */
    atomic_int g_spec_enabled;
    uint8_t spec_ring[256];          /* accepted drafts of the last 256 verify steps */
    int spec_ring_n, spec_ring_i;
    double spec_last_log, spec_last_warn;
    uint64_t spec_log_base[3 + DS_SPEC_MAX_POS];   /* drafts, draft tokens, accepted, per pos at the last log */
    float *spec_p;                   /* [K+1][vocab] target distributions of one verify row set */

    atomic_int g_running, g_waiting;
    atomic_uint_fast64_t g_blocks_used, g_blocks_evictable;
};

/* Engine pieces shared with spec_engine.c. */
void ds_engine_commit_token(ds_engine *e, ds_req *r, const ds_sample_result *res);
void ds_engine_fail_numeric(ds_engine *e, ds_req *r);
void ds_spec_engine_init(ds_engine *e);
void ds_spec_engine_free(ds_engine *e);
/* Drafts this request verifies in the step being built (0: a plain decode row). */
int ds_spec_k_for(ds_engine *e, ds_req *r, int n_decoding);
/* The per-request guard (SERVING.md §8.5, decision 165) after a verify step that accepted `acc`
 * drafts: returns the pause it starts (verify steps with K = 0), 0 when none. */
int ds_spec_guard_request(const ds_engine_config *cfg, ds_req *r, int acc);
/* Accept/commit of a verify item after the forward pass (rows = its K+1 logits rows). */
void ds_spec_finish_item(ds_engine *e, int k, const float *rows);
/* engine_rows.c: before a step, point each item whose every logits row is plain greedy at its slots
 * of e->greedy_ids (n_logits: the step's logits rows); after it, sample the last row of the n
 * items item[0..n) on the compute pool (rc 0, or -1 for a row that is not finite). */
void ds_engine_ask_greedy_ids(ds_engine *e, size_t n_logits);
void ds_engine_sample_items(ds_engine *e, const int *item, int n, ds_sample_result *res, int *rc);
/* After a step: draft passes for the requests that committed tokens, metrics log line. */
void ds_spec_after_step(ds_engine *e);

#endif
