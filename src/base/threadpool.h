/* Persistent compute thread pool used by every heavy op (linears, attention, indexer, MoE).
 * Work is split into tasks by the caller (usually ranges of output rows); ds_pool_run blocks until
 * every task ran.  Task-to-thread assignment must not change results: each task writes disjoint
 * outputs and reductions stay inside a task, so outputs are independent of the thread count. */
#ifndef DS_BASE_THREADPOOL_H
#define DS_BASE_THREADPOOL_H

typedef void (*ds_task_fn)(void *ctx, int task, int thread);

/* Start the pool with n threads (0 = one per physical core the process may run on).  Safe to call
 * again to resize. */
void ds_pool_init(int n_threads);
/* Restart the pool with n threads (0 as in ds_pool_init) whose workers (threads 1 .. n-1) are
 * pinned, worker i to CPU cpus[i % n_cpus]; cpus NULL or n_cpus 0: not pinned.  The calling thread
 * (thread 0) is left where it is: it may be the engine thread or a command's main thread, and the
 * threads it starts inherit its affinity.  Workers also inherit the caller's memory policy. */
void ds_pool_place(int n_threads, const int *cpus, int n_cpus);
int ds_pool_threads(void);
/* Run fn(ctx, t, thread) for t in [0, n_tasks).  Nested calls from inside a task run serially. */
void ds_pool_run(int n_tasks, ds_task_fn fn, void *ctx);
void ds_pool_shutdown(void);

#endif
