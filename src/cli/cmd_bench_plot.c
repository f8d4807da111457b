/* dsflash bench-plot FILE.json... -o DIR [--prefix conc] [--format svg|png] (TOOLS.md §4.5).
 *
 * Why `-o` is accepted although options are long-only (§0): the spec names it so; it is rewritten
 * to its long form `--out` before the one flag parser sees the arguments, so the exact-match rule
 * still holds for everything else.  PNG would need a rasteriser this build does not carry: the
 * flag exists and refuses any value but svg. */
#include "cli/commands.h"
#include "tools/bench_plot.h"
#include "base/flags.h"
#include <stdio.h>
#include <string.h>

static ds_flag k_flags[] = {
    {.name = "--out", .type = DS_FLAG_STRING, .help = "output directory (also -o); created if missing (required)"},
    {.name = "--prefix", .type = DS_FLAG_STRING, .def = "conc", .help = "writes PREFIX.svg and PREFIX.csv"},
    {.name = "--format", .type = DS_FLAG_ENUM, .def = "svg", .choices = "svg|png",
     .refuse = "PNG output needs a rasteriser this build does not include; open the SVG in a browser"},
};

int cmd_bench_plot(int argc, char **argv) {
    char *args[64];
    if (argc > 64) { fprintf(stderr, "dsflash bench-plot: too many arguments\n"); return 2; }
    for (int i = 0; i < argc; i++) args[i] = !strcmp(argv[i], "-o") && i > 0 ? "--out" : argv[i];
    ds_flagset fs = {.cmd = "dsflash bench-plot", .flags = k_flags, .n = DS_ARRAY_LEN(k_flags),
                     .max_positional = BENCH_PLOT_MAX_FILES, .positional_name = "FILE.json",
                     .usage = "usage: dsflash bench-plot FILE.json... -o DIR [--prefix conc] [--format svg]\n"
                              "  per-stream tok/s, aggregate tok/s and TTFT against concurrency, one series per file"};
    int rc = ds_flags_parse(&fs, argc, args, 1, stderr);
    if (rc) return rc == 1 ? 0 : 2;
    const char *dir = ds_flag_str(&fs, "--out"), *prefix = ds_flag_str(&fs, "--prefix");
    if (!fs.n_positional) return ds_flags_fail(&fs, "FILE.json", "at least one bench result file is required");
    if (!dir) return ds_flags_fail(&fs, "--out", "required (-o DIR: where the SVG and CSV go)");
    if (strchr(prefix, '/')) return ds_flags_fail(&fs, "--prefix", "a file name prefix without '/', got '%s'", prefix);
    return bench_plot_files(fs.positional, fs.n_positional, dir, prefix, stdout);
}
