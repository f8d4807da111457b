/* Fuzz target: tokenizer.json as the loader reads it (model, merges, added tokens, normalizer and
 * pre-tokenizer components).  A tokenizer that loads is then used: a fixed string is encoded, and
 * the ids must lie in the vocabulary and decode without error. */
#include "fuzz.h"
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ds_tokenizer *tok = NULL;
    ds_error err = {0};
    if (ds_tokenizer_load_mem((const char *)data, size, "tokenizer.json", &tok, &err) != 0) {
        if (!err.msg[0]) abort();
        return 0;
    }
    static const char text[] = "Hello, world! 123 héllo <｜User｜>\n\t  x";
    ds_tokens ids = {0};
    if (ds_tokenizer_encode(tok, text, strlen(text), true, &ids, &err) == 0) {
        int V = ds_tokenizer_vocab_size(tok);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= V) abort();
        size_t len = 0;
        free(ds_tokenizer_decode(tok, ids.ids, ids.n, false, &len, &err));
    }
    ds_tokens_free(&ids);
    ds_tokenizer_free(tok);
    return 0;
}
