/* MoE row grouping (MODEL.md §2.9; kernels.h documents the contract).  A counting sort by expert
 * id: one pass counts, a prefix sum gives each expert its slice, a second pass in slot order
 * fills it, so each expert's rows come out ascending and the model can stream every expert's
 * weights once per step over all the rows routed to it.  The per-row sum in ascending expert id
 * (shared expert last) stays the model's job; nothing here reorders a reduction. */
#include "kernels/kernels.h"
#include <stdlib.h>
#include <string.h>

void ds_gather_rows_q(const int8_t *xq, const float *xs, int k, const int *rows, int n, int8_t *dq, float *ds) {
    for (int i = 0; i < n; i++) {
        memcpy(dq + (size_t)i * k, xq + (size_t)rows[i] * k, (size_t)k);
        ds[i] = xs[rows[i]];
    }
}

int ds_moe_group_rows(const int32_t *sel, int n, int k, int n_experts, ds_moe_groups *g, ds_error *err) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < n * k; i++)
        if (sel[i] < 0 || sel[i] >= n_experts)
            return ds_fail(err, "E_MOE_EXPERT", "MoE routing: row %d slot %d selects expert %d, outside [0, %d)",
                           i / k, i % k, sel[i], n_experts);
    g->n_experts = n_experts;
    g->n_rows = n;
    g->k = k;
    g->off = ds_xcalloc((size_t)n_experts + 1, sizeof(int));
    g->idx = ds_xmalloc(sizeof(int) * (size_t)(n * k > 0 ? n * k : 1));
    for (int i = 0; i < n * k; i++) g->off[sel[i] + 1]++;
    for (int e = 0; e < n_experts; e++) g->off[e + 1] += g->off[e];
    int *fill = ds_xmalloc(sizeof(int) * (size_t)(n_experts > 0 ? n_experts : 1));
    memcpy(fill, g->off, sizeof(int) * (size_t)n_experts);
    for (int i = 0; i < n * k; i++) g->idx[fill[sel[i]]++] = i; /* ascending i => rows ascending */
    free(fill);
    return 0;
}

void ds_moe_groups_free(ds_moe_groups *g) {
    free(g->off);
    free(g->idx);
    memset(g, 0, sizeof *g);
}
