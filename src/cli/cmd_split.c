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

#define SPLIT_USAGE \
    "usage: dsflash split FILE [--part-size SIZE] [--out-dir DIR] [--no-verify] [--jobs N] [--quiet]\n" \
    "Cuts FILE into FILE.part-NN-of-MM and records their sha256 in DIR/PARTS.sha256.\n" \
    "Exit: 0 ok, 1 verification failed, 2 usage, 3 I/O, 4 lock held, 5 input missing.\n"

static ds_flag k_flags[] = {
    {.name = "--part-size", .type = DS_FLAG_SIZE, .def = "16GiB",
     .help = "bytes per part; K/M/G/T and KiB.. are powers of 1024, KB/MB/GB/TB powers of 1000"},
    {.name = "--out-dir", .type = DS_FLAG_STRING, .help = "where the parts and PARTS.sha256 go (default: FILE's directory)"},
    {.name = "--no-verify", .type = DS_FLAG_SWITCH, .help = "skip reading the parts back against their sha256"},
    {.name = "--jobs", .type = DS_FLAG_INT, .def = "2", .lo = 1, .hi = 16, .help = "parts verified at a time (each job holds two 64 MiB buffers)"},
    {.name = "--quiet", .type = DS_FLAG_SWITCH, .help = "print only errors"},
};

static volatile sig_atomic_t g_stop;

int cmd_split(int argc, char **argv) {
    ds_split_opts o;
    ds_split_opts_default(&o);
    ds_flagset fs = {.cmd = "dsflash split", .usage = SPLIT_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags),
                     .max_positional = 1, .positional_name = "FILE"};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    const char *file = fs.n_positional ? fs.positional[0] : NULL;
    o.part_size = (uint64_t)ds_flag_int(&fs, "--part-size");
    o.out_dir = ds_flag_str(&fs, "--out-dir");
    o.verify = !ds_flag_on(&fs, "--no-verify");
    o.quiet = ds_flag_on(&fs, "--quiet");
    o.jobs = (int)ds_flag_int(&fs, "--jobs");
    if (ds_flag_given(&fs, "--jobs") && !o.verify)
        return ds_flags_fail(&fs, "--jobs", "sets how many parts are verified at a time, which --no-verify turns off");
    if (!file) return ds_flags_fail(&fs, "FILE", "is required");
    o.file = file;
    o.stop = &g_stop;
    ds_tool_install_stop_handlers(&g_stop);
    return ds_split_run(&o);
}
