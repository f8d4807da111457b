/* The report of `dsflash bench serve` (cmd_bench_serve_report.c) on hand-made measurements.
 *
 * Why: the end-to-end smoke test (tests/bench/run_bench.sh) can only check that real ratios land
 * in (0, 100]; it cannot make a probe under-report on purpose.  Here the raw figures are chosen
 * so every ratio has a value worked out by hand below, and a second set puts ratios above 100%
 * to prove the bench then warns and names the probe instead of printing the number quietly. */
#include "check.h"
#include "cli/cmd_bench_serve.h"
#include <cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <unistd.h>

/* Hand-made tier: step times, bytes per step and prefill figures with round ratios. */
static void make_tier(bs_tier *t) {
    memset(t, 0, sizeof *t);
    t->numerics = "fast";
    const int conc[4] = {1, 4, 16, 32};
    const double secs[4] = {0.2, 0.5, 1.0, 2.0}, bytes[4] = {1e9, 2e9, 4e9, 5e9};
    for (int l = 0; l < 4; l++)
        t->lv[l] = (bs_level){.conc = conc[l], .steps = 5, .t_median = secs[l], .t_mean = secs[l], .bytes_step = bytes[l]};
    t->prompt_tokens = 2048;
    t->chunk = 512;
    t->ttft_s = 10.0;
    t->prefill_macs = 2.5e11;
}

/* Runs bs_report with stdout captured into `buf`; returns its result. */
static int report_to(char *buf, size_t cap, const bs_opts *o, const bs_limits *lim, const bs_tier *t) {
    char path[512];
    snprintf(path, sizeof path, "%s/report.txt", ds_test_tmpdir());
    fflush(stdout);
    int saved = dup(1), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    dup2(fd, 1);
    int r = bs_report(o, lim, t, 1, "test-path");
    fflush(stdout);
    dup2(saved, 1);
    close(fd);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    return r;
}

/* The --json record the report wrote (NULL if missing or unparsable). */
static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "r");
    static char text[16384];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    return cJSON_Parse(text);
}

TEST(ratios_match_hand_computed_values) {
    bs_tier t;
    make_tier(&t);
    bs_limits lim = {.read_bw = 10.0, .peak = 100.0, .peak_what = "test", .samples = 3};
    bs_opts o = {.model = "m"};
    static char outbuf[16384];
    const char *out = outbuf;
    CHECK(report_to(outbuf, sizeof outbuf, &o, &lim, &t) == 0, "no ratio is above 100%%");
    /* conc 1: 1/0.2 = 5 tok/s; roofline 10e9/1e9 = 10 tok/s -> 50% */
    CHECK_STR_CONTAINS(out, "| single-stream decode | 5.00 tok/s (200.0 ms/token median of 5; wall 5.00 tok/s) "
                            "| roofline 10.00 tok/s (1000.0 MB read per token) | 50.0% |");
    /* conc 4: 8 tok/s; roofline 4*10e9/2e9 = 20 -> 40%, 8/5 = 1.6x */
    CHECK_STR_CONTAINS(out, "| 4 | 500.0 | 8.00 | 8.00 | 2000.0 | 20.00 | 40.0% | 1.60x |");
    /* conc 16: 16 tok/s; roofline 16*10e9/4e9 = 40 -> 40%, 3.2x */
    CHECK_STR_CONTAINS(out, "| 16 | 1000.0 | 16.00 | 16.00 | 4000.0 | 40.00 | 40.0% | 3.20x |");
    /* conc 32: 16 tok/s; roofline 32*10e9/5e9 = 64 -> 25% */
    CHECK_STR_CONTAINS(out, "| 32 | 2000.0 | 16.00 | 16.00 | 5000.0 | 64.00 | 25.0% | 3.20x |");
    /* prefill: 2048/10 = 204.8 tok/s; 2*2.5e11/10 = 50 GOP/s of 100 -> 50% */
    CHECK_STR_CONTAINS(out, "| prefill, 512-token chunks | 204.8 tok/s, 50.0 GOP/s (122.1 MMAC/token) | int8 peak 100 GOP/s | 50.0% |");
    CHECK_STR_CONTAINS(out, "| TTFT, 2048-token prompt in 512-token chunks | 10.00 s |");
    CHECK(!strstr(out, "WARNING"), "no warning expected:\n%s", out);
}

TEST(ratio_above_100_percent_warns_naming_the_probe) {
    bs_tier t;
    make_tier(&t);
    /* read BW 1 GB/s: every decode level lands above its roofline; int8 peak 10 GOP/s: prefill 500% */
    bs_limits lim = {.read_bw = 1.0, .peak = 10.0, .peak_what = "test", .samples = 1};
    bs_opts o = {.model = "m"};
    static char outbuf[16384];
    const char *out = outbuf;
    CHECK(report_to(outbuf, sizeof outbuf, &o, &lim, &t) == 5, "5 ratios above 100%%: 4 decode levels + prefill");
    CHECK_STR_CONTAINS(out, "WARNING: fast decode at concurrency 1 reached 500.0% of the read-bandwidth probe "
                            "(ds_bench_read_bw, src/kernels/membench.c)");
    CHECK_STR_CONTAINS(out, "WARNING: fast decode at concurrency 32 reached 250.0% of the read-bandwidth probe");
    CHECK_STR_CONTAINS(out, "WARNING: fast prefill reached 500.0% of the int8-peak probe (ds_bench_int8_peak");
    CHECK_STR_CONTAINS(out, "WARNING: 5 ratio(s) above 100%");
}

TEST(json_record_holds_the_same_figures) {
    bs_tier t;
    make_tier(&t);
    bs_limits lim = {.read_bw = 10.0, .peak = 100.0, .peak_what = "test", .samples = 3};
    char path[512];
    snprintf(path, sizeof path, "%s/serve.json", ds_test_tmpdir());
    bs_opts o = {.model = "m", .json = path};
    static char outbuf[16384];
    CHECK(report_to(outbuf, sizeof outbuf, &o, &lim, &t) == 0);
    cJSON *j = read_json(path);
    CHECK(j != NULL, "JSON parses");
    if (!j) return;
    cJSON *tier = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tiers"), 0);
    cJSON *c4 = cJSON_GetArrayItem(cJSON_GetObjectItem(tier, "concurrency"), 1);
    CHECK(cJSON_GetObjectItem(c4, "conc")->valuedouble == 4);
    CHECK(fabs(cJSON_GetObjectItem(c4, "pct_roofline")->valuedouble - 40.0) < 1e-9);
    CHECK(fabs(cJSON_GetObjectItem(c4, "vs_conc1")->valuedouble - 1.6) < 1e-9);
    cJSON *p = cJSON_GetObjectItem(tier, "prefill");
    CHECK(fabs(cJSON_GetObjectItem(p, "pct_int8_peak")->valuedouble - 50.0) < 1e-9);
    CHECK(!strcmp(cJSON_GetObjectItem(tier, "numerics")->valuestring, "fast"));
    cJSON_Delete(j);
}

/* The linears' floor: per call the larger of bytes / read BW and 2 x macs / the class's peak. */
static void tally_n(bs_tally *t, ds_mac_class cls, uint64_t bytes, uint64_t macs, int calls) {
    for (int i = 0; i < calls; i++) bs_tally_observe(t, cls, bytes, macs);
}

TEST(linears_floor_matches_hand_computed_values) {
    bs_tier t;
    make_tier(&t);
    /* conc 1, 5 steps of 0.2 s: per step one int8 call (5e8 B / 10 GB/s = 0.05 s > 2e9 op / 100 GOP/s)
     * and one fp32 call (2e9 op / 20 GOP/s = 0.1 s > 2e8 B / 10 GB/s): floor 0.15 s, 2/3 compute, 75% */
    t.lv[0].calls = bs_tally_new();
    tally_n(t.lv[0].calls, DS_MAC_INT8, 500000000, 1000000000, 5);
    tally_n(t.lv[0].calls, DS_MAC_F32, 200000000, 1000000000, 5);
    /* conc 4: a float64 call has no peak, so no floor */
    t.lv[1].calls = bs_tally_new();
    tally_n(t.lv[1].calls, DS_MAC_F64, 1000, 1000, 5);
    /* prefill: 10 bf16 calls of 2e10 op / 40 GOP/s = 0.5 s (> 0.1 s of bytes): 5 s of the 10 s TTFT */
    t.prefill_calls = bs_tally_new();
    tally_n(t.prefill_calls, DS_MAC_BF16, 1000000000, 10000000000, 10);
    bs_limits lim = {.read_bw = 10.0, .peak = 100.0, .f32_peak = 20.0, .bf16_peak = 40.0, .samples = 3};
    char path[512];
    snprintf(path, sizeof path, "%s/floor.json", ds_test_tmpdir());
    bs_opts o = {.model = "m", .json = path};
    static char outbuf[16384];
    const char *out = outbuf;
    CHECK(report_to(outbuf, sizeof outbuf, &o, &lim, &t) == 0, "no ratio is above 100%%");
    CHECK_STR_CONTAINS(out, "| 1 | 200.0 | 5.00 | 5.00 | 1000.0 | 10.00 | 50.0% | 1.00x | 150.0 (66.7%) | 75.0% |");
    CHECK_STR_CONTAINS(out, "| 4 | 500.0 | 8.00 | 8.00 | 2000.0 | 20.00 | 40.0% | 1.60x | n/a (float64 linears) | n/a |");
    CHECK_STR_CONTAINS(out, "| prefill, its linears' floor | 5.00 s of the 10.00 s (100.0% of the floor compute-bound) "
                            "| bytes or operations per call | 50.0% |");
    cJSON *j = read_json(path);
    CHECK(j != NULL, "JSON parses");
    if (j) {
        cJSON *lv = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tiers"), 0), "concurrency");
        cJSON *c1 = cJSON_GetArrayItem(lv, 0), *c4 = cJSON_GetArrayItem(lv, 1);
        CHECK(fabs(cJSON_GetObjectItem(c1, "linear_floor_s")->valuedouble - 0.15) < 1e-12);
        CHECK(fabs(cJSON_GetObjectItem(c1, "linear_floor_compute_s")->valuedouble - 0.1) < 1e-12);
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c1, "linear_calls")) == 2, "two distinct calls listed");
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(c4, "linear_floor_s")), "no floor where a call is float64");
        CHECK(fabs(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "limits"), "f32_peak_gops")->valuedouble - 20.0) < 1e-12);
        cJSON_Delete(j);
    }
    /* an fp32 peak of 2 GOP/s puts conc 1's floor at 1.05 s per 0.2 s step: the report warns */
    lim.f32_peak = 2.0;
    o.json = NULL;
    CHECK(report_to(outbuf, sizeof outbuf, &o, &lim, &t) == 1, "one ratio above 100%%");
    CHECK_STR_CONTAINS(out, "WARNING: the linears' floor of fast decode at concurrency 1 reached 525.0% of the "
                            "read-bandwidth, int8- and float-peak probes");
    for (int l = 0; l < 2; l++) bs_tally_free(t.lv[l].calls);
    bs_tally_free(t.prefill_calls);
}

TEST(tally_files_each_call_under_the_open_phase) {
    bs_tally *t = bs_tally_new();
    ds_prof_enable(1);
    ds_prof_push(DS_PH_HEAD);
    bs_tally_observe(t, DS_MAC_F32, 1000, 4000);       /* 1e-7 s of bytes < 8000 op / 20 GOP/s = 4e-7 s */
    ds_prof_push(DS_PH_MOE_EXPERTS);
    bs_tally_observe(t, DS_MAC_INT8, 1000, 4000);      /* the same call, another phase: its own kind */
    ds_prof_pop();
    ds_prof_pop();
    bs_tally_observe(t, DS_MAC_INT8, 1000, 4000);      /* no phase open: OTHER */
    ds_prof_enable(0);
    bs_tally_observe(t, DS_MAC_INT8, 1000, 4000);      /* recording off: OTHER too */
    double ph[DS_PH_COUNT], sec[DS_PH_COUNT], c = 0;
    ds_prof_take(sec);
    const double peaks[DS_MAC_CLASSES] = {100, 20, 40, 0};
    const double f = bs_tally_floor_phases(t, 10.0, peaks, &c, ph);
    CHECK(t->n == 3, "%d kinds (head, experts, other)", t->n);
    /* int8: bytes 1e-7 s > 8000 / 100e9 = 8e-8 s */
    CHECK(fabs(ph[DS_PH_HEAD] - 4e-7) < 1e-15 && fabs(ph[DS_PH_MOE_EXPERTS] - 1e-7) < 1e-15 && fabs(ph[DS_PH_OTHER] - 2e-7) < 1e-15,
          "head %g experts %g other %g", ph[DS_PH_HEAD], ph[DS_PH_MOE_EXPERTS], ph[DS_PH_OTHER]);
    CHECK(fabs(f - 7e-7) < 1e-15 && fabs(c - 4e-7) < 1e-15, "floor %g compute %g", f, c);
    bs_tally_free(t);
}

TEST(tally_keeps_distinct_calls_and_counts_what_it_cannot_hold) {
    bs_tally *t = bs_tally_new();
    for (int rep = 0; rep < 3; rep++)
        for (uint64_t k = 0; k < BS_KINDS_MAX + 9; k++) bs_tally_observe(t, DS_MAC_INT8, 64 + k, 128 * (k + 1));
    /* one slot stays free so a lookup always ends: BS_KINDS_MAX - 1 kinds, the other 10 lost each time */
    CHECK(t->n == BS_KINDS_MAX - 1, "%d kinds", t->n);
    CHECK(t->calls == 3 * (uint64_t)(BS_KINDS_MAX + 9) && t->lost == 30, "calls %llu lost %llu",
          (unsigned long long)t->calls, (unsigned long long)t->lost);
    uint64_t counted = 0;
    for (int i = 0; i < BS_KINDS_MAX; i++) counted += t->k[i].calls;
    CHECK(counted == t->calls - t->lost, "every recorded call is in one kind");
    const double peaks[DS_MAC_CLASSES] = {1, 1, 1, 1};
    CHECK(bs_tally_floor(t, 1.0, peaks, NULL) < 0, "a tally that lost calls gives no floor");
    bs_tally_free(t);
}

RUN_ALL()
