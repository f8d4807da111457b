/* Fuzz target: HTTP request bodies, as the server parses them before the engine sees anything.
 * Each input is tried as the body of all four endpoints that take one: /v1/chat/completions and
 * /v1/completions (ds_api_parse_generation, the server's only parser for them) and /tokenize and
 * /detokenize (the same steps as their handlers in src/server/http.c: exact JSON parse, the model
 * field, completion tokenization or the chat encoder, token-id decoding).  Besides crashes and
 * sanitizer reports, a refusal must be a 4xx with an error body that is valid JSON: anything else
 * aborts, so libFuzzer records it. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "server/api.h"
#include "tokenizer/json_canon.h"
#include <stdlib.h>
#include <string.h>

static const char *const g_names[] = {"deepseek-v41"};
static ds_api_limits g_lim;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const ds_tokenizer *tok = fuzz_tiny_tokenizer();
    g_lim.model_names = g_names;
    g_lim.n_model_names = 1;
    g_lim.max_model_len = 4096;
    g_lim.vocab = ds_tokenizer_vocab_size(tok);
    return 0;
}

/* A refusal must be a client error with a well-formed OpenAI error body. */
static void check_refusal(const ds_api_error *e) {
    if (e->status < 400 || e->status > 499 || !e->type[0]) abort();
    ds_tbuf out = {0};
    ds_api_error_json(e, &out);
    cJSON *j = cJSON_ParseWithLength(out.s, out.n);
    if (!j || !cJSON_GetObjectItemCaseSensitive(j, "error")) abort();
    cJSON_Delete(j);
    ds_tbuf_free(&out);
}

static void generation(ds_api_kind kind, const char *body, size_t len) {
    ds_api_request r;
    ds_api_error e = {0};
    if (ds_api_parse_generation(kind, body, len, &g_lim, fuzz_tiny_tokenizer(), &r, &e) != 0) check_refusal(&e);
    else if (r.prompt.n == 0 || (int64_t)r.prompt.n >= g_lim.max_model_len) abort();   /* accepted => fits */
    ds_api_request_free(&r);
}

static void tokenize(const cJSON *b) {
    const ds_tokenizer *tok = fuzz_tiny_tokenizer();
    ds_api_error e = {0};
    ds_tokens toks = {0};
    char *text = NULL;
    bool thinking;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    int rc = ds_api_check_model(b, false, &g_lim, &e);
    if (rc == 0 && p && cJSON_IsString(p)) {
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(b, "add_special_tokens");
        rc = ds_api_tokenize_completion(tok, p->valuestring, !as || !cJSON_IsFalse(as), &toks, &e);
    } else if (rc == 0 && cJSON_GetObjectItemCaseSensitive(b, "messages")) {
        rc = ds_api_encode_chat(tok, b, &g_lim, &toks, &text, &thinking, &e);
    }
    if (rc != 0) check_refusal(&e);
    for (size_t i = 0; rc == 0 && i < toks.n; i++)
        if (toks.ids[i] < 0 || toks.ids[i] >= g_lim.vocab) abort();
    free(text);
    ds_tokens_free(&toks);
}

static void detokenize(const cJSON *b) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "tokens");
    if (!t || !cJSON_IsArray(t)) return;
    int n = cJSON_GetArraySize(t), k = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    for (const cJSON *v = t->child; v; v = v->next) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= g_lim.vocab ||
            v->valuedouble != (int32_t)v->valuedouble) { free(ids); return; }
        ids[k++] = (int32_t)v->valuedouble;
    }
    ds_error de = {0};
    size_t len = 0;
    free(ds_tokenizer_decode(fuzz_tiny_tokenizer(), ids, (size_t)k, false, &len, &de));
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;   /* the server refuses bodies over --max-request-body first */
    const char *body = (const char *)data;
    generation(DS_API_CHAT, body, size);
    generation(DS_API_COMPLETIONS, body, size);
    ds_error pe = {0};
    cJSON *b = ds_json_parse_exact(body, size, &pe);
    if (b && cJSON_IsObject(b)) {
        tokenize(b);
        detokenize(b);
    }
    cJSON_Delete(b);
    return 0;
}
