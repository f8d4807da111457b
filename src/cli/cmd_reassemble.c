/* dsflash reassemble [DIR] [--dir DIR] [--target NAME]... [--check-only] [--delete-parts] [--replace]
 *                    [--no-readback] [--no-resume] [--jobs N] [--quiet]
 * Option parsing only (TOOLS.md §0: long options, exact matches, usage + exit 2 on anything else);
 * the work is in src/tools/reassemble.c.  DIR may be given positionally (the form) or with
 * --dir (TOOLS.md's form); giving two different directories is a usage error. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/reassemble.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: dsflash reassemble [DIR | --dir DIR] [--target NAME]... [--check-only] [--delete-parts]\n"
               "                          [--replace] [--no-readback] [--no-resume] [--jobs N] [--quiet]\n"
               "Rebuilds each target listed in DIR/PARTS.sha256 from its parts, verifying every part and the\n"
               "whole file.  Exit: 0 ok, 1 verification failed, 2 usage, 3 I/O, 4 lock held, 5 input missing,\n"
               "10 --check-only found work to do.\n");
}

static volatile sig_atomic_t g_stop;

int cmd_reassemble(int argc, char **argv) {
    ds_reassemble_opts o;
    ds_reassemble_opts_default(&o);
    const char *dir = NULL;
    const char **targets = calloc((size_t)argc, sizeof *targets);
    int nt = 0;
    bool jobs_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        bool takes = !strcmp(a, "--dir") || !strcmp(a, "--target") || !strcmp(a, "--jobs");
        if (takes) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dsflash reassemble: option %s needs a value\n", a);
                goto bad;
            }
            val = argv[++i];
        }
        if (!strcmp(a, "--help")) { usage(stdout); free(targets); return 0; }
        else if (!strcmp(a, "--check-only")) o.check_only = true;
        else if (!strcmp(a, "--delete-parts")) o.delete_parts = true;
        else if (!strcmp(a, "--replace")) o.replace = true;
        else if (!strcmp(a, "--no-readback")) o.readback = false;
        else if (!strcmp(a, "--no-resume")) o.resume = false;
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else if (!strcmp(a, "--target")) targets[nt++] = val;
        else if (!strcmp(a, "--jobs")) {
            int64_t j;
            if (ds_parse_int_range(val, 1, 16, &j)) {
                fprintf(stderr, "dsflash reassemble: --jobs: expected an integer in [1, 16] (each job holds two 64 MiB buffers), got '%s'\n", val);
                goto bad;
            }
            o.jobs = (int)j;
            jobs_given = true;
        } else if (!strcmp(a, "--dir") || (a[0] != '-' && a[0])) {
            const char *d = val ? val : a;
            if (dir && strcmp(dir, d) != 0) {
                fprintf(stderr, "dsflash reassemble: two directories given ('%s' and '%s')\n", dir, d);
                goto bad;
            }
            dir = d;
        } else {
            fprintf(stderr, "dsflash reassemble: unknown option '%s'\n", a);
            goto bad;
        }
    }
    if (jobs_given && !o.check_only) {
        /* a rebuild reads the parts in order; only --check-only hashes them in parallel */
        fprintf(stderr, "dsflash reassemble: --jobs: applies to --check-only only (a rebuild reads the parts in order), got '%d'\n", o.jobs);
        goto bad;
    }
    if (o.check_only && o.delete_parts) {
        fprintf(stderr, "dsflash reassemble: --check-only writes nothing; it cannot be combined with --delete-parts\n");
        goto bad;
    }
    if (dir) o.dir = dir;
    o.targets = targets;
    o.n_targets = nt;
    o.stop = &g_stop;
    ds_tool_install_stop_handlers(&g_stop);
    int rc = ds_reassemble_run(&o);
    free(targets);
    return rc;
bad:
    usage(stderr);
    free(targets);
    return 2;
}
