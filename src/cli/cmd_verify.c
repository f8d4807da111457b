/* dsflash verify DIR [--deep] [--samples N] [--compare OTHER_DIR] [--profile auto|v41-flash-w4a8|none]
 *                    [--json-out FILE]
 * Option parsing only, through the flag table (src/base/flags.h; TOOLS.md §0: long options, exact
 * names, usage + exit 2 on anything else); the checks are in src/tools/verify*.c.  The command line
 * is recorded in the JSON result so a report says how it was produced. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/verify.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERIFY_USAGE \
    "usage: dsflash verify DIR [--deep] [--samples N] [--compare OTHER_DIR] [--profile auto|v41-flash-w4a8|none]\n" \
    "                      [--json-out FILE]\n" \
    "Structural checkpoint verifier.  Exit: 0 pass (warnings allowed), 1 a check failed,\n" \
    "2 usage, 5 DIR missing, 10 an Engram table still needs `dsflash reassemble`."

static ds_flag k_flags[] = {
    {.name = "--deep", .type = DS_FLAG_SWITCH, .help = "also sample tensor values (scales finite, codes in range)"},
    {.name = "--samples", .type = DS_FLAG_INT, .def = "64", .lo = 1, .hi = 1000000, .help = "rows / tensors sampled per kind with --deep"},
    {.name = "--compare", .type = DS_FLAG_STRING, .help = "a second checkpoint whose tensors must match DIR's"},
    {.name = "--profile", .type = DS_FLAG_ENUM, .def = "auto", .choices = "auto|v41-flash-w4a8|none",
     .help = "the release profile checked against"},
    {.name = "--json-out", .type = DS_FLAG_STRING, .help = "also write the report as JSON here"},
};

/* "dsflash verify ARG..." for the JSON report. */
static char *join_cmdline(int argc, char **argv) {
    size_t cl = sizeof "dsflash";
    for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 1;
    char *s = ds_xmalloc(cl + 8), *p = s + sprintf(s, "dsflash");
    for (int i = 0; i < argc; i++) p += sprintf(p, " %s", argv[i]);
    return s;
}

int cmd_verify(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash verify", .usage = VERIFY_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags),
                     .max_positional = 1, .positional_name = "DIR"};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    if (!fs.n_positional) {
        fprintf(stderr, "dsflash verify: DIR is required\n");
        ds_flags_usage(&fs, stderr);
        return 2;
    }
    if (ds_flag_given(&fs, "--samples") && !ds_flag_on(&fs, "--deep"))   /* only the sampled checks read it */
        return ds_flags_fail(&fs, "--samples", "applies to --deep only (the sampled value checks), got '%s'", ds_flag_str(&fs, "--samples"));
    static const ds_verify_profile profiles[] = {DS_PROFILE_AUTO, DS_PROFILE_V41, DS_PROFILE_NONE};
    ds_verify_opts o;
    ds_verify_opts_default(&o);
    o.dir = fs.positional[0];
    o.deep = ds_flag_on(&fs, "--deep");
    o.samples = (int)ds_flag_int(&fs, "--samples");
    o.compare_dir = ds_flag_str(&fs, "--compare");
    o.profile = profiles[ds_flag_int(&fs, "--profile")];
    o.json_out = ds_flag_str(&fs, "--json-out");
    char *cmdline = join_cmdline(argc, argv);
    o.cmdline = cmdline;
    int rc = ds_verify_run(&o);
    free(cmdline);
    return rc;
}
