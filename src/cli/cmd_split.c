/* dsflash split FILE [--part-size 16GiB] [--out-dir DIR] [--no-verify] [--jobs N] [--quiet]
 * Option parsing only (TOOLS.md §0: long options, exact matches, usage + exit 2 on anything else);
 * the work is in src/tools/split.c. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/reassemble.h"
#include "tools/split.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: dsflash split FILE [--part-size SIZE] [--out-dir DIR] [--no-verify] [--jobs N] [--quiet]\n"
               "Cuts FILE into FILE.part-NN-of-MM (default --part-size 16GiB; K/M/G/T and KiB.. are powers of\n"
               "1024, KB/MB/GB/TB powers of 1000) and records their sha256 in DIR/PARTS.sha256.\n"
               "Exit: 0 ok, 1 verification failed, 2 usage, 3 I/O, 4 lock held, 5 input missing.\n");
}

static volatile sig_atomic_t g_stop;

int cmd_split(int argc, char **argv) {
    ds_split_opts o;
    ds_split_opts_default(&o);
    const char *file = NULL;
    char why[256];
    bool jobs_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (!strcmp(a, "--part-size") || !strcmp(a, "--out-dir") || !strcmp(a, "--jobs")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dsflash split: option %s needs a value\n", a);
                goto bad;
            }
            val = argv[++i];
        }
        if (!strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--no-verify")) o.verify = false;
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else if (!strcmp(a, "--out-dir")) o.out_dir = val;
        else if (!strcmp(a, "--part-size")) {
            if (ds_parse_size(val, &o.part_size, why, sizeof why) != 0) {
                fprintf(stderr, "dsflash split: --part-size %s\n", why);
                goto bad;
            }
        } else if (!strcmp(a, "--jobs")) {
            int64_t j;
            if (ds_parse_int_range(val, 1, 16, &j)) {
                fprintf(stderr, "dsflash split: --jobs: expected an integer in [1, 16] (each job holds two 64 MiB buffers), got '%s'\n", val);
                goto bad;
            }
            o.jobs = (int)j;
            jobs_given = true;
        } else if (a[0] != '-' && a[0] && !file) {
            file = a;
        } else {
            fprintf(stderr, "dsflash split: %s '%s'\n", a[0] == '-' ? "unknown option" : "unexpected argument", a);
            goto bad;
        }
    }
    if (jobs_given && !o.verify) {
        fprintf(stderr, "dsflash split: --jobs: sets how many parts are verified at a time, which --no-verify turns off\n");
        goto bad;
    }
    if (!file) {
        fprintf(stderr, "dsflash split: FILE is required\n");
        goto bad;
    }
    o.file = file;
    o.stop = &g_stop;
    ds_tool_install_stop_handlers(&g_stop);
    return ds_split_run(&o);
bad:
    usage(stderr);
    return 2;
}
