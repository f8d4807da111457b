/* The tensor plan against the figures CHECKPOINT.md states (§8 counts and shapes, §9 Engram file
 * sizes, §11 per-stage draft counts and extras) and against closed-form counts for tiny and mini
 * written from the role rules, independently of the generator's loop structure. */
#define _GNU_SOURCE
#include "check.h"
#include "io/tensor_plan.h"
#include <stdlib.h>

static const ds_plan_tensor *find(const ds_plan *p, const char *name) {
    for (int64_t i = 0; i < p->n; i++)
        if (!strcmp(p->t[i].name, name)) return &p->t[i];
    return NULL;
}
static int shape_is(const ds_plan_tensor *t, int64_t a, int64_t b) {
    return t && t->ndim == (b < 0 ? 1 : 2) && t->shape[0] == a && (b < 0 || t->shape[1] == b);
}
static int cmp_name(const void *a, const void *b) { return strcmp(((const ds_plan_tensor *)a)->name, ((const ds_plan_tensor *)b)->name); }

TEST(v41_flash_trunk_counts_match_section_8) {
    ds_config c;
    ds_config_preset("v41-flash", &c);
    ds_plan_counts k;
    ds_error e;
    CHECK(ds_plan_count(&c, NULL, &k, &e) == 0);
    CHECK(k.by_file_label[DS_PF_TRUNK][DS_LABEL_W4A8] == 184320, "W4A8 %lld", (long long)k.by_file_label[DS_PF_TRUNK][DS_LABEL_W4A8]);
    CHECK(k.by_file_label[DS_PF_TRUNK][DS_LABEL_W8A8] == 744, "W8A8 %lld", (long long)k.by_file_label[DS_PF_TRUNK][DS_LABEL_W8A8]);
    CHECK(k.by_file_label[DS_PF_TRUNK][DS_LABEL_FLOAT] == 670, "FLOAT %lld", (long long)k.by_file_label[DS_PF_TRUNK][DS_LABEL_FLOAT]);
    int64_t trunk = 0;
    for (int l = 0; l <= DS_LABEL_ENGRAM; l++) trunk += k.by_file_label[DS_PF_TRUNK][l];
    CHECK(trunk == 185734, "trunk %lld", (long long)trunk);
    /* §11 per stage: 128 x 3 x 4 W4A8, 6 x 3 W8A8, 16 FLOAT. */
    for (int s = 0; s < 3; s++) {
        CHECK(k.per_stage[s][DS_LABEL_W4A8] == 1536 && k.per_stage[s][DS_LABEL_W8A8] == 18 && k.per_stage[s][DS_LABEL_FLOAT] == 16,
              "stage %d: %lld %lld %lld", s, (long long)k.per_stage[s][DS_LABEL_W4A8], (long long)k.per_stage[s][DS_LABEL_W8A8],
              (long long)k.per_stage[s][DS_LABEL_FLOAT]);
    }
    /* Extras: main_proj, main_norm, norm, 2 Markov, confidence (+ 2 unrotated vocab copies). */
    CHECK(k.by_file_label[DS_PF_DRAFT][DS_LABEL_FLOAT] == 3 * 16 + 6);
    CHECK(k.by_file_label[DS_PF_DRAFT_VOCAB][DS_LABEL_FLOAT] == 2);
    CHECK(k.by_file_label[DS_PF_ENGRAM_TABLE][DS_LABEL_ENGRAM] == 4 && k.by_file_label[DS_PF_ENGRAM_EXTRA][DS_LABEL_FLOAT] == 6);
    CHECK(k.by_file_label[DS_PF_QUAROT][DS_LABEL_NONE] == 1 && k.bytes_by_file[DS_PF_QUAROT] == 104857600);
    /* §9: Engram table data bytes; file size = 112 + data bytes. */
    CHECK(k.bytes_by_file[DS_PF_ENGRAM_TABLE] + 4 * 112 == 221190581248LL, "engram bytes %lld", (long long)k.bytes_by_file[DS_PF_ENGRAM_TABLE]);
}

TEST(v41_flash_shapes_and_dtypes_section_8) {
    ds_config c;
    ds_config_preset("v41-flash", &c);
    ds_plan p;
    ds_error e;
    CHECK(ds_plan_build(&c, NULL, &p, &e) == 0);
    const ds_plan_tensor *t;
    CHECK(shape_is(find(&p, "layers.0.ffn.experts.17.w1.weight"), 1152, 5120));
    CHECK(shape_is(find(&p, "layers.0.ffn.experts.17.w2.weight"), 2560, 2304));
    CHECK(shape_is(find(&p, "layers.0.ffn.experts.17.w2.scale_bias"), 5120, 16));
    CHECK(shape_is(find(&p, "layers.0.ffn.experts.17.w1.scale_bias"), 2304, 1));
    CHECK(shape_is(find(&p, "layers.0.ffn.experts.17.w3.weight_scale"), 2304, 1));
    CHECK(shape_is(find(&p, "layers.5.attn.wq_b.weight"), 32768, 1280));
    CHECK(shape_is(find(&p, "layers.5.attn.wq_a.weight"), 1280, 5120));
    CHECK(shape_is(find(&p, "layers.5.attn.wkv.weight"), 512, 5120));
    CHECK(shape_is(find(&p, "layers.5.ffn.shared_experts.w1.weight"), 2304, 5120));
    CHECK(shape_is(find(&p, "layers.5.ffn.shared_experts.w2.weight"), 5120, 2304));
    CHECK(shape_is(find(&p, "layers.5.attn.wo_a.weight"), 8192, 4096));
    CHECK(shape_is(find(&p, "layers.5.attn.wo_b.weight"), 5120, 8192));
    CHECK(shape_is(find(&p, "layers.5.hc_attn_fn"), 24, 20480));
    CHECK(shape_is(find(&p, "layers.5.hc_ffn_base"), 24, -1) && shape_is(find(&p, "layers.5.hc_ffn_scale"), 3, -1));
    CHECK(shape_is(find(&p, "layers.5.attn.attn_sink"), 64, -1));
    CHECK(shape_is(find(&p, "layers.5.ffn.gate.weight"), 384, 5120) && shape_is(find(&p, "layers.5.ffn.gate.bias_vl"), 384, -1));
    CHECK(shape_is(find(&p, "embed.weight"), 129280, 5120) && shape_is(find(&p, "head.weight"), 129280, 5120));
    t = find(&p, "head.weight");
    CHECK(t && t->dtype == DS_DT_F32 && (t->dtype_mask & DS_DT_BIT(DS_DT_BF16)));
    /* Role-gated groups: indexer.wq_b only at index sources; compressor at FULL; wgate at ratio 2. */
    int idx_layers[8] = {2, 8, 14, 20, 24, 28, 32, 36};
    for (int l = 0; l < 40; l++) {
        char n[96];
        int is_idx = 0, is_full = (l == 2 || l == 8 || l == 14 || l == 20);
        for (int i = 0; i < 8; i++) is_idx |= idx_layers[i] == l;
        snprintf(n, sizeof n, "layers.%d.attn.indexer.wq_b.weight", l);
        t = find(&p, n);
        CHECK((t != NULL) == is_idx, "layer %d indexer", l);
        if (t) CHECK(shape_is(t, 4096, 1280));
        snprintf(n, sizeof n, "layers.%d.attn.compressor.wkv.weight", l);
        t = find(&p, n);
        CHECK((t != NULL) == is_full, "layer %d compressor", l);
        if (t) CHECK(t->dtype_mask == DS_DT_BIT(l == 20 ? DS_DT_BF16 : DS_DT_F32), "layer %d compressor dtype pinned", l);
        snprintf(n, sizeof n, "layers.%d.attn.compressor.wgate.weight", l);
        CHECK((find(&p, n) != NULL) == (is_full && l != 20), "layer %d wgate", l);
        snprintf(n, sizeof n, "layers.%d.attn.indexer.wk.weight", l);
        t = find(&p, n);
        CHECK((t != NULL) == is_full && (!t || shape_is(t, 128, 512)));
    }
    /* Labels: W4A8 weights accept U8 as an alias, W8A8 weights only I8. */
    t = find(&p, "layers.3.ffn.experts.0.w2.weight");
    CHECK(t && t->label == DS_LABEL_W4A8 && t->part == DS_PP_WEIGHT && (t->dtype_mask & DS_DT_BIT(DS_DT_U8)) && t->out == 5120 && t->in == 2304);
    t = find(&p, "layers.3.attn.wq_a.weight");
    CHECK(t && t->label == DS_LABEL_W8A8 && t->dtype_mask == DS_DT_BIT(DS_DT_I8));
    /* Engram (§9, §12). */
    CHECK(shape_is(find(&p, "layers.1.engram.embed.weight"), 384006168, 256));
    CHECK(shape_is(find(&p, "layers.14.engram.embed.scale"), 384016682, 8));
    CHECK(shape_is(find(&p, "layers.14.engram.wkv.weight"), 25600, 6144));
    CHECK(shape_is(find(&p, "layers.1.engram.q_weight"), 4, 5120));
    t = find(&p, "layers.1.engram.embed.weight");
    CHECK(t && t->file == DS_PF_ENGRAM_TABLE && t->label == DS_LABEL_ENGRAM);
    /* Draft (§11). */
    CHECK(shape_is(find(&p, "mtp.0.main_proj.weight"), 5120, 15360));
    CHECK(shape_is(find(&p, "mtp.2.markov_head.embed.weight"), 129280, 256));
    t = find(&p, "mtp.2.markov_head.head.weight");
    CHECK(t && !strcmp(t->alias, "mtp.2.markov_head.markov_w2.weight"));
    CHECK(shape_is(find(&p, "mtp.2.confidence_head.proj.weight"), 1, 5376));
    CHECK(shape_is(find(&p, "mtp.1.ffn.gate.weight"), 128, 5120) && shape_is(find(&p, "mtp.1.ffn.gate.bias"), 128, -1));
    CHECK(find(&p, "mtp.1.ffn.experts.127.w3.scale_bias") && !find(&p, "mtp.1.ffn.experts.128.w1.weight"));
    CHECK(!find(&p, "mtp.0.attn.compressor.wkv.weight") && !find(&p, "mtp.0.attn.indexer.wq_b.weight"));
    t = find(&p, "mtp.0.embed.weight");
    CHECK(t && t->file == DS_PF_DRAFT_VOCAB && shape_is(t, 129280, 5120) && t->flex_w8a8);
    CHECK(find(&p, "mtp.2.head.weight") && find(&p, "mtp.2.head.weight")->flex_w8a8);
    CHECK(find(&p, "mtp.1.attn.wo_a.weight")->flex_w8a8 && !find(&p, "layers.1.attn.wo_a.weight")->flex_w8a8);
    CHECK(!find(&p, "mtp.1.attn.q_norm.weight")->flex_w8a8);
    /* Bytes per expert (§8): 18,118,656. */
    uint64_t bytes = 0;
    for (int64_t i = 0; i < p.n; i++)
        if (!strncmp(p.t[i].name, "layers.0.ffn.experts.17.", 24)) bytes += ds_plan_nbytes(&p.t[i]);
    CHECK(bytes == 18118656, "expert bytes %llu", (unsigned long long)bytes);
    /* Names are unique. */
    qsort(p.t, (size_t)p.n, sizeof *p.t, cmp_name);
    int dups = 0;
    for (int64_t i = 1; i < p.n; i++) dups += !strcmp(p.t[i].name, p.t[i - 1].name);
    CHECK(dups == 0, "%d duplicate names", dups);
    ds_plan_free(&p);
}

/* Closed-form counts for any config from the role rules (independent of the generator). */
static void expect_counts(const char *preset) {
    ds_config c;
    ds_config_preset(preset, &c);
    int64_t L = c.n_layers, E = c.n_experts, S = c.n_mtp_layers, Ed = c.dspark_n_experts;
    int64_t n_full = 0, n_full_r2 = 0, n_idx = c.n_idx_src;
    for (int l = 0; l < L; l++) {
        n_full += c.roles[l].role == DS_ROLE_FULL;
        n_full_r2 += c.roles[l].role == DS_ROLE_FULL && c.roles[l].ratio >= 2;
    }
    ds_plan_counts k;
    ds_error e;
    CHECK(ds_plan_count(&c, NULL, &k, &e) == 0);
    CHECK(k.by_file_label[DS_PF_TRUNK][DS_LABEL_W4A8] == L * E * 12, "%s W4A8", preset);
    CHECK(k.by_file_label[DS_PF_TRUNK][DS_LABEL_W8A8] == 3 * (6 * L + n_idx), "%s W8A8", preset);
    CHECK(k.by_file_label[DS_PF_TRUNK][DS_LABEL_FLOAT] == 16 * L + 4 * n_full + n_full_r2 + n_idx + 3, "%s FLOAT %lld", preset,
          (long long)k.by_file_label[DS_PF_TRUNK][DS_LABEL_FLOAT]);
    for (int s = 0; s < S; s++)
        CHECK(k.per_stage[s][DS_LABEL_W4A8] == Ed * 12 && k.per_stage[s][DS_LABEL_W8A8] == 18 && k.per_stage[s][DS_LABEL_FLOAT] == 16, "%s stage %d",
              preset, s);
    CHECK(k.by_file_label[DS_PF_ENGRAM_TABLE][DS_LABEL_ENGRAM] == 2 * c.n_engram);
    int64_t tb = 0;
    for (int i = 0; i < c.n_engram; i++) tb += c.engram_rows[i] * (c.engram_head_dim + 4 * (c.engram_head_dim / 32));
    CHECK(k.bytes_by_file[DS_PF_ENGRAM_TABLE] == tb);
}

TEST(tiny_and_mini_counts_follow_roles) {
    expect_counts("tiny");
    expect_counts("mini");
}

TEST(tiny_shapes) {
    ds_config c;
    ds_config_preset("tiny", &c);
    ds_plan p;
    ds_error e;
    CHECK(ds_plan_build(&c, NULL, &p, &e) == 0);
    CHECK(shape_is(find(&p, "layers.3.ffn.experts.15.w1.weight"), 32, 128));
    CHECK(shape_is(find(&p, "layers.3.ffn.experts.15.w2.weight"), 64, 64));
    CHECK(shape_is(find(&p, "layers.3.ffn.experts.15.w2.scale_bias"), 128, 16));
    CHECK(shape_is(find(&p, "layers.3.attn.wq_b.weight"), 256, 64));
    CHECK(shape_is(find(&p, "layers.3.attn.wo_a.weight"), 64, 128));
    CHECK(shape_is(find(&p, "layers.3.attn.wo_b.weight"), 128, 64));
    CHECK(shape_is(find(&p, "layers.3.hc_attn_fn"), 24, 512));
    CHECK(shape_is(find(&p, "layers.6.attn.indexer.wq_b.weight"), 128, 64) && !find(&p, "layers.6.attn.indexer.wk.weight"));
    CHECK(shape_is(find(&p, "layers.4.attn.indexer.wk.weight"), 32, 64) && !find(&p, "layers.4.attn.compressor.wgate.weight"));
    CHECK(shape_is(find(&p, "layers.2.attn.compressor.wgate.weight"), 64, 128));
    CHECK(shape_is(find(&p, "layers.2.engram.embed.weight"), 6332, 32) && shape_is(find(&p, "layers.2.engram.embed.scale"), 6332, 1));
    CHECK(shape_is(find(&p, "layers.1.engram.wkv.weight"), 640, 192));
    CHECK(shape_is(find(&p, "mtp.0.main_proj.weight"), 128, 384) && shape_is(find(&p, "mtp.2.confidence_head.proj.weight"), 1, 144));
    CHECK(shape_is(find(&p, "mtp.2.markov_head.embed.weight"), 1024, 16) && find(&p, "mtp.1.ffn.experts.7.w2.weight") &&
          !find(&p, "mtp.1.ffn.experts.8.w2.weight"));
    CHECK(shape_is(find(&p, "global_rotation"), 128, 128));
    ds_plan_free(&p);
    /* Options restrict the plan. */
    ds_plan_opts o;
    ds_plan_opts_default(&o, &c);
    o.draft = o.draft_vocab = o.engram = o.rotation = false;
    ds_plan_counts k;
    ds_plan_count(&c, &o, &k, &e);
    CHECK(k.by_file_label[DS_PF_DRAFT][DS_LABEL_FLOAT] == 0 && k.by_file_label[DS_PF_ENGRAM_TABLE][DS_LABEL_ENGRAM] == 0);
    CHECK(k.total == k.by_file_label[DS_PF_TRUNK][DS_LABEL_W4A8] + k.by_file_label[DS_PF_TRUNK][DS_LABEL_W8A8] + k.by_file_label[DS_PF_TRUNK][DS_LABEL_FLOAT]);
    /* A config without a W4A8 quantization_config has no plan (explicit error, not a guess). */
    c.format = DS_FMT_FP8;
    CHECK(ds_plan_count(&c, NULL, &k, &e) == -1 && !strcmp(e.code, "E_CONFIG_QUANT"));
}

RUN_ALL()
