/* Writing a V4.1-style tokenizer into a model directory (used by `dsflash mkmodel`).
 *
 * Why it exists: test fixtures need a tokenizer whose added-token table looks like the V4.1
 * release (SERVING.md §11.1), but the only public DeepSeek BPE is V3's.  So the V3 BPE is kept
 * and V4.1's added tokens are placed at the ids the spec gives (`<｜Assistant｜>` 128804, noise
 * 128799, `<｜deepseek_image｜>` 129264) and, where the spec says "resolved", at documented free
 * ids (docs/TOKENIZER.md lists them).  For a small vocabulary the BPE is cut down to the ids
 * below a cutoff — keeping all 256 byte symbols, so any text stays encodable — with the added
 * tokens in the top of the range.  Every id below vocab_size is defined either way, and the
 * engine still reads every special id from the written file, never from constants. */
#ifndef DS_TOKENIZER_RELEASE_TOKENIZER_H
#define DS_TOKENIZER_RELEASE_TOKENIZER_H
#include "base/common.h"

/* Write `out_dir`/tokenizer.json and `out_dir`/tokenizer_config.json (atomically).
 *   base_tokenizer_json: the DeepSeek BPE tokenizer.json (ds_tokenizer_default_base()).
 *   vocab_size: 129280 for the real layout; smaller values (>= 512) build the cut-down BPE.
 *   noise_id, image_id: ids of the draft noise token and `<｜deepseek_image｜>`.
 * Errors name the file and the offending value (E_TOKENIZER_*, E_IO). */
int ds_tokenizer_write_release(const char *base_tokenizer_json, int vocab_size, int noise_id,
                               int image_id, const char *out_dir, ds_error *err);

/* Path of the fetched DeepSeek tokenizer.json: $DSFLASH_TOKENIZER_BASE if set, else the copy
 * that scripts/install-deps.sh fetched (looked up relative to the running executable, then the
 * working directory).  NULL when none is found.  The string is static. */
const char *ds_tokenizer_default_base(void);

#endif
