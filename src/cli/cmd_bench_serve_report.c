/* The table (and --json record) of `dsflash perf serve`.
 *
 * Why its own file: the measurements stay raw (seconds, bytes, multiply-adds) until here, where
 * each becomes a ratio against the best limit sampled in the same run.  A ratio above 100% means
 * the limit is wrong (a probe under-reports what this host can do), never that the code beat the
 * hardware; it is printed with a warning naming the probe instead of being hidden or clipped.
 *
 * Rates use the median step (what the code does when the host lets it run); the mean, which also
 * counts every moment another process held a core, is printed beside it as "wall". */
#include "cli/cmd_bench_serve.h"
#include "base/common.h"
#include "base/threadpool.h"
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#define BW_PROBE "read-bandwidth probe (ds_bench_read_bw, src/kernels/membench.c)"
#define PEAK_PROBE "int8-peak probe (ds_bench_int8_peak, src/kernels/membench.c)"
#define FLOOR_PROBES "read-bandwidth, int8- and float-peak probes (src/kernels/membench.c)"

/* Percentage of a limit; counts and announces the ones above 100%. */
static double pct(double achieved, double limit, const char *what, const char *probe, int *over) {
    double p = limit > 0 ? 100.0 * achieved / limit : 0;
    if (p > 100.0) {
        printf("WARNING: %s reached %.1f%% of the %s: that probe under-reports this host's limit\n", what, p, probe);
        (*over)++;
    }
    return p;
}

/* One decimal from 1% up; two significant digits below, so a small share never prints as 0.0%. */
typedef struct { char s[24]; } pct_text;
static pct_text fmt_pct(double p) {
    pct_text t;
    snprintf(t.s, sizeof t.s, p >= 1.0 || p <= 0.0 ? "%.1f%%" : "%.2g%%", p);
    return t;
}

typedef struct {
    double tok_s, tok_s_wall, roof_tok_s, pct_roof, vs_conc1;
    double floor_s, floor_compute_s, pct_floor;   /* per step; floor_s < 0: no floor (float64 linears) */
} level_figs;

/* The linears' floor (bench_floor.h) of `calls` over `secs` of `n` steps, and its % of those seconds. */
static void floor_figures(const bs_tally *calls, int n, double secs, const bs_limits *lim, const char *what,
                          int *over, double *floor_s, double *compute_s, double *pct_floor) {
    const double peaks[DS_MAC_CLASSES] = {lim->peak, lim->f32_peak, lim->bf16_peak, 0};
    double c = 0, f = bs_tally_floor(calls, lim->read_bw, peaks, &c);
    *floor_s = f < 0 ? -1 : f / n;
    *compute_s = f < 0 ? 0 : c / n;
    *pct_floor = f < 0 ? 0 : pct(f / n, secs, what, FLOOR_PROBES, over);
}

static level_figs level_figures(const bs_level *lv, const bs_level *lv1, const bs_limits *lim, const char *tier,
                                int *over) {
    level_figs f;
    char what[96];
    f.tok_s = lv->conc / lv->t_median;
    f.tok_s_wall = lv->conc / lv->t_mean;
    /* one step must stream the distinct weights it touched: steps/s <= BW / bytes, times its rows */
    f.roof_tok_s = lv->bytes_step > 0 ? lv->conc * lim->read_bw * 1e9 / lv->bytes_step : 0;
    snprintf(what, sizeof what, "%s decode at concurrency %d", tier, lv->conc);
    f.pct_roof = pct(f.tok_s, f.roof_tok_s, what, BW_PROBE, over);
    f.vs_conc1 = f.tok_s / (lv1->conc / lv1->t_median);
    snprintf(what, sizeof what, "the linears' floor of %s decode at concurrency %d", tier, lv->conc);
    floor_figures(lv->calls, lv->steps, lv->t_median, lim, what, over, &f.floor_s, &f.floor_compute_s, &f.pct_floor);
    return f;
}

static void print_tier(const bs_tier *t, const bs_limits *lim, int *over) {
    const bs_level *l1 = &t->lv[0];
    level_figs f1 = level_figures(l1, l1, lim, t->numerics, over);
    double pf_tok_s = t->prompt_tokens / t->ttft_s, pf_gops = 2.0 * t->prefill_macs / t->ttft_s / 1e9;
    char what[96];
    snprintf(what, sizeof what, "%s prefill", t->numerics);
    double pf_pct = pct(pf_gops, lim->peak, what, PEAK_PROBE, over);
    const int logits_rows = t->rows && !strcmp(t->rows, "logits");
    printf("\nnumerics %s (model load %.1f s; decode rows: %s)\n", t->numerics, t->load_s,
           logits_rows ? "full logits rows" : "greedy ids, the model picks each row's token");
    printf("| metric | measured | limit | %% of limit |\n|---|---|---|---|\n");
    printf("| single-stream decode | %.2f tok/s (%.1f ms/token median of %d; wall %.2f tok/s) | roofline %.2f tok/s "
           "(%.1f MB read per token) | %s |\n", f1.tok_s, 1e3 * l1->t_median, l1->steps, f1.tok_s_wall,
           f1.roof_tok_s, l1->bytes_step / 1e6, fmt_pct(f1.pct_roof).s);
    printf("| TTFT, %d-token prompt in %d-token chunks | %.2f s | | |\n", t->prompt_tokens, t->chunk, t->ttft_s);
    printf("| prefill, %d-token chunks | %.1f tok/s, %.1f GOP/s (%.1f MMAC/token) | int8 peak %.0f GOP/s | %s |\n",
           t->chunk, pf_tok_s, pf_gops, t->prefill_macs / t->prompt_tokens / 1e6, lim->peak, fmt_pct(pf_pct).s);
    double pff, pfc, pfp;
    snprintf(what, sizeof what, "the linears' floor of the %s prefill", t->numerics);
    floor_figures(t->prefill_calls, 1, t->ttft_s, lim, what, over, &pff, &pfc, &pfp);
    if (pff >= 0)
        printf("| prefill, its linears' floor | %.2f s of the %.2f s (%s of the floor compute-bound) | bytes or operations"
               " per call | %s |\n", pff, t->ttft_s, fmt_pct(pff > 0 ? 100.0 * pfc / pff : 0).s, fmt_pct(pfp).s);
    else
        printf("| prefill, its linears' floor | n/a: float64 linears (no probe measures their peak) | | |\n");
    printf("\n| concurrency | ms/step (median) | aggregate tok/s | wall tok/s | MB read/step | batched roofline tok/s "
           "| %% of roofline | vs concurrency 1 | linears' floor ms/step (compute-bound share) | %% of the floor |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int l = 0; l < BS_N_LEVELS; l++) {
        const bs_level *lv = &t->lv[l];
        level_figs f = l ? level_figures(lv, l1, lim, t->numerics, over) : f1;
        printf("| %d | %.1f | %.2f | %.2f | %.1f | %.2f | %s | %.2fx |", lv->conc, 1e3 * lv->t_median, f.tok_s,
               f.tok_s_wall, lv->bytes_step / 1e6, f.roof_tok_s, fmt_pct(f.pct_roof).s, f.vs_conc1);
        if (f.floor_s >= 0)
            printf(" %.1f (%s) | %s |\n", 1e3 * f.floor_s, fmt_pct(f.floor_s > 0 ? 100.0 * f.floor_compute_s / f.floor_s : 0).s,
                   fmt_pct(f.pct_floor).s);
        else
            printf(" n/a (float64 linears) | n/a |\n");
    }
}

/* The column heads of the per-phase tables: one per level, then the prefill chunk. */
static void print_phase_table_head(const bs_tier *t) {
    for (int l = 0; l < BS_N_LEVELS; l++) printf(" conc %d |", t->lv[l].conc);
    printf(" prefill chunk |\n|---|");
    for (int l = 0; l <= BS_N_LEVELS; l++) printf("---|");
    printf("\n");
}

/* --profile: mean ms per step of each phase at every level (exclusive times: they add up to the
 * mean step, which is why the step column is the mean, not the median of the table above), and the
 * prefill's phases per chunk (the whole TTFT prefill divided by its chunks). */
static void print_profile(const bs_tier *t) {
    const int chunks = t->chunk > 0 ? (t->prompt_tokens + t->chunk - 1) / t->chunk : 1;
    printf("\nper-phase profile, numerics %s (mean ms per decode step, and per %d-token prefill chunk; share of the"
           " step)\n| phase |", t->numerics, t->chunk);
    print_phase_table_head(t);
    double ptot = 0;
    for (int q = 0; q < DS_PH_COUNT; q++) ptot += t->prefill_phase_s[q];
    for (int p = 0; p < DS_PH_COUNT; p++) {
        printf("| %s |", ds_phase_name((ds_phase)p));
        for (int l = 0; l < BS_N_LEVELS; l++) {
            double tot = 0;
            for (int q = 0; q < DS_PH_COUNT; q++) tot += t->lv[l].phase_s[q];
            printf(" %.2f (%.0f%%) |", 1e3 * t->lv[l].phase_s[p], tot > 0 ? 100.0 * t->lv[l].phase_s[p] / tot : 0.0);
        }
        printf(" %.2f (%.0f%%) |\n", 1e3 * t->prefill_phase_s[p] / chunks, ptot > 0 ? 100.0 * t->prefill_phase_s[p] / ptot : 0.0);
    }
    printf("| step (mean) |");
    for (int l = 0; l < BS_N_LEVELS; l++) printf(" %.2f |", 1e3 * t->lv[l].t_mean);
    printf(" %.2f |\n", 1e3 * ptot / chunks);
}

/* --profile, fast tier: each phase's share of the linears' floor beside the time the phase took
 * (which of the phases' kernels stand furthest from what the host allows). */
static void print_phase_floors(const bs_tier *t, const bs_limits *lim, int *over) {
    const double peaks[DS_MAC_CLASSES] = {lim->peak, lim->f32_peak, lim->bf16_peak, 0};
    const int chunks = t->chunk > 0 ? (t->prompt_tokens + t->chunk - 1) / t->chunk : 1;
    double fl[BS_N_LEVELS + 1][DS_PH_COUNT];
    for (int l = 0; l <= BS_N_LEVELS; l++) {
        const bs_tally *calls = l < BS_N_LEVELS ? t->lv[l].calls : t->prefill_calls;
        const double n = l < BS_N_LEVELS ? t->lv[l].steps : chunks;
        if (bs_tally_floor_phases(calls, lim->read_bw, peaks, NULL, fl[l]) < 0) return;   /* no floor: float64 */
        for (int p = 0; p < DS_PH_COUNT; p++) fl[l][p] /= n;
    }
    printf("\nlinears' floor per phase, numerics %s (ms per decode step and per %d-token prefill chunk; in brackets the"
           " floor as a %% of the phase's time above; phases without linears left out)\n| phase |", t->numerics, t->chunk);
    print_phase_table_head(t);
    for (int p = 0; p < DS_PH_COUNT; p++) {
        int any = 0;
        for (int l = 0; l <= BS_N_LEVELS; l++) any |= fl[l][p] > 0;
        if (!any) continue;
        printf("| %s |", ds_phase_name((ds_phase)p));
        for (int l = 0; l <= BS_N_LEVELS; l++) {
            const double secs = l < BS_N_LEVELS ? t->lv[l].phase_s[p] : t->prefill_phase_s[p] / chunks;
            char what[128];
            snprintf(what, sizeof what, "the linears' floor of phase '%s' (%s, %s)", ds_phase_name((ds_phase)p), t->numerics,
                     l < BS_N_LEVELS ? "decode" : "prefill");
            printf(" %.2f (%s) |", 1e3 * fl[l][p], fmt_pct(pct(fl[l][p], secs, what, FLOOR_PROBES, over)).s);
        }
        printf("\n");
    }
}

/* The floor (null when there is none) and the raw tally it came from: every distinct linear call
 * (class, weight bytes, multiply-adds) and how many times it ran in the section. */
static void add_floor_json(cJSON *e, const bs_tally *calls, double floor_s, double compute_s, double pct_floor) {
    if (floor_s >= 0) {
        cJSON_AddNumberToObject(e, "linear_floor_s", floor_s);
        cJSON_AddNumberToObject(e, "linear_floor_compute_s", compute_s);
        cJSON_AddNumberToObject(e, "pct_linear_floor", pct_floor);
    } else {
        cJSON_AddNullToObject(e, "linear_floor_s");
    }
    cJSON *arr = cJSON_AddArrayToObject(e, "linear_calls");
    for (size_t i = 0; calls && i < BS_KINDS_MAX; i++) {
        const bs_call_kind *k = &calls->k[i];
        if (!k->calls) continue;
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "class", bs_mac_class_name(k->cls));
        cJSON_AddNumberToObject(c, "bytes", (double)k->bytes);
        cJSON_AddNumberToObject(c, "macs", (double)k->macs);
        cJSON_AddNumberToObject(c, "calls", (double)k->calls);
        cJSON_AddItemToArray(arr, c);
    }
    cJSON_AddNumberToObject(e, "linear_calls_lost", calls ? (double)calls->lost : 0);
}

/* --profile: the floor split by phase, seconds per step (absent where there is no floor). */
static void add_phase_floors_json(cJSON *e, const bs_tally *calls, int steps, const bs_limits *lim) {
    const double peaks[DS_MAC_CLASSES] = {lim->peak, lim->f32_peak, lim->bf16_peak, 0};
    double fl[DS_PH_COUNT];
    if (bs_tally_floor_phases(calls, lim->read_bw, peaks, NULL, fl) < 0) return;
    cJSON *ph = cJSON_AddObjectToObject(e, "phase_floor_s");
    for (int p = 0; p < DS_PH_COUNT; p++) cJSON_AddNumberToObject(ph, ds_phase_name((ds_phase)p), fl[p] / steps);
}

static cJSON *tier_json(const bs_tier *t, const bs_limits *lim, int profile) {
    int ignored = 0;
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "concurrency");
    cJSON_AddStringToObject(j, "numerics", t->numerics);
    cJSON_AddStringToObject(j, "rows", t->rows && !strcmp(t->rows, "logits") ? "logits" : "greedy");
    cJSON_AddNumberToObject(j, "load_s", t->load_s);
    for (int l = 0; l < BS_N_LEVELS; l++) {
        const bs_level *lv = &t->lv[l];
        level_figs f = level_figures(lv, &t->lv[0], lim, t->numerics, &ignored);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "conc", lv->conc);
        cJSON_AddNumberToObject(e, "steps", lv->steps);
        cJSON_AddNumberToObject(e, "step_s_median", lv->t_median);
        cJSON_AddNumberToObject(e, "step_s_mean", lv->t_mean);
        cJSON_AddNumberToObject(e, "bytes_per_step", lv->bytes_step);
        cJSON_AddNumberToObject(e, "tok_s", f.tok_s);
        cJSON_AddNumberToObject(e, "tok_s_wall", f.tok_s_wall);
        cJSON_AddNumberToObject(e, "roofline_tok_s", f.roof_tok_s);
        cJSON_AddNumberToObject(e, "pct_roofline", f.pct_roof);
        cJSON_AddNumberToObject(e, "vs_conc1", f.vs_conc1);
        add_floor_json(e, lv->calls, f.floor_s, f.floor_compute_s, f.pct_floor);
        if (profile) { /* --profile: mean seconds per step of each phase, named as in the table */
            cJSON *ph = cJSON_AddObjectToObject(e, "phase_s");
            for (int p = 0; p < DS_PH_COUNT; p++) cJSON_AddNumberToObject(ph, ds_phase_name((ds_phase)p), lv->phase_s[p]);
            add_phase_floors_json(e, lv->calls, lv->steps, lim);
        }
        cJSON_AddItemToArray(arr, e);
    }
    cJSON *p = cJSON_AddObjectToObject(j, "prefill");
    double gops = 2.0 * t->prefill_macs / t->ttft_s / 1e9;
    cJSON_AddNumberToObject(p, "prompt_tokens", t->prompt_tokens);
    cJSON_AddNumberToObject(p, "chunk", t->chunk);
    cJSON_AddNumberToObject(p, "ttft_s", t->ttft_s);
    cJSON_AddNumberToObject(p, "tok_s", t->prompt_tokens / t->ttft_s);
    cJSON_AddNumberToObject(p, "macs", t->prefill_macs);
    cJSON_AddNumberToObject(p, "gops", gops);
    if (profile) { /* --profile: seconds of the whole prefill in each phase */
        cJSON *ph = cJSON_AddObjectToObject(p, "phase_s");
        for (int q = 0; q < DS_PH_COUNT; q++) cJSON_AddNumberToObject(ph, ds_phase_name((ds_phase)q), t->prefill_phase_s[q]);
    }
    cJSON_AddNumberToObject(p, "pct_int8_peak", 100.0 * gops / lim->peak);
    double pff, pfc, pfp;
    floor_figures(t->prefill_calls, 1, t->ttft_s, lim, "", &ignored, &pff, &pfc, &pfp);
    add_floor_json(p, t->prefill_calls, pff, pfc, pfp);
    return j;
}

/* Written whole to FILE.tmp, then renamed: never a partial record under the asked name. */
static int write_json(const char *path, const bs_opts *o, const bs_limits *lim, const bs_tier *t, int n,
                      const char *kernel_path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "dsflash-bench-serve/1");
    cJSON_AddStringToObject(root, "model", o->model);
    cJSON_AddNumberToObject(root, "threads", ds_pool_threads());
    cJSON_AddStringToObject(root, "kernel_path", kernel_path);
    cJSON_AddStringToObject(root, "engram_residency", o->engram_residency);
    cJSON_AddStringToObject(root, "numa_nodes", o->numa_nodes ? o->numa_nodes : "all");
    cJSON_AddBoolToObject(root, "quick", o->quick);
    cJSON *l = cJSON_AddObjectToObject(root, "limits");
    cJSON_AddNumberToObject(l, "read_bw_gbs", lim->read_bw);
    cJSON_AddNumberToObject(l, "read_bw_median_gbs", lim->read_median);
    cJSON_AddNumberToObject(l, "read_bw_worst_gbs", lim->read_worst);
    cJSON_AddNumberToObject(l, "read_passes", lim->read_passes);
    cJSON_AddNumberToObject(l, "int8_peak_gops", lim->peak);
    cJSON_AddStringToObject(l, "int8_peak_what", lim->peak_what ? lim->peak_what : "");
    cJSON_AddNumberToObject(l, "f32_peak_gops", lim->f32_peak);
    cJSON_AddStringToObject(l, "f32_peak_what", lim->f32_what ? lim->f32_what : "");
    cJSON_AddNumberToObject(l, "bf16_peak_gops", lim->bf16_peak);
    cJSON_AddStringToObject(l, "bf16_peak_what", lim->bf16_what ? lim->bf16_what : "");
    cJSON_AddNumberToObject(l, "samples", lim->samples);
    cJSON *arr = cJSON_AddArrayToObject(root, "tiers");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, tier_json(&t[i], lim, o->profile));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f)) ok = 0;
    free(text);
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        fprintf(stderr, "dsflash perf serve: --json %s: cannot write the file\n", path);
        return -1;
    }
    return 0;
}

int bs_report(const bs_opts *o, const bs_limits *lim, const bs_tier *t, int n_tiers, const char *kernel_path) {
    int over = 0;
    printf("dsflash perf serve: model %s, %d threads, NUMA nodes %s, kernel path %s, Engram residency %s%s\n", o->model,
           ds_pool_threads(), o->numa_nodes ? o->numa_nodes : "all", kernel_path, o->engram_residency, o->quick ? " (--quick)" : "");
    printf("limits (best of %d samples through this run): read-only %.1f GB/s (spread of its %d passes: median %.1f of"
           " the best sample, worst %.1f) | int8 peak %.0f GOP/s (%s) | fp32 peak %.0f GOP/s (%s) | bf16-path peak %.0f"
           " GOP/s (%s)\n", lim->samples, lim->read_bw, lim->read_passes, lim->read_median, lim->read_worst, lim->peak,
           lim->peak_what ? lim->peak_what : "?", lim->f32_peak, lim->f32_what ? lim->f32_what : "?", lim->bf16_peak,
           lim->bf16_what ? lim->bf16_what : "?");
    for (int i = 0; i < n_tiers; i++) {
        print_tier(&t[i], lim, &over);
        if (o->profile) {
            print_profile(&t[i]);
            print_phase_floors(&t[i], lim, &over);
        }
    }
    printf("\n(rates from the median step, 'wall' from the mean; MB read = distinct weight bytes the kernels streamed"
           " (dense + the union of routed experts); batched roofline = rows x read BW / MB read per step; prefill ops"
           " = 2 x linear multiply-adds; TTFT ends at the argmax of the last chunk's logits; linears' floor = the sum over"
           " the section's linear calls of the larger of weight bytes / read BW and 2 x multiply-adds / the peak of the"
           " units the call runs on (int8, fp32 FMA, bf16 path): what the linears alone cannot beat; attention, norms"
           " and mixes are outside it)\n");
    if (over) printf("WARNING: %d ratio(s) above 100%%: the limits above are too low to judge against\n", over);
    fflush(stdout);
    if (o->json && write_json(o->json, o, lim, t, n_tiers, kernel_path)) return -1;
    return over;
}
