/* dsflash mkmodel: write a synthetic checkpoint in the exact release format (MODEL.md §8).
 * Long options only, matched exactly (TOOLS.md §0); `--opt value` and `--opt=value` both work.
 * The work is in src/tools/mkmodel*.c. */
#include "cli/commands.h"
#include "tools/mkmodel.h"
#include "tools/quantize.h"
#include "tools/reassemble.h"
#include "tools/split.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: dsflash mkmodel --config tiny|mini|FILE.json --out DIR [--seed N] [--smooth]\n"
            "         [--float-out DIR] [--rotation random|identity] [--shard-size SIZE]\n"
            "         [--split-engram SIZE | --no-split] [--split-only] [--threads N] [--no-verify] [--quiet]\n"
            "         [--format w4a8|official]\n"
            "  --format official writes the unrotated model in the official FP8/MXFP4 layout instead.\n"
            "  --out writes the W4A8 release; --float-out writes the rotated float model (quantize input).\n"
            "  Defaults: seed 1; tiny: 1 MiB shards, Engram code tables also split into 64 KiB parts.\n");
}

static int bad(const char *fmt, const char *a) {
    fprintf(stderr, "dsflash mkmodel: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    usage(stderr);
    return DS_EXIT_USAGE;
}

int cmd_mkmodel(int argc, char **argv) {
    ds_mkmodel_opts o;
    bool rotation_given = false;
    ds_mkmodel_opts_default(&o);
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
        static const char *const with_value[] = {"--config", "--out", "--seed", "--float-out", "--rotation", "--format",
                                                 "--shard-size", "--split-engram", "--threads"};
        bool needs = false;
        for (size_t k = 0; k < DS_ARRAY_LEN(with_value); k++) needs = needs || !strcmp(name, with_value[k]);
        if (needs && !val) {
            if (i + 1 >= argc) return bad("%s needs a value", name);
            val = argv[++i];
        } else if (!needs && val) {
            return bad("%s takes no value", name);
        }
        char why[200];
        if (!strcmp(name, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(name, "--config")) o.config = val;
        else if (!strcmp(name, "--out")) o.out = val;
        else if (!strcmp(name, "--float-out")) o.float_out = val;
        else if (!strcmp(name, "--seed")) {
            char *end;
            unsigned long long v = strtoull(val, &end, 10);
            if (!*val || *end || val[0] == '-') return bad("--seed: expected a non-negative integer, found '%s'", val);
            o.seed = v;
        } else if (!strcmp(name, "--smooth")) o.smooth = true;
        else if (!strcmp(name, "--rotation")) {
            rotation_given = true;
            if (!strcmp(val, "identity")) o.identity_rotation = true;
            else if (strcmp(val, "random")) return bad("--rotation: expected random or identity, found '%s'", val);
        } else if (!strcmp(name, "--shard-size")) {
            if (ds_parse_size(val, &o.shard_bytes, why, sizeof why)) return bad("--shard-size: %s", why);
        } else if (!strcmp(name, "--split-engram")) {
            if (ds_parse_size(val, &o.split_engram, why, sizeof why)) return bad("--split-engram: %s", why);
        } else if (!strcmp(name, "--no-split")) o.no_split = true;
        else if (!strcmp(name, "--split-only")) o.split_only = true;
        else if (!strcmp(name, "--threads")) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 4096) return bad("--threads: expected an integer 1..4096, found '%s'", val);
            o.threads = (int)v;
        } else if (!strcmp(name, "--no-verify")) o.no_verify = true;
        else if (!strcmp(name, "--quiet")) o.quiet = true;
        else if (!strcmp(name, "--format")) {
            if (!strcmp(val, "official")) o.official = true;
            else if (strcmp(val, "w4a8")) return bad("--format: expected w4a8 or official, found '%s'", val);
        }
        else return bad("unknown option '%s'", arg);
    }
    if (!o.config) return bad("--config is required%s", "");
    if (!o.out && !o.float_out) return bad("--out (or --float-out) is required%s", "");
    if (o.official && (!o.out || o.float_out || o.split_only || rotation_given))
        return bad("--format official: expected --out DIR without --float-out, --split-only or --rotation (the official layout is unrotated)%s", "");
    if (o.no_split && (o.split_engram || o.split_only)) return bad("--no-split excludes --split-engram and --split-only%s", "");
    ds_error err = {0};
    int rc = ds_mkmodel_run(&o, &err);
    if (rc) fprintf(stderr, "dsflash mkmodel: %s: %s\n", err.code[0] ? err.code : "E_FAILED", err.msg);
    return rc;
}
