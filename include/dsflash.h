/* dsflash public API: load a DeepSeek-V4.1-Flash checkpoint once, run many sequences on it.
 *
 * The loaded model (ds_model) is immutable and shared; a sequence (ds_seq) holds one request's
 * mutable state (KV rings, compressed entries, index keys, pending ratio-2 groups, token history).
 * A step feeds n >= 1 tokens at the sequence's next positions: a prefill chunk, one decode token and
 * a multi-row verify block share one path, and results do not depend on how a prompt is chunked. */
#ifndef DSFLASH_H
#define DSFLASH_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Release of the binary, the library and the HTTP API (`dsflash --version`, GET /version). */
#define DSFLASH_VERSION "0.1.0"

typedef struct ds_model ds_model;
typedef struct ds_seq ds_seq;

typedef struct ds_load_options {
    const char *kernels;      /* "auto" (default), "avx512-vnni", "avx2", "reference" */
    int threads;              /* 0 = one per physical core of the NUMA nodes used (and of the CPUs the process
                                 may run on) */
    const char *numa_nodes;   /* "all" (default when NULL): the kernel places threads and pages; or a comma list
                                 of node ids ("0", "0,1"): the process runs on their CPUs with one pinned worker
                                 per core, its memory bound to them (one node) or interleaved over them */
    int full_validation;      /* loader checklist level full */
    int64_t max_model_len;    /* 0 = config's max_position_embeddings */
    const char *numerics;     /* "exact" (default when NULL): bit-identical to the NumPy oracle, float64
                                 reductions; "fast": fp32 in a fixed blocked order, still deterministic
                                 and batch-invariant (docs/NUMERICS.md) */
    const char *activations;  /* official FP8/MXFP4 layout only: "int8" (default when NULL: MXFP4 experts take
                                 per-row int8 rows, FP8 linears bf16 rows) or "e4m3" (the official runtime's
                                 E4M3 per 32 inputs with power-of-two scales, on every FP8/FP4 linear
                                 but wo_a); "e4m3" on the W4A8 release fails the load */
    int draft;                /* DSpark draft: 0 = not loaded (default), 1 = loaded when usable (a missing or
                                 disabled draft logs an ERROR and leaves speculation off), 2 = required
                                 (an unusable draft fails the load) */
    const char *engram_residency; /* "page-cache" (default when NULL): the Engram tables are read through the file
                                 mapping; "huge-pages": copied at load into anonymous memory on transparent huge
                                 pages, their file pages given back (random lookups skip 4 KiB page walks);
                                 "locked": the mapping's pages mlock'ed at load; "disk": the mapping, left out of
                                 the memory plan (evictable) */
    int no_head_screen;       /* fast tier: 1 = greedy rows compute their full logits instead of screening
                                 the head through its int8 copy (same tokens, for A/B measurements);
                                 0 = screen (default) */
} ds_load_options;

/* Returns NULL on failure and writes a one-line message (E_CODE: file: tensor: expected, found). */
ds_model *ds_model_load(const char *dir, const ds_load_options *opts, char *errbuf, size_t errlen);
void ds_model_free(ds_model *m);
int ds_model_vocab_size(const ds_model *m);
int ds_model_eos_id(const ds_model *m);
const char *ds_model_numerics(const ds_model *m);   /* "exact" or "fast" */
const char *ds_model_activations(const ds_model *m); /* "int8" or "e4m3" */

ds_seq *ds_seq_new(const ds_model *m);
void ds_seq_free(ds_seq *s);
int64_t ds_seq_length(const ds_seq *s);       /* committed-and-processed positions */
/* Roll back to `len` processed positions (speculative rejection, preemption); len <= length. */
int ds_seq_truncate(ds_seq *s, int64_t len);

/* Process tokens[0..n-1] at positions length..length+n-1.  If logits != NULL, writes fp32 logits
 * for the last `n_logits` rows ([n_logits][vocab]); n_logits <= n.  Returns 0 or -1 (errbuf). */
int ds_seq_step(ds_model *m, ds_seq *s, const int32_t *tokens, int n, float *logits, int n_logits,
                char *errbuf, size_t errlen);

/* Batched step: the rows of all sequences go through each linear together (a batched decode
 * streams each weight once per step), while attention, compressor and indexer run per sequence.
 * Sequence i processes tokens[i][0..n_rows[i]-1] at its next positions; logits[i] (NULL allowed
 * when n_logits[i] == 0) receives the fp32 logits of its last n_logits[i] rows.  A sequence may
 * appear only once.  Results are bit-identical to stepping each sequence alone.  On error
 * (-1, errbuf) no sequence has changed. */
int ds_batch_step(ds_model *m, int n_seqs, ds_seq **seqs, const int32_t *const *tokens, const int *n_rows,
                  float *const *logits, const int *n_logits, char *errbuf, size_t errlen);

/* Greedy choice over fp32 logits: the largest value, ties to the lowest id. */
int32_t ds_argmax(const float *logits, int n);

#ifdef __cplusplus
}
#endif
#endif
