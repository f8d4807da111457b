/* dsflash quantize: float (BF16/F32) checkpoint -> W4A8 release (TOOLS.md §3).
 *
 * Options are long and matched exactly (TOOLS.md §0; PITFALLS.md 43); `--opt value` and
 * `--opt=value` are both accepted.  The spelling --in/--out is accepted next to the
 * spec's --src/--dst.  Everything else lives in src/tools/quantize.c. */
#include "cli/commands.h"
#include "tools/quantize.h"
#include "tools/reassemble.h"
#include "tools/split.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsflash quantize --src DIR --dst DIR [--src-format bf16|fp8] [--plan default|aggressive]\n"
            "         [--quant-main-proj] [--quant-vocab] [--int4-search ssz|minmax] [--ssz-steps 10]\n"
            "         [--shard-size 4GiB] [--threads N] [--no-resume] [--engram-only] [--no-engram]\n"
            "         [--split-engram SIZE] [--split-only] [--dry-run] [--quiet]\n"
            "  --in/--out are accepted as spellings of --src/--dst.  --src-format fp8 reads the official\n"
            "  FP8/MXFP4 checkpoint (decoded exactly, then quantized like a float one).\n");
}

static int bad(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "dsflash quantize: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    usage(stderr);
    return DS_EXIT_USAGE;
}

int cmd_quantize(int argc, char **argv) {
    const char *src = NULL, *dst = NULL;
    ds_release_job job;
    memset(&job, 0, sizeof job);
    ds_rw_opts_default(&job.rw);
    job.resume = true;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i], name[64];
        const char *val = NULL;
        char *eq = strchr(arg, '=');
        if (eq && (size_t)(eq - arg) < sizeof name) {
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = 0;
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
        }
        static const char *const with_value[] = {"--src", "--in", "--dst", "--out", "--src-format", "--plan", "--int4-search",
                                                 "--ssz-steps", "--shard-size", "--threads", "--split-engram"};
        bool needs = false;
        for (size_t k = 0; k < DS_ARRAY_LEN(with_value); k++) needs = needs || !strcmp(name, with_value[k]);
        if (needs && !val) {
            if (i + 1 >= argc) return bad("%s needs a value%s", name, "");
            val = argv[++i];
        } else if (!needs && val) {
            return bad("%s takes no value (found '%s')", name, val);
        }
        char why[200];
        if (!strcmp(name, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(name, "--src") || !strcmp(name, "--in")) src = val;
        else if (!strcmp(name, "--dst") || !strcmp(name, "--out")) dst = val;
        else if (!strcmp(name, "--src-format")) {
            if (!strcmp(val, "fp8")) job.fp8 = true;
            else if (strcmp(val, "bf16")) return bad("--src-format: expected bf16 or fp8, found '%s'%s", val, "");
        } else if (!strcmp(name, "--plan")) {
            if (!strcmp(val, "aggressive")) job.rw.aggressive = true;
            else if (strcmp(val, "default")) return bad("--plan: expected default or aggressive, found '%s'%s", val, "");
        } else if (!strcmp(name, "--quant-main-proj")) job.rw.quant_main_proj = true;
        else if (!strcmp(name, "--quant-vocab")) job.rw.quant_vocab = true;
        else if (!strcmp(name, "--int4-search")) {
            if (!strcmp(val, "minmax")) job.rw.int4_minmax = true;
            else if (strcmp(val, "ssz")) return bad("--int4-search: expected ssz or minmax, found '%s'%s", val, "");
        } else if (!strcmp(name, "--ssz-steps")) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > DS_SSZ_STEPS_MAX) return bad("--ssz-steps: expected an integer 1..20, found '%s'%s", val, "");
            job.rw.ssz_steps = (int)v;
        } else if (!strcmp(name, "--shard-size")) {
            if (ds_parse_size(val, &job.rw.shard_bytes, why, sizeof why)) return bad("--shard-size: %s%s", why, "");
        } else if (!strcmp(name, "--split-engram")) {
            if (ds_parse_size(val, &job.rw.split_engram, why, sizeof why)) return bad("--split-engram: %s%s", why, "");
        } else if (!strcmp(name, "--threads")) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 4096) return bad("--threads: expected an integer 1..4096, found '%s'%s", val, "");
            job.rw.threads = (int)v;
        } else if (!strcmp(name, "--no-resume")) job.resume = false;
        else if (!strcmp(name, "--engram-only")) job.rw.engram_only = true;
        else if (!strcmp(name, "--no-engram")) job.rw.no_engram = true;
        else if (!strcmp(name, "--split-only")) job.rw.split_only = true;
        else if (!strcmp(name, "--dry-run")) job.dry_run = true;
        else if (!strcmp(name, "--quiet")) job.rw.quiet = true;
        else return bad("unknown option '%s'%s", arg, "");
    }
    if (!src || !dst) return bad("--src and --dst are required%s%s", "", "");
    if (job.rw.engram_only && job.rw.no_engram) return bad("--engram-only and --no-engram exclude each other%s%s", "", "");
    if (job.rw.split_only && !job.rw.split_engram) return bad("--split-only needs --split-engram SIZE%s%s", "", "");
    job.rw.src_label = src;
    job.rw.out_label = dst;
    ds_error err = {0};
    int rc = ds_quantize_dir(src, dst, &job, &err);
    if (rc) fprintf(stderr, "dsflash quantize: %s: %s\n", err.code[0] ? err.code : "E_FAILED", err.msg);
    else if (!job.dry_run && !job.rw.quiet) printf("quantize: wrote %s\n", dst);
    return rc;
}
