/* dsflash engram-map: compute the Engram token normalization map (MODEL.md §2.10.1) from a
 * tokenizer.json and write the map file the loader prefers (vocab_size little-endian u32).
 *
 * Why a separate tool: the classes depend on the exact Unicode tables, so the map is computed once,
 * checked (class count against --expect-classes, e.g. 99092 for V4.1-Flash) and shipped as data;
 * `--check FILE` verifies an existing map file against the tokenizer.  Exit status: 0 ok, 1 check
 * failed (class count or map mismatch), 2 usage, 3 I/O error, 5 input missing (TOOLS.md §0). */
#define _GNU_SOURCE
#include "cli/commands.h"
#include "base/common.h"
#include "base/flags.h"
#include "base/fsutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/engram_map.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGRAM_MAP_USAGE \
    "usage: dsflash engram-map (--tokenizer FILE | --model DIR) (--out FILE | --check FILE)\n" \
    "                          [--expect-classes N]\n"

static ds_flag k_flags[] = {
    {.name = "--tokenizer", .type = DS_FLAG_STRING, .help = "tokenizer.json to compute the map from"},
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (its tokenizer.json)"},
    {.name = "--out", .type = DS_FLAG_STRING, .help = "write the map (atomically; an existing file is replaced)"},
    {.name = "--check", .type = DS_FLAG_STRING, .help = "compare an existing map file with the computed map"},
    {.name = "--expect-classes", .type = DS_FLAG_INT, .lo = 1, .hi = 16777216,
     .help = "fail (exit 1) unless the tokenizer yields exactly N classes"},
};

int cmd_engram_map(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash engram-map", .usage = ENGRAM_MAP_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    const char *tok_file = ds_flag_str(&fs, "--tokenizer"), *model = ds_flag_str(&fs, "--model");
    const char *out = ds_flag_str(&fs, "--out"), *check = ds_flag_str(&fs, "--check");
    long expect = ds_flag_given(&fs, "--expect-classes") ? (long)ds_flag_int(&fs, "--expect-classes") : -1;
    if (!!tok_file + !!model != 1) return ds_flags_fail(&fs, "--tokenizer", "give exactly one of --tokenizer and --model");
    if (!!out + !!check != 1) return ds_flags_fail(&fs, "--out", "give exactly one of --out and --check");
    char *path = tok_file ? ds_xstrdup(tok_file) : ds_path_join(model, "tokenizer.json");
    if (!ds_file_exists(path)) { fprintf(stderr, "dsflash engram-map: %s: no such file\n", path); free(path); return 5; }
    if (check && !ds_file_exists(check)) { fprintf(stderr, "dsflash engram-map: %s: no such file\n", check); free(path); return 5; }
    ds_error err = {0};
    ds_tokenizer *tok;
    int rc = ds_tokenizer_load(path, &tok, &err);
    if (rc < 0) { fprintf(stderr, "dsflash engram-map: %s\n", err.msg); free(path); return !strcmp(err.code, "E_IO") ? 3 : 1; }
    uint32_t *cls = NULL;
    int n_classes = 0, V = ds_tokenizer_vocab_size(tok);
    if (ds_engram_map_compute(tok, &cls, &n_classes, &err) < 0) {
        fprintf(stderr, "dsflash engram-map: %s: %s\n", path, err.msg);
        rc = 1;
    } else {
        printf("%s: vocab %d, %d classes, pad class %u\n", path, V, n_classes, V > 2 ? cls[2] : 0);
        if (expect > 0 && n_classes != expect) {
            fprintf(stderr, "dsflash engram-map: %s yields %d classes, expected %ld (engram_compressed_vocab_size)\n", path, n_classes, expect);
            rc = 1;
        } else if (out) {
            if (ds_engram_map_write(out, cls, V, &err) < 0) { fprintf(stderr, "dsflash engram-map: %s\n", err.msg); rc = 3; }
            else printf("wrote %s (%d bytes)\n", out, V * 4);
        } else {
            uint32_t *old = NULL;
            int old_n = 0;
            if (ds_engram_map_read(check, V, &old, &old_n, &err) < 0) {
                fprintf(stderr, "dsflash engram-map: %s\n", err.msg);
                rc = 1;
            } else {
                for (int v = 0; v < V && rc == 0; v++)
                    if (old[v] != cls[v]) {
                        fprintf(stderr, "dsflash engram-map: %s: token %d has class %u, the tokenizer gives %u\n", check, v, old[v], cls[v]);
                        rc = 1;
                    }
                if (rc == 0) printf("%s matches (%d classes)\n", check, old_n);
            }
            free(old);
        }
    }
    free(cls);
    free(path);
    ds_tokenizer_free(tok);
    return rc;
}
