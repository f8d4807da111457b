/* Runner behind check.h: runs every registered case (or those named on the command line). */
#define _GNU_SOURCE
#include "check.h"
#include <stdarg.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct ds_test_case ds_tests[512];
int ds_ntests, ds_case_failed;
ds_test_fn ds_cleanups[16];
int ds_ncleanups;

static char g_tmpdir[512];

static const char *ds_test_tmpdir_if_made(void) { return g_tmpdir[0] ? g_tmpdir : NULL; }

const char *ds_test_tmpdir(void) {
    char *dir = g_tmpdir;
    if (!dir[0]) {
        const char *base = getenv("DS_TEST_TMP");
        snprintf(dir, sizeof g_tmpdir, "%s/dsflash-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
    }
    return dir;
}

int ds_test_sh(char *out, size_t outlen, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    char tmp[4096];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, p)) > 0) {
        if (out && n + 1 < outlen) {
            size_t c = r < outlen - 1 - n ? r : outlen - 1 - n;
            memcpy(out + n, tmp, c);
            n += c;
        }
    }
    if (out && outlen) out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The scratch directory goes when the program ends, pass or fail: left behind, the scratch of one
 * `make test` (fixtures, releases) is enough to fill a small CI disk before the next build's run.
 * DS_KEEP_TEST_TMP=1 keeps it for a post-mortem.  Some cases make files unreadable on purpose, so
 * permissions are restored first. */
static void remove_tmpdir(void) {
    const char *dir = ds_test_tmpdir_if_made();
    if (!dir || getenv("DS_KEEP_TEST_TMP")) return;
    ds_test_sh(NULL, 0, "chmod -R u+rwX '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
}

const char *ds_test_bin(void) {
    static char b[1024];
    const char *e = getenv("DSFLASH_BIN");
    if (e && *e) return e;
    const char *bd = getenv("BUILD");
    char rel[256];
    snprintf(rel, sizeof rel, "build/%s/dsflash", bd && *bd ? bd : "release");
    if (!realpath(rel, b)) snprintf(b, sizeof b, "%s", rel); /* absolute: commands may cd */
    return b;
}

const char *ds_test_model_fixture(const char *name, const char *mkmodel_args) {
    enum { MAX_FIXTURES = 8 };
    static struct { char name[64], dir[1100]; int ok; } made[MAX_FIXTURES];
    static int n_made = 0;
    for (int i = 0; i < n_made; i++)
        if (!strcmp(made[i].name, name)) return made[i].ok ? made[i].dir : NULL;
    if (n_made == MAX_FIXTURES) {
        fprintf(stderr, "  fixture %s: more than %d fixtures in one test program\n", name, MAX_FIXTURES);
        return NULL;
    }
    snprintf(made[n_made].name, sizeof made[n_made].name, "%s", name);
    snprintf(made[n_made].dir, sizeof made[n_made].dir, "%s/%s", ds_test_tmpdir(), name);
    char out[4096];
    const char *bin = ds_test_bin(), *dir = made[n_made].dir;
    int rc = ds_test_sh(out, sizeof out, "%s mkmodel %s --out %s --quiet 2>&1", bin, mkmodel_args, dir);
    /* split Engram tables (the W4A8 layout) re-verified by the tool a user runs */
    if (rc == 0 && !strstr(mkmodel_args, "--format official"))
        rc = ds_test_sh(out, sizeof out, "%s reassemble %s/engram_int8 --quiet 2>&1", bin, dir);
    made[n_made].ok = rc == 0;
    if (rc) fprintf(stderr, "  fixture %s: mkmodel %s failed (%d): %s\n", name, mkmodel_args, rc, out);
    return made[n_made++].ok ? dir : NULL;
}

const char *ds_test_tiny_fixture(void) { return ds_test_model_fixture("tiny", "--config tiny --no-verify"); }

const char *ds_test_trained_fixture(void) {
    static char dir[1200];
    static int state = 0;
    if (state == 0) {
        char src[1100], out[4096];
        snprintf(src, sizeof src, "%s/tt_float", ds_test_tmpdir());
        snprintf(dir, sizeof dir, "%s/tt_w4a8", ds_test_tmpdir());
        const char *data = "tests/data/trained-tiny";
        int rc = ds_test_sh(out, sizeof out,
                            "mkdir -p %s && cp %s/config.json %s/tokenizer_config.json %s/ && "
                            "for f in model.safetensors tokenizer.json engram_token_map.u32 heldout.u32; do "
                            "gunzip -c %s/$f.gz > %s/$f; done && %s quantize --src %s --dst %s --quiet 2>&1",
                            src, data, data, src, data, src, ds_test_bin(), src, dir);
        state = rc == 0 ? 1 : -1;
        if (rc) fprintf(stderr, "  trained fixture: %s\n", out);
    }
    return state == 1 ? dir : NULL;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int ds_test_main(int argc, char **argv) {
    int passed = 0, failed = 0;
    for (int i = 0; i < ds_ntests; i++) {
        if (argc > 1) {
            int want = 0;
            for (int a = 1; a < argc; a++) want |= !strcmp(argv[a], ds_tests[i].name);
            if (!want) continue;
        }
        ds_case_failed = 0;
        const double t0 = wall_seconds();
        ds_tests[i].fn();
        /* each case's wall time, so the slow ones stay visible as the suite grows (CI has a limit) */
        const double dt = wall_seconds() - t0;
        if (ds_case_failed) { failed++; printf("not ok %s (%.1f s)\n", ds_tests[i].name, dt); }
        else { passed++; printf("ok %s (%.1f s)\n", ds_tests[i].name, dt); }
        fflush(stdout);
    }
    for (int i = 0; i < ds_ncleanups; i++) ds_cleanups[i]();
    remove_tmpdir();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
