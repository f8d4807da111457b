/* `dsflash verify` rows of the official FP8/MXFP4 layout (CHECKPOINT.md §14).
 *
 * Why separate rows: that layout has no description, rotation file, draft manifest or Engram table
 * files, so the W4A8 rows F1/L1/R1/E1 would fail on what the format simply does not have.  Here:
 * F1 the files the format needs; N1 the tensors per encoding, against the counts the configuration
 * implies (the loader's classifier over the model's tensor plan); O1 every encoded weight's dtype
 * and its scale's presence, dtype and shape, and every scale byte and FP8 weight byte checked for
 * the NaN codes (whole tensors — verify reads everything; the loader samples large ones).  Shapes
 * of the float tensors and the rest of the start-up checklist are the LOAD row (the loader itself,
 * level full). */
#include "tools/verify_internal.h"
#include "io/official_layout.h"
#include "base/fsutil.h"
#include <stdlib.h>
#include <string.h>

static void official_files(vctx *v) {
    vcheck *c = vc_begin(v, "F1", "required files (official FP8/MXFP4 layout)");
    const char *need[] = {"config.json", "tokenizer.json", "tokenizer_config.json", DS_OFFICIAL_INDEX};
    int present = 0;
    for (size_t i = 0; i < DS_ARRAY_LEN(need); i++) {
        char *p = ds_path_join(v->m.dir, need[i]);
        if (ds_file_exists(p)) present++;
        else vc_issue(c, VS_FAIL, "%s is missing", need[i]);
        free(p);
    }
    if (v->m.cfg.n_engram > 0 && v->m.cfg.engram_token_map_file[0]) {
        char *p = ds_path_join(v->m.dir, v->m.cfg.engram_token_map_file);
        if (ds_file_exists(p)) present++;
        else vc_issue(c, VS_FAIL, "%s (engram_token_map_file) is missing", v->m.cfg.engram_token_map_file);
        free(p);
    }
    vc_note(c, "%d present; no description, rotation, draft manifest or engram_int8 files in this format", present);
}

static bool is_scale_name(const char *n) {
    size_t k = strlen(n);
    return k > 6 && !strcmp(n + k - 6, ".scale") && !strstr(n, "hc_");
}

/* NaN codes anywhere in a byte tensor: E8M0 255, E4M3 0x7F / 0xFF. */
static int64_t first_nan(const ds_tensor *t, bool e8m0) {
    const uint8_t *b = t->data;
    for (uint64_t i = 0; i < t->nbytes; i++)
        if (e8m0 ? b[i] == 255 : (b[i] & 0x7f) == 0x7f) return (int64_t)i;
    return -1;
}

static void official_encodings(vctx *v) {
    vcheck *n1 = vc_begin(v, "N1", "tensor counts (official layout)");
    vcheck *c = vc_begin(v, "O1", "FP8 / MXFP4 encodings and E8M0 scales");
    vckpt *k = &v->m;
    int64_t got[DS_OFF_ROWS + 1] = {0}, scales = 0, nan_bad = 0;
    for (int i = 0; i < k->n_names; i++) {
        const vname *nm = &k->names[i];
        const ds_tensor *t = nm->t;
        if (is_scale_name(nm->name)) { scales++; continue; }
        ds_official_kind kind = ds_official_kind_of(nm->name, k->cfg.n_mtp_layers);
        got[kind]++;
        if (kind == DS_OFF_FLOAT || kind == DS_OFF_DROP) continue;
        bool fp4 = kind == DS_OFF_MXFP4;
        if (fp4 ? t->dtype != DS_DT_U8 && t->dtype != DS_DT_I8 && t->dtype != DS_DT_F4 : t->dtype != DS_DT_F8_E4M3) {
            vc_issue(c, VS_FAIL, "%s: expected %s, found %s", nm->name, fp4 ? "F4 or U8/I8 packed E2M1" : "F8_E4M3", ds_dtype_name(t->dtype));
            continue;
        }
        char sn[192];
        snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(nm->name) - 7), nm->name);
        const vname *s = vk_find(k, sn);
        if (!s) { vc_issue(c, VS_FAIL, "%s: expected its scale %s, found none", nm->name, sn); continue; }
        int64_t r = t->shape[0], w = t->ndim == 2 ? t->shape[1] * (fp4 && t->dtype != DS_DT_F4 ? 2 : 1) : 0;
        int64_t want0 = kind == DS_OFF_FP8 ? (r + 31) / 32 : r, want1 = (w + 31) / 32;
        if (s->t->dtype != DS_DT_F8_E8M0 && s->t->dtype != DS_DT_U8)
            vc_issue(c, VS_FAIL, "%s: expected F8_E8M0, found %s", sn, ds_dtype_name(s->t->dtype));
        else if (s->t->ndim != 2 || s->t->shape[0] != want0 || s->t->shape[1] != want1)
            vc_issue(c, VS_FAIL, "%s: expected [%lld, %lld] for %s %s, found a different shape", sn, (long long)want0, (long long)want1,
                     nm->name, kind == DS_OFF_FP8 ? "(32x32 blocks)" : "(32 values per scale)");
        else if (first_nan(s->t, true) >= 0 && nan_bad++ < 4)
            vc_issue(c, VS_FAIL, "%s: E8M0 NaN code 255 at byte %lld", sn, (long long)first_nan(s->t, true));
        if (!fp4 && first_nan(t, false) >= 0 && nan_bad++ < 4)
            vc_issue(c, VS_FAIL, "%s: E4M3 NaN code at byte %lld", nm->name, (long long)first_nan(t, false));
    }
    if (got[DS_OFF_DROP]) vc_issue(n1, VS_WARN, "%lld draft vocabulary copies present (the official draft shares embed/head)", (long long)got[DS_OFF_DROP]);
    /* what the configuration implies: routed experts x 3 per layer and draft stage, Engram tables */
    const ds_config *g = &k->cfg;
    int64_t want_fp4 = 3LL * g->n_experts * g->n_layers + 3LL * g->dspark_n_experts * g->n_mtp_layers;
    if (got[DS_OFF_MXFP4] != want_fp4)
        vc_issue(n1, VS_FAIL, "MXFP4 expert weights: expected %lld (3 x experts x layers, trunk and draft), found %lld", (long long)want_fp4,
                 (long long)got[DS_OFF_MXFP4]);
    if (got[DS_OFF_ROWS] != g->n_engram)
        vc_issue(n1, VS_FAIL, "FP8 Engram tables: expected %d, found %lld", g->n_engram, (long long)got[DS_OFF_ROWS]);
    if (scales != got[DS_OFF_FP8] + got[DS_OFF_MXFP4] + got[DS_OFF_ROWS])
        vc_issue(n1, VS_FAIL, "scales: expected one per encoded weight (%lld), found %lld", (long long)(got[DS_OFF_FP8] + got[DS_OFF_MXFP4] + got[DS_OFF_ROWS]),
                 (long long)scales);
    vc_note(n1, "FP8 dense %lld, MXFP4 experts %lld, FP8 Engram tables %lld, scales %lld, float %lld", (long long)got[DS_OFF_FP8],
            (long long)got[DS_OFF_MXFP4], (long long)got[DS_OFF_ROWS], (long long)scales, (long long)got[DS_OFF_FLOAT]);
    vc_note(c, "%lld encoded weights and their scales checked (dtypes, scale shapes, NaN codes in every byte)",
            (long long)(got[DS_OFF_FP8] + got[DS_OFF_MXFP4] + got[DS_OFF_ROWS]));
}

void v_check_official(vctx *v, void (*config)(vctx *), void (*loader)(vctx *), void (*index)(vctx *), void (*headers)(vctx *)) {
    official_files(v);
    config(v);
    loader(v);
    index(v);
    headers(v);
    official_encodings(v);
}
