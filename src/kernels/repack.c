/* Load-time repack of the published int8 / int4 layouts into the 16-row tile panels described in
 * kern_internal.h.  The published tensors are only read.  The repacked copy is one aligned block
 * (header, padded scales, row sums, tiles) so release is a single free and the memory cost is
 * exactly what ds_linear_prepare reports.  Each panel is written independently, so the repack is
 * split over the thread pool by panels (a mini checkpoint repacks several GiB at load). */
#include "kernels/kern_internal.h"
#include "base/hugemem.h"
#include "base/threadpool.h"
#include <stdlib.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct { const ds_linear *L; ds_packed *P; int per_task; } pack_ctx;

/* W8A8: tile byte 4*r + j of step s is W[o0+r][4s+j]; row sums remove the x+128 bias later. */
static void pack_w8_panel(const ds_linear *L, ds_packed *P, int p) {
    const int in = L->in, out = L->out;
    uint8_t *dst = P->tiles + (size_t)p * P->panel_bytes;
    for (int r = 0; r < DS_PANEL_ROWS; r++) {
        int o = p * DS_PANEL_ROWS + r;
        int32_t sum = 0;
        if (o < out) {
            const int8_t *wr = (const int8_t *)L->w + (size_t)o * in;
            for (int s = 0; s < P->ksteps; s++) {
                uint8_t *t = dst + (size_t)s * DS_TILE_BYTES + 4 * r;
                for (int j = 0; j < 4; j++) {
                    int i = 4 * s + j;
                    int8_t v = i < in ? wr[i] : 0;
                    t[j] = (uint8_t)v;
                    sum += v;
                }
            }
            P->scale[o] = L->w_scale[o];
        } else {
            for (int s = 0; s < P->ksteps; s++) memset(dst + (size_t)s * DS_TILE_BYTES + 4 * r, 0, 4);
            P->scale[o] = 0.f;
        }
        P->wsum[o] = sum;
    }
}

/* W4A8: a published byte holds rows 2q (low nibble) and 2q+1 (high nibble) at one input.  XOR
 * 0x88 turns both two's-complement nibbles into their +8 biased form at once; the tile byte for
 * row o, step s, lane j then takes input 8s+j in its low nibble and 8s+4+j in its high nibble.
 * Missing rows and inputs read as 0x88 (code 0 in both nibbles). */
static void pack_w4_panel(const ds_linear *L, ds_packed *P, int p, uint8_t *vbuf) {
    const int in = L->in, out = L->out, kp = P->ksteps * 8;
    const uint8_t *w = (const uint8_t *)L->w;
    uint8_t *dst = P->tiles + (size_t)p * P->panel_bytes;
    for (int q = 0; q < DS_PANEL_ROWS / 2; q++) {
        int o0 = p * DS_PANEL_ROWS + 2 * q, o1 = o0 + 1;
        /* biased source bytes of this row pair, padded to whole steps */
        if (o0 < out) {
            const uint8_t *src = w + (size_t)(o0 >> 1) * in;
            for (int i = 0; i < in; i++) vbuf[i] = src[i] ^ 0x88u;
            if (o1 >= out) /* odd `out`: the high nibble is padding */
                for (int i = 0; i < in; i++) vbuf[i] = (uint8_t)((vbuf[i] & 0x0fu) | 0x80u);
        } else {
            memset(vbuf, 0x88, (size_t)in);
        }
        memset(vbuf + in, 0x88, (size_t)(kp - in));
        for (int s = 0; s < P->ksteps; s++) {
            const uint8_t *v = vbuf + 8 * (size_t)s;
            uint8_t *t = dst + (size_t)s * DS_TILE_BYTES;
            for (int j = 0; j < 4; j++) {
                t[4 * (2 * q) + j] = (uint8_t)((v[j] & 0x0fu) | (uint8_t)(v[4 + j] << 4));
                t[4 * (2 * q + 1) + j] = (uint8_t)((v[j] >> 4) | (v[4 + j] & 0xf0u));
            }
        }
        P->scale[o0] = o0 < out ? L->w_scale[o0] : 0.f;
        P->scale[o1] = o1 < out ? L->w_scale[o1] : 0.f;
        P->wsum[o0] = P->wsum[o1] = 0;
    }
}

static void pack_panels(void *vctx, int task, int thread) {
    (void)thread;
    pack_ctx *c = vctx;
    ds_packed *P = c->P;
    int p0 = task * c->per_task, p1 = DS_MIN(P->npanels, p0 + c->per_task);
    uint8_t *vbuf = c->L->fmt == DS_LIN_W4A8 ? ds_xmalloc((size_t)P->ksteps * 8) : NULL;
    for (int p = p0; p < p1; p++) {
        if (c->L->fmt == DS_LIN_W8A8) pack_w8_panel(c->L, P, p);
        else pack_w4_panel(c->L, P, p, vbuf);
    }
    free(vbuf);
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
    uint8_t *base = ds_huge_alloc(total);   /* 2 MiB pages: see base/hugemem.h */
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
