/* Built-in configurations (MODEL.md §1.1 V4.1-Flash, §8 tiny and mini) and config.json writers.
 *
 * The presets start from the V4.1-Flash values and override exactly the rows of the §8 table, so
 * "as V4.1-Flash" rows (rope bases, YaRN, eps, hc and router constants) cannot drift apart.  The
 * presets are validated before they are returned: a preset that broke a §1.2 rule would be a bug
 * here, and failing loudly is better than a fixture that quietly exercises an illegal model.
 *
 * The writers go through the field table of config_fields.h so their spelling matches the parser
 * by construction.  Engram multipliers exceed 2^53; they are inserted as raw JSON integer text
 * (cJSON_CreateRaw), never through a double. */
#define _GNU_SOURCE
#include "io/config.h"
#include "io/config_fields.h"
#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void set_list(int *dst, int *n, const int *src, int cnt) {
    memcpy(dst, src, sizeof(int) * (size_t)cnt);
    *n = cnt;
}

void ds_config_v41_flash(ds_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 129280; c->dim = 5120; c->n_layers = 40; c->n_mtp_layers = 3;
    c->n_heads = 64; c->head_dim = 512; c->rope_head_dim = 64; c->q_lora_rank = 1280;
    c->o_groups = 8; c->o_lora_rank = 1024; c->norm_eps = 1e-20; c->window = 128;
    c->n_compress = 43;
    for (int l = 0; l < 43; l++) c->compress_ratios[l] = l < 2 ? 0 : l < 20 ? 2 : l < 40 ? 1 : 0;
    set_list(c->kv_src, &c->n_kv_src, (const int[]){2, 8, 14, 20}, 4);
    set_list(c->idx_src, &c->n_idx_src, (const int[]){2, 8, 14, 20, 24, 28, 32, 36}, 8);
    c->cand_layer = 20; c->cand_topk_blocks = 2048; c->cand_block_size = 8;
    c->index_n_heads = 32; c->index_head_dim = 128; c->index_topk = 512;
    c->rope_theta = 10000; c->compress_rope_theta = 160000; c->rope_factor = 16; c->rope_orig_len = 65536;
    c->beta_fast = 32; c->beta_slow = 1; c->max_pos = 1048576;
    c->n_experts = 384; c->n_active = 6; c->n_shared = 1; c->moe_inter = 2304;
    c->score_func = DS_SCORE_SQRTSOFTPLUS; c->norm_topk_prob = true; c->route_scale = 1.5; c->gate_temp = 1.0;
    c->swiglu_limit = 10.0; c->hc_mult = 4; c->hc_sinkhorn_iters = 20; c->hc_eps = 1e-6;
    set_list(c->engram_layers, &c->n_engram, (const int[]){1, 14}, 2);
    c->engram_rows[0] = 384006168; c->engram_rows[1] = 384016682; c->n_engram_rows = 2;
    c->engram_max_ngram = 4; c->engram_vocab_size = 16000000; c->engram_n_heads = 8; c->engram_head_dim = 256;
    c->engram_pad_id = 2; c->engram_classes = 99092;
    c->dspark_block = 5; c->dspark_noise_id = 128799;
    set_list(c->dspark_targets, &c->n_dspark_targets, (const int[]){37, 38, 39}, 3);
    c->dspark_markov_rank = 256; c->dspark_n_experts = 128; c->dspark_n_active = 3;
    c->bos_id = 0; c->eos_id = 1; c->pad_id = 2; c->image_token_id = 129264;
    c->format = DS_FMT_W4A8; c->engram_gate_original_basis = true; c->engram_value_rotated = true;
    c->vision_layers = 32;
}

static void tiny(ds_config *c) {
    ds_config_v41_flash(c);
    c->vocab_size = 1024; c->dim = 128; c->n_layers = 8; c->n_mtp_layers = 3;
    c->n_heads = 4; c->head_dim = 64; c->rope_head_dim = 16; c->q_lora_rank = 64;
    c->o_groups = 2; c->o_lora_rank = 32; c->window = 16;
    set_list(c->compress_ratios, &c->n_compress, (const int[]){0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0}, 11);
    set_list(c->kv_src, &c->n_kv_src, (const int[]){2, 4}, 2);
    set_list(c->idx_src, &c->n_idx_src, (const int[]){2, 4, 6}, 3);
    c->cand_layer = 4; c->cand_topk_blocks = 4; c->cand_block_size = 4;
    c->index_n_heads = 4; c->index_head_dim = 32; c->index_topk = 8;
    c->n_experts = 16; c->n_active = 4; c->moe_inter = 64;
    c->dspark_n_experts = 8; c->dspark_n_active = 2;
    set_list(c->engram_layers, &c->n_engram, (const int[]){1, 2}, 2);
    c->engram_n_heads = 2; c->engram_head_dim = 32; c->engram_max_ngram = 4;
    c->engram_vocab_size = 1000; c->engram_rows[0] = 6126; c->engram_rows[1] = 6332; c->n_engram_rows = 2;
    c->engram_classes = 700;
    snprintf(c->engram_token_map_file, sizeof c->engram_token_map_file, "engram_token_map.bin");
    c->has_engram_multipliers = true; c->n_mult_layers = 2; c->n_mult_per_layer = 4;
    const int64_t m[2][4] = {{INT64_C(10848039516306619), INT64_C(685132859769461), INT64_C(5090451213527091), INT64_C(10473647490610037)},
                             {INT64_C(10830397415046839), INT64_C(5251565313253021), INT64_C(3205963898546285), INT64_C(10110859572717759)}};
    for (int l = 0; l < 2; l++) memcpy(c->engram_multipliers[l], m[l], sizeof m[l]);
    set_list(c->dspark_targets, &c->n_dspark_targets, (const int[]){5, 6, 7}, 3);
    c->dspark_block = 5; c->dspark_markov_rank = 16;
    c->dspark_noise_id = 1001; c->image_token_id = 1010;
    c->max_pos = 4096; c->vision_layers = 0;
}

static void mini(ds_config *c) {
    ds_config_v41_flash(c);
    c->vocab_size = 129280; c->dim = 2048; c->n_layers = 20; c->n_mtp_layers = 3;
    c->n_heads = 16; c->head_dim = 512; c->rope_head_dim = 64; c->q_lora_rank = 512;
    c->o_groups = 2; c->o_lora_rank = 1024; c->window = 128;
    c->n_compress = 23;
    for (int l = 0; l < 23; l++) c->compress_ratios[l] = l < 2 ? 0 : l < 10 ? 2 : l < 20 ? 1 : 0;
    set_list(c->kv_src, &c->n_kv_src, (const int[]){2, 6, 10}, 3);
    set_list(c->idx_src, &c->n_idx_src, (const int[]){2, 6, 10, 13, 16}, 5);
    c->cand_layer = 10; c->cand_topk_blocks = 2048; c->cand_block_size = 8;
    c->index_n_heads = 32; c->index_head_dim = 128; c->index_topk = 512;
    c->n_experts = 48; c->n_active = 6; c->moe_inter = 768;
    c->dspark_n_experts = 16; c->dspark_n_active = 3;
    set_list(c->engram_layers, &c->n_engram, (const int[]){1, 6}, 2);
    c->engram_n_heads = 8; c->engram_head_dim = 256; c->engram_max_ngram = 4;
    c->engram_vocab_size = 50000; c->engram_rows[0] = 1202790; c->engram_rows[1] = 1209004; c->n_engram_rows = 2;
    c->engram_classes = 99092;
    c->has_engram_multipliers = true; c->n_mult_layers = 2; c->n_mult_per_layer = 4;
    const int64_t m[2][4] = {{INT64_C(76632096046245), INT64_C(4839876093313), INT64_C(35959672319349), INT64_C(73987337458391)},
                             {INT64_C(39757161197093), INT64_C(90288823459075), INT64_C(10790497458921), INT64_C(26965969153235)}};
    for (int l = 0; l < 2; l++) memcpy(c->engram_multipliers[l], m[l], sizeof m[l]);
    set_list(c->dspark_targets, &c->n_dspark_targets, (const int[]){17, 18, 19}, 3);
    c->dspark_markov_rank = 256; c->dspark_noise_id = 128799; c->image_token_id = 129264;
    c->max_pos = 1048576; c->vision_layers = 0;
}

int ds_config_preset(const char *name, ds_config *cfg) {
    if (!name) return -1;
    if (!strcmp(name, "tiny")) tiny(cfg);
    else if (!strcmp(name, "mini")) mini(cfg);
    else if (!strcmp(name, "v41-flash")) ds_config_v41_flash(cfg);
    else return -1;
    ds_error err;
    if (ds_config_validate(cfg, name, &err)) {
        ds_log(DS_LOG_ERROR, "built-in preset is invalid: %s", err.msg);
        return -1;
    }
    return 0;
}

bool ds_config_is_v41_flash(const ds_config *c) {
    return c->vocab_size == 129280 && c->dim == 5120 && c->n_layers == 40 && c->n_heads == 64 && c->head_dim == 512 &&
           c->n_experts == 384 && c->moe_inter == 2304;
}

/* ---------------------------------------------------------------------------------------- */

static bool field_applies(const cf_field *f, const ds_config *c) {
    switch (f->req) {
    case CF_ENGRAM: return c->n_engram > 0;
    case CF_INDEX: return c->n_idx_src > 0;
    case CF_CAND: return c->cand_layer >= 0;
    case CF_DRAFT: return c->n_mtp_layers > 0;
    default: return true;
    }
}

static cJSON *field_json(const cf_field *f, const ds_config *c) {
    const char *b = (const char *)c;
    switch (f->type) {
    case CF_INT: return cJSON_CreateNumber(*(const int *)(b + f->off));
    case CF_I64: return cJSON_CreateNumber((double)*(const int64_t *)(b + f->off));
    case CF_DBL: return cJSON_CreateNumber(*(const double *)(b + f->off));
    case CF_BOOL: return cJSON_CreateBool(*(const bool *)(b + f->off));
    case CF_INTS: return cJSON_CreateIntArray((const int *)(b + f->off), *(const int *)(b + f->cnt_off));
    case CF_I64S: {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; i < *(const int *)(b + f->cnt_off); i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)((const int64_t *)(b + f->off))[i]));
        return a;
    }
    }
    return cJSON_CreateNull();
}

static void add_multipliers(cJSON *obj, const ds_config *c) {
    if (!c->has_engram_multipliers) return;
    char buf[DS_MAX_LIST * DS_MAX_NGRAM * 24 + 64];
    size_t k = (size_t)snprintf(buf, sizeof buf, "[");
    for (int l = 0; l < c->n_mult_layers; l++) {
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s[", l ? "," : "");
        for (int j = 0; j < c->n_mult_per_layer; j++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%" PRId64, j ? "," : "", c->engram_multipliers[l][j]);
        k += (size_t)snprintf(buf + k, sizeof buf - k, "]");
    }
    snprintf(buf + k, sizeof buf - k, "]");
    cJSON_AddItemToObject(obj, "engram_hash_multipliers", cJSON_CreateRaw(buf));
}

static const char *score_name(ds_score_func s) {
    return s == DS_SCORE_SOFTMAX ? "softmax" : s == DS_SCORE_SIGMOID ? "sigmoid" : "sqrtsoftplus";
}

char *ds_config_to_json(const ds_config *c) {
    cJSON *root = cJSON_CreateObject(), *tc = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "architectures", cJSON_CreateStringArray((const char *[]){"DeepseekV41ForCausalLM"}, 1));
    cJSON_AddStringToObject(root, "model_type", "deepseek_v41");
    cJSON_AddNumberToObject(root, "image_token_id", c->image_token_id);
    if (c->format == DS_FMT_W4A8) {
        cJSON *q = cJSON_AddObjectToObject(root, "quantization_config");
        cJSON_AddStringToObject(q, "quant_method", "ascend");
        cJSON_AddStringToObject(q, "model_quant_type", "W4A8_DYNAMIC");
        cJSON *r = cJSON_AddObjectToObject(root, "engram_rotation_config");
        cJSON_AddBoolToObject(r, "value_projection_rotated", c->engram_value_rotated);
        cJSON_AddStringToObject(r, "value_basis", "quarot_global");
        cJSON_AddStringToObject(r, "key_and_gate_basis", c->engram_gate_original_basis ? "original" : "quarot_global");
        cJSON_AddBoolToObject(r, "runtime_delta_rotation", false);
    } else if (c->format == DS_FMT_FP8) {
        cJSON *q = cJSON_AddObjectToObject(root, "quantization_config");
        cJSON_AddStringToObject(q, "quant_method", "fp8");
        cJSON_AddStringToObject(q, "activation_scheme", "dynamic");
        cJSON_AddItemToObject(q, "weight_block_size", cJSON_CreateIntArray((const int[]){32, 32}, 2));
        cJSON_AddStringToObject(q, "scale_fmt", "ue8m0");
        cJSON_AddStringToObject(q, "expert_dtype", "fp4");
    }
    if (c->vision_layers > 0) {
        cJSON *v = cJSON_AddObjectToObject(root, "vision_config");
        cJSON_AddNumberToObject(v, "num_hidden_layers", c->vision_layers);
    }
    cJSON_AddStringToObject(tc, "model_type", "deepseek_v41_text");
    cJSON *rs = NULL;
    if (c->rope_orig_len > 0) {
        rs = cJSON_CreateObject();
        cJSON_AddStringToObject(rs, "rope_type", "yarn");
    }
    for (int i = 0; i < ds_cf_n_fields; i++) {
        const cf_field *f = &ds_cf_fields[i];
        if (!field_applies(f, c) || !strcmp(f->hf, "image_token_id")) continue;
        if (!strncmp(f->hf, "rope_scaling.", 13)) {
            if (rs) cJSON_AddItemToObject(rs, f->hf + 13, field_json(f, c));
            continue;
        }
        cJSON_AddItemToObject(tc, f->hf, field_json(f, c));
    }
    if (rs) cJSON_AddItemToObject(tc, "rope_scaling", rs);
    cJSON_AddStringToObject(tc, "scoring_func", score_name(c->score_func));
    cJSON_AddStringToObject(tc, "topk_method", "noaux_tc");
    cJSON_AddStringToObject(tc, "hidden_act", "silu");
    cJSON_AddNumberToObject(tc, "num_key_value_heads", 1);
    cJSON_AddNumberToObject(tc, "num_hash_layers", 0);
    cJSON_AddNumberToObject(tc, "first_k_dense_replace", 0);
    cJSON_AddBoolToObject(tc, "tie_word_embeddings", false);
    if (c->n_engram) add_multipliers(tc, c);
    if (c->engram_token_map_file[0]) cJSON_AddStringToObject(tc, "engram_token_map_file", c->engram_token_map_file);
    if (c->dspark_draft_random) cJSON_AddBoolToObject(tc, "dspark_draft_random", true);
    cJSON_AddItemToObject(root, "text_config", tc);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

char *ds_config_to_flat_json(const ds_config *c) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < ds_cf_n_fields; i++) {
        const cf_field *f = &ds_cf_fields[i];
        if (!f->flat || !field_applies(f, c)) continue;
        if (!strcmp(f->flat, "original_seq_len") && c->rope_orig_len <= 0) continue;
        cJSON_AddItemToObject(root, f->flat, field_json(f, c));
    }
    cJSON_AddStringToObject(root, "score_func", score_name(c->score_func));
    if (c->format == DS_FMT_FP8) {
        cJSON_AddStringToObject(root, "dtype", "fp8");
        cJSON_AddStringToObject(root, "expert_dtype", "fp4");
    }
    if (c->vision_layers > 0) cJSON_AddNumberToObject(root, "vision_n_layers", c->vision_layers);
    if (c->n_engram) add_multipliers(root, c);
    if (c->engram_token_map_file[0]) cJSON_AddStringToObject(root, "engram_token_map_file", c->engram_token_map_file);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
