/* KV page manager and prefix cache (SERVING.md §4.4, §4.5, §7): chained hashes, the tail-set
 * rule, LRU eviction order, refcount audits, the capacity lines, and the addressing self-test on
 * a pool larger than 2^32 bytes. */
#include "check.h"
#include "engine/kv_manager.h"

static void toy_layout(ds_kv_layout *lay, int bs) {
    memset(lay, 0, sizeof *lay);
    lay->bs = bs;
    lay->page_bytes[DS_KV_CKV] = (uint64_t)bs * 8;
    lay->page_bytes[DS_KV_IDX] = (uint64_t)bs * 2;
    lay->page_bytes[DS_KV_WIN] = (uint64_t)bs * 8;
    lay->page_bytes[DS_KV_DRAFT] = (uint64_t)bs * 8;
    lay->page_bytes[DS_KV_STATE] = 256;
}

TEST(prefix_hash_chains_and_salt) {
    uint8_t seed[16], h1[16], h2[16], h3[16], h4[16];
    ds_pc_seed_hash("model-a", seed);
    int32_t t[16];
    for (int i = 0; i < 16; i++) t[i] = i;
    ds_pc_block_hash(seed, t, 16, NULL, h1);
    ds_pc_block_hash(seed, t, 16, "salt", h2);
    CHECK(memcmp(h1, h2, 16), "salt must change block 0's hash");
    ds_pc_block_hash(h1, t, 16, NULL, h3);
    ds_pc_block_hash(h2, t, 16, NULL, h4);
    CHECK(memcmp(h3, h4, 16), "hashes chain: a different parent changes the child");
    uint8_t seed2[16], h5[16];
    ds_pc_seed_hash("model-b", seed2);
    ds_pc_block_hash(seed2, t, 16, NULL, h5);
    CHECK(memcmp(h1, h5, 16), "the seed comes from the model fingerprint");
}

TEST(kvm_prefix_hit_needs_tail_and_lru_order) {
    ds_kv_layout lay;
    toy_layout(&lay, 16);
    ds_kv_budget b;
    ds_error err;
    CHECK(ds_kv_budget_plan(&b, &lay, 64 * 1024, 20, 0, 4, 1, 256, &err) == 0, "%s", err.msg);
    ds_kvm km;
    CHECK(ds_kvm_init(&km, &lay, &b, 20, true, false, "fp", &err) == 0, "%s", err.msg);
    int32_t tok[200];
    for (int i = 0; i < 200; i++) tok[i] = 5 + i % 37;
    /* request A computes 100 positions in one chunk, then 1 decode position */
    ds_kv_seqtab a;
    ds_kvm_seqtab_init(&a);
    CHECK(ds_kvm_prepare(&km, &a, 0, 100) == 0);
    ds_kvm_after_step(&km, &a, tok, 100, NULL);
    CHECK(a.own.n_blk == 7 && a.n_hashed == 6, "blocks %d hashed %d", (int)a.own.n_blk, a.n_hashed);
    /* window retention: blocks intersecting [100-20, 100] = blocks 5, 6 */
    for (int j = 0; j < 7; j++) CHECK((a.own.win[j] != DS_KV_NONE) == (j >= 5), "win[%d]", j);
    ds_kv_seqtab *tabs[2] = {&a, NULL};
    char msg[256];
    CHECK(ds_kvm_audit(&km, tabs, 1, msg, sizeof msg) == 0, "%s", msg);
    /* B shares 96 tokens: chain matches 6 blocks, but only block 5 has a tail (rows 76..95 need
     * blocks 4 and 5) -> walk back until a block with its tail set: none before -> k such that
     * blocks intersecting [k*16-20, k*16) all have tails.  Only k = 6 needs blocks 4,5 (4 lacks). */
    ds_kv_seqtab bt;
    ds_kvm_seqtab_init(&bt);
    int64_t hit = ds_kvm_lookup_prefix(&km, &bt, tok, 150, NULL);
    CHECK(hit == 0, "no complete tail set yet: hit %lld", (long long)hit);
    ds_kvm_release(&km, &bt);
    /* release A: its WIN tails for blocks 5 (and 6, not hashed) go to the cache / free list */
    ds_kvm_release(&km, &a);
    CHECK(km.blocks_used == 0);
    CHECK(ds_kvm_evictable_blocks(&km) == 6, "evictable %llu", (unsigned long long)ds_kvm_evictable_blocks(&km));
    CHECK(ds_kvm_audit(&km, tabs, 0, msg, sizeof msg) == 0, "%s", msg);
    /* C: token-by-token decode keeps every block's tail while it is in the window: chunk by 16 */
    ds_kv_seqtab c;
    ds_kvm_seqtab_init(&c);
    for (int64_t p = 0; p < 96; p += 16) {
        CHECK(ds_kvm_prepare(&km, &c, p, p + 16) == 0);
        ds_kvm_after_step(&km, &c, tok, p + 16, NULL);
    }
    ds_kvm_release(&km, &c);
    /* now block 5's entry (owned by A's page or C's, whichever registered first) ... A's entries
     * exist, so C's duplicates stayed private; A's block 4 has no tail, block 5 has one. */
    ds_kv_seqtab d;
    ds_kvm_seqtab_init(&d);
    hit = ds_kvm_lookup_prefix(&km, &d, tok, 150, NULL);
    CHECK(hit == 0, "tail of block 4 is still missing in the cached chain: %lld", (long long)hit);
    ds_kvm_release(&km, &d);
    /* reset drops everything evictable */
    ds_kvm_reset_prefix_cache(&km);
    CHECK(ds_kvm_evictable_blocks(&km) == 0 && km.pc.n_entries == 0);
    /* E registers with chunk ends on every block: every tail present -> hits at depth */
    ds_kv_seqtab e;
    ds_kvm_seqtab_init(&e);
    for (int64_t p = 0; p < 96; p += 16) {
        CHECK(ds_kvm_prepare(&km, &e, p, p + 16) == 0);
        ds_kvm_after_step(&km, &e, tok, p + 16, "s1");
    }
    /* while E still runs, tails of blocks 0..3 were released as the window moved (kept evictable) */
    ds_kv_seqtab f;
    ds_kvm_seqtab_init(&f);
    hit = ds_kvm_lookup_prefix(&km, &f, tok, 97, "s1");
    CHECK(hit == 96, "hit at the last full block: %lld", (long long)hit);
    ds_kv_seqtab *t2[2] = {&e, &f};
    CHECK(ds_kvm_audit(&km, t2, 2, msg, sizeof msg) == 0, "%s", msg);
    ds_kv_seqtab g;
    ds_kvm_seqtab_init(&g);
    CHECK(ds_kvm_lookup_prefix(&km, &g, tok, 97, "other-salt") == 0, "salt isolates caches");
    CHECK(ds_kvm_lookup_prefix(&km, &g, tok, 40, "s1") == 32, "hit at block 2 for a shorter prompt");
    /* the prompt's last token is always computed: a 96-token prompt hits at most 80 */
    ds_kv_seqtab h;
    ds_kvm_seqtab_init(&h);
    CHECK(ds_kvm_lookup_prefix(&km, &h, tok, 96, "s1") == 80);
    ds_kvm_release(&km, &e);
    ds_kvm_release(&km, &f);
    ds_kvm_release(&km, &g);
    ds_kvm_release(&km, &h);
    CHECK(km.blocks_used == 0 && ds_kvm_audit(&km, t2, 0, msg, sizeof msg) == 0, "%s", msg);
    /* eviction: fill the pool with a fresh request; the LRU entries go, deepest first */
    uint64_t total = b.num_blocks;
    ds_kv_seqtab big;
    ds_kvm_seqtab_init(&big);
    int32_t *tk2 = malloc(sizeof(int32_t) * total * 16);
    for (uint64_t i = 0; i < total * 16; i++) tk2[i] = 1000 + (int32_t)i;
    CHECK(ds_kvm_prepare(&km, &big, 0, (int64_t)(total - 1) * 16) == 0, "the whole pool minus one block is usable");
    CHECK(km.pc.n_entries <= 1, "entries left %u", km.pc.n_entries);
    ds_kv_seqtab k1;
    ds_kvm_seqtab_init(&k1);
    CHECK(ds_kvm_lookup_prefix(&km, &k1, tok, 40, "s1") == 0 || km.pc.n_entries == 1, "shallowest entry evicted last");
    ds_kvm_release(&km, &k1);
    ds_kvm_release(&km, &big);
    free(tk2);
    ds_kvm_seqtab_free(&a);
    ds_kvm_seqtab_free(&bt);
    ds_kvm_seqtab_free(&c);
    ds_kvm_seqtab_free(&d);
    ds_kvm_seqtab_free(&e);
    ds_kvm_seqtab_free(&f);
    ds_kvm_seqtab_free(&g);
    ds_kvm_seqtab_free(&h);
    ds_kvm_seqtab_free(&big);
    ds_kvm_seqtab_free(&k1);
    ds_kvm_destroy(&km);
}

/* DRAFT tails (draft ring pages): attached only where the backend marks the block complete, handed
 * out with a hit as the run ending at the hit's last block, never required for the hit, evicted
 * from their own LRU (the entry stays, its WIN tail too) and freed with an evicted entry. */
TEST(kvm_draft_tails_optional_and_evictable) {
    ds_kv_layout lay;
    toy_layout(&lay, 16);
    ds_kv_budget b;
    ds_error err;
    CHECK(ds_kv_budget_plan(&b, &lay, 64 * 1024, 16, 5, 2, 1, 256, &err) == 0, "%s", err.msg);
    CHECK(b.n_pages[DS_KV_DRAFT] == 6, "DRAFT pages %u", b.n_pages[DS_KV_DRAFT]);
    ds_kvm km;
    CHECK(ds_kvm_init(&km, &lay, &b, 16, true, false, "fp", &err) == 0, "%s", err.msg);
    int32_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = 7 + i;
    /* A: 48 positions in 16-position steps; its "model" holds a DRAFT page for blocks 1 and 2, of
     * which only block 2 is complete at the step that fills it, block 1 was complete too */
    ds_kv_seqtab a;
    ds_kvm_seqtab_init(&a);
    uint32_t d1, d2;
    for (int64_t p = 0; p < 48; p += 16) {
        CHECK(ds_kvm_prepare(&km, &a, p, p + 16) == 0);
        if (p == 16) { CHECK(ds_kvm_page_alloc(&km, DS_KV_DRAFT, &d1) == 0); a.own.drf[1] = d1; a.drf_from = 1; a.drf_to = 2; }
        if (p == 32) { CHECK(ds_kvm_page_alloc(&km, DS_KV_DRAFT, &d2) == 0); a.own.drf[2] = d2; a.drf_from = 2; a.drf_to = 3; }
        ds_kvm_after_step(&km, &a, tok, p + 16, NULL);
    }
    ds_kv_seqtab *tabs[2] = {&a, NULL};
    char msg[256];
    CHECK(ds_kvm_audit(&km, tabs, 1, msg, sizeof msg) == 0, "%s", msg);
    ds_kvm_release(&km, &a);
    CHECK(ds_kvm_available(&km, DS_KV_DRAFT) == 6 && km.n_free[DS_KV_DRAFT] == 4, "cached DRAFT tails are evictable: %u free",
          km.n_free[DS_KV_DRAFT]);
    /* a hit at 48 hands out the run of DRAFT tails ending at block 2 inside the window (block 2
     * only: block 1 holds no row a pass at position 48 reads), a hit at 32 block 1's */
    ds_kv_seqtab h;
    ds_kvm_seqtab_init(&h);
    CHECK(ds_kvm_lookup_prefix(&km, &h, tok, 50, NULL) == 48);
    CHECK(h.own.drf[2] == d2 && h.own.drf[1] == DS_KV_NONE && h.own.drf[0] == DS_KV_NONE, "draft tails %u %u %u", h.own.drf[0], h.own.drf[1], h.own.drf[2]);
    ds_kv_seqtab h2;
    ds_kvm_seqtab_init(&h2);
    CHECK(ds_kvm_lookup_prefix(&km, &h2, tok, 40, NULL) == 32 && h2.own.drf[1] == d1 && h2.own.drf[0] == DS_KV_NONE, "hit at 32");
    ds_kvm_release(&km, &h2);
    ds_kvm_seqtab_free(&h2);
    tabs[0] = &h;
    CHECK(ds_kvm_audit(&km, tabs, 1, msg, sizeof msg) == 0, "%s", msg);
    ds_kvm_release(&km, &h);
    /* DRAFT pressure evicts the tails (oldest first); the hit stays, now without them */
    uint32_t pg[6];
    for (int i = 0; i < 6; i++) CHECK(ds_kvm_page_alloc(&km, DS_KV_DRAFT, &pg[i]) == 0, "DRAFT page %d", i);
    CHECK(ds_kvm_page_alloc(&km, DS_KV_DRAFT, &pg[0]) == -1, "the pool is exhausted");
    for (int i = 0; i < 6; i++) ds_kvm_page_unref(&km, DS_KV_DRAFT, pg[i]);
    CHECK(ds_kvm_lookup_prefix(&km, &h, tok, 50, NULL) == 48 && h.own.drf[2] == DS_KV_NONE && h.own.drf[1] == DS_KV_NONE,
          "a hit without draft tails");
    ds_kvm_release(&km, &h);
    /* an evicted entry frees its unreferenced DRAFT tail with it; reset empties everything */
    ds_kvm_reset_prefix_cache(&km);
    CHECK(km.n_free[DS_KV_DRAFT] == 6 && km.pc.n_entries == 0 && ds_kvm_audit(&km, tabs, 0, msg, sizeof msg) == 0, "%s", msg);
    ds_kvm_seqtab_free(&a);
    ds_kvm_seqtab_free(&h);
    ds_kvm_destroy(&km);
}

TEST(kv_budget_capacity_lines) {
    /* the V4.1 example of §4.4: B_kv 64 GiB, bs 128, S 5, 32 requests -> 166,420 blocks */
    ds_kv_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.bs = 128;
    lay.page_bytes[DS_KV_CKV] = 2560ull * 128;
    lay.page_bytes[DS_KV_IDX] = 640ull * 128;
    lay.page_bytes[DS_KV_WIN] = 40960ull * 128;
    lay.page_bytes[DS_KV_DRAFT] = 3072ull * 128;
    lay.page_bytes[DS_KV_STATE] = 393216;
    ds_kv_budget b;
    ds_error err;
    /* window reserve off (max_prefill_seqs 0) to compare with the spec's example exactly */
    CHECK(ds_kv_budget_plan(&b, &lay, 64ull << 30, 128, 5, 32, 0, 1048576, &err) == 0, "%s", err.msg);
    CHECK(b.fixed_per_request == 17301504, "F_req %llu", (unsigned long long)b.fixed_per_request);
    CHECK(b.num_blocks == 166420 && b.capacity_tokens == 21301760, "blocks %llu", (unsigned long long)b.num_blocks);
    char l1[128], l2[512];
    ds_kv_budget_lines(&b, l1, sizeof l1, l2, sizeof l2);
    CHECK(!strcmp(l1, "KV cache size: 21301760 tokens"), "%s", l1);
    CHECK(strstr(l2, "budget=68719476736 B per_token=3200 B blocks=166420 fixed_per_request=17301504 B x 32 max_len_requests=20.31"), "%s", l2);
    /* one max_model_len request must fit, else the message names the largest that does */
    CHECK(ds_kv_budget_plan(&b, &lay, 1ull << 30, 128, 0, 1, 1, 1048576, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "largest --max-model-len that fits");
}

TEST(kv_addressing_selftest_past_4gib) {
    ds_kv_layout lay;
    memset(&lay, 0, sizeof lay);
    lay.bs = 128;
    lay.page_bytes[DS_KV_CKV] = 2560ull * 128; /* 327,680 B: 2^32 B at 13,108 pages */
    lay.page_bytes[DS_KV_IDX] = 640ull * 128;
    lay.page_bytes[DS_KV_WIN] = 40960ull * 128;
    lay.page_bytes[DS_KV_STATE] = 393216;
    ds_kv_budget b;
    ds_error err;
    CHECK(ds_kv_budget_plan(&b, &lay, 6ull << 30, 128, 0, 2, 1, 4096, &err) == 0, "%s", err.msg);
    ds_kvm km;
    CHECK(ds_kvm_init(&km, &lay, &b, 128, true, true, "fp", &err) == 0, "%s", err.msg);
    CHECK(km.pools.mapped_bytes[DS_KV_CKV] > (1ull << 32), "CKV pool %llu B", (unsigned long long)km.pools.mapped_bytes[DS_KV_CKV]);
    char rep[256];
    CHECK(ds_kv_pools_selftest(&km.pools, rep, sizeof rep) == 0, "%s", rep);
    CHECK(strstr(rep, "KV addressing self-test: PASS"), "%s", rep);
    /* high-first hands out the top page, whose offset is past 2^32 */
    uint32_t pg;
    CHECK(ds_kvm_page_alloc(&km, DS_KV_CKV, &pg) == 0 && pg == b.n_pages[DS_KV_CKV] - 1, "page %u", pg);
    CHECK((uint64_t)pg * lay.page_bytes[DS_KV_CKV] > (1ull << 32));
    ds_kvm_page_unref(&km, DS_KV_CKV, pg);
    ds_kvm_destroy(&km);
}

RUN_ALL()
