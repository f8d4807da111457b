/* Byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json` (SERVING.md §11.1).
 *
 * Why it is built this way: the model's trained interface is the exact id sequence that HF's
 * Rust `tokenizers` produces, so this module reproduces that pipeline step by step rather than
 * approximating it: added tokens are cut out first (non-normalized ones, then normalized ones,
 * leftmost-longest), each remaining span goes through the declared pre-tokenizer (regex `Split`
 * rules evaluated by our own small Unicode regex engine over utf8proc's tables, then the
 * byte-to-character map of `ByteLevel`), and each word is merged by merge rank.  Nothing about
 * DeepSeek is hard-coded: every special id is looked up by its string in the loaded file.
 *
 * A loaded tokenizer is immutable apart from an internal, lock-protected word cache, so one
 * instance may be shared by every server thread; all functions below are thread-safe. */
#ifndef DS_TOKENIZER_TOKENIZER_H
#define DS_TOKENIZER_TOKENIZER_H
#include "base/common.h"

typedef struct ds_tokenizer ds_tokenizer;

/* A growable id array.  Zero-initialise it; functions append; free with ds_tokens_free. */
typedef struct ds_tokens {
    int32_t *ids;
    size_t n, cap;
} ds_tokens;
void ds_tokens_push(ds_tokens *t, int32_t id);
void ds_tokens_free(ds_tokens *t);

/* Load and validate a tokenizer.json.  Errors name the file, the JSON field, the value and the
 * limit (E_TOKENIZER_*).  Unsupported components (a non-BPE model, an unknown pre-tokenizer or
 * normalizer) are refused with an error, never silently ignored. */
int ds_tokenizer_load(const char *tokenizer_json_path, ds_tokenizer **out, ds_error *err);
/* Same, from an in-memory JSON text; `name` is used in error messages. */
int ds_tokenizer_load_mem(const char *json, size_t len, const char *name, ds_tokenizer **out,
                          ds_error *err);
void ds_tokenizer_free(ds_tokenizer *tok);

/* Number of ids the tokenizer defines: 1 + the largest id of the model vocabulary or of the
 * added-token table (129,280 for V4.1-Flash). */
int ds_tokenizer_vocab_size(const ds_tokenizer *tok);

/* Encode UTF-8 text, appending ids to `out`.  parse_special = true recognises every added-token
 * literal (special or not) exactly like HF `encode(text, add_special_tokens=false)`;
 * parse_special = false treats the whole text as ordinary text (no added-token matching).
 * No BOS is added.  Invalid UTF-8 in `text` is an error (E_TOKENIZER_UTF8, naming the offset). */
int ds_tokenizer_encode(const ds_tokenizer *tok, const char *text, size_t len, bool parse_special,
                        ds_tokens *out, ds_error *err);

/* Decode ids to a newly allocated NUL-terminated UTF-8 string (length in *out_len if non-NULL),
 * exactly as HF `decode`: byte-level tokens are mapped back to bytes, added tokens give their
 * literal, and the result is decoded with invalid sequences replaced by U+FFFD.  skip_special
 * drops added tokens flagged `"special": true`.  An id outside [0, vocab_size) or a hole in the
 * id space is an error (E_TOKENIZER_ID); returns NULL then. */
char *ds_tokenizer_decode(const ds_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                          size_t *out_len, ds_error *err);

/* Id of an exact token string (added-token literal or byte-level vocabulary string), or -1. */
int32_t ds_tokenizer_token_id(const ds_tokenizer *tok, const char *token);
/* The stored string of an id (byte-level form for vocabulary entries, the literal for added
 * tokens), or NULL for an undefined id.  Owned by the tokenizer. */
const char *ds_tokenizer_id_to_token(const ds_tokenizer *tok, int32_t id);
/* The raw bytes an id decodes to (before UTF-8 validation), e.g. for logprob `bytes` fields.
 * Returns NULL for an undefined id.  Owned by the tokenizer. */
const uint8_t *ds_tokenizer_token_bytes(const ds_tokenizer *tok, int32_t id, size_t *len);
/* True when `id` is an added token (control token); *special receives its "special" flag. */
bool ds_tokenizer_is_added(const ds_tokenizer *tok, int32_t id, bool *special);
/* Added-token table in id order: count, and the literal / id of entry i. */
int ds_tokenizer_added_count(const ds_tokenizer *tok);
const char *ds_tokenizer_added_content(const ds_tokenizer *tok, int i, int32_t *id, bool *special);

/* Incremental detokenizer for streaming.  Push ids one at a time; each push returns the text
 * that became complete: a UTF-8 character is never split across returned chunks, and an added
 * token is always returned whole.  The concatenation of all pushes plus the final flush equals
 * ds_tokenizer_decode of the same ids (including its U+FFFD replacements). */
typedef struct ds_detok_stream ds_detok_stream;
ds_detok_stream *ds_detok_stream_new(const ds_tokenizer *tok, bool skip_special);
void ds_detok_stream_free(ds_detok_stream *s);
/* Returns a pointer to the newly completed text (NUL-terminated, valid until the next call on
 * `s`) and its length in *len; NULL with err set for an invalid id. */
const char *ds_detok_stream_push(ds_detok_stream *s, int32_t id, size_t *len, ds_error *err);
/* End of stream: any incomplete trailing bytes become U+FFFD.  Same return convention. */
const char *ds_detok_stream_flush(ds_detok_stream *s, size_t *len);

#endif
