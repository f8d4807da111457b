/* Per-phase profile of the forward step (see phase_prof.h for why a stack of exclusive times). */
#include "base/phase_prof.h"
#include <string.h>

enum { MAX_DEPTH = 16 };

int ds_prof_enabled;

typedef struct prof_state {
    ds_phase stack[MAX_DEPTH];
    int depth;                 /* entries above the implicit OTHER at the bottom */
    double last;               /* time of the previous event; 0 before the first */
    double sec[DS_PH_COUNT];
} prof_state;

static _Thread_local prof_state g_prof;

static ds_phase top(const prof_state *s) { return s->depth ? s->stack[s->depth - 1] : DS_PH_OTHER; }

/* Charge the time since the previous event to the phase on top. */
static void charge(prof_state *s) {
    double now = ds_now();
    if (s->last > 0) s->sec[top(s)] += now - s->last;
    s->last = now;
}

void ds_prof_push_slow(ds_phase p) {
    prof_state *s = &g_prof;
    charge(s);
    /* deeper nesting than any phase structure needs is a programming error; keep counting it
     * against the deepest phase rather than writing past the stack */
    if (s->depth < MAX_DEPTH) s->stack[s->depth++] = p;
}

void ds_prof_pop_slow(void) {
    prof_state *s = &g_prof;
    charge(s);
    if (s->depth > 0) s->depth--;
}

void ds_prof_enable(int on) { ds_prof_enabled = on; }

ds_phase ds_prof_current(void) { return ds_prof_enabled ? top(&g_prof) : DS_PH_OTHER; }

void ds_prof_take(double *sec) {
    prof_state *s = &g_prof;
    charge(s);
    memcpy(sec, s->sec, sizeof s->sec);
    memset(s->sec, 0, sizeof s->sec);
}

const char *ds_phase_name(ds_phase p) {
    static const char *const names[DS_PH_COUNT] = {
        /* named by role, not by dtype: the two releases store these linears differently (W8A8 /
         * BF16 / F32 in the W4A8 release, FP8 / FP8 / BF16 in the official one) */
        "other (set-up, engine)", "attn linears wq_a/wq_b/wkv", "attn norms+rope", "compressor", "indexer",
        "attn core", "attn out wo_a/wo_b", "moe gate+route", "moe experts", "moe sum",
        "mHC mixes+sinkhorn", "engram", "head (norm+linear)"};
    return (unsigned)p < DS_PH_COUNT ? names[p] : "?";
}
