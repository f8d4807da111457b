/* The Engram token normalization map (MODEL.md §2.10.1): raw id → compressed class.
 *
 * Why it is built this way: every Engram hash depends on these classes, so the map is computed
 * exactly as the spec orders it (decode one id; keep the raw vocabulary string when the decode
 * holds U+FFFD; otherwise NFKC → NFD → drop marks → full lowercase → collapse space/TAB/CR/LF
 * runs → single-space sentinel → strip White_Space; classes numbered in first-seen order) with
 * utf8proc's Unicode tables.  Because the result depends on the Unicode version, the engine
 * prefers a precomputed map file (written by `dsflash engram-map`) and checks its class count. */
#ifndef DS_TOKENIZER_ENGRAM_MAP_H
#define DS_TOKENIZER_ENGRAM_MAP_H
#include "base/common.h"
#include "tokenizer/tokenizer.h"

/* Compute classes[0 .. vocab_size-1] (allocated, free with free()) and the number of distinct
 * classes.  Every id in [0, vocab_size) must be defined (E_TOKENIZER_ID otherwise). */
int ds_engram_map_compute(const ds_tokenizer *tok, uint32_t **classes, int *n_classes,
                          ds_error *err);

/* The normalization key of one decoded token text (steps 3.1–3.8), for tests and tools.
 * Returns a newly allocated string, or NULL if utf8proc rejects the text. */
char *ds_engram_normalize(const char *text, size_t len, size_t *out_len);

/* Map file: `vocab_size` little-endian u32, nothing else.  Writing is atomic (temp + rename). */
int ds_engram_map_write(const char *path, const uint32_t *classes, int vocab_size, ds_error *err);
/* Read a map file; its length must be exactly 4·expected_vocab (E_TOKEN_MAP_SIZE otherwise) and
 * its classes must be in first-seen order (class[v] ≤ 1 + max of earlier classes).  *n_classes
 * receives 1 + the largest class. */
int ds_engram_map_read(const char *path, int expected_vocab, uint32_t **classes, int *n_classes,
                       ds_error *err);

#endif
