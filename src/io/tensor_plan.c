/* Generator of the tensor plan (see tensor_plan.h).
 *
 * The generator is written as the specification's tables read: a linear emits its weight and
 * auxiliary tensors through one helper per label (§6.1 / §6.2 / §6.3), each backbone layer emits
 * the groups of CHECKPOINT.md §2 gated by its role (compressor and index keys for FULL layers,
 * wgate only at ratio >= 2, index queries for index sources), and the draft reuses the same block
 * emitter with the draft expert count and without compressor/indexer/Engram.  Dtype pins follow the
 * §8 table literally: where it names one dtype only that dtype is accepted, where it says "BF16 or
 * F32" / "BF16 accepted" both are, plus F16 (§3: accepted for float tensors, widened). */
#include "io/tensor_plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_label_names[] = {"NONE", "FLOAT", "W8A8_DYNAMIC", "W4A8_DYNAMIC", "OTHER", "engram"};
const char *ds_label_name(ds_label l) { return (unsigned)l <= DS_LABEL_ENGRAM ? g_label_names[l] : "?"; }
ds_label ds_label_parse(const char *s) {
    if (!s) return DS_LABEL_NONE;
    if (!strcmp(s, "FLOAT")) return DS_LABEL_FLOAT;
    if (!strcmp(s, "W8A8_DYNAMIC")) return DS_LABEL_W8A8;
    if (!strcmp(s, "W4A8_DYNAMIC")) return DS_LABEL_W4A8;
    return DS_LABEL_OTHER;
}

static const char *g_file_names[DS_PF_COUNT] = {"trunk shard", "engram_int8 table", "engram_extra", "mtpq draft shard", "draft vocabulary",
                                                "optional/quarot"};
const char *ds_plan_file_name(ds_plan_file f) { return (unsigned)f < DS_PF_COUNT ? g_file_names[f] : "?"; }

void ds_plan_opts_default(ds_plan_opts *o, const ds_config *cfg) {
    o->trunk = true;
    o->engram = cfg->n_engram > 0;
    o->draft = cfg->n_mtp_layers > 0;
    o->draft_vocab = cfg->n_mtp_layers > 0 && cfg->format == DS_FMT_W4A8;
    o->rotation = cfg->format == DS_FMT_W4A8;
}

uint64_t ds_plan_nbytes(const ds_plan_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return ds_dtype_nbytes(t->dtype, n);
}

/* Float dtype sets (see the file comment). */
#define M_F32 DS_DT_BIT(DS_DT_F32)
#define M_BF16 DS_DT_BIT(DS_DT_BF16)
#define M_ANYF (DS_DT_BIT(DS_DT_F32) | DS_DT_BIT(DS_DT_BF16) | DS_DT_BIT(DS_DT_F16))

typedef struct gen {
    const ds_config *c;
    ds_plan_cb cb;
    void *ctx;
    int stop;
    ds_plan_file file;  /* file kind of the block being emitted */
    int layer, expert;
} gen;

static void emit(gen *g, const ds_plan_tensor *t) {
    if (!g->stop) g->stop = g->cb(t, g->ctx);
}

static ds_plan_tensor base(gen *g, const char *name, ds_label label, ds_plan_part part) {
    ds_plan_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.label = label;
    t.part = part;
    t.file = g->file;
    t.layer = g->layer;
    t.expert = g->expert;
    return t;
}

/* Which draft FLOAT linears the mtpq options may move to W8A8 (§11): wo_a / wo_b (aggressive),
 * main_proj (quant_main_proj), the vocabulary copies (quant_vocab). */
static bool is_flex(const ds_plan_tensor *t) {
    if (t->file != DS_PF_DRAFT && t->file != DS_PF_DRAFT_VOCAB) return false;
    const char *n = strchr(t->name + 4, '.');
    if (strncmp(t->name, "mtp.", 4) || !n) return false;
    n++;
    return !strcmp(n, "attn.wo_a.weight") || !strcmp(n, "attn.wo_b.weight") || !strcmp(n, "main_proj.weight") ||
           !strcmp(n, "embed.weight") || !strcmp(n, "head.weight");
}

/* A FLOAT tensor: preferred dtype, accepted mask, shape (ndim 1 or 2; s1 < 0 means 1-D). */
static void flt(gen *g, const char *prefix, const char *name, ds_dtype dt, uint32_t mask, int64_t s0, int64_t s1, bool linear) {
    char full[96];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    ds_plan_tensor t = base(g, full, DS_LABEL_FLOAT, DS_PP_FLOAT);
    t.dtype = dt;
    t.dtype_mask = mask | DS_DT_BIT(dt);
    t.ndim = s1 < 0 ? 1 : 2;
    t.shape[0] = s0;
    t.shape[1] = s1 < 0 ? 0 : s1;
    if (linear && s1 >= 0) {
        t.out = s0;
        t.in = s1;
        size_t n = strlen(full);
        if (n > 7 && !strcmp(full + n - 7, ".weight")) snprintf(t.linear, sizeof t.linear, "%.*s", (int)(n - 7), full);
    }
    t.flex_w8a8 = is_flex(&t);
    emit(g, &t);
}

/* A quantized linear X = prefix+name: X.weight, X.weight_scale, X.weight_offset[, X.scale_bias]. */
static void qlin(gen *g, const char *prefix, const char *name, ds_label label, int64_t out, int64_t in, bool w2) {
    char x[80], full[96];
    snprintf(x, sizeof x, "%s%s", prefix, name);
    static const char *sfx[4] = {".weight", ".weight_scale", ".weight_offset", ".scale_bias"};
    static const ds_plan_part parts[4] = {DS_PP_WEIGHT, DS_PP_SCALE, DS_PP_OFFSET, DS_PP_SCALE_BIAS};
    int n = label == DS_LABEL_W4A8 ? 4 : 3;
    for (int k = 0; k < n; k++) {
        snprintf(full, sizeof full, "%s%s", x, sfx[k]);
        ds_plan_tensor t = base(g, full, label, parts[k]);
        snprintf(t.linear, sizeof t.linear, "%s", x);
        t.out = out;
        t.in = in;
        t.ndim = 2;
        if (k == 0) {
            t.dtype = DS_DT_I8;
            t.dtype_mask = DS_DT_BIT(DS_DT_I8) | (label == DS_LABEL_W4A8 ? DS_DT_BIT(DS_DT_U8) : 0);
            t.shape[0] = label == DS_LABEL_W4A8 ? (out + 1) / 2 : out;
            t.shape[1] = in;
        } else {
            t.dtype = DS_DT_F32;
            t.dtype_mask = M_F32;
            t.shape[0] = out;
            t.shape[1] = (k == 3 && w2) ? 16 : 1;
        }
        emit(g, &t);
    }
}

/* Norms, hc parameters, attention, MoE: the part every block (backbone or draft) owns. */
static void block_common_head(gen *g, const char *p) {
    const ds_config *c = g->c;
    int64_t D = c->dim, HC = c->hc_mult, mix = (2 + HC) * HC;
    flt(g, p, "attn_norm.weight", DS_DT_BF16, M_ANYF, D, -1, false);
    flt(g, p, "ffn_norm.weight", DS_DT_BF16, M_ANYF, D, -1, false);
    static const char *hc[2] = {"hc_attn_", "hc_ffn_"};
    for (int i = 0; i < 2; i++) {
        char n[32];
        snprintf(n, sizeof n, "%sfn", hc[i]);
        flt(g, p, n, DS_DT_F32, M_F32, mix, HC * D, false);
        snprintf(n, sizeof n, "%sbase", hc[i]);
        flt(g, p, n, DS_DT_F32, M_F32, mix, -1, false);
        snprintf(n, sizeof n, "%sscale", hc[i]);
        flt(g, p, n, DS_DT_F32, M_F32, 3, -1, false);
    }
    int64_t H = c->n_heads, dh = c->head_dim, qr = c->q_lora_rank, og = c->o_groups, olr = c->o_lora_rank;
    qlin(g, p, "attn.wq_a", DS_LABEL_W8A8, qr, D, false);
    flt(g, p, "attn.q_norm.weight", DS_DT_F32, M_ANYF, qr, -1, false);
    qlin(g, p, "attn.wq_b", DS_LABEL_W8A8, H * dh, qr, false);
    qlin(g, p, "attn.wkv", DS_LABEL_W8A8, dh, D, false);
    flt(g, p, "attn.kv_norm.weight", DS_DT_F32, M_ANYF, dh, -1, false);
    flt(g, p, "attn.wo_a.weight", DS_DT_BF16, M_BF16, og * olr, H * dh / og, true);
    flt(g, p, "attn.wo_b.weight", DS_DT_BF16, M_BF16, D, og * olr, true);
    flt(g, p, "attn.attn_sink", DS_DT_F32, M_F32, H, -1, false);
}

static void block_moe(gen *g, const char *p, int n_experts) {
    const ds_config *c = g->c;
    int64_t D = c->dim, I = c->moe_inter;
    flt(g, p, "ffn.gate.weight", DS_DT_BF16, M_BF16, n_experts, D, true);
    flt(g, p, "ffn.gate.bias", DS_DT_F32, M_F32, n_experts, -1, false);
    flt(g, p, "ffn.gate.bias_vl", DS_DT_F32, M_F32, n_experts, -1, false);
    char x[48];
    for (int e = 0; e < n_experts && !g->stop; e++) {
        g->expert = e;
        snprintf(x, sizeof x, "ffn.experts.%d.w1", e);
        qlin(g, p, x, DS_LABEL_W4A8, I, D, false);
        snprintf(x, sizeof x, "ffn.experts.%d.w2", e);
        qlin(g, p, x, DS_LABEL_W4A8, D, I, true);
        snprintf(x, sizeof x, "ffn.experts.%d.w3", e);
        qlin(g, p, x, DS_LABEL_W4A8, I, D, false);
    }
    g->expert = -1;
    qlin(g, p, "ffn.shared_experts.w1", DS_LABEL_W8A8, I, D, false);
    qlin(g, p, "ffn.shared_experts.w2", DS_LABEL_W8A8, D, I, false);
    qlin(g, p, "ffn.shared_experts.w3", DS_LABEL_W8A8, I, D, false);
}

static void backbone_layer(gen *g, int l, const ds_plan_opts *o) {
    const ds_config *c = g->c;
    const ds_layer_role *r = &c->roles[l];
    char p[32];
    snprintf(p, sizeof p, "layers.%d.", l);
    int64_t D = c->dim, dh = c->head_dim;
    g->layer = l;
    g->expert = -1;
    if (o->trunk) {
        g->file = DS_PF_TRUNK;
        block_common_head(g, p);
        if (r->role == DS_ROLE_FULL) {
            /* §8: compressor wkv is F32 at ratio-2 layers and BF16 at ratio 1 (pinned per ratio). */
            bool r2 = r->ratio >= 2;
            flt(g, p, "attn.compressor.wkv.weight", r2 ? DS_DT_F32 : DS_DT_BF16, r2 ? M_F32 : M_BF16, dh, D, true);
            if (r2) flt(g, p, "attn.compressor.wgate.weight", DS_DT_F32, M_F32, dh, D, true);
            flt(g, p, "attn.compressor.norm.weight", DS_DT_BF16, M_ANYF, dh, -1, false);
            flt(g, p, "attn.indexer.wk.weight", DS_DT_BF16, M_BF16, c->index_head_dim, dh, true);
            flt(g, p, "attn.indexer.k_norm.weight", DS_DT_BF16, M_ANYF, c->index_head_dim, -1, false);
        }
        if (r->role == DS_ROLE_FULL || r->role == DS_ROLE_REINDEX) {
            qlin(g, p, "attn.indexer.wq_b", DS_LABEL_W8A8, (int64_t)c->index_n_heads * c->index_head_dim, c->q_lora_rank, false);
            flt(g, p, "attn.indexer.weights_proj.weight", DS_DT_BF16, M_BF16, c->index_n_heads, D, true);
        }
        block_moe(g, p, c->n_experts);
    }
    if (o->engram && r->engram >= 0) {
        int64_t rows = c->engram_rows[r->engram], hd = c->engram_head_dim;
        int64_t ncols = (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads;
        g->file = DS_PF_ENGRAM_TABLE;
        char full[96];
        snprintf(full, sizeof full, "%sengram.embed.weight", p);
        ds_plan_tensor t = base(g, full, DS_LABEL_ENGRAM, DS_PP_ENGRAM_CODES);
        t.dtype = DS_DT_I8;
        t.dtype_mask = DS_DT_BIT(DS_DT_I8);
        t.ndim = 2;
        t.shape[0] = rows;
        t.shape[1] = hd;
        emit(g, &t);
        snprintf(full, sizeof full, "%sengram.embed.scale", p);
        t = base(g, full, DS_LABEL_ENGRAM, DS_PP_ENGRAM_SCALE);
        t.dtype = DS_DT_F32;
        t.dtype_mask = M_F32;
        t.ndim = 2;
        t.shape[0] = rows;
        t.shape[1] = hd / 32;
        emit(g, &t);
        g->file = DS_PF_ENGRAM_EXTRA;
        flt(g, p, "engram.wkv.weight", DS_DT_BF16, M_BF16, (int64_t)(c->hc_mult + 1) * D, ncols * hd, true);
        flt(g, p, "engram.q_weight", DS_DT_BF16, M_BF16, c->hc_mult, D, false);
        flt(g, p, "engram.k_weight", DS_DT_BF16, M_BF16, c->hc_mult, D, false);
    }
}

/* Draft stages (§2 and §11): the block without compressor, indexer or Engram, then the extras. */
static void draft(gen *g, const ds_plan_opts *o) {
    const ds_config *c = g->c;
    int S = c->n_mtp_layers, L = c->n_layers;
    int64_t D = c->dim, V = c->vocab_size, R = c->dspark_markov_rank;
    char p[32];
    for (int s = 0; s < S && !g->stop && o->draft; s++) {
        snprintf(p, sizeof p, "mtp.%d.", s);
        g->layer = L + s;
        g->expert = -1;
        g->file = DS_PF_DRAFT;
        block_common_head(g, p);
        block_moe(g, p, c->dspark_n_experts);
    }
    if (S <= 0 || g->stop) return;
    g->expert = -1;
    if (o->draft) {
        g->file = DS_PF_DRAFT;
        g->layer = L;
        ds_plan_tensor t;
        flt(g, "mtp.0.", "main_proj.weight", DS_DT_BF16, M_BF16, D, (int64_t)c->n_dspark_targets * D, true);
        flt(g, "mtp.0.", "main_norm.weight", DS_DT_BF16, M_ANYF, D, -1, false);
        snprintf(p, sizeof p, "mtp.%d.", S - 1);
        g->layer = L + S - 1;
        flt(g, p, "norm.weight", DS_DT_BF16, M_ANYF, D, -1, false);
        static const char *mk[2][2] = {{"markov_head.embed.weight", "markov_head.markov_w1.weight"},
                                       {"markov_head.head.weight", "markov_head.markov_w2.weight"}};
        for (int i = 0; i < 2; i++) {
            char full[96];
            snprintf(full, sizeof full, "%s%s", p, mk[i][0]);
            t = base(g, full, DS_LABEL_FLOAT, DS_PP_FLOAT);
            snprintf(t.alias, sizeof t.alias, "%s%s", p, mk[i][1]);
            t.dtype = DS_DT_BF16;
            t.dtype_mask = M_ANYF;
            t.ndim = 2;
            t.shape[0] = V;
            t.shape[1] = R;
            if (i == 1) { t.out = V; t.in = R; snprintf(t.linear, sizeof t.linear, "%smarkov_head.head", p); }
            emit(g, &t);
        }
        flt(g, p, "confidence_head.proj.weight", DS_DT_BF16, M_ANYF, 1, D + R, true);
    }
    if (o->draft_vocab) {
        g->file = DS_PF_DRAFT_VOCAB;
        g->layer = L;
        flt(g, "mtp.0.", "embed.weight", DS_DT_BF16, M_BF16, V, D, true);
        g->layer = L + S - 1;
        snprintf(p, sizeof p, "mtp.%d.", S - 1);
        flt(g, p, "head.weight", DS_DT_BF16, M_BF16, V, D, true);
    }
}

int ds_plan_foreach(const ds_config *cfg, const ds_plan_opts *o, ds_plan_cb cb, void *ctx, ds_error *err) {
    if (cfg->format != DS_FMT_W4A8)
        return ds_fail(err, "E_CONFIG_QUANT", "E_CONFIG_QUANT: tensor plan: expected the W4A8 release format (quant_method \"ascend\"), found %s",
                       cfg->format == DS_FMT_FP8 ? "\"fp8\" (official FP8/MXFP4 layout is not planned by this build)" : "no quantization_config");
    ds_plan_opts def;
    if (!o) { ds_plan_opts_default(&def, cfg); o = &def; }
    gen g = {.c = cfg, .cb = cb, .ctx = ctx, .layer = -1, .expert = -1};
    int64_t D = cfg->dim, V = cfg->vocab_size;
    if (o->trunk) {
        g.file = DS_PF_TRUNK;
        flt(&g, "", "embed.weight", DS_DT_BF16, M_BF16, V, D, false);
        flt(&g, "", "norm.weight", DS_DT_BF16, M_ANYF, D, -1, false);
        flt(&g, "", "head.weight", DS_DT_F32, M_ANYF, V, D, true);
    }
    for (int l = 0; l < cfg->n_layers && !g.stop; l++) backbone_layer(&g, l, o);
    if (!g.stop) draft(&g, o);
    if (!g.stop && o->rotation) {
        g.file = DS_PF_QUAROT;
        g.layer = g.expert = -1;
        ds_plan_tensor t = base(&g, "global_rotation", DS_LABEL_NONE, DS_PP_ROTATION);
        t.dtype = DS_DT_F32;
        t.dtype_mask = M_F32;
        t.ndim = 2;
        t.shape[0] = t.shape[1] = D;
        emit(&g, &t);
    }
    return g.stop;
}

typedef struct { ds_plan *p; int64_t cap; } build_ctx;
static int build_cb(const ds_plan_tensor *t, void *ctx) {
    build_ctx *b = ctx;
    if (b->p->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 1024;
        b->p->t = ds_xrealloc(b->p->t, sizeof(ds_plan_tensor) * (size_t)b->cap);
    }
    b->p->t[b->p->n++] = *t;
    return 0;
}

int ds_plan_build(const ds_config *cfg, const ds_plan_opts *o, ds_plan *out, ds_error *err) {
    memset(out, 0, sizeof *out);
    build_ctx b = {out, 0};
    int rc = ds_plan_foreach(cfg, o, build_cb, &b, err);
    if (rc < 0) ds_plan_free(out);
    return rc < 0 ? -1 : 0;
}

void ds_plan_free(ds_plan *p) {
    free(p->t);
    p->t = NULL;
    p->n = 0;
}

typedef struct { ds_plan_counts *c; int L; } count_ctx;
static int count_cb(const ds_plan_tensor *t, void *ctx) {
    count_ctx *k = ctx;
    k->c->by_file_label[t->file][t->label]++;
    k->c->bytes_by_file[t->file] += (int64_t)ds_plan_nbytes(t);
    k->c->total++;
    if (t->file == DS_PF_DRAFT && t->layer >= k->L && !strncmp(t->name, "mtp.", 4)) {
        /* block tensors only: the extras are counted separately by callers via by_file_label */
        const char *n = strchr(t->name + 4, '.') + 1;
        bool extra = !strcmp(n, "main_proj.weight") || !strcmp(n, "main_norm.weight") || !strcmp(n, "norm.weight") ||
                     !strncmp(n, "markov_head.", 12) || !strncmp(n, "confidence_head.", 16);
        if (!extra) k->c->per_stage[t->layer - k->L][t->label]++;
    }
    return 0;
}

int ds_plan_count(const ds_config *cfg, const ds_plan_opts *o, ds_plan_counts *c, ds_error *err) {
    memset(c, 0, sizeof *c);
    count_ctx k = {c, cfg->n_layers};
    return ds_plan_foreach(cfg, o, count_cb, &k, err) < 0 ? -1 : 0;
}
