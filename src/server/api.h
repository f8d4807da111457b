/* OpenAI request parsing and validation (SERVING.md §9, §10.3, §10.4, §10.6) and the error body.
 *
 * Why it is built this way: every rule that can refuse a request is applied here, before the
 * engine sees anything, and every refusal carries the HTTP status, the OpenAI `type`/`code` and
 * the offending field, so the HTTP layer only serialises (no rule lives in two places).  Bodies
 * are parsed with the tokenizer's exact parser, which keeps number spellings for the chat
 * encoder (tool schemas must be re-serialised byte-exactly). */
#ifndef DS_SERVER_API_H
#define DS_SERVER_API_H
#include "base/common.h"
#include "engine/engine.h"
#include "engine/textbuf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include <cJSON.h>

typedef struct ds_api_error {
    int status;            /* 400, 401, 404, 413, 429, 500, 503 */
    char type[40];         /* invalid_request_error, not_found_error, ... */
    char code[40];         /* invalid_json, invalid_value, ... */
    char param[96];        /* field name or "" (null) */
    char message[512];
} ds_api_error;

int ds_api_fail(ds_api_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error":{"message","type","param","code"}} */
void ds_api_error_json(const ds_api_error *e, ds_tbuf *out);

typedef enum { DS_API_CHAT = 0, DS_API_COMPLETIONS } ds_api_kind;

/* Server-wide settings the rules depend on. */
typedef struct ds_api_limits {
    const char *const *model_names;   /* served name and aliases */
    int n_model_names;
    int64_t max_model_len;
    int vocab;
    bool default_thinking;
    int limit_images;                 /* --limit-mm-per-prompt image=N (0 without vision) */
} ds_api_limits;

/* A validated generation request. */
typedef struct ds_api_request {
    ds_api_kind kind;
    cJSON *body;                      /* owned parse tree */
    ds_sampling_params sp;
    bool stream, include_usage;
    bool logprobs;                    /* chat: logprobs true; completions: logprobs given */
    bool thinking;                    /* chat: resolved mode; the prompt ends in reasoning */
    bool parallel_tool_calls;
    bool skip_special;
    bool has_tools;
    char *cache_salt;
    ds_tokens prompt;                 /* token ids */
    char *prompt_text;                /* rendered chat prompt or completion string (may be NULL) */
    ds_tbuf ignored_fields;           /* comma-separated unknown top-level fields */
    int n;                            /* choices per prompt */
    bool echo;                        /* completions: the prompt text precedes each choice's text */
    bool tool_required;               /* tool_choice "required" or a named function */
    char *required_tool;              /* the named function, or NULL */
    ds_tokens *more_prompts;          /* completions: prompts 2.. of a list of prompts */
    char **more_texts;                /* their texts (NULL for token-id prompts) */
    int n_more;
    ds_json_capture prompt_ids;       /* completions: a token-id prompt taken without cJSON nodes */
} ds_api_request;

/* Choices of one request (prompts x n) are capped: each is a separate engine request. */
#define DS_API_MAX_CHOICES 64

/* Parse and validate a body; on success the request holds the prompt ids and sampling params.
 * tok may be NULL only for bodies that carry token ids (completions). */
int ds_api_parse_generation(ds_api_kind kind, const char *body, size_t len, const ds_api_limits *lim,
                            const ds_tokenizer *tok, ds_api_request *out, ds_api_error *err);
void ds_api_request_free(ds_api_request *r);

/* A JSON array of integers in [lo, hi), walked once through ->child/->next (cJSON_GetArrayItem
 * in a loop is quadratic).  Integral numbers written as floats (2.0) are accepted.  *out is
 * malloc'd (never NULL); 400 naming `param`[i] otherwise. */
int ds_api_int_array(const cJSON *arr, int64_t lo, int64_t hi, const char *param, int32_t **out, size_t *n,
                     ds_api_error *err);

/* The same check for ids taken by a parse capture (json_canon.h). */
int ds_api_check_ids(const int32_t *ids, size_t n, int64_t lo, int64_t hi, const char *param, ds_api_error *err);

/* The model field: required for generation, optional for /tokenize (NULL field = ok). */
int ds_api_check_model(const cJSON *body, bool required, const ds_api_limits *lim, ds_api_error *err);

/* Completion prompt tokenization (§10.4): control-token literals recognised; BOS prepended
 * unless the text already starts with it or add_special is false. */
int ds_api_tokenize_completion(const ds_tokenizer *tok, const char *text, bool add_special, ds_tokens *out,
                               ds_api_error *err);
/* tool_choice of a chat body (auto, none, required, or a named function): a named function
 * narrows the body's `tools` to that one, in place, so the prompt lists it alone.  *required and
 * *name (malloc'd, NULL unless named) say what the reply must hold; 400 for a bad choice. */
int ds_api_tool_choice(cJSON *body, bool *required, char **name, ds_api_error *err);
/* Chat prompt (§11) from a body holding messages, tools, reasoning_effort, chat_template_kwargs,
 * response_format, add_generation_prompt, continue_final_message. */
int ds_api_encode_chat(const ds_tokenizer *tok, const cJSON *body, const ds_api_limits *lim, ds_tokens *out,
                       char **prompt_text, bool *thinking, ds_api_error *err);

/* "chatcmpl-" / "cmpl-" + 32 random hex digits. */
void ds_api_new_id(const char *prefix, char *out, size_t len);

#endif
