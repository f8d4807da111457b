/* Generation request validation (see api.h).  Rules are applied in the order a client would
 * fix them: JSON, model, prompt shape, sampling ranges, then the context-length check, which
 * needs the prompt tokens. */
#define _GNU_SOURCE
#include "server/api.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_api_fail(ds_api_error *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                ...) {
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->code, sizeof e->code, "%s", code);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

void ds_api_error_json(const ds_api_error *e, ds_tbuf *out) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type);
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    cJSON_AddStringToObject(o, "code", e->code);
    char *s = cJSON_PrintUnformatted(root);
    ds_tbuf_puts(out, s);
    free(s);
    cJSON_Delete(root);
}

void ds_api_new_id(const char *prefix, char *out, size_t len) {
    static const char hex[] = "0123456789abcdef";
    unsigned char rnd[16];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(rnd, 1, sizeof rnd, f) : 0;
    if (f) fclose(f);
    if (got != sizeof rnd) {
        uint64_t x = (uint64_t)(ds_now() * 1e9) ^ (uint64_t)(uintptr_t)out;
        for (int i = 0; i < 16; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            rnd[i] = (unsigned char)(x >> 56);
        }
    }
    char h[33];
    for (int i = 0; i < 16; i++) {
        h[2 * i] = hex[rnd[i] >> 4];
        h[2 * i + 1] = hex[rnd[i] & 15];
    }
    h[32] = 0;
    snprintf(out, len, "%s%s", prefix, h);
}

#define BAD(code, param, ...) ds_api_fail(err, 400, "invalid_request_error", code, param, __VA_ARGS__)

/* A JSON number with an integral value: integer lexemes keep their exact digits; a float
 * spelling (2.0, 1e3) is accepted when its value is integral, as OpenAI-compatible servers do. */
static bool is_int(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    if (v->valuestring && !strpbrk(v->valuestring, ".eE")) {
        errno = 0;
        long long x = strtoll(v->valuestring, NULL, 10);
        if (errno) return false;
        *out = x;
        return true;
    }
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9.2e18) return false;
    *out = (int64_t)d;
    return true;
}

int ds_api_int_array(const cJSON *arr, int64_t lo, int64_t hi, const char *param, int32_t **out, size_t *n,
                     ds_api_error *err) {
    size_t cap = 64, k = 0;
    int32_t *ids = ds_xmalloc(sizeof(int32_t) * cap);
    *out = NULL;
    *n = 0;
    for (const cJSON *v = arr->child; v; v = v->next, k++) {
        int64_t x;
        if (!is_int(v, &x) || x < lo || x >= hi) {
            free(ids);
            return BAD(cJSON_IsNumber(v) ? "invalid_value" : "invalid_type", param,
                       "'%s[%zu]' must be an integer in [%lld, %lld)", param, k, (long long)lo, (long long)hi);
        }
        if (k == cap) ids = ds_xrealloc(ids, sizeof(int32_t) * (cap *= 2));
        ids[k] = (int32_t)x;
    }
    *out = ids;
    *n = k;
    return 0;
}

int ds_api_check_ids(const int32_t *ids, size_t n, int64_t lo, int64_t hi, const char *param, ds_api_error *err) {
    for (size_t k = 0; k < n; k++)
        if (ids[k] < lo || ids[k] >= hi)
            return BAD("invalid_value", param, "'%s[%zu]' must be an integer in [%lld, %lld)", param, k, (long long)lo,
                       (long long)hi);
    return 0;
}

static int get_num(const cJSON *b, const char *k, double lo, double hi, bool lo_open, double *out, ds_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return BAD("invalid_type", k, "'%s' must be a number", k);
    double x = v->valuedouble;
    if (!isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
        return BAD("invalid_value", k, "'%s' is %g; the valid range is %s%g, %g]", k, x, lo_open ? "(" : "[", lo, hi);
    *out = x;
    return 0;
}

static int get_int(const cJSON *b, const char *k, int64_t lo, int64_t hi, int64_t *out, bool *present, ds_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    if (present) *present = false;
    if (!v || cJSON_IsNull(v)) return 0;
    int64_t x;
    if (!is_int(v, &x)) return BAD("invalid_type", k, "'%s' must be an integer", k);
    if (x < lo || x > hi)
        return BAD("invalid_value", k, "'%s' is %lld; the valid range is [%lld, %lld]", k, (long long)x, (long long)lo,
                   (long long)hi);
    *out = x;
    if (present) *present = true;
    return 0;
}

static int get_bool(const cJSON *b, const char *k, bool *out, ds_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return BAD("invalid_type", k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 0;
}

int ds_api_check_model(const cJSON *body, bool required, const ds_api_limits *lim, ds_api_error *err) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (!m || cJSON_IsNull(m)) {
        if (!required) return 0;
        return BAD("invalid_value", "model", "'model' is required");
    }
    if (!cJSON_IsString(m)) return BAD("invalid_type", "model", "'model' must be a string");
    for (int i = 0; i < lim->n_model_names; i++)
        if (!strcmp(m->valuestring, lim->model_names[i])) return 0;
    return ds_api_fail(err, 404, "not_found_error", "model_not_found", "model", "The model '%s' does not exist; this server serves '%s'",
                       m->valuestring, lim->model_names[0]);
}

static const char *const k_known_common[] = {
    "model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids",
    "max_tokens", "ignore_eos", "logprobs", "prompt_logprobs", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "logit_bias", "n", "cache_salt", "user", "skip_special_tokens", "min_tokens",
    "include_stop_str_in_output"};
static const char *const k_known_chat[] = {"messages", "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
                                           "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
                                           "response_format", "max_completion_tokens", "top_logprobs"};
static const char *const k_known_cmpl[] = {"prompt", "echo", "suffix", "best_of", "add_special_tokens"};

static bool in_list(const char *k, const char *const *l, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, l[i])) return true;
    return false;
}

static void collect_ignored(const cJSON *body, ds_api_kind kind, ds_tbuf *out) {
    for (const cJSON *c = body->child; c; c = c->next) {
        if (in_list(c->string, k_known_common, DS_ARRAY_LEN(k_known_common))) continue;
        if (kind == DS_API_CHAT && in_list(c->string, k_known_chat, DS_ARRAY_LEN(k_known_chat))) continue;
        if (kind == DS_API_COMPLETIONS && in_list(c->string, k_known_cmpl, DS_ARRAY_LEN(k_known_cmpl))) continue;
        if (out->n) ds_tbuf_puts(out, ",");
        ds_tbuf_puts(out, c->string);
        ds_log(DS_LOG_DEBUG, "ignored request field '%s'", c->string);
    }
}

static int parse_stop(const cJSON *b, ds_sampling_params *sp, ds_api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "stop");
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v)) return BAD("invalid_type", "stop", "'stop' must be a string or a list of strings");
    int n = one ? 1 : cJSON_GetArraySize(v);
    if (n > DS_MAX_STOP_STRINGS) return BAD("invalid_value", "stop", "'stop' has %d strings; at most %d are allowed", n, DS_MAX_STOP_STRINGS);
    for (int i = 0; i < n; i++) {
        const cJSON *s = one ? one : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s)) return BAD("invalid_type", "stop", "'stop[%d]' must be a string", i);
        size_t L = strlen(s->valuestring);
        if (L < 1 || L > 256) return BAD("invalid_value", "stop", "'stop[%d]' is %zu bytes; stop strings must be 1-256 bytes", i, L);
        sp->stop[sp->n_stop++] = ds_xstrdup(s->valuestring);
    }
    return 0;
}

static int parse_sampling(const cJSON *b, ds_api_kind kind, const ds_api_limits *lim, ds_api_request *r,
                          ds_api_error *err) {
    ds_sampling_params *sp = &r->sp;
    int64_t x;
    bool has;
    if (get_num(b, "temperature", 0, 2, false, &sp->temperature, err) || get_num(b, "top_p", 0, 1, true, &sp->top_p, err) ||
        get_num(b, "min_p", 0, 1, false, &sp->min_p, err) ||
        get_num(b, "presence_penalty", -2, 2, false, &sp->presence_penalty, err) ||
        get_num(b, "frequency_penalty", -2, 2, false, &sp->frequency_penalty, err) ||
        get_num(b, "repetition_penalty", 0, 2, true, &sp->repetition_penalty, err))
        return -1;
    x = -1;
    if (get_int(b, "top_k", -1, lim->vocab, &x, &has, err)) return -1;
    if (has) sp->top_k = (int)x;
    if (get_int(b, "seed", INT64_MIN, INT64_MAX, &sp->seed, &sp->has_seed, err)) return -1;
    x = 1;
    if (get_int(b, "n", 1, DS_API_MAX_CHOICES, &x, NULL, err)) return -1;
    r->n = (int)x;
    if (get_bool(b, "ignore_eos", &sp->ignore_eos, err)) return -1;
    if (parse_stop(b, sp, err)) return -1;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(b, "stop_token_ids");
    if (ids && !cJSON_IsNull(ids)) {
        if (!cJSON_IsArray(ids)) return BAD("invalid_type", "stop_token_ids", "'stop_token_ids' must be a list of integers");
        size_t n;
        if (ds_api_int_array(ids, 0, lim->vocab, "stop_token_ids", &sp->stop_ids, &n, err)) return -1;
        if (n > 1024) return BAD("invalid_value", "stop_token_ids", "'stop_token_ids' has %zu ids; at most 1024 are allowed", n);
        sp->n_stop_ids = (int)n;
    }
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(b, "logit_bias");
    if (lb && !cJSON_IsNull(lb)) {
        if (!cJSON_IsObject(lb)) return BAD("invalid_type", "logit_bias", "'logit_bias' must be an object of id -> bias");
        int n = cJSON_GetArraySize(lb);
        sp->bias_ids = ds_xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        sp->bias_vals = ds_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
        for (const cJSON *c = lb->child; c; c = c->next) {
            char *end;
            long id = strtol(c->string, &end, 10);
            if (*end || end == c->string || id < 0 || id >= lim->vocab)
                return BAD("invalid_value", "logit_bias", "'logit_bias' key '%s' is not a token id in [0, %d)", c->string, lim->vocab);
            if (!cJSON_IsNumber(c) || c->valuedouble < -100 || c->valuedouble > 100)
                return BAD("invalid_value", "logit_bias", "'logit_bias[%s]' must be a number in [-100, 100]", c->string);
            sp->bias_ids[sp->n_bias] = (int32_t)id;
            sp->bias_vals[sp->n_bias++] = (float)c->valuedouble;
        }
    }
    /* logprobs */
    if (kind == DS_API_CHAT) {
        bool lp = false;
        if (get_bool(b, "logprobs", &lp, err)) return -1;
        int64_t top = 0;
        if (get_int(b, "top_logprobs", 0, 20, &top, NULL, err)) return -1;
        if (top > 0 && !lp) /* OpenAI's rule; answering without them would drop what was asked for */
            return BAD("invalid_value", "top_logprobs", "'top_logprobs' is %lld but 'logprobs' is not true; set "
                       "\"logprobs\": true to get top log-probabilities", (long long)top);
        r->logprobs = lp;
        sp->logprobs = lp ? (int)top : -1;
    } else {
        int64_t lp = -1;
        if (get_int(b, "logprobs", 0, 20, &lp, &has, err)) return -1;
        r->logprobs = has;
        sp->logprobs = has ? (int)lp : -1;
    }
    int64_t plp = -1;
    if (get_int(b, "prompt_logprobs", 0, 20, &plp, &has, err)) return -1;
    sp->prompt_logprobs = has ? (int)plp : -1;
    /* max tokens */
    int64_t mt = 0;
    bool has_mt = false;
    if (kind == DS_API_CHAT && get_int(b, "max_completion_tokens", 1, INT64_MAX, &mt, &has_mt, err)) return -1;
    if (!has_mt && get_int(b, "max_tokens", 1, INT64_MAX, &mt, &has_mt, err)) return -1; /* the newer field wins */
    sp->max_tokens = has_mt ? mt : (kind == DS_API_COMPLETIONS ? 16 : 0); /* chat default set after tokenizing */
    if (get_int(b, "min_tokens", 0, INT64_MAX, &sp->min_tokens, NULL, err)) return -1;
    if (has_mt && sp->min_tokens > sp->max_tokens)
        return BAD("invalid_value", "min_tokens", "'min_tokens' (%lld) must not exceed the maximum output tokens (%lld)",
                   (long long)sp->min_tokens, (long long)sp->max_tokens);
    if (get_bool(b, "include_stop_str_in_output", &sp->include_stop_str, err)) return -1;
    if (get_bool(b, "skip_special_tokens", &r->skip_special, err)) return -1;
    /* streaming */
    if (get_bool(b, "stream", &r->stream, err)) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(b, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return BAD("invalid_type", "stream_options", "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, err)) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            return -1;
        }
    }
    const cJSON *salt = cJSON_GetObjectItemCaseSensitive(b, "cache_salt");
    if (salt && !cJSON_IsNull(salt)) {
        if (!cJSON_IsString(salt)) return BAD("invalid_type", "cache_salt", "'cache_salt' must be a string");
        if (strlen(salt->valuestring) > 256) return BAD("invalid_value", "cache_salt", "'cache_salt' is longer than 256 bytes");
        r->cache_salt = ds_xstrdup(salt->valuestring);
    }
    return 0;
}

int ds_api_tokenize_completion(const ds_tokenizer *tok, const char *text, bool add_special, ds_tokens *out,
                               ds_api_error *err) {
    ds_error e = {0};
    int32_t bos = ds_tokenizer_token_id(tok, "<｜begin▁of▁sentence｜>");
    ds_tokens t = {0};
    char *plain = ds_xstrdup(text); /* \u0000 in the JSON string comes back as a NUL byte here */
    size_t len = ds_json_nul_restore(plain, strlen(plain));
    int rc = ds_tokenizer_encode(tok, plain, len, true, &t, &e);
    free(plain);
    if (rc) {
        ds_tokens_free(&t);
        return BAD("invalid_value", "prompt", "prompt cannot be tokenized: %s", e.msg);
    }
    if (add_special && bos >= 0 && (t.n == 0 || t.ids[0] != bos)) ds_tokens_push(out, bos);
    for (size_t i = 0; i < t.n; i++) ds_tokens_push(out, t.ids[i]);
    ds_tokens_free(&t);
    return 0;
}

int ds_api_encode_chat(const ds_tokenizer *tok, const cJSON *b, const ds_api_limits *lim, ds_tokens *out,
                       char **prompt_text, bool *thinking, ds_api_error *err) {
    ds_chat_request cr;
    memset(&cr, 0, sizeof cr);
    cr.messages = cJSON_GetObjectItemCaseSensitive(b, "messages");
    cr.tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    if (cr.tools && cJSON_IsNull(cr.tools)) cr.tools = NULL;
    cr.reasoning_effort = cJSON_GetObjectItemCaseSensitive(b, "reasoning_effort");
    if (cr.reasoning_effort && cJSON_IsNull(cr.reasoning_effort)) cr.reasoning_effort = NULL;
    cr.chat_template_kwargs = cJSON_GetObjectItemCaseSensitive(b, "chat_template_kwargs");
    if (cr.chat_template_kwargs && cJSON_IsNull(cr.chat_template_kwargs)) cr.chat_template_kwargs = NULL;
    cr.response_format = cJSON_GetObjectItemCaseSensitive(b, "response_format");
    if (cr.response_format && cJSON_IsNull(cr.response_format)) cr.response_format = NULL;
    const char *rf_type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cr.response_format, "type"));
    /* json_object / json_schema: the response-format prompt section (no constrained decoding) */
    cr.allow_response_format = rf_type && (!strcmp(rf_type, "json_object") || !strcmp(rf_type, "json_schema"));
    cr.default_thinking = lim->default_thinking;
    cr.add_generation_prompt = true;
    bool agp = true, cont = false;
    if (get_bool(b, "add_generation_prompt", &agp, err) || get_bool(b, "continue_final_message", &cont, err)) return -1;
    cr.add_generation_prompt = agp;
    cr.continue_final_message = cont;
    if (!cr.messages) return BAD("invalid_value", "messages", "'messages' is required");
    if (!cJSON_IsArray(cr.messages)) return BAD("invalid_type", "messages", "'messages' must be a list");
    if (cJSON_GetArraySize(cr.messages) < 1) return BAD("invalid_value", "messages", "'messages' must hold at least one message");
    ds_chat_prompt pr;
    memset(&pr, 0, sizeof pr);
    ds_error e = {0};
    if (ds_chat_encode(tok, &cr, &pr, out, &e)) {
        const char *code = e.code[0] ? e.code : "invalid_messages";
        if (!strncmp(code, "E_", 2)) code = "invalid_messages";
        int rc = BAD(code, pr.err_param[0] ? pr.err_param : "messages", "%s", e.msg);
        ds_chat_prompt_free(&pr);
        return rc;
    }
    if (pr.n_images > lim->limit_images) {
        int rc = BAD("too_many_images", "messages", "the request has %d images; this server accepts at most %d per prompt",
                     pr.n_images, lim->limit_images);
        ds_chat_prompt_free(&pr);
        return rc;
    }
    if (thinking) *thinking = pr.ends_in_reasoning;
    if (prompt_text) *prompt_text = ds_xstrdup(pr.text);
    ds_chat_prompt_free(&pr);
    return 0;
}

/* One prompt: a string or a list of token ids. */
static int one_prompt(const cJSON *p, const ds_tokenizer *tok, const ds_api_limits *lim, bool add_special, ds_tokens *out,
                      char **text, ds_api_error *err) {
    if (cJSON_IsString(p)) {
        if (!tok) return BAD("invalid_value", "prompt", "text prompts need a tokenizer");
        *text = ds_xstrdup(p->valuestring);
        return ds_api_tokenize_completion(tok, p->valuestring, add_special, out, err);
    }
    if (!cJSON_IsArray(p)) return BAD("invalid_type", "prompt", "'prompt' must be a string, a list of token ids or a list of those");
    int32_t *ids;
    size_t n;
    if (ds_api_int_array(p, 0, lim->vocab, "prompt", &ids, &n, err)) return -1;
    for (size_t i = 0; i < n; i++) ds_tokens_push(out, ids[i]);
    free(ids);
    if (!out->n) return BAD("invalid_value", "prompt", "'prompt' is empty");
    return 0;
}

/* `prompt`: a string, a list of ids, or a list of several of those (one choice group each). */
static int parse_completion_prompt(const cJSON *b, const ds_tokenizer *tok, const ds_api_limits *lim, ds_api_request *r,
                                   ds_api_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    if (!p || cJSON_IsNull(p)) return BAD("invalid_value", "prompt", "'prompt' is required");
    bool add_special = true;
    if (get_bool(b, "add_special_tokens", &add_special, err)) return -1;
    if (r->prompt_ids.captured) { /* a list of ids, parsed without nodes */
        if (ds_api_check_ids(r->prompt_ids.ids, r->prompt_ids.n, 0, lim->vocab, "prompt", err)) return -1;
        if (!r->prompt_ids.n) return BAD("invalid_value", "prompt", "'prompt' is empty");
        r->prompt.ids = r->prompt_ids.ids;
        r->prompt.n = r->prompt.cap = r->prompt_ids.n;
        r->prompt_ids.ids = NULL;
        return 0;
    }
    bool several = cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    if (!several) return one_prompt(p, tok, lim, add_special, &r->prompt, &r->prompt_text, err);
    int np = cJSON_GetArraySize(p);
    if ((int64_t)np * r->n > DS_API_MAX_CHOICES)
        return BAD("invalid_value", "prompt", "%d prompts x n=%d is more than %d choices", np, r->n, DS_API_MAX_CHOICES);
    r->more_prompts = ds_xcalloc((size_t)np, sizeof(ds_tokens));
    r->more_texts = ds_xcalloc((size_t)np, sizeof(char *));
    int k = 0;
    for (const cJSON *it = p->child; it; it = it->next, k++) {
        if (!cJSON_IsString(it) && !cJSON_IsArray(it))
            return BAD("invalid_type", "prompt", "'prompt[%d]' must be a string or a list of token ids", k);
        ds_tokens *dst = k ? &r->more_prompts[k - 1] : &r->prompt;
        char **txt = k ? &r->more_texts[k - 1] : &r->prompt_text;
        if (k) r->n_more = k;
        if (one_prompt(it, tok, lim, add_special, dst, txt, err)) {
            snprintf(err->param, sizeof err->param, "prompt[%d]", k);
            return -1;
        }
    }
    return 0;
}

/* tool_choice: "auto" / "none" / "required" / {"type":"function","function":{"name":N}}.  A named
 * choice narrows the tools section to that function; the reply is checked (response.c). */
int ds_api_tool_choice(cJSON *b, bool *required, char **name_out, ds_api_error *err) {
    *required = false;
    *name_out = NULL;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(b, "tool_choice");
    if (!tc || cJSON_IsNull(tc)) return 0;
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
    bool have = tools && cJSON_IsArray(tools) && tools->child;
    if (cJSON_IsString(tc) && (!strcmp(tc->valuestring, "auto") || !strcmp(tc->valuestring, "none"))) return 0;
    if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) {
        if (!have) return BAD("invalid_value", "tool_choice", "tool_choice \"required\" needs a non-empty 'tools' list");
        *required = true;
        return 0;
    }
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name"));
    if (!cJSON_IsObject(tc) || !name)
        return BAD("invalid_value", "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"function\":{\"name\":...}}");
    cJSON *keep = NULL;
    for (cJSON *t = have ? tools->child : NULL; t && !keep; t = t->next) {
        const char *tn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
        if (tn && !strcmp(tn, name)) keep = t;
    }
    if (!keep) return BAD("invalid_value", "tool_choice", "tool_choice names '%s', which is not in 'tools'", name);
    *name_out = ds_xstrdup(name);   /* before the tools it points into are replaced */
    cJSON *only = cJSON_CreateArray();
    cJSON_AddItemToArray(only, cJSON_DetachItemViaPointer(tools, keep));
    /* InObject, not ViaPointer: the replacement must carry the key.  A keyless member ends every
     * later lookup in this object (cJSON stops at it), so "tools" and every field after it, such
     * as "messages", were lost: 400 "messages is required", or the tool section left unrendered */
    cJSON_ReplaceItemInObjectCaseSensitive(b, "tools", only);
    *required = true;
    return 0;
}

int ds_api_parse_generation(ds_api_kind kind, const char *body, size_t len, const ds_api_limits *lim,
                            const ds_tokenizer *tok, ds_api_request *r, ds_api_error *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    ds_sampling_defaults(&r->sp);
    r->parallel_tool_calls = true;
    r->skip_special = true;
    r->n = 1;
    ds_error e = {0};
    r->prompt_ids.key = "prompt";
    r->body = ds_json_parse_capture(body, len, kind == DS_API_COMPLETIONS ? &r->prompt_ids : NULL, &e);
    if (!r->body) return BAD("invalid_json", NULL, "malformed JSON body: %s", e.msg);
    const cJSON *b = r->body;
    if (!cJSON_IsObject(b)) return BAD("invalid_type", NULL, "the request body must be a JSON object");
    collect_ignored(b, kind, &r->ignored_fields);
    if (ds_api_check_model(b, true, lim, err)) return -1;
    if (parse_sampling(b, kind, lim, r, err)) return -1;
    if (kind == DS_API_CHAT) {
        if (ds_api_tool_choice(r->body, &r->tool_required, &r->required_tool, err)) return -1;
        if (get_bool(b, "parallel_tool_calls", &r->parallel_tool_calls, err)) return -1;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
        r->has_tools = tools && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
        if (!tok) return BAD("invalid_value", "messages", "chat requests need a tokenizer");
        if (ds_api_encode_chat(tok, b, lim, &r->prompt, &r->prompt_text, &r->thinking, err)) return -1;
    } else {
        if (get_bool(b, "echo", &r->echo, err)) return -1;
        if (r->echo && r->logprobs)
            return BAD("unsupported_parameter", "echo", "'echo' together with 'logprobs' is not supported (no prompt-token logprobs in that shape)");
        const cJSON *suf = cJSON_GetObjectItemCaseSensitive(b, "suffix");
        if (suf && !cJSON_IsNull(suf))
            return BAD("unsupported_parameter", "suffix", "'suffix' (fill-in-the-middle) is not supported: this model has no infilling format");
        int64_t best_of = 1;
        if (get_int(b, "best_of", 1, INT64_MAX, &best_of, NULL, err)) return -1;
        if (best_of > 1) return BAD("unsupported_parameter", "best_of", "'best_of' > 1 is not supported");
        if (parse_completion_prompt(b, tok, lim, r, err)) return -1;
    }
    if (r->n * (1 + r->n_more) > DS_API_MAX_CHOICES)
        return BAD("invalid_value", "n", "n=%d gives more than %d choices", r->n, DS_API_MAX_CHOICES);
    int64_t P = (int64_t)r->prompt.n, M = lim->max_model_len;
    for (int i = 0; i < r->n_more; i++) P = DS_MAX(P, (int64_t)r->more_prompts[i].n); /* the longest prompt decides */
    if (kind == DS_API_CHAT && r->sp.max_tokens == 0) r->sp.max_tokens = M - P > 0 ? M - P : 1;
    if (r->sp.min_tokens > r->sp.max_tokens)
        return BAD("invalid_value", "min_tokens", "'min_tokens' (%lld) must not exceed the maximum output tokens (%lld)",
                   (long long)r->sp.min_tokens, (long long)r->sp.max_tokens);
    if (P >= M || P + r->sp.max_tokens > M)
        return BAD("context_length_exceeded", kind == DS_API_CHAT ? "messages" : "prompt",
                   "This model's maximum context length is %lld tokens. However, you requested %lld tokens (%lld in the "
                   "messages, %lld in the completion).",
                   (long long)M, (long long)(P + r->sp.max_tokens), (long long)P, (long long)r->sp.max_tokens);
    return 0;
}

void ds_api_request_free(ds_api_request *r) {
    if (r->body) cJSON_Delete(r->body);
    ds_sampling_free(&r->sp);
    free(r->cache_salt);
    free(r->prompt_text);
    ds_tokens_free(&r->prompt);
    ds_tbuf_free(&r->ignored_fields);
    for (int i = 0; i < r->n_more; i++) {
        ds_tokens_free(&r->more_prompts[i]);
        free(r->more_texts[i]);
    }
    free(r->more_prompts);
    free(r->more_texts);
    free(r->required_tool);
    free(r->prompt_ids.ids);
    memset(r, 0, sizeof *r);
}
