/* Load-time repack of the published int8 / int4 layouts into the 16-row tile panels described in
 * kern_internal.h.  The published tensors are only read.  The repacked copy is one aligned block
 * (header, padded scales, row sums, tiles) so release is a single free and the memory cost is
 * exactly what ds_linear_prepare reports.  Each panel is written independently, so the repack is
 * split over the thread pool by panels (a mini checkpoint repacks several GiB at load). */
#include "kernels/kern_internal.h"
#include "base/threadpool.h"
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct { const ds_linear *L; ds_packed *P; int per_task; } pack_ctx;

static void pack_panels(void *vctx, int task, int thread) {
    (void)thread;
    pack_ctx *c = vctx;
    const ds_linear *L = c->L;
    ds_packed *P = c->P;
    const int in = L->in, out = L->out;
    int p0 = task * c->per_task, p1 = DS_MIN(P->npanels, p0 + c->per_task);
    for (int p = p0; p < p1; p++) {
        uint8_t *dst = P->tiles + (size_t)p * P->panel_bytes;
        for (int r = 0; r < DS_PANEL_ROWS; r++) {
            int o = p * DS_PANEL_ROWS + r;
            int valid = o < out;
            P->scale[o] = valid ? L->w_scale[o] : 0.f;
            if (L->fmt == DS_LIN_W8A8) {
                const int8_t *wr = (const int8_t *)L->w + (size_t)(valid ? o : 0) * in;
                int32_t sum = 0;
                for (int s = 0; s < P->ksteps; s++)
                    for (int j = 0; j < 4; j++) {
                        int i = 4 * s + j;
                        int8_t v = (valid && i < in) ? wr[i] : 0;
                        sum += v;
                        dst[(size_t)s * DS_TILE_BYTES + 4 * r + j] = (uint8_t)v;
                    }
                P->wsum[o] = sum;
            } else {
                const int8_t *w = (const int8_t *)L->w;
                for (int s = 0; s < P->ksteps; s++)
                    for (int j = 0; j < 4; j++) {
                        int i0 = 8 * s + j, i1 = 8 * s + 4 + j;
                        int c0 = (valid && i0 < in) ? ds_w4_code(w, in, o, i0) : 0;
                        int c1 = (valid && i1 < in) ? ds_w4_code(w, in, o, i1) : 0;
                        dst[(size_t)s * DS_TILE_BYTES + 4 * r + j] = (uint8_t)((c0 + 8) | ((c1 + 8) << 4));
                    }
                P->wsum[o] = 0;
            }
        }
    }
}

ds_packed *ds_pack_linear(const ds_linear *L, size_t *bytes) {
    if (L->fmt != DS_LIN_W8A8 && L->fmt != DS_LIN_W4A8) { *bytes = 0; return NULL; }
    int npanels = (L->out + DS_PANEL_ROWS - 1) / DS_PANEL_ROWS;
    int ksteps = L->fmt == DS_LIN_W8A8 ? (L->in + 3) / 4 : (L->in + 7) / 8;
    size_t rows = (size_t)npanels * DS_PANEL_ROWS;
    size_t off_scale = align64(sizeof(ds_packed));
    size_t off_wsum = off_scale + align64(rows * sizeof(float));
    size_t off_tiles = off_wsum + align64(rows * sizeof(int32_t));
    size_t panel_bytes = (size_t)ksteps * DS_TILE_BYTES;
    size_t total = off_tiles + (size_t)npanels * panel_bytes;
    uint8_t *base = ds_amalloc(total);
    ds_packed *P = (ds_packed *)base;
    memset(P, 0, sizeof *P);
    P->fmt = L->fmt;
    P->out = L->out;
    P->in = L->in;
    P->npanels = npanels;
    P->ksteps = ksteps;
    P->panel_bytes = panel_bytes;
    P->scale = (float *)(base + off_scale);
    P->wsum = (int32_t *)(base + off_wsum);
    P->tiles = base + off_tiles;
    int threads = ds_pool_threads();
    int ntasks = DS_MIN(npanels, 8 * threads);
    pack_ctx c = {L, P, (npanels + ntasks - 1) / ntasks};
    ntasks = (npanels + c.per_task - 1) / c.per_task;
    ds_pool_run(ntasks, pack_panels, &c);
    *bytes = total;
    return P;
}
