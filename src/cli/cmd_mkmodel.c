/* dsflash mkmodel: write a synthetic checkpoint in the exact release format (MODEL.md §8).
 * Option parsing only, through the flag table (src/base/flags.h; TOOLS.md §0: long options, exact
 * names, `--opt value` and `--opt=value`); the work is in src/tools/mkmodel*.c.  Rules that tie
 * flags together are checked here so that no flag is accepted and then ignored: the official
 * layout has no rotation, no Engram split and no forward-pass verification, and the split and
 * verification flags only concern the W4A8 release (--out), not the float export. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/mkmodel.h"
#include "tools/reassemble.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MKMODEL_USAGE \
    "usage: dsflash mkmodel --config tiny|mini|FILE.json --out DIR [--seed N] [--smooth]\n" \
    "         [--float-out DIR] [--rotation random|identity] [--shard-size SIZE]\n" \
    "         [--split-engram SIZE | --no-split] [--split-only] [--threads N] [--no-verify] [--quiet]\n" \
    "         [--format w4a8|official]\n" \
    "  --format official writes the unrotated model in the official FP8/MXFP4 layout instead.\n" \
    "  --out writes the W4A8 release; --float-out writes the rotated float model (quantize input)."

static ds_flag k_flags[] = {
    {.name = "--config", .type = DS_FLAG_STRING, .help = "tiny, mini or a config.json path (required)"},
    {.name = "--out", .type = DS_FLAG_STRING, .help = "the W4A8 release directory (or the official layout with --format official)"},
    {.name = "--float-out", .type = DS_FLAG_STRING, .help = "also (or only) the rotated float checkpoint, quantize's input"},
    {.name = "--seed", .type = DS_FLAG_INT, .def = "1", .lo = 0, .hi = INT64_MAX, .help = "random weights' seed"},
    {.name = "--smooth", .type = DS_FLAG_SWITCH, .help = "the decisive fixture (every discrete choice with a margin)"},
    {.name = "--rotation", .type = DS_FLAG_ENUM, .def = "random", .choices = "random|identity",
     .help = "the folded rotation (identity: R = I, no fold)"},
    {.name = "--shard-size", .type = DS_FLAG_SIZE, .help = "bytes per shard; default 1 MiB for tiny (several shards), else 2 GiB"},
    {.name = "--split-engram", .type = DS_FLAG_SIZE, .help = "split Engram code tables into parts of this size; default 64 KiB for tiny, else none"},
    {.name = "--no-split", .type = DS_FLAG_SWITCH, .help = "never split Engram tables"},
    {.name = "--split-only", .type = DS_FLAG_SWITCH, .help = "write only the parts of split Engram tables, not the joined files"},
    {.name = "--threads", .type = DS_FLAG_INT, .lo = 1, .hi = 4096, .help = "worker threads; default every core"},
    {.name = "--no-verify", .type = DS_FLAG_SWITCH, .help = "skip the forward-pass checks of the written release"},
    {.name = "--quiet", .type = DS_FLAG_SWITCH, .help = "print only errors"},
    {.name = "--format", .type = DS_FLAG_ENUM, .def = "w4a8", .choices = "w4a8|official", .help = "what --out holds"},
};

/* Flags that only concern the W4A8 release written to --out. */
static const char *const k_release_only[] = {"--split-engram", "--no-split", "--split-only", "--no-verify"};

static int check_combinations(ds_flagset *fs, const ds_mkmodel_opts *o) {
    if (!o->config) return ds_flags_fail(fs, "--config", "is required (tiny, mini or FILE.json)");
    if (!o->out && !o->float_out) return ds_flags_fail(fs, "--out", "is required (or --float-out DIR)");
    if (o->official && o->float_out)
        return ds_flags_fail(fs, "--format", "expected --out DIR without --float-out with --format official (the official layout is written alone)");
    if (o->official && ds_flag_given(fs, "--rotation"))
        return ds_flags_fail(fs, "--format", "expected no --rotation with --format official (the official layout is unrotated)");
    for (size_t k = 0; k < DS_ARRAY_LEN(k_release_only); k++) {
        if (!ds_flag_given(fs, k_release_only[k])) continue;
        if (o->official)
            return ds_flags_fail(fs, k_release_only[k], "not accepted with --format official (no Engram split, no forward-pass check there)");
        if (!o->out) return ds_flags_fail(fs, k_release_only[k], "applies to the W4A8 release only; give --out DIR");
    }
    if (o->no_split && (o->split_engram || o->split_only))
        return ds_flags_fail(fs, "--no-split", "excludes --split-engram and --split-only");
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash mkmodel", .usage = MKMODEL_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : DS_EXIT_USAGE;
    ds_mkmodel_opts o;
    ds_mkmodel_opts_default(&o);
    o.config = ds_flag_str(&fs, "--config");
    o.out = ds_flag_str(&fs, "--out");
    o.float_out = ds_flag_str(&fs, "--float-out");
    o.seed = (uint64_t)ds_flag_int(&fs, "--seed");
    o.smooth = ds_flag_on(&fs, "--smooth");
    o.identity_rotation = ds_flag_int(&fs, "--rotation") == 1;
    o.shard_bytes = (uint64_t)ds_flag_int(&fs, "--shard-size");     /* 0 when not given: the preset's */
    o.split_engram = (uint64_t)ds_flag_int(&fs, "--split-engram");
    o.no_split = ds_flag_on(&fs, "--no-split");
    o.split_only = ds_flag_on(&fs, "--split-only");
    o.threads = (int)ds_flag_int(&fs, "--threads");                 /* 0 when not given: every core */
    o.no_verify = ds_flag_on(&fs, "--no-verify");
    o.quiet = ds_flag_on(&fs, "--quiet");
    o.official = ds_flag_int(&fs, "--format") == 1;
    int crc = check_combinations(&fs, &o);
    if (crc) return DS_EXIT_USAGE;
    ds_error err = {0};
    int rc = ds_mkmodel_run(&o, &err);
    if (rc) fprintf(stderr, "dsflash mkmodel: %s: %s\n", err.code[0] ? err.code : "E_FAILED", err.msg);
    return rc;
}
