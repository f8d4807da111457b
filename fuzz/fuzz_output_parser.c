/* Fuzz target: the DSML / reasoning output parser (model text -> reasoning, content, tool calls).
 * The first input byte picks the options (thinking on/off, a stop string, truncated or not) and a
 * chunk size; the rest is the generated text.  It is parsed in one shot and streamed in chunks of
 * that size: the parser promises both give the same result, so a difference aborts. */
#include "fuzz.h"
#include "tokenizer/output_parser.h"
#include <stdlib.h>
#include <string.h>

static int same_result(const ds_parse_result *a, const ds_parse_result *b) {
    if (a->reasoning_len != b->reasoning_len || memcmp(a->reasoning, b->reasoning, a->reasoning_len)) return 0;
    if (a->content_len != b->content_len || memcmp(a->content, b->content, a->content_len)) return 0;
    if (a->n_calls != b->n_calls || a->stopped != b->stopped) return 0;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->calls[i].name, b->calls[i].name) || strcmp(a->calls[i].arguments, b->calls[i].arguments) ||
            strcmp(a->calls[i].id, b->calls[i].id))
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const uint8_t sel = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    static const char *const stops[] = {"</answer>", "\n\n"};
    ds_parser_options o = {0};
    o.thinking = sel & 1;
    o.stop = (sel & 2) ? stops : NULL;
    o.n_stop = (sel & 2) ? 2 : 0;
    o.id_seed = 42;   /* deterministic call ids, so both runs must agree on them too */
    bool truncated = sel & 4;
    size_t chunk = 1 + (sel >> 3);   /* 1..32 bytes, splitting UTF-8 characters and markers */

    ds_parse_result whole = {0};
    ds_output_parse(text, len, &o, truncated, &whole);

    ds_output_parser *p = ds_output_parser_new(&o);
    for (size_t at = 0; at < len; at += chunk) {
        ds_parse_delta d = {0};
        ds_output_parser_feed(p, text + at, len - at < chunk ? len - at : chunk, &d);
        ds_parse_delta_free(&d);
    }
    ds_parse_delta d = {0};
    ds_output_parser_finish(p, truncated, &d);
    ds_parse_delta_free(&d);
    if (!same_result(&whole, ds_output_parser_result(p))) abort();
    ds_output_parser_free(p);
    ds_parse_result_free(&whole);
    return 0;
}
