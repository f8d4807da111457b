/* Persistent compute thread pool used by every heavy op (linears, attention, indexer, MoE).
 * Work is split into tasks by the caller (usually ranges of output rows); ds_pool_run blocks until
 * every task ran.  Task-to-thread assignment must not change results: each task writes disjoint
 * outputs and reductions stay inside a task, so outputs are independent of the thread count. */
#ifndef DS_BASE_THREADPOOL_H
#define DS_BASE_THREADPOOL_H

typedef void (*ds_task_fn)(void *ctx, int task, int thread);

/* Start the pool with n threads (0 = number of online CPUs).  Safe to call again to resize. */
void ds_pool_init(int n_threads);
int ds_pool_threads(void);
/* Run fn(ctx, t, thread) for t in [0, n_tasks).  Nested calls from inside a task run serially. */
void ds_pool_run(int n_tasks, ds_task_fn fn, void *ctx);
void ds_pool_shutdown(void);

#endif
