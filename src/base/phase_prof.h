/* A per-phase wall-clock profile of the forward step, off by default.
 *
 * Why exclusive time on a stack: a step's phases nest (a float linear inside the attention site
 * inside the step), and a profile that adds inclusive times double-counts.  Each push charges the
 * time since the previous event to the phase on top of the stack, then makes the new phase the
 * top; a pop charges the top and returns to the one below.  The phases then add up to the wall
 * time of the profiled region exactly, with "other" (the bottom of the stack) holding whatever no
 * phase claimed (step set-up, bookkeeping, the engine's own work).
 *
 * Cost when off: one load and branch per push/pop.  The state is per thread: only the thread that
 * drives the step (the one calling ds_batch_step) records; a pool worker that happens to run a
 * nested forward records into its own, unread, state. */
#ifndef DS_BASE_PHASE_PROF_H
#define DS_BASE_PHASE_PROF_H
#include "base/common.h"

typedef enum {
    DS_PH_OTHER = 0,     /* step set-up, embeddings, bookkeeping: what no phase below claims */
    DS_PH_ATTN_QLIN,     /* attention projections wq_a, wkv, wq_b (W8A8 or FP8) */
    DS_PH_ATTN_NORM,     /* q/kv norms and RoPE */
    DS_PH_COMPRESSOR,    /* compressor of FULL layers (its linears included) */
    DS_PH_INDEXER,       /* indexer scoring and selection (its linears included) */
    DS_PH_ATTN_CORE,     /* per-row/head attention over the row's keys, window persistence */
    DS_PH_ATTN_OUT,      /* wo_a, wo_b (BF16 or FP8) */
    DS_PH_MOE_GATE,      /* router linear, scores, top-k, grouping */
    DS_PH_MOE_EXPERTS,   /* routed + shared expert linears and SwiGLU */
    DS_PH_MOE_SUM,       /* per-row weighted sum of expert outputs */
    DS_PH_MHC,           /* hyper-connection mixes, Sinkhorn, collapse/expand, site norms */
    DS_PH_ENGRAM,        /* Engram layers */
    DS_PH_HEAD,          /* final collapse, norm and the head linear */
    DS_PH_COUNT
} ds_phase;

extern int ds_prof_enabled;

void ds_prof_push_slow(ds_phase p);
void ds_prof_pop_slow(void);
static inline void ds_prof_push(ds_phase p) { if (ds_prof_enabled) ds_prof_push_slow(p); }
static inline void ds_prof_pop(void) { if (ds_prof_enabled) ds_prof_pop_slow(); }

/* Enable or disable recording (process-wide switch; call while no step runs). */
void ds_prof_enable(int on);
/* This thread's accumulated seconds per phase (including the open stack's time up to now) into
 * `sec` [DS_PH_COUNT], then zero them: a call right before and one right after a step bracket
 * exactly that step. */
void ds_prof_take(double *sec);
const char *ds_phase_name(ds_phase p);
/* The phase this thread is in now (OTHER when recording is off or no phase is open): lets a
 * benchmark file what it observes (a kernel call) under the phase that made it. */
ds_phase ds_prof_current(void);

#endif
