/* Compressor of a FULL layer (MODEL.md §2.7): turns rows into compressed entries C[j] and index
 * keys idxk[j], written into the sequence's CKV/IDX pages before anything reads them.
 *
 * Why the pending rows go through the STATE ring: the r tokens of a ratio-r group may arrive in
 * different steps (decode, chunk boundary, verify block), so every row's fp32 (a, g) is stored in
 * slot p mod 32 of the sequence's STATE page, keyed by position.  A group completed at row p takes
 * its earlier rows from this step's scratch when they belong to the step and from the ring
 * otherwise; rows are handled in position order, so a slot is read before this step could
 * overwrite it (r <= 32).  Rollback therefore needs no copy (§6.3).
 *
 * Both linears of a ratio >= 2 layer keep fp32 outputs (F32 weights, §2.0); the pooled value is
 * rounded to bf16 before its norm.  Ratio 1 uses a bf16 linear output.  The index key is computed
 * from the latent before its rotation; both rotations use the CMP table at position j·r. */
#include "model/forward.h"
#include "model/ops.h"
#include "model/fast_ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct emitted {
    int seq;                      /* step sequence index */
    int64_t j;                    /* entry index */
} emitted;

/* Pool the group ending at position p (row `row` of the step) into lat (bf16, normalized). */
static void pool_group(ds_step *st, const ds_step_seq *sq, int ssrc, int row, int64_t p, int r, const float *A,
                       const float *Gt, const float *norm, ds_bf16 *lat) {
    const int dh = st->c->head_dim;
    const float *a[DS_STATE_SLOTS], *g[DS_STATE_SLOTS];
    for (int t = 0; t < r; t++) {
        int64_t q = p - r + 1 + t;
        if (q >= sq->p0) {
            size_t rr = (size_t)(row - (p - q));
            a[t] = A + rr * dh;
            g[t] = Gt + rr * dh;
        } else {
            const float *s = ds_seq_state_row(sq->seq, ssrc, q);
            a[t] = s;
            g[t] = s + dh;
        }
    }
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    ds_bf16 *pooled = DS_ARENA_NEW(st->arena, ds_bf16, dh);
    if (st->m->numerics == DS_NUMERICS_FAST) {
        ds_pool_group_fast(a, g, r, dh, pooled);
        ds_rmsnorm_bf16_fast(pooled, norm, dh, st->c->norm_eps, lat);
        ds_arena_release(st->arena, mk);
        return;
    }
    for (int ch = 0; ch < dh; ch++) {
        float mx = g[0][ch];
        for (int t = 1; t < r; t++) if (g[t][ch] > mx) mx = g[t][ch];
        float e[DS_STATE_SLOTS];
        double den = 0;
        for (int t = 0; t < r; t++) {
            e[t] = (float)exp((double)g[t][ch] - (double)mx);
            den += e[t];
        }
        float fden = (float)den;
        double s = 0;
        for (int t = 0; t < r; t++) {
            float wt = e[t] / fden;
            s += (double)wt * a[t][ch];
        }
        pooled[ch] = ds_f32_to_bf16((float)s);
    }
    ds_rmsnorm_bf16(pooled, norm, dh, st->c->norm_eps, lat);
    ds_arena_release(st->arena, mk);
}

void ds_compressor_run(ds_step *st, int l) {
    const ds_config *c = st->c;
    const ds_layer_weights *w = &st->m->layers[l];
    const int N = st->N, dh = c->head_dim, di = c->index_head_dim, rd = c->rope_head_dim;
    const int r = c->roles[l].ratio;
    const ds_kv_layout *lay = &st->ss[0].seq->pools->lay;
    const int src = lay->src_of_layer[l], ssrc = lay->state_of_src[src];

    /* latents of every group completed in this step, in (sequence, entry) order */
    int n_emit = 0;
    for (int i = 0; i < st->n_seqs; i++) {
        const ds_step_seq *sq = &st->ss[i];
        n_emit += (int)((sq->p0 + sq->n) / r - sq->p0 / r);
    }
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    emitted *em = DS_ARENA_NEW(st->arena, emitted, n_emit ? n_emit : 1);
    ds_bf16 *lat = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)(n_emit ? n_emit : 1) * dh);
    int k = 0;
    if (r == 1) {
        ds_linear_forward(&w->cmp_wkv, st->u, N, st->ftmp);
        ds_bf16 *tmp = DS_ARENA_NEW(st->arena, ds_bf16, dh);
        for (int i = 0; i < st->n_seqs; i++) {
            const ds_step_seq *sq = &st->ss[i];
            for (int j = 0; j < sq->n; j++, k++) {
                ds_round_rows_bf16(st->ftmp + (size_t)(sq->row0 + j) * dh, (size_t)dh, tmp);
                ds_rmsnorm_t(st->m->numerics, tmp, w->cmp_norm, dh, c->norm_eps, lat + (size_t)k * dh);
                em[k].seq = i;
                em[k].j = sq->p0 + j;
            }
        }
    } else {
        float *A = DS_ARENA_NEW(st->arena, float, (size_t)N * dh), *Gt = DS_ARENA_NEW(st->arena, float, (size_t)N * dh);
        ds_linear_forward(&w->cmp_wkv, st->u, N, A);
        ds_linear_forward(&w->cmp_wgate, st->u, N, Gt);
        for (int i = 0; i < st->n_seqs; i++) {
            const ds_step_seq *sq = &st->ss[i];
            for (int j = 0; j < sq->n; j++) {
                int64_t p = sq->p0 + j;
                int row = sq->row0 + j;
                if ((p + 1) % r == 0) {
                    pool_group(st, sq, ssrc, row, p, r, A, Gt, w->cmp_norm, lat + (size_t)k * dh);
                    em[k].seq = i;
                    em[k].j = p / r;
                    k++;
                }
                /* the pending row, for groups finished by a later step (or re-run after rollback) */
                float *s = ds_seq_state_row(sq->seq, ssrc, p);
                memcpy(s, A + (size_t)row * dh, sizeof(float) * (size_t)dh);
                memcpy(s + dh, Gt + (size_t)row * dh, sizeof(float) * (size_t)dh);
            }
        }
    }

    /* index keys from the un-rotated latents, then rotate both at position j·r and store */
    if (n_emit > 0) {
        float *ik = DS_ARENA_NEW(st->arena, float, (size_t)n_emit * di);
        ds_bf16 *tmp = DS_ARENA_NEW(st->arena, ds_bf16, di);
        float cs[2 * DS_ROPE_MAX_PAIRS];
        ds_linear_forward(&w->idx_wk, lat, n_emit, ik);
        for (int e = 0; e < n_emit; e++) {
            const ds_seq *seq = st->ss[em[e].seq].seq;
            ds_rope_cossin(&st->m->rope_cmp, em[e].j * r, cs);
            ds_bf16 *krow = ds_seq_idx_row(seq, src, em[e].j);
            ds_round_rows_bf16(ik + (size_t)e * di, (size_t)di, tmp);
            ds_rmsnorm_t(st->m->numerics, tmp, w->idx_k_norm, di, c->norm_eps, krow);
            ds_rope_apply_t(st->m->numerics, krow, di, rd, cs, 0);
            ds_bf16 *crow = ds_seq_ckv_row(seq, src, em[e].j);
            memcpy(crow, lat + (size_t)e * dh, sizeof(ds_bf16) * (size_t)dh);
            ds_rope_apply_t(st->m->numerics, crow, dh, rd, cs, 0);
        }
    }
    ds_arena_release(st->arena, mk);
}
