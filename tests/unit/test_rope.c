/* RoPE tables (MODEL.md §2.5): the YaRN band, the per-pair frequencies against an independent
 * float64 evaluation of the formulas, cos/sin at a position, and the rotation / inverse rotation.
 * The oracle here is the spec's formula evaluated directly in double precision; the C table must
 * agree to fp32 rounding (the contract rounds each step once, so agreement is within a few ulp). */
#include "check.h"
#include "model/rope.h"
#include "io/config.h"
#include <math.h>

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1); }

/* Independent float64 evaluation of f'_i (no intermediate fp32 roundings). */
static double yarn_freq64(int i, int rd, double base, double factor, double orig, double bf, double bs) {
    double f = 1.0 / pow(base, 2.0 * i / rd);
    double cd_f = rd * log(orig / (bf * 2 * M_PI)) / (2 * log(base));
    double cd_s = rd * log(orig / (bs * 2 * M_PI)) / (2 * log(base));
    double lo = fmax(floor(cd_f), 0), hi = fmin(ceil(cd_s), rd - 1);
    double ramp = fmin(fmax((i - lo) / fmax(hi - lo, 0.001), 0), 1);
    double smooth = 1 - ramp;
    return f / factor * (1 - smooth) + f * smooth;
}

TEST(yarn_band_tiny_and_v41) {
    ds_rope_table t;
    CHECK(ds_rope_init(&t, 16, 160000, 16, 65536, 32, 1) == 0);
    CHECK(t.yarn && t.low == 3 && t.high == 7, "tiny band low %d high %d (expected 3, 7)", t.low, t.high);
    CHECK(ds_rope_init(&t, 64, 160000, 16, 65536, 32, 1) == 0);
    CHECK(t.low == 15 && t.high == 25, "V4.1 band low %d high %d (expected 15, 25)", t.low, t.high);
}

TEST(frequencies_match_float64_formula) {
    int rds[2] = {16, 64};
    for (int k = 0; k < 2; k++) {
        int rd = rds[k];
        ds_rope_table cmp, swa;
        CHECK(ds_rope_init(&cmp, rd, 160000, 16, 65536, 32, 1) == 0);
        CHECK(ds_rope_init(&swa, rd, 10000, 16, 0, 32, 1) == 0);
        CHECK(!swa.yarn, "orig length 0 must disable YaRN");
        for (int i = 0; i < rd / 2; i++) {
            double want = yarn_freq64(i, rd, 160000, 16, 65536, 32, 1);
            CHECK(rel(cmp.freq[i], want) < 4e-7, "rd %d pair %d: %.9g vs %.9g", rd, i, cmp.freq[i], want);
            double fs = 1.0 / pow(10000, 2.0 * i / rd);
            CHECK(rel(swa.freq[i], fs) < 2e-7, "swa rd %d pair %d: %.9g vs %.9g", rd, i, swa.freq[i], fs);
        }
        /* outside the band: exactly f (low side) and exactly fp32(f/16) (high side) */
        float f0 = 1.0f / (float)pow(160000, 0.0);
        CHECK(cmp.freq[0] == f0, "pair 0 keeps its frequency");
        int last = rd / 2 - 1;
        float fl = 1.0f / (float)pow(160000, 2.0 * last / rd);
        CHECK(cmp.freq[last] == fl / 16.0f, "last pair divided by the factor exactly");
    }
}

TEST(preset_configs_give_spec_bands) {
    /* the band comes from the config fields alone (MODEL.md §8: tiny low 3 / high 7) */
    ds_config a;
    CHECK(ds_config_preset("tiny", &a) == 0);
    ds_rope_table ta;
    CHECK(ds_rope_init(&ta, a.rope_head_dim, a.compress_rope_theta, a.rope_factor, a.rope_orig_len, a.beta_fast,
                       a.beta_slow) == 0);
    CHECK(ta.low == 3 && ta.high == 7, "tiny preset band %d..%d", ta.low, ta.high);
    CHECK(ds_config_preset("v41-flash", &a) == 0);
    CHECK(ds_rope_init(&ta, a.rope_head_dim, a.compress_rope_theta, a.rope_factor, a.rope_orig_len, a.beta_fast,
                       a.beta_slow) == 0);
    CHECK(ta.low == 15 && ta.high == 25, "V4.1 preset band %d..%d", ta.low, ta.high);
}

TEST(cossin_at_positions) {
    ds_rope_table t;
    ds_rope_init(&t, 64, 160000, 16, 65536, 32, 1);
    int64_t ps[4] = {0, 1, 4097, 1048575};
    float cs[64];
    for (int k = 0; k < 4; k++) {
        ds_rope_cossin(&t, ps[k], cs);
        for (int i = 0; i < 32; i++) {
            float ang = (float)ps[k] * t.freq[i];
            CHECK(cs[2 * i] == (float)cos((double)ang) && cs[2 * i + 1] == (float)sin((double)ang),
                  "p %lld pair %d", (long long)ps[k], i);
            /* and close to the unrounded angle for small positions */
            if (ps[k] < 5000) CHECK(fabs(cs[2 * i] - cos((double)ps[k] * t.freq[i])) < 1e-3);
        }
    }
    ds_rope_cossin(&t, 0, cs);
    for (int i = 0; i < 32; i++) CHECK(cs[2 * i] == 1.0f && cs[2 * i + 1] == 0.0f);
}

TEST(rotation_interleaved_pairs_and_inverse) {
    ds_rope_table t;
    ds_rope_init(&t, 16, 10000, 1, 0, 32, 1);
    ds_bf16 v[64], w[64];
    for (int i = 0; i < 64; i++) v[i] = ds_f32_to_bf16((float)((i * 37) % 17 - 8) / 4.0f);
    memcpy(w, v, sizeof v);
    float cs[16];
    ds_rope_cossin(&t, 5, cs);
    ds_rope_apply(w, 64, 16, cs, 0);
    /* head dims untouched */
    CHECK(!memcmp(w, v, sizeof(ds_bf16) * 48));
    for (int i = 0; i < 8; i++) {
        double a = ds_bf16_to_f32(v[48 + 2 * i]), b = ds_bf16_to_f32(v[48 + 2 * i + 1]);
        double c = cs[2 * i], s = cs[2 * i + 1];
        CHECK(w[48 + 2 * i] == ds_f32_to_bf16((float)(a * c - b * s)), "pair %d a'", i);
        CHECK(w[48 + 2 * i + 1] == ds_f32_to_bf16((float)(a * s + b * c)), "pair %d b'", i);
    }
    ds_rope_apply(w, 64, 16, cs, 1);
    for (int i = 48; i < 64; i++)
        CHECK(fabsf(ds_bf16_to_f32(w[i]) - ds_bf16_to_f32(v[i])) <= 0.02f * (1 + fabsf(ds_bf16_to_f32(v[i]))),
              "inverse restores dim %d: %g vs %g", i, ds_bf16_to_f32(w[i]), ds_bf16_to_f32(v[i]));
}

TEST(rejects_bad_rotary_dims) {
    ds_rope_table t;
    CHECK(ds_rope_init(&t, 15, 10000, 1, 0, 32, 1) < 0);
    CHECK(ds_rope_init(&t, 0, 10000, 1, 0, 32, 1) < 0);
    CHECK(ds_rope_init(&t, 2 * DS_ROPE_MAX_PAIRS + 2, 10000, 1, 0, 32, 1) < 0);
}

RUN_ALL()
