/* Initialization rules of mkmodel's synthetic weights, and the QuaRot fold assignment.
 *
 * Why these scales: every linear reading a normalized activation (unit RMS) gets std 1/sqrt(in),
 * so its outputs are O(1); linears that write into the residual (wo_b, w2) get half that, so the
 * residual grows slowly over the layers; norms are 1 ± 10%.  The hyper-connection parameters are
 * set so the mixes start near a sensible operating point: fn has std 1/sqrt(HC·D) (mix logits
 * ~N(0,1)), scale 0.5, `pre` biased to 1/HC per copy (the collapse is then an average), `post` to 1
 * and the Sinkhorn logits to a diagonal-dominant matrix (copies keep most of their own stream).
 * The head has std 2/sqrt(D), giving logits with a standard deviation of about 2: peaked enough
 * that greedy decoding is meaningful, flat enough that many tokens compete.
 *
 * Residual norms (trunk attn_norm, ffn_norm and the final norm) are folded into the linears that
 * read them (W ← W·diag(w)) and stored as exact ones, as QuaRot requires: an element-wise norm weight
 * does not commute with the rotation, so without the fold the rotated release would be a different
 * model from the float one, and the "rotated ≡ un-rotated" check could not hold.
 *
 * Fold assignment (MODEL.md §3): trunk tensors whose last axis is the residual are right-folded
 * (embed, head, hc_*_fn per copy, wq_a, wkv, compressor wkv/wgate, indexer weights_proj, gate,
 * routed and shared w1/w3); trunk tensors writing into the residual are left-folded (wo_b, w2,
 * the value rows of engram.wkv); the draft is not rotated except mtp.0.main_proj (right-folded
 * per target copy, which blockdiag(R, R, R) over the concatenation is), and its vocabulary copies
 * are generated from the trunk streams *without* the fold.
 *
 * --smooth (decisive fixture): the router's gate weights are shrunk so every expert's score
 * s = sqrt(softplus(z)) stays within a narrow band, and gate.bias is laid out in integer tiers
 * (a per-layer random permutation of 0..E-1); since the bias steers selection only, the selected
 * set is then fixed by the tiers with a margin of about one tier minus the band width, while the
 * routing weights still vary per token.
 *
 * --smooth indexer: the embedding gets a common component c (RMS 1) next to its per-token part,
 * so every normalized residual u has u·c > 0 by a wide margin.  Rows aligned with c give quantities
 * of known sign: latent dim 0 (compressor.wkv row 0), q_lora dim 0 (wq_a row 0) and every head
 * weight w[h] (weights_proj rows).  The index key is then made content-free: wk has only the two
 * rows of one rotary pair, both multiples of latent dim 0, so rmsnorm gives exactly
 * sqrt(d_ih/2)·(cos φ, −sin φ) there and zero elsewhere (k_norm = 1); each query head reads q_lora
 * dim 0 (> 0) into the first dim of that pair.  Every index score is thus
 * W_p·relu(cos(φ + θ·d)) with W_p > 0 per query row and d the distance to the entry's position:
 * strictly decreasing over a window of (π/2 − φ)/θ positions, zero beyond it, and never positive
 * again before d = (3π/2 − φ)/θ > DS_MK_DECISIVE_LEN.  θ is the fastest rotary pair allowing that,
 * so consecutive entries differ by many bf16 steps; the top-k is the most recent k entries and
 * the candidate blocks the most recent blocks, each with relative gaps of about θ·tan(φ + θ·d)
 * per step. */
#include "tools/mkmodel.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t ds_mk_tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) { h ^= *p; h *= 0x100000001b3ull; }
    uint64_t st = seed ^ h;
    return ds_mk_mix(&st);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* "layers.N.rest" / "mtp.N.rest" -> rest; *draft, *idx */
static const char *split_layer(const char *name, bool *draft, int *idx) {
    const char *p;
    if (!strncmp(name, "layers.", 7)) { p = name + 7; *draft = false; }
    else if (!strncmp(name, "mtp.", 4)) { p = name + 4; *draft = true; }
    else return NULL;
    int v = 0;
    if (*p < '0' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    if (*p != '.') return NULL;
    *idx = v;
    return p + 1;
}

/* CMP-table frequency of rotary pair i (MODEL.md §2.5, YaRN included), in float64: only used to
 * choose the pair. */
static double cmp_freq(const ds_config *c, int i) {
    const int rd = c->rope_head_dim;
    const double base = c->compress_rope_theta;
    double f = 1.0 / pow(base, 2.0 * i / rd);
    if (c->rope_orig_len > 0) {
        double cdf = rd * log((double)c->rope_orig_len / (c->beta_fast * 2 * M_PI)) / (2 * log(base));
        double cds = rd * log((double)c->rope_orig_len / (c->beta_slow * 2 * M_PI)) / (2 * log(base));
        double low = fmax(floor(cdf), 0.0), high = fmin(ceil(cds), rd - 1);
        double ramp = fmin(fmax((i - low) / fmax(high - low, 0.001), 0.0), 1.0);
        double smooth = 1.0 - ramp;
        f = f / c->rope_factor * (1.0 - smooth) + f * smooth;
    }
    return f;
}

#define SMOOTH_PHASE 0.9

void ds_mk_index_pair(const ds_config *c, int *pair, double *phase) {
    const double tmax = (1.5 * M_PI - SMOOTH_PHASE) / DS_MK_DECISIVE_LEN;
    int best = c->rope_head_dim / 2 - 1;
    for (int i = 0; i < c->rope_head_dim / 2; i++)
        if (cmp_freq(c, i) <= tmax) { best = i; break; } /* frequencies decrease with i */
    *pair = best;
    *phase = SMOOTH_PHASE;
}

static void normal(ds_mk_spec *s, double mean, double std) {
    s->kind = DS_MK_NORMAL;
    s->mean = mean;
    s->std = std;
}

void ds_mk_spec_for(const ds_config *cfg, const char *name, int64_t rows, int64_t cols, bool smooth, ds_mk_spec *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->seed_name, sizeof out->seed_name, "%s", name);
    out->layer = -1;
    const double D = cfg->dim, HC = cfg->hc_mult;
    const double in = cols > 0 ? (double)cols : 1.0;
    bool draft = false;
    int li = -1;
    const char *r = split_layer(name, &draft, &li);
    out->layer = r ? (draft ? cfg->n_layers + li : li) : -1;
    const bool trunk = r && !draft;
    /* defaults by shape: norms near 1, vectors small, matrices 1/sqrt(in) */
    if (ends_with(name, "norm.weight")) normal(out, 1.0, 0.1);
    else if (rows <= 1) normal(out, 0.0, 0.1);
    else normal(out, 0.0, 1.0 / sqrt(in));

    if (!r) { /* global tensors */
        if (!strcmp(name, "embed.weight")) { normal(out, 0.0, 1.0); out->fold = DS_MK_FOLD_RIGHT; if (smooth) out->kind = DS_MK_EMBED; }
        else if (!strcmp(name, "head.weight")) {
            normal(out, 0.0, 2.0 / sqrt(D));
            out->fold = DS_MK_FOLD_RIGHT;
            snprintf(out->norm_fold, sizeof out->norm_fold, "norm.weight");
        } else if (!strcmp(name, "norm.weight")) out->folded_norm = true;
        return;
    }
    if (trunk && (!strcmp(r, "attn_norm.weight") || !strcmp(r, "ffn_norm.weight"))) { out->folded_norm = true; return; }
    /* readers of the trunk's residual norms */
    if (trunk && (!strcmp(r, "attn.wq_a.weight") || !strcmp(r, "attn.wkv.weight") || !strcmp(r, "attn.compressor.wkv.weight") ||
                  !strcmp(r, "attn.compressor.wgate.weight") || !strcmp(r, "attn.indexer.weights_proj.weight")))
        snprintf(out->norm_fold, sizeof out->norm_fold, "layers.%d.attn_norm.weight", li);
    if (trunk && (!strcmp(r, "ffn.gate.weight") ||
                  ((!strncmp(r, "ffn.experts.", 12) || !strncmp(r, "ffn.shared_experts.", 19)) && !ends_with(r, ".w2.weight"))))
        snprintf(out->norm_fold, sizeof out->norm_fold, "layers.%d.ffn_norm.weight", li);
    if (!strncmp(r, "hc_", 3)) {
        if (ends_with(r, "_fn")) { normal(out, 0.0, 1.0 / sqrt(HC * D)); if (trunk) out->fold = DS_MK_FOLD_RIGHT; }
        else if (ends_with(r, "_base")) out->kind = DS_MK_HC_BASE;
        else if (ends_with(r, "_scale")) out->kind = DS_MK_HC_SCALE;
        return;
    }
    if (!strcmp(r, "attn.attn_sink")) { normal(out, 0.0, 0.5); return; }
    if (smooth && trunk) {
        if (!strcmp(r, "attn.indexer.wq_b.weight")) { out->kind = DS_MK_IDX_WQB; return; }
        if (!strcmp(r, "attn.indexer.weights_proj.weight")) {
            out->kind = DS_MK_DC_ALL;
            out->fold = DS_MK_FOLD_RIGHT;
            snprintf(out->norm_fold, sizeof out->norm_fold, "layers.%d.attn_norm.weight", li);
            return;
        }
        if (!strcmp(r, "attn.indexer.wk.weight")) { out->kind = DS_MK_IDX_WK; return; }
        if (!strcmp(r, "attn.indexer.k_norm.weight")) { out->kind = DS_MK_ONES; return; }
        if (!strcmp(r, "attn.wq_a.weight") || !strcmp(r, "attn.compressor.wkv.weight")) {
            out->kind = DS_MK_DC_ROW0;
            out->fold = DS_MK_FOLD_RIGHT;
            snprintf(out->norm_fold, sizeof out->norm_fold, "layers.%d.attn_norm.weight", li);
            return;
        }
    }
    if (!strcmp(r, "attn.wq_a.weight") || !strcmp(r, "attn.wkv.weight") || !strcmp(r, "attn.compressor.wkv.weight") ||
        !strcmp(r, "attn.compressor.wgate.weight") || !strcmp(r, "attn.indexer.weights_proj.weight")) {
        if (trunk) out->fold = DS_MK_FOLD_RIGHT;
        return;
    }
    if (!strcmp(r, "attn.wo_b.weight")) { normal(out, 0.0, 0.5 / sqrt(in)); if (trunk) out->fold = DS_MK_FOLD_LEFT; return; }
    if (!strcmp(r, "ffn.gate.weight")) {
        normal(out, 0.0, (smooth ? 0.25 : 1.0) / sqrt(in));
        if (trunk) out->fold = DS_MK_FOLD_RIGHT;
        return;
    }
    if (!strcmp(r, "ffn.gate.bias") || !strcmp(r, "ffn.gate.bias_vl")) {
        if (smooth) out->kind = DS_MK_BIAS_TIERS;
        else normal(out, 0.0, 0.05);
        return;
    }
    if (!strncmp(r, "ffn.experts.", 12) || !strncmp(r, "ffn.shared_experts.", 19)) {
        if (ends_with(r, ".w2.weight")) { normal(out, 0.0, 0.5 / sqrt(in)); if (trunk) out->fold = DS_MK_FOLD_LEFT; }
        else if (trunk) out->fold = DS_MK_FOLD_RIGHT;
        return;
    }
    if (!strcmp(r, "engram.embed.weight")) { normal(out, 0.0, 1.0); return; }
    if (!strcmp(r, "engram.wkv.weight")) { if (trunk) out->fold = DS_MK_FOLD_LEFT_VALUE; return; }
    if (!strcmp(r, "engram.q_weight") || !strcmp(r, "engram.k_weight")) { normal(out, 0.0, 1.0); return; }
    /* draft extras */
    if (draft && !strcmp(r, "main_proj.weight")) { out->fold = DS_MK_FOLD_RIGHT; return; }
    if (draft && !strcmp(r, "embed.weight")) {
        normal(out, 0.0, 1.0);
        if (smooth) out->kind = DS_MK_EMBED;
        snprintf(out->seed_name, sizeof out->seed_name, "embed.weight");
        return;
    }
    if (draft && !strcmp(r, "head.weight") && li == cfg->n_mtp_layers - 1) {
        normal(out, 0.0, 2.0 / sqrt(D));
        snprintf(out->seed_name, sizeof out->seed_name, "head.weight");
        return;
    }
    if (draft && (!strcmp(r, "markov_head.embed.weight") || !strcmp(r, "markov_head.markov_w1.weight"))) { normal(out, 0.0, 1.0); return; }
    if (draft && (!strcmp(r, "markov_head.head.weight") || !strcmp(r, "markov_head.markov_w2.weight"))) { normal(out, 0.0, 0.5 / sqrt(in)); return; }
}

/* Row stream: decorrelated per (tensor, row). */
static uint64_t row_state(uint64_t seed, int64_t r) {
    uint64_t st = seed + (uint64_t)(r + 1) * 0xD1B54A32D192ED03ull;
    ds_mk_mix(&st);
    return st;
}

void ds_mk_gen_rows(const ds_config *cfg, const ds_mk_spec *sp, uint64_t seed, uint64_t global_seed, int64_t r0, int64_t r1,
                    int64_t cols, float *out) {
    for (int64_t r = r0; r < r1; r++) {
        float *o = out + (r - r0) * cols;
        uint64_t st = row_state(seed, r);
        switch (sp->kind) {
        case DS_MK_NORMAL:
        case DS_MK_EMBED:
        case DS_MK_DC_ROW0:
        case DS_MK_DC_ALL: {
            const float mean = (float)sp->mean, std = (float)sp->std;
            float z[4];
            for (int64_t c = 0; c < cols; c += 4) {
                ds_mk_uniform4(&st, z);
                for (int k = 0; k < 4 && c + k < cols; k++) o[c + k] = mean + std * z[k];
            }
            /* the common component c (smooth fixtures): added to every embedding row, and the
             * c-aligned rows c/D of the readers that must see a positive u·c */
            if (sp->kind == DS_MK_EMBED || (sp->kind == DS_MK_DC_ROW0 && r == 0) || sp->kind == DS_MK_DC_ALL) {
                uint64_t cs = ds_mk_tensor_seed(global_seed, "smooth-common-component");
                const float f = sp->kind == DS_MK_EMBED ? 1.0f : 1.0f / (float)cols;
                for (int64_t c = 0; c < cols; c += 4) {
                    ds_mk_uniform4(&cs, z);
                    for (int k = 0; k < 4 && c + k < cols; k++) o[c + k] = (sp->kind == DS_MK_EMBED ? o[c + k] : 0.0f) + f * z[k];
                }
            }
            break;
        }
        case DS_MK_HC_BASE: {
            const int HC = cfg->hc_mult;
            for (int64_t c = 0; c < cols; c++) {
                double v;
                if (c < HC) v = -log((double)(HC - 1));          /* pre: sigmoid -> 1/HC */
                else if (c < 2 * HC) v = 0.0;                     /* post: 2·sigmoid -> 1 */
                else v = ((c - 2 * HC) / HC == (c - 2 * HC) % HC) ? 1.5 : 0.0; /* comb: diagonal-dominant */
                o[c] = (float)(v + 0.1 * (double)ds_mk_normal(&st));
            }
            break;
        }
        case DS_MK_HC_SCALE:
            for (int64_t c = 0; c < cols; c++) o[c] = (float)(0.5 + 0.02 * (double)ds_mk_normal(&st));
            break;
        case DS_MK_ONES:
            for (int64_t c = 0; c < cols; c++) o[c] = 1.0f;
            break;
        case DS_MK_IDX_WQB:
        case DS_MK_IDX_WK: {
            int pair;
            double phase;
            ds_mk_index_pair(cfg, &pair, &phase);
            const int64_t dih = cfg->index_head_dim, rot0 = dih - cfg->rope_head_dim + 2 * pair;
            const int64_t d = sp->kind == DS_MK_IDX_WQB ? r % dih : r;
            for (int64_t c = 0; c < cols; c++) o[c] = 0.0f;
            if (sp->kind == DS_MK_IDX_WQB) {
                if (d == rot0) o[0] = 1.0f;              /* q pair = (qr[0], 0), qr[0] > 0 */
                else if (d != rot0 + 1) {                /* other rows: ordinary weights (keys are 0 there) */
                    float z[4];
                    const float std = (float)(1.0 / sqrt((double)cols));
                    for (int64_t c = 0; c < cols; c += 4) {
                        ds_mk_uniform4(&st, z);
                        for (int k = 0; k < 4 && c + k < cols; k++) o[c + k] = std * z[k];
                    }
                }
            } else if (d == rot0) {
                o[0] = (float)cos(phase);                /* key pair = lat[0]·(cos φ, −sin φ) */
            } else if (d == rot0 + 1) {
                o[0] = (float)-sin(phase);
            }
            break;
        }
        case DS_MK_BIAS_TIERS: {
            /* a per-layer permutation shared by bias and bias_vl: tier t -> value t */
            char key[48];
            snprintf(key, sizeof key, "gate-tiers:%d", sp->layer);
            uint64_t ps = ds_mk_tensor_seed(global_seed, key);
            int64_t n = cols;
            int *perm = ds_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
            for (int64_t i = 0; i < n; i++) perm[i] = (int)i;
            for (int64_t i = n - 1; i > 0; i--) {
                int64_t j = (int64_t)(ds_mk_mix(&ps) % (uint64_t)(i + 1));
                int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
            }
            for (int64_t i = 0; i < n; i++) o[perm[i]] = (float)i;
            free(perm);
            break;
        }
        }
    }
}
