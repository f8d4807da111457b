/* Helpers shared by the fuzz targets (see fuzz.h).  Set-up failures exit the process with a
 * message: a fuzz run that cannot build its fixture must not report "0 crashes". */
#define _GNU_SOURCE
#include "fuzz.h"
#include "tokenizer/release_tokenizer.h"
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}

static char g_tmpdir[512];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}
static void remove_tmpdir(void) { nftw(g_tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

const char *fuzz_tmpdir(void) {
    char *dir = g_tmpdir;
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof g_tmpdir, "%s/dsflash-fuzz-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) { perror("fuzz: mkdtemp"); exit(2); }
        atexit(remove_tmpdir);
    }
    return dir;
}

const ds_tokenizer *fuzz_tiny_tokenizer(void) {
    static ds_tokenizer *tok;
    if (tok) return tok;
    const char *base = ds_tokenizer_default_base();
    if (!base) {
        fprintf(stderr, "fuzz: the DeepSeek base tokenizer is not fetched (run scripts/install-deps.sh)\n");
        exit(2);
    }
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/tiny-tokenizer", fuzz_tmpdir());
    ds_error err = {0};
    if (ds_tokenizer_write_release(base, 1024, 1001, 1010, dir, &err) != 0) {
        fprintf(stderr, "fuzz: writing the tiny tokenizer: %s\n", err.msg);
        exit(2);
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (ds_tokenizer_load(path, &tok, &err) != 0) {
        fprintf(stderr, "fuzz: loading %s: %s\n", path, err.msg);
        exit(2);
    }
    return tok;
}
