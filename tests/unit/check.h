/* Minimal test harness shared by the C unit tests.  Each test program registers cases with
 * TEST(name) and runs them from main via RUN_ALL(); every CHECK counts, and the program ends with
 * the line "N passed, N failed" (counts of test cases) that tests/run.sh aggregates.  A case fails
 * if any CHECK inside it fails; failures print file:line and the message. */
#ifndef DS_TEST_CHECK_H
#define DS_TEST_CHECK_H
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

typedef void (*ds_test_fn)(void);
struct ds_test_case { const char *name; ds_test_fn fn; };
extern struct ds_test_case ds_tests[512];
extern int ds_ntests, ds_case_failed;

#define TEST(tname)                                                             \
    static void tname(void);                                                    \
    __attribute__((constructor)) static void reg_##tname(void) {                \
        ds_tests[ds_ntests].name = #tname; ds_tests[ds_ntests++].fn = tname;    \
    }                                                                           \
    static void tname(void)

/* CLEANUP(name): runs after every case (leak checkers then see freed shared fixtures); not a test
 * case, so it is neither counted nor printed as one. */
extern ds_test_fn ds_cleanups[16];
extern int ds_ncleanups;
#define CLEANUP(cname)                                                          \
    static void cname(void);                                                    \
    __attribute__((constructor)) static void reg_##cname(void) {                \
        ds_cleanups[ds_ncleanups++] = cname;                                    \
    }                                                                           \
    static void cname(void)

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            ds_case_failed = 1;                                                 \
            fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, " " __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                         \
    CHECK((hay) && strstr((hay), (needle)) != NULL, "'%s' not found in '%s'",   \
          (needle), (hay) ? (hay) : "(null)")

/* Scratch directory for this test program (created under $DS_TEST_TMP or /tmp). */
const char *ds_test_tmpdir(void);
/* Run a shell command, return its exit status (or -1). Output captured into buf if given. */
int ds_test_sh(char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Path of the dsflash binary under test: $DSFLASH_BIN, else build/$BUILD/dsflash (absolute). */
const char *ds_test_bin(void);
/* A tiny checkpoint made once per test program by `dsflash mkmodel --config tiny` (split Engram
 * tables re-verified with `dsflash reassemble`); NULL (with the reason on stderr) if that failed. */
const char *ds_test_tiny_fixture(void);
/* A checkpoint made once per test program by `dsflash mkmodel ARGS --out <tmp>/NAME` (in the W4A8
 * layout its split Engram tables re-verified with `dsflash reassemble`); NULL (with the reason on
 * stderr) if that failed. */
const char *ds_test_model_fixture(const char *name, const char *mkmodel_args);
/* The trained fixture (tests/data/trained-tiny, float release with its DSpark draft) quantized once per
 * test program by `dsflash quantize` into the W4A8 release; its held-out ids are left beside the
 * float copy (tt_float/heldout.u32).  NULL (with the reason on stderr) if that failed. */
const char *ds_test_trained_fixture(void);

int ds_test_main(int argc, char **argv);
#define RUN_ALL() int main(int argc, char **argv) { return ds_test_main(argc, argv); }
#endif
