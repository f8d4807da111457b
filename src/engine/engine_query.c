/* The engine seen from other threads: cancellation, prefix-cache reset, gauges, KV audits and
 * waits.
 *
 * Why a file of its own: these calls come from HTTP and CLI threads, never from the engine
 * thread, and each one either flips a flag the engine thread acts on at its next step or reads
 * state under the engine's locks (engine.h states which lock guards what).  Keeping them apart from
 * the step loop in engine.c makes that boundary visible. */
#define _GNU_SOURCE
#include "engine/engine.h"
#include "engine/engine_internal.h"
#include <stdlib.h>
#include <time.h>

void ds_engine_cancel(ds_engine *e, ds_req *r) {
    atomic_store(&r->cancel, true);
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void ds_engine_reset_prefix_cache(ds_engine *e) {
    pthread_mutex_lock(&e->mu);
    uint64_t want = e->reset_done + 1;
    e->reset_pc = true;
    pthread_cond_signal(&e->cv);
    while (e->reset_done < want && !e->stopping) pthread_cond_wait(&e->idle_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}


void ds_engine_gauges(ds_engine *e, ds_metrics_gauges *g) {
    g->spec_enabled = atomic_load(&e->g_spec_enabled);
    g->spec_positions = e->spec_on || g->spec_enabled || e->cfg.spec_tokens > 0 ? e->be->spec_block : 0;
    g->running = atomic_load(&e->g_running);
    g->waiting = atomic_load(&e->g_waiting);
    g->blocks_total = e->km.plan.num_blocks;
    g->blocks_used = atomic_load(&e->g_blocks_used);
    g->blocks_evictable = atomic_load(&e->g_blocks_evictable);
    g->capacity_tokens = e->km.plan.capacity_tokens;
}

const ds_kv_budget *ds_engine_kv_plan(const ds_engine *e) { return &e->km.plan; }

int ds_engine_kv_selftest(ds_engine *e, char *report, size_t len) {
    pthread_mutex_lock(&e->state_mu);
    int rc = ds_kv_pools_selftest(&e->km.pools, report, len);
    pthread_mutex_unlock(&e->state_mu);
    return rc;
}

int ds_engine_wait_idle(ds_engine *e, double timeout_s) {
    double end = ds_now() + timeout_s;
    while (atomic_load(&e->n_live) > 0) {
        if (ds_now() > end) return -1;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    /* the last finish happens inside a step; wait for that step to end */
    pthread_mutex_lock(&e->state_mu);
    pthread_mutex_unlock(&e->state_mu);
    return 0;
}

int ds_engine_audit(ds_engine *e, char *msg, size_t len) {
    pthread_mutex_lock(&e->state_mu);
    int n = e->n_running + e->n_waiting;
    ds_kv_seqtab **tabs = ds_xmalloc(sizeof(ds_kv_seqtab *) * (size_t)(n ? n : 1));
    int k = 0;
    for (int i = 0; i < e->n_running; i++) tabs[k++] = &e->running[i]->tab;
    for (int i = 0; i < e->n_waiting; i++) tabs[k++] = &e->waiting[i]->tab;
    int rc = ds_kvm_audit(&e->km, tabs, k, msg, len);
    free(tabs);
    pthread_mutex_unlock(&e->state_mu);
    return rc;
}

