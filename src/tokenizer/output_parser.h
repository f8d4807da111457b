/* Output parsers for `deepseek_v41` generations (SERVING.md §11.5): the reasoning split at
 * `</think>`, DSML tool-call blocks → OpenAI `tool_calls`, and streaming deltas that never leak
 * partial markup.
 *
 * Why it is built this way: one incremental state machine serves both streaming and one-shot
 * parsing (the one-shot helper is feed-everything-then-finish), and every decision it makes waits
 * until enough text has arrived to be final, so the result cannot depend on how the text was
 * chunked.  Text that might still turn out to be the start of a marker (`</think>`, a DSML opener
 * with its preceding `<` and `\n\n`, or a stop string) is held back; trailing whitespace is held
 * until the next non-whitespace text or the end.  It tolerates the older spellings
 * (`tool_calls`, `function_calls`, the malformed `toolcalls`), unspaced `invoke`/`parameter`,
 * extra whitespace and CRLF, missing closing tags and truncation (§11.5). */
#ifndef DS_TOKENIZER_OUTPUT_PARSER_H
#define DS_TOKENIZER_OUTPUT_PARSER_H
#include "base/common.h"

typedef struct ds_tool_call {
    char *id;          /* "call_" + 24 alphanumerics */
    char *name;        /* attribute value, verbatim */
    char *arguments;   /* JSON object text (§11.5 "arguments") */
    int index;         /* 0-based position among this response's calls */
} ds_tool_call;

typedef struct ds_parser_options {
    bool thinking;              /* the prompt ended with `<think>`: text starts as reasoning */
    const char *const *stop;    /* stop strings (may be NULL); matched on the raw generated text */
    int n_stop;
    uint64_t id_seed;           /* 0: random call ids; otherwise a deterministic id sequence */
} ds_parser_options;

/* What one feed/finish call newly produced.  Strings are NUL-terminated and owned by the delta;
 * empty strings mean "nothing new". */
typedef struct ds_parse_delta {
    char *reasoning;
    size_t reasoning_len;
    char *content;
    size_t content_len;
    ds_tool_call *calls;     /* calls whose invoke closed (or were kept at finish) */
    int n_calls;
    bool stopped;            /* a stop string was reached: the caller should end generation */
} ds_parse_delta;
void ds_parse_delta_free(ds_parse_delta *d);

/* The accumulated result (equal to the concatenation of all deltas). */
typedef struct ds_parse_result {
    char *reasoning;
    size_t reasoning_len;
    char *content;
    size_t content_len;
    ds_tool_call *calls;
    int n_calls;
    bool stopped;               /* a stop string ended the text */
    int dropped_partial_calls;  /* truncated trailing calls dropped (§11.5 Truncation) */
    int parse_failures;         /* string="false" values that were not JSON (written as strings) */
    bool saw_dsml;              /* a DSML block or invoke started */
} ds_parse_result;
void ds_parse_result_free(ds_parse_result *r);

typedef struct ds_output_parser ds_output_parser;
ds_output_parser *ds_output_parser_new(const ds_parser_options *opts);
void ds_output_parser_free(ds_output_parser *p);
/* Feed the next decoded chunk (any split, even inside a UTF-8 character).  Fills `delta`
 * (zero it first or reuse after ds_parse_delta_free).  After `stopped`, further text is ignored. */
void ds_output_parser_feed(ds_output_parser *p, const char *text, size_t len, ds_parse_delta *delta);
/* End of generation.  truncated = finish_reason "length" (max_tokens or context end) as opposed
 * to EOS / stop.  Releases held text, keeps or drops a pending call by the §11.5 rules. */
void ds_output_parser_finish(ds_output_parser *p, bool truncated, ds_parse_delta *delta);
/* The accumulated result so far (owned by the parser). */
const ds_parse_result *ds_output_parser_result(const ds_output_parser *p);

/* One-shot: parse a whole generation.  Identical to feeding it in any chunking. */
void ds_output_parse(const char *text, size_t len, const ds_parser_options *opts, bool truncated,
                     ds_parse_result *out);

#endif
