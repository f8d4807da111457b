/* The linears' floor of a benchmarked step (see bench_floor.h for why per call). */
#include "cli/bench_floor.h"
#include "base/common.h"
#include <stdlib.h>
#include <string.h>

bs_tally *bs_tally_new(void) {
    bs_tally *t = ds_xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

void bs_tally_free(bs_tally *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static size_t kind_hash(int cls, int phase, uint64_t bytes, uint64_t macs) {
    uint64_t h = (bytes * 0x9E3779B97F4A7C15ull) ^ (macs + 0xBF58476D1CE4E5B9ull + ((uint64_t)cls << 56) + ((uint64_t)phase << 48));
    h ^= h >> 29;
    h *= 0x94D049BB133111EBull;
    return (size_t)(h >> 32) & (BS_KINDS_MAX - 1);
}

void bs_tally_observe(void *tally, ds_mac_class cls, uint64_t bytes, uint64_t macs) {
    bs_tally *t = tally;
    pthread_mutex_lock(&t->mu);
    const int phase = (int)ds_prof_current();
    t->calls++;
    size_t i = kind_hash((int)cls, phase, bytes, macs);
    for (int probes = 0; probes < BS_KINDS_MAX; probes++, i = (i + 1) & (BS_KINDS_MAX - 1)) {
        bs_call_kind *k = &t->k[i];
        if (k->calls && (k->cls != (int)cls || k->phase != phase || k->bytes != bytes || k->macs != macs)) continue;
        if (!k->calls) {
            if (t->n == BS_KINDS_MAX - 1) break;   /* keep one slot free: lookups always end */
            *k = (bs_call_kind){.bytes = bytes, .macs = macs, .cls = (int)cls, .phase = phase};
            t->n++;
        }
        k->calls++;
        pthread_mutex_unlock(&t->mu);
        return;
    }
    t->lost++;
    pthread_mutex_unlock(&t->mu);
}

double bs_tally_floor(const bs_tally *t, double read_bw, const double peak_gops[DS_MAC_CLASSES], double *compute_s) {
    return bs_tally_floor_phases(t, read_bw, peak_gops, compute_s, NULL);
}

double bs_tally_floor_phases(const bs_tally *t, double read_bw, const double peak_gops[DS_MAC_CLASSES], double *compute_s,
                             double *per_phase) {
    double total = 0, compute = 0;
    if (compute_s) *compute_s = 0;
    if (per_phase) memset(per_phase, 0, sizeof(double) * DS_PH_COUNT);
    if (!t || t->lost || read_bw <= 0) return -1;
    for (size_t i = 0; i < BS_KINDS_MAX; i++) {
        const bs_call_kind *k = &t->k[i];
        if (!k->calls) continue;
        const double peak = k->cls >= 0 && k->cls < DS_MAC_CLASSES ? peak_gops[k->cls] : 0;
        if (!(peak > 0)) return -1;
        const double mem = (double)k->bytes / (read_bw * 1e9), ops = 2.0 * (double)k->macs / (peak * 1e9);
        total += (double)k->calls * (mem > ops ? mem : ops);
        if (per_phase && k->phase >= 0 && k->phase < DS_PH_COUNT) per_phase[k->phase] += (double)k->calls * (mem > ops ? mem : ops);
        if (ops > mem) compute += (double)k->calls * ops;
    }
    if (compute_s) *compute_s = compute;
    return total;
}

const char *bs_mac_class_name(int cls) {
    static const char *names[DS_MAC_CLASSES] = {"int8", "f32", "bf16", "f64"};
    return cls >= 0 && cls < DS_MAC_CLASSES ? names[cls] : "?";
}
