/* MoE row grouping (MODEL.md §2.9; kernels.h documents the contract): the one implementation the
 * model uses to regroup a step's rows by expert.
 *
 * Why a counting sort: one pass counts the slots of each expert, a prefix sum turns the counts
 * into each expert's slice, a second pass in slot order drops every slot into its slice, so the
 * cost is O(n·k + E) whatever the routing (all rows on one expert, empty experts, ties) and each
 * expert's rows come out ascending.  The fill cursor is the offset table itself (each entry ends
 * one slice ahead and is shifted back afterwards), so the caller's two arrays are all the memory
 * it needs: the model passes step-arena memory and a step allocates nothing.  The per-row sum in
 * ascending expert id (shared expert last) stays the model's job; nothing here reorders a
 * reduction. */
#include "kernels/kernels.h"
#include <stdlib.h>
#include <string.h>

void ds_gather_rows_q(const int8_t *xq, const float *xs, int k, const int *rows, int n, int8_t *dq, float *ds) {
    for (int i = 0; i < n; i++) {
        memcpy(dq + (size_t)i * k, xq + (size_t)rows[i] * k, (size_t)k);
        ds[i] = xs[rows[i]];
    }
}

int ds_moe_group_rows_into(const int32_t *sel, int n, int k, int n_experts, int *off, int *idx, ds_error *err) {
    const int nk = n * k;
    for (int i = 0; i < nk; i++)
        if (sel[i] < 0 || sel[i] >= n_experts)
            return ds_fail(err, "E_MOE_EXPERT", "MoE routing: row %d slot %d selects expert %d, outside [0, %d)",
                           i / k, i % k, sel[i], n_experts);
    memset(off, 0, sizeof(int) * ((size_t)n_experts + 1));
    for (int i = 0; i < nk; i++) off[sel[i] + 1]++;
    for (int e = 0; e < n_experts; e++) off[e + 1] += off[e];
    /* off[e] is now the start of slice e; use it as the cursor (it ends at the start of e+1) */
    for (int i = 0; i < nk; i++) idx[off[sel[i]]++] = i; /* ascending i => rows ascending */
    for (int e = n_experts; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;
    return 0;
}

int ds_moe_group_rows(const int32_t *sel, int n, int k, int n_experts, ds_moe_groups *g, ds_error *err) {
    memset(g, 0, sizeof *g);
    int *off = ds_xmalloc(sizeof(int) * ((size_t)n_experts + 1));
    int *idx = ds_xmalloc(sizeof(int) * (size_t)(n * k > 0 ? n * k : 1));
    if (ds_moe_group_rows_into(sel, n, k, n_experts, off, idx, err) < 0) {
        free(off);
        free(idx);
        return -1;
    }
    g->n_experts = n_experts;
    g->n_rows = n;
    g->k = k;
    g->off = off;
    g->idx = idx;
    return 0;
}

void ds_moe_groups_free(ds_moe_groups *g) {
    free(g->off);
    free(g->idx);
    memset(g, 0, sizeof *g);
}
