/* The `deepseek_v41` chat encoder (SERVING.md §11.2–§11.4): an OpenAI-style request (messages,
 * tools, reasoning_effort, chat_template_kwargs, response_format) → the exact prompt string the
 * model was trained on, and its ids.
 *
 * Why it is built this way: the prompt format is an interface constant that must match byte for
 * byte, so rendering is a direct transcription of the spec's rules in three passes — validate and
 * escape client text, normalise the message list (developer → user, index-0 system host, merged
 * user/tool turns with tool results permuted into call order), then render with the reasoning
 * rule.  All JSON that the encoder writes goes through one serializer (json_canon.h) that the
 * output parser shares, so a replayed history is token-identical to what the model
 * produced.  Errors carry an OpenAI error code and the offending field so the server can answer
 * HTTP 400 without re-deriving anything. */
#ifndef DS_TOKENIZER_CHAT_H
#define DS_TOKENIZER_CHAT_H
#include "base/common.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/json_canon.h"
#include <cJSON.h>

/* Request fields the encoder reads.  Pointers are borrowed (fields of the parsed request body);
 * NULL means "absent".  Parse the body with ds_json_parse_exact (json_canon.h) so that numbers in
 * tool schemas keep their source spelling (`1000.0` stays `1000.0`); plain cJSON trees work too,
 * with integral floats then written as integers.  Zero-initialise, then set add_generation_prompt = true (its default). */
typedef struct ds_chat_request {
    const cJSON *messages;             /* required: array, >= 1 element */
    const cJSON *tools;                /* array of {"type":"function","function":{...}} or NULL */
    const cJSON *reasoning_effort;     /* string or number, or NULL */
    const cJSON *chat_template_kwargs; /* object with enable_thinking / thinking, or NULL */
    const cJSON *response_format;      /* object or NULL; {"type":"text"} is the same as NULL */
    bool default_thinking;             /* server default for enable_thinking (normally false) */
    bool add_generation_prompt;        /* default true */
    bool continue_final_message;       /* default false; the last message must be assistant */
    bool allow_response_format;        /* false (stage 1): a non-text response_format is a 400 */
} ds_chat_request;

/* The rendered prompt and what was resolved on the way. */
typedef struct ds_chat_prompt {
    char *text;            /* NUL-terminated prompt; free with ds_chat_prompt_free */
    size_t len;
    bool thinking;         /* resolved mode */
    int effort;            /* effort line n in thinking mode, 0 in chat mode */
    bool ends_in_reasoning;/* the prompt ends with `<think>`: generation starts in reasoning */
    int n_images;          /* image parts rendered as `<｜deepseek_image｜>` */
    char err_param[64];    /* on failure: the request field at fault (e.g. "messages[2].tool_call_id") */
} ds_chat_prompt;

/* Render the prompt.  `tok` (may be NULL) adds the tokenizer's own added-token literals to the
 * set that client text is escaped against (§11.2); without it only the literals of §11.1 are.
 * On failure returns -1 with err->code one of the OpenAI codes
 * "invalid_messages", "invalid_value", "invalid_type", "unsupported_parameter" and a message
 * suitable for an HTTP 400 body; out->err_param names the field. */
int ds_chat_render(const ds_tokenizer *tok, const ds_chat_request *req, ds_chat_prompt *out,
                   ds_error *err);
/* Render and tokenize (added-token recognition on; BOS is part of the rendered text). */
int ds_chat_encode(const ds_tokenizer *tok, const ds_chat_request *req, ds_chat_prompt *out,
                   ds_tokens *ids, ds_error *err);
void ds_chat_prompt_free(ds_chat_prompt *p);

/* Client-text escaping (§11.2): insert U+200B after the first character of every occurrence of
 * a control-token literal (the §11.1 list plus, with a tokenizer, every added-token literal).
 * Scanning resumes right after the inserted U+200B, so overlapping literals are all broken. */
typedef struct ds_escaper ds_escaper;
ds_escaper *ds_escaper_new(const ds_tokenizer *tok_or_null);
void ds_escaper_free(ds_escaper *e);
/* Appends the escaped text to `out`. */
void ds_escaper_apply(const ds_escaper *e, const char *text, size_t len, ds_strbuf *out);

#endif
