/* Quantizers and QuaRot fold helpers (TOOLS.md §3.3–§3.4, MODEL.md §3).
 *
 * Oracles: hand-computed codes at every rounding tie (PITFALLS.md 16), the defining property of
 * the Engram exponent checked by a plain search over powers of two at exact powers and their
 * neighbours (PITFALLS.md 17), a straightforward non-vectorized re-implementation of the ssz search
 * written from TOOLS.md §3.3, the engine's own int4 unpacker (kernels.h) for the packing, and a
 * direct float64 matrix product by the stored block for the folds.  The whole-tensor comparison
 * against an independent NumPy implementation lives in tests/quantize/. */
#include "check.h"
#include "kernels/kernels.h"
#include "tools/quant.h"
#include "tools/quant_fp8.h"
#include "tools/quant_rotation.h"
#include <math.h>
#include <stdint.h>

static uint64_t rng_state = 0x1234567;
static double urand(void) { /* [0,1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

TEST(w8_known_codes_and_ties) {
    /* m = 127 -> s = 1: codes are rne(w); -63.5 -> -64, 0.5 -> 0, 1.5 -> 2, -2.5 -> -2 (ties to even) */
    const float w[] = {127.0f, -63.5f, 0.5f, 1.5f, -2.5f, 0.0f, 3.5f, -0.5f};
    const int8_t want[] = {127, -64, 0, 2, -2, 0, 4, 0};
    int8_t q[8];
    float s = 0;
    ds_quant_w8_row(w, 8, q, &s);
    CHECK(s == 1.0f, "scale %g", (double)s);
    for (int i = 0; i < 8; i++) CHECK(q[i] == want[i], "i=%d code %d want %d", i, q[i], want[i]);
    /* m = 2.54: s = fp32(2.54f/127) and the max maps to +-127 */
    const float w2[] = {2.54f, -2.54f, 1.27f};
    ds_quant_w8_row(w2, 3, q, &s);
    CHECK(s == 2.54f / 127.0f, "scale %.9g", (double)s);
    CHECK(q[0] == 127 && q[1] == -127 && q[2] == (int8_t)rintf(1.27f / s), "codes %d %d %d", q[0], q[1], q[2]);
    const float z[4] = {0};
    ds_quant_w8_row(z, 4, q, &s);
    CHECK(s == 1.0f && q[0] == 0 && q[3] == 0, "zero row: scale %g", (double)s);
}

TEST(w4_minmax_codes_ties_and_clamp) {
    /* m = 7 -> s = 1 with the r = 1 search: 3.5 -> 4, -3.5 -> -4, 2.5 -> 2, 0.5 -> 0, -6.5 -> -6 */
    const float w[] = {7.0f, 3.5f, -3.5f, 2.5f, 0.5f, -6.5f, -7.0f, 1.5f};
    const int8_t want[] = {7, 4, -4, 2, 0, -6, -7, 2};
    int8_t q[8];
    float s;
    int k = ds_quant_w4_row(w, 8, 1, q, &s);
    CHECK(k == 0 && s == 1.0f, "k=%d s=%g", k, (double)s);
    for (int i = 0; i < 8; i++) CHECK(q[i] == want[i], "i=%d code %d want %d", i, q[i], want[i]);
    float z[3] = {0, 0, 0};
    k = ds_quant_w4_row(z, 3, 10, q, &s);
    CHECK(k == 0 && s == 1.0f && !q[0] && !q[1] && !q[2], "zero row");
}

/* TOOLS.md §3.3 written out plainly (no vectorization, no clamping shortcuts). */
static int ref_w4(const float *w, int n, int steps, int8_t *q, float *scale) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(w[i]));
    if (m == 0) { for (int i = 0; i < n; i++) q[i] = 0; *scale = 1; return 0; }
    int best = -1;
    double be = 0;
    float bs = 0;
    for (int k = 0; k < steps; k++) {
        float s = (float)((1.0 - 0.05 * k) * (double)m / 7.0);
        double e = 0;
        for (int i = 0; i < n; i++) {
            double c = rint((double)(w[i] / s));
            if (c < -8) c = -8;
            if (c > 7) c = 7;
            double d = (double)w[i] - (double)s * c;
            e += d * d;
        }
        if (best < 0 || e < be) { best = k; be = e; bs = s; }
    }
    for (int i = 0; i < n; i++) {
        double c = rint((double)(w[i] / bs));
        q[i] = (int8_t)(c < -8 ? -8 : c > 7 ? 7 : c);
    }
    *scale = bs;
    return best;
}

TEST(w4_ssz_matches_plain_reference) {
    enum { N = 257 };
    float w[N];
    int8_t q[N], rq[N];
    int picked[20] = {0};
    for (int trial = 0; trial < 300; trial++) {
        double spread = 0.5 + 3.0 * urand();
        for (int i = 0; i < N; i++) w[i] = (float)((urand() - 0.5) * spread);
        if (trial % 3 == 0) w[trial % N] = (float)(6.0 * spread); /* an outlier: clipping should win */
        float s, rs;
        int k = ds_quant_w4_row(w, N, 10, q, &s);
        int rk = ref_w4(w, N, 10, rq, &rs);
        picked[k]++;
        CHECK(k == rk && s == rs, "trial %d: k %d vs %d, s %.9g vs %.9g", trial, k, rk, (double)s, (double)rs);
        int diff = 0;
        for (int i = 0; i < N; i++) diff += q[i] != rq[i];
        CHECK(diff == 0, "trial %d: %d codes differ", trial, diff);
        for (int i = 0; i < N; i++) CHECK(q[i] >= -8 && q[i] <= 7, "code range");
    }
    int interior = 0;
    for (int k = 1; k < 10; k++) interior += picked[k];
    CHECK(interior > 0 && picked[0] > 0, "the search exercised both r = 1 (%d) and clipped ratios (%d)", picked[0], interior);
}

TEST(w4_pack_nibble_order_matches_engine_unpacker) {
    const int8_t even[3] = {-8, 7, -1}, odd[3] = {1, -2, 0};
    int8_t p[3];
    ds_quant_w4_pack(even, odd, 3, p);
    CHECK((uint8_t)p[0] == 0x18 && (uint8_t)p[1] == 0xE7 && (uint8_t)p[2] == 0x0F, "bytes %02x %02x %02x",
          (uint8_t)p[0], (uint8_t)p[1], (uint8_t)p[2]);
    for (int i = 0; i < 3; i++) {
        CHECK(ds_w4_code(p, 3, 0, i) == even[i], "even row col %d", i);
        CHECK(ds_w4_code(p, 3, 1, i) == odd[i], "odd row col %d", i);
    }
    ds_quant_w4_pack(even, NULL, 3, p); /* odd `out`: zero padding row */
    CHECK(((uint8_t)p[0] >> 4) == 0 && ((uint8_t)p[1] >> 4) == 0 && ds_w4_code(p, 3, 0, 1) == 7, "padding");
}

TEST(scale_bias_sums) {
    int8_t q[32];
    for (int i = 0; i < 32; i++) q[i] = (int8_t)((i % 16) - 8);
    float sb[16];
    ds_quant_scale_bias(q, 32, 0.5f, 16, sb);
    for (int c = 0; c < 16; c++) {
        float want = 4.0f * (float)(q[2 * c] + q[2 * c + 1]);
        CHECK(sb[c] == want, "chunk %d: %g want %g", c, (double)sb[c], (double)want);
    }
    ds_quant_scale_bias(q, 32, 0.25f, 1, sb);
    int sum = 0;
    for (int i = 0; i < 32; i++) sum += q[i];
    CHECK(sb[0] == 2.0f * (float)sum, "single chunk %g", (double)sb[0]);
}

/* smallest e with 2^e >= a/127, by search (exact in double) */
static int ref_exp(float a) {
    double t = (double)a / 127.0;
    int e = -160;
    while (ldexp(1.0, e) < t) e++;
    return e;
}

TEST(engram_exponent_at_powers_of_two_and_neighbours) {
    int checked = 0;
    for (int k = -40; k <= 40; k++) {
        float p = ldexpf(127.0f, k); /* a/127 exactly 2^k */
        float cand[3] = {p, nextafterf(p, 0.0f), nextafterf(p, INFINITY)};
        for (int c = 0; c < 3; c++) {
            int e = ds_engram_exponent(cand[c]), r = ref_exp(cand[c]);
            CHECK(e == r, "a=%.9g: exponent %d, expected %d", (double)cand[c], e, r);
            checked++;
        }
        CHECK(ds_engram_exponent(p) == k, "exact power: k=%d", k);
        CHECK(ds_engram_exponent(nextafterf(p, INFINITY)) == k + 1, "just above: k=%d", k);
    }
    for (int i = 0; i < 2000; i++) {
        float a = (float)ldexp(urand() + 1e-3, (int)(urand() * 60) - 30);
        CHECK(ds_engram_exponent(a) == ref_exp(a), "a=%.9g", (double)a);
    }
    CHECK(checked == 243, "cases %d", checked);
}

TEST(engram_row_codes_scales_and_zero_groups) {
    float x[64];
    for (int i = 0; i < 32; i++) x[i] = 0.0f;                              /* all-zero group */
    for (int i = 0; i < 32; i++) x[32 + i] = (float)(i - 16) * 0.25f;      /* max 4 -> 2^-4 (4/127 <= 0.0625) */
    x[33] = 0.0625f * 2.5f;                                                /* exact ties: 2.5 -> 2, */
    x[34] = -0.0625f * 3.5f;                                               /* -3.5 -> -4 */
    int8_t c[64];
    float s[2];
    CHECK(ds_quant_engram_row(x, 64, c, s) == 0, "row");
    CHECK(s[0] == 1.0f, "zero group scale %g", (double)s[0]);
    for (int i = 0; i < 32; i++) CHECK(c[i] == 0, "zero group code");
    CHECK(s[1] == 0.0625f, "scale %g", (double)s[1]);
    for (int i = 0; i < 32; i++) {
        double want = rint((double)x[32 + i] / 0.0625);
        CHECK(c[32 + i] == (int8_t)want, "i=%d code %d want %g", i, c[32 + i], want);
        CHECK(c[32 + i] >= -127 && c[32 + i] <= 127, "range");
    }
    CHECK(c[33] == 2 && c[34] == -4, "ties: 2.5 -> %d (want 2), -3.5 -> %d (want -4)", c[33], c[34]);
}

TEST(rotation_fold_matches_direct_product) {
    int8_t sign[32];
    for (int i = 0; i < 32; i++) sign[i] = urand() < 0.5 ? -1 : 1;
    ds_rot32 r;
    ds_rot32_hadamard(&r, sign);
    double worst = 0;
    for (int a = 0; a < 32; a++)
        for (int b = 0; b < 32; b++) {
            double s = 0;
            for (int k = 0; k < 32; k++) s += (double)r.B[k * 32 + a] * r.B[k * 32 + b];
            worst = fmax(worst, fabs(s - (a == b)));
        }
    CHECK(worst < 1e-6, "B^T B - I: %g", worst);
    enum { N = 96 };
    float row[N], out[N];
    for (int i = 0; i < N; i++) row[i] = (float)(urand() * 2 - 1);
    ds_rot32_fold_row(&r, row, out, N);
    int ulps = 0;
    for (int b = 0; b < N; b += 32)
        for (int i = 0; i < 32; i++) {
            double s = 0;
            for (int j = 0; j < 32; j++) s += (double)row[b + j] * r.B[j * 32 + i];
            float want = (float)s;
            CHECK(fabsf(out[b + i] - want) <= 2.0f * fabsf(nextafterf(want, INFINITY) - want), "right fold [%d]: %.9g vs %.9g",
                  b + i, (double)out[b + i], (double)want);
            ulps += out[b + i] != want;
        }
    CHECK(ulps <= N / 8, "%d of %d values differ in the last bit from the direct product", ulps, N);
    /* left fold of a 32-row block: rows' = B^T rows */
    float blk[32 * 3], ref[32 * 3];
    for (int i = 0; i < 96; i++) blk[i] = ref[i] = (float)(urand() * 2 - 1);
    ds_rot32_fold_rows32(&r, blk, 3);
    for (int i = 0; i < 32; i++)
        for (int c = 0; c < 3; c++) {
            double s = 0;
            for (int j = 0; j < 32; j++) s += (double)r.B[j * 32 + i] * ref[j * 3 + c];
            CHECK(fabs((double)blk[i * 3 + c] - s) <= 1e-6 * fmax(1.0, fabs(s)), "left fold [%d][%d]", i, c);
        }
    /* identity block: exact copies */
    ds_rot32 id;
    ds_rot32_identity(&id);
    ds_rot32_fold_row(&id, row, out, N);
    CHECK(!memcmp(row, out, sizeof row), "identity fold is a copy");
}

TEST(global_rotation_roundtrip_and_checks) {
    int8_t sign[32];
    for (int i = 0; i < 32; i++) sign[i] = (i * 7) % 3 ? 1 : -1;
    ds_rot32 r, back;
    ds_rot32_hadamard(&r, sign);
    enum { D = 96 };
    static float g[D * D];
    ds_rot32_global(&r, D, g);
    ds_error err = {0};
    CHECK(ds_rot32_from_global(g, D, &back, "t", &err) == 0, "%s", err.msg);
    CHECK(!memcmp(back.B, r.B, sizeof r.B) && !back.identity, "block recovered");
    g[5 * D + 40] = 1e-3f; /* off-diagonal element */
    CHECK(ds_rot32_from_global(g, D, &back, "t", &err) != 0 && !strcmp(err.code, "E_QUAROT_NOT_BLOCK_DIAGONAL"), "code %s", err.code);
    ds_rot32_global(&r, D, g);
    g[40 * D + 33] += 1e-3f; /* second diagonal block differs from the first */
    CHECK(ds_rot32_from_global(g, D, &back, "t", &err) != 0 && !strcmp(err.code, "E_QUAROT_NOT_BLOCK_DIAGONAL"), "code %s", err.code);
    for (int i = 0; i < 32; i++) r.B[i] *= 1.01f; /* scale row 0: no longer orthogonal */
    ds_rot32_global(&r, D, g);
    CHECK(ds_rot32_from_global(g, D, &back, "t", &err) != 0 && !strcmp(err.code, "E_QUAROT_NOT_ORTHOGONAL"), "code %s", err.code);
    ds_rot32 id;
    ds_rot32_identity(&id);
    ds_rot32_global(&id, D, g);
    CHECK(ds_rot32_from_global(g, D, &back, "t", &err) == 0 && back.identity, "identity detected");
}

TEST(reconstruction_error) {
    const float w[4] = {1.0f, -1.0f, 0.5f, 0.0f};
    const int8_t q[4] = {2, -2, 1, 0};
    ds_qerr e = {0};
    ds_qerr_add_row(&e, w, q, 4, 0.4f);
    double want_err = pow(1.0 - 0.8, 2) * 2 + pow(0.5 - 0.4, 2);
    CHECK(fabs(e.err2 - want_err) < 1e-7 && e.ref2 == 2.25, "err2 %g ref2 %g", e.err2, e.ref2);
    CHECK(fabs(ds_qerr_rel_rmse(&e) - sqrt(want_err / 2.25)) < 1e-7, "rel_rmse");
    float bad[2] = {1.0f, NAN};
    CHECK(!ds_all_finite(bad, 2) && ds_all_finite(w, 4), "finite check");
}

TEST(fp8_mxfp4_decoding) {
    /* E4M3 (CHECKPOINT.md §14): known codes, and every finite code round-trips through its value */
    CHECK(ds_e4m3_to_f32(0x7E) == 448.0f && ds_e4m3_to_f32(0x38) == 1.0f && ds_e4m3_to_f32(0xB8) == -1.0f, "E4M3 448/1/-1");
    CHECK(ds_e4m3_to_f32(0x01) == ldexpf(1, -9) && ds_e4m3_to_f32(0x08) == ldexpf(1, -6) && ds_e4m3_to_f32(0x07) == 7 * ldexpf(1, -9),
          "E4M3 subnormals");
    CHECK(isnan(ds_e4m3_to_f32(0x7F)) && isnan(ds_e4m3_to_f32(0xFF)) && ds_e4m3_to_f32(0x80) == 0.0f, "E4M3 NaN and -0");
    float prev = -1;
    int mono = 1;
    for (int b = 0; b < 0x7F; b++) { mono &= ds_e4m3_to_f32((uint8_t)b) > prev; prev = ds_e4m3_to_f32((uint8_t)b); }
    CHECK(mono, "E4M3 positive codes increase");
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int n = 0; n < 16; n++) CHECK(ds_e2m1_to_f32((uint8_t)n) == e2m1[n], "E2M1 code %d", n);
    CHECK(ds_e8m0_to_f32(127) == 1.0f && ds_e8m0_to_f32(130) == 8.0f && ds_e8m0_to_f32(0) == ldexpf(1, -127) && isnan(ds_e8m0_to_f32(255)),
          "E8M0");
    /* MXFP4: low nibble = even input; one scale per 32 inputs of the row */
    uint8_t w[2 * 32], s[2 * 2];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 32; c++) w[r * 32 + c] = (uint8_t)(((c % 8) & 0xF) | (((c + r) % 16) << 4));
    s[0] = 127; s[1] = 128; s[2] = 126; s[3] = 127;
    float out[2 * 64];
    ds_error err = {0};
    CHECK(ds_fp8_decode_rows(DS_FP8_MXFP4, w, s, 64, 2, 0, 2, out, "t", &err) == 0, "%s", err.msg);
    int bad = 0;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 64; c++) {
            uint8_t byte = w[r * 32 + c / 2];
            float want = e2m1[(c & 1) ? byte >> 4 : byte & 0xF] * ldexpf(1, s[r * 2 + c / 32] - 127);
            bad += out[r * 64 + c] != want;
        }
    CHECK(bad == 0, "MXFP4 decode: %d values differ", bad);
    /* tiles: scale [ceil(out/32), ceil(in/32)] indexed by (row/32, col/32) */
    static uint8_t tw[40 * 40], ts[2 * 2];
    for (int i = 0; i < 40 * 40; i++) tw[i] = 0x38; /* 1.0 */
    ts[0] = 127; ts[1] = 128; ts[2] = 129; ts[3] = 130;
    static float tout[40 * 40];
    CHECK(ds_fp8_decode_rows(DS_FP8_TILE, tw, ts, 40, 2, 0, 40, tout, "t", &err) == 0, "tile decode");
    CHECK(tout[0] == 1 && tout[35] == 2 && tout[33 * 40] == 4 && tout[39 * 40 + 39] == 8, "tile scales %g %g %g %g", (double)tout[0],
          (double)tout[35], (double)tout[33 * 40], (double)tout[39 * 40 + 39]);
    tw[5 * 40 + 7] = 0x7F;
    CHECK(ds_fp8_decode_rows(DS_FP8_TILE, tw, ts, 40, 2, 0, 40, tout, "x.weight", &err) != 0 && !strcmp(err.code, "E_SRC_NONFINITE"),
          "NaN code refused");
    CHECK_STR_CONTAINS(err.msg, "row 5 column 7");
}

RUN_ALL()
