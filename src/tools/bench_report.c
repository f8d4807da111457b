/* The bench's console table and JSON result (TOOLS.md §4.4), and the statistics they use.
 *
 * Why ms/step, A and tok/s in one row: §4.6 rule 1 — optimising one while another collapses once
 * made a 2.2x loss look like a win.  The JSON carries the §4.4 fields exactly, plus what the spec
 * leaves open and an operator needs: latency percentiles (TTFT, TPOT, ITL at p50/p90/p99), the
 * raw /server_info snapshot, the command line and whether the run is valid.  NaN (a figure that
 * could not be computed, e.g. no successful request) is written as null, never as 0. */
#define _GNU_SOURCE
#include "tools/bench_client.h"
#include "base/common.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BENCH_TOOL_VERSION "dsflash bench 1"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *v, int n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    double pos = q / 100.0 * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

double bench_median(double *v, int n) { return bench_percentile(v, n, 50.0); }

static void flags_text(const bench_row *w, char *b, size_t n) {
    snprintf(b, n, "%s%s%s%s", w->degenerate ? "degenerate " : "", w->prefix_reuse ? "prefix_reuse " : "",
             w->prompt_len_mismatch ? "prompt_len_mismatch " : "", w->fail > 0 ? "fail>0 " : "");
    size_t k = strlen(b);
    if (k) b[k - 1] = 0;
}

void bench_print_table(const bench_run *r, FILE *f) {
    const bench_opts *o = r->o;
    fprintf(f, "\n%s: %d prompt tokens, %d output tokens, %d repeat(s) (medians), label %s\n", r->model,
            o->prompt_tokens, o->output_tokens, o->repeats, o->label);
    fprintf(f, "| conc | per-stream tok/s | step ms | aggregate tok/s | speedup | A    | TTFT s  | flags |\n");
    fprintf(f, "|------|------------------|---------|-----------------|---------|------|---------|-------|\n");
    for (int l = 0; l < o->n_levels; l++) {
        const bench_row *w = &r->rows[l];
        char fl[96], sp[16];
        flags_text(w, fl, sizeof fl);
        if (w->has_speedup) snprintf(sp, sizeof sp, "%.2f", w->speedup); else snprintf(sp, sizeof sp, "-");
        fprintf(f, "| %4d | %16.2f | %7.1f | %15.2f | %7s | %4.2f | %7.3f | %s |\n", w->conc, w->per_stream_med,
                w->decode_step_ms, w->total_decode, sp, w->accept_len, w->ttft_med, fl);
    }
    fprintf(f, "\n| conc | ok/fail | TTFT s p50 / p90 / p99 | TPOT ms p50 / p90 / p99 | ITL ms p50 / p90 / p99 |\n");
    fprintf(f, "|------|---------|------------------------|-------------------------|------------------------|\n");
    for (int l = 0; l < o->n_levels; l++) {
        const bench_row *w = &r->rows[l];
        fprintf(f, "| %4d | %3d/%-3d | %6.3f / %6.3f / %6.3f | %7.1f / %7.1f / %7.1f | %6.1f / %6.1f / %6.1f |\n",
                w->conc, w->ok, w->fail, w->ttft_p[0], w->ttft_p[1], w->ttft_p[2], w->tpot_ms_p[0], w->tpot_ms_p[1],
                w->tpot_ms_p[2], w->itl_ms_p[0], w->itl_ms_p[1], w->itl_ms_p[2]);
    }
    if (!r->valid) fprintf(f, "INVALID RUN: %s\n", r->invalid_why);
}

static void add_num(cJSON *o, const char *k, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

static void add_pcts(cJSON *o, const char *k, const double p[3]) {
    cJSON *x = cJSON_AddObjectToObject(o, k);
    add_num(x, "p50", p[0]);
    add_num(x, "p90", p[1]);
    add_num(x, "p99", p[2]);
}

static cJSON *row_json(const bench_run *r, const bench_row *w) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "conc", w->conc);
    cJSON_AddNumberToObject(j, "ok", w->ok);
    cJSON_AddNumberToObject(j, "fail", w->fail);
    cJSON_AddNumberToObject(j, "prompt_tokens", r->o->prompt_tokens);
    cJSON_AddNumberToObject(j, "out_per_req", r->o->output_tokens);
    add_num(j, "per_stream_med", w->per_stream_med);
    add_num(j, "per_stream_mean", w->per_stream_mean);
    add_num(j, "total_decode", w->total_decode);
    add_num(j, "total_e2e", w->total_e2e);
    add_num(j, "ttft_med", w->ttft_med);
    add_num(j, "decode_wall", w->decode_wall);
    add_num(j, "e2e_wall", w->e2e_wall);
    add_num(j, "accept_len", w->accept_len);
    add_num(j, "accept_rate", w->accept_rate);
    add_num(j, "decode_step_ms", w->decode_step_ms);
    add_num(j, "speedup", w->has_speedup ? w->speedup : NAN);
    add_num(j, "efficiency", w->has_efficiency ? w->efficiency : NAN);
    add_num(j, "prefix_hit_tokens", w->prefix_hit_tokens);
    add_num(j, "uniq2_med", w->uniq2_med);
    cJSON *fl = cJSON_AddArrayToObject(j, "flags");
    if (w->degenerate) cJSON_AddItemToArray(fl, cJSON_CreateString("degenerate"));
    if (w->prefix_reuse) cJSON_AddItemToArray(fl, cJSON_CreateString("prefix_reuse"));
    if (w->prompt_len_mismatch) cJSON_AddItemToArray(fl, cJSON_CreateString("prompt_len_mismatch"));
    if (w->fail > 0) cJSON_AddItemToArray(fl, cJSON_CreateString("fail>0"));
    cJSON_AddNumberToObject(j, "n_reps", w->n_reps);
    cJSON *lat = cJSON_AddObjectToObject(j, "latency");
    add_pcts(lat, "ttft_s", w->ttft_p);
    add_pcts(lat, "tpot_ms", w->tpot_ms_p);
    add_pcts(lat, "itl_ms", w->itl_ms_p);
    if (w->degenerate) {
        cJSON *s = cJSON_AddArrayToObject(j, "samples");
        for (int k = 0; k < 2; k++) if (w->samples[k]) cJSON_AddItemToArray(s, cJSON_CreateString(w->samples[k]));
    }
    return j;
}

/* The §4.4 "server" object: the named fields of /server_info that exist. */
static void add_server(cJSON *j, const cJSON *info) {
    static const char *const keys[] = {"instance_id", "max_num_seqs", "prefix_caching", "admission_gate",
                                       "num_speculative_tokens", "kernels", "threads", "reduce_mode", "version",
                                       "setting", "numerics"};
    cJSON *s = cJSON_AddObjectToObject(j, "server");
    for (size_t i = 0; i < DS_ARRAY_LEN(keys); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(info, keys[i]);
        if (v) cJSON_AddItemToObject(s, keys[i], cJSON_Duplicate(v, 1));
    }
}

static cJSON *result_json(const bench_run *r) {
    const bench_opts *o = r->o;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", BENCH_SCHEMA);
    cJSON_AddStringToObject(j, "tool_version", BENCH_TOOL_VERSION);
    cJSON_AddStringToObject(j, "label", o->label);
    cJSON_AddStringToObject(j, "base_url", r->http.base_url);
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON_AddStringToObject(j, "started_utc", r->started_utc);
    cJSON_AddStringToObject(j, "command_line", o->command_line);
    cJSON_AddNumberToObject(j, "prompt_tokens", o->prompt_tokens);
    cJSON_AddNumberToObject(j, "output_tokens", o->output_tokens);
    cJSON_AddNumberToObject(j, "repeats", o->repeats);
    cJSON_AddBoolToObject(j, "ignore_eos", o->ignore_eos);
    cJSON_AddNumberToObject(j, "spec_tokens", r->spec_tokens_used);
    cJSON *info = r->server_info_json ? cJSON_Parse(r->server_info_json) : NULL;
    add_server(j, info);
    if (info) cJSON_AddItemToObject(j, "server_info", info);
    else cJSON_AddNullToObject(j, "server_info");
    cJSON *c = cJSON_AddObjectToObject(j, "calibration");
    cJSON_AddNumberToObject(c, "exact", r->prompts.exact);
    cJSON_AddNumberToObject(c, "n", r->prompts.n);
    cJSON_AddNumberToObject(c, "max_dev", r->prompts.max_dev);
    cJSON_AddNumberToObject(c, "overlap_chars", (double)r->prompts.overlap_chars);
    cJSON *rows = cJSON_AddArrayToObject(j, "rows");
    for (int l = 0; l < o->n_levels; l++) cJSON_AddItemToArray(rows, row_json(r, &r->rows[l]));
    cJSON_AddBoolToObject(j, "valid", r->valid);
    if (r->valid) cJSON_AddNullToObject(j, "invalid_reason");
    else cJSON_AddStringToObject(j, "invalid_reason", r->invalid_why);
    return j;
}

int bench_write_json(const bench_run *r, const char *path) {
    cJSON *j = result_json(r);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF) rc = 3;
    if (f && fclose(f)) rc = 3;
    if (!rc && rename(tmp, path)) rc = 3;
    if (rc) {
        fprintf(stderr, "dsflash bench: --json-out %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    free(text);
    return rc;
}
