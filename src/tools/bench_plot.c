/* bench-plot: the §4.5 figure as SVG and the CSV beside it (contract in bench_plot.h).
 *
 * Layout: three panels sharing a log2 concurrency axis with ticks at the measured levels —
 * per-stream tok/s and aggregate tok/s (the two of §4.5), then median TTFT (latency against
 * concurrency, which the operator reads next to throughput).  One polyline with circle markers per
 * input file, coloured from a fixed palette and named by the file's `label` in the legend.  Every
 * series element carries data-label / data-panel attributes so a test can find it without
 * parsing geometry.  Text uses the generic sans-serif family: no font is embedded or fetched. */
#define _GNU_SOURCE
#include "tools/bench_plot.h"
#include "base/common.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_POINTS 64
#define PANEL_W 380
#define PANEL_H 300
#define MARGIN_L 70
#define TOP 80

typedef struct {
    char label[128], started[40], setting[200];
    int prompt_tokens, output_tokens, n;
    int conc[MAX_POINTS];
    double per_stream[MAX_POINTS], total[MAX_POINTS], ttft[MAX_POINTS], accept[MAX_POINTS], step_ms[MAX_POINTS];
} series;

static const char *const k_palette[BENCH_PLOT_MAX_FILES] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                           "#9467bd", "#8c564b", "#e377c2", "#17becf"};
static const struct { const char *key, *title; } k_panels[3] = {
    {"per_stream", "per-stream tok/s (median)"}, {"total_decode", "aggregate tok/s (decode window)"},
    {"ttft", "TTFT s (median)"}};

static double num_or_nan(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void str_field(const cJSON *o, const char *k, char *dst, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    snprintf(dst, n, "%s", cJSON_IsString(v) ? v->valuestring : "?");
}

/* 0 ok, else the exit status (message printed). */
static int load_series(const char *path, series *s) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "dsflash bench-plot: %s: %s\n", path, strerror(errno)); return errno == ENOENT ? 5 : 3; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = ds_xmalloc((size_t)DS_MAX(len, 0) + 1);
    size_t got = len > 0 ? fread(text, 1, (size_t)len, f) : 0;
    fclose(f);
    text[got] = 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(j, "schema");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    const char *bad = !j ? "not JSON" : !cJSON_IsString(schema) || strcmp(schema->valuestring, "v41-bench/1")
                                              ? "field 'schema' is not \"v41-bench/1\""
                                          : !cJSON_IsArray(rows) || !cJSON_GetArraySize(rows) ? "field 'rows' is not a non-empty array"
                                          : cJSON_GetArraySize(rows) > MAX_POINTS ? "more than 64 rows" : NULL;
    memset(s, 0, sizeof *s);
    const cJSON *row, *walk = bad ? NULL : rows;
    cJSON_ArrayForEach(row, walk) {
        double c = num_or_nan(row, "conc");
        if (!(c >= 1)) { bad = "a row has no positive 'conc'"; break; }
        s->conc[s->n] = (int)c;
        s->per_stream[s->n] = num_or_nan(row, "per_stream_med");
        s->total[s->n] = num_or_nan(row, "total_decode");
        s->ttft[s->n] = num_or_nan(row, "ttft_med");
        s->accept[s->n] = num_or_nan(row, "accept_len");
        s->step_ms[s->n++] = num_or_nan(row, "decode_step_ms");
    }
    if (bad) {
        fprintf(stderr, "dsflash bench-plot: %s: not a bench result: %s\n", path, bad);
        cJSON_Delete(j);
        return 1;
    }
    str_field(j, "label", s->label, sizeof s->label);
    str_field(j, "started_utc", s->started, sizeof s->started);
    s->prompt_tokens = (int)num_or_nan(j, "prompt_tokens");
    s->output_tokens = (int)num_or_nan(j, "output_tokens");
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(j, "server");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(sv, "prefix_caching");
    double mns = num_or_nan(sv, "max_num_seqs"), spec = num_or_nan(sv, "num_speculative_tokens");
    char a[32] = "?", b[32] = "?";
    if (!isnan(mns)) snprintf(a, sizeof a, "%.0f", mns);
    if (!isnan(spec)) snprintf(b, sizeof b, spec > 0 ? "S %.0f" : "off", spec);
    snprintf(s->setting, sizeof s->setting, "max-num-seqs %s, prefix cache %s, speculation %s", a,
             cJSON_IsBool(pc) ? (cJSON_IsTrue(pc) ? "on" : "off") : "?", b);
    cJSON_Delete(j);
    return 0;
}

static void xml_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

static double panel_value(const series *s, int p, int i) {
    return p == 0 ? s->per_stream[i] : p == 1 ? s->total[i] : s->ttft[i];
}

/* A round axis top and step (1, 2 or 5 x 10^k) for values up to vmax. */
static void nice_axis(double vmax, double *top, double *step) {
    if (!(vmax > 0)) vmax = 1;
    double raw = vmax / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    *step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    *top = ceil(vmax / *step) * *step;
}

typedef struct { int levels[MAX_POINTS * BENCH_PLOT_MAX_FILES], n; } level_set;

static double x_of(const level_set *ls, int conc, int x0) {
    double lo = log2(ls->levels[0]), hi = log2(ls->levels[ls->n - 1]);
    double t = hi > lo ? (log2(conc) - lo) / (hi - lo) : 0.5;
    return x0 + 20 + t * (PANEL_W - 40);
}

static void panel(FILE *f, const series *s, int n, const level_set *ls, int p) {
    int x0 = MARGIN_L + p * (PANEL_W + MARGIN_L), y0 = TOP;
    double vmax = 0, top, step;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k].n; i++) if (isfinite(panel_value(&s[k], p, i))) vmax = DS_MAX(vmax, panel_value(&s[k], p, i));
    nice_axis(vmax, &top, &step);
    fprintf(f, "<g class=\"panel\" data-panel=\"%s\">\n", k_panels[p].key);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", x0, y0, PANEL_W, PANEL_H);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", x0 + PANEL_W / 2, y0 - 8,
            k_panels[p].title);
    for (double v = 0; v <= top * 1.0001; v += step) {
        double y = y0 + PANEL_H - v / top * PANEL_H;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y, x0 + PANEL_W, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g</text>\n", x0 - 4, y + 4, v);
    }
    for (int i = 0; i < ls->n; i++) {
        double x = x_of(ls, ls->levels[i], x0);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\"/>\n", x, y0 + PANEL_H, x, y0 + PANEL_H + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%d</text>\n", x, y0 + PANEL_H + 18,
                ls->levels[i]);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\">concurrency (log2)</text>\n",
            x0 + PANEL_W / 2, y0 + PANEL_H + 36);
    for (int k = 0; k < n; k++) {
        fprintf(f, "<polyline class=\"series\" data-label=\"");
        xml_escape(f, s[k].label);
        fprintf(f, "\" data-panel=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", k_panels[p].key, k_palette[k]);
        for (int i = 0; i < s[k].n; i++) {
            double v = panel_value(&s[k], p, i);
            if (isfinite(v)) fprintf(f, "%s%.1f,%.1f", i ? " " : "", x_of(ls, s[k].conc[i], x0), y0 + PANEL_H - v / top * PANEL_H);
        }
        fprintf(f, "\"/>\n");
        for (int i = 0; i < s[k].n; i++) {
            double v = panel_value(&s[k], p, i);
            if (isfinite(v))
                fprintf(f, "<circle class=\"marker\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>c=%d: %.4g</title></circle>\n",
                        x_of(ls, s[k].conc[i], x0), y0 + PANEL_H - v / top * PANEL_H, k_palette[k], s[k].conc[i], v);
        }
    }
    fprintf(f, "</g>\n");
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void write_svg(FILE *f, const series *s, int n) {
    level_set ls = {.n = 0};
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k].n; i++) {
            bool seen = false;
            for (int j = 0; j < ls.n; j++) seen |= ls.levels[j] == s[k].conc[i];
            if (!seen) ls.levels[ls.n++] = s[k].conc[i];
        }
    qsort(ls.levels, (size_t)ls.n, sizeof(int), cmp_int);
    int w = 3 * (PANEL_W + MARGIN_L) + 20, h = TOP + PANEL_H + 60 + 20 * n;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n", w, h, w, h);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%d\" y=\"28\" font-size=\"16\">", MARGIN_L);
    fprintf(f, "dsflash bench: %d prompt / %d output tokens, ", s[0].prompt_tokens, s[0].output_tokens);
    xml_escape(f, s[0].started);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"50\" font-size=\"13\">", MARGIN_L);
    xml_escape(f, s[0].setting);
    fprintf(f, "</text>\n");
    for (int p = 0; p < 3; p++) panel(f, s, n, &ls, p);
    for (int k = 0; k < n; k++) {
        int y = TOP + PANEL_H + 56 + 20 * k;
        fprintf(f, "<g class=\"legend\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                   "<text x=\"%d\" y=\"%d\" font-size=\"12\">", MARGIN_L, y - 4, MARGIN_L + 24, y - 4, k_palette[k], MARGIN_L + 30, y);
        xml_escape(f, s[k].label);
        fprintf(f, " (");
        xml_escape(f, s[k].setting);
        fprintf(f, ")</text></g>\n");
    }
    fprintf(f, "</svg>\n");
}

static void csv_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, ",%.6g", v);
    else fputc(',', f);
}

static void write_csv(FILE *f, const series *s, int n) {
    fprintf(f, "label,conc,per_stream_med,total_decode,ttft_med,accept_len,decode_step_ms\n");
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k].n; i++) {
            bool quote = strpbrk(s[k].label, ",\"\n") != NULL;
            if (quote) {
                fputc('"', f);
                for (const char *c = s[k].label; *c; c++) { if (*c == '"') fputc('"', f); fputc(*c, f); }
                fputc('"', f);
            } else {
                fputs(s[k].label, f);
            }
            fprintf(f, ",%d", s[k].conc[i]);
            csv_num(f, s[k].per_stream[i]), csv_num(f, s[k].total[i]), csv_num(f, s[k].ttft[i]);
            csv_num(f, s[k].accept[i]), csv_num(f, s[k].step_ms[i]);
            fputc('\n', f);
        }
}

/* Write through DIR/NAME.tmp.PID then rename; 0 ok, 3 on an I/O error. */
static int write_file(const char *path, void (*fn)(FILE *, const series *, int), const series *s, int n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) { fprintf(stderr, "dsflash bench-plot: %s: %s\n", tmp, strerror(errno)); return 3; }
    fn(f, s, n);
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        fprintf(stderr, "dsflash bench-plot: %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 3;
    }
    return 0;
}

int bench_plot_files(const char *const *files, int n, const char *dir, const char *prefix, FILE *out) {
    if (n < 1 || n > BENCH_PLOT_MAX_FILES) { fprintf(stderr, "dsflash bench-plot: 1 to %d result files\n", BENCH_PLOT_MAX_FILES); return 2; }
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "dsflash bench-plot: %s: %s\n", dir, strerror(errno));
        return 3;
    }
    series *s = ds_xcalloc((size_t)n, sizeof(series));
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) rc = load_series(files[k], &s[k]);
    char svg[4096], csv[4096];
    snprintf(svg, sizeof svg, "%s/%s.svg", dir, prefix);
    snprintf(csv, sizeof csv, "%s/%s.csv", dir, prefix);
    if (!rc) rc = write_file(svg, write_svg, s, n);
    if (!rc) rc = write_file(csv, write_csv, s, n);
    if (!rc) fprintf(out, "plot: %s\ntable: %s\n", svg, csv);
    free(s);
    return rc;
}
