/* Published pages of prepared linears are given back at load (ds_model_release_published).
 *
 * What must hold, on both SIMD paths (AVX-512 where the CPU has it, and AVX2): every linear whose
 * forwards read only its prepared copy has its mapped pages dropped from memory at load (mincore
 * on the mapping: page cache and our page tables) and they stay dropped through a prompt, so
 * nothing in a forward reads them; the logits equal those of a load on the reference kernels,
 * which prepare nothing and read every published byte; the bytes reported as given back are
 * exactly the pages mincore finds out of memory, and the memory plan counts the mapped bytes less
 * those; linears the kernels read in place (the exact tier's float linears, FP8) keep their pages;
 * the reference path gives nothing back.  mincore is checked against a page the prompt must have
 * read (a positive control), so a host where it reports nothing cannot pass. */
#define _GNU_SOURCE
#include "check.h"
#include "dsflash.h"
#include "engine/engine_setup.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { ROWS = 12 };

static ds_model *load(const char *dir, const char *kernels, const char *numerics, char *eb, size_t n) {
    if (!dir) {
        snprintf(eb, n, "no fixture");
        return NULL;
    }
    ds_load_options o = {.kernels = kernels, .threads = 2, .numerics = numerics};
    return ds_model_load(dir, &o, eb, n);
}

static const char *official_fixture(void) { return ds_test_model_fixture("tiny_official", "--config tiny --format official"); }

/* Token ids of the prompt (fixed) and its logits, all ROWS rows (malloc'd), in steps of 4. */
static const int32_t *prompt(int V) {
    static int32_t tok[ROWS];
    uint32_t seed = 777;
    for (int i = 0; i < ROWS; i++) {
        seed = seed * 1664525u + 1013904223u;
        tok[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(V - 3));
    }
    return tok;
}

static float *run_prompt(ds_model *m) {
    const int V = ds_model_vocab_size(m);
    const int32_t *tok = prompt(V);
    float *logits = calloc((size_t)ROWS * (size_t)V, sizeof(float));
    ds_seq *s = ds_seq_new(m);
    char eb[512];
    for (int p = 0; p < ROWS && logits; p += 4)
        if (ds_seq_step(m, s, tok + p, 4, logits + (size_t)p * (size_t)V, 4, eb, sizeof eb) < 0) {
            fprintf(stderr, "  step: %s\n", eb);
            free(logits);
            logits = NULL;
        }
    ds_seq_free(s);
    return logits;
}

/* Resident pages among the whole pages of [p, p + n) (mincore), and how many there are. */
static size_t resident_pages(const void *p, size_t n, size_t *whole) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p;
    const uintptr_t lo = (a + page - 1) & ~(page - 1), hi = (a + n) & ~(page - 1);
    *whole = hi > lo ? (hi - lo) / page : 0;
    if (!*whole) return 0;
    unsigned char *v = malloc(*whole);
    size_t res = 0;
    if (mincore((void *)lo, hi - lo, v) == 0)
        for (size_t i = 0; i < *whole; i++) res += v[i] & 1;
    else
        res = *whole;   /* unreadable: counts as resident, so the checks below fail */
    free(v);
    return res;
}

/* Resident whole pages of the published codes of every idle linear (and their count). */
static size_t idle_resident(const ds_model *m, size_t *pages) {
    size_t res = 0;
    *pages = 0;
    for (int i = 0; i < m->n_lins; i++) {
        const ds_linear *L = m->lins[i];
        if (!ds_linear_published_idle(L)) continue;
        size_t whole = 0;
        res += resident_pages(L->w, ds_linear_code_bytes(L), &whole);
        *pages += whole;
    }
    return res;
}

static uint64_t files_bytes(const ds_model *m) {
    uint64_t s = 0;
    for (int i = 0; i < m->ckpt->n_files; i++) s += m->ckpt->files[i]->file_size;
    return s;
}

static int cmp_addr(const void *a, const void *b) {
    const uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* The released figure, measured: the distinct pages touching any idle linear's codes that are not
 * resident right after load (the loader read every one of them to prepare the copies, so only
 * pages given back can be out; pages shared with other tensors stay), and the memory plan. */
static void check_accounting(const ds_model *m, const char *what) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t n = 0, cap = 1024, out = 0, code = 0;
    uintptr_t *pg = malloc(sizeof *pg * cap);
    for (int i = 0; i < m->n_lins; i++) {
        const ds_linear *L = m->lins[i];
        if (!ds_linear_published_idle(L)) continue;
        const uintptr_t a = (uintptr_t)L->w, b = a + ds_linear_code_bytes(L);
        code += b - a;
        for (uintptr_t p = a & ~(page - 1); p < b; p += page) {
            if (n == cap) pg = realloc(pg, sizeof *pg * (cap *= 2));
            pg[n++] = p;
        }
    }
    qsort(pg, n, sizeof *pg, cmp_addr);
    for (size_t i = 0; i < n; i++) {
        if (i && pg[i] == pg[i - 1]) continue;
        unsigned char v = 1;
        CHECK(mincore((void *)pg[i], page, &v) == 0, "%s: mincore", what);
        out += !(v & 1);
    }
    free(pg);
    CHECK(code > 0 && m->released_bytes > 0 && m->released_bytes == out * page,
          "%s: released %zu B, %zu pages of idle linears (%zu code bytes) found out of memory", what, m->released_bytes, out,
          code);
    CHECK(ds_model_weights_mapped(m) == files_bytes(m) - m->released_bytes,
          "%s: memory plan maps %llu B, files %llu B less released %zu B", what,
          (unsigned long long)ds_model_weights_mapped(m), (unsigned long long)files_bytes(m), m->released_bytes);
}

/* Given back at load, still out after a prompt, and a page the prompt read (the first token's
 * embedding row) is resident: mincore sees residency on this host. */
static void check_pages_stay_out(ds_model *m, const char *what, float **logits) {
    size_t pages = 0, res = idle_resident(m, &pages);
    CHECK(pages > 0 && res == 0, "%s: %zu of %zu pages of idle linears resident right after load", what, res, pages);
    *logits = run_prompt(m);
    CHECK(*logits != NULL, "%s: prompt ran", what);
    res = idle_resident(m, &pages);
    CHECK(res == 0, "%s: %zu of %zu pages of idle linears read back by the forwards", what, res, pages);
    const int32_t t0 = prompt(ds_model_vocab_size(m))[0];
    size_t whole = 0;
    const ds_bf16 *row = m->embed + (size_t)t0 * (size_t)m->cfg.dim;
    const size_t got = resident_pages((const void *)((uintptr_t)row & ~(uintptr_t)4095), 4096, &whole);
    CHECK(whole == 1 && got == 1, "%s: mincore reports the embedding row the prompt read as resident (%zu of %zu)", what,
          got, whole);
}

static void same_as_reference(const char *dir, const char *kernels, const char *numerics, const char *what) {
    char eb[1024];
    ds_model *m = load(dir, kernels, numerics, eb, sizeof eb);
    CHECK(m != NULL, "%s: load: %s", what, eb);
    if (!m) return;
    CHECK(strcmp(ds_kernels_active(), "reference") != 0, "%s: a SIMD path is engaged (%s)", what, ds_kernels_active());
    check_accounting(m, what);
    float *la = NULL;
    check_pages_stay_out(m, what, &la);
    const int V = ds_model_vocab_size(m);
    ds_model_free(m);
    ds_model *r = load(dir, "reference", numerics, eb, sizeof eb);
    CHECK(r != NULL, "%s: reference load: %s", what, eb);
    if (!r) {
        free(la);
        return;
    }
    CHECK(r->released_bytes == 0 && ds_model_weights_mapped(r) == files_bytes(r),
          "%s: the reference path reads the published layout: released %zu B", what, r->released_bytes);
    float *lr = run_prompt(r);
    CHECK(la && lr && !memcmp(la, lr, sizeof(float) * (size_t)ROWS * (size_t)V),
          "%s: logits of %d rows equal the reference path's bit for bit", what, ROWS);
    free(la);
    free(lr);
    ds_model_free(r);
}

TEST(fast_tier_gives_back_every_prepared_linear) {
    same_as_reference(ds_test_tiny_fixture(), "auto", "fast", "W4A8 fast");
    same_as_reference(ds_test_tiny_fixture(), "avx2", "fast", "W4A8 fast, AVX2 path");
    char eb[1024];
    ds_model *m = load(ds_test_tiny_fixture(), "auto", "fast", eb, sizeof eb);
    CHECK(m != NULL, "load: %s", eb);
    if (!m) return;
    int n_int8 = 0, n_float = 0;
    for (int i = 0; i < m->n_lins; i++) {
        const ds_linear *L = m->lins[i];
        const int idle = ds_linear_published_idle(L);
        n_int8 += L->fmt <= DS_LIN_W4A8 && idle;
        n_float += (L->fmt == DS_LIN_BF16 || L->fmt == DS_LIN_F32) && idle;
        CHECK(idle, "linear %d (format %d, [%d, %d]) reads its published weights in the fast tier", i, L->fmt, L->out, L->in);
    }
    CHECK(n_int8 > 0 && n_float > 0, "the fixture has int8 (%d) and float (%d) linears", n_int8, n_float);
    ds_model_free(m);
}

TEST(exact_tier_keeps_the_float_linears_mapped) {
    same_as_reference(ds_test_tiny_fixture(), "auto", "exact", "W4A8 exact");
    char eb[1024];
    ds_model *m = load(ds_test_tiny_fixture(), "auto", "exact", eb, sizeof eb);
    CHECK(m != NULL, "load: %s", eb);
    if (!m) return;
    int n_float = 0;
    for (int i = 0; i < m->n_lins; i++) {
        const ds_linear *L = m->lins[i];
        const int is_float = L->fmt == DS_LIN_BF16 || L->fmt == DS_LIN_F32;
        n_float += is_float;
        CHECK(ds_linear_published_idle(L) == !is_float, "linear %d (format %d): idle %d in the exact tier", i, L->fmt,
              ds_linear_published_idle(L));
    }
    CHECK(n_float > 0, "the fixture has float linears");
    ds_model_free(m);
}

TEST(official_layout_gives_back_mxfp4_panels_and_keeps_fp8) {
    const char *dir = official_fixture();
    same_as_reference(dir, "auto", "fast", "official fast");
    same_as_reference(dir, "avx2", "fast", "official fast, AVX2 path");
    char eb[1024];
    ds_model *m = load(dir, "auto", "fast", eb, sizeof eb);
    CHECK(m != NULL, "load: %s", eb);
    if (!m) return;
    int n_fp8 = 0, n_mx = 0;
    for (int i = 0; i < m->n_lins; i++) {
        const ds_linear *L = m->lins[i];
        if (L->fmt == DS_LIN_FP8) {
            n_fp8++;
            CHECK(!ds_linear_published_idle(L), "FP8 linear %d is read in place, never given back", i);
        }
        n_mx += L->fmt == DS_LIN_MXFP4 && ds_linear_published_idle(L);
    }
    CHECK(n_fp8 > 0 && n_mx > 0, "the fixture has FP8 linears (%d) and MXFP4 linears served by panels (%d)", n_fp8, n_mx);
    ds_model_free(m);
}

RUN_ALL()
