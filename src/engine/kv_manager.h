/* KV page ownership for the engine (SERVING.md §4, §7): the pools, per-request block tables,
 * reference counts, the budget and its two capacity lines, and the prefix-cache policy.
 *
 * Why it is built this way: the page *layout* belongs to the model (model/kvcache.h, the only
 * place that computes page addresses); *who owns which page* belongs here, because only the
 * engine knows about other requests, preemption and the prefix cache.  A request's pages are
 * described by a ds_kv_seqtab that the backend reads: one CKV page per logical block (the IDX
 * page has the same id in its own pool, so the two pools are sized and handed out together),
 * a WIN page for the blocks inside the window (DS_KV_NONE elsewhere), the DRAFT pages of the
 * draft rings while speculating, and one STATE page.
 *
 * Pages are reference counted so cached prefix blocks and window tails can be shared read-only.
 * A page whose count drops to 0 goes to the free list, or, when it is registered in the prefix
 * cache, to that cache's LRU list, from which allocation evicts on demand.  Window retention
 * follows §4.3: a request keeps the WIN pages of blocks that intersect [L-W+1, L] (W the model's
 * window), a prefill chunk [a, b) persists the blocks that intersect [b-W, b), and every
 * retained WIN page is therefore complete. */
#ifndef DS_ENGINE_KV_MANAGER_H
#define DS_ENGINE_KV_MANAGER_H
#include "base/common.h"
#include "engine/prefix_cache.h"
#include "model/kvcache.h"

typedef struct ds_kv_seqtab {
    ds_block_tab own;  /* the request's pages while no model sequence holds them (synthetic backend,
                          an MPI rank's mirror, a prefix hit before the sequence adopts it); its
                          idx array stays unset: a block's IDX page has its CKV page's id */
    ds_block_tab *seq; /* the model sequence's own table once it holds the pages, else NULL: the
                          one copy, read and edited in place (never copied back) */
    int drf_from, drf_to;  /* blocks drf_from..drf_to-1 hold complete draft ring rows (set by the backend) */
    int n_hashed;      /* leading full blocks already offered to the prefix cache */
    uint8_t last_hash[DS_PC_HASH_BYTES];
} ds_kv_seqtab;

/* The request's block tables: the model sequence's when it has one, else the engine's own. */
static inline ds_block_tab *ds_kv_tab(ds_kv_seqtab *t) { return t->seq ? t->seq : &t->own; }
static inline const ds_block_tab *ds_kv_tab_c(const ds_kv_seqtab *t) { return t->seq ? t->seq : &t->own; }

/* The budget of §4.4 and what it yields. */
typedef struct ds_kv_budget {
    uint64_t budget_bytes;            /* B_kv */
    int bs, window, spec_tokens, max_num_seqs, max_prefill_seqs;
    int64_t max_model_len;
    uint64_t page_bytes[DS_KV_KINDS];
    int win_pages_per_req;            /* W = ceil((window + S)/bs) + 1 */
    uint64_t fixed_per_request;       /* F_req */
    uint64_t win_transient_pages;     /* chunk-boundary overlap reserve (see kv_manager.c) */
    uint32_t n_pages[DS_KV_KINDS];
    uint64_t num_blocks;
    uint64_t capacity_tokens;         /* N */
} ds_kv_budget;

/* Compute page counts.  Fails (E_KV_BUDGET) when the budget cannot hold the fixed per-request
 * pages, or when one request of max_model_len does not fit; the message names the largest
 * max_model_len that would. */
int ds_kv_budget_plan(ds_kv_budget *b, const ds_kv_layout *lay, uint64_t budget_bytes, int window, int spec_tokens,
                      int max_num_seqs, int max_prefill_seqs, int64_t max_model_len, ds_error *err);
/* "KV cache size: N tokens" and the detail line (no trailing newlines). */
void ds_kv_budget_lines(const ds_kv_budget *b, char *line1, size_t n1, char *line2, size_t n2);

typedef struct ds_kv_dict {
    uint32_t *ids[DS_KV_KINDS];
    uint32_t n[DS_KV_KINDS], at[DS_KV_KINDS], cap[DS_KV_KINDS];
} ds_kv_dict;
/* Append one id of `kind` to a dictation (grown as needed). */
void ds_kv_dict_push(ds_kv_dict *d, ds_kv_kind kind, uint32_t id);
void ds_kv_dict_clear(ds_kv_dict *d);   /* empties it, keeps the storage */
void ds_kv_dict_free(ds_kv_dict *d);

typedef struct ds_kvm {
    ds_kv_pools pools;
    ds_kv_budget plan;
    int bs, window;
    bool prefix_caching;
    bool high_first;
    uint32_t debug_fault_page;        /* --debug-kv-fault-page: CKV page scrambled after each step (DS_KV_NONE = off) */
    uint8_t seed_hash[DS_PC_HASH_BYTES];
    uint32_t *ref[DS_KV_KINDS];       /* reference counts (CKV used for the CKV+IDX pair) */
    uint32_t *freel[DS_KV_KINDS];     /* free stacks */
    uint32_t n_free[DS_KV_KINDS];
    ds_prefix_cache pc;
    uint64_t blocks_used;             /* CKV blocks with refcount > 0 */
    /* Multi-process runs (engine/backend_dist.c): while `dict_on`, CKV/WIN/STATE pages come from
     * `dict` (ids rank 0 chose for this step, in allocation order); a `mirror` table (ranks > 0)
     * counts no references: which page holds what is decided by rank 0 alone. */
    bool dict_on, mirror;
    ds_kv_dict dict;
} ds_kvm;

/* Dictated page ids of one step: per kind (DRAFT unused), ids[k][0..n[k]) taken in order from at[k]. */
int ds_kvm_dict_take(ds_kvm *km, ds_kv_kind kind, uint32_t *page);

int ds_kvm_init(ds_kvm *km, const ds_kv_layout *lay, const ds_kv_budget *plan, int window, bool prefix_caching,
                bool high_first, const char *fingerprint, ds_error *err);
void ds_kvm_destroy(ds_kvm *km);

/* Pages that could be handed out now (free + evictable). */
uint64_t ds_kvm_available(const ds_kvm *km, ds_kv_kind kind);
uint64_t ds_kvm_evictable_blocks(const ds_kvm *km);

void ds_kvm_seqtab_init(ds_kv_seqtab *t);
void ds_kvm_seqtab_free(ds_kv_seqtab *t);
/* Forget every page of the table without releasing (the pages were released elsewhere). */
void ds_kvm_seqtab_clear(ds_kv_seqtab *t);
void ds_kvm_seqtab_reserve(ds_kv_seqtab *t, int n_blocks);
/* The model sequence has taken over the references of the own table (a prefix hit it adopted):
 * forget them without releasing, and from now on read and edit the sequence's table. */
void ds_kvm_seqtab_bind(ds_kv_seqtab *t, ds_block_tab *seq_tab);

/* Single pages, for backends that allocate through the engine while they step: allocation
 * evicts from the prefix cache when the free list is empty; unref returns a page to the free
 * list or, when it is cached, to the LRU. */
int ds_kvm_page_alloc(ds_kvm *km, ds_kv_kind kind, uint32_t *page);
void ds_kvm_page_unref(ds_kvm *km, ds_kv_kind kind, uint32_t page);

/* Pages a step that computes positions [a, b) would newly need (CKV blocks and WIN pages;
 * plus the STATE page when the table has none). */
void ds_kvm_pages_needed(const ds_kvm *km, const ds_kv_seqtab *t, int64_t a, int64_t b, uint64_t need[DS_KV_KINDS]);
/* Allocate them.  Returns 0, or -1 when a pool ran dry (what was obtained stays in the table). */
int ds_kvm_prepare(ds_kvm *km, ds_kv_seqtab *t, int64_t a, int64_t b);
/* End of a prompt's final prefill chunk [a, n): n, or the last full block boundary K*bs
 * (K = (n-1)/bs) when the cache is on and a step ending at n would not keep the window tail of
 * block K-1.  Why: a repeated prompt can only hit K blocks (§7.2) if that tail set was kept, and
 * a step keeps only the window rows near its end — a 1000-token prompt used to hit nothing.  The
 * last n - K*bs (< bs) tokens then take one more step. */
int64_t ds_kvm_prefill_end(const ds_kvm *km, int64_t a, int64_t n);
/* After a step that left L computed positions: drop WIN pages that left the window, and offer
 * newly full blocks (ids in `tokens`) to the prefix cache. */
void ds_kvm_after_step(ds_kvm *km, ds_kv_seqtab *t, const int32_t *tokens, int64_t L, const char *salt);
/* Debug fault injection (--debug-kv-fault-page N): after a step of a table that holds CKV page N,
 * overwrite that page and its IDX twin with a constant, so every later read of the block sees
 * wrong rows.  Tests prove that `dsflash kv-walk` detects a KV fault; never enabled otherwise. */
void ds_kvm_debug_fault(ds_kvm *km, const ds_kv_seqtab *t);
/* Release everything (request end, cancellation, preemption). */
void ds_kvm_release(ds_kvm *km, ds_kv_seqtab *t);

/* Prefix-cache lookup at admission (§7.2).  Walks the chain over the full blocks of tokens[0..n)
 * with k*bs <= n-1, shortens the match until the tail set of block k-1 is present, and on a hit
 * references the blocks and tails into `t` (which must be empty).  Returns k*bs (0 = miss). */
int64_t ds_kvm_lookup_prefix(ds_kvm *km, ds_kv_seqtab *t, const int32_t *tokens, int64_t n, const char *salt);
/* Drop every evictable entry (POST /reset_prefix_cache, end of self-checks). */
void ds_kvm_reset_prefix_cache(ds_kvm *km);

/* Consistency audit for tests: refcounts equal the references held by `tabs`, free lists hold
 * exactly the unreferenced non-cached pages.  Returns 0 or -1 with a message. */
int ds_kvm_audit(const ds_kvm *km, ds_kv_seqtab *const *tabs, int n_tabs, char *msg, size_t len);

#endif
