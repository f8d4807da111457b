/* The model backend across MPI ranks: rank 0 wraps its backend, the other ranks replay (backend_dist.c). */
#ifndef DS_ENGINE_BACKEND_DIST_H
#define DS_ENGINE_BACKEND_DIST_H
#include "engine/backend.h"
#include "model/model.h"

/* Rank 0: takes ownership of `inner` (the model backend over this rank's shard). */
ds_backend *ds_backend_dist_wrap(ds_backend *inner);
/* Ranks > 0: replay rank 0's descriptors on model m until shutdown; returns 0, or 1 on an error
 * (after which the job is aborted). */
int ds_backend_dist_worker(ds_model *m);
#endif
