/* Binding the checkpoint's tensors into ds_model's plain structs, by name (CHECKPOINT.md §2).
 *
 * Why the format is detected per linear from its tensors rather than taken from labels: the draft
 * manifest options move linears between FLOAT and W8A8, and the official release uses another
 * scheme altogether, so the rule of CHECKPOINT.md §11 applies everywhere: `X.weight_scale` present
 * → quantized, with `ceil(out/2)` packed rows → W4A8 and `out` rows → W8A8; `X.scale` present →
 * official FP8 (E4M3 weights) or MXFP4 (packed E2M1 experts) with E8M0 block scales, bound as
 * views that the kernels run in place (kernels.h DS_LIN_FP8 / DS_LIN_MXFP4); otherwise a float tensor used in place (BF16 or F32; F16 is
 * widened).  Quantized and float weights stay views into the mapped files.  Small vectors (norms)
 * are widened to fp32 copies once.  Every shape is checked against the config and reported in the
 * loader's `E_CODE: <file>: <tensor>: expected <x>, found <y>` form. */
#include "model/model.h"
#include "io/io_util.h"
#include "model/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *file_of(const ds_tensor *t) { return t->file && t->file->path ? t->file->path : "?"; }

static const ds_tensor *find(const ds_model *m, const char *name) { return ds_ckpt_tensor(m->ckpt, name); }

static const ds_tensor *need(ds_model *m, const char *name, ds_error *err) {
    const ds_tensor *t = find(m, name);
    if (!t) ds_io_fail(err, "E_TENSOR_MISSING", m->dir, name, "expected a tensor of this name, found none");
    return t;
}

static int check_shape(const ds_tensor *t, int64_t d0, int64_t d1, ds_error *err) {
    /* d1 < 0: a vector [d0]; also accept [d0, 1] for per-channel scales when d1 == -2 */
    char want[64], got[64];
    int ok;
    if (d1 == -1) ok = t->ndim == 1 && t->shape[0] == d0;
    else if (d1 == -2) ok = (t->ndim == 1 && t->shape[0] == d0) || (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == 1);
    else ok = t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1;
    if (ok) return 0;
    int64_t ws[2] = {d0, d1 < 0 ? 1 : d1};
    ds_io_shape_str(want, sizeof want, d1 == -1 ? 1 : 2, ws);
    ds_io_shape_str(got, sizeof got, t->ndim, t->shape);
    return ds_io_fail(err, "E_SHAPE_MISMATCH", file_of(t), t->name, "expected %s, found %s", want, got);
}

static int bad_dtype(const ds_tensor *t, const char *want, ds_error *err) {
    return ds_io_fail(err, "E_DTYPE_MISMATCH", file_of(t), t->name, "expected %s, found %s", want, ds_dtype_name(t->dtype));
}

/* A float vector [n] widened to fp32. */
static int bind_vec(ds_model *m, const char *name, int64_t n, const float **out, ds_error *err) {
    const ds_tensor *t = need(m, name, err);
    if (!t || check_shape(t, n, -1, err) < 0) return -1;
    if (t->dtype == DS_DT_F32) { *out = t->data; return 0; }
    float *v = ds_model_own(m, ds_xmalloc(sizeof(float) * (size_t)n));
    if (t->dtype == DS_DT_BF16) for (int64_t i = 0; i < n; i++) v[i] = ds_bf16_to_f32(((const ds_bf16 *)t->data)[i]);
    else if (t->dtype == DS_DT_F16) for (int64_t i = 0; i < n; i++) v[i] = ds_f16_to_f32(((const uint16_t *)t->data)[i]);
    else return bad_dtype(t, "F32, BF16 or F16", err);
    *out = v;
    return 0;
}

/* A float matrix [d0, d1] as fp32 (hc parameters are F32 in every release; others widened). */
static int bind_mat_f32(ds_model *m, const char *name, int64_t d0, int64_t d1, const float **out, ds_error *err) {
    const ds_tensor *t = need(m, name, err);
    if (!t || check_shape(t, d0, d1, err) < 0) return -1;
    if (t->dtype == DS_DT_F32) { *out = t->data; return 0; }
    size_t n = (size_t)d0 * (size_t)d1;
    float *v = ds_model_own(m, ds_xmalloc(sizeof(float) * n));
    if (t->dtype == DS_DT_BF16) for (size_t i = 0; i < n; i++) v[i] = ds_bf16_to_f32(((const ds_bf16 *)t->data)[i]);
    else if (t->dtype == DS_DT_F16) for (size_t i = 0; i < n; i++) v[i] = ds_f16_to_f32(((const uint16_t *)t->data)[i]);
    else return bad_dtype(t, "F32, BF16 or F16", err);
    *out = v;
    return 0;
}

/* Official FP8 dense / MXFP4 expert weights: views into the mapped shards with their E8M0 scales,
 * run in place by the kernels (DS_LIN_FP8 / DS_LIN_MXFP4); nothing is expanded. */
static int bind_official(const ds_tensor *wt, const ds_tensor *st, int64_t out, int64_t in, ds_linear *L, ds_error *err) {
    if (st->dtype != DS_DT_F8_E8M0 && st->dtype != DS_DT_U8) return bad_dtype(st, "F8_E8M0", err);
    if (wt->dtype == DS_DT_F8_E4M3) {
        if (check_shape(wt, out, in, err) < 0 || check_shape(st, (out + 31) / 32, (in + 31) / 32, err) < 0) return -1;
        L->fmt = DS_LIN_FP8;
    } else if (wt->dtype == DS_DT_I8 || wt->dtype == DS_DT_U8 || wt->dtype == DS_DT_F4) {
        if (in % 32)
            return ds_io_fail(err, "E_SHAPE_MISMATCH", file_of(wt), wt->name, "expected an input width divisible by 32 (MXFP4 "
                              "scales per 32 inputs), found %lld", (long long)in);
        if (check_shape(wt, out, ds_e2m1_cols(wt->dtype, in), err) < 0 || check_shape(st, out, in / 32, err) < 0) return -1;
        L->fmt = DS_LIN_MXFP4;
    } else {
        return bad_dtype(wt, "F8_E4M3 or E2M1 (F4, or packed in I8/U8)", err);
    }
    L->w = wt->data;
    L->w_e8m0 = st->data;
    return 0;
}

static void register_linear(ds_model *m, ds_linear *L) {
    if (m->n_lins == m->cap_lins) {
        m->cap_lins = m->cap_lins ? 2 * m->cap_lins : 256;
        m->lins = ds_xrealloc(m->lins, sizeof(*m->lins) * (size_t)m->cap_lins);
    }
    m->lins[m->n_lins++] = L;
    L->numerics = m->numerics;     /* before prepare: a tier may want its own tiles */
    m->packed_bytes += ds_linear_prepare(L);
}

/* Describe linear `base` ("layers.0.attn.wq_a") of logical shape [out, in] (not yet registered). */
static int describe_linear(ds_model *m, const char *base, int64_t out, int64_t in, ds_linear *L, ds_error *err) {
    char name[192];
    memset(L, 0, sizeof *L);
    L->out = (int)out;
    L->in = (int)in;
    snprintf(name, sizeof name, "%s.weight", base);
    const ds_tensor *wt = need(m, name, err);
    if (!wt) return -1;
    snprintf(name, sizeof name, "%s.weight_scale", base);
    const ds_tensor *ws = find(m, name);
    snprintf(name, sizeof name, "%s.scale", base);
    const ds_tensor *os = ws ? NULL : find(m, name);
    if (ws) {
        if (wt->dtype != DS_DT_I8 && wt->dtype != DS_DT_U8) return bad_dtype(wt, "I8", err);
        if (ws->dtype != DS_DT_F32) return bad_dtype(ws, "F32", err);
        if (check_shape(ws, out, -2, err) < 0) return -1;
        if (wt->ndim == 2 && wt->shape[0] == out && wt->shape[1] == in) L->fmt = DS_LIN_W8A8;
        else if (wt->ndim == 2 && wt->shape[0] == (out + 1) / 2 && wt->shape[1] == in) L->fmt = DS_LIN_W4A8;
        else {
            char got[64];
            ds_io_shape_str(got, sizeof got, wt->ndim, wt->shape);
            return ds_io_fail(err, "E_SHAPE_MISMATCH", file_of(wt), wt->name, "expected [%lld, %lld] (W8A8) or [%lld, %lld] "
                              "(W4A8), found %s", (long long)out, (long long)in, (long long)((out + 1) / 2), (long long)in, got);
        }
        L->w = wt->data;
        L->w_scale = ws->data;
    } else if (os) {
        if (bind_official(wt, os, out, in, L, err) < 0) return -1;
        /* the official runtime keeps wo_a in bf16 and feeds it the unquantized attention output
         * (CHECKPOINT.md §14); every other FP8/FP4 linear sees E4M3 rows under that numerics */
        size_t nl = strlen(base);
        L->act_e4m3 = m->act_e4m3 && !(nl >= 5 && !strcmp(base + nl - 5, ".wo_a"));
    } else {
        if (check_shape(wt, out, in, err) < 0) return -1;
        if (wt->dtype == DS_DT_BF16) L->fmt = DS_LIN_BF16;
        else if (wt->dtype == DS_DT_F32) L->fmt = DS_LIN_F32;
        else if (wt->dtype == DS_DT_F16) {
            size_t n = (size_t)out * (size_t)in;
            float *w = ds_model_own(m, ds_xmalloc(sizeof(float) * n));
            for (size_t i = 0; i < n; i++) w[i] = ds_f16_to_f32(((const uint16_t *)wt->data)[i]);
            L->fmt = DS_LIN_F32;
            L->w = w;
            return 0;
        } else return bad_dtype(wt, "BF16 or F32 (float linear), I8 with weight_scale (quantized)", err);
        L->w = wt->data;
    }
    return 0;
}

/* Describe and register (kernel preparation, release at free). */
static int bind_linear(ds_model *m, const char *base, int64_t out, int64_t in, ds_linear *L, ds_error *err) {
    if (describe_linear(m, base, out, in, L, err) < 0) return -1;
    register_linear(m, L);
    return 0;
}

/* Rows [r0, r1) of a described linear (a shard, dist/dist.h); W4A8 rows start even (two per byte). */
static void row_view(ds_linear *L, int r0, int r1) {
    const size_t in = (size_t)L->in, o = (size_t)r0;
    switch (L->fmt) {
    case DS_LIN_BF16: L->w = (const ds_bf16 *)L->w + o * in; break;
    case DS_LIN_F32: L->w = (const float *)L->w + o * in; break;
    case DS_LIN_W8A8: L->w = (const int8_t *)L->w + o * in; break;
    case DS_LIN_W4A8: L->w = (const int8_t *)L->w + (o / 2) * in; break;
    case DS_LIN_FP8:   /* whole 32-row scale tiles (bind_linear_rows checks the alignment) */
        L->w = (const uint8_t *)L->w + o * in;
        L->w_e8m0 += (o / 32) * ((in + 31) / 32);
        break;
    case DS_LIN_MXFP4:
        L->w = (const uint8_t *)L->w + o * (in / 2);
        L->w_e8m0 += o * (in / 32);
        break;
    }
    if (L->w_scale) L->w_scale += r0;
    L->out = r1 - r0;
}

/* Bind only rows [r0, r1) of `base` (the whole tensor when they cover it); an empty range is
 * described (validated) but not registered, so its pages are never touched.  rest_unread: the
 * other rows belong to other ranks, so their codes leave this rank's memory plan. */
static int bind_linear_rows(ds_model *m, const char *base, int64_t out, int64_t in, int r0, int r1, ds_linear *L,
                            int rest_unread, ds_error *err) {
    if (describe_linear(m, base, out, in, L, err) < 0) return -1;
    const size_t whole = ds_linear_code_bytes(L);
    if (r0 == 0 && r1 == out) {
        register_linear(m, L);
        return 0;
    }
    if (L->fmt == DS_LIN_W4A8 && r0 % 2)
        return ds_io_fail(err, "E_SHAPE_MISMATCH", m->dir, base, "a W4A8 shard must start on an even row, found %d", r0);
    if (L->fmt == DS_LIN_FP8 && r0 % 32)
        return ds_io_fail(err, "E_SHAPE_MISMATCH", m->dir, base, "an FP8 shard must start on a 32-row scale tile, found row %d", r0);
    row_view(L, r0, r1);
    if (rest_unread) m->unread_bytes += whole - ds_linear_code_bytes(L);
    if (L->out > 0) register_linear(m, L);
    return 0;
}

int ds_model_bind_linear(ds_model *m, const char *base, int64_t out, int64_t in, ds_linear *L, ds_error *err) {
    return bind_linear(m, base, out, in, L, err);
}

int ds_model_bind_vec(ds_model *m, const char *name, int64_t n, const float **out, ds_error *err) {
    return bind_vec(m, name, n, out, err);
}

/* Split wo_a [G·ol, gin] into G linears of [ol, gin] (each group sees only its heads). */
static int bind_wo_a(ds_model *m, const char *base, ds_layer_weights *lw, int sharded, ds_error *err) {
    const ds_config *c = &m->cfg;
    const int G = c->o_groups, ol = c->o_lora_rank, gin = c->n_heads * c->head_dim / G;
    ds_linear full;   /* the whole tensor, only described: each group view is registered */
    if (describe_linear(m, base, (int64_t)G * ol, gin, &full, err) < 0) return -1;
    lw->wo_a = ds_model_own(m, ds_xcalloc((size_t)G, sizeof(ds_linear)));
    for (int g = 0; g < G; g++) {
        ds_linear *L = &lw->wo_a[g];
        L->fmt = full.fmt;
        L->out = ol;
        L->in = gin;
        size_t row0 = (size_t)g * ol;
        switch (full.fmt) {
        case DS_LIN_BF16: L->w = (const ds_bf16 *)full.w + row0 * gin; break;
        case DS_LIN_F32: L->w = (const float *)full.w + row0 * gin; break;
        case DS_LIN_W8A8: L->w = (const int8_t *)full.w + row0 * gin; break;
        case DS_LIN_W4A8:
            if (ol % 2) return ds_io_fail(err, "E_SHAPE_MISMATCH", m->dir, base, "expected an even o_lora_rank for a W4A8 "
                                          "wo_a, found %d", ol);
            L->w = (const int8_t *)full.w + (row0 / 2) * gin;
            break;
        case DS_LIN_FP8:    /* whole 32-row scale tiles per group */
            if (ol % 32) return ds_io_fail(err, "E_SHAPE_MISMATCH", m->dir, base, "expected o_lora_rank divisible by 32 for an "
                                           "FP8 wo_a (32x32 scale tiles per group), found %d", ol);
            L->w = (const uint8_t *)full.w + row0 * gin;
            L->w_e8m0 = full.w_e8m0 + (row0 / 32) * (size_t)((gin + 31) / 32);
            break;
        case DS_LIN_MXFP4:
            L->w = (const uint8_t *)full.w + row0 * (gin / 2);
            L->w_e8m0 = full.w_e8m0 + row0 * (size_t)(gin / 32);
            break;
        }
        if (full.w_scale) L->w_scale = full.w_scale + row0;
        if (!sharded || (g >= m->shard.g0 && g < m->shard.g1)) register_linear(m, L);
        else m->unread_bytes += ds_linear_code_bytes(L);   /* another rank's group */
    }
    return 0;
}

static int bind_layer(ds_model *m, int l, ds_error *err) {
    char p[64];
    snprintf(p, sizeof p, "layers.%d.", l);
    return ds_model_bind_block(m, p, l, m->cfg.n_experts, &m->layers[l], err);
}

int ds_model_bind_block(ds_model *m, const char *p, int l, int n_experts, ds_layer_weights *lw, ds_error *err) {
    const ds_config *c = &m->cfg;
    const ds_layer_role *role = &c->roles[l];
    const int64_t D = c->dim, HC = c->hc_mult, nmix = (2 + HC) * HC, dh = c->head_dim, ql = c->q_lora_rank;
    char n[192];
#define NM(suffix) (snprintf(n, sizeof n, "%s%s", p, suffix), n)
    if (bind_vec(m, NM("attn_norm.weight"), D, &lw->attn_norm, err) < 0) return -1;
    if (bind_vec(m, NM("ffn_norm.weight"), D, &lw->ffn_norm, err) < 0) return -1;
    ds_hc_params *hp[2] = {&lw->hc_attn, &lw->hc_ffn};
    const char *site[2] = {"attn", "ffn"};
    for (int i = 0; i < 2; i++) {
        char sn[64];
        hp[i]->hc = (int)HC;
        hp[i]->dim = (int)D;
        hp[i]->iters = c->hc_sinkhorn_iters;
        hp[i]->hc_eps = (float)c->hc_eps;
        hp[i]->norm_eps = c->norm_eps;
        snprintf(sn, sizeof sn, "hc_%s_fn", site[i]);
        if (bind_mat_f32(m, NM(sn), nmix, HC * D, &hp[i]->fn, err) < 0) return -1;
        snprintf(sn, sizeof sn, "hc_%s_base", site[i]);
        if (bind_vec(m, NM(sn), nmix, &hp[i]->base, err) < 0) return -1;
        snprintf(sn, sizeof sn, "hc_%s_scale", site[i]);
        if (bind_vec(m, NM(sn), 3, &hp[i]->scale, err) < 0) return -1;
    }
    char b[160];
#define LIN(suffix) (snprintf(b, sizeof b, "%s%s", p, suffix), b)
    if (bind_linear(m, LIN("attn.wq_a"), ql, D, &lw->wq_a, err) < 0) return -1;
    if (bind_vec(m, NM("attn.q_norm.weight"), ql, &lw->q_norm, err) < 0) return -1;
    /* the backbone is split over the ranks (dist/dist.h); draft stages are replicated */
    const ds_shard *sh = &m->shard;
    const int shard = sh->size > 1 && l < c->n_layers;
    const int q0 = shard ? sh->h0 * (int)dh : 0, q1 = shard ? sh->h1 * (int)dh : c->n_heads * (int)dh;
    if (bind_linear_rows(m, LIN("attn.wq_b"), (int64_t)c->n_heads * dh, ql, q0, q1, &lw->wq_b, 1, err) < 0) return -1;
    if (bind_linear(m, LIN("attn.wkv"), dh, D, &lw->wkv, err) < 0) return -1;
    if (bind_vec(m, NM("attn.kv_norm.weight"), dh, &lw->kv_norm, err) < 0) return -1;
    if (bind_wo_a(m, LIN("attn.wo_a"), lw, shard, err) < 0) return -1;
    if (bind_linear_rows(m, LIN("attn.wo_b"), D, (int64_t)c->o_groups * c->o_lora_rank, shard ? sh->d0 : 0,
                         shard ? sh->d1 : (int)D, &lw->wo_b, 1, err) < 0) return -1;
    if (bind_vec(m, NM("attn.attn_sink"), c->n_heads, &lw->attn_sink, err) < 0) return -1;
    if (role->role == DS_ROLE_FULL) {
        if (bind_linear(m, LIN("attn.compressor.wkv"), dh, D, &lw->cmp_wkv, err) < 0) return -1;
        if (role->ratio >= 2 && bind_linear(m, LIN("attn.compressor.wgate"), dh, D, &lw->cmp_wgate, err) < 0) return -1;
        if (bind_vec(m, NM("attn.compressor.norm.weight"), dh, &lw->cmp_norm, err) < 0) return -1;
        if (bind_linear(m, LIN("attn.indexer.wk"), c->index_head_dim, dh, &lw->idx_wk, err) < 0) return -1;
        if (bind_vec(m, NM("attn.indexer.k_norm.weight"), c->index_head_dim, &lw->idx_k_norm, err) < 0) return -1;
    }
    if (role->role == DS_ROLE_FULL || role->role == DS_ROLE_REINDEX) {
        if (bind_linear(m, LIN("attn.indexer.wq_b"), (int64_t)c->index_n_heads * c->index_head_dim, ql, &lw->idx_wq_b, err) < 0)
            return -1;
        if (bind_linear(m, LIN("attn.indexer.weights_proj"), c->index_n_heads, D, &lw->idx_wproj, err) < 0) return -1;
    }
    const int E = n_experts;
    if (bind_linear(m, LIN("ffn.gate"), E, D, &lw->gate, err) < 0) return -1;
    if (bind_vec(m, NM("ffn.gate.bias"), E, &lw->gate_bias, err) < 0) return -1;
    lw->gate_bias_vl = NULL;
    if (find(m, NM("ffn.gate.bias_vl")) && bind_vec(m, n, E, &lw->gate_bias_vl, err) < 0) return -1;
    lw->w1 = ds_model_own(m, ds_xcalloc((size_t)E, sizeof(ds_linear)));
    lw->w2 = ds_model_own(m, ds_xcalloc((size_t)E, sizeof(ds_linear)));
    lw->w3 = ds_model_own(m, ds_xcalloc((size_t)E, sizeof(ds_linear)));
    const int64_t I = c->moe_inter;
    for (int e = 0; e < E; e++) {
        char eb[96];
        /* an expert of another rank is validated but never prepared: its pages stay untouched */
        const int own = !shard || (e >= sh->e0 && e < sh->e1);
        snprintf(eb, sizeof eb, "ffn.experts.%d.w1", e);
        if (bind_linear_rows(m, LIN(eb), I, D, 0, own ? (int)I : 0, &lw->w1[e], 1, err) < 0) return -1;
        snprintf(eb, sizeof eb, "ffn.experts.%d.w2", e);
        if (bind_linear_rows(m, LIN(eb), D, I, 0, own ? (int)D : 0, &lw->w2[e], 1, err) < 0) return -1;
        snprintf(eb, sizeof eb, "ffn.experts.%d.w3", e);
        if (bind_linear_rows(m, LIN(eb), I, D, 0, own ? (int)I : 0, &lw->w3[e], 1, err) < 0) return -1;
    }
    if (bind_linear(m, LIN("ffn.shared_experts.w1"), I, D, &lw->sw1, err) < 0) return -1;
    if (bind_linear(m, LIN("ffn.shared_experts.w2"), D, I, &lw->sw2, err) < 0) return -1;
    if (bind_linear(m, LIN("ffn.shared_experts.w3"), I, D, &lw->sw3, err) < 0) return -1;
    return 0;
#undef NM
#undef LIN
}

static int bind_engram(ds_model *m, int e, ds_error *err) {
    const ds_config *c = &m->cfg;
    ds_engram_weights *ew = &m->engram[e];
    const int l = c->engram_layers[e], hd = c->engram_head_dim, D = c->dim, HC = c->hc_mult;
    const int ncol = (c->engram_max_ngram - 1) * c->engram_n_heads;
    char n[160];
    ew->layer = l;
    ew->rows = c->engram_rows[e];
    snprintf(n, sizeof n, "layers.%d.engram.embed.weight", l);
    const ds_tensor *tw = need(m, n, err);
    if (!tw || check_shape(tw, ew->rows, hd, err) < 0) return -1;
    snprintf(n, sizeof n, "layers.%d.engram.embed.scale", l);
    const ds_tensor *ts = need(m, n, err);
    if (!ts || check_shape(ts, ew->rows, hd / 32, err) < 0) return -1;
    if ((tw->dtype == DS_DT_I8 || tw->dtype == DS_DT_U8) && ts->dtype == DS_DT_F32) ew->fp8 = 0;
    else if (tw->dtype == DS_DT_F8_E4M3 && (ts->dtype == DS_DT_F8_E8M0 || ts->dtype == DS_DT_U8)) ew->fp8 = 1;
    else return bad_dtype(tw, "I8 codes with F32 scales, or F8_E4M3 with F8_E8M0 scales", err);
    ew->codes = tw->data;
    ew->scales = ts->data;
    ew->t_codes = tw;
    ew->t_scales = ts;
    snprintf(n, sizeof n, "layers.%d.engram.wkv", l);
    if (bind_linear(m, n, (int64_t)(HC + 1) * D, (int64_t)ncol * hd, &ew->wkv, err) < 0) return -1;
    const float *qw, *kw;
    snprintf(n, sizeof n, "layers.%d.engram.q_weight", l);
    if (bind_mat_f32(m, n, HC, D, &qw, err) < 0) return -1;
    snprintf(n, sizeof n, "layers.%d.engram.k_weight", l);
    if (bind_mat_f32(m, n, HC, D, &kw, err) < 0) return -1;
    ew->wq = ds_model_own(m, ds_xmalloc(sizeof(float) * (size_t)HC * D));
    for (size_t i = 0; i < (size_t)HC * D; i++) ew->wq[i] = qw[i] * kw[i];
    return 0;
}

int ds_model_bind_weights(ds_model *m, ds_error *err) {
    const ds_config *c = &m->cfg;
    const ds_tensor *t = need(m, "embed.weight", err);
    if (!t || check_shape(t, c->vocab_size, c->dim, err) < 0) return -1;
    if (t->dtype != DS_DT_BF16) return bad_dtype(t, "BF16", err);
    m->embed = t->data;
    if (bind_vec(m, "norm.weight", c->dim, &m->norm, err) < 0) return -1;
    ds_dist_plan(c, &m->shard);
    if (m->shard.size == 1) {
        if (bind_linear(m, "head", c->vocab_size, c->dim, &m->head, err) < 0) return -1;
        m->head_part = m->head;
    } else {
        /* the whole head is only described (a draft without its own head reads it, preparing it on
         * first use); this rank's logits come from its vocabulary rows */
        if (describe_linear(m, "head", c->vocab_size, c->dim, &m->head, err) < 0) return -1;
        if (bind_linear_rows(m, "head", c->vocab_size, c->dim, m->shard.v0, m->shard.v1, &m->head_part, 0, err) < 0)
            return -1;   /* its other rows: model.c counts them once it knows whether a draft reads them */
    }
    m->layers = ds_model_own(m, ds_xcalloc((size_t)(c->n_layers + c->n_mtp_layers), sizeof(ds_layer_weights)));
    for (int l = 0; l < c->n_layers; l++)
        if (bind_layer(m, l, err) < 0) return -1;
    for (int e = 0; e < c->n_engram; e++)
        if (bind_engram(m, e, err) < 0) return -1;
    if (c->n_engram && m->ckpt->has_rotation) {
        memcpy(m->rot, m->ckpt->rot_block, sizeof m->rot);
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 32; j++) m->rot_t[32 * j + i] = m->rot[32 * i + j];
        m->unrotate_gate = c->engram_gate_original_basis;
        m->rotate_value = !c->engram_value_rotated;
        if (c->dim % 32)
            return ds_io_fail(err, "E_CONFIG", m->dir, "hidden_size", "expected a multiple of 32 (rotation blocks), found %d", c->dim);
    }
    return 0;
}

/* ---- giving back the published pages of prepared linears ---- */

typedef struct { uintptr_t lo, hi; } byte_range;

static int cmp_range(const void *a, const void *b) {
    const byte_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Why: the kernels stream a prepared copy of nearly every linear (int8 tiles, MXFP4 panels, the
 * fast tier's float copies, all on 2 MiB pages), so after load the published bytes behind them
 * are never read again; held beside their copies they doubled the memory the backbone takes
 * (the W4A8 release: its ~270 GiB twice, more than a 768 GiB host holds with any KV cache).
 * Ranges are merged first, so bytes two linears share are counted once. */
size_t ds_model_release_published(ds_model *m) {
    byte_range *r = ds_xmalloc(sizeof *r * (size_t)(m->n_lins + 1));
    int n = 0;
    for (int i = 0; i < m->n_lins; i++) {
        const ds_linear *L = m->lins[i];
        if (!L->w || !ds_linear_published_idle(L)) continue;
        r[n].lo = (uintptr_t)L->w;
        r[n].hi = r[n].lo + ds_linear_code_bytes(L);
        n++;
    }
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    size_t released = 0;
    for (int i = 0; i < n;) {
        byte_range u = r[i++];
        for (; i < n && r[i].lo <= u.hi; i++)
            if (r[i].hi > u.hi) u.hi = r[i].hi;
        released += ds_ckpt_release(m->ckpt, (const void *)u.lo, (size_t)(u.hi - u.lo));
    }
    free(r);
    m->uncounted_bytes += released;
    m->released_bytes = released;
    return released;
}
