/* Rotary position tables (MODEL.md §2.5).
 *
 * Why tables of frequencies and not of cos/sin: positions reach 2^20 and a step only touches a few of
 * them, so we keep the r_d/2 per-pair frequencies of each table (SWA and CMP) and evaluate cos/sin
 * for the positions a step needs.  Every rounding follows docs/NUMERICS.md ("RoPE tables", "rotary
 * apply"): pw = fp32(pow(base, 2i/r_d)) in float64, f = 1/pw as an fp32 division, the YaRN blend as
 * fp32 operations, angle = fp32(fp32(p)·f'), cos/sin evaluated in float64 and rounded once.  The
 * frequencies depend only on the config, never on the runtime context limit. */
#ifndef DS_MODEL_ROPE_H
#define DS_MODEL_ROPE_H
#include <stdint.h>
#include "base/bf16.h"

#define DS_ROPE_MAX_PAIRS 64     /* r_d / 2 upper bound (V4.1-Flash: 32) */

typedef struct ds_rope_table {
    int rd;                          /* rotary dims r_d (even) */
    int yarn;                        /* YaRN blend applied */
    int low, high;                   /* YaRN band (only meaningful when yarn) */
    float freq[DS_ROPE_MAX_PAIRS];   /* [rd/2] f'_i, fp32 */
} ds_rope_table;

/* Build a table.  yarn_orig_len <= 0 disables YaRN (the SWA table always passes 0).
 * Returns -1 if rd is odd, not positive or above 2·DS_ROPE_MAX_PAIRS. */
int ds_rope_init(ds_rope_table *t, int rd, double base, double yarn_factor, int64_t yarn_orig_len,
                 double beta_fast, double beta_slow);

/* cos/sin of every pair at position p: cs[2i] = cos, cs[2i+1] = sin (fp32), length rd. */
void ds_rope_cossin(const ds_rope_table *t, int64_t p, float *cs);

/* Rotate the last rd entries of a bf16 vector of length len by +angle (inverse = 0) or -angle
 * (inverse = 1), using cos/sin from ds_rope_cossin.  Pairs are interleaved (v[o+2i], v[o+2i+1]).
 * Math in float64 with one fp32 rounding, stored as bf16 (NUMERICS "rotary apply"). */
void ds_rope_apply(ds_bf16 *v, int len, int rd, const float *cs, int inverse);

#endif
