/* Replays files through one fuzz target without libFuzzer: `replay_<name> FILE|DIR...`.
 *
 * Why: the seed corpora and every input that once crashed a target (fuzz/regress/<name>/) must stay
 * harmless in ordinary builds, including the ASan+UBSan one, without clang.  Each file is one case;
 * a crash or sanitizer report ends the process (so the suite fails), otherwise the closing line is
 * "N passed, 0 failed" as every suite prints. */
#define _GNU_SOURCE
#include "fuzz.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    size_t cap = 1 << 16, n = 0, r;
    uint8_t *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) abort();
    /* an exact-size copy, so ASan sees reads past the end of the input */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) abort();
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    printf("ok %s\n", path);
    fflush(stdout);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay_path(const char *path, int *passed, int *failed) {
    struct stat st;
    if (stat(path, &st) != 0) { fprintf(stderr, "replay: %s: no such file or directory\n", path); (*failed)++; return -1; }
    if (!S_ISDIR(st.st_mode)) { if (replay_file(path) == 0) (*passed)++; else (*failed)++; return 0; }
    DIR *d = opendir(path);
    if (!d) { (*failed)++; return -1; }
    char **names = NULL;
    size_t nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, sizeof(char *) * (nn + 1));
        if (asprintf(&names[nn++], "%s/%s", path, e->d_name) < 0) abort();
    }
    closedir(d);
    qsort(names, nn, sizeof(char *), cmp_str);   /* a stable order: the log names the culprit */
    for (size_t i = 0; i < nn; i++) { replay_path(names[i], passed, failed); free(names[i]); }
    free(names);
    return 0;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0;
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) replay_path(argv[i], &passed, &failed);
    if (passed + failed == 0) { fprintf(stderr, "replay: no inputs given\n"); failed = 1; }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
