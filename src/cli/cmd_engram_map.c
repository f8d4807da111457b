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
#include "base/fsutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/engram_map.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: dsflash engram-map (--tokenizer FILE | --model DIR) (--out FILE | --check FILE)\n"
        "                          [--expect-classes N]\n"
        "  --out FILE            write the map (atomically; an existing file is replaced)\n"
        "  --check FILE          compare an existing map file with the computed map\n"
        "  --expect-classes N    fail (exit 1) unless the tokenizer yields exactly N classes\n");
}

int cmd_engram_map(int argc, char **argv) {
    const char *tok_file = NULL, *model = NULL, *out = NULL, *check = NULL;
    long expect = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--tokenizer") && has_val) tok_file = argv[++i];
        else if (!strcmp(a, "--model") && has_val) model = argv[++i];
        else if (!strcmp(a, "--out") && has_val) out = argv[++i];
        else if (!strcmp(a, "--check") && has_val) check = argv[++i];
        else if (!strcmp(a, "--expect-classes") && has_val) {
            char *end;
            const char *v = argv[++i];
            expect = strtol(v, &end, 10);
            if (!*v || *end || expect < 1 || expect > 16777216) {
                fprintf(stderr, "dsflash engram-map: --expect-classes %s: expected an integer in [1, 16777216]\n", v);
                usage(stderr);
                return 2;
            }
        } else if (!strcmp(a, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "dsflash engram-map: unknown option or missing value: %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!!tok_file + !!model != 1 || !!out + !!check != 1) {
        fprintf(stderr, "dsflash engram-map: give exactly one of --tokenizer/--model and one of --out/--check\n");
        usage(stderr);
        return 2;
    }
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
