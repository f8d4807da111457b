/* config.json parsing (MODEL.md §1.1, CHECKPOINT.md §13) in both spellings, and the two-file
 * agreement check of ds_config_load.
 *
 * The plain fields are driven by the table in config_fields.h: one lookup function knows the HF
 * rule (`text_config` first, then the top level, nested names such as rope_scaling.factor) and the
 * flat rule (top level, flat names), and records which fields were present, so that the agreement
 * check between config.json and inference/config.json compares exactly the fields both files state.
 * Requiredness is explicit per field: a field the math depends on and for which the specification
 * gives no default is an E_CONFIG error when absent, never a silently assumed value.
 *
 * Engram multipliers exceed 2^53 and cJSON stores numbers as doubles, so they are read from the raw
 * JSON text by a small scanner that walks the document structure (strings and nesting respected)
 * and parses the integers (or decimal strings) exactly; cJSON is used only to locate and
 * shape-check them. */
#define _GNU_SOURCE
#include "io/config.h"
#include "io/config_fields.h"
#include "io/io_util.h"
#include "base/fsutil.h"
#include <cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OFF(f) offsetof(ds_config, f)
#define BIG 2147483647.0
const cf_field ds_cf_fields[] = {
    {"vocab_size", NULL, "vocab_size", CF_INT, OFF(vocab_size), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"hidden_size", NULL, "dim", CF_INT, OFF(dim), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"num_hidden_layers", NULL, "n_layers", CF_INT, OFF(n_layers), 0, 0, CF_ALWAYS, 0, 1, DS_MAX_LAYERS},
    {"num_nextn_predict_layers", NULL, "n_mtp_layers", CF_INT, OFF(n_mtp_layers), 0, 0, CF_OPT, 0, 0, DS_MAX_LAYERS},
    {"num_attention_heads", NULL, "n_heads", CF_INT, OFF(n_heads), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"head_dim", NULL, "head_dim", CF_INT, OFF(head_dim), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"qk_rope_head_dim", NULL, "rope_head_dim", CF_INT, OFF(rope_head_dim), 0, 0, CF_ALWAYS, 0, 0, BIG},
    {"q_lora_rank", NULL, "q_lora_rank", CF_INT, OFF(q_lora_rank), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"o_groups", NULL, "o_groups", CF_INT, OFF(o_groups), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"o_lora_rank", NULL, "o_lora_rank", CF_INT, OFF(o_lora_rank), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"rms_norm_eps", NULL, "norm_eps", CF_DBL, OFF(norm_eps), 0, 0, CF_ALWAYS, 0, 0, 1},
    {"sliding_window", NULL, "window_size", CF_INT, OFF(window), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"compress_ratios", NULL, "compress_ratios", CF_INTS, OFF(compress_ratios), OFF(n_compress), DS_MAX_LAYERS, CF_ALWAYS, 0, 0, BIG},
    {"kv_source_layer_ids", NULL, "kv_source_layers", CF_INTS, OFF(kv_src), OFF(n_kv_src), DS_MAX_LIST, CF_OPT, 0, 0, BIG},
    {"index_source_layer_ids", NULL, "index_source_layers", CF_INTS, OFF(idx_src), OFF(n_idx_src), DS_MAX_LIST, CF_OPT, 0, 0, BIG},
    {"candidate_source_layer_id", NULL, "candidate_source_layer", CF_INT, OFF(cand_layer), 0, 0, CF_OPT, -1, -1, BIG},
    {"candidate_topk_blocks", NULL, "candidate_topk_blocks", CF_INT, OFF(cand_topk_blocks), 0, 0, CF_CAND, 0, 1, BIG},
    {"candidate_block_size", NULL, "candidate_block_size", CF_INT, OFF(cand_block_size), 0, 0, CF_CAND, 0, 1, BIG},
    {"index_n_heads", NULL, "index_n_heads", CF_INT, OFF(index_n_heads), 0, 0, CF_INDEX, 0, 1, BIG},
    {"index_head_dim", NULL, "index_head_dim", CF_INT, OFF(index_head_dim), 0, 0, CF_INDEX, 0, 1, BIG},
    {"index_topk", NULL, "index_topk", CF_INT, OFF(index_topk), 0, 0, CF_INDEX, 0, 1, BIG},
    {"rope_theta", NULL, "rope_theta", CF_DBL, OFF(rope_theta), 0, 0, CF_ALWAYS, 0, 1e-300, 1e300},
    {"compress_rope_theta", NULL, "compress_rope_theta", CF_DBL, OFF(compress_rope_theta), 0, 0, CF_ALWAYS, 0, 1e-300, 1e300},
    /* YaRN: absent rope_scaling means no YaRN (original length 0); betas default to the reference's 32 / 1. */
    {"rope_scaling.factor", NULL, "rope_factor", CF_DBL, OFF(rope_factor), 0, 0, CF_OPT, 1, 1e-300, 1e300},
    {"rope_scaling.original_max_position_embeddings", NULL, "original_seq_len", CF_I64, OFF(rope_orig_len), 0, 0, CF_OPT, 0, 0, 9e15},
    {"rope_scaling.beta_fast", NULL, "beta_fast", CF_DBL, OFF(beta_fast), 0, 0, CF_OPT, 32, -1e300, 1e300},
    {"rope_scaling.beta_slow", NULL, "beta_slow", CF_DBL, OFF(beta_slow), 0, 0, CF_OPT, 1, -1e300, 1e300},
    {"max_position_embeddings", NULL, NULL, CF_I64, OFF(max_pos), 0, 0, CF_ALWAYS, 0, 1, 9e15},
    {"n_routed_experts", NULL, "n_routed_experts", CF_INT, OFF(n_experts), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"num_experts_per_tok", NULL, "n_activated_experts", CF_INT, OFF(n_active), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"n_shared_experts", NULL, "n_shared_experts", CF_INT, OFF(n_shared), 0, 0, CF_ALWAYS, 0, 0, BIG},
    {"moe_intermediate_size", NULL, "moe_inter_dim", CF_INT, OFF(moe_inter), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"norm_topk_prob", NULL, "norm_topk_prob", CF_BOOL, OFF(norm_topk_prob), 0, 0, CF_ALWAYS, 0, 0, 1},
    {"routed_scaling_factor", NULL, "route_scale", CF_DBL, OFF(route_scale), 0, 0, CF_ALWAYS, 0, -1e300, 1e300},
    {"gate_temp", NULL, "gate_temp", CF_DBL, OFF(gate_temp), 0, 0, CF_OPT, 1.0, 1e-300, 1e300},
    {"swiglu_limit", NULL, "swiglu_limit", CF_DBL, OFF(swiglu_limit), 0, 0, CF_ALWAYS, 0, -1e300, 1e300},
    {"hc_mult", NULL, "hc_mult", CF_INT, OFF(hc_mult), 0, 0, CF_ALWAYS, 0, 1, 64},
    {"hc_sinkhorn_iters", NULL, "hc_sinkhorn_iters", CF_INT, OFF(hc_sinkhorn_iters), 0, 0, CF_ALWAYS, 0, 1, BIG},
    {"hc_eps", NULL, "hc_eps", CF_DBL, OFF(hc_eps), 0, 0, CF_ALWAYS, 0, 0, 1},
    {"engram_layer_ids", NULL, "engram_layer_ids", CF_INTS, OFF(engram_layers), OFF(n_engram), DS_MAX_LIST, CF_OPT, 0, 0, BIG},
    {"engram_num_embeddings", NULL, "engram_num_embeddings", CF_I64S, OFF(engram_rows), OFF(n_engram_rows), DS_MAX_LIST, CF_ENGRAM, 0, 1, 9e15},
    {"engram_max_ngram_size", NULL, "engram_max_ngram_size", CF_INT, OFF(engram_max_ngram), 0, 0, CF_ENGRAM, 0, 2, DS_MAX_NGRAM},
    {"engram_vocab_size", NULL, "engram_vocab_size", CF_I64, OFF(engram_vocab_size), 0, 0, CF_ENGRAM, 0, 1, 9e15},
    {"engram_n_heads", NULL, "engram_n_heads", CF_INT, OFF(engram_n_heads), 0, 0, CF_ENGRAM, 0, 1, BIG},
    {"engram_head_dim", NULL, "engram_head_dim", CF_INT, OFF(engram_head_dim), 0, 0, CF_ENGRAM, 0, 1, BIG},
    {"engram_pad_token_id", "engram_pad_id", "engram_pad_id", CF_INT, OFF(engram_pad_id), 0, 0, CF_ENGRAM, 0, 0, BIG},
    {"engram_compressed_vocab_size", NULL, "engram_compressed_vocab_size", CF_INT, OFF(engram_classes), 0, 0, CF_ENGRAM, 0, 1, BIG},
    {"dspark_block_size", NULL, "dspark_block_size", CF_INT, OFF(dspark_block), 0, 0, CF_DRAFT, 0, 1, BIG},
    {"dspark_noise_token_id", NULL, "dspark_noise_token_id", CF_INT, OFF(dspark_noise_id), 0, 0, CF_DRAFT, 0, 0, BIG},
    {"dspark_target_layer_ids", NULL, "dspark_target_layer_ids", CF_INTS, OFF(dspark_targets), OFF(n_dspark_targets), DS_MAX_LIST, CF_DRAFT, 0, 0, BIG},
    {"dspark_markov_rank", NULL, "dspark_markov_rank", CF_INT, OFF(dspark_markov_rank), 0, 0, CF_DRAFT, 0, 1, BIG},
    {"dspark_n_routed_experts", NULL, "dspark_n_routed_experts", CF_INT, OFF(dspark_n_experts), 0, 0, CF_OPT, 0, 0, BIG},
    {"dspark_num_experts_per_tok", NULL, "dspark_n_activated_experts", CF_INT, OFF(dspark_n_active), 0, 0, CF_OPT, 0, 0, BIG},
    {"bos_token_id", NULL, NULL, CF_INT, OFF(bos_id), 0, 0, CF_OPT, 0, 0, BIG},
    {"eos_token_id", NULL, NULL, CF_INT, OFF(eos_id), 0, 0, CF_OPT, 1, 0, BIG},
    {"pad_token_id", NULL, NULL, CF_INT, OFF(pad_id), 0, 0, CF_OPT, 2, 0, BIG},
    {"image_token_id", NULL, "image_token_id", CF_INT, OFF(image_token_id), 0, 0, CF_OPT, -1, -1, BIG},
};
const int ds_cf_n_fields = (int)DS_ARRAY_LEN(ds_cf_fields);
#define MAX_FIELDS 96

/* ---------------------------------------------------------------------------------------- */
/* Exact multipliers from the raw text                                                       */

typedef struct { const char *b, *e; } span;

static const char *sk_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}
static const char *sk_str(const char *p, const char *e) { /* p at '"' */
    for (p++; p < e; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}
/* Skip one value; when `want` is non-NULL and the value is an object, record the value span of key
 * `want` at this level into *found, and if `nested` is given, descend into that key's object too. */
static const char *sk_val(const char *p, const char *e, int depth, const char *want, span *found, const char *nested, span *found_nested);
static const char *sk_obj(const char *p, const char *e, int depth, const char *want, span *found, const char *nested, span *found_nested) {
    p = sk_ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    while (p && p < e) {
        if (*p != '"') return NULL;
        const char *kb = p + 1, *ke = sk_str(p, e);
        if (!ke) return NULL;
        size_t kn = (size_t)(ke - 1 - kb);
        p = sk_ws(ke, e);
        if (p >= e || *p != ':') return NULL;
        p = sk_ws(p + 1, e);
        const char *vb = p;
        int is_want = want && strlen(want) == kn && !memcmp(kb, want, kn);
        int is_nest = nested && strlen(nested) == kn && !memcmp(kb, nested, kn);
        if (is_nest && p < e && *p == '{') p = sk_obj(p, e, depth + 1, want, found_nested, NULL, NULL);
        else p = sk_val(p, e, depth + 1, NULL, NULL, NULL, NULL);
        if (!p) return NULL;
        if (is_want && found) { found->b = vb; found->e = p; }
        p = sk_ws(p, e);
        if (p < e && *p == ',') { p = sk_ws(p + 1, e); continue; }
        if (p < e && *p == '}') return p + 1;
        return NULL;
    }
    return NULL;
}
static const char *sk_val(const char *p, const char *e, int depth, const char *want, span *found, const char *nested, span *found_nested) {
    if (depth > 64 || p >= e) return NULL;
    if (*p == '{') return sk_obj(p, e, depth, want, found, nested, found_nested);
    if (*p == '"') return sk_str(p, e);
    if (*p == '[') {
        p = sk_ws(p + 1, e);
        if (p < e && *p == ']') return p + 1;
        while (p && p < e) {
            p = sk_val(p, e, depth + 1, NULL, NULL, NULL, NULL);
            if (!p) return NULL;
            p = sk_ws(p, e);
            if (p < e && *p == ',') { p = sk_ws(p + 1, e); continue; }
            if (p < e && *p == ']') return p + 1;
            return NULL;
        }
        return NULL;
    }
    while (p < e && !strchr(",}] \t\r\n", *p)) p++; /* number, true, false, null */
    return p;
}

/* Parse an exact non-negative int64 written as a JSON integer or a decimal string. */
static const char *parse_exact_i64(const char *p, const char *e, int64_t *out) {
    int quoted = 0;
    if (p < e && *p == '"') { quoted = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') return NULL;
    uint64_t v = 0;
    while (p < e && *p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_C(9223372036854775807) - d) / 10) return NULL;
        v = v * 10 + d;
        p++;
    }
    if (quoted) { if (p >= e || *p != '"') return NULL; p++; }
    else if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) return NULL;
    *out = (int64_t)v;
    return p;
}

static int parse_multipliers(span s, const char *path, const char *fname, ds_config *cfg, ds_error *err) {
    const char *p = sk_ws(s.b, s.e), *e = s.e;
    const char *bad = "expected a list of lists of exact non-negative integers (JSON integers or decimal strings)";
    if (p >= e || *p != '[') return ds_io_fail(err, "E_CONFIG", path, fname, "%s, found another value", bad);
    p = sk_ws(p + 1, e);
    int nl = 0, per = -1;
    while (p < e && *p != ']') {
        if (*p != '[' || nl >= DS_MAX_LIST) return ds_io_fail(err, "E_CONFIG", path, fname, "%s (at most %d layers), found another value", bad, DS_MAX_LIST);
        p = sk_ws(p + 1, e);
        int k = 0;
        while (p < e && *p != ']') {
            int64_t v;
            if (k >= DS_MAX_NGRAM || !(p = parse_exact_i64(p, e, &v)))
                return ds_io_fail(err, "E_CONFIG", path, fname, "%s (at most %d per layer), found a non-integer or too many items in row %d", bad, DS_MAX_NGRAM, nl);
            cfg->engram_multipliers[nl][k++] = v;
            p = sk_ws(p, e);
            if (p < e && *p == ',') p = sk_ws(p + 1, e);
        }
        if (p >= e) break;
        if (per >= 0 && per != k)
            return ds_io_fail(err, "E_CONFIG", path, fname, "expected every layer's list to have %d items, found %d in row %d", per, k, nl);
        per = k;
        nl++;
        p = sk_ws(p + 1, e);
        if (p < e && *p == ',') p = sk_ws(p + 1, e);
    }
    cfg->has_engram_multipliers = true;
    cfg->n_mult_layers = nl;
    cfg->n_mult_per_layer = per < 0 ? 0 : per;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Lookup                                                                                    */

typedef struct { const cJSON *root, *tc; bool hf; const char *path; } jsrc;

static const cJSON *jget_path(const cJSON *obj, const char *dotted) {
    char part[128];
    const char *s = dotted;
    while (obj && *s) {
        const char *d = strchr(s, '.');
        size_t n = d ? (size_t)(d - s) : strlen(s);
        if (n >= sizeof part) return NULL;
        memcpy(part, s, n);
        part[n] = 0;
        obj = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, part) : NULL;
        s = d ? d + 1 : s + n;
    }
    return obj && !cJSON_IsNull(obj) ? obj : NULL;
}

/* Finds a field in the active spelling; *shown receives the name to print in messages. */
static const cJSON *lookup(const jsrc *s, const char *hf, const char *hf_alt, const char *flat, char *shown, size_t n) {
    if (!s->hf) {
        snprintf(shown, n, "%s", flat ? flat : hf);
        return flat ? jget_path(s->root, flat) : NULL;
    }
    const char *names[2] = {hf, hf_alt};
    for (int i = 0; i < 2; i++) {
        if (!names[i]) continue;
        const cJSON *v = s->tc ? jget_path(s->tc, names[i]) : NULL;
        if (v) { snprintf(shown, n, "text_config.%s", names[i]); return v; }
        if ((v = jget_path(s->root, names[i]))) { snprintf(shown, n, "%s", names[i]); return v; }
    }
    snprintf(shown, n, "%s%s", s->tc ? "text_config." : "", hf);
    return NULL;
}

static bool field_required(const cf_field *f, const ds_config *c) {
    switch (f->req) {
    case CF_ALWAYS: return true;
    case CF_ENGRAM: return c->n_engram > 0;
    case CF_INDEX: return c->n_idx_src > 0;
    case CF_CAND: return c->cand_layer >= 0;
    case CF_DRAFT: return c->n_mtp_layers > 0;
    default: return false;
    }
}

static int parse_field(const jsrc *s, const cf_field *f, ds_config *c, uint8_t *present, bool lenient, ds_error *err) {
    char name[160], b1[256];
    const cJSON *v = lookup(s, f->hf, f->hf_alt, s->hf ? NULL : f->flat, name, sizeof name);
    if (!s->hf && !f->flat) v = NULL;
    char *base = (char *)c;
    if (!v) {
        *present = 0;
        if (!lenient && field_required(f, c) && (s->hf || f->flat)) {
            const char *what = f->type == CF_DBL ? "a number" : f->type == CF_BOOL ? "a boolean" : f->type >= CF_INTS ? "a list of integers" : "an integer";
            return ds_io_fail(err, "E_CONFIG", s->path, name, "expected %s, found nothing (key absent)", what);
        }
        switch (f->type) {
        case CF_INT: *(int *)(base + f->off) = (int)f->def; break;
        case CF_I64: *(int64_t *)(base + f->off) = (int64_t)f->def; break;
        case CF_DBL: *(double *)(base + f->off) = f->def; break;
        case CF_BOOL: *(bool *)(base + f->off) = f->def != 0; break;
        default: *(int *)(base + f->cnt_off) = 0; break;
        }
        return 0;
    }
    *present = 1;
    switch (f->type) {
    case CF_INT:
    case CF_I64: {
        int64_t x;
        if (!ds_io_json_int(v, (int64_t)f->lo, (int64_t)f->hi, &x))
            return ds_io_fail(err, "E_CONFIG", s->path, name, "expected an integer in [%.0f, %.0f], found %s", f->lo, f->hi, ds_io_json_brief(b1, sizeof b1, v));
        if (f->type == CF_INT) *(int *)(base + f->off) = (int)x;
        else *(int64_t *)(base + f->off) = x;
        return 0;
    }
    case CF_DBL:
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < f->lo || v->valuedouble > f->hi)
            return ds_io_fail(err, "E_CONFIG", s->path, name, "expected a number in [%g, %g], found %s", f->lo, f->hi, ds_io_json_brief(b1, sizeof b1, v));
        *(double *)(base + f->off) = v->valuedouble;
        return 0;
    case CF_BOOL:
        if (!cJSON_IsBool(v)) return ds_io_fail(err, "E_CONFIG", s->path, name, "expected true or false, found %s", ds_io_json_brief(b1, sizeof b1, v));
        *(bool *)(base + f->off) = cJSON_IsTrue(v);
        return 0;
    case CF_INTS:
    case CF_I64S: {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 0 || n > f->max_n)
            return ds_io_fail(err, "E_CONFIG", s->path, name, "expected a list of at most %d integers, found %s", f->max_n, ds_io_json_brief(b1, sizeof b1, v));
        for (int i = 0; i < n; i++) {
            int64_t x;
            const cJSON *it = cJSON_GetArrayItem(v, i);
            if (!ds_io_json_int(it, (int64_t)f->lo, (int64_t)f->hi, &x))
                return ds_io_fail(err, "E_CONFIG", s->path, name, "item %d: expected an integer in [%.0f, %.0f], found %s", i, f->lo, f->hi,
                                  ds_io_json_brief(b1, sizeof b1, it));
            if (f->type == CF_INTS) ((int *)(base + f->off))[i] = (int)x;
            else ((int64_t *)(base + f->off))[i] = x;
        }
        *(int *)(base + f->cnt_off) = n;
        return 0;
    }
    }
    return 0;
}

/* Keys whose value is fixed for this architecture (MODEL.md §1.1 / rule 6): present and different
 * means a model this engine does not implement. */
static int check_fixed(const jsrc *s, ds_error *err) {
    static const struct { const char *hf; int kind; double num; const char *str; } fx[] = {
        {"num_key_value_heads", 0, 1, NULL}, {"num_hash_layers", 0, 0, NULL}, {"first_k_dense_replace", 0, 0, NULL},
        {"tie_word_embeddings", 1, 0, NULL}, {"hidden_act", 2, 0, "silu"}, {"topk_method", 2, 0, "noaux_tc"},
    };
    char name[160], b1[256];
    if (!s->hf) return 0;
    for (size_t i = 0; i < DS_ARRAY_LEN(fx); i++) {
        const cJSON *v = lookup(s, fx[i].hf, NULL, NULL, name, sizeof name);
        if (!v) continue;
        int ok = fx[i].kind == 0 ? (cJSON_IsNumber(v) && v->valuedouble == fx[i].num)
               : fx[i].kind == 1 ? cJSON_IsFalse(v)
                                 : (cJSON_IsString(v) && !strcmp(v->valuestring, fx[i].str));
        if (!ok) {
            char exp[64];
            if (fx[i].kind == 0) snprintf(exp, sizeof exp, "%g", fx[i].num);
            else if (fx[i].kind == 1) snprintf(exp, sizeof exp, "false");
            else snprintf(exp, sizeof exp, "\"%s\"", fx[i].str);
            return ds_io_fail(err, "E_CONFIG", s->path, name, "rule 6 (fixed architecture value): expected %s, found %s", exp, ds_io_json_brief(b1, sizeof b1, v));
        }
    }
    return 0;
}

static int parse_special(const jsrc *s, const char *text, ds_config *c, bool lenient, ds_error *err) {
    char name[160], b1[256];
    const char *path = s->path;
    /* router score function */
    const cJSON *v = lookup(s, "scoring_func", NULL, "score_func", name, sizeof name);
    if (!v && lenient) c->score_func = DS_SCORE_SQRTSOFTPLUS;
    else if (!cJSON_IsString(v)) return ds_io_fail(err, "E_CONFIG", path, name, "expected \"sqrtsoftplus\", \"softmax\" or \"sigmoid\", found %s", ds_io_json_brief(b1, sizeof b1, v));
    else if (!strcmp(v->valuestring, "sqrtsoftplus")) c->score_func = DS_SCORE_SQRTSOFTPLUS;
    else if (!strcmp(v->valuestring, "softmax")) c->score_func = DS_SCORE_SOFTMAX;
    else if (!strcmp(v->valuestring, "sigmoid")) c->score_func = DS_SCORE_SIGMOID;
    else return ds_io_fail(err, "E_CONFIG", path, name, "expected \"sqrtsoftplus\", \"softmax\" or \"sigmoid\", found %s", ds_io_json_brief(b1, sizeof b1, v));
    /* YaRN type tag */
    const cJSON *rs = s->hf ? lookup(s, "rope_scaling", NULL, NULL, name, sizeof name) : NULL;
    if (rs) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
        if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "yarn")))
            return ds_io_fail(err, "E_CONFIG", path, "rope_scaling.rope_type", "expected \"yarn\", found %s", ds_io_json_brief(b1, sizeof b1, ty));
    }
    /* number format */
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(s->root, "quantization_config");
    if (q && !cJSON_IsNull(q)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(q, "model_quant_type");
        if (cJSON_IsString(m) && !strcmp(m->valuestring, "ascend")) {
            if (!cJSON_IsString(t) || strcmp(t->valuestring, "W4A8_DYNAMIC"))
                return ds_io_fail(err, "E_CONFIG_QUANT", path, "quantization_config.model_quant_type", "expected \"W4A8_DYNAMIC\", found %s",
                                  ds_io_json_brief(b1, sizeof b1, t));
            c->format = DS_FMT_W4A8;
        } else if (cJSON_IsString(m) && !strcmp(m->valuestring, "fp8")) {
            c->format = DS_FMT_FP8;
        } else {
            return ds_io_fail(err, "E_CONFIG_QUANT", path, "quantization_config.quant_method", "expected \"ascend\" or \"fp8\", found %s",
                              ds_io_json_brief(b1, sizeof b1, m));
        }
    } else if (!s->hf) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(s->root, "dtype");
        if (!dt || cJSON_IsNull(dt)) c->format = DS_FMT_NONE;
        else if (cJSON_IsString(dt) && !strcmp(dt->valuestring, "fp8")) c->format = DS_FMT_FP8;
        else if (cJSON_IsString(dt) && (!strcmp(dt->valuestring, "bf16") || !strcmp(dt->valuestring, "bfloat16"))) c->format = DS_FMT_NONE;
        else return ds_io_fail(err, "E_CONFIG_QUANT", path, "dtype", "expected \"fp8\" or \"bf16\", found %s", ds_io_json_brief(b1, sizeof b1, dt));
    } else {
        c->format = DS_FMT_NONE;
    }
    /* Engram rotation config (CHECKPOINT.md §13): top level, also accepted inside text_config. */
    c->engram_gate_original_basis = true;
    c->engram_value_rotated = true;
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(s->root, "engram_rotation_config");
    if ((!rc || cJSON_IsNull(rc)) && s->tc) rc = cJSON_GetObjectItemCaseSensitive(s->tc, "engram_rotation_config");
    if (rc && !cJSON_IsNull(rc)) {
        if (!cJSON_IsObject(rc)) return ds_io_fail(err, "E_CONFIG", path, "engram_rotation_config", "expected an object, found %s", ds_io_json_brief(b1, sizeof b1, rc));
        const cJSON *vr = cJSON_GetObjectItemCaseSensitive(rc, "value_projection_rotated");
        const cJSON *vb = cJSON_GetObjectItemCaseSensitive(rc, "value_basis");
        const cJSON *kb = cJSON_GetObjectItemCaseSensitive(rc, "key_and_gate_basis");
        const cJSON *rd = cJSON_GetObjectItemCaseSensitive(rc, "runtime_delta_rotation");
        if (vr && !cJSON_IsBool(vr)) return ds_io_fail(err, "E_CONFIG", path, "engram_rotation_config.value_projection_rotated", "expected true or false, found %s", ds_io_json_brief(b1, sizeof b1, vr));
        if (vr) c->engram_value_rotated = cJSON_IsTrue(vr);
        if (vb && !(cJSON_IsString(vb) && !strcmp(vb->valuestring, "quarot_global")))
            return ds_io_fail(err, "E_CONFIG", path, "engram_rotation_config.value_basis", "expected \"quarot_global\", found %s", ds_io_json_brief(b1, sizeof b1, vb));
        if (kb) {
            if (cJSON_IsString(kb) && !strcmp(kb->valuestring, "original")) c->engram_gate_original_basis = true;
            else if (cJSON_IsString(kb) && !strcmp(kb->valuestring, "quarot_global")) c->engram_gate_original_basis = false;
            else return ds_io_fail(err, "E_CONFIG", path, "engram_rotation_config.key_and_gate_basis", "expected \"original\" or \"quarot_global\", found %s", ds_io_json_brief(b1, sizeof b1, kb));
        }
        if (rd && !cJSON_IsFalse(rd))
            return ds_io_fail(err, "E_CONFIG", path, "engram_rotation_config.runtime_delta_rotation", "expected false (runtime delta rotation is not supported), found %s",
                              ds_io_json_brief(b1, sizeof b1, rd));
    }
    /* vision */
    c->vision_layers = 0;
    const cJSON *vl = s->hf ? jget_path(s->root, "vision_config.num_hidden_layers") : jget_path(s->root, "vision_n_layers");
    if (vl) {
        int64_t x;
        if (!ds_io_json_int(vl, 0, 1024, &x))
            return ds_io_fail(err, "E_CONFIG", path, s->hf ? "vision_config.num_hidden_layers" : "vision_n_layers", "expected an integer in [0, 1024], found %s", ds_io_json_brief(b1, sizeof b1, vl));
        c->vision_layers = (int)x;
    }
    /* fixture-only keys */
    c->engram_token_map_file[0] = 0;
    v = lookup(s, "engram_token_map_file", NULL, "engram_token_map_file", name, sizeof name);
    if (v) {
        if (!cJSON_IsString(v) || strlen(v->valuestring) >= sizeof c->engram_token_map_file || !ds_io_safe_relpath(v->valuestring))
            return ds_io_fail(err, "E_CONFIG", path, name, "expected a relative path without '..' (< %zu bytes), found %s", sizeof c->engram_token_map_file,
                              ds_io_json_brief(b1, sizeof b1, v));
        snprintf(c->engram_token_map_file, sizeof c->engram_token_map_file, "%s", v->valuestring);
    }
    /* a synthetic checkpoint's random draft (no acceptance can be expected of it) */
    c->dspark_draft_random = false;
    v = lookup(s, "dspark_draft_random", NULL, "dspark_draft_random", name, sizeof name);
    if (v) {
        if (!cJSON_IsBool(v))
            return ds_io_fail(err, "E_CONFIG", path, name, "expected true or false, found %s", ds_io_json_brief(b1, sizeof b1, v));
        c->dspark_draft_random = cJSON_IsTrue(v);
    }
    c->has_engram_multipliers = false;
    c->n_mult_layers = c->n_mult_per_layer = 0;
    v = lookup(s, "engram_hash_multipliers", NULL, "engram_hash_multipliers", name, sizeof name);
    if (v) {
        if (!cJSON_IsArray(v)) return ds_io_fail(err, "E_CONFIG", path, name, "expected a list of lists of integers, found %s", ds_io_json_brief(b1, sizeof b1, v));
        span top = {0}, nest = {0};
        size_t n = strlen(text);
        if (!sk_val(sk_ws(text, text + n), text + n, 0, "engram_hash_multipliers", &top, s->hf && s->tc ? "text_config" : NULL, &nest))
            return ds_io_fail(err, "E_CONFIG", path, name, "expected JSON the raw scanner can walk, found a malformed document");
        bool in_tc = s->hf && s->tc && cJSON_GetObjectItemCaseSensitive(s->tc, "engram_hash_multipliers");
        span use = in_tc ? nest : top;
        if (!use.b) return ds_io_fail(err, "E_CONFIG", path, name, "expected the key in the raw text, found it only after decoding (escaped key name)");
        if (parse_multipliers(use, path, name, c, err)) return -1;
    }
    return 0;
}

static int parse_impl(const char *text, const char *path, ds_config *cfg, uint8_t *present, bool lenient, ds_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_Parse(text);
    if (!root) return ds_io_fail(err, "E_CONFIG", path, NULL, "expected valid JSON, found a syntax error near \"%.40s\"", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    int rc = 0;
    if (!cJSON_IsObject(root)) { rc = ds_io_fail(err, "E_CONFIG", path, NULL, "expected a JSON object, found another value"); goto out; }
    jsrc s = {.root = root, .path = path};
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (cJSON_IsObject(tc)) { s.tc = tc; s.hf = true; }
    else if (tc && !cJSON_IsNull(tc)) { rc = ds_io_fail(err, "E_CONFIG", path, "text_config", "expected an object, found another value"); goto out; }
    else s.hf = !(cJSON_GetObjectItemCaseSensitive(root, "dim") || cJSON_GetObjectItemCaseSensitive(root, "n_layers"));
    /* Lists that decide requiredness first: Engram layers, index sources, candidate, draft stages. */
    static const char *first[] = {"engram_layer_ids", "index_source_layer_ids", "candidate_source_layer_id", "num_nextn_predict_layers"};
    for (size_t k = 0; k < DS_ARRAY_LEN(first) && !rc; k++)
        for (int i = 0; i < ds_cf_n_fields; i++)
            if (!strcmp(ds_cf_fields[i].hf, first[k])) rc = parse_field(&s, &ds_cf_fields[i], cfg, &present[i], lenient, err);
    for (int i = 0; i < ds_cf_n_fields && !rc; i++) rc = parse_field(&s, &ds_cf_fields[i], cfg, &present[i], lenient, err);
    if (!rc) rc = check_fixed(&s, err);
    if (!rc) rc = parse_special(&s, text, cfg, lenient, err);
out:
    cJSON_Delete(root);
    return rc;
}

int ds_config_parse(const char *json_text, const char *path, ds_config *cfg, ds_error *err) {
    uint8_t present[MAX_FIELDS];
    return parse_impl(json_text, path, cfg, present, false, err);
}

/* Print a field's value for the agreement message. */
static void field_str(const cf_field *f, const ds_config *c, char *buf, size_t n) {
    const char *base = (const char *)c;
    switch (f->type) {
    case CF_INT: snprintf(buf, n, "%d", *(const int *)(base + f->off)); break;
    case CF_I64: snprintf(buf, n, "%" PRId64, *(const int64_t *)(base + f->off)); break;
    case CF_DBL: snprintf(buf, n, "%.17g", *(const double *)(base + f->off)); break;
    case CF_BOOL: snprintf(buf, n, "%s", *(const bool *)(base + f->off) ? "true" : "false"); break;
    default: {
        int cnt = *(const int *)(base + f->cnt_off);
        size_t k = (size_t)snprintf(buf, n, "[");
        for (int i = 0; i < cnt && k + 24 < n; i++) {
            if (f->type == CF_INTS) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? ", " : "", ((const int *)(base + f->off))[i]);
            else k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", ((const int64_t *)(base + f->off))[i]);
        }
        snprintf(buf + k, n - k, "]");
    }
    }
}

int ds_config_load(const char *model_dir, ds_config *cfg, ds_error *err) {
    char *p1 = ds_path_join(model_dir, "config.json"), *p2 = ds_path_join(model_dir, "inference/config.json");
    char *t1 = NULL, *t2 = NULL;
    uint8_t pr1[MAX_FIELDS], pr2[MAX_FIELDS];
    ds_config *c2 = NULL;
    int rc = -1;
    if (!ds_file_exists(p1)) { ds_io_fail(err, "E_MISSING_FILE", p1, NULL, "expected the model config file, found no such file"); goto out; }
    ds_error e2;
    if (ds_read_file(p1, &t1, NULL, &e2)) { ds_io_fail(err, "E_IO", p1, NULL, "expected a readable file, found %s", e2.msg); goto out; }
    if (parse_impl(t1, p1, cfg, pr1, false, err)) goto out;
    if (ds_file_exists(p2)) {
        if (ds_read_file(p2, &t2, NULL, &e2)) { ds_io_fail(err, "E_IO", p2, NULL, "expected a readable file, found %s", e2.msg); goto out; }
        c2 = ds_xmalloc(sizeof *c2);
        /* The flat file is parsed leniently: it only has to agree on what it states. */
        if (parse_impl(t2, p2, c2, pr2, true, err)) goto out;
        for (int i = 0; i < ds_cf_n_fields; i++) {
            if (!pr1[i] || !pr2[i]) continue;
            char a[512], b[512];
            field_str(&ds_cf_fields[i], cfg, a, sizeof a);
            field_str(&ds_cf_fields[i], c2, b, sizeof b);
            if (strcmp(a, b)) {
                const cf_field *f = &ds_cf_fields[i];
                ds_io_fail(err, "E_CONFIG", p2, f->flat ? f->flat : f->hf, "expected %s (as config.json %s), found %s", a, f->hf, b);
                goto out;
            }
        }
        if (cfg->has_engram_multipliers && c2->has_engram_multipliers &&
            (cfg->n_mult_layers != c2->n_mult_layers || cfg->n_mult_per_layer != c2->n_mult_per_layer ||
             memcmp(cfg->engram_multipliers, c2->engram_multipliers, sizeof cfg->engram_multipliers))) {
            ds_io_fail(err, "E_CONFIG", p2, "engram_hash_multipliers", "expected the same multipliers as config.json, found different values");
            goto out;
        }
    }
    rc = ds_config_validate(cfg, p1, err);
out:
    free(p1); free(p2); free(t1); free(t2); free(c2);
    return rc;
}
