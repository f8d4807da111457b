/* Start-up policy (engine/engine_setup.h): the KV memory plan read from a fake meminfo file
 * (DSFLASH_MEMINFO), with every expected budget computed here by hand from the formula, and the
 * sampler mask built from a token lookup.  Issue: the default budget claimed 20 GB on a 24 GB host
 * while another process held the memory; MemAvailable must bound it. */
#include "check.h"
#include "engine/engine_setup.h"
#include <stdio.h>
#include <stdlib.h>

/* CHECK_STR_CONTAINS on arrays (the harness macro tests the pointer for NULL). */
#define CONTAINS(hay, needle) CHECK(strstr((hay), (needle)) != NULL, "'%s' not found in '%s'", (needle), (hay))

static const char *fake_meminfo(unsigned long long total_kb, unsigned long long avail_kb) {
    static char path[512];
    snprintf(path, sizeof path, "%s/meminfo", ds_test_tmpdir());
    FILE *f = fopen(path, "w");
    fprintf(f, "MemTotal:       %llu kB\nMemFree:         1234 kB\nMemAvailable:   %llu kB\nBuffers:          10 kB\n",
            total_kb, avail_kb);
    fclose(f);
    setenv("DSFLASH_MEMINFO", path, 1);
    return path;
}

static ds_mem_inputs inputs(void) {
    /* activations = 1.5 * 8192 * (1024*4 + 64*128*4) = 1.5 * 8192 * 36864 = 452984832 */
    return (ds_mem_inputs){.utilization = 0.90, .weights_mapped = 1000000000ull, .weights_packed = 500000000ull,
                           .max_num_batched_tokens = 8192, .max_num_seqs = 32, .vocab = 1024, .dim = 128};
}

TEST(memory_plan_is_bounded_by_mem_available) {
    const uint64_t GiB = 1ull << 30, act = 452984832ull, misc = 2 * GiB;
    /* 24 GiB host, another process holds all but 6 GiB */
    fake_meminfo(24ull << 20, 6ull << 20);
    ds_mem_inputs in = inputs();
    ds_mem_plan p;
    ds_error err = {0};
    CHECK(ds_mem_plan_compute(&in, &p, &err) == 0, "%s", err.msg);
    CHECK(p.mem_total == 24 * GiB && p.mem_available == 6 * GiB);
    CHECK(p.activations == act, "activations %llu", (unsigned long long)p.activations);
    uint64_t want_avail = 6 * GiB - 1000000000ull - act - misc;
    uint64_t want_share = (uint64_t)(0.90 * (double)(24 * GiB)) - 1500000000ull - act - misc;
    CHECK(p.from_available == want_avail && p.from_share == want_share, "%llu %llu", (unsigned long long)p.from_available,
          (unsigned long long)p.from_share);
    CHECK(p.kv_bytes == want_avail, "budget %llu, expected MemAvailable-bound %llu", (unsigned long long)p.kv_bytes,
          (unsigned long long)want_avail);
    char line[1024];
    ds_mem_plan_line(&p, "page-cache", line, sizeof line);
    CONTAINS(line, "MemAvailable 6442450944 B");
    CONTAINS(line, "weights 1000000000 B mapped (page-cache) + 500000000 B repacked");
    char want[64];
    snprintf(want, sizeof want, "KV budget %llu B = min(", (unsigned long long)want_avail);
    CONTAINS(line, want);
    /* an idle host: the share of MemTotal binds */
    fake_meminfo(24ull << 20, 23ull << 20);
    CHECK(ds_mem_plan_compute(&in, &p, &err) == 0 && p.kv_bytes == want_share, "idle host budget %llu",
          (unsigned long long)p.kv_bytes);
}

TEST(memory_plan_explicit_and_exhausted) {
    fake_meminfo(24ull << 20, 2ull << 20);   /* 2 GiB available: less than the reservations */
    ds_mem_inputs in = inputs();
    ds_mem_plan p;
    ds_error err = {0};
    CHECK(ds_mem_plan_compute(&in, &p, &err) == -1 && !strcmp(err.code, "E_KV_BUDGET"));
    CONTAINS(err.msg, "MemAvailable 2147483648 B");
    CONTAINS(err.msg, "--kv-cache-memory");
    in.kv_explicit = 256ull << 20;
    CHECK(ds_mem_plan_compute(&in, &p, &err) == 0 && p.kv_bytes == (256ull << 20) && p.kv_explicit);
    CHECK(p.explicit_exceeds_available, "an explicit budget above what is free is flagged");
    char line[1024];
    ds_mem_plan_line(&p, "page-cache", line, sizeof line);
    CONTAINS(line, "KV budget 268435456 B (--kv-cache-memory, WARN");
}

TEST(meminfo_errors_name_the_file) {
    char path[512];
    snprintf(path, sizeof path, "%s/meminfo-bad", ds_test_tmpdir());
    FILE *f = fopen(path, "w");
    fprintf(f, "MemTotal: 100 kB\n");
    fclose(f);
    uint64_t t, a;
    ds_error err = {0};
    CHECK(ds_meminfo_read(path, &t, &a, &err) == -1);
    CONTAINS(err.msg, "meminfo-bad: expected MemTotal and MemAvailable lines in kB, found no MemAvailable");
    CHECK(ds_meminfo_read("/nonexistent/meminfo", &t, &a, &err) == -1);
    CONTAINS(err.msg, "/nonexistent/meminfo: cannot open");
    unsetenv("DSFLASH_MEMINFO");
    CHECK(ds_meminfo_read(NULL, &t, &a, &err) == 0 && t > 0 && a > 0 && a <= t, "the real /proc/meminfo");
}

/* Control tokens resolve to ids 100 + their position in the list, except the third (unknown). */
static int32_t lookup(const void *ctx, const char *lit) {
    for (int k = 0; k < ds_n_control_tokens; k++)
        if (!strcmp(lit, ds_control_tokens[k])) return k == 2 ? -1 : 100 + k;
    return -1;
}

TEST(sampler_mask_spares_control_tokens) {
    ds_synthetic_options o = {.vocab = 512, .window = 16, .eos_id = 101, .bos_id = 100, .pad_id = 2, .noise_id = 300,
                              .image_id = 310, .nan_token = -1, .peak = 8};
    ds_backend *be = ds_backend_synthetic_new(&o);
    ds_token_mask m;
    char line[512];
    ds_engine_sampler_mask(be, NULL, 0, lookup, NULL, &m, line, sizeof line);
    CHECK(m.masked[300] && m.masked[2] && m.masked[310], "noise, PAD and the image sentinel are masked");
    CHECK(m.masked[100], "BOS is masked although it is a control token (SERVING.md §9: always, even over logit_bias)");
    CHECK(!m.masked[101] && !m.masked[103], "EOS and the other control ids are spared");
    CONTAINS(line, "spared control ids: 101 103");
    CONTAINS(line, "noise 300, BOS 100, PAD 2");
    ds_token_mask_free(&m);
    ds_backend_free(be);
}

/* The default sentinel list on DeepSeek-V4.1's vocabulary size (SERVING.md §9): exactly the ids
 * 128847..129270 and 129279 join the mask, minus a control token that falls inside them; "none"
 * masks no sentinel; a list of our own replaces the default. */
static int32_t lookup_in_range(const void *ctx, const char *lit) {
    (void)ctx;
    if (!strcmp(lit, ds_control_tokens[7])) return 128900;   /* a control token inside the sentinel range */
    return lookup(ctx, lit);
}

TEST(sampler_mask_sentinel_lists) {
    ds_synthetic_options o = {.vocab = 129280, .window = 16, .eos_id = 101, .bos_id = 100, .pad_id = 2, .noise_id = 128799,
                              .image_id = 310, .nan_token = -1, .peak = 8};
    ds_backend *be = ds_backend_synthetic_new(&o);
    ds_int_range def[8], own[8];
    char why[200], line[512];
    CHECK(ds_parse_int_ranges(DS_DEFAULT_SENTINEL_IDS, 0, INT32_MAX, def, 8, why, sizeof why) == 2);
    CHECK(ds_parse_int_ranges("5-7,20", 0, INT32_MAX, own, 8, why, sizeof why) == 2);
    ds_token_mask md, mn, mo;
    ds_engine_sampler_mask(be, def, 2, lookup_in_range, NULL, &md, line, sizeof line);
    CONTAINS(line, "2 sentinel ranges");
    ds_engine_sampler_mask(be, NULL, 0, lookup_in_range, NULL, &mn, line, sizeof line);
    ds_engine_sampler_mask(be, own, 2, lookup_in_range, NULL, &mo, line, sizeof line);
    CHECK(md.count - mn.count == 424, "default list adds 425 ids less the spared one: %d", md.count - mn.count);
    CHECK(md.masked[128847] && md.masked[129270] && md.masked[129279] && md.masked[129000], "the ranges are masked");
    CHECK(!md.masked[128846] && !md.masked[129271] && !md.masked[129278], "their neighbours are not");
    CHECK(!md.masked[128900], "a control token inside a range stays spared");
    CHECK(md.masked[128799] && mn.masked[128799], "the noise token is masked with or without sentinels");
    CHECK(!mn.masked[129000] && !mn.masked[129279], "none: no sentinel masked");
    CHECK(mo.count - mn.count == 4 && mo.masked[5] && mo.masked[7] && mo.masked[20] && !mo.masked[8] && !mo.masked[129279],
          "an own list replaces the default");
    ds_token_mask_free(&md);
    ds_token_mask_free(&mn);
    ds_token_mask_free(&mo);
    ds_backend_free(be);
}

RUN_ALL()
