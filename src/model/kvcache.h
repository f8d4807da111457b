/* Paged KV storage (SERVING.md §4) — the one place that knows page layouts and page addresses.
 *
 * Why pages live below the engine: the model reads and writes per-position state (window rows,
 * compressed entries, index keys, ratio-2 pending rows, draft context rows) while the engine decides
 * which physical page backs which logical block (continuous batching, prefix sharing, eviction).
 * So the layout and the 64-bit accessors are here, the page *ownership policy* is an allocator the
 * engine plugs in (ds_kv_alloc_ops), and a standalone sequence (tests, `generate`) uses the simple
 * free-list allocator below.
 *
 * Five page kinds, each its own pool, every page covering one logical block of `bs` positions:
 *   CKV   compressed rows of every FULL (kv-source) layer, source-major regions of bs/r rows × d_h bf16
 *   IDX   index-key rows of the same sources, bs/r rows × index_head_dim bf16
 *   WIN   window rows of every backbone layer, layer-major, bs rows × d_h bf16
 *   DRAFT context rows of the draft stages, stage-major, bs rows × d_h bf16
 *   STATE fp32 pending ring of every ratio>=2 source: DS_STATE_SLOTS rows × (d_h kv ‖ d_h score)
 * All offsets and sizes are 64-bit (§4.5); page addresses come only from ds_kv_page(). */
#ifndef DS_MODEL_KVCACHE_H
#define DS_MODEL_KVCACHE_H
#include "base/common.h"
#include "io/config.h"

#define DS_STATE_SLOTS 32
#define DS_KV_NONE UINT32_MAX

typedef enum { DS_KV_CKV = 0, DS_KV_IDX, DS_KV_WIN, DS_KV_DRAFT, DS_KV_STATE, DS_KV_KINDS } ds_kv_kind;

typedef struct ds_kv_layout {
    int bs;                                  /* positions per block (power of two, 16..256) */
    int n_src;                               /* FULL layers (kv sources) */
    int src_layer[DS_MAX_LIST];              /* backbone layer id of source s */
    int src_ratio[DS_MAX_LIST];              /* its compress ratio */
    int src_of_layer[DS_MAX_LAYERS];         /* layer -> source index, -1 if not a source */
    uint64_t ckv_off[DS_MAX_LIST];           /* byte offset of source s's region in a CKV page */
    uint64_t idx_off[DS_MAX_LIST];           /* byte offset in an IDX page */
    int n_state_src;                         /* sources with ratio >= 2 */
    int state_of_src[DS_MAX_LIST];           /* source -> state ring index, -1 if ratio < 2 */
    int n_layers, n_draft;                   /* backbone layers in WIN, draft stages in DRAFT */
    int d_h, d_idx;                          /* row widths (elements) */
    uint64_t page_bytes[DS_KV_KINDS];
} ds_kv_layout;

void ds_kv_layout_init(ds_kv_layout *lay, const ds_config *cfg, int bs);

typedef struct ds_kv_pools {
    ds_kv_layout lay;
    uint8_t *base[DS_KV_KINDS];
    uint32_t n_pages[DS_KV_KINDS];
    uint64_t mapped_bytes[DS_KV_KINDS];
    /* simple allocator state (used by ds_kv_simple_ops) */
    uint32_t *free_list[DS_KV_KINDS];
    uint32_t n_free[DS_KV_KINDS];
    int high_first;                          /* hand out pages from the top (overflow tests) */
} ds_kv_pools;

/* Map pools with the given page counts (anonymous mmap, zero-filled). */
int ds_kv_pools_create(ds_kv_pools *p, const ds_kv_layout *lay, const uint32_t n_pages[DS_KV_KINDS], ds_error *err);
void ds_kv_pools_destroy(ds_kv_pools *p);
/* §4.5 self-test: sizes agree in 64-bit arithmetic; patterns in first/middle/last pages read back. */
int ds_kv_pools_selftest(ds_kv_pools *p, char *report, size_t len);

/* The only address computation for pages. */
static inline uint8_t *ds_kv_page(const ds_kv_pools *p, ds_kv_kind kind, uint32_t page) {
    return p->base[kind] + (uint64_t)page * p->lay.page_bytes[kind];
}

/* The block tables of one sequence: which page holds each logical block's rows, per kind.  One
 * copy per request: a model sequence (ds_seq) owns its table and the engine reads and edits that
 * same table in place (engine/kv_manager.h); only a request without a model sequence (the
 * synthetic backend, an MPI rank's mirror, a prefix hit not yet adopted) has the engine's own. */
typedef struct ds_block_tab {
    uint32_t *ckv;      /* [cap] CKV page of logical block b, or DS_KV_NONE */
    uint32_t *idx;      /* [cap] IDX page of block b (the engine hands out the CKV page's id) */
    uint32_t *win;      /* [cap] WIN page of block b; only a window's worth is held */
    uint32_t *drf;      /* [cap] DRAFT page of block b (draft ring rows), or DS_KV_NONE */
    int64_t cap;        /* entries of each array */
    int64_t n_blk;      /* blocks 0 .. n_blk-1 hold CKV and IDX pages */
    uint32_t state;     /* STATE page, or DS_KV_NONE */
} ds_block_tab;

/* An empty table (no arrays yet, no STATE page). */
void ds_block_tab_init(ds_block_tab *t);
/* Grow every array to at least nblocks entries (new entries DS_KV_NONE). */
void ds_block_tab_grow(ds_block_tab *t, int64_t nblocks);
/* Free the arrays (the pages are the caller's to release first) and leave an empty table. */
void ds_block_tab_free(ds_block_tab *t);

/* Page ownership policy.  alloc returns 0 and a page id, or -1 when the pool is exhausted.
 * release is told the logical block it backed (the engine may keep it as a cached tail). */
typedef struct ds_kv_alloc_ops {
    void *ctx;
    int (*alloc)(void *ctx, ds_kv_kind kind, uint32_t *page);
    void (*release)(void *ctx, ds_kv_kind kind, uint32_t page);
} ds_kv_alloc_ops;

/* Free-list allocator over ds_kv_pools (ctx = the pools). */
extern const ds_kv_alloc_ops ds_kv_simple_ops_template;
ds_kv_alloc_ops ds_kv_simple_ops(ds_kv_pools *p);

#endif
