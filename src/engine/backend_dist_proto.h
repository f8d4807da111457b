/* The descriptors rank 0 broadcasts to the other ranks of a multi-process serve (backend_dist.c
 * sends, backend_dist_worker.c replays).
 *
 * Why one header: both sides must read the same bytes; a descriptor is a fixed head followed by
 * an optional payload whose length the head gives, so a rank never has to guess a size.
 *   OP_OPEN  payload (only for a prefix-cache hit): op_open, then start token ids, then the k CKV
 *            page ids of the cached blocks, then the n_win WIN page ids of blocks [k-n_win, k).
 *   OP_STEP  payload: n op_item, the fed token ids of every item in order, then op_dict and the
 *            CKV, WIN and STATE page ids rank 0 took for the step (kv_manager.h, ds_kv_dict). */
#ifndef DS_ENGINE_BACKEND_DIST_PROTO_H
#define DS_ENGINE_BACKEND_DIST_PROTO_H
#include "engine/kv_manager.h"

enum { OP_INIT = 1, OP_OPEN, OP_STEP, OP_AFTER, OP_RELEASE, OP_HEARTBEAT, OP_SHUTDOWN };

typedef struct op_head { int32_t op, n_items; int64_t sid, a; uint64_t payload; } op_head;
typedef struct op_item { int64_t sid, pos0; int32_t n, n_logits; } op_item;
typedef struct op_init { ds_kv_budget plan; int32_t bs, window, high_first; } op_init;
typedef struct op_open { int64_t start; int32_t k, n_win; } op_open;
typedef struct op_dict { uint32_t n_ckv, n_win, n_state, pad; } op_dict;

#endif
