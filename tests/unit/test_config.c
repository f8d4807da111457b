/* Config parsing, validation and presets (MODEL.md §1, §8; CHECKPOINT.md §13).
 *
 * The oracle for presets and role tables is the specification text itself: the expected values
 * below are transcribed from MODEL.md §1.3 and §8 (not produced by the code under test).  Round
 * trips check that the HF and flat writers and the parser agree field by field, including Engram
 * multipliers above 2^53, which must survive exactly.  Every validation rule has a case that breaks
 * it and asserts the rule named in the E_CONFIG message. */
#define _GNU_SOURCE
#include "check.h"
#include "io/config.h"
#include "base/fsutil.h"
#include <cJSON.h>
#include <stdio.h>
#include <unistd.h>

static void write_text(const char *dir, const char *rel, const char *text) {
    char *p = ds_path_join(dir, rel);
    ds_error e;
    ds_write_file_atomic(p, text, strlen(text), &e);
    free(p);
}

/* Apply a JSON edit: path "text_config.x" to a raw JSON value (NULL deletes).  cJSON would turn the
 * exact multipliers into rounded doubles when re-printing, so they are put back as raw text (the
 * tiny preset's values, which every caller starts from). */
static char *edit_json(const char *text, const char *path, const char *raw) {
    cJSON *root = cJSON_Parse(text);
    const char *mult = "[[10848039516306619,685132859769461,5090451213527091,10473647490610037],"
                       "[10830397415046839,5251565313253021,3205963898546285,10110859572717759]]";
    cJSON *tcm = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cJSON *holder = tcm && cJSON_GetObjectItemCaseSensitive(tcm, "engram_hash_multipliers") ? tcm
                  : cJSON_GetObjectItemCaseSensitive(root, "engram_hash_multipliers") ? root : NULL;
    if (holder) cJSON_ReplaceItemInObjectCaseSensitive(holder, "engram_hash_multipliers", cJSON_CreateRaw(mult));
    cJSON *obj = root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *key = buf, *dot;
    while ((dot = strchr(key, '.'))) {
        *dot = 0;
        obj = cJSON_GetObjectItemCaseSensitive(obj, key);
        key = dot + 1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    if (raw) {
        cJSON *v = strstr(path, "multipliers") ? NULL : cJSON_Parse(raw);
        cJSON_AddItemToObject(obj, key, v ? v : cJSON_CreateRaw(raw));
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

/* Parse+validate the tiny preset's JSON after one edit; return the error (code "" on success). */
static ds_error tiny_with(const char *path, const char *raw) {
    ds_config c;
    ds_config_preset("tiny", &c);
    char *js = ds_config_to_json(&c);
    char *ed = edit_json(js, path, raw);
    ds_error e;
    ds_error_clear(&e);
    ds_config d;
    if (ds_config_parse(ed, "config.json", &d, &e) == 0) ds_config_validate(&d, "config.json", &e);
    free(js);
    free(ed);
    return e;
}

TEST(tiny_preset_matches_model_spec_section_8) {
    ds_config c;
    CHECK(ds_config_preset("tiny", &c) == 0);
    CHECK(c.vocab_size == 1024 && c.dim == 128 && c.n_layers == 8 && c.n_mtp_layers == 3);
    CHECK(c.n_heads == 4 && c.head_dim == 64 && c.rope_head_dim == 16 && c.q_lora_rank == 64);
    CHECK(c.o_groups == 2 && c.o_lora_rank == 32 && c.window == 16);
    int ratios[11] = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0};
    CHECK(c.n_compress == 11 && !memcmp(c.compress_ratios, ratios, sizeof ratios));
    CHECK(c.n_kv_src == 2 && c.kv_src[0] == 2 && c.kv_src[1] == 4);
    CHECK(c.n_idx_src == 3 && c.idx_src[2] == 6 && c.cand_layer == 4);
    CHECK(c.cand_topk_blocks == 4 && c.cand_block_size == 4 && c.index_n_heads == 4 && c.index_head_dim == 32 && c.index_topk == 8);
    CHECK(c.n_experts == 16 && c.n_active == 4 && c.moe_inter == 64 && c.dspark_n_experts == 8 && c.dspark_n_active == 2);
    CHECK(c.n_engram == 2 && c.engram_layers[0] == 1 && c.engram_layers[1] == 2);
    CHECK(c.engram_n_heads == 2 && c.engram_head_dim == 32 && c.engram_max_ngram == 4 && c.engram_vocab_size == 1000);
    CHECK(c.engram_rows[0] == 6126 && c.engram_rows[1] == 6332 && c.engram_classes == 700);
    CHECK(!strcmp(c.engram_token_map_file, "engram_token_map.bin"));
    CHECK(c.has_engram_multipliers && c.engram_multipliers[0][0] == 10848039516306619LL && c.engram_multipliers[1][3] == 10110859572717759LL);
    CHECK(c.n_dspark_targets == 3 && c.dspark_targets[0] == 5 && c.dspark_block == 5 && c.dspark_markov_rank == 16);
    CHECK(c.dspark_noise_id == 1001 && c.image_token_id == 1010 && c.max_pos == 4096 && c.vision_layers == 0);
    CHECK(c.rope_theta == 10000 && c.compress_rope_theta == 160000 && c.rope_factor == 16 && c.rope_orig_len == 65536);
    CHECK(c.norm_eps == 1e-20 && c.hc_mult == 4 && c.hc_sinkhorn_iters == 20 && c.hc_eps == 1e-6 && c.swiglu_limit == 10);
    /* Tiny role table (§8): 0 SWA; 1 SWA+Engram; 2 FULL r=2 +Engram; 3 REUSE; 4 FULL r=1 cand source;
     * 5 REUSE; 6 REINDEX uses candidates; 7 REUSE; features 5,6,7; stages 8-10. */
    ds_role want[11] = {DS_ROLE_SWA, DS_ROLE_SWA, DS_ROLE_FULL, DS_ROLE_REUSE, DS_ROLE_FULL, DS_ROLE_REUSE, DS_ROLE_REINDEX, DS_ROLE_REUSE,
                        DS_ROLE_SWA, DS_ROLE_SWA, DS_ROLE_SWA};
    for (int l = 0; l < 11; l++) CHECK(c.roles[l].role == want[l], "layer %d role %d", l, c.roles[l].role);
    CHECK(c.roles[1].engram == 0 && c.roles[2].engram == 1 && c.roles[0].engram == -1);
    CHECK(c.roles[3].kv_src == 2 && c.roles[5].kv_src == 4 && c.roles[7].idx_src == 6 && c.roles[5].idx_src == 4);
    CHECK(c.roles[4].cand_source && !c.roles[4].uses_candidates && c.roles[6].uses_candidates && !c.roles[7].uses_candidates);
    CHECK(c.roles[5].captured == 0 && c.roles[7].captured == 2 && c.roles[4].captured == -1);
}

TEST(mini_preset_roles_and_engram) {
    ds_config c;
    CHECK(ds_config_preset("mini", &c) == 0);
    CHECK(c.dim == 2048 && c.n_layers == 20 && c.n_heads == 16 && c.q_lora_rank == 512 && c.o_lora_rank == 1024);
    CHECK(c.n_experts == 48 && c.n_active == 6 && c.moe_inter == 768 && c.dspark_n_experts == 16 && c.dspark_n_active == 3);
    CHECK(c.engram_rows[0] == 1202790 && c.engram_rows[1] == 1209004 && c.engram_layers[1] == 6 && c.engram_classes == 99092);
    CHECK(c.engram_multipliers[0][0] == 76632096046245LL && c.engram_multipliers[1][1] == 90288823459075LL);
    CHECK(c.engram_token_map_file[0] == 0);
    for (int l = 0; l < 2; l++) CHECK(c.roles[l].role == DS_ROLE_SWA);
    for (int l = 2; l < 10; l++) CHECK(c.roles[l].ratio == 2 && c.roles[l].kv_src == (l < 6 ? 2 : 6), "layer %d", l);
    CHECK(c.roles[10].role == DS_ROLE_FULL && c.roles[10].ratio == 1 && c.roles[10].cand_source);
    CHECK(c.roles[13].role == DS_ROLE_REINDEX && c.roles[16].role == DS_ROLE_REINDEX && c.roles[16].uses_candidates);
    CHECK(c.roles[11].role == DS_ROLE_REUSE && c.roles[19].idx_src == 16 && c.roles[6].engram == 1);
}

TEST(v41_flash_role_table_section_1_3) {
    ds_config c;
    CHECK(ds_config_preset("v41-flash", &c) == 0);
    CHECK(ds_config_is_v41_flash(&c));
    for (int l = 0; l < 43; l++) {
        ds_role want = (l < 2 || l >= 40) ? DS_ROLE_SWA
                     : (l == 2 || l == 8 || l == 14 || l == 20) ? DS_ROLE_FULL
                     : (l == 24 || l == 28 || l == 32 || l == 36) ? DS_ROLE_REINDEX
                                                                  : DS_ROLE_REUSE;
        CHECK(c.roles[l].role == want, "layer %d", l);
        if (l >= 2 && l < 40) {
            int kv = l < 8 ? 2 : l < 14 ? 8 : l < 20 ? 14 : 20;
            int ix = l < 24 ? kv : l < 28 ? 24 : l < 32 ? 28 : l < 36 ? 32 : 36;
            CHECK(c.roles[l].kv_src == kv && c.roles[l].idx_src == ix, "layer %d src %d/%d", l, c.roles[l].kv_src, c.roles[l].idx_src);
        }
        CHECK(c.roles[l].uses_candidates == (l == 24 || l == 28 || l == 32 || l == 36), "layer %d", l);
        CHECK(c.roles[l].captured == (l >= 37 && l <= 39 ? l - 37 : -1));
    }
    CHECK(c.roles[20].cand_source && c.roles[1].engram == 0 && c.roles[14].engram == 1);
    CHECK(!ds_config_is_v41_flash(&(ds_config){.dim = 128}));
    ds_config t;
    CHECK(ds_config_preset("nonsense", &t) == -1);
}

TEST(hf_json_round_trip_is_exact) {
    const char *names[] = {"tiny", "mini", "v41-flash"};
    for (int i = 0; i < 3; i++) {
        ds_config a, b;
        ds_error e;
        ds_config_preset(names[i], &a);
        char *js = ds_config_to_json(&a);
        CHECK(ds_config_parse(js, "config.json", &b, &e) == 0, "%s: %s", names[i], e.msg);
        CHECK(ds_config_validate(&b, "config.json", &e) == 0, "%s: %s", names[i], e.msg);
        char *js2 = ds_config_to_json(&b);
        CHECK(!strcmp(js, js2), "%s round trip differs", names[i]);
        CHECK(b.format == DS_FMT_W4A8 && b.n_layers == a.n_layers && b.engram_rows[1] == a.engram_rows[1]);
        CHECK(!memcmp(a.roles, b.roles, sizeof a.roles));
        CHECK(b.has_engram_multipliers == a.has_engram_multipliers);
        CHECK(!memcmp(a.engram_multipliers, b.engram_multipliers, sizeof a.engram_multipliers));
        free(js);
        free(js2);
    }
}

TEST(multipliers_written_as_exact_integers_and_strings_accepted) {
    ds_config a;
    ds_config_preset("tiny", &a);
    char *js = ds_config_to_json(&a);
    /* Exact decimal text in the file, not a rounded double. */
    CHECK_STR_CONTAINS(js, "10848039516306619");
    CHECK_STR_CONTAINS(js, "10110859572717759");
    free(js);
    /* Decimal strings and integers mixed; values above 2^53 that a double would round. */
    ds_error e = tiny_with("text_config.engram_hash_multipliers",
                           "[[\"9007199254740993\",685132859769461,5090451213527091,10473647490610037],"
                           "[10830397415046839,5251565313253021,3205963898546285,\"9223372036854775807\"]]");
    CHECK(e.code[0] == 0, "%s", e.msg);
    ds_config c;
    ds_config_preset("tiny", &c);
    char *j2 = ds_config_to_json(&c);
    char *ed = edit_json(j2, "text_config.engram_hash_multipliers", "[[\"9007199254740993\",1,2,3],[4,5,6,\"9223372036854775807\"]]");
    ds_config d;
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == 0, "%s", e.msg);
    CHECK(d.engram_multipliers[0][0] == 9007199254740993LL, "got %lld", (long long)d.engram_multipliers[0][0]);
    CHECK(d.engram_multipliers[1][3] == INT64_MAX);
    free(ed);
    ed = edit_json(j2, "text_config.engram_hash_multipliers", "[[1.5,1,2,3],[4,5,6,7]]");
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == -1 && !strcmp(e.code, "E_CONFIG"));
    CHECK_STR_CONTAINS(e.msg, "engram_hash_multipliers");
    free(ed);
    ed = edit_json(j2, "text_config.engram_hash_multipliers", "[[\"9223372036854775808\",1,2,3],[4,5,6,7]]");
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == -1 && !strcmp(e.code, "E_CONFIG"), "overflow must be refused");
    free(ed);
    /* Wrong count per layer is a rule 5 violation. */
    e = tiny_with("text_config.engram_hash_multipliers", "[[1,2,3],[4,5,6]]");
    CHECK(!strcmp(e.code, "E_CONFIG"));
    CHECK_STR_CONTAINS(e.msg, "rule 5");
    free(j2);
}

TEST(flat_spelling_parses_to_the_same_config) {
    const char *names[] = {"tiny", "mini", "v41-flash"};
    for (int i = 0; i < 3; i++) {
        ds_config a, b;
        ds_error e;
        ds_config_preset(names[i], &a);
        char *flat = ds_config_to_flat_json(&a);
        CHECK(strstr(flat, "\"dim\"") && !strstr(flat, "hidden_size"), "flat names used");
        CHECK(ds_config_parse(flat, "inference/config.json", &b, &e) == 0, "%s: %s", names[i], e.msg);
        CHECK(ds_config_validate(&b, "inference/config.json", &e) == 0, "%s: %s", names[i], e.msg);
        CHECK(b.dim == a.dim && b.n_layers == a.n_layers && b.window == a.window && b.moe_inter == a.moe_inter);
        CHECK(b.rope_orig_len == a.rope_orig_len && b.rope_factor == a.rope_factor && b.route_scale == a.route_scale);
        CHECK(!memcmp(a.roles, b.roles, sizeof a.roles), "%s roles", names[i]);
        CHECK(!memcmp(a.engram_multipliers, b.engram_multipliers, sizeof a.engram_multipliers));
        CHECK(b.max_pos == 0, "flat spelling has no max_position_embeddings");
        free(flat);
    }
}

TEST(load_dir_with_both_spellings) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/cfg_both", ds_test_tmpdir());
    ds_error e;
    ds_mkdir_p(dir, &e);
    char sub[700];
    snprintf(sub, sizeof sub, "%s/inference", dir);
    ds_mkdir_p(sub, &e);
    ds_config a, b;
    ds_config_preset("tiny", &a);
    char *hf = ds_config_to_json(&a), *flat = ds_config_to_flat_json(&a);
    write_text(dir, "config.json", hf);
    write_text(dir, "inference/config.json", flat);
    CHECK(ds_config_load(dir, &b, &e) == 0, "%s", e.msg);
    CHECK(!memcmp(a.roles, b.roles, sizeof a.roles));
    /* Disagreement names the field and both values. */
    char *bad = edit_json(flat, "n_layers", "9");
    write_text(dir, "inference/config.json", bad);
    CHECK(ds_config_load(dir, &b, &e) == -1);
    CHECK(!strcmp(e.code, "E_CONFIG"));
    CHECK_STR_CONTAINS(e.msg, "E_CONFIG: ");
    CHECK_STR_CONTAINS(e.msg, "inference/config.json: n_layers: expected 8");
    CHECK_STR_CONTAINS(e.msg, "found 9");
    free(bad);
    bad = edit_json(flat, "compress_ratios", "[0,0,2,2,1,1,1,1,0,0,1]");
    write_text(dir, "inference/config.json", bad);
    CHECK(ds_config_load(dir, &b, &e) == -1);
    CHECK_STR_CONTAINS(e.msg, "compress_ratios: expected [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0]");
    free(bad);
    bad = edit_json(flat, "engram_hash_multipliers", "[[1,2,3,4],[5,6,7,8]]");
    write_text(dir, "inference/config.json", bad);
    CHECK(ds_config_load(dir, &b, &e) == -1);
    CHECK_STR_CONTAINS(e.msg, "engram_hash_multipliers");
    free(bad);
    /* A flat file that states fewer fields only has to agree on those. */
    write_text(dir, "inference/config.json", "{\"dim\": 128, \"n_layers\": 8, \"dtype\": \"fp8\"}");
    CHECK(ds_config_load(dir, &b, &e) == 0, "%s", e.msg);
    /* Missing config.json */
    char *p = ds_path_join(dir, "config.json");
    unlink(p);
    CHECK(ds_config_load(dir, &b, &e) == -1 && !strcmp(e.code, "E_MISSING_FILE"));
    free(p);
    free(hf);
    free(flat);
}

TEST(compress_ratios_of_L_entries_are_extended) {
    ds_error e = tiny_with("text_config.compress_ratios", "[0,0,2,2,1,1,1,1]");
    CHECK(e.code[0] == 0, "%s", e.msg);
    e = tiny_with("text_config.compress_ratios", "[0,0,2,2,1,1,1,1,0,0]");
    CHECK(!strcmp(e.code, "E_CONFIG"));
    CHECK_STR_CONTAINS(e.msg, "rule 1: expected 11 entries");
    e = tiny_with("text_config.compress_ratios", "[0,0,2,2,1,1,1,1,0,0,1]");
    CHECK_STR_CONTAINS(e.msg, "rule 1: expected 0 for draft stage layer 10");
}

TEST(each_validation_rule_is_named) {
    struct { const char *path, *raw, *want; } cases[] = {
        {"text_config.kv_source_layer_ids", "[2,3]", "rule 2 (K subset of I)"},
        {"text_config.index_source_layer_ids", "[1,2,4,6]", "rule 2: expected index source 1 to have ratio > 0"},
        {"text_config.kv_source_layer_ids", "[4]", "rule 3: expected a kv source <= layer 2"},
        {"text_config.compress_ratios", "[0,0,2,1,1,1,1,1,0,0,0]", "rule 3: expected layers 2..3 to share ratio 1"},
        {"text_config.candidate_source_layer_id", "5", "rule 4: expected an index source layer"},
        {"text_config.engram_layer_ids", "[1,8]", "rule 5: expected layer ids in [0, 8)"},
        {"text_config.dspark_target_layer_ids", "[7,6]", "rule 5: expected strictly increasing"},
        {"text_config.engram_num_embeddings", "[6126]", "rule 5: expected 2 entries"},
        {"text_config.engram_head_dim", "48", "rule 5: expected a multiple of 32"},
        {"text_config.engram_compressed_vocab_size", "1500000000", "Engram multiplier bound"},
        {"text_config.n_shared_experts", "2", "rule 6: expected 1"},
        {"text_config.qk_rope_head_dim", "15", "rule 6: expected an even value"},
        {"text_config.qk_rope_head_dim", "48", "rule 6: expected <= index_head_dim 32"},
        {"text_config.o_groups", "3", "rule 6: expected a divisor"},
        {"text_config.hidden_size", "144", "rule 6: expected a multiple of 32"},
        {"text_config.num_key_value_heads", "2", "rule 6 (fixed architecture value): expected 1"},
        {"text_config.tie_word_embeddings", "true", "rule 6 (fixed architecture value): expected false"},
        {"text_config.candidate_topk_blocks", "2", "rule 7"},
        {"text_config.scoring_func", "\"softmax\"", "rule 8"},
        {"text_config.swiglu_limit", "-1", "rule 8: expected >= 0"},
        {"text_config.num_experts_per_tok", "17", "expected <= n_routed_experts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_error e = tiny_with(cases[i].path, cases[i].raw);
        CHECK(!strcmp(e.code, "E_CONFIG"), "%s=%s gave code '%s'", cases[i].path, cases[i].raw, e.code);
        CHECK_STR_CONTAINS(e.msg, cases[i].want);
        CHECK_STR_CONTAINS(e.msg, "E_CONFIG: config.json: ");
    }
}

TEST(missing_and_ill_typed_fields) {
    ds_error e = tiny_with("text_config.hidden_size", NULL);
    CHECK(!strcmp(e.code, "E_CONFIG"));
    CHECK_STR_CONTAINS(e.msg, "text_config.hidden_size: expected an integer, found nothing (key absent)");
    e = tiny_with("text_config.hidden_size", "\"128\"");
    CHECK_STR_CONTAINS(e.msg, "text_config.hidden_size: expected an integer");
    e = tiny_with("text_config.vocab_size", "1024.5");
    CHECK(!strcmp(e.code, "E_CONFIG"));
    e = tiny_with("text_config.rms_norm_eps", NULL);
    CHECK_STR_CONTAINS(e.msg, "rms_norm_eps: expected a number, found nothing");
    /* Engram fields are required only when Engram layers exist. */
    e = tiny_with("text_config.engram_n_heads", NULL);
    CHECK_STR_CONTAINS(e.msg, "engram_n_heads");
    /* gate_temp has a specified default (1.0). */
    e = tiny_with("text_config.gate_temp", NULL);
    CHECK(e.code[0] == 0, "%s", e.msg);
    e = tiny_with("text_config.rope_scaling", "{\"rope_type\":\"linear\",\"factor\":2}");
    CHECK_STR_CONTAINS(e.msg, "rope_scaling.rope_type: expected \"yarn\"");
    ds_config c;
    CHECK(ds_config_parse("[1,2]", "x.json", &c, &e) == -1 && !strcmp(e.code, "E_CONFIG"));
    CHECK(ds_config_parse("{bad", "x.json", &c, &e) == -1 && !strcmp(e.code, "E_CONFIG"));
}

TEST(quantization_config_and_rotation_config) {
    ds_error e = tiny_with("quantization_config", "{\"quant_method\":\"gptq\"}");
    CHECK(!strcmp(e.code, "E_CONFIG_QUANT"), "code %s", e.code);
    CHECK_STR_CONTAINS(e.msg, "quantization_config.quant_method: expected \"ascend\" or \"fp8\", found \"gptq\"");
    e = tiny_with("quantization_config", "{\"quant_method\":\"ascend\",\"model_quant_type\":\"W8A8_DYNAMIC\"}");
    CHECK(!strcmp(e.code, "E_CONFIG_QUANT"));
    ds_config c;
    ds_config_preset("tiny", &c);
    char *js = ds_config_to_json(&c);
    char *ed = edit_json(js, "quantization_config", "{\"quant_method\":\"fp8\"}");
    ds_config d;
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == 0 && d.format == DS_FMT_FP8);
    free(ed);
    ed = edit_json(js, "quantization_config", NULL);
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == 0 && d.format == DS_FMT_NONE);
    free(ed);
    ed = edit_json(js, "engram_rotation_config", "{\"key_and_gate_basis\":\"quarot_global\",\"value_projection_rotated\":false}");
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == 0 && !d.engram_gate_original_basis && !d.engram_value_rotated);
    free(ed);
    ed = edit_json(js, "engram_rotation_config", NULL);
    CHECK(ds_config_parse(ed, "config.json", &d, &e) == 0 && d.engram_gate_original_basis && d.engram_value_rotated);
    free(ed);
    e = tiny_with("engram_rotation_config", "{\"runtime_delta_rotation\":true}");
    CHECK_STR_CONTAINS(e.msg, "runtime_delta_rotation: expected false");
    free(js);
}

RUN_ALL()
