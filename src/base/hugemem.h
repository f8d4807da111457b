/* Memory for data that is streamed end to end many times: prepared weights, bandwidth probes.
 *
 * Why: on a virtualised host every TLB miss costs a two-level page walk, and a decode step reads
 * gigabytes of weights, most of them in pieces under 1 MiB (one expert's matrix).  On 4 KiB pages
 * those reads ran measurably slower than the same reads on 2 MiB pages (same process, same
 * kernel), and a bandwidth probe on 4 KiB pages under-reported what the weight kernels reach.  So
 * such blocks are carved from 2 MiB-aligned chunks that ask for transparent huge pages
 * (madvise; only advice — 4 KiB pages still work where the kernel declines).
 *
 * Small blocks share a chunk (bump allocation); a chunk is returned once every block carved from
 * it is freed.  Large blocks get a chunk of their own.  Thread-safe (one mutex; allocation happens
 * at load, not per step).  Every block is 64-byte aligned.  Exhausted memory aborts like
 * ds_xmalloc. */
#ifndef DS_BASE_HUGEMEM_H
#define DS_BASE_HUGEMEM_H
#include <stddef.h>

void *ds_huge_alloc(size_t bytes);
void ds_huge_free(void *p);

/* Bytes of chunks currently held (for tests and the load log). */
size_t ds_huge_held(void);

#endif
