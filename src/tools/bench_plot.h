/* `dsflash bench-plot` (TOOLS.md §4.5): bench JSON results -> one self-contained SVG figure and a CSV.
 *
 * Why SVG written here: the figure must open in any browser with no plotting stack, no external
 * fonts and no network, and a test must be able to validate it (xmllint) and count its series. */
#ifndef DS_TOOLS_BENCH_PLOT_H
#define DS_TOOLS_BENCH_PLOT_H
#include <stdio.h>

#define BENCH_PLOT_MAX_FILES 8

/* Reads files[0..n) (schema v41-bench/1), writes DIR/PREFIX.svg and DIR/PREFIX.csv (each through a
 * temporary name), and prints their paths to `out`.  Returns the exit status: 0 ok, 1 a file is not
 * a bench result (message names the file and field), 3 I/O error, 5 an input file is missing.
 * DIR is created when missing. */
int bench_plot_files(const char *const *files, int n, const char *dir, const char *prefix, FILE *out);

#endif
