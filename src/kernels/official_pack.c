/* Load-time repack of MXFP4 linears into 16-row panels (layout in kern_official.h).
 *
 * Why: the published layout keeps each output row's codes together, so a kernel either reduces
 * across lanes for every row (one row at a time) or decodes a row once per group of activation
 * rows and still pays a horizontal sum per output.  Side by side, 16 output rows fill the 16 lanes
 * of one VPDPBUSD and a decoded tile serves every activation row of a tile, as the W4A8 panels do.
 * The copy has the published size (codes, one shift byte per block and row) plus 8 bytes per row
 * (and the unused slots of a last group of fewer than 4 blocks);
 * the published tensors are only read, and the row functions still use them for panels that hold
 * a row of wide exponent spread.  Panels are written independently, split over the thread pool. */
#include "kernels/kern_official.h"
#include "base/hugemem.h"
#include "base/threadpool.h"
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct { const ds_linear *L; ds_mxpack *P; } mxpack_ctx;

/* Panel p: tiles, shifts, each row's smallest scale and the panel's stretch length. */
static void pack_panel(void *vctx, int p, int thread) {
    (void)thread;
    const mxpack_ctx *c = vctx;
    const ds_linear *L = c->L;
    ds_mxpack *P = c->P;
    const int nb = P->nb;
    const uint8_t *codes = L->w, *scales = L->w_e8m0;
    uint8_t *panel = P->panels + (size_t)p * P->panel_bytes;
    memset(panel, 0, P->panel_bytes);   /* the unused slots of a last partial group */
    int spread = 0;
    for (int r = 0; r < 16; r++) {
        const int o = 16 * p + r;
        if (o >= L->out) {   /* padding rows: code 0 (weight 0), shift 0 (the memset) */
            P->lo[o] = 127;
            continue;
        }
        const uint8_t *row = codes + (size_t)o * nb * 16, *sc = scales + (size_t)o * nb;
        int lo, hi;
        ds_mx_exp_range(sc, nb, &lo, &hi);
        P->lo[o] = lo;
        spread = hi - lo > DS_MX_EXACT_SPREAD ? 99 : DS_MAX(spread, hi - lo);
        for (int b = 0; b < nb; b++) {
            uint8_t *tiles = panel + ds_mx_tiles_off(b);
            panel[ds_mx_shifts_off(b) + r] = (uint8_t)(sc[b] - lo);
            for (int t = 0; t < 4; t++) memcpy(tiles + 64 * t + 4 * r, row + 16 * b + 4 * t, 4);
        }
    }
    P->chunk[p] = ds_mx_panel_chunk(nb, spread);
}

ds_mxpack *ds_mx_pack(const ds_linear *L, size_t *bytes) {
    const int nb = L->in / 32, np = (L->out + 15) / 16;
    const size_t head = align64(sizeof(ds_mxpack)), chunk = align64(sizeof(int32_t) * (size_t)np),
                 lo = align64(sizeof(int32_t) * 16 * (size_t)np), panel_bytes = (size_t)(nb + 3) / 4 * DS_MX_GROUP_BYTES;
    const size_t total = head + chunk + lo + (size_t)np * panel_bytes;
    uint8_t *mem = ds_huge_alloc(total);
    if (!mem) return NULL;
    ds_mxpack *P = (ds_mxpack *)mem;
    *P = (ds_mxpack){.out = L->out, .in = L->in, .nb = nb, .npanels = np, .panel_bytes = panel_bytes};
    P->chunk = (int32_t *)(mem + head);
    P->lo = (int32_t *)(mem + head + chunk);
    P->panels = mem + head + chunk + lo;
    mxpack_ctx c = {L, P};
    if (np > 1 && ds_pool_threads() > 1) ds_pool_run(np, pack_panel, &c);
    else
        for (int p = 0; p < np; p++) pack_panel(&c, p, 0);
    for (int p = 0; p < np; p++) P->row_panels += !P->chunk[p];
    *bytes = total;
    return P;
}

/* The panel route in plain C (tests: the layout and the stretch arithmetic, lane by lane). */
void ds_mx_panels_ref(const ds_mxpack *P, const uint8_t *act, size_t rowstride, size_t part, size_t init,
                      const float *xs, int n, int p0, int p1, float *y, int ystride) {
    static const uint8_t u12[16] = {DS_MX_U12_LUT};
    for (int p = p0; p < p1; p++) {
        const int F = P->chunk[p];
        if (!F) continue;
        for (int r = 0; r < n; r++) {
            const int8_t *xe = (const int8_t *)(act + (size_t)r * rowstride), *xo = xe + part;
            const int32_t *ini = (const int32_t *)((const uint8_t *)xe + init);
            for (int lane = 0; lane < 16; lane++) {
                const int o = 16 * p + lane;
                int64_t total = 0;
                for (int b0 = 0; b0 < P->nb; b0 += F) {
                    int32_t stretch = 0;
                    for (int b = b0; b < DS_MIN(P->nb, b0 + F); b++) {
                        int32_t blk = ini[b];
                        for (int t = 0; t < 4; t++)
                            for (int j = 0; j < 4; j++) {
                                const uint8_t code = ds_mx_panel(P, p)[ds_mx_tiles_off(b) + 64 * t + 4 * lane + j];
                                blk += u12[code & 15] * xe[16 * b + 4 * t + j] + u12[code >> 4] * xo[16 * b + 4 * t + j];
                            }
                        stretch += blk * ((int32_t)1 << ds_mx_panel(P, p)[ds_mx_shifts_off(b) + lane]);   /* exact: no overflow by `chunk` */
                    }
                    total += stretch;
                }
                if (o < P->out) y[(size_t)r * ystride + o] = (float)(ds_mx_scale_total(total, P->lo[o]) * (double)xs[r]);
            }
        }
    }
}
