/* Sampler (SERVING.md §9) and stop-string tests.  Logprobs are checked against a long-double
 * log-softmax computed here; sampling semantics against the exact filtered distributions over a
 * small vocabulary (empirical frequencies over many seeded draws). */
#include "check.h"
#include "engine/sampler.h"
#include "engine/stop_match.h"
#include <math.h>

static void fill(float *x, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) % 10000) / 1000.0f - 5.0f;
    }
}

TEST(sampler_greedy_ties_and_logprobs_match_oracle) {
    enum { N = 300 };
    float x[N];
    fill(x, N, 7);
    x[17] = 9.0f;
    x[40] = 9.0f; /* tie: the lower id wins */
    ds_token_mask mask;
    ds_token_mask_init(&mask, N, 250, 0, 2, -1, NULL, 0, NULL, 0);
    ds_sampler_scratch *s = ds_sampler_scratch_new(N);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 0;
    p.logprobs = 5;
    ds_sample_result r;
    CHECK(ds_sample_row(x, N, &mask, &p, 1, 0, NULL, s, &r) == 0);
    CHECK(r.token == 17, "greedy picked %d", r.token);
    /* oracle log-softmax over unmasked ids */
    long double mx = -INFINITY, sum = 0;
    for (int i = 0; i < N; i++) if (!mask.masked[i] && x[i] > mx) mx = x[i];
    for (int i = 0; i < N; i++) if (!mask.masked[i]) sum += expl((long double)x[i] - mx);
    long double lse = mx + logl(sum);
    CHECK(fabsl((long double)r.logprob - ((long double)x[17] - lse)) < 1e-6, "logprob %g", r.logprob);
    CHECK(r.n_top == 5 && r.top[0].id == 17 && r.top[1].id == 40, "top order %d %d", r.top[0].id, r.top[1].id);
    for (int k = 1; k < r.n_top; k++) CHECK(r.top[k - 1].logprob >= r.top[k].logprob);
    for (int k = 0; k < r.n_top; k++) CHECK(fabsl((long double)r.top[k].logprob - ((long double)x[r.top[k].id] - lse)) < 1e-6);
    CHECK(r.rank == 1);
    ds_sample_result q;
    CHECK(ds_row_logprobs(x, N, &mask, 40, 3, s, &q) == 0 && q.rank == 2, "rank of tied id: %d", q.rank);
    /* top_k = 1 is greedy whatever the temperature */
    p.temperature = 1.5;
    p.top_k = 1;
    CHECK(ds_sample_row(x, N, &mask, &p, 99, 3, NULL, s, &r) == 0 && r.token == 17);
    /* non-finite rows are refused */
    x[5] = NAN;
    CHECK(ds_sample_row(x, N, &mask, &p, 1, 0, NULL, s, &r) == -1 && r.nonfinite);
    ds_sampler_scratch_free(s);
    ds_token_mask_free(&mask);
}

TEST(sampler_greedy_fast_path_equals_full_path) {
    enum { N = 5000 };
    float *x = malloc(sizeof(float) * N);
    ds_token_mask mask;
    ds_token_mask_init(&mask, N, 100, 0, 2, 4000, NULL, 0, NULL, 0);
    ds_sampler_scratch *s = ds_sampler_scratch_new(N);
    ds_sampling_params fast, full;
    ds_sampling_defaults(&fast);
    fast.temperature = 0;
    full = fast;
    full.logprobs = 0; /* forces the full path */
    for (uint32_t k = 0; k < 200; k++) {
        fill(x, N, k + 1);
        x[(k * 37) % N] = 6.0f; /* sometimes a masked id holds the maximum */
        ds_sample_result a, b;
        CHECK(ds_sample_row(x, N, &mask, &fast, 1, 0, NULL, s, &a) == 0);
        CHECK(ds_sample_row(x, N, &mask, &full, 1, 0, NULL, s, &b) == 0);
        CHECK(a.token == b.token && !mask.masked[a.token], "row %u: fast %d full %d", k, a.token, b.token);
    }
    x[7] = INFINITY;
    ds_sample_result r;
    CHECK(ds_sample_row(x, N, &mask, &fast, 1, 0, NULL, s, &r) == -1 && r.nonfinite);
    free(x);
    ds_sampler_scratch_free(s);
    ds_token_mask_free(&mask);
}

TEST(sampler_mask_never_sampled_nor_listed) {
    enum { N = 64 };
    float x[N];
    fill(x, N, 3);
    ds_token_mask mask;
    int32_t spare[] = {1};
    ds_token_mask_init(&mask, N, 40, 0, 2, 50, NULL, 0, spare, 1);
    CHECK(mask.masked[40] && mask.masked[0] && mask.masked[2] && mask.masked[50] && mask.masked[51] && !mask.masked[1]);
    CHECK(mask.count == 5, "count %d", mask.count);
    x[40] = 50.0f; /* the noise id is the largest logit */
    ds_sampler_scratch *s = ds_sampler_scratch_new(N);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 1.5;
    p.logprobs = 20;
    p.n_bias = 1;
    p.bias_ids = malloc(sizeof(int32_t));
    p.bias_vals = malloc(sizeof(float));
    p.bias_ids[0] = 50;
    p.bias_vals[0] = 100; /* bias cannot lift a masked id */
    int bad = 0, listed = 0;
    for (int i = 0; i < 200000; i++) {
        ds_sample_result r;
        ds_sample_row(x, N, &mask, &p, 12345, i, NULL, s, &r);
        bad += mask.masked[r.token];
        if (i % 1000 == 0)
            for (int k = 0; k < r.n_top; k++) listed += mask.masked[r.top[k].id];
    }
    CHECK(bad == 0 && listed == 0, "masked ids sampled %d, listed %d", bad, listed);
    ds_sampling_free(&p);
    ds_sampler_scratch_free(s);
    ds_token_mask_free(&mask);
}

/* Empirical frequencies over many draws against the exact filtered distribution. */
static void check_distribution(const float *x, int n, const ds_sampling_params *p, const double *want, const char *what) {
    ds_sampler_scratch *s = ds_sampler_scratch_new(n);
    int cnt[16] = {0};
    const int draws = 200000;
    for (int i = 0; i < draws; i++) {
        ds_sample_result r;
        ds_sample_row(x, n, NULL, p, 777, i, NULL, s, &r);
        cnt[r.token]++;
    }
    for (int i = 0; i < n; i++) {
        double f = (double)cnt[i] / draws, sd = sqrt(want[i] * (1 - want[i]) / draws);
        CHECK(fabs(f - want[i]) <= 5 * sd + 1e-9, "%s: id %d frequency %.4f, expected %.4f", what, i, f, want[i]);
    }
    ds_sampler_scratch_free(s);
}

TEST(sampler_temperature_topk_topp_minp_semantics) {
    float x[8] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, 1.0f, -1.0f, 0.2f};
    double w[8], z = 0;
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    /* temperature 0.7 */
    p.temperature = 0.7;
    for (int i = 0; i < 8; i++) z += w[i] = exp(x[i] / 0.7);
    for (int i = 0; i < 8; i++) w[i] /= z;
    check_distribution(x, 8, &p, w, "T=0.7");
    /* top-k 3: ids 0, 1, 5 (ties: lower id first, so 1 before 5) */
    p.temperature = 1.0;
    p.top_k = 3;
    z = exp(2.0) + exp(1.0) + exp(1.0);
    for (int i = 0; i < 8; i++) w[i] = (i == 0 || i == 1 || i == 5) ? exp(x[i]) / z : 0;
    check_distribution(x, 8, &p, w, "top_k=3");
    /* top-p: the smallest prefix (by prob, ties by id) with mass >= top_p */
    p.top_k = -1;
    double all = 0;
    for (int i = 0; i < 8; i++) all += exp(x[i]);
    double m0 = exp(2.0) / all, m1 = exp(1.0) / all;
    p.top_p = m0 + m1 + 1e-4; /* needs 0, 1 and 5 */
    z = exp(2.0) + 2 * exp(1.0);
    for (int i = 0; i < 8; i++) w[i] = (i == 0 || i == 1 || i == 5) ? exp(x[i]) / z : 0;
    check_distribution(x, 8, &p, w, "top_p");
    p.top_p = m0 + m1 - 1e-4; /* 0 and 1 suffice */
    z = exp(2.0) + exp(1.0);
    for (int i = 0; i < 8; i++) w[i] = (i == 0 || i == 1) ? exp(x[i]) / z : 0;
    check_distribution(x, 8, &p, w, "top_p tie");
    /* min-p 0.3: keep p_i >= 0.3 p_max, i.e. x_i >= 2 + ln 0.3 = 0.796 */
    p.top_p = 1.0;
    p.min_p = 0.3;
    z = exp(2.0) + 2 * exp(1.0);
    for (int i = 0; i < 8; i++) w[i] = (x[i] >= 2.0f + (float)log(0.3)) ? exp(x[i]) / z : 0;
    check_distribution(x, 8, &p, w, "min_p");
}

TEST(sampler_seeded_draws_are_batch_independent) {
    enum { N = 100 };
    float a[N], b[N];
    fill(a, N, 11);
    fill(b, N, 12);
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    ds_sampler_scratch *s = ds_sampler_scratch_new(N);
    ds_sample_result r1, r2, r3, r4;
    ds_sample_row(a, N, NULL, &p, 42, 5, NULL, s, &r1);
    ds_sample_row(b, N, NULL, &p, 43, 9, NULL, s, &r2);
    ds_sample_row(b, N, NULL, &p, 43, 9, NULL, s, &r4);
    ds_sample_row(a, N, NULL, &p, 42, 5, NULL, s, &r3);
    CHECK(r1.token == r3.token && r2.token == r4.token, "order of rows changed a draw");
    int diff = 0;
    for (int i = 0; i < 50; i++) {
        ds_sample_row(a, N, NULL, &p, 42, i, NULL, s, &r3);
        ds_sample_row(a, N, NULL, &p, 42, i + 1000, NULL, s, &r4);
        diff += r3.token != r4.token;
    }
    CHECK(diff > 10, "different output indices should draw differently (%d/50 differ)", diff);
    CHECK(ds_sampler_exp_draw(1, 2, 3) == ds_sampler_exp_draw(1, 2, 3) && ds_sampler_exp_draw(1, 2, 3) > 0);
    ds_sampler_scratch_free(s);
}

TEST(sampler_penalties_and_bias) {
    float x[4] = {2.0f, 1.9f, -1.0f, 0.5f};
    ds_sampling_params p;
    ds_sampling_defaults(&p);
    p.temperature = 0;
    ds_sampler_scratch *s = ds_sampler_scratch_new(4);
    int32_t gen[] = {0, 0};
    int32_t prompt[] = {1};
    ds_sample_history h = {prompt, 1, gen, 2};
    ds_sample_result r;
    ds_sample_row(x, 4, NULL, &p, 0, 0, &h, s, &r);
    CHECK(r.token == 0);
    p.presence_penalty = 0.2; /* 2.0 - 0.2 = 1.8 < 1.9 */
    ds_sample_row(x, 4, NULL, &p, 0, 0, &h, s, &r);
    CHECK(r.token == 1, "presence %d", r.token);
    p.presence_penalty = 0;
    p.frequency_penalty = 0.04; /* 2.0 - 2*0.04 = 1.92 > 1.9; 0.06 -> 1.88 */
    ds_sample_row(x, 4, NULL, &p, 0, 0, &h, s, &r);
    CHECK(r.token == 0, "frequency small %d", r.token);
    p.frequency_penalty = 0.06;
    ds_sample_row(x, 4, NULL, &p, 0, 0, &h, s, &r);
    CHECK(r.token == 1, "frequency %d", r.token);
    p.frequency_penalty = 0;
    p.repetition_penalty = 1.5; /* both 0 (generated) and 1 (prompt) are divided: 1.333 vs 1.267 */
    ds_sample_row(x, 4, NULL, &p, 0, 0, &h, s, &r);
    CHECK(r.token == 0, "repetition %d", r.token);
    /* logprobs are captured before penalties: the chosen logprob is the raw one */
    p.logprobs = 0;
    ds_sample_row(x, 4, NULL, &p, 0, 0, &h, s, &r);
    double lse = log(exp(2.0) + exp(1.9) + exp(-1.0) + exp(0.5));
    CHECK(fabs(r.logprob - (2.0 - lse)) < 1e-6, "raw logprob %g", r.logprob);
    ds_sampler_scratch_free(s);
}

TEST(stop_strings_across_pushes) {
    const char *stops[] = {"END", "xyz"};
    ds_stop_matcher m;
    ds_stop_init(&m, stops, 2);
    ds_tbuf out = {0};
    CHECK(ds_stop_push(&m, "hello E", 7, &out) == 0);
    CHECK(out.n == 6 && !memcmp(out.s, "hello ", 6), "held back the possible start: '%s'", out.s);
    CHECK(ds_stop_push(&m, "N", 1, &out) == 0 && out.n == 6);
    CHECK(ds_stop_push(&m, "Dafter", 6, &out) == 1);
    CHECK(out.n == 6 && !strcmp(out.s, "hello "), "text before the stop only: '%s'", out.s);
    CHECK(ds_stop_push(&m, "more", 4, &out) == 1 && out.n == 6);
    ds_stop_free(&m);
    ds_tbuf_free(&out);
    ds_stop_init(&m, stops, 2);
    ds_stop_push(&m, "ab E", 4, &out);
    ds_stop_flush(&m, &out);
    CHECK(!strcmp(out.s, "ab E"), "flush releases held text: '%s'", out.s);
    ds_stop_free(&m);
    ds_tbuf_free(&out);
    /* earliest match wins across stop strings */
    ds_stop_init(&m, stops, 2);
    CHECK(ds_stop_push(&m, "1xyz2END", 8, &out) == 1 && !strcmp(out.s, "1"));
    ds_stop_free(&m);
    ds_tbuf_free(&out);
}

RUN_ALL()
