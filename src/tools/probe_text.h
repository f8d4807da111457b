/* Prompt material for the long-context probes and gates (TOOLS.md §5.1, §5.2, §6.2): the numbered
 * filler, needle insertion at a record boundary, nonces, and the small statistics the reports
 * share (Wilson interval, distinct-bigram ratio).
 *
 * Why pure functions in their own file: the spec fixes these texts character for character (the
 * filler's 0.4434 tokens-per-character ratio and "almost no repeated n-grams" depend on them), and
 * the depth rule (record boundary closest to a fraction of the document, reported and checked
 * within 0.5 points) is easy to get subtly wrong.  Keeping them free of HTTP lets the unit test
 * check every rule against an independent recomputation, and lets needle, kv-walk, agent-gate and
 * multibatch-gate build their documents the same way. */
#ifndef DS_TOOLS_PROBE_TEXT_H
#define DS_TOOLS_PROBE_TEXT_H
#include "base/common.h"

#define DS_FILLER_TOKENS_PER_CHAR 0.4434

/* A filler document: UTF-8 text plus the code-point offset of every record boundary. */
typedef struct ds_filler {
    char *text;           /* NUL-terminated UTF-8 */
    size_t bytes;         /* strlen(text) */
    int64_t chars;        /* code points */
    int64_t *bound_char;  /* code-point offset where record i starts (i < n_rec), and chars at the end */
    size_t *bound_byte;   /* the same boundaries in bytes */
    int64_t n_rec;
} ds_filler;

/* nchar = target_tokens / 0.4434 + 200 (§5.1). */
int64_t ds_filler_nchar(int64_t target_tokens);
/* "会话{nonce}开始。" then records i = 0, 1, ... while the text is shorter than nchar code points. */
void ds_filler_build(ds_filler *f, const char *nonce, int64_t nchar);
void ds_filler_free(ds_filler *f);

/* Insert texts[k] at the record boundary closest to fracs[k] (ascending) of the filler's code
 * points.  Returns the new text (malloc'd); depth[k] = boundary / filler chars (0..1). */
char *ds_filler_insert(const ds_filler *f, int n, const double *fracs, const char *const *texts, double *depth);

/* Deterministic generator for nonces and random numbers: splitmix64 over a seed. */
typedef struct { uint64_t s; } ds_probe_rng;
void ds_probe_rng_seed(ds_probe_rng *r, uint64_t seed);
uint64_t ds_probe_rng_next(ds_probe_rng *r);
/* 6 lowercase hex digits + NUL. */
void ds_probe_nonce(ds_probe_rng *r, char out[7]);

/* Wilson 95% interval (z = 1.96) of k hits out of n; n = 0 gives [0, 1]. */
void ds_wilson95(int64_t k, int64_t n, double *lo, double *hi);

/* distinct bigrams / all bigrams of ids[0..n); 1.0 when n < 2. */
double ds_uniq2_ids(const int32_t *ids, size_t n);

/* Code points in UTF-8 text (invalid bytes count one each). */
int64_t ds_utf8_count(const char *s, size_t n);

#endif
