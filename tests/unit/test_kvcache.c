/* Paged per-sequence state (MODEL.md §6, SERVING.md §4) without weights: page reservation equals
 * what ds_seq_pages_needed predicts, all-or-nothing reservation under pool exhaustion, window
 * retention, rollback rules, prefix adoption, and 64-bit page addressing above 4 GiB. */
#include "check.h"
#include "model/model.h"
#include <stdlib.h>

static ds_model *fake_model(void) {
    ds_model *m = calloc(1, sizeof *m);
    CHECK(ds_config_preset("tiny", &m->cfg) == 0);
    m->max_len = m->cfg.max_pos;
    m->kv_bs = 16;
    return m;
}

/* allocator wrapper counting allocations per kind */
typedef struct counting { ds_kv_alloc_ops inner; uint32_t allocs[DS_KV_KINDS], releases[DS_KV_KINDS]; } counting;
static int c_alloc(void *ctx, ds_kv_kind k, uint32_t *pg) {
    counting *c = ctx;
    int rc = c->inner.alloc(c->inner.ctx, k, pg);
    if (rc == 0) c->allocs[k]++;
    return rc;
}
static void c_release(void *ctx, ds_kv_kind k, uint32_t pg) {
    counting *c = ctx;
    c->releases[k]++;
    c->inner.release(c->inner.ctx, k, pg);
}

static int step(ds_seq *s, int n) {
    ds_error err;
    int32_t *tok = calloc((size_t)n, sizeof(int32_t));
    int rc = ds_seq_reserve_many(&s, &n, 1, &err);
    if (rc == 0) ds_seq_commit(s, tok, n);
    free(tok);
    return rc;
}

TEST(pages_needed_predicts_reservation) {
    ds_model *m = fake_model();
    int bss[3] = {16, 32, 128};
    for (int bi = 0; bi < 3; bi++) {
        ds_kv_layout lay;
        ds_kv_layout_init(&lay, &m->cfg, bss[bi]);
        uint32_t pages[DS_KV_KINDS] = {300, 300, 64, 0, 2};
        ds_kv_pools pools;
        ds_error err;
        CHECK(ds_kv_pools_create(&pools, &lay, pages, &err) == 0);
        counting cnt = {ds_kv_simple_ops(&pools), {0}, {0}};
        ds_kv_alloc_ops ops = {&cnt, c_alloc, c_release};
        ds_seq *s = ds_seq_new_paged(m, &pools, ops);
        CHECK(s != NULL);
        int sizes[] = {1, 7, 16, 64, 1, 1, 3, 100, 5, 1, 200, 33};
        uint32_t held_win_max = 0;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            uint32_t need[DS_KV_KINDS], before[DS_KV_KINDS];
            ds_seq_pages_needed(s, sizes[i], need);
            memcpy(before, cnt.allocs, sizeof before);
            CHECK(step(s, sizes[i]) == 0);
            for (int k = 0; k < DS_KV_KINDS; k++)
                CHECK(cnt.allocs[k] - before[k] == need[k], "bs %d step %zu kind %d: %u allocated, %u predicted", bss[bi], i,
                      k, cnt.allocs[k] - before[k], need[k]);
            uint32_t held = cnt.allocs[DS_KV_WIN] - cnt.releases[DS_KV_WIN];
            if (held > held_win_max) held_win_max = held;
            /* CKV/IDX cover every block; WIN covers the retention span only */
            int64_t nb = (s->len + bss[bi] - 1) / bss[bi];
            CHECK(s->pg.n_blk == nb);
            int64_t lo = s->len - m->cfg.window - DS_MAX_ROLLBACK;
            if (lo < 0) lo = 0;
            for (int64_t b = 0; b < nb; b++)
                CHECK((s->pg.win[b] != DS_KV_NONE) == (b >= lo / bss[bi]), "bs %d block %lld window page", bss[bi], (long long)b);
        }
        CHECK(held_win_max <= (uint32_t)((m->cfg.window + DS_MAX_ROLLBACK) / bss[bi] + 2), "WIN pages held %u", held_win_max);
        ds_seq_free(s);
        for (int k = 0; k < DS_KV_KINDS; k++) CHECK(cnt.allocs[k] == cnt.releases[k], "kind %d leaked", k);
        ds_kv_pools_destroy(&pools);
    }
    free(m);
}

TEST(exhaustion_is_all_or_nothing) {
    ds_model *m = fake_model();
    ds_kv_layout lay;
    ds_kv_layout_init(&lay, &m->cfg, 16);
    uint32_t pages[DS_KV_KINDS] = {4, 4, 8, 0, 2};
    ds_kv_pools pools;
    ds_error err;
    CHECK(ds_kv_pools_create(&pools, &lay, pages, &err) == 0);
    ds_seq *a = ds_seq_new_paged(m, &pools, ds_kv_simple_ops(&pools));
    ds_seq *b = ds_seq_new_paged(m, &pools, ds_kv_simple_ops(&pools));
    CHECK(step(a, 40) == 0);              /* 3 CKV blocks */
    uint32_t free_before[DS_KV_KINDS];
    memcpy(free_before, pools.n_free, sizeof free_before);
    ds_seq *both[2] = {b, a};
    int n[2] = {10, 30};                  /* b fits, a would need 2 more CKV pages: only 1 left */
    CHECK(ds_seq_reserve_many(both, n, 2, &err) < 0);
    CHECK(!strcmp(err.code, "E_KV_EXHAUSTED"), "%s", err.code);
    CHECK(!memcmp(free_before, pools.n_free, sizeof free_before), "pages returned after a failed reservation");
    CHECK(a->len == 40 && b->len == 0 && b->pg.n_blk == 0 && b->pg.state == DS_KV_NONE);
    ds_seq_free(a);
    ds_seq_free(b);
    ds_kv_pools_destroy(&pools);
    free(m);
}

TEST(rollback_rules) {
    ds_model *m = fake_model();
    char eb[256];
    ds_seq *s = ds_seq_new_bs(m, 16, eb, sizeof eb);
    CHECK(s != NULL, "%s", eb);
    CHECK(step(s, 100) == 0);
    CHECK(ds_seq_truncate(s, 101) < 0, "cannot grow by truncation");
    CHECK(ds_seq_truncate(s, 95) == 0 && s->len == 95);
    CHECK(step(s, 5) == 0 && s->len == 100);
    /* a window row 100-16-30 back is no longer guaranteed: too far */
    CHECK(ds_seq_truncate(s, 40) < 0 && s->len == 100, "far rollback refused, length unchanged");
    CHECK(ds_seq_truncate(s, 100 - DS_MAX_ROLLBACK) == 0);
    CHECK(ds_seq_truncate(s, 0) == 0 && s->len == 0 && s->pg.n_blk == 0 && s->pg.state == DS_KV_NONE);
    for (int k = 0; k < DS_KV_KINDS; k++) CHECK(s->pools->n_free[k] == s->pools->n_pages[k], "kind %d all free", k);
    CHECK(step(s, 3) == 0 && s->len == 3);
    ds_seq_free(s);
    CHECK(ds_seq_new_bs(m, 24, eb, sizeof eb) == NULL);
    CHECK(strstr(eb, "E_KV_LAYOUT") != NULL, "%s", eb);
    free(m);
}

TEST(adopt_prefix) {
    ds_model *m = fake_model();
    ds_kv_layout lay;
    ds_kv_layout_init(&lay, &m->cfg, 16);
    uint32_t pages[DS_KV_KINDS] = {16, 16, 16, 0, 4};
    ds_kv_pools pools;
    ds_error err;
    CHECK(ds_kv_pools_create(&pools, &lay, pages, &err) == 0);
    ds_seq *s = ds_seq_new_paged(m, &pools, ds_kv_simple_ops(&pools));
    uint32_t ck[3], ix[3], wn[2];
    /* the "engine" takes pages out of the pool for a cached prefix of 3 blocks */
    ds_kv_alloc_ops ops = ds_kv_simple_ops(&pools);
    for (int i = 0; i < 3; i++) {
        ops.alloc(ops.ctx, DS_KV_CKV, &ck[i]);
        ops.alloc(ops.ctx, DS_KV_IDX, &ix[i]);
    }
    for (int i = 0; i < 2; i++) ops.alloc(ops.ctx, DS_KV_WIN, &wn[i]);
    int32_t tok[48];
    for (int i = 0; i < 48; i++) tok[i] = i;
    /* window 16: position 48 reads 33..47, inside block 2 (and 2 window pages cover 32..47 too) */
    CHECK(ds_seq_adopt_prefix(s, 3, ck, ix, 0, wn, tok, &err) < 0);
    CHECK(!strcmp(err.code, "E_KV_PREFIX"), "%s", err.code);
    CHECK(ds_seq_adopt_prefix(s, 3, ck, ix, 1, wn + 1, tok, &err) == 0, "%s", err.msg);
    CHECK(s->len == 48 && s->shared_len == 48 && s->tokens[47] == 47 && s->pg.win[2] == wn[1]);
    CHECK(ds_seq_truncate(s, 47) < 0, "no rollback into the shared prefix");
    CHECK(step(s, 20) == 0 && s->len == 68);
    CHECK(ds_seq_adopt_prefix(s, 1, ck, ix, 1, wn, tok, &err) < 0, "only into an empty sequence");
    ds_seq_free(s);
    ds_kv_pools_destroy(&pools);
    free(m);
}

TEST(row_addresses_disjoint_and_64bit) {
    ds_model *m = fake_model();
    ds_kv_layout lay;
    ds_kv_layout_init(&lay, &m->cfg, 256);
    /* enough CKV pages for the pool to pass 2^32 bytes; the pool is mapped lazily */
    uint32_t npg = (uint32_t)((5ULL << 30) / lay.page_bytes[DS_KV_CKV]) + 1;
    uint32_t pages[DS_KV_KINDS] = {npg, 8, 8, 0, 2};
    ds_kv_pools pools;
    ds_error err;
    CHECK(ds_kv_pools_create(&pools, &lay, pages, &err) == 0, "%s", err.msg);
    pools.high_first = 1;
    ds_seq *s = ds_seq_new_paged(m, &pools, ds_kv_simple_ops(&pools));
    CHECK(step(s, 300) == 0);
    CHECK(s->pg.ckv[0] == npg - 1, "high-first hands out the top page (%u)", s->pg.ckv[0]);
    uint64_t off = (uint64_t)s->pg.ckv[0] * lay.page_bytes[DS_KV_CKV];
    CHECK(off > (1ULL << 32), "page offset 0x%llx above 4 GiB", (unsigned long long)off);
    /* every (source, entry) row of block 0 lands at its own place, inside its page */
    for (int src = 0; src < lay.n_src; src++) {
        int r = lay.src_ratio[src];
        for (int64_t j = 0; j < 256 / r; j++) {
            uint8_t *p = (uint8_t *)ds_seq_ckv_row(s, src, j);
            uint8_t *want = pools.base[DS_KV_CKV] + off + lay.ckv_off[src] + (uint64_t)j * lay.d_h * 2;
            CHECK(p == want, "src %d entry %lld", src, (long long)j);
        }
    }
    ds_seq_ckv_row(s, 1, 255)[63] = 0x1234;
    CHECK(((uint16_t *)(pools.base[DS_KV_CKV] + off + lay.page_bytes[DS_KV_CKV]))[-1] == 0x1234, "last row ends the page");
    /* window rows: layer-major; state rows: keyed by position mod 32 */
    CHECK((uint8_t *)ds_seq_win_row(s, 1, 256 + 3) - (uint8_t *)ds_seq_win_row(s, 0, 256 + 3) == 256 * 64 * 2);
    CHECK(ds_seq_state_row(s, 0, 5) == ds_seq_state_row(s, 0, 37));
    CHECK(ds_seq_state_row(s, 0, 5) != ds_seq_state_row(s, 0, 6));
    ds_seq_free(s);
    ds_kv_pools_destroy(&pools);
    free(m);
}

RUN_ALL()
