/* dsflash bench: the HTTP concurrency benchmark client of TOOLS.md §4 (src/tools/bench_*.c), for
 * any OpenAI-compatible server.
 *
 * Why the old mode names are refused rather than kept: `bench kernels|decode|serve` were the
 * in-process benchmarks, now `dsflash perf …`.  Accepting them here would make `bench` mean two
 * different tools depending on the first word; an old script gets an error naming the new command
 * instead of a silent change of meaning. */
#include "cli/commands.h"
#include "tools/bench_client.h"
#include "base/flags.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ds_flag k_flags[] = {
    {.name = "--base-url", .type = DS_FLAG_STRING, .def = "http://127.0.0.1:8000"},
    {.name = "--tokenize-url", .type = DS_FLAG_STRING, .help = "base URL of a /tokenize endpoint; default --base-url"},
    {.name = "--model", .type = DS_FLAG_STRING, .help = "default /v1/models data[0].id; must be served"},
    {.name = "--api-key", .type = DS_FLAG_STRING, .help = "bearer key (also DSFLASH_API_KEY)"},
    {.name = "--concurrency", .type = DS_FLAG_STRING, .def = "1,2,4,8,16,32,64", .help = "levels, e.g. 1,2,4,8"},
    {.name = "--prompt-tokens", .type = DS_FLAG_INT, .def = "1024", .lo = 1, .hi = 1 << 20},
    {.name = "--output-tokens", .type = DS_FLAG_INT, .def = "256", .lo = 1, .hi = 1 << 20},
    {.name = "--repeats", .type = DS_FLAG_INT, .def = "2", .lo = 1, .hi = 64, .help = "medians over repeats"},
    {.name = "--timeout", .type = DS_FLAG_DOUBLE, .def = "900", .dlo = 0, .dhi = 86400, .lo_open = true,
     .help = "seconds per request"},
    {.name = "--json-out", .type = DS_FLAG_STRING, .help = "default bench-<label>-<utc>.json"},
    {.name = "--label", .type = DS_FLAG_STRING, .def = "run"},
    {.name = "--no-ignore-eos", .type = DS_FLAG_SWITCH, .help = "send ignore_eos false (default true)"},
    {.name = "--corpus-file", .type = DS_FLAG_STRING, .help = "long UTF-8 natural-language text (required)"},
    {.name = "--corpus-mark", .type = DS_FLAG_STRING, .help = "the corpus starts after the first line equal to this"},
    {.name = "--keep-preamble", .type = DS_FLAG_SWITCH, .help = "do not skip front matter"},
    {.name = "--suffix-dir", .type = DS_FLAG_STRING, .help = "question suffix files (sorted); default built-in set"},
    {.name = "--warmup-tokens", .type = DS_FLAG_INT, .def = "32", .lo = 1, .hi = 1 << 20},
    {.name = "--spec-tokens", .type = DS_FLAG_INT, .def = "0", .lo = 0, .hi = 64,
     .help = "S of the fallback acceptance formula; 0: the server's num_speculative_tokens"},
    {.name = "--reset-prefix-cache", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|off"},
    {.name = "--plot", .type = DS_FLAG_STRING, .help = "directory: writes conc.svg and conc.csv (bench-plot)"},
};

/* "1,2,4" -> levels, each in [1, 4096], at most BENCH_MAX_LEVELS, no duplicates. */
static int parse_levels(ds_flagset *fs, const char *s, bench_opts *o) {
    o->n_levels = 0;
    const char *p = s;
    for (;;) {
        char item[32];
        size_t len = strcspn(p, ",");
        int64_t v;
        snprintf(item, sizeof item, "%.*s", (int)DS_MIN(len, sizeof item - 1), p);
        if (len == 0 || len >= sizeof item || ds_parse_int_range(item, 1, 4096, &v))
            return ds_flags_fail(fs, "--concurrency", "expected integers in [1, 4096] separated by commas, got '%s'", s);
        if (o->n_levels == BENCH_MAX_LEVELS) return ds_flags_fail(fs, "--concurrency", "at most %d levels", BENCH_MAX_LEVELS);
        for (int i = 0; i < o->n_levels; i++)
            if (o->levels[i] == v) return ds_flags_fail(fs, "--concurrency", "level %d given twice in '%s'", (int)v, s);
        o->levels[o->n_levels++] = (int)v;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

static char *join_args(int argc, char **argv) {
    size_t n = 16;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 1;
    char *s = ds_xmalloc(n), *w = s;
    w += sprintf(w, "dsflash");
    for (int i = 0; i < argc; i++) w += sprintf(w, " %s", argv[i]);
    return s;
}

int cmd_bench(int argc, char **argv) {
    static const char *const old[] = {"kernels", "decode", "serve"};
    for (size_t i = 0; argc > 1 && i < DS_ARRAY_LEN(old); i++)
        if (!strcmp(argv[1], old[i])) {
            fprintf(stderr, "dsflash bench: '%s' is an in-process benchmark, now `dsflash perf %s`; "
                            "`dsflash bench` is the HTTP concurrency client (dsflash bench --help)\n", old[i], old[i]);
            return 2;
        }
    ds_flagset fs = {.cmd = "dsflash bench", .flags = k_flags, .n = DS_ARRAY_LEN(k_flags),
                     .usage = "usage: dsflash bench --corpus-file FILE [--base-url URL] [--concurrency 1,2,4,...] [flags]\n"
                              "  concurrency benchmark of an OpenAI-compatible server; JSON to --json-out"};
    int rc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (rc) return rc == 1 ? 0 : 2;
    bench_opts o = {
        .base_url = ds_flag_str(&fs, "--base-url"), .tokenize_url = ds_flag_str(&fs, "--tokenize-url"),
        .model = ds_flag_str(&fs, "--model"), .json_out = ds_flag_str(&fs, "--json-out"),
        .label = ds_flag_str(&fs, "--label"), .corpus_file = ds_flag_str(&fs, "--corpus-file"),
        .corpus_mark = ds_flag_str(&fs, "--corpus-mark"), .suffix_dir = ds_flag_str(&fs, "--suffix-dir"),
        .api_key = ds_flag_str(&fs, "--api-key"), .plot_dir = ds_flag_str(&fs, "--plot"),
        .reset_prefix_cache = ds_flag_str(&fs, "--reset-prefix-cache"),
        .prompt_tokens = (int)ds_flag_int(&fs, "--prompt-tokens"), .output_tokens = (int)ds_flag_int(&fs, "--output-tokens"),
        .repeats = (int)ds_flag_int(&fs, "--repeats"), .warmup_tokens = (int)ds_flag_int(&fs, "--warmup-tokens"),
        .spec_tokens = (int)ds_flag_int(&fs, "--spec-tokens"), .timeout_s = ds_flag_double(&fs, "--timeout"),
        .ignore_eos = !ds_flag_on(&fs, "--no-ignore-eos"), .keep_preamble = ds_flag_on(&fs, "--keep-preamble"),
    };
    if (!o.api_key) o.api_key = getenv("DSFLASH_API_KEY");
    if (parse_levels(&fs, ds_flag_str(&fs, "--concurrency"), &o)) return 2;
    if (!o.corpus_file) return ds_flags_fail(&fs, "--corpus-file", "required (a long UTF-8 natural-language text)");
    if (o.corpus_mark && o.keep_preamble)
        return ds_flags_fail(&fs, "--keep-preamble", "contradicts --corpus-mark (which skips the front matter)");
    if (strpbrk(o.label, "/\\")) return ds_flags_fail(&fs, "--label", "must not contain '/' or '\\', got '%s'", o.label);
    char *cmdline = join_args(argc, argv);
    o.command_line = cmdline;
    rc = bench_http_run(&o);
    free(cmdline);
    return rc;
}
