/* dsflash reassemble [DIR] [--dir DIR] [--target NAME]... [--check-only] [--delete-parts] [--replace]
 *                    [--no-readback] [--no-resume] [--jobs N] [--quiet]
 * Option parsing only, through the flag table (src/base/flags.h; TOOLS.md §0: long options, exact
 * names, usage + exit 2 on anything else); the work is in src/tools/reassemble.c.  DIR may be given
 * positionally (the form) or with --dir (TOOLS.md's form); two different directories are a
 * usage error rather than a silent pick of one. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/reassemble.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REASSEMBLE_USAGE \
    "usage: dsflash reassemble [DIR | --dir DIR] [--target NAME]... [--check-only] [--delete-parts]\n" \
    "                          [--replace] [--no-readback] [--no-resume] [--jobs N] [--quiet]\n" \
    "Rebuilds each target listed in DIR/PARTS.sha256 from its parts, verifying every part and the\n" \
    "whole file.  Exit: 0 ok, 1 verification failed, 2 usage, 3 I/O, 4 lock held, 5 input missing,\n" \
    "10 --check-only found work to do."

/* Targets named on one command line; a PARTS.sha256 with more is rebuilt whole (no --target). */
#define MAX_TARGETS 256

static ds_flag k_flags[] = {
    {.name = "--dir", .type = DS_FLAG_STRING, .help = "the folder holding PARTS.sha256 (also positional); default ."},
    {.name = "--target", .type = DS_FLAG_STRING, .help = "rebuild only this target (default: every target listed)"},
    {.name = "--check-only", .type = DS_FLAG_SWITCH, .help = "report what a rebuild would do; write nothing (exit 10: work to do)"},
    {.name = "--delete-parts", .type = DS_FLAG_SWITCH, .help = "delete the parts once the target is verified"},
    {.name = "--replace", .type = DS_FLAG_SWITCH, .help = "rebuild a target that already exists"},
    {.name = "--no-readback", .type = DS_FLAG_SWITCH, .help = "skip hashing the finished target again from disk"},
    {.name = "--no-resume", .type = DS_FLAG_SWITCH, .help = "start over instead of continuing a .partial target"},
    {.name = "--jobs", .type = DS_FLAG_INT, .def = "2", .lo = 1, .hi = 16,
     .help = "with --check-only: parts hashed at a time (each job holds two 64 MiB buffers)"},
    {.name = "--quiet", .type = DS_FLAG_SWITCH, .help = "print only errors"},
};

static volatile sig_atomic_t g_stop;

int cmd_reassemble(int argc, char **argv) {
    const char *targets[MAX_TARGETS];
    ds_flagset fs = {.cmd = "dsflash reassemble", .usage = REASSEMBLE_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags),
                     .max_positional = 1, .positional_name = "DIR"};
    ds_flag_get(&fs, "--target")->list = targets;
    ds_flag_get(&fs, "--target")->list_cap = MAX_TARGETS;
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    ds_reassemble_opts o;
    ds_reassemble_opts_default(&o);
    o.check_only = ds_flag_on(&fs, "--check-only");
    o.delete_parts = ds_flag_on(&fs, "--delete-parts");
    o.replace = ds_flag_on(&fs, "--replace");
    o.readback = !ds_flag_on(&fs, "--no-readback");
    o.resume = !ds_flag_on(&fs, "--no-resume");
    o.quiet = ds_flag_on(&fs, "--quiet");
    o.jobs = (int)ds_flag_int(&fs, "--jobs");
    const char *dir = ds_flag_str(&fs, "--dir"), *pos = fs.n_positional ? fs.positional[0] : NULL;
    if (dir && pos && strcmp(dir, pos))
        return ds_flags_fail(&fs, "--dir", "two directories given ('%s' and '%s')", pos, dir);
    if (ds_flag_given(&fs, "--jobs") && !o.check_only)   /* a rebuild reads the parts in order */
        return ds_flags_fail(&fs, "--jobs", "applies to --check-only only (a rebuild reads the parts in order), got '%d'", o.jobs);
    if (o.check_only && o.delete_parts)
        return ds_flags_fail(&fs, "--delete-parts", "--check-only writes nothing; it cannot be combined with --delete-parts");
    if (dir || pos) o.dir = dir ? dir : pos;
    o.targets = targets;
    o.n_targets = ds_flag_get(&fs, "--target")->n_list;
    o.stop = &g_stop;
    ds_tool_install_stop_handlers(&g_stop);
    return ds_reassemble_run(&o);
}
