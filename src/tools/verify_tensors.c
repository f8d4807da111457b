/* Tensor-level checks of the verifier: S1 (dtypes and shapes against the tensor plan and the
 * release profile), R1 (rotation structure), E1 (Engram tables, primes and file layout), D1
 * (sampled values, --deep) and X1 (--compare with tolerances).  All reads go through the
 * read-only mappings opened by verify.c; D1 samples with a fixed seed so a report is reproducible. */
#define _GNU_SOURCE
#include "tools/verify_internal.h"
#include "base/bf16.h"
#include "base/fsutil.h"
#include "model/engram_hash.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static bool shape_is(const ds_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return false;
    return true;
}

/* Lookup of plan entries by name (and alias). */
typedef struct { const char *name; const ds_plan_tensor *t; } plan_key;
static int cmp_pk(const void *a, const void *b) { return strcmp(((const plan_key *)a)->name, ((const plan_key *)b)->name); }

/* ------------------------------------------------------------------------------------------ */
/* S1                                                                                           */

typedef struct { const char *name; ds_dtype dt; int ndim; int64_t shape[2]; } profile_shape;
#define NODT DS_DT_COUNT   /* dtype not pinned by TOOLS.md §2 */
static const profile_shape k_profile[] = {
    {"layers.0.ffn.experts.0.w1.weight", DS_DT_I8, 2, {1152, 5120}},
    {"layers.0.ffn.experts.0.w3.weight", DS_DT_I8, 2, {1152, 5120}},
    {"layers.0.ffn.experts.0.w2.weight", DS_DT_I8, 2, {2560, 2304}},
    {"layers.0.ffn.experts.0.w1.weight_scale", DS_DT_F32, 2, {2304, 1}},
    {"layers.0.ffn.experts.0.w2.scale_bias", DS_DT_F32, 2, {5120, 16}},
    {"layers.0.attn.wq_b.weight", DS_DT_I8, 2, {32768, 1280}},
    {"layers.0.attn.wq_a.weight", DS_DT_I8, 2, {1280, 5120}},
    {"layers.0.attn.wkv.weight", DS_DT_I8, 2, {512, 5120}},
    {"layers.2.attn.indexer.wq_b.weight", DS_DT_I8, 2, {4096, 1280}},
    {"layers.36.attn.indexer.wq_b.weight", DS_DT_I8, 2, {4096, 1280}},
    {"layers.0.ffn.shared_experts.w1.weight", DS_DT_I8, 2, {2304, 5120}},
    {"layers.0.attn.wo_a.weight", DS_DT_BF16, 2, {8192, 4096}},
    {"layers.0.attn.wo_b.weight", DS_DT_BF16, 2, {5120, 8192}},
    {"layers.0.ffn.gate.weight", DS_DT_BF16, 2, {384, 5120}},
    {"layers.0.ffn.gate.bias", DS_DT_F32, 1, {384}},
    {"layers.0.ffn.gate.bias_vl", DS_DT_F32, 1, {384}},
    {"layers.0.attn.attn_sink", DS_DT_F32, 1, {64}},
    {"layers.0.hc_attn_fn", DS_DT_F32, 2, {24, 20480}},
    {"layers.0.hc_attn_base", DS_DT_F32, 1, {24}},
    {"layers.0.hc_ffn_scale", DS_DT_F32, 1, {3}},
    {"layers.2.attn.compressor.wkv.weight", DS_DT_F32, 2, {512, 5120}},
    {"layers.8.attn.compressor.wgate.weight", DS_DT_F32, 2, {512, 5120}},
    {"layers.20.attn.compressor.wkv.weight", DS_DT_BF16, 2, {512, 5120}},
    {"layers.14.attn.indexer.wk.weight", DS_DT_BF16, 2, {128, 512}},
    {"embed.weight", DS_DT_BF16, 2, {129280, 5120}},
    {"head.weight", DS_DT_F32, 2, {129280, 5120}},
    {"layers.1.engram.embed.weight", DS_DT_I8, 2, {384006168, 256}},
    {"layers.14.engram.embed.weight", DS_DT_I8, 2, {384016682, 256}},
    {"layers.1.engram.embed.scale", DS_DT_F32, 2, {384006168, 8}},
    {"layers.14.engram.embed.scale", DS_DT_F32, 2, {384016682, 8}},
    {"layers.1.engram.wkv.weight", DS_DT_BF16, 2, {25600, 6144}},
    {"mtp.0.main_proj.weight", NODT, 2, {5120, 15360}},
    {"mtp.2.confidence_head.proj.weight", NODT, 2, {1, 5376}},
    {"mtp.0.ffn.experts.127.w1.weight", NODT, 2, {1152, 5120}},
};
/* Names the profile says must NOT exist (indexer queries only at index sources; 128 draft experts). */
static const char *k_profile_absent[] = {"layers.3.attn.indexer.wq_b.weight", "layers.0.attn.indexer.wq_b.weight", "mtp.0.ffn.experts.128.w1.weight"};

void v_check_shapes(vctx *v) {
    vcheck *c = vc_begin(v, "S1", "dtypes and shapes");
    vckpt *k = &v->m;
    if (!v->plan_ok) {
        vc_issue(c, k->cfg_ok ? VS_WARN : VS_SKIP, "no tensor plan for this configuration%s", k->cfg_ok ? " (not the W4A8 release format)" : "");
        return;
    }
    plan_key *pk = ds_xmalloc(sizeof *pk * (size_t)(2 * v->plan.n + 1));
    int64_t npk = 0, checked = 0;
    char a[96], b[96];
    for (int64_t i = 0; i < v->plan.n; i++) {
        const ds_plan_tensor *t = &v->plan.t[i];
        pk[npk++] = (plan_key){t->name, t};
        if (t->alias[0]) pk[npk++] = (plan_key){t->alias, t};
        if (t->file == DS_PF_QUAROT) continue;   /* R1 */
        if (t->file == DS_PF_ENGRAM_TABLE && k->engram_need) continue;
        const vname *n = vk_find(k, t->name);
        if (!n && t->alias[0]) n = vk_find(k, t->alias);
        if (!n) {
            vc_issue(c, VS_FAIL, "%s missing", t->name);
            continue;
        }
        checked++;
        const ds_tensor *x = n->t;
        bool flex_q = t->flex_w8a8 && x->dtype == DS_DT_I8;   /* a draft float linear stored as W8A8 */
        if (!(t->dtype_mask & DS_DT_BIT(x->dtype)) && !flex_q)
            vc_issue(c, VS_FAIL, "%s: dtype %s, expected %s", t->name, ds_dtype_name(x->dtype), ds_dtype_name(t->dtype));
        if (!shape_is(x, t->ndim, t->shape))
            vc_issue(c, VS_FAIL, "%s: shape %s, expected %s", t->name, shape_str(a, sizeof a, x->ndim, x->shape), shape_str(b, sizeof b, t->ndim, t->shape));
    }
    qsort(pk, (size_t)npk, sizeof *pk, cmp_pk);
    /* Tensors the plan does not know: vision (collected by prefix) and the W8A8 siblings of flexible
     * draft linears are expected; anything else is reported. */
    int64_t unplanned = 0;
    for (int i = 0; i < k->n_names; i++) {
        const char *nm = k->names[i].name;
        plan_key key = {nm, NULL};
        if (v_is_vision(nm) || bsearch(&key, pk, (size_t)npk, sizeof *pk, cmp_pk)) continue;
        const char *dot = strrchr(nm, '.');
        if (dot && (!strcmp(dot, ".weight_scale") || !strcmp(dot, ".weight_offset"))) {
            char w[128];
            snprintf(w, sizeof w, "%.*s.weight", (int)(dot - nm), nm);
            plan_key wk = {w, NULL};
            const plan_key *hit = bsearch(&wk, pk, (size_t)npk, sizeof *pk, cmp_pk);
            if (hit && hit->t->flex_w8a8) continue;
        }
        unplanned++;
        vc_issue(c, VS_WARN, "%s is not part of the configuration's tensor set", nm);
    }
    if (v->profile) {
        for (size_t i = 0; i < DS_ARRAY_LEN(k_profile); i++) {
            const profile_shape *p = &k_profile[i];
            if (k->engram_need && strstr(p->name, ".engram.embed.")) continue;
            const vname *n = vk_find(k, p->name);
            if (!n) { vc_issue(c, VS_FAIL, "%s missing (release profile)", p->name); continue; }
            if ((p->dt != NODT && n->t->dtype != p->dt) || !shape_is(n->t, p->ndim, p->shape))
                vc_issue(c, VS_FAIL, "%s: %s %s, release profile %s %s", p->name, ds_dtype_name(n->t->dtype), shape_str(a, sizeof a, n->t->ndim, n->t->shape),
                         p->dt == NODT ? "" : ds_dtype_name(p->dt), shape_str(b, sizeof b, p->ndim, p->shape));
        }
        for (size_t i = 0; i < DS_ARRAY_LEN(k_profile_absent); i++)
            if (vk_find(k, k_profile_absent[i])) vc_issue(c, VS_FAIL, "%s exists; the release profile has none", k_profile_absent[i]);
    }
    vc_note(c, "%lld planned tensors match dtype and shape", (long long)checked);
    (void)unplanned;
    free(pk);
}

/* ------------------------------------------------------------------------------------------ */
/* R1                                                                                           */

void v_check_rotation(vctx *v) {
    vcheck *c = vc_begin(v, "R1", "rotation");
    vckpt *k = &v->m;
    const cJSON *r = k->desc ? cJSON_GetObjectItemCaseSensitive(k->desc, "optional") : NULL;
    r = r ? cJSON_GetObjectItemCaseSensitive(r, "quarot") : NULL;
    r = r ? cJSON_GetObjectItemCaseSensitive(r, "rotation_map") : NULL;
    r = r ? cJSON_GetObjectItemCaseSensitive(r, "global_rotation") : NULL;
    const char *rel = cJSON_IsString(r) ? r->valuestring : V_DEFAULT_QUAROT;
    char *full = ds_path_join(k->dir, rel);
    bool exists = ds_file_exists(full);
    free(full);
    if (!exists) {
        if (k->cfg_ok && k->cfg.format == DS_FMT_W4A8) vc_issue(c, VS_FAIL, "%s missing (the W4A8 release requires a rotation file)", rel);
        else vc_note(c, "no rotation file (not required for this format)");
        return;
    }
    int fi = vk_file(k, rel);
    const ds_stfile *st = k->files[fi].st;
    const ds_tensor *t = st ? ds_st_find(st, "global_rotation") : NULL;
    int64_t D = k->cfg_ok ? k->cfg.dim : 0;
    if (!t) { vc_issue(c, VS_FAIL, "%s: no tensor global_rotation%s", rel, st ? "" : " (header unreadable)"); return; }
    if (t->dtype != DS_DT_F32 || t->ndim != 2 || t->shape[0] != t->shape[1] || (D && t->shape[0] != D) || t->shape[0] % 32) {
        char a[64];
        vc_issue(c, VS_FAIL, "global_rotation: %s %s, expected F32 [%lld, %lld]", ds_dtype_name(t->dtype), shape_str(a, sizeof a, t->ndim, t->shape),
                 (long long)D, (long long)D);
        return;
    }
    const float *m = t->data;
    int64_t n = t->shape[0];
    int64_t bad_off = 0, bad_diag = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            float x = m[i * n + j];
            if (i / 32 != j / 32) bad_off += x != 0.0f;
            else if (memcmp(&x, &m[(i % 32) * n + (j % 32)], sizeof x) != 0) bad_diag++;
        }
    if (bad_off) vc_issue(c, VS_FAIL, "global_rotation: %lld non-zero values outside the 32x32 diagonal blocks", (long long)bad_off);
    if (bad_diag) vc_issue(c, VS_FAIL, "global_rotation: %lld values of diagonal blocks differ from the top-left block", (long long)bad_diag);
    double worst = 0;
    for (int a = 0; a < 32; a++)
        for (int b = 0; b < 32; b++) {
            double s = 0;
            for (int r2 = 0; r2 < 32; r2++) s += (double)m[r2 * n + a] * (double)m[r2 * n + b];
            worst = fmax(worst, fabs(s - (a == b)));
        }
    if (worst > 1e-4) vc_issue(c, VS_FAIL, "global_rotation block: |B^T B - I| max %.3g, expected <= 1e-4", worst);
    if (k->cfg_ok && k->cfg.n_mtp_layers > 0) {
        char head[64];
        snprintf(head, sizeof head, "mtp.%d.head.weight", k->cfg.n_mtp_layers - 1);
        const char *names[2] = {"mtp.0.embed.weight", head};
        for (int i = 0; i < 2; i++) {
            const vname *x = vk_find(k, names[i]);
            if (!x) vc_issue(c, VS_FAIL, "%s missing: a rotated release needs the un-rotated draft vocabulary", names[i]);
            else if (x->t->ndim != 2 || x->t->shape[0] != k->cfg.vocab_size || x->t->shape[1] != k->cfg.dim)
                vc_issue(c, VS_FAIL, "%s: expected [%d, %d]", names[i], k->cfg.vocab_size, k->cfg.dim);
        }
    }
    vc_note(c, "block-diagonal [%lld, %lld], orthogonal within %.1e", (long long)n, (long long)n, worst);
}

/* ------------------------------------------------------------------------------------------ */
/* E1                                                                                           */

void v_check_engram(vctx *v) {
    vcheck *c = vc_begin(v, "E1", "Engram tables");
    vckpt *k = &v->m;
    if (!k->cfg_ok) { vc_issue(c, VS_SKIP, "config did not load"); return; }
    const ds_config *cfg = &k->cfg;
    if (cfg->n_engram == 0) { vc_note(c, "no Engram layers configured"); return; }
    ds_engram_consts ec;
    ds_error e;
    if (ds_engram_consts_init(&ec, cfg, &e) != 0) { vc_issue(c, VS_FAIL, "%s", e.msg); return; }
    static const int64_t prof_rows[2] = {384006168, 384016682};
    static const uint64_t prof_size[2][2] = {{98305579120ull, 12288197488ull}, {98308270704ull, 12288533936ull}};
    for (int l = 0; l < cfg->n_engram; l++) {
        int L = cfg->engram_layers[l];
        if (ec.prime_sum[l] != cfg->engram_rows[l])
            vc_issue(c, VS_FAIL, "layer %d: the %d primes after %lld sum to %lld, engram_num_embeddings says %lld", L, ec.n_cols,
                     (long long)(cfg->engram_vocab_size - 1), (long long)ec.prime_sum[l], (long long)cfg->engram_rows[l]);
        if (v->profile && l < 2 && cfg->engram_rows[l] != prof_rows[l])
            vc_issue(c, VS_FAIL, "layer %d: %lld rows, release profile %lld", L, (long long)cfg->engram_rows[l], (long long)prof_rows[l]);
        if (k->engram_need) continue;
        for (int sc = 0; sc < 2; sc++) {
            char name[96];
            snprintf(name, sizeof name, "layers.%d.engram.embed.%s", L, sc ? "scale" : "weight");
            const vname *n = vk_find(k, name);
            if (!n) { vc_issue(c, VS_FAIL, "%s missing", name); continue; }
            const ds_tensor *t = n->t;
            int64_t cols = sc ? cfg->engram_head_dim / 32 : cfg->engram_head_dim;
            if (t->dtype != (sc ? DS_DT_F32 : DS_DT_I8) || t->ndim != 2 || t->shape[0] != cfg->engram_rows[l] || t->shape[1] != cols)
                vc_issue(c, VS_FAIL, "%s: expected %s [%lld, %lld]", name, sc ? "F32" : "I8", (long long)cfg->engram_rows[l], (long long)cols);
            const ds_stfile *st = t->file;
            if (st->n_tensors != 1 || st->metadata_json || st->data_start != 112 || st->file_size != 112 + t->nbytes)
                vc_issue(c, VS_FAIL, "%s: expected exactly one tensor, no __metadata__, data at byte 112 and size 112 + %llu; found %d tensors, data at %llu, size %llu",
                         k->files[n->file].rel, (unsigned long long)t->nbytes, st->n_tensors, (unsigned long long)st->data_start,
                         (unsigned long long)st->file_size);
            if (v->profile && l < 2 && st->file_size != prof_size[l][sc])
                vc_issue(c, VS_FAIL, "%s: %llu bytes, release profile %llu", k->files[n->file].rel, (unsigned long long)st->file_size,
                         (unsigned long long)prof_size[l][sc]);
        }
    }
    if (k->engram_need) vc_issue(c, VS_NEED, "tables present only as split parts; file checks wait for reassembly");
    vc_note(c, "%d layers; prime sums equal engram_num_embeddings; one-tensor files with data at byte 112", cfg->n_engram);
}

/* ------------------------------------------------------------------------------------------ */
/* D1 (--deep)                                                                                  */

static uint64_t rng_next(uint64_t *s) {   /* splitmix64: a fixed, portable sampling sequence */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int code4(const int8_t *w, int64_t in, int64_t o, int64_t i) {
    uint8_t b = (uint8_t)w[(o / 2) * in + i];
    int q = (o & 1) ? b >> 4 : b & 15;
    return q >= 8 ? q - 16 : q;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Index of the first NaN/Inf element of a float tensor (or -1) and the number of them.  Integer
 * tensors have no such values.  Why every element and not a sample: one NaN weight or scale
 * poisons every logit downstream, and a sample of 64 misses a 4 KiB damaged stretch. */
static int64_t first_nonfinite(const ds_tensor *t, int64_t *count) {
    int64_t n = ds_tensor_numel(t), first = -1, bad = 0;
    const uint8_t *b = t->data;
    for (int64_t i = 0; i < n; i++) {
        bool nf;
        switch (t->dtype) {
        case DS_DT_F32: { uint32_t x; memcpy(&x, b + 4 * i, 4); nf = (x & 0x7f800000u) == 0x7f800000u; break; }
        case DS_DT_F64: { uint64_t x; memcpy(&x, b + 8 * i, 8); nf = (x & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; break; }
        case DS_DT_BF16: { uint16_t x; memcpy(&x, b + 2 * i, 2); nf = (x & 0x7f80) == 0x7f80; break; }
        case DS_DT_F16: { uint16_t x; memcpy(&x, b + 2 * i, 2); nf = (x & 0x7c00) == 0x7c00; break; }
        case DS_DT_F8_E4M3: nf = (b[i] & 0x7f) == 0x7f; break;             /* E4M3FN: NaN only */
        case DS_DT_F8_E5M2: nf = (b[i] & 0x7c) == 0x7c; break;
        case DS_DT_F8_E8M0: nf = b[i] == 0xff; break;                        /* the NaN code */
        default: *count = 0; return -1;
        }
        if (nf && first < 0) first = i;
        bad += nf;
    }
    *count = bad;
    return first;
}

static bool is_float_dtype(ds_dtype d) {
    return d == DS_DT_F32 || d == DS_DT_BF16 || d == DS_DT_F16 || d == DS_DT_F64 || d == DS_DT_F8_E4M3 ||
           d == DS_DT_F8_E5M2 || d == DS_DT_F8_E8M0;
}

/* Every float tensor (weights, norms, every scale) of every file, element by element. */
static void check_all_finite(vctx *v, vcheck *c) {
    vckpt *k = &v->m;
    int64_t scanned = 0, bad_tensors = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < k->n_names; i++) {
        const vname *nm = &k->names[i];
        const ds_tensor *t = nm->t;
        if (!t || !t->data) continue;
        if (!is_float_dtype(t->dtype)) continue;
        int64_t count = 0, at = first_nonfinite(t, &count);
        scanned++;
        bytes += t->nbytes;
        if (at >= 0) {
            bad_tensors++;
            vc_issue(c, VS_FAIL, "%s: %s (%s) element %lld is not finite (%lld non-finite of %lld elements)",
                     nm->file >= 0 && nm->file < k->n_files ? k->files[nm->file].rel : "?", nm->name,
                     ds_dtype_name(t->dtype), (long long)at, (long long)count, (long long)ds_tensor_numel(t));
        }
    }
    vc_note(c, "%lld float tensors (%.1f MiB) scanned for NaN/Inf, %lld bad", (long long)scanned, (double)bytes / 1048576.0,
            (long long)bad_tensors);
}

void v_check_deep(vctx *v) {
    vcheck *c = vc_begin(v, "D1", "sampled values (--deep)");
    vckpt *k = &v->m;
    int ns = v->o->samples > 0 ? v->o->samples : 64;
    uint64_t seed = 1;
    int64_t rows_checked = 0, tensors_checked = 0;
    /* Engram rows: power-of-two scales, scale 1 for all-zero groups, codes in [-127, 127]. */
    for (int l = 0; k->cfg_ok && !k->engram_need && l < k->cfg.n_engram; l++) {
        char wn[96], sn[96];
        snprintf(wn, sizeof wn, "layers.%d.engram.embed.weight", k->cfg.engram_layers[l]);
        snprintf(sn, sizeof sn, "layers.%d.engram.embed.scale", k->cfg.engram_layers[l]);
        const vname *w = vk_find(k, wn), *s = vk_find(k, sn);
        if (!w || !s || w->t->dtype != DS_DT_I8 || s->t->dtype != DS_DT_F32 || w->t->ndim != 2 || s->t->ndim != 2 ||
            w->t->shape[0] != s->t->shape[0] || w->t->shape[1] != 32 * s->t->shape[1])
            continue;   /* E1/S1 report the layout */
        int64_t rows = w->t->shape[0], hd = w->t->shape[1], ng = s->t->shape[1];
        const int8_t *codes = w->t->data;
        const float *sc = s->t->data;
        bool all = ns >= rows;   /* small tables: every row, in order (no repeats) */
        for (int64_t r = 0; r < (all ? rows : ns) && rows > 0; r++) {
            int64_t row = all ? r : (int64_t)(rng_next(&seed) % (uint64_t)rows);
            rows_checked++;
            for (int64_t g = 0; g < ng; g++) {
                float f = sc[row * ng + g];
                uint32_t bits;
                memcpy(&bits, &f, 4);
                bool zero = true;
                for (int64_t i = 0; i < 32; i++) {
                    int8_t q = codes[row * hd + g * 32 + i];
                    if (q == -128) vc_issue(c, VS_FAIL, "%s row %lld: code -128 outside [-127, 127]", wn, (long long)row);
                    zero &= q == 0;
                }
                bool pow2 = (bits >> 31) == 0 && (bits & 0x7fffff) == 0 && ((bits >> 23) & 0xff) != 0 && ((bits >> 23) & 0xff) != 0xff;
                if (!pow2) vc_issue(c, VS_FAIL, "%s row %lld group %lld: scale %g is not a positive power of two", sn, (long long)row, (long long)g, (double)f);
                else if (zero && f != 1.0f) vc_issue(c, VS_FAIL, "%s row %lld group %lld: all-zero group with scale %g, expected 1", sn, (long long)row, (long long)g, (double)f);
            }
        }
    }
    /* Quantized linears: pick samples among the weight_scale tensors. */
    int64_t n_lin = 0;
    const vname **lin = ds_xmalloc(sizeof *lin * (size_t)(k->n_names + 1));
    for (int i = 0; i < k->n_names; i++)
        if (ends_with(k->names[i].name, ".weight_scale")) lin[n_lin++] = &k->names[i];
    bool all_lin = ns >= n_lin;
    for (int64_t r = 0; r < (all_lin ? n_lin : ns) && n_lin > 0; r++) {
        const vname *sv = lin[all_lin ? r : (int64_t)(rng_next(&seed) % (uint64_t)n_lin)];
        char base[160], on[176], wn[176], bn[176];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(sv->name) - 13), sv->name);
        snprintf(on, sizeof on, "%s.weight_offset", base);
        snprintf(wn, sizeof wn, "%s.weight", base);
        snprintf(bn, sizeof bn, "%s.scale_bias", base);
        tensors_checked++;
        const ds_tensor *st = sv->t;
        if (st->dtype != DS_DT_F32) continue;
        const float *s = st->data;
        int64_t out = ds_tensor_numel(st);
        for (int64_t o = 0; o < out; o++)
            if (!isfinite(s[o]) || !(s[o] > 0)) {
                vc_issue(c, VS_FAIL, "%s[%lld] = %g: scales must be finite and > 0", sv->name, (long long)o, (double)s[o]);
                break;
            }
        const vname *ov = vk_find(k, on);
        if (ov && ov->t->dtype == DS_DT_F32) {
            const float *z = ov->t->data;
            for (int64_t o = 0; o < ds_tensor_numel(ov->t); o++)
                if (z[o] != 0.0f) {
                    vc_issue(c, VS_FAIL, "%s[%lld] = %g: offsets must be zero (symmetric quantization)", on, (long long)o, (double)z[o]);
                    break;
                }
        }
        /* scale_bias relation (sign convention uncertain: the negated value is accepted; WARN only) */
        const vname *wv = vk_find(k, wn), *bv = vk_find(k, bn);
        if (!wv || !bv || wv->t->dtype != DS_DT_I8 || bv->t->dtype != DS_DT_F32 || wv->t->ndim != 2 || bv->t->ndim != 2) continue;
        int64_t in = wv->t->shape[1], chunks = bv->t->shape[1];
        if (wv->t->shape[0] != (out + 1) / 2 || bv->t->shape[0] != out || chunks < 1 || in % chunks) continue;
        const float *sb = bv->t->data;
        int64_t nrows = all_lin ? out : DS_MIN(out, 8);   /* exhaustive mode checks every row */
        for (int64_t rr = 0; rr < nrows; rr++) {
            int64_t o = all_lin ? rr : (int64_t)(rng_next(&seed) % (uint64_t)out);
            for (int64_t ch = 0; ch < chunks; ch++) {
                double sum = 0;
                for (int64_t i = ch * (in / chunks); i < (ch + 1) * (in / chunks); i++) sum += code4(wv->t->data, in, o, i);
                double want = 8.0 * s[o] * sum, have = sb[o * chunks + ch];
                double tol = 1e-3 * fmax(fabs(want), 1e-30);
                if (fabs(have - want) > tol && fabs(have + want) > tol) {
                    vc_issue(c, VS_WARN, "%s[%lld][%lld] = %g, expected 8*s*sum(q) = %g (or its negation)", bn, (long long)o, (long long)ch, have, want);
                    rr = nrows;
                    break;
                }
            }
        }
    }
    free(lin);
    check_all_finite(v, c);
    vc_note(c, "%lld Engram rows and %lld quantized linears sampled (seed 1)", (long long)rows_checked, (long long)tensors_checked);
}

/* ------------------------------------------------------------------------------------------ */
/* X1 (--compare)                                                                               */

static double fval(const ds_tensor *t, int64_t i) {
    switch (t->dtype) {
    case DS_DT_F32: return ((const float *)t->data)[i];
    case DS_DT_BF16: return ds_bf16_to_f32(((const ds_bf16 *)t->data)[i]);
    case DS_DT_F16: return ds_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: return 0;
    }
}

/* Returns 0 identical, 1 within tolerance, 2 over tolerance. */
static int compare_tensor(const vckpt *ka, const vname *a, const ds_tensor *tb, char *why, size_t n) {
    const ds_tensor *ta = a->t;
    int64_t numel = ds_tensor_numel(ta);
    if (!memcmp(ta->data, tb->data, ta->nbytes)) return 0;
    const char *label = vk_label(ka, a->name);
    bool w4 = label && !strcmp(label, "W4A8_DYNAMIC") && ends_with(a->name, ".weight") && ta->dtype == DS_DT_I8;
    if (ta->dtype == DS_DT_I8 || ta->dtype == DS_DT_U8) {
        const uint8_t *x = ta->data, *y = tb->data;
        for (int64_t i = 0; i < numel; i++) {
            int d;
            if (w4) {
                int xl = x[i] & 15, yl = y[i] & 15, xh = x[i] >> 4, yh = y[i] >> 4;
                xl = xl >= 8 ? xl - 16 : xl; yl = yl >= 8 ? yl - 16 : yl; xh = xh >= 8 ? xh - 16 : xh; yh = yh >= 8 ? yh - 16 : yh;
                d = abs(xl - yl) > abs(xh - yh) ? abs(xl - yl) : abs(xh - yh);
            } else {
                d = ta->dtype == DS_DT_I8 ? abs((int)(int8_t)x[i] - (int)(int8_t)y[i]) : abs((int)x[i] - (int)y[i]);
            }
            if (d > 1) { snprintf(why, n, "%s: codes differ by %d at element %lld (limit 1 LSB)", a->name, d, (long long)i); return 2; }
        }
        return 1;
    }
    if (ta->dtype == DS_DT_F32 || ta->dtype == DS_DT_BF16 || ta->dtype == DS_DT_F16) {
        for (int64_t i = 0; i < numel; i++) {
            double x = fval(ta, i), y = fval(tb, i);
            if (isnan(x) && isnan(y)) continue;
            if (!(fabs(x - y) <= 2e-3 * fmax(fabs(x), fabs(y)))) {
                snprintf(why, n, "%s: element %lld is %g vs %g (relative limit 2e-3)", a->name, (long long)i, x, y);
                return 2;
            }
        }
        return 1;
    }
    snprintf(why, n, "%s: %s contents differ", a->name, ds_dtype_name(ta->dtype));
    return 2;
}

void v_check_compare(vctx *v) {
    vcheck *c = vc_begin(v, "X1", "compare with another checkpoint");
    vckpt *a = &v->m, b;
    vk_load(&b, v->o->compare_dir);
    int64_t common = 0, differ = 0, over = 0, only_a = 0, only_b = 0;
    char sa[96], sb2[96];
    /* Problems are collected first so the summary leads the report line. */
    enum { KEEP = 5 };
    char kept[KEEP][600];
    int n_kept = 0;
#define KEEP_ISSUE(...) do { if (n_kept < KEEP) snprintf(kept[n_kept++], sizeof kept[0], __VA_ARGS__); } while (0)
    for (int i = 0; i < a->n_names; i++) {
        const vname *x = &a->names[i];
        const vname *y = vk_find(&b, x->name);
        if (!y) { only_a++; KEEP_ISSUE("%s only in %s", x->name, a->dir); continue; }
        common++;
        if (x->t->dtype != y->t->dtype || !shape_is(y->t, x->t->ndim, x->t->shape)) {
            over++;
            KEEP_ISSUE("%s: %s %s vs %s %s", x->name, ds_dtype_name(x->t->dtype), shape_str(sa, sizeof sa, x->t->ndim, x->t->shape),
                       ds_dtype_name(y->t->dtype), shape_str(sb2, sizeof sb2, y->t->ndim, y->t->shape));
            continue;
        }
        char why[512];
        int r = compare_tensor(a, x, y->t, why, sizeof why);
        differ += r > 0;
        if (r == 2) { over++; KEEP_ISSUE("%s", why); }
    }
    for (int i = 0; i < b.n_names; i++)
        if (!vk_find(a, b.names[i].name)) { only_b++; KEEP_ISSUE("%s only in %s", b.names[i].name, b.dir); }
#undef KEEP_ISSUE
    char msg[256];
    snprintf(msg, sizeof msg, "%lld common tensors, %lld differ (%.2f%%), %lld over tolerance; %lld/%lld only on one side", (long long)common,
             (long long)differ, common ? 100.0 * (double)differ / (double)common : 0.0, (long long)over, (long long)only_a, (long long)only_b);
    if (b.n_names == 0) vc_issue(c, VS_FAIL, "%s: no tensors could be read", v->o->compare_dir);
    if (over || only_a || only_b) {
        vc_issue(c, VS_FAIL, "%s", msg);
        for (int i = 0; i < n_kept; i++) vc_issue(c, VS_FAIL, "%s", kept[i]);
    } else {
        vc_note(c, "%s", msg);
    }
    vk_free(&b);
}
