/* `--engram-residency` (model/engram_resident.c).  huge-pages: the Engram tables copied at load into
 * anonymous memory must give the same logits, bit for bit, as the tables read through the file
 * mapping (both tiers, several token rows per step so that every row's lookups differ); the model
 * must read the copy, not the mapping; the memory plan must move exactly the tables' bytes from
 * "mapped" to "repacked"; an unknown residency is refused naming the value; the sampled resident
 * share of SERVING.md §13 (mincore) is 100% for tables just read through in full, in either form.
 * locked: VmLck covers the tables, resident before any read, same logits.  page-cache: every page of
 * the tables mapped at load (no fault when read).  disk: left out of the memory plan.  Where the host's
 * transparent huge pages are "never" the load must fail naming that setting instead (asserted too:
 * the test never passes without checking one of the two behaviours). */
#include "check.h"
#include "dsflash.h"
#include "engine/engine_setup.h"
#include "model/model.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

enum { ROWS = 24 };

static ds_model *load(const char *numerics, const char *residency, char *eb, size_t n) {
    const char *d = ds_test_tiny_fixture();
    if (!d) {
        snprintf(eb, n, "no tiny fixture");
        return NULL;
    }
    ds_load_options o = {.kernels = "auto", .threads = 2, .numerics = numerics, .engram_residency = residency};
    return ds_model_load(d, &o, eb, n);
}

/* Logits of the last row after a ROWS-token prompt in chunks of 5 (ROWS x vocab floats, malloc'd). */
static float *run_prompt(ds_model *m) {
    const int V = ds_model_vocab_size(m);
    int32_t tok[ROWS];
    uint32_t seed = 12345;
    for (int i = 0; i < ROWS; i++) {
        seed = seed * 1664525u + 1013904223u;
        tok[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(V - 3));
    }
    float *logits = calloc((size_t)ROWS * (size_t)V, sizeof(float));
    ds_seq *s = ds_seq_new(m);
    char eb[512];
    for (int p = 0; p < ROWS; p += 5) {
        const int n = ROWS - p < 5 ? ROWS - p : 5;
        if (ds_seq_step(m, s, tok + p, n, logits + (size_t)p * (size_t)V, n, eb, sizeof eb) < 0) {
            fprintf(stderr, "  step: %s\n", eb);
            free(logits);
            logits = NULL;
            break;
        }
    }
    ds_seq_free(s);
    return logits;
}

static int thp_never(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[256] = "";
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
    }
    return !f || strstr(line, "[never]") != NULL;
}

/* Every table read through in full (memcmp against itself touches each page), then sampled. */
static void check_resident(const ds_model *m, const char *what) {
    double share[DS_MAX_LIST];
    volatile unsigned sum = 0;
    for (int e = 0; e < m->cfg.n_engram; e++)
        for (size_t i = 0; i < m->engram[e].t_codes->nbytes; i += 512) sum += ((const uint8_t *)m->engram[e].codes)[i];
    (void)sum;
    const int n = ds_engram_resident_share(m, 4096, share);
    CHECK(n == m->cfg.n_engram && n > 0, "%s: shares of %d tables", what, n);
    for (int e = 0; e < n; e++) CHECK(share[e] == 1.0, "%s: table %d resident share %.4f after a full read", what, e, share[e]);
}

static void same_logits(const char *numerics) {
    char eb[1024];
    ds_model *a = load(numerics, "page-cache", eb, sizeof eb);
    CHECK(a != NULL, "page-cache load: %s", eb);
    if (!a) return;
    float *la = run_prompt(a);
    check_resident(a, "page-cache");
    const uint64_t mapped_a = ds_model_weights_mapped(a), packed_a = ds_model_weights_packed(a);
    const int V = ds_model_vocab_size(a);
    ds_model_free(a);
    ds_model *b = load(numerics, "huge-pages", eb, sizeof eb);
    if (thp_never()) {
        CHECK(b == NULL && strstr(eb, "E_ENGRAM_RESIDENCY") && strstr(eb, "transparent_hugepage") && strstr(eb, "never"),
              "a host without transparent huge pages must refuse huge-pages: %s", b ? "(loaded)" : eb);
        if (b) ds_model_free(b);
        free(la);
        return;
    }
    CHECK(b != NULL, "huge-pages load: %s", eb);
    if (!b) {
        free(la);
        return;
    }
    uint64_t table_bytes = 0;
    for (int e = 0; e < b->cfg.n_engram; e++) {
        const ds_engram_weights *ew = &b->engram[e];
        CHECK(ew->codes == ew->copy_codes && ew->codes != ew->t_codes->data && ew->scales == ew->copy_scales &&
                  ew->scales != ew->t_scales->data, "table %d is read from its copy", e);
        CHECK(!memcmp(ew->copy_codes, ew->t_codes->data, ew->t_codes->nbytes) &&
                  !memcmp(ew->copy_scales, ew->t_scales->data, ew->t_scales->nbytes), "table %d: copy equals the file", e);
        table_bytes += ew->t_codes->nbytes + ew->t_scales->nbytes;
    }
    CHECK(b->cfg.n_engram > 0 && table_bytes > 0, "the fixture has Engram tables");
    CHECK(ds_model_weights_mapped(b) == mapped_a - table_bytes && ds_model_weights_packed(b) == packed_a + table_bytes,
          "memory plan: mapped %llu -> %llu, repacked %llu -> %llu, tables %llu B", (unsigned long long)mapped_a,
          (unsigned long long)ds_model_weights_mapped(b), (unsigned long long)packed_a,
          (unsigned long long)ds_model_weights_packed(b), (unsigned long long)table_bytes);
    float *lb = run_prompt(b);
    check_resident(b, "huge-pages");
    CHECK(la && lb && !memcmp(la, lb, sizeof(float) * (size_t)ROWS * (size_t)V),
          "%s tier: logits of %d rows equal bit for bit", numerics, ROWS);
    free(la);
    free(lb);
    ds_model_free(b);
}

TEST(huge_page_tables_give_the_same_logits_exact) { same_logits("exact"); }
TEST(huge_page_tables_give_the_same_logits_fast) { same_logits("fast"); }

/* VmLck of this process in bytes (0 when unreadable). */
static uint64_t locked_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmLck: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024u;
}

/* locked: the mapping's pages mlock'ed at load, so resident without being read; same logits.  Where
 * the memlock limit is too small the load must fail naming it (asserted instead). */
TEST(locked_tables_are_resident_and_give_the_same_logits) {
    char eb[1024];
    ds_model *a = load("fast", "page-cache", eb, sizeof eb);
    CHECK(a != NULL, "page-cache load: %s", eb);
    if (!a) return;
    float *la = run_prompt(a);
    const int V = ds_model_vocab_size(a);
    ds_model_free(a);
    ds_model *b = load("fast", "locked", eb, sizeof eb);
    if (!b) {
        CHECK(strstr(eb, "E_ENGRAM_RESIDENCY: engram residency locked: ") && strstr(eb, "RLIMIT_MEMLOCK"),
              "a refused mlock names the limit: %s", eb);
        free(la);
        return;
    }
    uint64_t tables = 0;
    for (int e = 0; e < b->cfg.n_engram; e++) tables += b->engram[e].t_codes->nbytes + b->engram[e].t_scales->nbytes;
    CHECK(locked_bytes() >= tables, "VmLck %llu B covers the tables' %llu B", (unsigned long long)locked_bytes(),
          (unsigned long long)tables);
    double share[DS_MAX_LIST];
    const int n = ds_engram_resident_share(b, 4096, share);
    CHECK(n == b->cfg.n_engram && n > 0, "shares of %d tables", n);
    for (int e = 0; e < n; e++) CHECK(share[e] == 1.0, "locked table %d resident share %.4f before any read", e, share[e]);
    CHECK(b->engram[0].codes == b->engram[0].t_codes->data, "locked tables are read through the mapping");
    float *lb = run_prompt(b);
    CHECK(la && lb && !memcmp(la, lb, sizeof(float) * (size_t)ROWS * (size_t)V), "locked: logits equal bit for bit");
    free(la);
    free(lb);
    ds_model_free(b);
}

/* Minor faults of one read of a byte in every page of [p, p + n). */
static long faults_reading(const uint8_t *p, size_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    struct rusage a, b;
    volatile unsigned sum = 0;
    getrusage(RUSAGE_SELF, &a);
    for (size_t i = 0; i < n; i += page) sum += p[i];
    getrusage(RUSAGE_SELF, &b);
    (void)sum;
    return b.ru_minflt - a.ru_minflt;
}

/* page-cache: the load maps every page of the tables (MADV_POPULATE_READ), so a lookup never takes
 * a fault; a read of every page after the load takes none.  Control: with our page-table entries
 * dropped (MADV_DONTNEED on the read-only file mapping; the bytes stay in the page cache) the same
 * read faults, so the count can see what it asserts the absence of. */
TEST(page_cache_tables_are_mapped_at_load) {
    char eb[1024];
    ds_model *m = load("fast", "page-cache", eb, sizeof eb);
    CHECK(m != NULL, "page-cache load: %s", eb);
    if (!m) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int e = 0; e < m->cfg.n_engram; e++) {
        const ds_tensor *t = m->engram[e].t_codes;
        CHECK(t->file != NULL && m->engram[e].codes == t->data, "table %d is read through its file mapping", e);
        const uintptr_t a = (uintptr_t)t->data & ~(uintptr_t)(page - 1);
        const size_t n = (uintptr_t)t->data + (size_t)t->nbytes - a, pages = (n + page - 1) / page;
        const long mapped = faults_reading((const uint8_t *)a, n);
        CHECK(pages >= 16 && mapped == 0, "table %d: %zu pages read after the load, %ld faults", e, pages, mapped);
        CHECK(madvise((void *)a, n, MADV_DONTNEED) == 0, "table %d: dropping the mapping's entries", e);
        const long dropped = faults_reading((const uint8_t *)a, n);
        CHECK(dropped > 0, "control: table %d read again with its entries dropped: %ld faults", e, dropped);
    }
    ds_model_free(m);
}

/* disk: the mapping, its bytes left out of the memory plan (mapped drops by the tables, nothing repacked). */
TEST(disk_tables_leave_the_memory_plan) {
    char eb[1024];
    ds_model *a = load("fast", "page-cache", eb, sizeof eb), *b = NULL;
    CHECK(a != NULL, "page-cache load: %s", eb);
    if (a) b = load("fast", "disk", eb, sizeof eb);
    CHECK(!a || b != NULL, "disk load: %s", eb);
    if (a && b) {
        uint64_t tables = 0;
        for (int e = 0; e < b->cfg.n_engram; e++) tables += b->engram[e].t_codes->nbytes + b->engram[e].t_scales->nbytes;
        CHECK(tables > 0 && ds_model_weights_mapped(b) == ds_model_weights_mapped(a) - tables &&
                  ds_model_weights_packed(b) == ds_model_weights_packed(a), "mapped %llu -> %llu, tables %llu B",
              (unsigned long long)ds_model_weights_mapped(a), (unsigned long long)ds_model_weights_mapped(b),
              (unsigned long long)tables);
        CHECK(b->engram[0].codes == b->engram[0].t_codes->data, "disk tables are read through the mapping");
    }
    ds_model_free(a);
    ds_model_free(b);
}

TEST(unknown_residency_is_refused) {
    char eb[1024];
    ds_model *m = load("fast", "mlock", eb, sizeof eb);
    CHECK(m == NULL && !strcmp(eb, "E_ARG: engram residency: expected \"page-cache\", \"huge-pages\", \"locked\" or "
                                   "\"disk\", found \"mlock\""), "%s", m ? "(loaded)" : eb);
    if (m) ds_model_free(m);
}

RUN_ALL()
