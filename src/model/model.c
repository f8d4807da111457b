/* ds_model: loading (checkpoint → config → weights → Engram constants → RoPE tables), freeing,
 * the small public queries, and the opt-in probes (trace, margins).
 *
 * Why loading is one linear sequence of checks: every failure must name its file, field, value and
 * limit (`E_CODE: <file>[: <tensor>]: expected <x>, found <y>`) and must leave nothing allocated,
 * so each stage either succeeds or returns through one cleanup path (ds_model_free of a partial
 * model is safe).  Engines and tools share one loaded model; it is never modified after load
 * except through the probe setters, which tests and tools use on a private model. */
#include "model/forward.h"
#include "model/draft.h"
#include "model/head_screen.h"
#include "base/threadpool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *ds_model_own(ds_model *m, void *p) {
    if (m->n_owned == m->cap_owned) {
        m->cap_owned = m->cap_owned ? 2 * m->cap_owned : 64;
        m->owned = ds_xrealloc(m->owned, sizeof(void *) * (size_t)m->cap_owned);
    }
    m->owned[m->n_owned++] = p;
    return p;
}

void ds_format_error(const ds_error *err, char *buf, size_t len) {
    if (!buf || !len) return;
    const char *code = err->code[0] ? err->code : "E_ERROR";
    size_t n = strlen(code);
    if (!strncmp(err->msg, code, n) && err->msg[n] == ':') snprintf(buf, len, "%s", err->msg);
    else snprintf(buf, len, "%s: %s", code, err->msg);
}

void ds_model_free(ds_model *m) {
    if (!m) return;
    if (m->draft && m->draft->head_screen != m->head_screen) ds_head_screen_free(m->draft->head_screen);
    ds_head_screen_free(m->head_screen);
    for (int i = 0; i < m->n_lins; i++) ds_linear_release(m->lins[i]);
    free(m->lins);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    ds_engram_free_resident(m);
    if (m->ckpt) ds_ckpt_close(m->ckpt);
    ds_model_free_step_scratch(m);
    pthread_mutex_destroy(&m->probe_mu);
    free(m->dir);
    free(m);
}

static int check_supported(const ds_model *m, ds_error *err) {
    const ds_config *c = &m->cfg;
    if (c->score_func != DS_SCORE_SQRTSOFTPLUS)
        return ds_fail(err, "E_CONFIG", "%s/config.json: scoring_func: expected sqrtsoftplus (the only score function this "
                       "engine implements), found another", m->dir);
    if (c->hc_mult < 1 || c->hc_mult > DS_HC_MAX)
        return ds_fail(err, "E_CONFIG", "%s/config.json: hc_mult: expected 1..%d, found %d", m->dir, DS_HC_MAX, c->hc_mult);
    if (c->rope_head_dim / 2 > DS_ROPE_MAX_PAIRS)
        return ds_fail(err, "E_CONFIG", "%s/config.json: qk_rope_head_dim: expected at most %d, found %d", m->dir,
                       2 * DS_ROPE_MAX_PAIRS, c->rope_head_dim);
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].ratio > DS_STATE_SLOTS)
            return ds_fail(err, "E_CONFIG", "%s/config.json: compress_ratios[%d]: expected at most %d, found %d", m->dir, l,
                           DS_STATE_SLOTS, c->roles[l].ratio);
    if (c->n_experts < c->n_active)
        return ds_fail(err, "E_CONFIG", "%s/config.json: num_experts_per_tok: expected at most %d, found %d", m->dir,
                       c->n_experts, c->n_active);
    return 0;
}

/* `activations` of the load options: "e4m3" is the official layout's own numerics (CHECKPOINT.md
 * §14), meaningless for W4A8 weights, so it is refused there rather than ignored. */
static int set_activations(ds_model *m, const char *act, ds_error *err) {
    if (!act || !strcmp(act, "int8")) return 0;
    if (strcmp(act, "e4m3"))
        return ds_fail(err, "E_ARG", "activations: expected \"int8\" or \"e4m3\", found \"%s\"", act);
    if (m->cfg.format != DS_FMT_FP8)
        return ds_fail(err, "E_ARG", "activations e4m3: %s/config.json: quantization_config: expected the official fp8 "
                       "layout (E4M3 activations are that format's numerics), found the W4A8 release", m->dir);
    m->act_e4m3 = 1;
    return 0;
}

ds_model *ds_model_load(const char *dir, const ds_load_options *opts, char *errbuf, size_t errlen) {
    ds_error err = {{0}, {0}};
    ds_load_options o = {0};
    if (opts) o = *opts;
    ds_model *m = ds_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->probe_mu, NULL);
    pthread_mutex_init(&m->step_mu, NULL);
    m->dir = ds_xstrdup(dir ? dir : "");
    if (ds_kernels_select(o.kernels ? o.kernels : "auto", &err) < 0) goto fail;
    /* before the pool starts and anything is mapped: workers and pages inherit the placement */
    if (ds_numa_place(o.numa_nodes, o.threads, &m->numa, &err)) goto fail;
    int tier = ds_numerics_parse(o.numerics ? o.numerics : "exact");
    if (tier < 0) {
        ds_fail(&err, "E_ARG", "numerics: expected \"exact\" or \"fast\", found \"%s\"", o.numerics);
        goto fail;
    }
    m->numerics = (ds_numerics)tier;
    /* config first, so the Engram checks (19, 23, 24) report before any tensor is touched */
    if (ds_config_load(m->dir, &m->cfg, &err) < 0) goto fail;
    const ds_config *c = &m->cfg;
    if (check_supported(m, &err) < 0) goto fail;
    if (set_activations(m, o.activations, &err) < 0) goto fail;
    m->max_len = o.max_model_len > 0 ? o.max_model_len : c->max_pos;
    if (m->max_len > c->max_pos) {
        ds_fail(&err, "E_CONFIG_MAXPOS", "%s/config.json: max_position_embeddings: expected at least the requested max "
                "model length %lld, found %lld", m->dir, (long long)m->max_len, (long long)c->max_pos);
        goto fail;
    }
    m->kv_bs = DS_DEFAULT_BLOCK;
    if (ds_rope_init(&m->rope_swa, c->rope_head_dim, c->rope_theta, 1.0, 0, c->beta_fast, c->beta_slow) < 0 ||
        ds_rope_init(&m->rope_cmp, c->rope_head_dim, c->compress_rope_theta, c->rope_factor, c->rope_orig_len,
                     c->beta_fast, c->beta_slow) < 0) {
        ds_fail(&err, "E_CONFIG", "%s/config.json: qk_rope_head_dim: expected an even value, found %d", m->dir, c->rope_head_dim);
        goto fail;
    }
    if (ds_model_init_engram(m, &err) < 0) goto fail;
    ds_ckpt_opts co;
    ds_ckpt_opts_default(&co);
    co.full = o.full_validation != 0;
    co.max_model_len = o.max_model_len;
    co.need_draft = o.draft > 0 && c->n_mtp_layers > 0;
    co.draft_optional = o.draft == 1;
    if (ds_ckpt_open(m->dir, &co, &m->ckpt, &err) < 0) goto fail;
    if (ds_model_bind_weights(m, &err) < 0) goto fail;
    if (ds_engram_make_resident(m, o.engram_residency, &err) < 0) goto fail;
    if (o.draft > 0 && ds_draft_load(m, o.draft == 2, &err) < 0) goto fail;
    /* every quantized linear was repacked while binding (ds_linear_prepare), so no forward pays
     * for it later (fast-tier float linears were copied the same way); say how much memory that
     * takes beside the mapped checkpoint */
    if (m->shard.size == 1 && !o.no_head_screen) {   /* a vocabulary split keeps full rows (dist/dist.h) */
        size_t hb = 0;
        m->head_screen = ds_head_screen_new(&m->head, &hb);
        m->packed_bytes += hb;
        if (m->head_screen)
            ds_log(DS_LOG_INFO, "head screen: int8 copy of the output head, %.1f MiB (greedy rows pick their token "
                   "without full logits)", (double)hb / 1048576.0);
        if (m->draft && m->draft->own_vocab) {   /* the draft's own head, likewise (draft_heads.c) */
            m->draft->head_screen = ds_head_screen_new(&m->draft->head, &hb);
            m->packed_bytes += m->draft->head_screen ? hb : 0;
        } else if (m->draft) {
            m->draft->head_screen = m->head_screen;
        }
    }
    ds_model_init_step_scratch(m, DS_STEP_ROWS_AT_LOAD);
    /* last: the head screens and the draft's Markov copy were built from the published rows */
    ds_model_release_published(m);
    if (m->shard.size > 1 && !(m->draft && !m->draft->own_vocab))   /* a draft without its own head reads it all */
        m->unread_bytes += ds_linear_code_bytes(&m->head) - ds_linear_code_bytes(&m->head_part);
    m->uncounted_bytes += m->unread_bytes;
    ds_log(DS_LOG_INFO, "kernels: %d linears prepared at load, %.1f MiB (%s tiles and fast-tier float copies); the "
           "mapped pages of %.1f MiB of published weights they replace given back; %.1f MiB other ranks serve left out "
           "of the memory plan", m->n_lins, (double)m->packed_bytes / 1048576.0, ds_kernels_active(),
           (double)m->released_bytes / 1048576.0, (double)m->unread_bytes / 1048576.0);
    return m;
fail:
    if (errbuf) ds_format_error(&err, errbuf, errlen);
    ds_model_free(m);
    return NULL;
}

int ds_model_vocab_size(const ds_model *m) { return m ? m->cfg.vocab_size : 0; }
int ds_model_eos_id(const ds_model *m) { return m ? m->cfg.eos_id : -1; }
const char *ds_model_numerics(const ds_model *m) { return ds_numerics_name(m ? m->numerics : DS_NUMERICS_EXACT); }
const char *ds_model_activations(const ds_model *m) { return m && m->act_e4m3 ? "e4m3" : "int8"; }

int32_t ds_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

void ds_model_set_trace(ds_model *m, ds_trace_fn fn, void *ctx) {
    m->trace = fn;
    m->trace_ctx = ctx;
}

void ds_margin_reset(ds_margin_stats *s) {
    memset(s, 0, sizeof *s);
    s->router_min = s->indexer_min = s->cand_min = INFINITY;
    s->bf16_min = INFINITY;
}

void ds_model_set_margin_probe(ds_model *m, ds_margin_stats *s) { m->margins = s; }

double ds_rel_gap(float vk, float vnext) {
    if (vnext == -INFINITY) return 1.0;
    double a = fabs((double)vk), b = fabs((double)vnext), den = a > b ? a : b;
    if (den == 0) return 0.0;
    return ((double)vk - (double)vnext) / den;
}

void ds_probe_gap(ds_model *m, int kind, float vk, float vnext) {
    ds_margin_stats *s = m->margins;
    if (!s) return;
    double g = ds_rel_gap(vk, vnext);
    pthread_mutex_lock(&m->probe_mu);
    double *mn = kind == 0 ? &s->router_min : kind == 1 ? &s->indexer_min : &s->cand_min;
    int64_t *cnt = kind == 0 ? &s->router_n : kind == 1 ? &s->indexer_n : &s->cand_n;
    if (g < *mn) *mn = g;
    (*cnt)++;
    pthread_mutex_unlock(&m->probe_mu);
}

void ds_probe_bf16(ds_model *m, const float *x, size_t n) {
    ds_margin_stats *s = m->margins;
    if (!s) return;
    double mn = INFINITY;
    for (size_t i = 0; i < n; i++) {
        float v = fabsf(x[i]);
        if (v == 0 || !isfinite(v)) continue;
        /* bf16 neighbours of v: lo (truncation) and lo + ulp; the rounding midpoint sits between */
        uint32_t u;
        memcpy(&u, &v, 4);
        uint32_t lo_bits = u & 0xffff0000u;
        float lo, hi;
        memcpy(&lo, &lo_bits, 4);
        uint32_t hi_bits = lo_bits + 0x10000u;
        memcpy(&hi, &hi_bits, 4);
        double ulp = (double)hi - (double)lo, mid = (double)lo + ulp / 2;
        double d = fabs((double)v - mid) / ulp;
        if (d < mn) mn = d;
    }
    pthread_mutex_lock(&m->probe_mu);
    if (mn < s->bf16_min) s->bf16_min = mn;
    s->bf16_n += (int64_t)n;
    pthread_mutex_unlock(&m->probe_mu);
}
