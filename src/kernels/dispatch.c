/* Run-time selection of the kernel path.  Until the SIMD paths land, only "reference" exists;
 * asking for another path is an error, never a silent fallback (PITFALLS.md §A). */
#include "kernels/kernels.h"
#include <string.h>
#include <stdlib.h>

static const char *g_active = "reference";

int ds_kernels_select(const char *name, ds_error *err) {
    if (!name || !strcmp(name, "auto") || !strcmp(name, "reference")) { g_active = "reference"; return 0; }
    return ds_fail(err, "E_KERNELS", "--kernels %s: this build has no such kernel path (available: auto, reference)", name);
}
const char *ds_kernels_active(void) { return g_active; }

void ds_linear_forward_q(const ds_linear *L, const int8_t *xq, const float *xs, int n, float *y) {
    ds_ref_linear_q(L, xq, xs, n, y);
}

void ds_linear_forward(const ds_linear *L, const ds_bf16 *x, int n, float *y) {
    if (L->fmt == DS_LIN_W8A8 || L->fmt == DS_LIN_W4A8) {
        int8_t *q = ds_amalloc((size_t)n * L->in);
        float *s = ds_amalloc(sizeof(float) * (size_t)n);
        ds_quantize_rows(x, n, L->in, q, s);
        ds_linear_forward_q(L, q, s, n, y);
        ds_afree(q);
        ds_afree(s);
    } else {
        ds_ref_linear_f(L, x, n, y);
    }
}

size_t ds_linear_prepare(ds_linear *L) { (void)L; return 0; }
void ds_linear_release(ds_linear *L) {
    if (L->packed) ds_afree(L->packed);
    L->packed = NULL;
    L->packed_bytes = 0;
}
