/* Start-up policy: the memory plan and the sampler mask (see engine_setup.h for why). */
#include "engine/engine_setup.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t ds_model_weights_mapped(const ds_model *m) {
    uint64_t sum = 0;
    for (int i = 0; m && m->ckpt && i < m->ckpt->n_files; i++) sum += m->ckpt->files[i]->file_size;
    return m && sum > m->uncounted_bytes ? sum - m->uncounted_bytes : sum;
}

uint64_t ds_model_weights_packed(const ds_model *m) { return m ? (uint64_t)m->packed_bytes : 0; }

static uint64_t sub_or_zero(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

int ds_mem_plan_compute(const ds_mem_inputs *in, ds_mem_plan *p, ds_error *err) {
    memset(p, 0, sizeof *p);
    const char *path = getenv("DSFLASH_MEMINFO");
    snprintf(p->meminfo, sizeof p->meminfo, "%s", path && *path ? path : "/proc/meminfo");
    if (ds_meminfo_read(p->meminfo, &p->mem_total, &p->mem_available, err)) return -1;
    if (in->nodes && in->node_mem_total) {
        p->mem_total = in->node_mem_total;
        p->mem_available = DS_MIN(p->mem_available, in->node_mem_free);
        size_t k = strlen(p->meminfo);
        snprintf(p->meminfo + k, sizeof p->meminfo - k, " and NUMA nodes %s", in->nodes);
    }
    p->weights_mapped = in->weights_mapped;
    p->weights_packed = in->weights_packed;
    double rows = (double)DS_MAX(in->max_num_batched_tokens, in->max_num_seqs);
    p->activations = (uint64_t)(1.5 * rows * ((double)in->vocab * 4.0 + 64.0 * (double)in->dim * 4.0));
    p->misc = 2ull << 30;
    uint64_t share = (uint64_t)(in->utilization * (double)p->mem_total);
    uint64_t fixed = p->activations + p->misc;
    p->from_share = sub_or_zero(share, p->weights_mapped + p->weights_packed + fixed);
    p->from_available = sub_or_zero(p->mem_available, p->weights_mapped + fixed);
    if (in->kv_explicit) {
        p->kv_explicit = true;
        p->kv_bytes = in->kv_explicit;
        p->explicit_exceeds_available = in->kv_explicit > p->from_available;
        return 0;
    }
    p->kv_bytes = DS_MIN(p->from_share, p->from_available);
    if (p->kv_bytes == 0)
        return ds_fail(err, "E_KV_BUDGET",
                       "no memory left for the KV cache: min(%.2f x MemTotal %llu B, MemAvailable %llu B) (%s) is not above "
                       "weights %llu B mapped + %llu B repacked, activations %llu B and misc %llu B; free memory or pass "
                       "--kv-cache-memory",
                       in->utilization, (unsigned long long)p->mem_total, (unsigned long long)p->mem_available, p->meminfo,
                       (unsigned long long)p->weights_mapped, (unsigned long long)p->weights_packed,
                       (unsigned long long)p->activations, (unsigned long long)p->misc);
    return 0;
}

void ds_mem_plan_line(const ds_mem_plan *p, const char *residency, char *buf, size_t n) {
    int k = snprintf(buf, n, "weights %llu B mapped (%s) + %llu B repacked, activation reservation %llu B (estimate x1.5), "
                             "misc %llu B; ",
                     (unsigned long long)p->weights_mapped, residency, (unsigned long long)p->weights_packed,
                     (unsigned long long)p->activations, (unsigned long long)p->misc);
    if (k < 0 || (size_t)k >= n) return;
    if (p->kv_explicit)
        snprintf(buf + k, n - (size_t)k, "KV budget %llu B (--kv-cache-memory%s; MemAvailable %llu B in %s)",
                 (unsigned long long)p->kv_bytes,
                 p->explicit_exceeds_available ? ", WARN: more than the memory available now after weights and reservations"
                                               : "",
                 (unsigned long long)p->mem_available, p->meminfo);
    else
        snprintf(buf + k, n - (size_t)k,
                 "KV budget %llu B = min(share of MemTotal %llu B: %llu B, MemAvailable %llu B: %llu B) after weights and "
                 "reservations (%s)",
                 (unsigned long long)p->kv_bytes, (unsigned long long)p->mem_total, (unsigned long long)p->from_share,
                 (unsigned long long)p->mem_available, (unsigned long long)p->from_available, p->meminfo);
}

const char *const ds_control_tokens[] = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
                                         "<｜Assistant｜>", "<｜System｜>", "<think>", "</think>", "｜DSML｜",
                                         "<｜latest_reminder｜>"};
const int ds_n_control_tokens = (int)DS_ARRAY_LEN(ds_control_tokens);

void ds_engine_sampler_mask(const ds_backend *be, const ds_int_range *sentinels, int n_sentinels, ds_token_id_fn lookup,
                            const void *ctx, ds_token_mask *mask, char *line, size_t n) {
    int32_t spare[DS_ARRAY_LEN(ds_control_tokens)];
    int n_spare = 0;
    for (int k = 0; k < ds_n_control_tokens; k++) {
        int32_t id = lookup(ctx, ds_control_tokens[k]);
        /* an unresolved one fails the self-check; BOS, PAD and noise stay masked (ds_token_mask_init) */
        if (id >= 0 && id < be->vocab && id != be->bos_id && id != be->pad_id && id != be->noise_id) spare[n_spare++] = id;
    }
    ds_token_mask_init(mask, be->vocab, be->noise_id, be->bos_id, be->pad_id, be->image_id, sentinels, n_sentinels, spare,
                       n_spare);
    int w = snprintf(line, n, "sampler mask: %d ids (noise %d, BOS %d, PAD %d, %d sentinel range%s within the vocabulary); "
                              "spared control ids:", mask->count, be->noise_id, be->bos_id, be->pad_id, n_sentinels,
                     n_sentinels == 1 ? "" : "s");
    for (int i = 0; i < n_spare && w > 0 && (size_t)w < n; i++) w += snprintf(line + w, n - (size_t)w, " %d", spare[i]);
}
