/* The bench sweep (TOOLS.md §0 port hygiene, §4.3 procedure and metrics).
 *
 * Why this order: the server is checked before anything is measured (health, model id, instance
 * id, max-num-seqs against the largest level) so a wrong port or a proxy fails in a second, not
 * after a calibration; one unrecorded warm-up absorbs the cold first prefill; each (level, repeat)
 * starts from an idle server with a clean prefix cache when the server allows it, and the
 * counters are scraped around it so acceptance and cache hits are deltas of exactly that level.
 * Every reported field is the median over repeats, never the best. */
#define _GNU_SOURCE
#include "io/io_util.h"
#include "tools/bench_client.h"
#include "tools/bench_plot.h"
#include "tools/progress.h"
#include "base/common.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_cancel;
static void on_sigint(int sig) { __atomic_store_n(&g_cancel, 1, __ATOMIC_RELAXED); }

static cJSON *get_json(const ds_http_client *c, const char *path, long *status, char *why, size_t n) {
    ds_http_response r;
    *status = 0;
    if (ds_http_get(c, path, 30.0, &r)) {
        snprintf(why, n, "%s", r.error);
        ds_http_response_free(&r);
        return NULL;
    }
    *status = r.status;
    cJSON *j = cJSON_Parse(r.body);
    if (!j) snprintf(why, n, "%s answered HTTP %ld with no JSON: %.120s", path, r.status, r.body);
    ds_http_response_free(&r);
    return j;
}

static int json_int(const cJSON *o, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return (int)ds_io_json_int_or(v, INT32_MIN, INT32_MAX, def);
}

/* /health, /v1/models, /server_info (TOOLS.md §0).  0 ok, else the exit status. */
static int check_server(bench_run *r) {
    const bench_opts *o = r->o;
    char why[512] = "";
    long st;
    cJSON *h = get_json(&r->http, "/health", &st, why, sizeof why);
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(h, "status");
    if (!h && st == 0) { fprintf(stderr, "dsflash bench: server unreachable: %s\n", why); return 3; }
    if (st != 200 || !cJSON_IsString(hs) || strcmp(hs->valuestring, "ok")) {
        fprintf(stderr, "dsflash bench: %s/health did not answer {\"status\":\"ok\"} (HTTP %ld)%s%s\n", o->base_url, st,
                why[0] ? ": " : "", why);
        cJSON_Delete(h);
        return 1;
    }
    cJSON_Delete(h);
    cJSON *m = get_json(&r->http, "/v1/models", &st, why, sizeof why);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(m, "data"), *it;
    bool found = false;
    cJSON_ArrayForEach(it, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsString(id)) continue;
        if (!r->model[0] && !o->model) snprintf(r->model, sizeof r->model, "%s", id->valuestring);
        if (o->model && !strcmp(o->model, id->valuestring)) found = true;
    }
    if (o->model && found) snprintf(r->model, sizeof r->model, "%s", o->model);
    cJSON_Delete(m);
    if (!r->model[0] || (o->model && !found)) {
        fprintf(stderr, "dsflash bench: %s/v1/models (HTTP %ld) %s%s\n", o->base_url, st,
                o->model ? "does not list --model " : "lists no model id", o->model ? o->model : "");
        return 1;
    }
    cJSON *info = get_json(&r->http, "/server_info", &st, why, sizeof why);
    r->server_max_num_seqs = r->server_spec_tokens = -1;
    if (st == 200 && cJSON_IsObject(info)) {
        r->server_info_json = cJSON_PrintUnformatted(info);
        const cJSON *iid = cJSON_GetObjectItemCaseSensitive(info, "instance_id");
        if (cJSON_IsString(iid)) snprintf(r->instance_id, sizeof r->instance_id, "%s", iid->valuestring);
        r->server_max_num_seqs = json_int(info, "max_num_seqs", -1);
        r->server_spec_tokens = json_int(info, "num_speculative_tokens", -1);
    } else {
        printf("note: %s/server_info not available (HTTP %ld): no server flags or instance id recorded\n", o->base_url, st);
    }
    cJSON_Delete(info);
    int top = 0;
    for (int i = 0; i < o->n_levels; i++) top = DS_MAX(top, o->levels[i]);
    if (r->server_max_num_seqs > 0 && r->server_max_num_seqs < top) {
        fprintf(stderr, "dsflash bench: the server's max_num_seqs %d is below the largest --concurrency %d\n",
                r->server_max_num_seqs, top);
        return 1;
    }
    return 0;
}

static bool reset_prefix_cache(bench_run *r) {
    ds_http_response resp;
    int rc = ds_http_post_json(&r->http, "/reset_prefix_cache", "{}", 60.0, &resp);
    bool ok = !rc && resp.status == 200;
    ds_http_response_free(&resp);
    return ok;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Distinct token bigrams / bigrams of one output (token ids from /tokenize). */
static double uniq2(const bench_run *r, const char *text) {
    int *ids = NULL, n = 0;
    char why[256];
    if (bench_tokenize(r, text, false, &ids, &n, why, sizeof why) < 0 || !ids) { free(ids); return NAN; }
    if (n < 2) { free(ids); return 1.0; }
    uint64_t *bg = ds_xmalloc(sizeof(uint64_t) * (size_t)(n - 1));
    for (int i = 0; i + 1 < n; i++) bg[i] = (uint64_t)(uint32_t)ids[i] << 32 | (uint32_t)ids[i + 1];
    qsort(bg, (size_t)(n - 1), sizeof(uint64_t), cmp_u64);
    int distinct = 0;
    for (int i = 0; i + 1 < n; i++) distinct += i == 0 || bg[i] != bg[i - 1];
    free(bg);
    free(ids);
    return (double)distinct / (n - 1);
}

static char *first_chars(const char *s, size_t n_cp) {
    size_t i = 0, k = 0;
    while (s[i] && k < n_cp) { i++; while (((unsigned char)s[i] >> 6) == 2) i++; k++; }
    char *o = ds_xmalloc(i + 1);
    memcpy(o, s, i);
    o[i] = 0;
    return o;
}

/* Level metrics of one repeat from its requests (res[0..n), batches of conc) and counter deltas. */
static void level_row(bench_run *r, int conc, bench_result *res, int n, double e2e_wall, const bench_counters *c0,
                      const bench_counters *c1, bench_row *row) {
    memset(row, 0, sizeof *row);
    row->conc = conc;
    double *ps = ds_xmalloc(sizeof(double) * n), *tt = ds_xmalloc(sizeof(double) * n);
    double *tp = ds_xmalloc(sizeof(double) * n), *u2 = ds_xmalloc(sizeof(double) * n);
    int nps = 0, ntt = 0, nu2 = 0, n_itl = 0;
    double sum_out = 0, decode_wall = 0, ps_sum = 0;
    for (int i = 0; i < n; i++) n_itl += res[i].ok ? res[i].n_gaps : 0;
    double *itl = ds_xmalloc(sizeof(double) * (size_t)(n_itl + 1));
    n_itl = 0;
    for (int b = 0; b < n; b += conc) {
        double lo = INFINITY, hi = -INFINITY;
        for (int i = b; i < DS_MIN(n, b + conc); i++) {
            bench_result *x = &res[i];
            if (!x->ok) { row->fail++; continue; }
            row->ok++;
            sum_out += x->n_out;
            lo = DS_MIN(lo, x->t_first), hi = DS_MAX(hi, x->t_last);
            tt[ntt++] = x->t_first - x->t0;
            if (x->n_out > 1 && x->t_last > x->t_first) {
                ps[nps] = (x->n_out - 1) / (x->t_last - x->t_first);
                tp[nps] = 1000.0 / ps[nps];
                ps_sum += ps[nps++];
            }
            for (int g = 0; g < x->n_gaps; g++) itl[n_itl++] = 1000.0 * x->gaps[g];
            if (x->usage_prompt >= 0 && x->usage_prompt != r->prompts.p[i].tokens) row->prompt_len_mismatch = true;
            double u = uniq2(r, x->text);
            if (!isnan(u)) u2[nu2++] = u;
            for (int s = 0; s < 2; s++)
                if (!row->samples[s]) { row->samples[s] = first_chars(x->text, 300); break; }
        }
        if (hi > lo) decode_wall += hi - lo;
    }
    row->per_stream_med = bench_median(ps, nps);
    row->per_stream_mean = nps ? ps_sum / nps : NAN;
    row->decode_wall = decode_wall;
    row->e2e_wall = e2e_wall;
    row->total_decode = decode_wall > 0 ? sum_out / decode_wall : NAN;
    row->total_e2e = e2e_wall > 0 ? sum_out / e2e_wall : NAN;
    row->ttft_med = bench_median(tt, ntt);
    static const double q[3] = {50, 90, 99};
    for (int k = 0; k < 3; k++) {
        row->ttft_p[k] = bench_percentile(tt, ntt, q[k]);
        row->tpot_ms_p[k] = bench_percentile(tp, nps, q[k]);
        row->itl_ms_p[k] = bench_percentile(itl, n_itl, q[k]);
    }
    row->uniq2_med = bench_median(u2, nu2);
    double d_acc = c1->accepted - c0->accepted, d_drafts = c1->drafts - c0->drafts;
    double d_dtok = c1->draft_tokens - c0->draft_tokens;
    row->accept_len = 1.0;
    if (c1->has_drafts && c1->has_accepted && d_drafts > 0) row->accept_len = 1.0 + d_acc / d_drafts;
    else if (c1->has_draft_tokens && c1->has_accepted && d_dtok > 0 && r->spec_tokens_used > 0)
        row->accept_len = d_acc / d_dtok * r->spec_tokens_used + 1.0;
    row->accept_rate = d_dtok > 0 ? d_acc / d_dtok : 0.0;
    row->decode_step_ms = 1000.0 * row->accept_len / row->per_stream_med;
    row->prefix_hit_tokens = c1->prefix_hits - c0->prefix_hits;
    row->n_reps = 1;
    free(ps), free(tt), free(tp), free(u2), free(itl);
}

/* Median of field `f` over the repeats. */
#define MED(f) do { for (int k = 0; k < n; k++) v[k] = reps[k].f; out->f = bench_median(v, n); } while (0)

static void median_row(bench_row *reps, int n, bench_row *out) {
    double v[64];
    *out = (bench_row){.conc = reps[0].conc, .ok = reps[0].ok, .fail = reps[0].fail, .n_reps = n};
    MED(per_stream_med); MED(per_stream_mean); MED(total_decode); MED(total_e2e); MED(ttft_med);
    MED(decode_wall); MED(e2e_wall); MED(accept_len); MED(accept_rate);
    MED(prefix_hit_tokens); MED(uniq2_med);
    for (int q = 0; q < 3; q++) { MED(ttft_p[q]); MED(tpot_ms_p[q]); MED(itl_ms_p[q]); }
    for (int k = 0; k < n; k++) {
        out->ok = DS_MIN(out->ok, reps[k].ok);          /* the worst repeat's counts */
        out->fail = DS_MAX(out->fail, reps[k].fail);
        out->prompt_len_mismatch |= reps[k].prompt_len_mismatch;
    }
    /* derived from the reported medians, so the row is self-consistent (a median of ratios is not
     * the ratio of the medians) */
    out->decode_step_ms = 1000.0 * out->accept_len / out->per_stream_med;
    out->prefix_reuse = out->prefix_hit_tokens > 0;
    out->degenerate = out->accept_len > 3.5 || out->uniq2_med < 0.5;
    for (int s = 0; s < 2; s++) {
        out->samples[s] = reps[0].samples[s];
        reps[0].samples[s] = NULL;
    }
    for (int k = 0; k < n; k++)
        for (int s = 0; s < 2; s++) { free(reps[k].samples[s]); reps[k].samples[s] = NULL; }
}

/* One (level, repeat): idle, reset, scrape, batches of conc, scrape.  -1 when interrupted. */
static int run_level(bench_run *r, int conc, ds_progress *pg, bench_row *row) {
    const int n = r->prompts.n;
    if (bench_wait_idle(r, r->o->timeout_s)) fprintf(stderr, "dsflash bench: warning: server still busy after %.0f s\n", r->o->timeout_s);
    if (r->reset_available && !reset_prefix_cache(r)) fprintf(stderr, "dsflash bench: warning: /reset_prefix_cache failed\n");
    bench_counters c0, c1;
    bench_scrape(r, &c0);
    bench_result *res = ds_xcalloc((size_t)n, sizeof(bench_result));
    const char **texts = ds_xmalloc(sizeof(char *) * (size_t)n);
    for (int i = 0; i < n; i++) texts[i] = r->prompts.p[i].text;
    double t_start = ds_now();
    for (int b = 0; b < n && !__atomic_load_n(&g_cancel, __ATOMIC_RELAXED); b += conc) {
        if (b) bench_wait_idle(r, r->o->timeout_s);
        bench_send_batch(r, texts + b, DS_MIN(conc, n - b), r->o->output_tokens, res + b);
        ds_progress_add(pg, (uint64_t)DS_MIN(conc, n - b));
    }
    double e2e = ds_now() - t_start;
    bench_scrape(r, &c1);
    int rc = __atomic_load_n(&g_cancel, __ATOMIC_RELAXED) ? -1 : 0;
    if (!rc) level_row(r, conc, res, n, e2e, &c0, &c1, row);
    for (int i = 0; i < n; i++) {
        if (!res[i].ok && !rc && i < 3) fprintf(stderr, "dsflash bench: c=%d request %d failed: %s\n", conc, i, res[i].why);
        bench_result_free(&res[i]);
    }
    free(res);
    free(texts);
    return rc;
}

static int warm_up(bench_run *r) {
    size_t n = strlen(r->prompts.p[0].text);
    char *p = ds_xmalloc(n + 16);
    snprintf(p, n + 16, "[warmup] %s", r->prompts.p[0].text + strlen("[req-00000] "));
    const char *texts[1] = {p};
    bench_result res;
    bench_send_batch(r, texts, 1, r->o->warmup_tokens, &res);
    int rc = 0;
    if (!res.ok) { fprintf(stderr, "dsflash bench: warm-up request failed: %s\n", res.why); rc = 1; }
    bench_result_free(&res);
    free(p);
    return rc;
}

/* Re-check instance id and kernel fallbacks (TOOLS.md §0, §4.6 rule 7). */
static void final_checks(bench_run *r) {
    r->valid = true;
    if (r->instance_id[0]) {
        char why[256];
        long st;
        cJSON *info = get_json(&r->http, "/server_info", &st, why, sizeof why);
        const cJSON *iid = cJSON_GetObjectItemCaseSensitive(info, "instance_id");
        if (!cJSON_IsString(iid) || strcmp(iid->valuestring, r->instance_id)) {
            r->valid = false;
            snprintf(r->invalid_why, sizeof r->invalid_why, "the server's instance_id changed during the run (%s -> %s): it restarted",
                     r->instance_id, cJSON_IsString(iid) ? iid->valuestring : "none");
        }
        cJSON_Delete(info);
    }
    bench_counters c;
    if (r->valid && !bench_scrape(r, &c) && c.has_fallback && c.kernel_fallback > 0) {
        r->valid = false;
        snprintf(r->invalid_why, sizeof r->invalid_why, "kernel_fallback_total is %.0f at the end of the run (must be 0)",
                 c.kernel_fallback);
    }
}

static int sweep(bench_run *r) {
    const bench_opts *o = r->o;
    ds_progress pg;
    ds_progress_init_count(&pg, "bench", (uint64_t)o->n_levels * o->repeats * r->prompts.n, "req", false);
    bench_row reps[64];
    int rc = 0;
    for (int l = 0; l < o->n_levels && !rc; l++) {
        for (int k = 0; k < o->repeats && !rc; k++) {
            ds_progress_stage(&pg, "c=%d rep %d/%d", o->levels[l], k + 1, o->repeats);
            rc = run_level(r, o->levels[l], &pg, &reps[k]);
            if (rc) while (k-- > 0) for (int s = 0; s < 2; s++) free(reps[k].samples[s]);
        }
        if (!rc) median_row(reps, o->repeats, &r->rows[l]);
    }
    ds_progress_finish(&pg);
    ds_progress_destroy(&pg);
    if (rc) { fprintf(stderr, "dsflash bench: interrupted; no result written\n"); return 1; }
    const bench_row *one = NULL;
    for (int l = 0; l < o->n_levels; l++) if (r->rows[l].conc == 1) one = &r->rows[l];
    for (int l = 0; l < o->n_levels && one; l++) {
        r->rows[l].speedup = r->rows[l].total_decode / one->total_decode;
        r->rows[l].efficiency = r->rows[l].per_stream_med / one->per_stream_med;
        r->rows[l].has_speedup = r->rows[l].has_efficiency = true;
    }
    return 0;
}

static void utc_now(char *iso, size_t n_iso, char *compact, size_t n_compact) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(iso, n_iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
    strftime(compact, n_compact, "%Y%m%dT%H%M%SZ", &tm);
}

static void run_free(bench_run *r) {
    bench_prompts_free(&r->prompts);
    for (int l = 0; l < BENCH_MAX_LEVELS; l++) for (int s = 0; s < 2; s++) free(r->rows[l].samples[s]);
    free(r->server_info_json);
}

int bench_http_run(const bench_opts *o) {
    bench_run r = {.o = o};
    char why[512], compact[32], json_path[1024];
    utc_now(r.started_utc, sizeof r.started_utc, compact, sizeof compact);
    g_cancel = 0;
    signal(SIGINT, on_sigint);
    if (ds_http_client_init(&r.http, o->base_url, o->api_key, &g_cancel, why, sizeof why)) {
        fprintf(stderr, "dsflash bench: --base-url: %s\n", why);
        return 2;
    }
    if (ds_http_client_init(&r.tok_http, o->tokenize_url ? o->tokenize_url : o->base_url, o->api_key, &g_cancel, why, sizeof why)) {
        fprintf(stderr, "dsflash bench: --tokenize-url: %s\n", why);
        return 2;
    }
    if (o->json_out) snprintf(json_path, sizeof json_path, "%s", o->json_out);
    else snprintf(json_path, sizeof json_path, "bench-%s-%s.json", o->label, compact);
    int rc = check_server(&r);
    r.spec_tokens_used = o->spec_tokens > 0 ? o->spec_tokens : DS_MAX(r.server_spec_tokens, 0);
    if (!rc) {
        printf("server %s: model %s, instance %s, max_num_seqs %d\n", o->base_url, r.model,
               r.instance_id[0] ? r.instance_id : "(none)", r.server_max_num_seqs);
        rc = bench_build_prompts(&r);
    }
    if (!rc && !strcmp(o->reset_prefix_cache, "auto")) {
        r.reset_available = reset_prefix_cache(&r);
        if (!r.reset_available)
            printf("note: the server does not expose /reset_prefix_cache: repeated prompts may hit its prefix cache"
                   " (rows get the prefix_reuse flag)\n");
    }
    if (!rc) rc = warm_up(&r);
    if (!rc) rc = sweep(&r);
    if (!rc) {
        final_checks(&r);
        bench_print_table(&r, stdout);
        rc = bench_write_json(&r, json_path);
        if (!rc) printf("result: %s\n", json_path);
        if (!rc && o->plot_dir) {
            const char *files[1] = {json_path};
            rc = bench_plot_files(files, 1, o->plot_dir, "conc", stdout);
        }
        if (!rc && !r.valid) { fprintf(stderr, "dsflash bench: the run is INVALID: %s\n", r.invalid_why); rc = 1; }
        for (int l = 0; l < o->n_levels && !rc; l++)
            if (r.rows[l].fail > 0) { fprintf(stderr, "dsflash bench: %d request(s) failed at c=%d\n", r.rows[l].fail, r.rows[l].conc); rc = 1; }
    }
    signal(SIGINT, SIG_DFL);
    run_free(&r);
    return rc;
}
