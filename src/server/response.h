/* Response shapes of SERVING.md §10.5: chat and completions, whole or as SSE chunks.
 *
 * Why it is built this way: a streamed response and a whole one must say the same thing, so
 * both are produced by one object (ds_resp) that consumes the request's published output in
 * increments: a non-streaming reply is "consume everything, then render once", a stream renders
 * each increment as chunks.  Chat output goes through the deepseek_v41 output parser (reasoning
 * split, DSML tool calls) in both cases; it is fed the same text, so the results agree. */
#ifndef DS_SERVER_RESPONSE_H
#define DS_SERVER_RESPONSE_H
#include "engine/engine.h"
#include "engine/metrics.h"
#include "server/api.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/tokenizer.h"

typedef struct ds_resp {
    ds_api_kind kind;
    const ds_tokenizer *tok;
    ds_metrics *metrics;
    char id[64];
    const char *model;
    long long created;
    bool stream, include_usage, logprobs, thinking, parallel_tool_calls;
    int top_logprobs, prompt_logprobs;
    int32_t think_end_id;            /* `</think>` id, -1 if none */
    ds_output_parser *parser;        /* chat only */
    int n_calls_sent;
    int64_t tok_seen;                /* output tokens consumed */
    size_t text_seen;                /* bytes of released text consumed */
    size_t text_offset;              /* completions text_offset of the next token */
    bool role_sent, done;
    int index;                       /* choice index (prompt index * n + sample index) */
    bool first_of_prompt;            /* usage counts this choice's prompt */
    const char *echo;                /* completions echo: prompt text shown before the output */
    size_t echo_len;
    bool echo_sent;
    bool aborted;                    /* ended by the shutdown deadline: finish_reason "abort" */
    bool failed;                     /* an error event was sent */
    bool tool_required;              /* tool_choice "required" or named */
    const char *required_tool;       /* named tool_choice (borrowed from the request) */
    bool required_seen;
    /* whole-response accumulation */
    ds_tbuf text;
    cJSON *lp_content;               /* chat logprobs.content or completions logprob arrays */
    cJSON *lp_tokens, *lp_token_lps, *lp_tops, *lp_offsets;
} ds_resp;

void ds_resp_init(ds_resp *rs, const ds_api_request *ar, const ds_tokenizer *tok, ds_metrics *m, const char *model,
                  const char *id_prefix);
void ds_resp_free(ds_resp *rs);

/* Consume new output of r (caller holds r->mu).  In streaming mode the SSE events for it are
 * appended to `sse`; a finished request also gets its final choice chunk (or an error event,
 * which sets rs->failed).  The stream's end comes from ds_resp_stream_tail. */
void ds_resp_consume(ds_resp *rs, ds_req *r, ds_tbuf *sse);
/* After every choice is done: the usage chunk when asked for (summed over choices; not after
 * an error event), then `data: [DONE]`. */
void ds_resp_stream_tail(ds_resp *rs, ds_req **reqs, int n, ds_tbuf *sse);
/* Whole response body for n finished choices (caller holds every reqs[i]->mu, after consuming
 * all).  -1 with err set when the reply does not meet tool_choice. */
int ds_resp_render_all(ds_resp *rs, ds_req **reqs, int n, ds_tbuf *out, ds_api_error *err);

/* A JSON string for text that may hold NUL bytes (printed as \u0000 by ds_json_print). */
cJSON *ds_json_text(const char *s, size_t n);
/* Print o unformatted, appending to out, with NUL bytes of ds_json_text strings restored. */
void ds_json_print(cJSON *o, ds_tbuf *out);

#endif
