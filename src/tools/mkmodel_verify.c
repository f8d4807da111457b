/* mkmodel's self-check: load the release it just wrote with the real loader, run the real forward
 * pass on fixed prompts, and check what a fixture promises (MODEL.md §8):
 *  - every logit is finite and the logit spread is sane (standard deviation per row in
 *    [0.25, 50]: neither a constant distribution nor an overflow in the making);
 *  - for --smooth, every discrete choice had a clear margin: the model's margin probe records the
 *    smallest relative gap at each router, indexer and candidate-block top-k, and the generator
 *    prints them and fails when a gap is below the decisive threshold.
 * Prompts are pseudo-random ids (deterministic in the seed) of lengths up to 300, processed in
 * one prefill step each; that visits every layer role and, at 300 tokens, the indexer and
 * candidate selections of the tiny configuration. */
#include "tools/mkmodel.h"
#include "model/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DECISIVE_MIN 1e-3   /* relative margin a decisive fixture must keep (MODEL.md §8: ≫ 1e-3 rel.) */

int ds_mk_verify(const char *dir, const ds_config *cfg, uint64_t seed, bool smooth, bool quiet, ds_error *err);

int ds_mk_verify(const char *dir, const ds_config *cfg, uint64_t seed, bool smooth, bool quiet, ds_error *err) {
    ds_load_options lo = {0};
    lo.kernels = "auto";
    char eb[1024];
    ds_model *m = ds_model_load(dir, &lo, eb, sizeof eb);
    if (!m) return ds_fail(err, "E_VERIFY", "%s: the written checkpoint does not load: %s", dir, eb);
    ds_margin_stats ms;
    ds_margin_reset(&ms);
    ds_model_set_margin_probe(m, &ms);
    const bool small = cfg->dim <= 512;
    const int lens_small[] = {100, 211, 300}, lens_big[] = {48};
    const int *lens = small ? lens_small : lens_big;
    const int n_prompts = small ? 3 : 1;
    const int V = cfg->vocab_size;
    int rc = 0;
    double sd_min = INFINITY, sd_max = 0.0;
    for (int pi = 0; pi < n_prompts && !rc; pi++) {
        int n = lens[pi];
        int32_t *tok = ds_xmalloc(sizeof(int32_t) * (size_t)n);
        uint64_t st = ds_mk_tensor_seed(seed, "verify-prompt") + (uint64_t)pi;
        for (int i = 0; i < n; i++) {
            int32_t t;
            do { t = (int32_t)(ds_mk_mix(&st) % (uint64_t)V); } while (t == cfg->dspark_noise_id || t == cfg->image_token_id);
            tok[i] = t;
        }
        int n_logits = small ? n : 4;
        float *logits = ds_xmalloc(sizeof(float) * (size_t)n_logits * (size_t)V);
        ds_seq *s = ds_seq_new(m);
        if (!s || ds_seq_step(m, s, tok, n, logits, n_logits, eb, sizeof eb)) {
            rc = ds_fail(err, "E_VERIFY", "%s: forward pass on prompt %d (%d tokens) failed: %s", dir, pi, n, s ? eb : "no sequence");
        }
        for (int r = 0; r < n_logits && !rc; r++) {
            const float *l = logits + (size_t)r * (size_t)V;
            double sum = 0.0, sq = 0.0;
            for (int v = 0; v < V; v++) {
                if (!isfinite(l[v])) {
                    rc = ds_fail(err, "E_VERIFY", "%s: prompt %d row %d: expected finite logits, found %g at id %d", dir, pi, r, (double)l[v], v);
                    break;
                }
                sum += l[v];
                sq += (double)l[v] * l[v];
            }
            double mean = sum / V, sd = sqrt(DS_MAX(0.0, sq / V - mean * mean));
            sd_min = DS_MIN(sd_min, sd);
            sd_max = DS_MAX(sd_max, sd);
            if (!rc && !(sd >= 0.25 && sd <= 50.0))
                rc = ds_fail(err, "E_VERIFY", "%s: prompt %d row %d: expected a logit standard deviation in [0.25, 50], found %g", dir, pi, r, sd);
        }
        if (s) ds_seq_free(s);
        free(tok);
        free(logits);
    }
    ds_model_set_margin_probe(m, NULL);
    ds_model_free(m);
    if (rc) return rc;
    if (!quiet || smooth) {
        printf("mkmodel verify: %d prompt(s), logits finite, logit std %.3g..%.3g\n", n_prompts, sd_min, sd_max);
        printf("mkmodel margins: router %.3e (%lld choices), indexer %.3e (%lld), candidate blocks %.3e (%lld)%s\n", ms.router_min,
               (long long)ms.router_n, ms.indexer_min, (long long)ms.indexer_n, ms.cand_min, (long long)ms.cand_n,
               smooth ? " [decisive fixture]" : "");
    }
    if (smooth) {
        const char *what[3] = {"router", "indexer", "candidate-block"};
        double v[3] = {ms.router_min, ms.indexer_min, ms.cand_min};
        int64_t cnt[3] = {ms.router_n, ms.indexer_n, ms.cand_n};
        for (int k = 0; k < 3; k++)
            if (cnt[k] > 0 && !(v[k] >= DECISIVE_MIN))
                return ds_fail(err, "E_NOT_DECISIVE", "%s: expected every %s top-k margin >= %g (relative) in a --smooth fixture, found %.3e",
                               dir, what[k], DECISIVE_MIN, v[k]);
    }
    return 0;
}
