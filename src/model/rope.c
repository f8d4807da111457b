/* RoPE tables and rotation (see rope.h for the rounding rules and why frequencies are tabled). */
#include "model/rope.h"
#include <math.h>

int ds_rope_init(ds_rope_table *t, int rd, double base, double yarn_factor, int64_t yarn_orig_len,
                 double beta_fast, double beta_slow) {
    if (rd <= 0 || rd % 2 || rd / 2 > DS_ROPE_MAX_PAIRS) return -1;
    t->rd = rd;
    t->yarn = yarn_orig_len > 0;
    t->low = t->high = 0;
    const int np = rd / 2;
    float f[DS_ROPE_MAX_PAIRS];
    for (int i = 0; i < np; i++) {
        float pw = (float)pow(base, (double)(2 * i) / (double)rd);
        f[i] = 1.0f / pw;                                    /* fp32 reciprocal */
    }
    if (!t->yarn) {
        for (int i = 0; i < np; i++) t->freq[i] = f[i];
        return 0;
    }
    /* YaRN correction band, float64 (MODEL.md §2.5). */
    const double two_pi = 2.0 * M_PI;
    double cd_fast = rd * log((double)yarn_orig_len / (beta_fast * two_pi)) / (2.0 * log(base));
    double cd_slow = rd * log((double)yarn_orig_len / (beta_slow * two_pi)) / (2.0 * log(base));
    double low = floor(cd_fast), high = ceil(cd_slow);
    if (low < 0) low = 0;
    if (high > rd - 1) high = rd - 1;
    t->low = (int)low;
    t->high = (int)high;
    double span = high - low;
    if (span < 0.001) span = 0.001;
    const float factor = (float)yarn_factor;
    for (int i = 0; i < np; i++) {
        double r = ((double)i - low) / span;
        if (r < 0) r = 0;
        if (r > 1) r = 1;
        float ramp = (float)r;
        float smooth = 1.0f - ramp;
        float one_minus_smooth = 1.0f - smooth;
        float scaled = f[i] / factor;
        float a = scaled * one_minus_smooth;
        float b = f[i] * smooth;
        t->freq[i] = a + b;
    }
    return 0;
}

void ds_rope_cossin(const ds_rope_table *t, int64_t p, float *cs) {
    const float fp = (float)p;
    for (int i = 0; i < t->rd / 2; i++) {
        float angle = fp * t->freq[i];
        cs[2 * i] = (float)cos((double)angle);
        cs[2 * i + 1] = (float)sin((double)angle);
    }
}

void ds_rope_apply(ds_bf16 *v, int len, int rd, const float *cs, int inverse) {
    ds_bf16 *tail = v + (len - rd);
    for (int i = 0; i < rd / 2; i++) {
        double a = ds_bf16_to_f32(tail[2 * i]), b = ds_bf16_to_f32(tail[2 * i + 1]);
        double c = cs[2 * i], s = cs[2 * i + 1];
        float na, nb;
        if (!inverse) {
            na = (float)(a * c - b * s);
            nb = (float)(a * s + b * c);
        } else {
            na = (float)(a * c + b * s);
            nb = (float)(-a * s + b * c);
        }
        tail[2 * i] = ds_f32_to_bf16(na);
        tail[2 * i + 1] = ds_f32_to_bf16(nb);
    }
}
