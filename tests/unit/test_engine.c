/* Engine tests on the synthetic backend: outputs equal an independent reference computed
 * position by position without pages (ds_synthetic_reference_logits + the sampler), for every
 * scheduling configuration — chunk budgets, prefix cache on/off, concurrency 1/8/32, gate on/off,
 * preemption under a tiny KV budget — and page accounting returns to idle. */
#include "check.h"
#include "engine/engine.h"
#include <math.h>
#include <unistd.h>

#define V 512
#define EOS 1

static ds_backend *mk_backend(int window, int nan_token) {
    ds_synthetic_options o = {.vocab = V, .window = window, .eos_id = EOS, .bos_id = 0, .pad_id = 2,
                              .noise_id = 300, .image_id = 310, .nan_token = nan_token, .peak = 8};
    return ds_backend_synthetic_new(&o);
}

/* Prompt i: a shared head of `shared` tokens then request-specific tokens. */
static void mk_prompt(int i, int len, int shared, int32_t *out) {
    for (int p = 0; p < len; p++) {
        uint32_t x = p < shared ? (uint32_t)p * 2654435761u : (uint32_t)(p * 40503 + i * 7919 + 13);
        out[p] = (int32_t)(3 + (x >> 7) % 280);
    }
}

typedef struct result {
    int n;
    int32_t ids[256];
    float lp[256];
} result;

/* Independent oracle: greedy / seeded sampling from reference logits. */
static void reference_run(ds_backend *be, const ds_token_mask *mask, const int32_t *prompt, int n_prompt,
                          const ds_sampling_params *sp, int64_t seed, result *out) {
    int32_t toks[2048];
    memcpy(toks, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int n = n_prompt;
    float *lg = malloc(sizeof(float) * V);
    ds_sampler_scratch *ss = ds_sampler_scratch_new(V);
    out->n = 0;
    while (out->n < sp->max_tokens) {
        ds_synthetic_reference_logits(be, toks, n - 1, lg);
        ds_sample_history h = {toks, n_prompt, toks + n_prompt, n - n_prompt};
        ds_sample_result res;
        if (ds_sample_row(lg, V, mask, sp, seed, out->n, &h, ss, &res)) break;
        out->ids[out->n] = res.token;
        out->lp[out->n++] = res.logprob;
        toks[n++] = res.token;
        if (res.token == EOS && !sp->ignore_eos) break;
    }
    free(lg);
    ds_sampler_scratch_free(ss);
}

typedef struct run_cfg {
    int max_num_seqs, budget, bs, window;
    bool prefix, gate;
    uint64_t kv_bytes;
    int n_req, prompt_len, shared, max_tokens;
    double temperature;
    int max_model_len;
} run_cfg;

static int run_engine(const run_cfg *c, result *res, ds_metrics *m, uint64_t *corruptions) {
    ds_backend *be = mk_backend(c->window, -1);
    ds_token_mask mask;
    ds_token_mask_init(&mask, V, 300, 0, 2, 310, NULL, 0, NULL, 0);
    ds_engine_config ec;
    ds_engine_config_defaults(&ec);
    ec.max_num_seqs = c->max_num_seqs;
    ec.max_num_batched_tokens = c->budget;
    ec.block_size = c->bs;
    ec.prefix_caching = c->prefix;
    ec.admission_gate = c->gate;
    ec.max_model_len = c->max_model_len ? c->max_model_len : 4096;
    ec.kv_budget_bytes = c->kv_bytes;
    ec.fingerprint = "test";
    ds_metrics_init(m);
    ds_error err = {0};
    ds_engine *e = ds_engine_create(&ec, be, &mask, m, NULL, &err);
    CHECK(e != NULL, "%s", err.msg);
    if (!e) return -1;
    ds_req *reqs[64];
    for (int i = 0; i < c->n_req; i++) {
        int32_t p[2048];
        int len = c->prompt_len + (i * 37) % 50;
        mk_prompt(i, len, c->shared, p);
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        sp.temperature = c->temperature;
        sp.has_seed = true;
        sp.seed = 1000 + i;
        sp.max_tokens = c->max_tokens;
        sp.logprobs = 0;
        sp.ignore_eos = true;
        char id[32];
        snprintf(id, sizeof id, "r%d", i);
        reqs[i] = ds_req_new(id, p, len, &sp);
        reqs[i]->want_text = false;
        ds_sampling_free(&sp);
        CHECK(ds_engine_submit(e, reqs[i]) == 0);
    }
    CHECK(ds_engine_wait_idle(e, 60) == 0, "engine did not go idle");
    for (int i = 0; i < c->n_req; i++) {
        ds_req *r = reqs[i];
        pthread_mutex_lock(&r->mu);
        CHECK(r->finished && r->end == DS_END_LENGTH, "req %d end %d", i, r->end);
        res[i].n = (int)r->n_out;
        for (int k = 0; k < r->n_out && k < 256; k++) {
            res[i].ids[k] = r->out_ids[k];
            res[i].lp[k] = r->out_lp[k].logprob;
        }
        pthread_mutex_unlock(&r->mu);
        ds_req_unref(r);
    }
    char msg[256] = "";
    CHECK(ds_engine_audit(e, msg, sizeof msg) == 0, "audit: %s", msg);
    ds_metrics_gauges g;
    ds_engine_gauges(e, &g);
    CHECK(g.blocks_used == 0, "blocks used after idle: %llu", (unsigned long long)g.blocks_used);
    *corruptions = ds_synthetic_corruptions(be);
    ds_engine_destroy(e);
    ds_backend_free(be);
    ds_token_mask_free(&mask);
    return 0;
}

static void check_against_reference(const run_cfg *c, const result *res, const char *what) {
    ds_backend *be = mk_backend(c->window, -1);
    ds_token_mask mask;
    ds_token_mask_init(&mask, V, 300, 0, 2, 310, NULL, 0, NULL, 0);
    for (int i = 0; i < c->n_req; i++) {
        int32_t p[2048];
        int len = c->prompt_len + (i * 37) % 50;
        mk_prompt(i, len, c->shared, p);
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        sp.temperature = c->temperature;
        sp.max_tokens = c->max_tokens;
        sp.ignore_eos = true;
        sp.logprobs = 0;
        result ref;
        reference_run(be, &mask, p, len, &sp, 1000 + i, &ref);
        CHECK(ref.n == res[i].n, "%s req %d: %d tokens vs reference %d", what, i, res[i].n, ref.n);
        int bad = 0;
        for (int k = 0; k < ref.n && k < res[i].n; k++)
            if (ref.ids[k] != res[i].ids[k] || ref.lp[k] != res[i].lp[k]) bad++;
        CHECK(bad == 0, "%s req %d: %d tokens/logprobs differ from the reference", what, i, bad);
    }
    ds_backend_free(be);
    ds_token_mask_free(&mask);
}

static run_cfg base_cfg(void) {
    run_cfg c = {.max_num_seqs = 8, .budget = 64, .bs = 16, .window = 20, .prefix = true, .gate = true,
                 .kv_bytes = 8u << 20, .n_req = 12, .prompt_len = 70, .shared = 40, .max_tokens = 24,
                 .temperature = 0};
    return c;
}

TEST(engine_matches_reference_across_schedules) {
    struct { int seqs, budget; bool prefix, gate; double temp; } v[] = {
        {1, 16, false, true, 0},  {8, 64, true, true, 0},    {32, 1000, true, true, 0},
        {8, 17, true, false, 0},  {32, 48, false, false, 0}, {8, 64, true, true, 0.8},
        {32, 1000, false, true, 0.8},
    };
    for (size_t k = 0; k < DS_ARRAY_LEN(v); k++) {
        run_cfg c = base_cfg();
        c.max_num_seqs = v[k].seqs;
        c.budget = v[k].budget < c.max_num_seqs ? c.max_num_seqs : v[k].budget;
        if (c.budget < c.bs) c.budget = c.bs;
        c.prefix = v[k].prefix;
        c.gate = v[k].gate;
        c.temperature = v[k].temp;
        result res[64];
        ds_metrics m;
        uint64_t corrupt = 0;
        run_engine(&c, res, &m, &corrupt);
        char what[96];
        snprintf(what, sizeof what, "seqs=%d budget=%d prefix=%d gate=%d T=%.1f", c.max_num_seqs, c.budget, c.prefix,
                 c.gate, c.temperature);
        CHECK(corrupt == 0, "%s: %llu page reads disagreed with the token history", what, (unsigned long long)corrupt);
        CHECK(atomic_load(&m.gate_violations) == 0, "%s: gate violations", what);
        check_against_reference(&c, res, what);
        ds_metrics_destroy(&m);
    }
}

TEST(engine_prefix_cache_hits_and_stays_exact) {
    run_cfg c = base_cfg();
    c.max_num_seqs = 1; /* sequential: later requests find the shared head cached */
    c.shared = 64;
    result res[64];
    ds_metrics m;
    uint64_t corrupt = 0;
    run_engine(&c, res, &m, &corrupt);
    CHECK(atomic_load(&m.prefix_hits) > 0, "no prefix-cache hits");
    CHECK(corrupt == 0, "corrupt reads: %llu", (unsigned long long)corrupt);
    check_against_reference(&c, res, "prefix");
    ds_metrics_destroy(&m);
}

/* One request through an engine; returns its cached_tokens and copies its output ids. */
static int64_t run_one(ds_engine *e, const int32_t *p, int len, int32_t *out, int max_out) {
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    sp.max_tokens = max_out;
    sp.ignore_eos = true;
    ds_req *r = ds_req_new("rep", p, len, &sp);
    r->want_text = false;
    ds_sampling_free(&sp);
    CHECK(ds_engine_submit(e, r) == 0);
    CHECK(ds_engine_wait_idle(e, 60) == 0, "engine did not go idle");
    pthread_mutex_lock(&r->mu);
    int64_t hit = r->cached_tokens;
    CHECK(r->finished && r->n_out == max_out, "prompt %d: end %d after %lld tokens", len, r->end, (long long)r->n_out);
    for (int k = 0; k < max_out && k < r->n_out; k++) out[k] = r->out_ids[k];
    pthread_mutex_unlock(&r->mu);
    ds_req_unref(r);
    return hit;
}

/* Issue 10 #4: a prompt sent twice must hit every full block §7.2 allows, (P-1)/bs blocks, at
 * every length — also when P ends more than a window past the last block boundary (a 1000-token
 * prompt used to hit nothing) — and the hit must not change the output.  Windows shorter than,
 * equal to and longer than a block; lengths up to max-model-len. */
TEST(engine_repeated_prompt_hits_every_full_block) {
    struct { int window, bs; } g[] = {{20, 16}, {16, 16}, {46, 16}, {46, 128}, {200, 64}};
    const int lens[] = {17, 30, 33, 70, 100, 127, 129, 300, 1000, 1500, 2040};
    const int max_len = 2048, n_out = 4;
    for (size_t gi = 0; gi < DS_ARRAY_LEN(g); gi++) {
        ds_backend *be = mk_backend(g[gi].window, -1);
        ds_token_mask mask;
        ds_token_mask_init(&mask, V, 300, 0, 2, 310, NULL, 0, NULL, 0);
        ds_engine_config ec;
        ds_engine_config_defaults(&ec);
        ec.max_num_seqs = 4;
        ec.max_num_batched_tokens = 512;
        ec.block_size = g[gi].bs;
        ec.max_model_len = max_len;
        ec.kv_budget_bytes = 64u << 20;
        ec.fingerprint = "test";
        ds_metrics m;
        ds_metrics_init(&m);
        ds_error err = {0};
        ds_engine *e = ds_engine_create(&ec, be, &mask, &m, NULL, &err);
        CHECK(e != NULL, "%s", err.msg);
        if (!e) continue;
        uint64_t want_hits = 0, queried = 0;
        for (size_t li = 0; li < DS_ARRAY_LEN(lens); li++) {
            int len = lens[li];
            if (len + n_out > max_len) continue;
            int32_t p[2048], first[8], second[8];
            mk_prompt(1000 + (int)li, len, 0, p);
            int64_t h1 = run_one(e, p, len, first, n_out);
            int64_t h2 = run_one(e, p, len, second, n_out);
            int64_t want = (int64_t)((len - 1) / g[gi].bs) * g[gi].bs;
            CHECK(h1 == 0, "window %d bs %d prompt %d: first send hit %lld", g[gi].window, g[gi].bs, len, (long long)h1);
            CHECK(h2 == want, "window %d bs %d prompt %d: repeat hit %lld tokens, expected %lld", g[gi].window, g[gi].bs,
                  len, (long long)h2, (long long)want);
            CHECK(!memcmp(first, second, sizeof(int32_t) * n_out), "window %d bs %d prompt %d: output changed on a hit",
                  g[gi].window, g[gi].bs, len);
            want_hits += (uint64_t)want;
            queried += 2u * (uint64_t)len;
        }
        CHECK(atomic_load(&m.prefix_hits) == want_hits && atomic_load(&m.prefix_queries) == queried,
              "window %d bs %d: metrics %llu hits / %llu queried, expected %llu / %llu", g[gi].window, g[gi].bs,
              (unsigned long long)atomic_load(&m.prefix_hits), (unsigned long long)atomic_load(&m.prefix_queries),
              (unsigned long long)want_hits, (unsigned long long)queried);
        CHECK(ds_synthetic_corruptions(be) == 0, "window %d bs %d: corrupt page reads", g[gi].window, g[gi].bs);
        char msg[256] = "";
        CHECK(ds_engine_audit(e, msg, sizeof msg) == 0, "audit: %s", msg);
        ds_engine_destroy(e);
        ds_metrics_destroy(&m);
        ds_backend_free(be);
        ds_token_mask_free(&mask);
    }
}

TEST(engine_preemption_under_tiny_kv_is_exact) {
    run_cfg c = base_cfg();
    c.max_num_seqs = 8;
    c.n_req = 10;
    c.prompt_len = 60;
    c.max_tokens = 60;
    /* ~40 blocks of 16: 8 requests of ~130 tokens need ~70, so decodes must preempt */
    c.max_model_len = 256;
    c.kv_bytes = 40ull * 256 + 8ull * (3 * 128 + 256) + 2 * 128;
    result res[64];
    ds_metrics m;
    uint64_t corrupt = 0;
    run_engine(&c, res, &m, &corrupt);
    CHECK(atomic_load(&m.preemptions) > 0, "expected preemptions with a tiny KV budget");
    CHECK(corrupt == 0, "corrupt reads: %llu", (unsigned long long)corrupt);
    check_against_reference(&c, res, "preempt");
    ds_metrics_destroy(&m);
}

TEST(engine_gate_long_prefill_beside_decodes) {
    ds_backend *be = mk_backend(20, -1);
    ds_token_mask mask;
    ds_token_mask_init(&mask, V, 300, 0, 2, 310, NULL, 0, NULL, 0);
    ds_engine_config ec;
    ds_engine_config_defaults(&ec);
    ec.max_num_seqs = 16;
    ec.max_num_batched_tokens = 64;
    ec.block_size = 16;
    ec.max_model_len = 4096;
    ec.kv_budget_bytes = 16u << 20;
    ds_metrics m;
    ds_metrics_init(&m);
    ds_error err;
    ds_engine *e = ds_engine_create(&ec, be, &mask, &m, NULL, &err);
    ds_req *r[9];
    for (int i = 0; i < 9; i++) {
        int32_t p[2048];
        int len = i < 8 ? 10 : 1500; /* 8 short decoders, then one long prompt (24 chunks) */
        mk_prompt(i, len, 0, p);
        ds_sampling_params sp;
        ds_sampling_defaults(&sp);
        sp.temperature = 0;
        sp.max_tokens = i < 8 ? 60 : 4;
        sp.ignore_eos = true;
        r[i] = ds_req_new("g", p, len, &sp);
        r[i]->want_text = false;
        ds_sampling_free(&sp);
        ds_engine_submit(e, r[i]);
        if (i == 7) { /* let the decoders start before the long prompt arrives */
            for (int t = 0; t < 2000; t++) {
                pthread_mutex_lock(&r[7]->mu);
                bool started = r[7]->n_out > 0;
                pthread_mutex_unlock(&r[7]->mu);
                if (started) break;
                usleep(1000);
            }
        }
    }
    CHECK(ds_engine_wait_idle(e, 60) == 0);
    CHECK(atomic_load(&m.gate_violations) == 0);
    CHECK(atomic_load(&m.gate_prefill) >= 24, "prefill steps %llu", (unsigned long long)atomic_load(&m.gate_prefill));
    CHECK(atomic_load(&m.gate_max_decode_stall) == 1, "a decode waited %llu prefill chunks",
          (unsigned long long)atomic_load(&m.gate_max_decode_stall));
    for (int i = 0; i < 9; i++) ds_req_unref(r[i]);
    ds_engine_destroy(e);
    ds_metrics_destroy(&m);
    ds_backend_free(be);
    ds_token_mask_free(&mask);
}

TEST(engine_cancel_and_nan_release_pages) {
    ds_backend *be = mk_backend(20, 7);
    ds_token_mask mask;
    ds_token_mask_init(&mask, V, 300, 0, 2, 310, NULL, 0, NULL, 0);
    mask.masked[7] = 1; /* token 7 triggers NaN rows: only a prompt may contain it, never a sample */
    ds_engine_config ec;
    ds_engine_config_defaults(&ec);
    ec.max_num_seqs = 8;
    ec.max_num_batched_tokens = 64;
    ec.block_size = 16;
    ec.max_model_len = 4096;
    ec.kv_budget_bytes = 8u << 20;
    ds_metrics m;
    ds_metrics_init(&m);
    ds_error err;
    ds_engine *e = ds_engine_create(&ec, be, &mask, &m, NULL, &err);
    int32_t p[100];
    mk_prompt(1, 100, 0, p);
    for (int i = 0; i < 100; i++)
        if (p[i] == 7) p[i] = 8;
    ds_sampling_params sp;
    ds_sampling_defaults(&sp);
    sp.temperature = 0;
    sp.max_tokens = 3000;
    sp.ignore_eos = true;
    ds_req *a = ds_req_new("long", p, 100, &sp);
    a->want_text = false;
    p[99] = 7; /* the row after token 7 is NaN: fails at its first token */
    ds_req *b = ds_req_new("nan", p, 100, &sp);
    b->want_text = false;
    ds_engine_submit(e, a);
    ds_engine_submit(e, b);
    for (int t = 0; t < 5000; t++) {
        pthread_mutex_lock(&a->mu);
        bool go = a->n_out > 5;
        pthread_mutex_unlock(&a->mu);
        if (go) break;
        usleep(1000);
    }
    ds_engine_cancel(e, a);
    CHECK(ds_engine_wait_idle(e, 30) == 0);
    CHECK(a->finished && a->end == DS_END_CANCELLED, "cancelled end=%d", a->end);
    CHECK(b->finished && b->end == DS_END_ERROR && b->err_status == 500, "nan end=%d status=%d", b->end, b->err_status);
    CHECK(atomic_load(&m.numeric_errors) == 1);
    CHECK(atomic_load(&m.cancelled) == 1);
    ds_metrics_gauges g;
    ds_engine_gauges(e, &g);
    CHECK(g.blocks_used == 0 && g.running == 0 && g.waiting == 0);
    char msg[256];
    CHECK(ds_engine_audit(e, msg, sizeof msg) == 0, "%s", msg);
    ds_req_unref(a);
    ds_req_unref(b);
    ds_sampling_free(&sp);
    ds_engine_destroy(e);
    ds_metrics_destroy(&m);
    ds_backend_free(be);
    ds_token_mask_free(&mask);
}

RUN_ALL()
