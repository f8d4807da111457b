/* dsflash quantize: float (BF16/F32) checkpoint -> W4A8 release (TOOLS.md §3).
 *
 * Option parsing only, through the flag table (src/base/flags.h; TOOLS.md §0, PITFALLS.md 43: long
 * options, exact names, `--opt value` and `--opt=value`).  The spelling --in/--out is
 * accepted as an alias of the spec's --src/--dst (giving both with different values is an error).
 * Everything else lives in src/tools/quantize.c. */
#include "cli/commands.h"
#include "base/flags.h"
#include "tools/quant.h"
#include "tools/quantize.h"
#include "tools/reassemble.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUANTIZE_USAGE \
    "usage: dsflash quantize --src DIR --dst DIR [--src-format bf16|fp8] [--plan default|aggressive]\n" \
    "         [--quant-main-proj] [--quant-vocab] [--int4-search ssz|minmax] [--ssz-steps 10]\n" \
    "         [--shard-size 4GiB] [--threads N] [--no-resume] [--engram-only] [--no-engram]\n" \
    "         [--split-engram SIZE] [--split-only] [--dry-run] [--quiet]\n" \
    "  --src-format fp8 reads the official FP8/MXFP4 checkpoint (decoded exactly, then quantized like a float one)."

#define STR_(x) #x
#define STR(x) STR_(x)

static ds_flag k_flags[] = {
    {.name = "--src", .type = DS_FLAG_STRING, .help = "the float (or --src-format fp8) checkpoint (required)"},
    {.name = "--in", .type = DS_FLAG_STRING, .alias_of = "--src"},
    {.name = "--dst", .type = DS_FLAG_STRING, .help = "the release directory written (required)"},
    {.name = "--out", .type = DS_FLAG_STRING, .alias_of = "--dst"},
    {.name = "--src-format", .type = DS_FLAG_ENUM, .def = "bf16", .choices = "bf16|fp8",
     .help = "bf16: BF16/F32 safetensors; fp8: the official FP8/MXFP4 layout"},
    {.name = "--plan", .type = DS_FLAG_ENUM, .def = "default", .choices = "default|aggressive",
     .help = "aggressive: the draft's wo_a / wo_b also W8A8"},
    {.name = "--quant-main-proj", .type = DS_FLAG_SWITCH, .help = "mtp.*.main_proj as W8A8"},
    {.name = "--quant-vocab", .type = DS_FLAG_SWITCH, .help = "the draft vocabulary as W8A8"},
    {.name = "--int4-search", .type = DS_FLAG_ENUM, .def = "ssz", .choices = "ssz|minmax", .help = "int4 scale search"},
    {.name = "--ssz-steps", .type = DS_FLAG_INT, .def = STR(DS_SSZ_STEPS_DEFAULT), .lo = 1, .hi = DS_SSZ_STEPS_MAX,
     .help = "steps of the ssz scale search (r = 1 - 0.05k must stay positive)"},
    {.name = "--shard-size", .type = DS_FLAG_SIZE, .def = "4GiB", .help = "bytes per trunk / draft shard"},
    {.name = "--threads", .type = DS_FLAG_INT, .lo = 1, .hi = 4096, .help = "worker threads; default every core"},
    {.name = "--no-resume", .type = DS_FLAG_SWITCH, .help = "refuse a --dst that already holds a partial run"},
    {.name = "--engram-only", .type = DS_FLAG_SWITCH, .help = "write only the Engram units"},
    {.name = "--no-engram", .type = DS_FLAG_SWITCH, .help = "write everything but the Engram units"},
    {.name = "--split-engram", .type = DS_FLAG_SIZE, .help = "split Engram code tables into parts of this size"},
    {.name = "--split-only", .type = DS_FLAG_SWITCH, .help = "keep only the parts of split tables (needs --split-engram)"},
    {.name = "--dry-run", .type = DS_FLAG_SWITCH, .help = "print the plan and byte model; write nothing"},
    {.name = "--quiet", .type = DS_FLAG_SWITCH, .help = "print only errors"},
};

static int check_combinations(ds_flagset *fs, const ds_release_job *job) {
    if (!ds_flag_str(fs, "--src")) return ds_flags_fail(fs, "--src", "is required (the checkpoint to quantize)");
    if (!ds_flag_str(fs, "--dst")) return ds_flags_fail(fs, "--dst", "is required (the release directory)");
    if (job->rw.engram_only && job->rw.no_engram) return ds_flags_fail(fs, "--engram-only", "excludes --no-engram");
    if (job->rw.split_only && !job->rw.split_engram) return ds_flags_fail(fs, "--split-only", "needs --split-engram SIZE");
    if (job->rw.int4_minmax && ds_flag_given(fs, "--ssz-steps"))   /* minmax searches nothing */
        return ds_flags_fail(fs, "--ssz-steps", "applies to --int4-search ssz only, got '%s' with minmax", ds_flag_str(fs, "--ssz-steps"));
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash quantize", .usage = QUANTIZE_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : DS_EXIT_USAGE;
    ds_release_job job;
    memset(&job, 0, sizeof job);
    ds_rw_opts_default(&job.rw);
    job.resume = !ds_flag_on(&fs, "--no-resume");
    job.fp8 = ds_flag_int(&fs, "--src-format") == 1;
    job.dry_run = ds_flag_on(&fs, "--dry-run");
    job.rw.aggressive = ds_flag_int(&fs, "--plan") == 1;
    job.rw.quant_main_proj = ds_flag_on(&fs, "--quant-main-proj");
    job.rw.quant_vocab = ds_flag_on(&fs, "--quant-vocab");
    job.rw.int4_minmax = ds_flag_int(&fs, "--int4-search") == 1;
    job.rw.ssz_steps = (int)ds_flag_int(&fs, "--ssz-steps");
    job.rw.shard_bytes = (uint64_t)ds_flag_int(&fs, "--shard-size");
    job.rw.split_engram = (uint64_t)ds_flag_int(&fs, "--split-engram");
    job.rw.threads = (int)ds_flag_int(&fs, "--threads");
    job.rw.engram_only = ds_flag_on(&fs, "--engram-only");
    job.rw.no_engram = ds_flag_on(&fs, "--no-engram");
    job.rw.split_only = ds_flag_on(&fs, "--split-only");
    job.rw.quiet = ds_flag_on(&fs, "--quiet");
    if (check_combinations(&fs, &job)) return DS_EXIT_USAGE;
    const char *src = ds_flag_str(&fs, "--src"), *dst = ds_flag_str(&fs, "--dst");
    job.rw.src_label = src;
    job.rw.out_label = dst;
    ds_error err = {0};
    int rc = ds_quantize_dir(src, dst, &job, &err);
    if (rc) fprintf(stderr, "dsflash quantize: %s: %s\n", err.code[0] ? err.code : "E_FAILED", err.msg);
    else if (!job.dry_run && !job.rw.quiet) printf("quantize: wrote %s\n", dst);
    return rc;
}
