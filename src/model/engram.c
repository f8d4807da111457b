/* Engram (MODEL.md §2.10, §3 item 1): the token-class map, the loader checks 19/23/24, and the
 * module applied to the residual copies before the block of an Engram layer.
 *
 * Why the checks live here: every hash depends on the class map, the primes and the multipliers,
 * and a wrong one silently changes every output (PITFALLS 18, 19), so ds_model_load refuses to run
 * unless the prime sums equal engram_num_embeddings (E_ENGRAM_PRIME_SUM), the map has exactly
 * engram_compressed_vocab_size classes in first-seen order and vocab_size entries
 * (E_TOKEN_MAP_SIZE), and multipliers written in the config equal the computed ones
 * (E_ENGRAM_MULTIPLIERS).  History comes from the sequence's own token ids (committed tokens, then
 * this step's rows); only the sequence start is a barrier (no image rows yet).
 *
 * The gate needs the hidden state in the original basis: with a QuaRot checkpoint each 32-block of
 * the copy is un-rotated by B (o_b = B·h_b) for the dot product only; the value row already lives
 * in the rotated basis and is added to h directly (docs/NUMERICS.md "Engram gate"). */
#include "model/forward.h"
#include "model/ops.h"
#include "model/fast_ops.h"
#include "base/fsutil.h"
#include "base/threadpool.h"
#include "tokenizer/engram_map.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Check 23 on a class map (however obtained) and keep it. */
static int accept_map(ds_model *m, const char *src, const uint32_t *cls, ds_error *err) {
    const ds_config *c = &m->cfg;
    int64_t next_new = 0;
    for (int v = 0; v < c->vocab_size; v++) {
        if ((int64_t)cls[v] > next_new)
            return ds_fail(err, "E_TOKEN_MAP_SIZE", "%s: expected class <= %lld at id %d (first-seen order), found %u", src,
                           (long long)next_new, v, cls[v]);
        if ((int64_t)cls[v] == next_new) next_new++;
    }
    if (next_new != c->engram_classes)
        return ds_fail(err, "E_TOKEN_MAP_SIZE", "%s: expected %d classes (engram_compressed_vocab_size), found %lld", src,
                       c->engram_classes, (long long)next_new);
    if (c->engram_pad_id < 0 || c->engram_pad_id >= c->vocab_size)
        return ds_fail(err, "E_CONFIG", "%s/config.json: engram_pad_id: expected 0..%d, found %d", m->dir, c->vocab_size - 1,
                       c->engram_pad_id);
    m->token_class = ds_model_own(m, ds_xmalloc(sizeof(uint32_t) * (size_t)c->vocab_size));
    memcpy(m->token_class, cls, sizeof(uint32_t) * (size_t)c->vocab_size);
    m->pad_class = m->token_class[c->engram_pad_id];
    return 0;
}

/* The map computed from the model's tokenizer (MODEL.md §2.10.1), when no map file is named. */
static int compute_token_map(ds_model *m, ds_error *err) {
    const ds_config *c = &m->cfg;
    char *path = ds_path_join(m->dir, "tokenizer.json");
    ds_tokenizer *tok = NULL;
    uint32_t *cls = NULL;
    int n_cls = 0, rc = -1;
    double t0 = ds_now();
    if (!ds_file_exists(path)) {
        ds_fail(err, "E_MISSING_FILE", "%s: expected the tokenizer (needed for the Engram token map: config names no "
                "engram_token_map_file), found none", path);
    } else if (ds_tokenizer_load(path, &tok, err) == 0) {
        if (ds_tokenizer_vocab_size(tok) != c->vocab_size)
            ds_fail(err, "E_TOKEN_MAP_SIZE", "%s: expected %d ids (vocab_size), found %d", path, c->vocab_size,
                    ds_tokenizer_vocab_size(tok));
        else if (ds_engram_map_compute(tok, &cls, &n_cls, err) == 0)
            rc = accept_map(m, path, cls, err);
    }
    if (rc == 0) ds_log(DS_LOG_INFO, "Engram token map: computed from %s (%d classes, %.2f s)", path, n_cls, ds_now() - t0);
    free(cls);
    if (tok) ds_tokenizer_free(tok);
    free(path);
    return rc;
}

static int load_token_map(ds_model *m, ds_error *err) {
    const ds_config *c = &m->cfg;
    if (!c->engram_token_map_file[0]) return compute_token_map(m, err);
    char *path = ds_path_join(m->dir, c->engram_token_map_file);
    char *data = NULL;
    size_t len = 0;
    if (ds_read_file(path, &data, &len, err) < 0) {
        ds_fail(err, "E_MISSING_FILE", "%s: expected the Engram token map (engram_token_map_file), found %s", path,
                err && err->msg[0] ? err->msg : "no file");
        free(path);
        return -1;
    }
    int rc;
    const size_t want = (size_t)c->vocab_size * 4u;
    if (len != want) {
        rc = ds_fail(err, "E_TOKEN_MAP_SIZE", "%s: expected %zu bytes (vocab_size %d x 4), found %zu", path, want,
                     c->vocab_size, len);
    } else {
        uint32_t *cls = ds_xmalloc(want);
        for (int v = 0; v < c->vocab_size; v++) {
            const uint8_t *b = (const uint8_t *)data + 4 * (size_t)v;
            cls[v] = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        }
        rc = accept_map(m, path, cls, err);
        free(cls);
        if (rc == 0) ds_log(DS_LOG_DEBUG, "Engram token map: read from %s (%d classes)", path, c->engram_classes);
    }
    free(data);
    free(path);
    return rc;
}

int ds_model_init_engram(ds_model *m, ds_error *err) {
    const ds_config *c = &m->cfg;
    if (c->n_engram == 0) return 0;
    if (ds_engram_consts_init(&m->ec, c, err) < 0) return -1;
    for (int e = 0; e < c->n_engram; e++)
        if (m->ec.prime_sum[e] != c->engram_rows[e])
            return ds_fail(err, "E_ENGRAM_PRIME_SUM", "%s/config.json: engram_num_embeddings[%d]: expected %lld (sum of the "
                           "primes of layer %d), found %lld", m->dir, e, (long long)m->ec.prime_sum[e], c->engram_layers[e],
                           (long long)c->engram_rows[e]);
    if (c->has_engram_multipliers) {
        if (c->n_mult_layers != c->n_engram || c->n_mult_per_layer != c->engram_max_ngram)
            return ds_fail(err, "E_ENGRAM_MULTIPLIERS", "%s/config.json: engram_hash_multipliers: expected %d x %d, found %d x %d",
                           m->dir, c->n_engram, c->engram_max_ngram, c->n_mult_layers, c->n_mult_per_layer);
        for (int e = 0; e < c->n_engram; e++)
            for (int k = 0; k < c->engram_max_ngram; k++)
                if (c->engram_multipliers[e][k] != m->ec.mult[e][k])
                    return ds_fail(err, "E_ENGRAM_MULTIPLIERS", "%s/config.json: engram_hash_multipliers[%d][%d]: expected %lld, "
                                   "found %lld", m->dir, e, k, (long long)m->ec.mult[e][k], (long long)c->engram_multipliers[e][k]);
    }
    return load_token_map(m, err);
}

/* ---- the module ---- */

/* Dequantize one table row into bf16 (exact: code times a power of two). */
static void table_row(const ds_engram_weights *ew, int hd, int64_t row, ds_bf16 *out) {
    const int ng = hd / 32;
    if (!ew->fp8) {
        const int8_t *code = (const int8_t *)ew->codes + (size_t)row * hd;
        const float *sc = (const float *)ew->scales + (size_t)row * ng;
        for (int i = 0; i < hd; i++) out[i] = ds_f32_to_bf16((float)code[i] * sc[i / 32]);
    } else {
        const uint8_t *code = (const uint8_t *)ew->codes + (size_t)row * hd;
        const uint8_t *sc = (const uint8_t *)ew->scales + (size_t)row * ng;
        for (int i = 0; i < hd; i++) out[i] = ds_f32_to_bf16(ds_e4m3_value(code[i]) * ds_e8m0_value(sc[i / 32]));
    }
}

/* ---- table rows: one pool task per token row ----
 * Each token row reads 24 random rows of a table far larger than any cache (two of ~98 GB in the
 * release), so a lookup costs a TLB miss and a memory access.  Read one after another by the
 * stepping thread they left the other threads idle and every miss waiting for the previous one
 * (on mini, 16 rows: 3-9 ms per Engram layer, more than its linear).  Now the rows of a step are
 * pool tasks, and a task computes all of its row's ids first and prefetches every table row's
 * lines before it decodes the first, so that the misses overlap.  With fewer token rows than pool
 * threads (a decode step of one sequence) each row's columns are shared out among several tasks
 * (each computes the row's ids again, a few hashes), so that no thread idles while one walks all
 * 24 lookups: 1-row steps of mini, gather per step 1.5-1.6 -> 1.0-1.25 ms (decision 199). */
typedef struct rows_ctx {
    ds_step *st;
    const ds_engram_weights *ew;
    int e;
    ds_bf16 *ev;                  /* [N][n_cols·hd] decoded table rows */
    int parts;                    /* tasks per token row, each a share of its columns */
} rows_ctx;

static void rows_task(void *vctx, int task, int thread) {
    (void)thread;
    rows_ctx *x = vctx;
    const int r = task / x->parts, part = task % x->parts;
    const ds_step *st = x->st;
    const ds_model *m = st->m;
    const ds_engram_consts *ec = &m->ec;
    const int hd = st->c->engram_head_dim, ncol = ec->n_cols, ein = ncol * hd;
    const ds_step_seq *sq = &st->ss[st->row_seq[r]];
    const int64_t p = st->pos[r];
    int64_t t[DS_MAX_NGRAM], rows[DS_ENGRAM_MAX_COLS];
    int barrier = 0;
    for (int s = 0; s < ec->max_ngram; s++) {
        int64_t q = p - s;
        if (q < 0) barrier = 1;     /* the sequence start; image rows would be barriers too */
        if (barrier) { t[s] = m->pad_class; continue; }
        int32_t tok = q >= sq->p0 ? sq->tok[q - sq->p0] : sq->seq->tokens[q];
        t[s] = m->token_class[tok];
    }
    ds_engram_row_ids(ec, x->e, t, rows);
    const size_t code_bytes = (size_t)hd, scale_bytes = (size_t)(hd / 32) * (x->ew->fp8 ? 1 : 4);
    const int c0 = ncol * part / x->parts, c1 = ncol * (part + 1) / x->parts;
    for (int col = c0; col < c1; col++) {
        const char *c = (const char *)x->ew->codes + (size_t)rows[col] * code_bytes;
        for (size_t b = 0; b < code_bytes; b += 64) __builtin_prefetch(c + b, 0, 0);
        __builtin_prefetch((const char *)x->ew->scales + (size_t)rows[col] * scale_bytes, 0, 0);
    }
    for (int col = c0; col < c1; col++) table_row(x->ew, hd, rows[col], x->ev + (size_t)r * ein + (size_t)col * hd);
}

typedef struct gate_ctx {
    ds_step *st;
    const ds_engram_weights *ew;
    const float *kv;              /* [N][(HC+1)·D] fp32 values of the bf16 linear output */
    float *o, *val;               /* [threads][D] per-thread scratch (step arena) */
} gate_ctx;

static void gate_task(void *vctx, int row, int thread) {
    gate_ctx *g = vctx;
    ds_step *st = g->st;
    const ds_model *m = st->m;
    const int D = st->c->dim, HC = st->c->hc_mult;
    const double eps = st->c->norm_eps;
    const float *kvr = g->kv + (size_t)row * (HC + 1) * D;
    const float *value = kvr + (size_t)HC * D;
    float *o = g->o + (size_t)thread * D, *val = NULL;
    if (m->rotate_value) {
        /* value'_b = Bᵀ·value_b, kept fp32 */
        val = g->val + (size_t)thread * D;
        for (int b = 0; b < D / 32; b++)
            for (int i = 0; i < 32; i++) {
                double s = 0;
                for (int j = 0; j < 32; j++) s += (double)m->rot[j * 32 + i] * value[b * 32 + j];
                val[b * 32 + i] = (float)s;
            }
        value = val;
    }
    const float dm05 = (float)(1.0 / sqrt((double)D));
    for (int k = 0; k < HC; k++) {
        ds_bf16 *xk = st->X + ((size_t)row * HC + k) * D;
        const float *key = kvr + (size_t)k * D;
        const float *wq = g->ew->wq + (size_t)k * D;
        if (m->unrotate_gate) {
            for (int b = 0; b < D / 32; b++)
                for (int i = 0; i < 32; i++) {
                    double s = 0;
                    for (int j = 0; j < 32; j++) s += (double)m->rot[i * 32 + j] * ds_bf16_to_f32(xk[b * 32 + j]);
                    o[b * 32 + i] = (float)s;
                }
        } else {
            for (int d = 0; d < D; d++) o[d] = ds_bf16_to_f32(xk[d]);
        }
        double sso = 0, ssk = 0, t = 0;
        for (int d = 0; d < D; d++) {
            sso += (double)o[d] * o[d];
            ssk += (double)key[d] * key[d];
            t += (double)o[d] * (double)wq[d] * (double)key[d];
        }
        float fso = (float)sso, fsk = (float)ssk;
        float rstd = (float)((1.0 / sqrt((double)fso / D + eps)) * (1.0 / sqrt((double)fsk / D + eps)));
        float dot = (float)t * rstd;
        dot = dot * dm05;
        double ad = fabs((double)dot);
        double z = copysign(sqrt(ad > 1e-6 ? ad : 1e-6), (double)dot);
        float gate = (float)ds_sigmoid64(z);
        for (int d = 0; d < D; d++) {
            double h = ds_bf16_to_f32(xk[d]);
            xk[d] = ds_f32_to_bf16((float)(h + (double)gate * value[d]));
        }
    }
}

/* The fast tier of gate_task (docs/NUMERICS.md "Fast tier"): the same formula in fp32, every sum
 * in the 32-lane order, the 32×32 rotations as sums over j in index order. */
static void gate_task_fast(void *vctx, int row, int thread) {
    gate_ctx *g = vctx;
    ds_step *st = g->st;
    const ds_model *m = st->m;
    const int D = st->c->dim, HC = st->c->hc_mult;
    const float eps = (float)st->c->norm_eps;
    const float *kvr = g->kv + (size_t)row * (HC + 1) * D;
    const float *value = kvr + (size_t)HC * D;
    float *o = g->o + (size_t)thread * D, *val = NULL;
    if (m->rotate_value) {
        /* value'_b = Bᵀ·value_b: val[i] = Σ_j B[j][i]·value[j], j ascending, vectorized over i */
        val = g->val + (size_t)thread * D;
        for (int b = 0; b < D / 32; b++) {
            float *vb = val + b * 32;
            for (int i = 0; i < 32; i++) vb[i] = 0.0f;
            for (int j = 0; j < 32; j++)
                for (int i = 0; i < 32; i++) vb[i] = vb[i] + m->rot[j * 32 + i] * value[b * 32 + j];
        }
        value = val;
    }
    const float dm05 = 1.0f / sqrtf((float)D);
    for (int k = 0; k < HC; k++) {
        ds_bf16 *xk = st->X + ((size_t)row * HC + k) * D;
        const float *key = kvr + (size_t)k * D;
        if (m->unrotate_gate) {
            for (int b = 0; b < D / 32; b++) ds_frot32_fb(m->rot_t, xk + b * 32, o + b * 32);   /* = ds_fdot_fb(rot + 32·i, x_b, 32) */
        } else {
            for (int d = 0; d < D; d++) o[d] = ds_bf16_to_f32(xk[d]);
        }
        const float sso = ds_fdot_ff(o, o, D), ssk = ds_fdot_ff(key, key, D);
        const float t = ds_fdot3_fff(o, g->ew->wq + (size_t)k * D, key, D);
        const float rstd = (1.0f / sqrtf(sso / (float)D + eps)) * (1.0f / sqrtf(ssk / (float)D + eps));
        const float dot = t * rstd * dm05;
        const float ad = fabsf(dot);
        const float gate = ds_fsigmoid(copysignf(sqrtf(ad > 1e-6f ? ad : 1e-6f), dot));
        for (int d = 0; d < D; d++) xk[d] = ds_f32_to_bf16(ds_bf16_to_f32(xk[d]) + gate * value[d]);
    }
}

void ds_engram_layer(ds_step *st, int e) {
    const ds_model *m = st->m;
    const ds_config *c = st->c;
    const ds_engram_weights *ew = &m->engram[e];
    const ds_engram_consts *ec = &m->ec;
    const int N = st->N, hd = c->engram_head_dim, ncol = ec->n_cols, D = c->dim, HC = c->hc_mult;
    const int ein = ncol * hd;
    ds_arena_mark mk = ds_arena_mark_get(st->arena);
    ds_bf16 *ev = DS_ARENA_NEW(st->arena, ds_bf16, (size_t)N * ein);
    const int threads = ds_pool_threads();
    rows_ctx rc = {st, ew, e, ev, N >= threads ? 1 : DS_MIN(ncol, (threads + N - 1) / N)};
    ds_pool_run(N * rc.parts, rows_task, &rc);
    float *kv = DS_ARENA_NEW(st->arena, float, (size_t)N * (HC + 1) * D);
    ds_linear_forward(&ew->wkv, ev, N, kv);
    for (size_t i = 0; i < (size_t)N * (HC + 1) * D; i++) kv[i] = ds_round_bf16(kv[i]);
    const int T = ds_pool_threads();
    gate_ctx g = {st, ew, kv, DS_ARENA_NEW(st->arena, float, (size_t)T * D), DS_ARENA_NEW(st->arena, float, (size_t)T * D)};
    ds_pool_run(N, m->numerics == DS_NUMERICS_FAST ? gate_task_fast : gate_task, &g);
    ds_arena_release(st->arena, mk);
}
