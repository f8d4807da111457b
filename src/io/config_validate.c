/* The validation rules of MODEL.md §1.2 and the derived role table.
 *
 * Each rule is checked in the order of the specification and a violation is reported as E_CONFIG
 * naming the rule number and the offending layer, so that a user can map the message straight back
 * to the document.  Roles are derived only after every rule passed, because the derivation relies
 * on them (kv_src(l) exists, groups never span a ratio change).  A few sanity checks that the
 * specification implies but does not number (positive sizes, sorted layer lists, the multiplier
 * bound of Appendix A) are reported under the rule they protect. */
#include "io/config.h"
#include "io/io_util.h"
#include <inttypes.h>
#include <string.h>

static bool in_list(const int *a, int n, int x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return true;
    return false;
}
static int max_le(const int *a, int n, int l) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (a[i] <= l && a[i] > best) best = a[i];
    return best;
}
static int index_of(const int *a, int n, int x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return i;
    return -1;
}

/* Layer lists must be strictly increasing ids inside [0, L). */
static int check_list(const char *path, const char *rule, const char *name, const int *a, int n, int L, ds_error *err) {
    for (int i = 0; i < n; i++) {
        if (a[i] < 0 || a[i] >= L)
            return ds_io_fail(err, "E_CONFIG", path, name, "%s: expected layer ids in [0, %d), found %d", rule, L, a[i]);
        if (i && a[i] <= a[i - 1])
            return ds_io_fail(err, "E_CONFIG", path, name, "%s: expected strictly increasing layer ids, found %d after %d", rule, a[i], a[i - 1]);
    }
    return 0;
}

int ds_config_validate(ds_config *c, const char *path, ds_error *err) {
    const int L = c->n_layers, S = c->n_mtp_layers;
    if (L < 1 || S < 0 || L + S > DS_MAX_LAYERS)
        return ds_io_fail(err, "E_CONFIG", path, "num_hidden_layers", "expected 1 <= L and L + S_d <= %d, found L = %d, S_d = %d", DS_MAX_LAYERS, L, S);
    /* sizes */
    const struct { const char *n; int v; } pos[] = {
        {"vocab_size", c->vocab_size}, {"hidden_size", c->dim}, {"num_attention_heads", c->n_heads}, {"head_dim", c->head_dim},
        {"q_lora_rank", c->q_lora_rank}, {"o_groups", c->o_groups}, {"o_lora_rank", c->o_lora_rank}, {"sliding_window", c->window},
        {"n_routed_experts", c->n_experts}, {"num_experts_per_tok", c->n_active}, {"moe_intermediate_size", c->moe_inter},
        {"hc_mult", c->hc_mult}, {"hc_sinkhorn_iters", c->hc_sinkhorn_iters},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(pos); i++)
        if (pos[i].v < 1) return ds_io_fail(err, "E_CONFIG", path, pos[i].n, "sizes: expected a positive value, found %d", pos[i].v);
    if (c->n_active > c->n_experts)
        return ds_io_fail(err, "E_CONFIG", path, "num_experts_per_tok", "sizes: expected <= n_routed_experts (%d), found %d", c->n_experts, c->n_active);

    /* Rule 1: compress_ratios */
    if (c->n_compress == L && S > 0) {
        for (int l = L; l < L + S; l++) c->compress_ratios[l] = 0;
        c->n_compress = L + S;
    }
    if (c->n_compress != L + S)
        return ds_io_fail(err, "E_CONFIG", path, "compress_ratios", "rule 1: expected %d entries (L + S_d) or %d (L), found %d", L + S, L, c->n_compress);
    for (int l = 0; l < L + S; l++) {
        if (c->compress_ratios[l] < 0)
            return ds_io_fail(err, "E_CONFIG", path, "compress_ratios", "rule 1: expected entries >= 0, found %d at layer %d", c->compress_ratios[l], l);
        if (l >= L && c->compress_ratios[l] != 0)
            return ds_io_fail(err, "E_CONFIG", path, "compress_ratios", "rule 1: expected 0 for draft stage layer %d, found %d", l, c->compress_ratios[l]);
    }
    /* Rule 2: K ⊆ I, every index source compresses */
    if (check_list(path, "rule 2", "kv_source_layer_ids", c->kv_src, c->n_kv_src, L, err) ||
        check_list(path, "rule 2", "index_source_layer_ids", c->idx_src, c->n_idx_src, L, err))
        return -1;
    for (int i = 0; i < c->n_kv_src; i++)
        if (!in_list(c->idx_src, c->n_idx_src, c->kv_src[i]))
            return ds_io_fail(err, "E_CONFIG", path, "kv_source_layer_ids", "rule 2 (K subset of I): expected kv source %d in index_source_layer_ids, found it missing",
                              c->kv_src[i]);
    for (int i = 0; i < c->n_idx_src; i++)
        if (c->compress_ratios[c->idx_src[i]] <= 0)
            return ds_io_fail(err, "E_CONFIG", path, "index_source_layer_ids", "rule 2: expected index source %d to have ratio > 0, found ratio %d", c->idx_src[i],
                              c->compress_ratios[c->idx_src[i]]);
    /* Rule 3: groups never span a ratio change; idx_src >= kv_src */
    for (int l = 0; l < L; l++) {
        int r = c->compress_ratios[l];
        if (r == 0) continue;
        int k = max_le(c->kv_src, c->n_kv_src, l), ix = max_le(c->idx_src, c->n_idx_src, l);
        if (k < 0) return ds_io_fail(err, "E_CONFIG", path, "kv_source_layer_ids", "rule 3: expected a kv source <= layer %d (ratio %d), found none", l, r);
        if (ix < 0) return ds_io_fail(err, "E_CONFIG", path, "index_source_layer_ids", "rule 3: expected an index source <= layer %d (ratio %d), found none", l, r);
        for (int j = k; j <= l; j++)
            if (c->compress_ratios[j] != r)
                return ds_io_fail(err, "E_CONFIG", path, "compress_ratios", "rule 3: expected layers %d..%d to share ratio %d, found ratio %d at layer %d", k, l, r,
                                  c->compress_ratios[j], j);
        if (ix < k)
            return ds_io_fail(err, "E_CONFIG", path, "index_source_layer_ids", "rule 3: expected idx_src(%d) >= kv_src(%d) = %d, found %d", l, l, k, ix);
    }
    /* Rule 4: candidate source */
    if (c->cand_layer >= 0) {
        int cl = c->cand_layer;
        if (!in_list(c->idx_src, c->n_idx_src, cl))
            return ds_io_fail(err, "E_CONFIG", path, "candidate_source_layer_id", "rule 4: expected an index source layer, found %d", cl);
        int kc = max_le(c->kv_src, c->n_kv_src, cl);
        for (int i = 0; i < c->n_idx_src; i++)
            if (c->idx_src[i] > cl && max_le(c->kv_src, c->n_kv_src, c->idx_src[i]) != kc)
                return ds_io_fail(err, "E_CONFIG", path, "candidate_source_layer_id", "rule 4: expected kv_src(%d) == kv_src(%d) = %d, found %d", c->idx_src[i], cl, kc,
                                  max_le(c->kv_src, c->n_kv_src, c->idx_src[i]));
    }
    /* Rule 5: Engram and DSpark layer lists */
    if (check_list(path, "rule 5", "engram_layer_ids", c->engram_layers, c->n_engram, L, err) ||
        check_list(path, "rule 5", "dspark_target_layer_ids", c->dspark_targets, c->n_dspark_targets, L, err))
        return -1;
    if (c->n_engram) {
        if (c->n_engram_rows != c->n_engram)
            return ds_io_fail(err, "E_CONFIG", path, "engram_num_embeddings", "rule 5: expected %d entries (one per Engram layer), found %d", c->n_engram, c->n_engram_rows);
        if (c->engram_head_dim % 32)
            return ds_io_fail(err, "E_CONFIG", path, "engram_head_dim", "rule 5: expected a multiple of 32, found %d", c->engram_head_dim);
        if (c->engram_pad_id >= c->vocab_size)
            return ds_io_fail(err, "E_CONFIG", path, "engram_pad_id", "rule 5: expected a token id < vocab_size %d, found %d", c->vocab_size, c->engram_pad_id);
        /* Appendix A: the 64-bit bounded draw needs B - 1 >= 2^32, B = ((2^63 - 1) div V_c) div 2. */
        int64_t B = (INT64_MAX / c->engram_classes) / 2;
        if (B - 1 < ((int64_t)1 << 32))
            return ds_io_fail(err, "E_CONFIG", path, "engram_compressed_vocab_size", "rule 5 (Engram multiplier bound): expected B - 1 >= 2^32, found B = %" PRId64 " for V_c = %d",
                              B, c->engram_classes);
        if (c->has_engram_multipliers && (c->n_mult_layers != c->n_engram || c->n_mult_per_layer != c->engram_max_ngram))
            return ds_io_fail(err, "E_CONFIG", path, "engram_hash_multipliers", "rule 5: expected %d lists of %d integers, found %d lists of %d", c->n_engram,
                              c->engram_max_ngram, c->n_mult_layers, c->n_mult_per_layer);
    }
    /* Without Engram layers leftover Engram keys are inert (an empty engram_layer_ids disables
     * Engram, CHECKPOINT.md §13); they are not an error. */
    if (S > 0) {
        if (c->n_dspark_targets < 1)
            return ds_io_fail(err, "E_CONFIG", path, "dspark_target_layer_ids", "rule 5: expected at least one target layer with %d draft stages, found none", S);
        int de = c->dspark_n_experts ? c->dspark_n_experts : c->n_experts, da = c->dspark_n_active ? c->dspark_n_active : c->n_active;
        if (da > de)
            return ds_io_fail(err, "E_CONFIG", path, "dspark_num_experts_per_tok", "sizes: expected <= draft experts (%d), found %d", de, da);
    }
    /* Rule 6 */
    if (c->n_shared != 1) return ds_io_fail(err, "E_CONFIG", path, "n_shared_experts", "rule 6: expected 1, found %d", c->n_shared);
    if (c->rope_head_dim % 2 || c->rope_head_dim > c->head_dim)
        return ds_io_fail(err, "E_CONFIG", path, "qk_rope_head_dim", "rule 6: expected an even value <= head_dim %d, found %d", c->head_dim, c->rope_head_dim);
    if (c->n_idx_src && c->rope_head_dim > c->index_head_dim)
        return ds_io_fail(err, "E_CONFIG", path, "qk_rope_head_dim", "rule 6: expected <= index_head_dim %d, found %d", c->index_head_dim, c->rope_head_dim);
    if (c->n_heads % c->o_groups)
        return ds_io_fail(err, "E_CONFIG", path, "o_groups", "rule 6: expected a divisor of num_attention_heads %d, found %d", c->n_heads, c->o_groups);
    if (c->dim % 32) return ds_io_fail(err, "E_CONFIG", path, "hidden_size", "rule 6: expected a multiple of 32, found %d", c->dim);
    if (c->head_dim % 32) return ds_io_fail(err, "E_CONFIG", path, "head_dim", "rule 6: expected a multiple of 32, found %d", c->head_dim);
    if (c->n_idx_src && c->index_head_dim % 32)
        return ds_io_fail(err, "E_CONFIG", path, "index_head_dim", "rule 6: expected a multiple of 32, found %d", c->index_head_dim);
    /* Rule 7 */
    if (c->cand_layer >= 0 && (int64_t)(c->cand_topk_blocks - 1) * c->cand_block_size + 1 < c->index_topk)
        return ds_io_fail(err, "E_CONFIG", path, "candidate_topk_blocks", "rule 7: expected (candidate_topk_blocks - 1) * candidate_block_size + 1 >= index_topk %d, found %" PRId64,
                          c->index_topk, (int64_t)(c->cand_topk_blocks - 1) * c->cand_block_size + 1);
    /* Rule 8 */
    if (c->score_func != DS_SCORE_SQRTSOFTPLUS)
        return ds_io_fail(err, "E_CONFIG", path, "scoring_func", "rule 8: expected \"sqrtsoftplus\" (the only implemented score function), found \"%s\"",
                          c->score_func == DS_SCORE_SOFTMAX ? "softmax" : "sigmoid");
    if (c->swiglu_limit < 0) return ds_io_fail(err, "E_CONFIG", path, "swiglu_limit", "rule 8: expected >= 0, found %g", c->swiglu_limit);

    /* Roles (§1.2 derivation). */
    c->dspark_n_experts = c->dspark_n_experts ? c->dspark_n_experts : c->n_experts;
    c->dspark_n_active = c->dspark_n_active ? c->dspark_n_active : c->n_active;
    memset(c->roles, 0, sizeof c->roles);
    for (int l = 0; l < L + S; l++) {
        ds_layer_role *r = &c->roles[l];
        r->ratio = c->compress_ratios[l];
        r->kv_src = r->idx_src = -1;
        r->engram = r->captured = -1;
        r->role = DS_ROLE_SWA;
        if (l >= L) continue;
        if (r->ratio > 0) {
            r->kv_src = max_le(c->kv_src, c->n_kv_src, l);
            r->idx_src = max_le(c->idx_src, c->n_idx_src, l);
            r->role = in_list(c->kv_src, c->n_kv_src, l) ? DS_ROLE_FULL : in_list(c->idx_src, c->n_idx_src, l) ? DS_ROLE_REINDEX : DS_ROLE_REUSE;
        }
        r->cand_source = c->cand_layer >= 0 && l == c->cand_layer;
        r->uses_candidates = c->cand_layer >= 0 && c->cand_layer < l && in_list(c->idx_src, c->n_idx_src, l);
        r->engram = index_of(c->engram_layers, c->n_engram, l);
        r->captured = index_of(c->dspark_targets, c->n_dspark_targets, l);
    }
    return 0;
}
