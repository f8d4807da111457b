/* The loader checklist of CHECKPOINT.md §15: one deliberately broken copy of the tiny checkpoint
 * per error code, asserting the exact code and the key parts of the message (file, tensor,
 * expected, found), plus the valid base and the tolerance rules (aliases, placeholders, optional
 * draft formats).  Each test works on its own copy under $DS_TEST_TMP and restores nothing. */
#include "test_checkpoint_fixture.h"
#include <sys/stat.h>

static void expect(ds_error e, const char *code, const char *part1, const char *part2) {
    CHECK(!strcmp(e.code, code), "expected %s, got '%s': %s", code, e.code, e.msg);
    char pre[64];
    snprintf(pre, sizeof pre, "%s: ", code);
    CHECK(!strncmp(e.msg, pre, strlen(pre)), "message starts with the code: %s", e.msg);
    if (part1) CHECK_STR_CONTAINS(e.msg, part1);
    if (part2) CHECK_STR_CONTAINS(e.msg, part2);
}

static void rm(const char *dir, const char *rel) {
    char *p = ds_path_join(dir, rel);
    unlink(p);
    free(p);
}

TEST(valid_base_opens) {
    ds_checkpoint *c = NULL;
    ds_error e;
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.full = true;
    CHECK(ds_ckpt_open(fx_base(), &o, &c, &e) == 0, "%s", e.msg);
    if (!c) return;
    CHECK(c->cfg.n_layers == 8 && c->has_rotation && c->engram_enabled && c->draft_enabled);
    for (int i = 0; i < c->n_warnings; i++) CHECK(strncmp(c->warnings[i], "W_SCALE_BIAS", 12) && strncmp(c->warnings[i], "W_TOTAL_SIZE", 12), "%s", c->warnings[i]);
    /* every planned tensor resolves, with the plan's label */
    ds_plan plan;
    CHECK(ds_plan_build(&c->cfg, NULL, &plan, &e) == 0);
    int missing = 0, wrong = 0;
    for (int64_t i = 0; i < plan.n; i++) {
        if (plan.t[i].part == DS_PP_ROTATION) continue;
        const ds_tensor *t = ds_ckpt_tensor(c, plan.t[i].name);
        missing += !t;
        if (t && ds_ckpt_label(c, plan.t[i].name) != plan.t[i].label && !plan.t[i].flex_w8a8) wrong++;
    }
    CHECK(missing == 0 && wrong == 0, "%d missing, %d wrong labels", missing, wrong);
    ds_plan_free(&plan);
    /* index paths with a subdirectory; the index wins over engram_extra's [1,1] placeholders */
    const ds_tensor *t = ds_ckpt_tensor(c, "layers.1.engram.embed.weight");
    CHECK(t && t->shape[0] == 6126 && t->shape[1] == 32 && strstr(t->file->path, "engram_int8/"));
    CHECK(t && t->file->data_start == 112);
    CHECK(ds_ckpt_tensor(c, "model.layers.0.attn.wq_a.weight") == ds_ckpt_tensor(c, "layers.0.attn.wq_a.weight"));
    CHECK(ds_ckpt_tensor(c, "mtp.2.markov_head.markov_w1.weight") == ds_ckpt_tensor(c, "mtp.2.markov_head.embed.weight"));
    CHECK(ds_ckpt_label(c, "layers.0.ffn.experts.3.w2.scale_bias") == DS_LABEL_W4A8);
    CHECK(ds_ckpt_desc_label(c, "layers.0.attn.wq_a.weight") && !strcmp(ds_ckpt_desc_label(c, "layers.0.attn.wq_a.weight"), "W8A8_DYNAMIC"));
    /* B kept: orthogonal 32x32 block */
    double d = 0;
    for (int k = 0; k < 32; k++) d += (double)c->rot_block[k * 32] * c->rot_block[k * 32];
    CHECK(fabs(d - 1.0) < 1e-5);
    ds_ckpt_close(c);
}

TEST(e_missing_file) {
    char *d = fx_copy("missing_desc");
    rm(d, "quant_model_description.json");
    expect(fx_open_err(d, NULL), "E_MISSING_FILE", "quant_model_description.json", "found no such file");
    free(d);
    d = fx_copy("missing_map");
    rm(d, "engram_token_map.bin");
    expect(fx_open_err(d, NULL), "E_MISSING_FILE", "engram_token_map.bin", NULL);
    free(d);
    d = fx_copy("missing_index");
    rm(d, "quant_model_weights.safetensors.index.json");
    expect(fx_open_err(d, NULL), "E_MISSING_FILE", "quant_model_weights.safetensors.index.json", NULL);
    free(d);
    d = fx_copy("missing_config");
    rm(d, "config.json");
    expect(fx_open_err(d, NULL), "E_MISSING_FILE", "config.json", NULL);
    free(d);
    /* a shard listed by the mtpq manifest */
    d = fx_copy("missing_mtpq");
    fx_json_edit(d, "mtpq_manifest.json", "output_shards", "[\"mtpq-00001-of-00009.safetensors\"]");
    expect(fx_open_err(d, NULL), "E_MISSING_FILE", "mtpq-00001-of-00009.safetensors", "mtpq shard listed in mtpq_manifest.json");
    /* ... not needed when the draft is not requested */
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.need_draft = false;
    ds_error e = fx_open_err(d, &o);
    CHECK(e.code[0] == 0, "%s", e.msg);
    free(d);
}


TEST(e_config_and_agreement) {
    char *d = fx_copy("cfg_rule");
    fx_json_edit(d, "config.json", "text_config.kv_source_layer_ids", "[2,3]");
    expect(fx_open_err(d, NULL), "E_CONFIG", "config.json", "rule 2");
    free(d);
    d = fx_copy("cfg_flat");
    char *sub = ds_path_join(d, "inference");
    ds_error e;
    ds_mkdir_p(sub, &e);
    ds_config cfg;
    ds_config_preset("tiny", &cfg);
    cfg.moe_inter = 96;
    char *flat = ds_config_to_flat_json(&cfg), *fp = ds_path_join(d, "inference/config.json");
    ds_write_file_atomic(fp, flat, strlen(flat), &e);
    expect(fx_open_err(d, NULL), "E_CONFIG", "inference/config.json: moe_inter_dim", "expected 64 (as config.json moe_intermediate_size), found 96");
    free(flat); free(fp); free(sub); free(d);
}

TEST(e_config_quant_and_maxpos) {
    char *d = fx_copy("quant");
    fx_json_edit(d, "config.json", "quantization_config", "{\"quant_method\":\"awq\"}");
    expect(fx_open_err(d, NULL), "E_CONFIG_QUANT", "quant_method", "found \"awq\"");
    fx_json_edit(d, "config.json", "quantization_config", "{\"quant_method\":\"fp8\"}");
    /* the official layout is read (CHECKPOINT.md §14): a W4A8 directory relabelled fp8 lacks its index */
    expect(fx_open_err(d, NULL), "E_MISSING_FILE", "model.safetensors.index.json", "official FP8/MXFP4 layout");
    fx_json_edit(d, "config.json", "quantization_config", NULL);
    expect(fx_open_err(d, NULL), "E_CONFIG_QUANT", "found no quantization_config", NULL);
    free(d);
    /* any config: max_position_embeddings >= the requested max model length */
    d = fx_copy("maxpos");
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.max_model_len = 8192;
    expect(fx_open_err(d, &o), "E_CONFIG_MAXPOS", "max_position_embeddings", "expected >= the requested max model length 8192, found 4096");
    o.max_model_len = 4096;
    CHECK(fx_open_err(d, &o).code[0] == 0);
    free(d);
    /* release profile: V4.1-Flash dimensions must say 1048576 (an intermediate output said 8192) */
    d = ds_path_join(ds_test_tmpdir(), "v41_8192");
    ds_error e;
    ds_mkdir_p(d, &e);
    ds_config v;
    ds_config_preset("v41-flash", &v);
    v.max_pos = 8192;
    char *js = ds_config_to_json(&v), *p = ds_path_join(d, "config.json");
    ds_write_file_atomic(p, js, strlen(js), &e);
    expect(fx_open_err(d, NULL), "E_CONFIG_MAXPOS", "expected 1048576 for the V4.1-Flash release", "found 8192");
    free(js); free(p); free(d);
}

TEST(e_quant_desc_version) {
    char *d = fx_copy("desc_ver");
    fx_json_edit(d, "quant_model_description.json", "version", "\"1.0.1\"");
    expect(fx_open_err(d, NULL), "E_QUANT_DESC_VERSION", "quant_model_description.json: version", "expected \"1.0.0\", found \"1.0.1\"");
    fx_json_edit(d, "quant_model_description.json", "version", "\"1.0.0\"");
    fx_json_edit(d, "quant_model_description.json", "group_size", "128");
    expect(fx_open_err(d, NULL), "E_QUANT_DESC_VERSION", "group_size", "expected 0, found 128");
    free(d);
}

TEST(e_index_target_missing) {
    const char *idx = "quant_model_weights.safetensors.index.json";
    char *d = fx_copy("idx_missing");
    fx_json_edit(d, idx, "weight_map|layers.0.attn.wq_a.weight", "\"quant_model_weights-00009-of-00009.safetensors\"");
    expect(fx_open_err(d, NULL), "E_INDEX_TARGET_MISSING", "index.json: layers.0.attn.wq_a.weight", "quant_model_weights-00009-of-00009.safetensors to exist");
    fx_json_edit(d, idx, "weight_map|layers.0.attn.wq_a.weight", "\"../elsewhere/x.safetensors\"");
    expect(fx_open_err(d, NULL), "E_INDEX_TARGET_MISSING", "layers.0.attn.wq_a.weight", "without '..' components, found \"../elsewhere/x.safetensors\"");
    fx_json_edit(d, idx, "weight_map|layers.0.attn.wq_a.weight", "\"/etc/passwd\"");
    expect(fx_open_err(d, NULL), "E_INDEX_TARGET_MISSING", "found \"/etc/passwd\"", NULL);
    free(d);
}

TEST(e_index_tensor_absent) {
    char *d = fx_copy("idx_absent");
    /* point a tensor at a real shard that does not hold it */
    const char *other = fx_file_of("layers.7.attn.wq_a.weight"), *own = fx_file_of("layers.0.attn.wq_a.weight");
    char rel[600];
    snprintf(rel, sizeof rel, "%s", strcmp(other, own) ? other : fx_file_of("layers.1.engram.embed.scale"));
    char raw[700];
    snprintf(raw, sizeof raw, "\"%s\"", rel);
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "weight_map|layers.0.attn.wq_a.weight", raw);
    expect(fx_open_err(d, NULL), "E_INDEX_TENSOR_ABSENT", rel, ": layers.0.attn.wq_a.weight: expected the tensor named by the index");
    free(d);
}

static int drop_named(fx_entry *e, void *ctx) { return strcmp(e->name, (const char *)ctx) != 0; }

TEST(e_tensor_missing) {
    char *d = fx_copy("tensor_missing");
    const char *name = "layers.3.ffn.experts.2.w3.weight_scale";
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of(name));
    CHECK(fx_rewrite(d, rel, drop_named, (void *)name) == 0);
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "weight_map|layers.3.ffn.experts.2.w3.weight_scale", NULL);
    expect(fx_open_err(d, NULL), "E_TENSOR_MISSING", ": layers.3.ffn.experts.2.w3.weight_scale: expected the tensor", "found it neither in the index nor");
    free(d);
    /* a draft block tensor (looked up in the mtpq shards) */
    d = fx_copy("draft_missing");
    name = "mtp.1.attn.kv_norm.weight";
    snprintf(rel, sizeof rel, "%s", fx_file_of(name));
    CHECK(fx_rewrite(d, rel, drop_named, (void *)name) == 0);
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "weight_map|mtp.1.attn.kv_norm.weight", NULL);
    expect(fx_open_err(d, NULL), "E_TENSOR_MISSING", "mtp.1.attn.kv_norm.weight", NULL);
    free(d);
}

TEST(e_header_too_large_and_parse) {
    char *d = fx_copy("hdr");
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of("layers.0.attn.wkv.weight"));
    char *p = ds_path_join(d, rel);
    int fd = open(p, O_WRONLY);
    uint8_t big[8] = {0x00, 0xe2, 0xf5, 0x05, 0, 0, 0, 0}; /* 100,000,256 */
    CHECK(pwrite(fd, big, 8, 0) == 8);
    close(fd);
    expect(fx_open_err(d, NULL), "E_HEADER_TOO_LARGE", rel, "found N = 100000256");
    free(p);
    free(d);
    d = fx_copy("hdr_parse");
    p = ds_path_join(d, rel);
    fd = open(p, O_WRONLY);
    CHECK(pwrite(fd, "[", 1, 8) == 1); /* the header's opening brace */
    close(fd);
    expect(fx_open_err(d, NULL), "E_HEADER_PARSE", rel, "expected a JSON object as header");
    free(p);
    free(d);
}

static void set_offsets(cJSON *root, void *ctx) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(root, (const char *)ctx);
    cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    double b = cJSON_GetArrayItem(o, 0)->valuedouble;
    cJSON_ReplaceItemInArray(o, 1, cJSON_CreateNumber(b + 3));
}

TEST(e_offsets_range_and_truncated) {
    char *d = fx_copy("offsets");
    const char *name = "layers.0.attn.attn_sink";
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of(name));
    CHECK(fx_edit_header(d, rel, set_offsets, (void *)name) == 0);
    expect(fx_open_err(d, NULL), "E_OFFSETS_RANGE", ": layers.0.attn.attn_sink: expected end - begin = 4 elements x 4 bytes = 16", "found 3");
    free(d);
    d = fx_copy("trunc");
    char *p = ds_path_join(d, rel);
    int64_t sz = ds_file_size(p);
    CHECK(truncate(p, sz - 100) == 0);
    char want[64];
    snprintf(want, sizeof want, "found %lld", (long long)(sz - 100));
    expect(fx_open_err(d, NULL), "E_SHARD_TRUNCATED", rel, want);
    free(p);
    free(d);
}

TEST(w_data_layout_is_a_warning) {
    char *d = fx_copy("layout");
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of("layers.0.attn.wkv.weight"));
    char *p = ds_path_join(d, rel);
    FILE *f = fopen(p, "ab");
    fwrite("trailing", 1, 8, f);
    fclose(f);
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    int found = 0;
    for (int i = 0; c && i < c->n_warnings; i++) found |= !strncmp(c->warnings[i], "W_DATA_LAYOUT: ", 15) && strstr(c->warnings[i], "8 trailing bytes");
    CHECK(found);
    ds_ckpt_close(c);
    free(p);
    free(d);
}

typedef struct { const char *name; ds_dtype dt; int ndim; int64_t shape[2]; } retype;
static int retype_fn(fx_entry *e, void *ctx) {
    const retype *r = ctx;
    if (strcmp(e->name, r->name)) return 1;
    if ((int)r->dt >= 0) e->dt = r->dt;
    if (r->ndim) { e->ndim = r->ndim; e->shape[0] = r->shape[0]; e->shape[1] = r->shape[1]; }
    return 1;
}

TEST(e_dtype_and_shape_mismatch) {
    char *d = fx_copy("dtype");
    retype r = {"layers.2.attn.attn_sink", DS_DT_I32, 0, {0, 0}}; /* same bytes, wrong dtype */
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of(r.name));
    CHECK(fx_rewrite(d, rel, retype_fn, &r) == 0);
    expect(fx_open_err(d, NULL), "E_DTYPE_MISMATCH", ": layers.2.attn.attn_sink: expected F32, found I32", rel);
    free(d);
    /* a BF16-pinned tensor stored F32: pinned dtypes are enforced */
    d = fx_copy("dtype_pinned");
    retype r2 = {"layers.5.attn.wo_b.weight", DS_DT_F16, 0, {0, 0}};
    snprintf(rel, sizeof rel, "%s", fx_file_of(r2.name));
    CHECK(fx_rewrite(d, rel, retype_fn, &r2) == 0);
    expect(fx_open_err(d, NULL), "E_DTYPE_MISMATCH", "wo_b.weight: expected BF16, found F16", NULL);
    free(d);
    /* W4A8 weight with the unpacked row count */
    d = fx_copy("shape");
    retype r3 = {"layers.4.ffn.experts.1.w2.weight", (ds_dtype)-1, 2, {128, 32}};
    snprintf(rel, sizeof rel, "%s", fx_file_of(r3.name));
    CHECK(fx_rewrite(d, rel, retype_fn, &r3) == 0);
    expect(fx_open_err(d, NULL), "E_SHAPE_MISMATCH", "layers.4.ffn.experts.1.w2.weight: expected [64, 64] (int4 packed along the output dimension), found [128, 32]", NULL);
    free(d);
}

TEST(e_label_checks) {
    const char *desc = "quant_model_description.json";
    char *d = fx_copy("label_mismatch");
    fx_json_edit(d, desc, "|layers.1.ffn.experts.0.w1.weight", "\"W8A8_DYNAMIC\"");
    expect(fx_open_err(d, NULL), "E_LABEL_MISMATCH", "quant_model_description.json: layers.1.ffn.experts.0.w1.weight", "expected W4A8_DYNAMIC (the format of this tensor in the W4A8 release), found W8A8_DYNAMIC");
    free(d);
    d = fx_copy("label_unsupported");
    fx_json_edit(d, desc, "|layers.1.attn.wkv.weight", "\"W4A16_STATIC\"");
    expect(fx_open_err(d, NULL), "E_LABEL_UNSUPPORTED", "layers.1.attn.wkv.weight", "found \"W4A16_STATIC\"");
    free(d);
    d = fx_copy("label_missing");
    const char *parts[] = {"weight", "weight_scale", "weight_offset"};
    for (int i = 0; i < 3; i++) {
        char k[128];
        snprintf(k, sizeof k, "|layers.6.attn.indexer.wq_b.%s", parts[i]);
        fx_json_edit(d, desc, k, NULL);
    }
    expect(fx_open_err(d, NULL), "E_LABEL_MISSING", "layers.6.attn.indexer.wq_b.weight", "unlabelled tensors must be float");
    free(d);
    /* draft: the detected format wins, a disagreeing label is a warning */
    d = fx_copy("label_draft");
    fx_json_edit(d, desc, "|mtp.1.attn.wq_b.weight", "\"FLOAT\"");
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    int w = 0;
    for (int i = 0; c && i < c->n_warnings; i++) w |= !strncmp(c->warnings[i], "W_LABEL_MISMATCH", 16) && strstr(c->warnings[i], "mtp.1.attn.wq_b.weight");
    CHECK(w, "draft label mismatch is a warning");
    CHECK(c && ds_ckpt_label(c, "mtp.1.attn.wq_b.weight") == DS_LABEL_W8A8);
    ds_ckpt_close(c);
    free(d);
}

TEST(e_offset_nonzero) {
    float half = 0.5f;
    char *d = fx_copy("offset_w8");
    CHECK(fx_poke(d, "layers.3.attn.wq_b.weight_offset", 4 * 7, &half, 4) == 0);
    expect(fx_open_err(d, NULL), "E_OFFSET_NONZERO", "layers.3.attn.wq_b.weight_offset: expected all zeros", "found 0.5 at row 7");
    free(d);
    d = fx_copy("offset_expert0");
    CHECK(fx_poke(d, "layers.2.ffn.experts.0.w2.weight_offset", 0, &half, 4) == 0);
    expect(fx_open_err(d, NULL), "E_OFFSET_NONZERO", "layers.2.ffn.experts.0.w2.weight_offset", NULL);
    free(d);
    /* a later expert is checked only at level full */
    d = fx_copy("offset_expert5");
    CHECK(fx_poke(d, "layers.2.ffn.experts.5.w1.weight_offset", 8, &half, 4) == 0);
    CHECK(fx_open_err(d, NULL).code[0] == 0, "basic level samples the first expert only");
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.full = true;
    expect(fx_open_err(d, &o), "E_OFFSET_NONZERO", "layers.2.ffn.experts.5.w1.weight_offset", "at row 2");
    free(d);
}

static int scale_rot(fx_entry *e, void *ctx) {
    if (!strcmp(e->name, "global_rotation")) {
        float *v = (float *)e->data;
        for (uint64_t i = 0; i < e->nbytes / 4; i++) v[i] *= *(const float *)ctx;
    }
    return 1;
}

TEST(e_quarot) {
    char *d = fx_copy("quarot_missing");
    rm(d, "optional/quarot.safetensors");
    expect(fx_open_err(d, NULL), "E_QUAROT_MISSING", "optional/quarot.safetensors", "found no such file");
    free(d);
    d = fx_copy("quarot_offdiag");
    float x = 0.01f;
    CHECK(fx_poke(d, "global_rotation", 4 * (5 * 128 + 70), &x, 4) == 0);
    expect(fx_open_err(d, NULL), "E_QUAROT_NOT_BLOCK_DIAGONAL", "global_rotation: expected 0 outside the diagonal blocks", "found R[5][70] = 0.00999");
    free(d);
    d = fx_copy("quarot_block");
    CHECK(fx_poke(d, "global_rotation", 4 * (33 * 128 + 34), &x, 4) == 0);
    expect(fx_open_err(d, NULL), "E_QUAROT_NOT_BLOCK_DIAGONAL", "every diagonal 32x32 block equal to the first", "R[33][34]");
    free(d);
    d = fx_copy("quarot_orth");
    float k = 1.01f;
    CHECK(fx_rewrite(d, "optional/quarot.safetensors", scale_rot, &k) == 0);
    expect(fx_open_err(d, NULL), "E_QUAROT_NOT_ORTHOGONAL", "expected B^T B = I within 1e-4", "found element [0][0] = 1.020");
    free(d);
}


/* Grow an Engram table by one row (zeros for codes, 1.0 for scales). */
static int grow_table(fx_entry *e, void *ctx) {
    if (strcmp(e->name, (const char *)ctx)) return 1;
    uint64_t row = e->nbytes / (uint64_t)e->shape[0];
    e->data = ds_xrealloc(e->data, e->nbytes + row);
    memset(e->data + e->nbytes, 0, row);
    if (e->dt == DS_DT_F32)
        for (uint64_t i = 0; i < row / 4; i++) ((float *)(e->data + e->nbytes))[i] = 1.0f;
    e->nbytes += row;
    e->shape[0]++;
    return 1;
}

/* An independent prime-sum check (trial division), plugged in through the hook the way the
 * model loader plugs in src/model's version. */
static int64_t next_prime_td(int64_t n) {
    for (int64_t p = n + 1;; p++) {
        bool prime = p > 1;
        for (int64_t q = 2; q * q <= p && prime; q++) prime = p % q != 0;
        if (prime) return p;
    }
}
static int prime_sum_hook(const ds_checkpoint *c, void *ctx, ds_error *err) {
    int64_t p = c->cfg.engram_vocab_size - 1;
    *(int *)ctx += 1;
    for (int e = 0; e < c->cfg.n_engram; e++) {
        int64_t sum = 0;
        for (int k = 0; k < (c->cfg.engram_max_ngram - 1) * c->cfg.engram_n_heads; k++) sum += (p = next_prime_td(p));
        if (sum != c->cfg.engram_rows[e])
            return ds_fail(err, "E_ENGRAM_PRIME_SUM", "E_ENGRAM_PRIME_SUM: %s/config.json: engram_num_embeddings[%d]: expected %lld (sum of the layer's primes), found %lld",
                           c->dir, e, (long long)sum, (long long)c->cfg.engram_rows[e]);
    }
    return 0;
}

/* Drop the split form of the Engram tables (mkmodel's tiny keeps parts next to the tables), so a test
 * that rewrites a table or makes its own parts starts from whole files only. */
static void fx_unsplit(const char *d) {
    ds_test_sh(NULL, 0, "rm -f '%s'/engram_int8/*.part-* '%s'/engram_int8/PARTS.sha256 '%s'/engram_int8/*.verified", d, d, d);
}

TEST(e_engram_prime_sum_through_the_hook) {
    char *d = fx_copy("prime_sum");
    fx_unsplit(d);
    fx_json_edit(d, "config.json", "text_config.engram_num_embeddings", "[6127, 6332]");
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of("layers.1.engram.embed.weight"));
    CHECK(fx_rewrite(d, rel, grow_table, "layers.1.engram.embed.weight") == 0);
    snprintf(rel, sizeof rel, "%s", fx_file_of("layers.1.engram.embed.scale"));
    CHECK(fx_rewrite(d, rel, grow_table, "layers.1.engram.embed.scale") == 0);
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    CHECK(fx_open_err(d, &o).code[0] == 0, "io alone does not know the primes");
    int calls = 0;
    o.extra_check = prime_sum_hook;
    o.extra_ctx = &calls;
    expect(fx_open_err(d, &o), "E_ENGRAM_PRIME_SUM", "engram_num_embeddings[0]: expected 6126", "found 6127");
    CHECK(calls == 1);
    calls = 0;
    CHECK(fx_open_err(fx_base(), &o).code[0] == 0 && calls == 1, "the hook passes on the valid base");
    free(d);
}

TEST(e_engram_rows) {
    char *d = fx_copy("engram_rows");
    fx_json_edit(d, "config.json", "text_config.engram_num_embeddings", "[6126, 6400]");
    expect(fx_open_err(d, NULL), "E_ENGRAM_ROWS", "layers.2.engram.embed.weight: expected [6400, 32] (engram_num_embeddings rows), found [6332, 32]", NULL);
    free(d);
    d = fx_copy("engram_scale_dtype");
    retype r = {"layers.1.engram.embed.scale", DS_DT_I32, 0, {0, 0}};
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of(r.name));
    CHECK(fx_rewrite(d, rel, retype_fn, &r) == 0);
    expect(fx_open_err(d, NULL), "E_ENGRAM_ROWS", "layers.1.engram.embed.scale: expected F32, found I32", NULL);
    /* the rewritten table keeps the 112-byte layout */
    char *p = ds_path_join(d, rel);
    CHECK(ds_file_size(p) == 112 + 6126 * 4);
    free(p);
    free(d);
}

TEST(e_engram_scale) {
    float bad = 0.75f;
    char *d = fx_copy("engram_scale0");
    CHECK(fx_poke(d, "layers.2.engram.embed.scale", 0, &bad, 4) == 0);
    expect(fx_open_err(d, NULL), "E_ENGRAM_SCALE", "layers.2.engram.embed.scale: expected positive exact powers of two", "found 0.75 at row 0 group 0");
    free(d);
    /* row 1 is not among the 64 sampled rows: only level full sees it */
    d = fx_copy("engram_scale1");
    float neg = -1.0f;
    CHECK(fx_poke(d, "layers.2.engram.embed.scale", 4, &neg, 4) == 0);
    CHECK(fx_open_err(d, NULL).code[0] == 0);
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.full = true;
    expect(fx_open_err(d, &o), "E_ENGRAM_SCALE", "found -1 at row 1 group 0", NULL);
    free(d);
}

TEST(e_engram_parts_not_reassembled) {
    char *d = fx_copy("parts");
    fx_unsplit(d);
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of("layers.1.engram.embed.weight"));
    char *p = ds_path_join(d, rel);
    int64_t sz = ds_file_size(p);
    CHECK(ds_test_sh(NULL, 0, "head -c %lld '%s' > '%s.part-00-of-02' && tail -c +%lld '%s' > '%s.part-01-of-02' && rm '%s'", (long long)(sz / 2), p, p,
                     (long long)(sz / 2 + 1), p, p, p) == 0);
    expect(fx_open_err(d, NULL), "E_ENGRAM_PARTS_NOT_REASSEMBLED", rel, "found only 2 split part(s)");
    /* reassembled by hand, without the stamp of `dsflash reassemble`: unverified */
    CHECK(ds_test_sh(NULL, 0, "cat '%s.part-00-of-02' '%s.part-01-of-02' > '%s'", p, p, p) == 0);
    CHECK(ds_file_size(p) == sz);
    expect(fx_open_err(d, NULL), "E_ENGRAM_PARTS_NOT_REASSEMBLED", "expected a verified reassembly", "found none");
    /* with a matching stamp it loads */
    struct stat st;
    stat(p, &st);
    char stamp[512];
    snprintf(stamp, sizeof stamp, "{\"sha256\":\"00\",\"size\":%lld,\"mtime_ns\":\"%lld\",\"inode\":%llu,\"verified_utc\":\"x\"}", (long long)st.st_size,
             (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, (unsigned long long)st.st_ino);
    char *sp = NULL;
    CHECK(asprintf(&sp, "%s.verified", p) > 0);
    ds_error e;
    ds_write_file_atomic(sp, stamp, strlen(stamp), &e);
    CHECK(fx_open_err(d, NULL).code[0] == 0);
    /* a stamp for another file state (size) does not count */
    snprintf(stamp, sizeof stamp, "{\"size\":1,\"mtime_ns\":0,\"inode\":%llu}", (unsigned long long)st.st_ino);
    ds_write_file_atomic(sp, stamp, strlen(stamp), &e);
    expect(fx_open_err(d, NULL), "E_ENGRAM_PARTS_NOT_REASSEMBLED", NULL, NULL);
    free(sp);
    free(p);
    free(d);
}

static void write_map(const char *dir, int n, int mod, int first) {
    uint32_t *m = ds_xmalloc(sizeof(uint32_t) * (size_t)n);
    for (int v = 0; v < n; v++) m[v] = (uint32_t)(v % mod);
    if (first >= 0) m[0] = (uint32_t)first;
    char *p = ds_path_join(dir, "engram_token_map.bin");
    ds_error e;
    ds_write_file_atomic(p, m, sizeof(uint32_t) * (size_t)n, &e);
    free(p);
    free(m);
}

TEST(e_token_map_size) {
    char *d = fx_copy("tokmap");
    write_map(d, 1000, 700, -1);
    expect(fx_open_err(d, NULL), "E_TOKEN_MAP_SIZE", "engram_token_map.bin", "expected 4096 bytes (vocab_size 1024 little-endian u32 classes), found 4000");
    write_map(d, 1024, 699, -1);
    expect(fx_open_err(d, NULL), "E_TOKEN_MAP_SIZE", "expected engram_compressed_vocab_size = 700 classes, found 699", NULL);
    write_map(d, 1024, 700, 5);
    expect(fx_open_err(d, NULL), "E_TOKEN_MAP_SIZE", "first-seen order (id 0 may use classes 0..0), found class 5", NULL);
    free(d);
}

TEST(e_mtpq_manifest) {
    char *d = fx_copy("manifest");
    fx_json_edit(d, "mtpq_manifest.json", "schema", "\"mtpq-draft-quant/2\"");
    expect(fx_open_err(d, NULL), "E_MTPQ_MANIFEST", "mtpq_manifest.json: schema", "expected \"mtpq-draft-quant/1\", found \"mtpq-draft-quant/2\"");
    fx_json_edit(d, "mtpq_manifest.json", "schema", "\"mtpq-draft-quant/1\"");
    fx_json_edit(d, "mtpq_manifest.json", "output_shards", "\"mtpq-00001-of-00002.safetensors\"");
    expect(fx_open_err(d, NULL), "E_MTPQ_MANIFEST", "output_shards: expected a non-empty list", NULL);
    fx_json_edit(d, "mtpq_manifest.json", "output_shards", "[\"../mtpq-00001-of-00002.safetensors\"]");
    expect(fx_open_err(d, NULL), "E_MTPQ_MANIFEST", "without '..'", NULL);
    free(d);
}

TEST(e_draft_vocab_missing) {
    char *d = fx_copy("draft_vocab");
    const char *name = "mtp.0.embed.weight";
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of(name));
    CHECK(fx_rewrite(d, rel, drop_named, (void *)name) == 0);
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "weight_map|mtp.0.embed.weight", NULL);
    expect(fx_open_err(d, NULL), "E_DRAFT_VOCAB_MISSING", "mtp.0.embed.weight", "rotated release");
    /* the serving path: speculation off with an ERROR, the model still loads */
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.draft_optional = true;
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, &o, &c, &e) == 0, "%s", e.msg);
    CHECK(c && !c->draft_enabled && strstr(c->draft_disabled_reason, "mtp.0.embed.weight"));
    ds_ckpt_close(c);
    free(d);
}

static ds_error write_two_aux(const char *d, int64_t n1, int64_t n2) {
    ds_error e;
    const char *files[2] = {"mtp-vocab-00001-of-00001.safetensors", "vision-00001-of-00001.safetensors"};
    int64_t n[2] = {n1, n2};
    for (int i = 0; i < 2; i++) {
        ds_stwriter *w = ds_stw_new();
        ds_stw_add(w, "aux.dup", DS_DT_F32, 1, &n[i], NULL, 0);
        char *p = ds_path_join(d, files[i]);
        ds_stw_finish(w, p, &e);
        free(p);
    }
    return fx_open_err(d, NULL);
}

TEST(e_duplicate_tensor) {
    char *d = fx_copy("dup");
    ds_error e = write_two_aux(d, 2, 2);
    CHECK(e.code[0] == 0, "identical duplicates are fine: %s", e.msg);
    expect(write_two_aux(d, 2, 3), "E_DUPLICATE_TENSOR", "vision-00001-of-00001.safetensors: aux.dup", "mtp-vocab-00001-of-00001.safetensors (F32 [2]), found F32 [3]");
    free(d);
}

TEST(w_scale_bias_at_full_level) {
    char *d = fx_copy("scale_bias");
    float v = 1234.0f;
    CHECK(fx_poke(d, "layers.0.ffn.experts.0.w1.scale_bias", 4 * 3, &v, 4) == 0);
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    for (int i = 0; c && i < c->n_warnings; i++) CHECK(strncmp(c->warnings[i], "W_SCALE_BIAS", 12), "basic level does not check scale_bias");
    ds_ckpt_close(c);
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.full = true;
    CHECK(ds_ckpt_open(d, &o, &c, &e) == 0, "a warning, not an error: %s", e.msg);
    int w = 0;
    for (int i = 0; c && i < c->n_warnings; i++)
        w |= !strncmp(c->warnings[i], "W_SCALE_BIAS: ", 14) && strstr(c->warnings[i], "layers.0.ffn.experts.0.w1.scale_bias") && strstr(c->warnings[i], "row 3 chunk 0, found 1234");
    CHECK(w);
    ds_ckpt_close(c);
    free(d);
}

TEST(w_total_size) {
    char *d = fx_copy("total");
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "metadata.total_size", "12345");
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    int w = 0;
    for (int i = 0; c && i < c->n_warnings; i++) w |= !strncmp(c->warnings[i], "W_TOTAL_SIZE: ", 14) && strstr(c->warnings[i], "found 12345");
    CHECK(w);
    ds_ckpt_close(c);
    free(d);
}

TEST(e_index_parse) {
    char *d = fx_copy("idx_parse");
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "weight_map", "[]");
    expect(fx_open_err(d, NULL), "E_INDEX_PARSE", "weight_map: expected an object", NULL);
    free(d);
}

static int rename_markov(fx_entry *e, void *ctx) {
    if (!strcmp(e->name, "mtp.2.markov_head.embed.weight")) snprintf(e->name, sizeof e->name, "mtp.2.markov_head.markov_w1.weight");
    return 1;
}

TEST(markov_alias_spelling_accepted) {
    char *d = fx_copy("markov");
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of("mtp.2.markov_head.embed.weight"));
    CHECK(fx_rewrite(d, rel, rename_markov, NULL) == 0);
    fx_json_edit(d, "quant_model_weights.safetensors.index.json", "weight_map|mtp.2.markov_head.embed.weight", NULL);
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    const ds_tensor *t = c ? ds_ckpt_tensor(c, "mtp.2.markov_head.embed.weight") : NULL;
    CHECK(t && !strcmp(t->name, "mtp.2.markov_head.markov_w1.weight") && t->shape[1] == 16);
    ds_ckpt_close(c);
    free(d);
}

/* mtpq --plan aggressive: a draft wo_a stored as W8A8 (weight I8, weight_scale, weight_offset). */
static int to_w8a8(fx_entry *e, void *ctx) {
    if (strcmp(e->name, "mtp.1.attn.wo_a.weight")) return 1;
    e->dt = DS_DT_I8;
    e->nbytes /= 2;
    return 1;
}

TEST(draft_linear_w8a8_is_detected) {
    char *d = fx_copy("flex");
    char rel[600];
    snprintf(rel, sizeof rel, "%s", fx_file_of("mtp.1.attn.wo_a.weight"));
    CHECK(fx_rewrite(d, rel, to_w8a8, NULL) == 0);
    /* add the scale and offset to the same shard */
    char *p = ds_path_join(d, rel);
    ds_stfile *f;
    ds_error e;
    CHECK(ds_st_open(p, &f, &e) == 0);
    ds_stwriter *w = ds_stw_new();
    for (int i = 0; i < f->n_tensors; i++) ds_stw_add(w, f->tensors[i].name, f->tensors[i].dtype, f->tensors[i].ndim, f->tensors[i].shape, f->tensors[i].data, 0);
    float sc[64], off[64] = {0};
    for (int i = 0; i < 64; i++) sc[i] = 0.01f;
    ds_stw_add(w, "mtp.1.attn.wo_a.weight_scale", DS_DT_F32, 2, (int64_t[]){64, 1}, sc, 0);
    off[9] = 0.25f;
    ds_stw_add(w, "mtp.1.attn.wo_a.weight_offset", DS_DT_F32, 2, (int64_t[]){64, 1}, off, 0);
    ds_st_close(f);
    CHECK(ds_stw_finish(w, p, &e) == 0);
    expect(fx_open_err(d, NULL), "E_OFFSET_NONZERO", "mtp.1.attn.wo_a.weight_offset", "found 0.25 at row 9");
    float z = 0;
    CHECK(fx_poke_file(d, rel, "mtp.1.attn.wo_a.weight_offset", 36, &z, 4) == 0);
    ds_checkpoint *c = NULL;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    CHECK(c && ds_ckpt_label(c, "mtp.1.attn.wo_a.weight") == DS_LABEL_W8A8 && ds_ckpt_label(c, "mtp.0.attn.wo_a.weight") == DS_LABEL_FLOAT);
    ds_ckpt_close(c);
    free(p);
    free(d);
}

TEST(engram_disabled_needs_no_tables) {
    char *d = fx_copy("no_engram");
    CHECK(ds_test_sh(NULL, 0, "rm -rf '%s/engram_int8'", d) == 0);
    ds_error e = fx_open_err(d, NULL);
    CHECK(!strcmp(e.code, "E_INDEX_TARGET_MISSING") && strstr(e.msg, "engram_int8/"), "%s", e.msg);
    ds_ckpt_opts o;
    ds_ckpt_opts_default(&o);
    o.need_engram = false;
    ds_checkpoint *c = NULL;
    CHECK(ds_ckpt_open(d, &o, &c, &e) == 0, "%s", e.msg);
    CHECK(c && !c->engram_enabled && !ds_ckpt_tensor(c, "layers.1.engram.embed.weight"));
    ds_ckpt_close(c);
    free(d);
}

/* PITFALLS 23: an empty engram_layer_ids next to Engram tensors once crashed a loader. */
TEST(empty_engram_layer_ids_next_to_engram_tensors) {
    char *d = fx_copy("engram_empty");
    fx_json_edit(d, "config.json", "text_config.engram_layer_ids", "[]");
    rm(d, "engram_token_map.bin");
    ds_checkpoint *c = NULL;
    ds_error e;
    CHECK(ds_ckpt_open(d, NULL, &c, &e) == 0, "%s", e.msg);
    CHECK(c && !c->engram_enabled && c->cfg.n_engram == 0 && !ds_ckpt_tensor(c, "layers.1.engram.embed.weight"));
    ds_ckpt_close(c);
    free(d);
}

RUN_ALL()
