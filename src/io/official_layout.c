/* The official FP8/MXFP4 layout (CHECKPOINT.md §14): the tensor classifier and the start-up
 * checklist of that layout (the counterpart of checkpoint_checks.c for the W4A8 release).
 *
 * Why the checks walk the W4A8 tensor plan: the two releases hold the same model, so the plan
 * (derived from the config: layer roles, experts, Engram layers, draft stages) already lists every
 * tensor with its logical shape.  Each planned weight is mapped to its official form — FP8 codes
 * and tile scales, MXFP4 codes and per-32 scales, FP8 Engram rows, or the float tensor itself —
 * and checked for presence, dtype and shape; the W4A8-only tensors (weight_scale, weight_offset,
 * scale_bias, rotation, the draft's vocabulary copies) are not expected.  Scale bytes are checked
 * for the E8M0 NaN code 255 and weight bytes for the E4M3 NaN codes 0x7F/0xFF: whole tensors up to
 * 1 MiB (the checks cost one read), and for larger ones the first and last 64 KiB at level basic,
 * all of it at level full (the real release's expert scales alone are ~17 GB). */
#include "io/official_layout.h"
#include "io/checkpoint_internal.h"
#include "io/io_util.h"
#include "io/tensor_plan.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

ds_official_kind ds_official_kind_of(const char *name, int n_mtp) {
    static const char *const dense[] = {".attn.wq_a.weight", ".attn.wq_b.weight", ".attn.wkv.weight", ".attn.wo_a.weight",
                                        ".attn.wo_b.weight", ".indexer.wq_b.weight", ".shared_experts.w1.weight",
                                        ".shared_experts.w2.weight", ".shared_experts.w3.weight", ".engram.wkv.weight",
                                        ".main_proj.weight"};
    char last_head[48];
    snprintf(last_head, sizeof last_head, "mtp.%d.head.weight", n_mtp - 1);
    if (!strcmp(name, "mtp.0.embed.weight") || (n_mtp > 0 && !strcmp(name, last_head))) return DS_OFF_DROP;
    if (ends_with(name, ".engram.embed.weight")) return DS_OFF_ROWS;
    if (strstr(name, ".ffn.experts.") && ends_with(name, ".weight")) return DS_OFF_MXFP4;
    for (size_t i = 0; i < DS_ARRAY_LEN(dense); i++)
        if (ends_with(name, dense[i])) return DS_OFF_FP8;
    return DS_OFF_FLOAT;
}

bool ds_official_float_is_f32(const char *name) {
    const char *last = strrchr(name, '.');
    const char *leaf = last ? last + 1 : name;
    return !strncmp(leaf, "hc_", 3) || !strcmp(leaf, "attn_sink") ||
           ends_with(name, ".gate.bias") || ends_with(name, ".gate.bias_vl");
}

typedef struct oc {
    ck_state *s;
    ds_error *err;
} oc;

static const ds_tensor *need(oc *p, const char *name, int *idx) {
    *idx = ck_find(p->s->c, name);
    if (*idx >= 0) return p->s->c->by_name[*idx];
    ds_io_fail(p->err, "E_TENSOR_MISSING", p->s->index_path, name, "expected the tensor (official FP8/MXFP4 layout, required by the config), found it absent");
    return NULL;
}

static int want(oc *p, const ds_tensor *x, uint32_t mask, const char *mask_text, int64_t d0, int64_t d1, const char *why) {
    if (!(mask & DS_DT_BIT(x->dtype)))
        return ds_io_fail(p->err, "E_DTYPE_MISMATCH", x->file->path, x->name, "expected %s, found %s", mask_text, ds_dtype_name(x->dtype));
    int64_t shape[2] = {d0, d1};
    int nd = d1 < 0 ? 1 : 2;
    bool ok = x->ndim == nd && x->shape[0] == d0 && (nd == 1 || x->shape[1] == d1);
    if (ok) return 0;
    char s1[64], s2[64];
    ds_io_shape_str(s1, sizeof s1, nd, shape);
    ds_io_shape_str(s2, sizeof s2, x->ndim, x->shape);
    return ds_io_fail(p->err, "E_SHAPE_MISMATCH", x->file->path, x->name, "expected %s%s, found %s", s1, why, s2);
}

/* NaN codes in a byte tensor (E8M0 255; E4M3 0x7F / 0xFF): see the top comment for the extent. */
static int scan_nan(oc *p, const ds_tensor *x, bool e8m0) {
    const uint8_t *b = x->data;
    const uint64_t n = x->nbytes, part = (uint64_t)64 << 10;
    bool whole = p->s->o->full || n <= ((uint64_t)1 << 20);
    for (int half = 0; half < (whole ? 1 : 2); half++) {
        uint64_t i0 = whole ? 0 : half ? n - part : 0, i1 = whole ? n : half ? n : part;
        for (uint64_t i = i0; i < i1; i++) {
            bool nan = e8m0 ? b[i] == 255 : (b[i] & 0x7f) == 0x7f;
            if (!nan) continue;
            int64_t cols = x->ndim == 2 ? x->shape[1] : (int64_t)n;
            return ds_io_fail(p->err, e8m0 ? "E_SCALE_NAN" : "E_WEIGHT_NAN", x->file->path, x->name,
                              "expected finite %s codes, found the NaN code 0x%02X at row %" PRIu64 " column %" PRIu64,
                              e8m0 ? "E8M0 scale" : "E4M3 weight", b[i], i / (uint64_t)cols, i % (uint64_t)cols);
        }
    }
    return 0;
}

/* Codes + scales of one encoded tensor.  `w` is "...X.weight"; the scale is "...X.scale". */
static int check_encoded(oc *p, const char *w, ds_official_kind k, int64_t out, int64_t in) {
    ds_checkpoint *c = p->s->c;
    char sn[160];
    snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(w) - 7), w);
    int wi, si;
    const ds_tensor *x = need(p, w, &wi), *sc = x ? need(p, sn, &si) : NULL;
    if (!sc) return -1;
    if (k != DS_OFF_FP8 && in % 32)
        return ds_io_fail(p->err, "E_SHAPE_MISMATCH", x->file->path, x->name, "expected an input width divisible by 32 for per-32 scales, found %" PRId64, in);
    const uint32_t e4 = DS_DT_BIT(DS_DT_F8_E4M3), e8 = DS_DT_BIT(DS_DT_F8_E8M0) | DS_DT_BIT(DS_DT_U8);
    int rc;
    if (k == DS_OFF_MXFP4) {
        if (x->dtype == DS_DT_F4) rc = want(p, x, DS_DT_BIT(DS_DT_F4), "F4", out, ds_e2m1_cols(x->dtype, in), " (E2M1 codes, two per byte along the input)");
        else rc = want(p, x, DS_DT_BIT(DS_DT_U8) | DS_DT_BIT(DS_DT_I8), "U8 or I8 (packed E2M1), or F4", out, ds_e2m1_cols(x->dtype, in), " (two E2M1 codes per byte along the input)");
        if (!rc) rc = want(p, sc, e8, "F8_E8M0", out, in / 32, " (one scale per 32 inputs of a row)");
    } else if (k == DS_OFF_ROWS) {
        rc = want(p, x, e4, "F8_E4M3", out, in, " (engram_num_embeddings rows)");
        if (!rc) rc = want(p, sc, e8, "F8_E8M0", out, in / 32, " (one scale per 32 values of a row)");
    } else {
        rc = want(p, x, e4, "F8_E4M3", out, in, "");
        if (!rc) rc = want(p, sc, e8, "F8_E8M0", (out + 31) / 32, (in + 31) / 32, " (one scale per 32x32 block, weight_block_size [32, 32])");
    }
    if (!rc) rc = scan_nan(p, sc, true);
    if (!rc && k != DS_OFF_MXFP4) rc = scan_nan(p, x, false);
    if (rc) return -1;
    ds_label l = k == DS_OFF_MXFP4 ? DS_LABEL_W4A8 : k == DS_OFF_ROWS ? DS_LABEL_ENGRAM : DS_LABEL_W8A8;
    c->detected[wi] = c->detected[si] = l;
    return 0;
}

static int plan_cb(const ds_plan_tensor *t, void *ctx) {
    oc *p = ctx;
    ds_checkpoint *c = p->s->c;
    if (t->part == DS_PP_SCALE || t->part == DS_PP_OFFSET || t->part == DS_PP_SCALE_BIAS || t->part == DS_PP_ROTATION ||
        t->part == DS_PP_ENGRAM_SCALE || t->file == DS_PF_DRAFT_VOCAB)
        return 0;
    if (t->file == DS_PF_ENGRAM_EXTRA && ends_with(t->name, ".engram.embed.weight") && t->part != DS_PP_ENGRAM_CODES) return 0;
    ds_official_kind k = ds_official_kind_of(t->name, c->cfg.n_mtp_layers);
    if (k == DS_OFF_DROP) return 0;
    int64_t out = t->out ? t->out : t->shape[0], in = t->out ? t->in : t->shape[1];
    if (k == DS_OFF_ROWS) { out = t->shape[0]; in = t->shape[1]; }
    if (k != DS_OFF_FLOAT) return check_encoded(p, t->name, k, out, in) ? 1 : 0;
    int idx = t->alias[0] && ck_find(c, t->name) < 0 ? ck_find(c, t->alias) : -1;
    const ds_tensor *x = idx >= 0 ? c->by_name[idx] : need(p, t->name, &idx);
    if (!x) return 1;
    /* BF16 is the official form of every float tensor outside the F32 set (CHECKPOINT.md §14); the
     * engine reads a BF16 tensor wherever the W4A8 plan pins F32 (the exact tier widens it to the
     * same values), so both are accepted there */
    const uint32_t mask = t->dtype_mask | (ds_official_float_is_f32(t->name) ? 0u : DS_DT_BIT(DS_DT_BF16));
    char mt[96] = "";
    for (int d = 0; d < DS_DT_COUNT; d++)
        if (mask & DS_DT_BIT(d)) snprintf(mt + strlen(mt), sizeof mt - strlen(mt), "%s%s", mt[0] ? " or " : "", ds_dtype_name((ds_dtype)d));
    if (want(p, x, mask, mt, t->shape[0], t->ndim == 1 ? -1 : t->shape[1], "")) return 1;
    c->detected[idx] = DS_LABEL_FLOAT;
    return 0;
}

int ck_check_official(ck_state *s, ds_error *err) {
    ds_checkpoint *c = s->c;
    ds_config pc = c->cfg;
    pc.format = DS_FMT_W4A8;   /* the plan of the same model; mapped to the official forms above */
    ds_plan_opts po;
    ds_plan_opts_default(&po, &pc);
    po.engram = s->need_engram;
    po.draft = s->need_draft;
    po.draft_vocab = false;
    po.rotation = false;
    oc p = {.s = s, .err = err};
    if (ds_plan_foreach(&pc, &po, plan_cb, &p, err)) return -1;
    for (int i = 0; i < c->n_names; i++)
        if (c->detected[i] == DS_LABEL_NONE) c->detected[i] = ds_dtype_is_float(c->by_name[i]->dtype) ? DS_LABEL_FLOAT : DS_LABEL_NONE;
    return 0;
}
