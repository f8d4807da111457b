/* Request objects shared by the HTTP front end and the engine (see engine.h): creation with a
 * private copy of the prompt and parameters, reference counting, and the timed wait readers use.
 * The effective seed is fixed here, at creation, so a request's random draws never depend on
 * when or beside whom it is scheduled. */
#define _GNU_SOURCE
#include "engine/engine.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_uint_fast64_t g_seed_counter;

ds_req *ds_req_new(const char *id, const int32_t *prompt, int64_t n, const ds_sampling_params *sp) {
    ds_req *r = ds_xcalloc(1, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id ? id : "req");
    r->n_prompt = n;
    r->prompt = ds_xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (n) memcpy(r->prompt, prompt, sizeof(int32_t) * (size_t)n);
    ds_sampling_copy(&r->sp, sp);
    if (sp->has_seed) {
        r->seed = sp->seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r->seed = (int64_t)((uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
                            (atomic_fetch_add(&g_seed_counter, 1) << 32));
    }
    r->want_text = true;
    r->t_arrival = ds_now();
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    ds_kvm_seqtab_init(&r->tab);
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancel, false);
    atomic_init(&r->cancel_shutdown, false);
    return r;
}

void ds_req_ref(ds_req *r) { atomic_fetch_add(&r->refs, 1); }

void ds_req_unref(ds_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    free(r->prompt);
    free(r->tokens);
    free(r->out_ids);
    free(r->out_lp);
    free(r->spec_q);
    free(r->plp);
    free(r->cache_salt);
    ds_tbuf_free(&r->text);
    ds_sampling_free(&r->sp);
    ds_kvm_seqtab_free(&r->tab);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void ds_req_wait_locked(ds_req *r, uint64_t seen, double timeout_s) {
    if (r->version != seen || r->finished) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(timeout_s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    while (r->version == seen && !r->finished)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts)) break;
}

