/* dsflash verify DIR [--deep] [--samples N] [--compare OTHER_DIR] [--profile auto|v41-flash-w4a8|none]
 *                    [--json-out FILE]
 * Option parsing only (TOOLS.md §0: long options, exact matches, usage + exit 2 on anything else);
 * the checks are in src/tools/verify*.c. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/verify.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: dsflash verify DIR [--deep] [--samples N] [--compare OTHER_DIR] [--profile auto|v41-flash-w4a8|none]\n"
               "                      [--json-out FILE]\n"
               "Structural checkpoint verifier.  Exit: 0 pass (warnings allowed), 1 a check failed,\n"
               "2 usage, 5 DIR missing, 10 an Engram table still needs `dsflash reassemble`.\n");
}

int cmd_verify(int argc, char **argv) {
    ds_verify_opts o;
    ds_verify_opts_default(&o);
    size_t cl = 1;
    for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 1;
    char *cmdline = calloc(cl + 16, 1);
    strcpy(cmdline, "dsflash");
    for (int i = 0; i < argc; i++) { strcat(cmdline, " "); strcat(cmdline, argv[i]); }
    o.cmdline = cmdline;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (!strcmp(a, "--samples") || !strcmp(a, "--compare") || !strcmp(a, "--profile") || !strcmp(a, "--json-out")) {
            if (i + 1 >= argc) { fprintf(stderr, "dsflash verify: option %s needs a value\n", a); goto bad; }
            val = argv[++i];
        }
        if (!strcmp(a, "--help")) { usage(stdout); free(cmdline); return 0; }
        else if (!strcmp(a, "--deep")) o.deep = true;
        else if (!strcmp(a, "--compare")) o.compare_dir = val;
        else if (!strcmp(a, "--json-out")) o.json_out = val;
        else if (!strcmp(a, "--samples")) {
            int64_t n;
            if (ds_parse_int_range(val, 1, 1000000, &n)) {
                fprintf(stderr, "dsflash verify: --samples: expected an integer in [1, 1000000], got '%s'\n", val);
                goto bad;
            }
            o.samples = (int)n;
        } else if (!strcmp(a, "--profile")) {
            if (!strcmp(val, "auto")) o.profile = DS_PROFILE_AUTO;
            else if (!strcmp(val, "v41-flash-w4a8")) o.profile = DS_PROFILE_V41;
            else if (!strcmp(val, "none")) o.profile = DS_PROFILE_NONE;
            else { fprintf(stderr, "dsflash verify: --profile %s: expected auto, v41-flash-w4a8 or none\n", val); goto bad; }
        } else if (a[0] != '-' && a[0] && !o.dir) {
            o.dir = a;
        } else {
            fprintf(stderr, "dsflash verify: %s '%s'\n", a[0] == '-' ? "unknown option" : "unexpected argument", a);
            goto bad;
        }
    }
    if (!o.dir) { fprintf(stderr, "dsflash verify: DIR is required\n"); goto bad; }
    int rc = ds_verify_run(&o);
    free(cmdline);
    return rc;
bad:
    usage(stderr);
    free(cmdline);
    return 2;
}
