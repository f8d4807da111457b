/* Release planning (TOOLS.md §3.2, §3.5; CHECKPOINT.md §3, §6, §9, §11): the label plan by name,
 * shard assignment that never splits a linear, the per-file layout (aligned, contiguous, header
 * padded, Engram tables with data at byte 112), and the refusals for sources that cannot make a
 * valid release.  The plan is built from mkmodel's tiny source (names, dtypes, shapes only; no
 * weight is read), so these cases are fast. */
#include "check.h"
#include "tools/mkmodel.h"
#include "tools/release_writer.h"

static ds_fsrc *tiny_source(bool identity) {
    ds_config c;
    ds_config_preset("tiny", &c);
    ds_fsrc *s = NULL;
    ds_error err = {0};
    if (ds_mk_source_new(&c, 1, false, identity, &s, &err)) { fprintf(stderr, "%s\n", err.msg); exit(2); }
    return s;
}

static void drop(ds_fsrc *s, const char *name) { /* plan-only tests: the parallel generator arrays are not used */
    int i = ds_fsrc_find(s, name);
    if (i < 0) return;
    free(s->t[i].name);
    memmove(&s->t[i], &s->t[i + 1], sizeof s->t[0] * (size_t)(s->n - i - 1));
    s->n--;
}

TEST(label_plan_by_name) {
    ds_rw_opts o;
    ds_rw_opts_default(&o);
    ds_qkind k;
    struct { const char *name; const char *label; ds_qkind kind; } cases[] = {
        {"layers.0.ffn.experts.17.w1.weight", DS_RW_W4A8, DS_QK_W4A8}, {"layers.39.ffn.experts.383.w2.weight", DS_RW_W4A8, DS_QK_W4A8},
        {"mtp.1.ffn.experts.3.w3.weight", DS_RW_W4A8, DS_QK_W4A8}, {"layers.2.attn.wq_a.weight", DS_RW_W8A8, DS_QK_W8A8},
        {"layers.2.attn.wq_b.weight", DS_RW_W8A8, DS_QK_W8A8}, {"layers.2.attn.wkv.weight", DS_RW_W8A8, DS_QK_W8A8},
        {"layers.2.attn.indexer.wq_b.weight", DS_RW_W8A8, DS_QK_W8A8}, {"mtp.0.ffn.shared_experts.w2.weight", DS_RW_W8A8, DS_QK_W8A8},
        {"layers.2.attn.wo_a.weight", DS_RW_FLOAT, DS_QK_FLOAT}, {"mtp.2.attn.wo_b.weight", DS_RW_FLOAT, DS_QK_FLOAT},
        {"layers.2.attn.compressor.wkv.weight", DS_RW_FLOAT, DS_QK_FLOAT}, {"layers.2.attn.indexer.wk.weight", DS_RW_FLOAT, DS_QK_FLOAT},
        {"layers.1.engram.wkv.weight", DS_RW_FLOAT, DS_QK_FLOAT}, {"layers.1.engram.embed.weight", NULL, DS_QK_ENGRAM},
        {"mtp.0.main_proj.weight", DS_RW_FLOAT, DS_QK_FLOAT}, {"mtp.0.embed.weight", DS_RW_FLOAT, DS_QK_FLOAT},
        {"layers.1.ffn.experts.x.w1.weight", DS_RW_FLOAT, DS_QK_FLOAT}, {"layers.1.ffn.experts.3.w4.weight", DS_RW_FLOAT, DS_QK_FLOAT},
        {"layers.1.ffn.experts.3.w1.weight_scale", DS_RW_FLOAT, DS_QK_FLOAT}, {"embed.weight", DS_RW_FLOAT, DS_QK_FLOAT},
        {"mtp.0.engram.embed.weight", DS_RW_FLOAT, DS_QK_FLOAT}, {"vision.blocks.0.attn.wqkv.weight", DS_RW_FLOAT, DS_QK_FLOAT},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(cases); i++) {
        const char *l = ds_rw_label_for(&o, cases[i].name, 3, &k);
        CHECK(k == cases[i].kind && ((!l && !cases[i].label) || (l && cases[i].label && !strcmp(l, cases[i].label))), "%s: %s / %d",
              cases[i].name, l ? l : "(none)", (int)k);
    }
    o.aggressive = o.quant_main_proj = o.quant_vocab = true;
    CHECK(!strcmp(ds_rw_label_for(&o, "mtp.2.attn.wo_b.weight", 3, &k), DS_RW_W8A8), "aggressive: draft wo_b");
    CHECK(!strcmp(ds_rw_label_for(&o, "layers.2.attn.wo_b.weight", 3, &k), DS_RW_FLOAT), "aggressive leaves the trunk alone");
    CHECK(!strcmp(ds_rw_label_for(&o, "mtp.0.main_proj.weight", 3, &k), DS_RW_W8A8), "quant_main_proj");
    CHECK(!strcmp(ds_rw_label_for(&o, "mtp.0.embed.weight", 3, &k), DS_RW_W8A8), "quant_vocab: embed");
    CHECK(!strcmp(ds_rw_label_for(&o, "mtp.2.head.weight", 3, &k), DS_RW_W8A8), "quant_vocab: last-stage head");
    CHECK(!strcmp(ds_rw_label_for(&o, "mtp.1.head.weight", 3, &k), DS_RW_FLOAT), "only the last stage's head is vocabulary");
}

TEST(shards_and_layout) {
    ds_fsrc *s = tiny_source(false);
    ds_rw_opts o;
    ds_rw_opts_default(&o);
    o.shard_bytes = 1 << 20;
    ds_rw_plan *p = NULL;
    ds_error err = {0};
    CHECK(ds_rw_plan_build(s, &o, &p, &err) == 0, "%s", err.msg);
    if (!p) { ds_fsrc_free(s); return; }
    CHECK(p->n_trunk >= 2 && p->n_draft >= 1, "trunk shards %d, draft shards %d", p->n_trunk, p->n_draft);
    /* a group never straddles files */
    for (int g = 0; g < p->n_groups; g++)
        for (int k = 1; k < p->groups[g].n_out; k++)
            if (p->groups[g].kind != DS_QK_ENGRAM)
                CHECK(p->tensors[p->groups[g].out[k]].file == p->tensors[p->groups[g].out[0]].file, "group %d split", g);
    int engram_files = 0;
    for (int fi = 0; fi < p->n_files; fi++) {
        const ds_rw_file *f = &p->files[fi];
        uint64_t data = 0, lo = UINT64_MAX, hi = 0, max_group = 0;
        for (int k = 0; k < f->n_tensors; k++) {
            const ds_rw_tensor *t = &p->tensors[f->tensors[k]];
            data += t->nbytes;
            lo = t->offset < lo ? t->offset : lo;
            hi = t->offset + t->nbytes > hi ? t->offset + t->nbytes : hi;
            CHECK(t->offset % (uint64_t)ds_dtype_size(t->dtype) == 0, "%s: %s misaligned", f->relpath, t->name);
            max_group = t->nbytes > max_group ? t->nbytes : max_group;
            if (k) CHECK(strcmp(p->tensors[f->tensors[k - 1]].name, t->name) < 0, "%s: header not in name order", f->relpath);
        }
        CHECK(lo == 8 + f->header_len && hi == f->size && hi - lo == data, "%s: data is contiguous from 8 + N to the end", f->relpath);
        CHECK((8 + f->header_len) % 8 == 0, "%s: data starts at a multiple of 8", f->relpath);
        size_t jl = strlen(f->header);
        while (jl && f->header[jl - 1] == ' ') jl--;
        CHECK(jl && f->header[jl - 1] == '}' && f->header_len >= jl, "%s: JSON header padded with spaces", f->relpath);
        if (f->kind == DS_RF_ENGRAM_W || f->kind == DS_RF_ENGRAM_S) {
            engram_files++;
            CHECK(f->header_len == 104 && f->n_tensors == 1 && !strstr(f->header, "__metadata__"), "%s: Engram layout", f->relpath);
        }
        if (f->kind == DS_RF_TRUNK && f->n_tensors > 4)
            CHECK(data <= o.shard_bytes, "%s: %llu data bytes above the shard size", f->relpath, (unsigned long long)data);
    }
    CHECK(engram_files == 4, "two Engram layers x (weight, scale) files: %d", engram_files);
    /* scales, offsets and scale_bias carry their weight's label; placeholders are unlabelled */
    int placeholders = 0;
    for (int t = 0; t < p->n_tensors; t++) {
        const ds_rw_tensor *x = &p->tensors[t];
        if (strstr(x->name, ".weight_scale") || strstr(x->name, ".scale_bias"))
            CHECK(x->label && strcmp(x->label, DS_RW_FLOAT), "%s labelled %s", x->name, x->label ? x->label : "(none)");
        if (!x->in_index) {
            placeholders++;
            CHECK(!x->label && x->shape[0] == 1 && x->shape[1] == 1 && !strcmp(p->files[x->file].relpath, DS_ENGRAM_EXTRA),
                  "placeholder %s", x->name);
        }
    }
    CHECK(placeholders == 4, "[1,1] placeholders: %d", placeholders);
    char *j1 = ds_rw_plan_json(p, s);
    ds_rw_plan *p2 = NULL;
    CHECK(ds_rw_plan_build(s, &o, &p2, &err) == 0, "rebuild");
    char *j2 = p2 ? ds_rw_plan_json(p2, s) : NULL;
    CHECK(j2 && !strcmp(j1, j2), "the plan is a pure function of the source and options");
    free(j1); free(j2);
    ds_rw_plan_free(p2);
    ds_rw_plan_free(p);
    ds_fsrc_free(s);
}

TEST(refusals_and_vocabulary_copies) {
    ds_rw_opts o;
    ds_rw_opts_default(&o);
    ds_rw_plan *p = NULL;
    ds_error err = {0};
    ds_fsrc *s = tiny_source(false);
    drop(s, "layers.4.attn.indexer.k_norm.weight");
    CHECK(ds_rw_plan_build(s, &o, &p, &err) != 0 && !strcmp(err.code, "E_TENSOR_MISSING"), "missing tensor: %s %s", err.code, err.msg);
    CHECK_STR_CONTAINS(err.msg, "layers.4.attn.indexer.k_norm.weight");
    ds_fsrc_free(s);
    s = tiny_source(false);
    s->t[ds_fsrc_find(s, "layers.0.attn.wkv.weight")].ndim = 1;
    CHECK(ds_rw_plan_build(s, &o, &p, &err) != 0 && !strcmp(err.code, "E_SRC_FORMAT"), "1-D linear: %s", err.code);
    ds_fsrc_free(s);
    s = tiny_source(false); /* rotated */
    drop(s, "mtp.2.head.weight");
    CHECK(ds_rw_plan_build(s, &o, &p, &err) != 0 && !strcmp(err.code, "E_DRAFT_VOCAB_MISSING"), "rotated, no vocab: %s", err.code);
    ds_fsrc_free(s);
    s = tiny_source(true); /* identity rotation: the copies are planned */
    drop(s, "mtp.0.embed.weight");
    drop(s, "mtp.2.head.weight");
    p = NULL;
    CHECK(ds_rw_plan_build(s, &o, &p, &err) == 0 && p && p->add_draft_vocab, "identity, no vocab: %s", err.msg);
    for (int t = 0; p && t < p->n_tensors; t++) {
        if (!strcmp(p->tensors[t].name, "mtp.2.head.weight"))
            CHECK(p->tensors[t].dtype == DS_DT_BF16 && !strncmp(p->files[p->tensors[t].file].relpath, "mtpq-", 5),
                  "draft head copy is BF16 in a draft shard (the trunk head is F32)");
        if (!strcmp(p->tensors[t].name, "head.weight")) CHECK(p->tensors[t].dtype == DS_DT_F32, "trunk head stays F32");
    }
    ds_rw_plan_free(p);
    ds_fsrc_free(s);
}

RUN_ALL()
