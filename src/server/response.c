/* Response shapes (see response.h). */
#include "server/response.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Text may hold U+0000 (a byte-level token can decode to it), which cJSON strings cannot carry.
 * Such text is stored with a private marker in place of each NUL and the marker's escaped form
 * is turned into \u0000 when the JSON is printed, so no text is ever cut short. */
#define NUL_MARK "\x01\x02\x03NUL\x03\x02\x01"
#define NUL_MARK_JSON "\\u0001\\u0002\\u0003NUL\\u0003\\u0002\\u0001"

cJSON *ds_json_text(const char *s, size_t n) {
    if (!s) return cJSON_CreateString("");
    if (!memchr(s, 0, n)) {
        char *c = ds_xmalloc(n + 1);
        memcpy(c, s, n);
        c[n] = 0;
        cJSON *it = cJSON_CreateString(c);
        free(c);
        return it;
    }
    ds_tbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (s[i]) ds_tbuf_append(&b, s + i, 1);
        else ds_tbuf_puts(&b, NUL_MARK);
    }
    cJSON *it = cJSON_CreateString(b.s);
    ds_tbuf_free(&b);
    return it;
}

static void add_text(cJSON *o, const char *key, const char *s, size_t n) { cJSON_AddItemToObject(o, key, ds_json_text(s, n)); }

void ds_json_print(cJSON *o, ds_tbuf *out) {
    char *p = cJSON_PrintUnformatted(o);
    const char *q = p, *m;
    size_t ml = strlen(NUL_MARK_JSON);
    while ((m = strstr(q, NUL_MARK_JSON))) {
        ds_tbuf_append(out, q, (size_t)(m - q));
        ds_tbuf_puts(out, "\\u0000");
        q = m + ml;
    }
    ds_tbuf_puts(out, q);
    free(p);
}

void ds_resp_init(ds_resp *rs, const ds_api_request *ar, const ds_tokenizer *tok, ds_metrics *m, const char *model,
                  const char *id_prefix) {
    memset(rs, 0, sizeof *rs);
    rs->kind = ar->kind;
    rs->tok = tok;
    rs->metrics = m;
    ds_api_new_id(id_prefix, rs->id, sizeof rs->id);
    rs->model = model;
    rs->created = (long long)time(NULL);
    rs->stream = ar->stream;
    rs->include_usage = ar->include_usage;
    rs->logprobs = ar->logprobs;
    rs->top_logprobs = ar->sp.logprobs > 0 ? ar->sp.logprobs : 0;
    rs->prompt_logprobs = ar->sp.prompt_logprobs;
    rs->thinking = ar->thinking;
    rs->parallel_tool_calls = ar->parallel_tool_calls;
    rs->tool_required = ar->tool_required;
    rs->required_tool = ar->required_tool;
    rs->first_of_prompt = true;
    rs->think_end_id = tok ? ds_tokenizer_token_id(tok, "</think>") : -1;
    if (ar->kind == DS_API_CHAT) {
        ds_parser_options po = {.thinking = ar->thinking};
        rs->parser = ds_output_parser_new(&po);
    }
    rs->lp_content = cJSON_CreateArray();
    rs->lp_tokens = cJSON_CreateArray();
    rs->lp_token_lps = cJSON_CreateArray();
    rs->lp_tops = cJSON_CreateArray();
    rs->lp_offsets = cJSON_CreateArray();
}

void ds_resp_free(ds_resp *rs) {
    if (rs->parser) ds_output_parser_free(rs->parser);
    ds_tbuf_free(&rs->text);
    cJSON_Delete(rs->lp_content);
    cJSON_Delete(rs->lp_tokens);
    cJSON_Delete(rs->lp_token_lps);
    cJSON_Delete(rs->lp_tops);
    cJSON_Delete(rs->lp_offsets);
    memset(rs, 0, sizeof *rs);
}

/* Decoded text of one id (invalid UTF-8 replaced), for logprob entries. */
static char *token_text(const ds_tokenizer *tok, int32_t id, size_t *len) {
    ds_error e;
    size_t n = 0;
    char *s = tok ? ds_tokenizer_decode(tok, &id, 1, false, &n, &e) : NULL;
    if (!s) {
        char buf[32];
        snprintf(buf, sizeof buf, "<%d>", id);
        s = ds_xstrdup(buf);
        n = strlen(s);
    }
    if (len) *len = n;
    return s;
}

static cJSON *token_bytes(const ds_tokenizer *tok, int32_t id) {
    cJSON *a = cJSON_CreateArray();
    size_t n = 0;
    const uint8_t *b = tok ? ds_tokenizer_token_bytes(tok, id, &n) : NULL;
    for (size_t i = 0; b && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(b[i]));
    return a;
}

static cJSON *chat_lp_entry(const ds_tokenizer *tok, int32_t id, float lp) {
    cJSON *o = cJSON_CreateObject();
    size_t n;
    char *t = token_text(tok, id, &n);
    add_text(o, "token", t, n);
    free(t);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON_AddItemToObject(o, "bytes", token_bytes(tok, id));
    return o;
}

/* Append logprob records of output tokens [from, to) to the given containers. */
static void add_logprobs(ds_resp *rs, ds_req *r, int64_t from, int64_t to, cJSON *chat_content, cJSON *toks,
                         cJSON *lps, cJSON *tops, cJSON *offs) {
    for (int64_t i = from; i < to; i++) {
        const ds_sample_result *res = &r->out_lp[i];
        int32_t id = r->out_ids[i];
        if (rs->kind == DS_API_CHAT) {
            cJSON *e = chat_lp_entry(rs->tok, id, res->logprob);
            cJSON *tl = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < res->n_top; k++) cJSON_AddItemToArray(tl, chat_lp_entry(rs->tok, res->top[k].id, res->top[k].logprob));
            cJSON_AddItemToArray(chat_content, e);
        } else {
            size_t tn;
            char *t = token_text(rs->tok, id, &tn);
            cJSON_AddItemToArray(toks, ds_json_text(t, tn));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)rs->text_offset));
            rs->text_offset += tn;
            free(t);
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(res->logprob));
            cJSON *m = cJSON_CreateObject();
            for (int k = 0; k < res->n_top; k++) {
                char *tt = token_text(rs->tok, res->top[k].id, NULL);
                if (!cJSON_GetObjectItemCaseSensitive(m, tt)) cJSON_AddNumberToObject(m, tt, res->top[k].logprob);
                free(tt);
            }
            cJSON_AddItemToArray(tops, m);
        }
    }
}

static const char *finish_reason(ds_resp *rs, ds_req *r, int n_calls) {
    if (rs->aborted && r->end == DS_END_CANCELLED) return "abort";
    if (r->end == DS_END_LENGTH) return "length";
    if (rs->kind == DS_API_CHAT && n_calls > 0 && r->stopped_by_eos) return "tool_calls";
    return "stop";
}

static int64_t reasoning_tokens(ds_resp *rs, ds_req *r) {
    if (!rs->thinking) return 0;
    for (int64_t i = 0; i < r->n_out; i++)
        if (r->out_ids[i] == rs->think_end_id) return i + 1;
    return r->n_out;
}

/* Usage of n choices: a prompt counts once however many choices it has (first_of_prompt). */
static cJSON *usage_obj(ds_resp *rs, ds_req **reqs, int n) {
    int64_t prompt = 0, out = 0, cached = 0, reasoning = 0;
    for (int i = 0; i < n; i++) {
        if (rs[i].first_of_prompt) prompt += reqs[i]->n_prompt, cached += reqs[i]->cached_tokens;
        out += reqs[i]->n_out;
        reasoning += reasoning_tokens(&rs[i], reqs[i]);
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)out);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + out));
    cJSON *pd = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(pd, "cached_tokens", (double)cached);
    if (rs->kind == DS_API_CHAT) {
        cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
        cJSON_AddNumberToObject(cd, "reasoning_tokens", (double)reasoning);
    }
    return u;
}

static cJSON *tool_call_obj(const ds_tool_call *c, bool with_index) {
    cJSON *o = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(o, "index", c->index);
    cJSON_AddStringToObject(o, "id", c->id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(f, "name", c->name);
    cJSON_AddStringToObject(f, "arguments", c->arguments);
    return o;
}

static cJSON *chunk_base(ds_resp *rs) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", rs->id);
    cJSON_AddStringToObject(o, "object", rs->kind == DS_API_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)rs->created);
    cJSON_AddStringToObject(o, "model", rs->model);
    return o;
}

static void emit(ds_tbuf *sse, cJSON *o) {
    ds_tbuf_puts(sse, "data: ");
    ds_json_print(o, sse);
    ds_tbuf_puts(sse, "\n\n");
    cJSON_Delete(o);
}

/* One choice chunk: delta fields (chat) or text (completions), optional logprobs, finish. */
static void emit_choice(ds_resp *rs, ds_tbuf *sse, cJSON *delta, const char *text, size_t text_len, cJSON *lp, const char *fin) {
    cJSON *o = chunk_base(rs);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", rs->index);
    if (rs->kind == DS_API_CHAT) cJSON_AddItemToObject(c, "delta", delta ? delta : cJSON_CreateObject());
    else {
        add_text(c, "text", text, text ? text_len : 0);
        cJSON_Delete(delta);
    }
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (fin) cJSON_AddStringToObject(c, "finish_reason", fin);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    if (rs->include_usage) cJSON_AddNullToObject(o, "usage");
    emit(sse, o);
}

static int apply_delta(ds_resp *rs, ds_parse_delta *d, ds_tbuf *sse, cJSON **lp) {
    int calls = 0;
    if (rs->stream) {
        if (d->reasoning_len || d->content_len) {
            cJSON *delta = cJSON_CreateObject();
            if (d->reasoning_len) add_text(delta, "reasoning_content", d->reasoning, d->reasoning_len);
            if (d->content_len) add_text(delta, "content", d->content, d->content_len);
            emit_choice(rs, sse, delta, NULL, 0, *lp, NULL);
            *lp = NULL;
        }
        for (int i = 0; i < d->n_calls; i++) {
            if (!rs->parallel_tool_calls && rs->n_calls_sent >= 1) {
                atomic_fetch_add(&rs->metrics->tool_calls_dropped, 1);
                continue;
            }
            cJSON *delta = cJSON_CreateObject(), *tc = cJSON_AddArrayToObject(delta, "tool_calls");
            ds_tool_call c = d->calls[i];
            if (rs->required_tool && !strcmp(c.name, rs->required_tool)) rs->required_seen = true;
            c.index = rs->n_calls_sent++;
            cJSON_AddItemToArray(tc, tool_call_obj(&c, true));
            emit_choice(rs, sse, delta, NULL, 0, *lp, NULL);
            *lp = NULL;
            calls++;
        }
    }
    return calls;
}

static void stream_error(ds_resp *rs, const ds_api_error *e, ds_tbuf *sse) {
    ds_tbuf_puts(sse, "data: ");
    ds_api_error_json(e, sse);
    ds_tbuf_puts(sse, "\n\n");
    rs->failed = true;
}

/* tool_choice "required" or named: the reply must hold a (matching) call; there is no
 * constrained decoding, so a reply without one is refused rather than passed off as compliant. */
static bool tool_choice_unmet(ds_resp *rs, bool seen, ds_api_error *e) {
    if (!rs->tool_required || seen) return false;
    if (rs->required_tool)
        ds_api_fail(e, 400, "invalid_request_error", "tool_choice_not_satisfied", "tool_choice",
                    "tool_choice names '%s' but the model replied without calling it", rs->required_tool);
    else
        ds_api_fail(e, 400, "invalid_request_error", "tool_choice_not_satisfied", "tool_choice",
                    "tool_choice is \"required\" but the model replied without a tool call");
    return true;
}

void ds_resp_consume(ds_resp *rs, ds_req *r, ds_tbuf *sse) {
    if (rs->done) return;
    int64_t nt = r->n_out;
    size_t nx = r->text.n;
    const char *new_text = r->text.s ? r->text.s + rs->text_seen : "";
    size_t new_len = nx - rs->text_seen;
    cJSON *lp = NULL;
    if (rs->logprobs && nt > rs->tok_seen && r->out_lp) {
        if (rs->stream) {
            if (rs->kind == DS_API_CHAT) {
                lp = cJSON_CreateObject();
                add_logprobs(rs, r, rs->tok_seen, nt, cJSON_AddArrayToObject(lp, "content"), NULL, NULL, NULL, NULL);
            } else {
                lp = cJSON_CreateObject();
                add_logprobs(rs, r, rs->tok_seen, nt, NULL, cJSON_AddArrayToObject(lp, "tokens"),
                              cJSON_AddArrayToObject(lp, "token_logprobs"), cJSON_AddArrayToObject(lp, "top_logprobs"),
                              cJSON_AddArrayToObject(lp, "text_offset"));
            }
        } else {
            add_logprobs(rs, r, rs->tok_seen, nt, rs->lp_content, rs->lp_tokens, rs->lp_token_lps, rs->lp_tops, rs->lp_offsets);
        }
    }
    rs->tok_seen = nt;
    rs->text_seen = nx;
    if (rs->stream && !rs->role_sent && rs->kind == DS_API_CHAT) {
        cJSON *delta = cJSON_CreateObject();
        cJSON_AddStringToObject(delta, "role", "assistant");
        cJSON_AddStringToObject(delta, "content", "");
        emit_choice(rs, sse, delta, NULL, 0, NULL, NULL);
        rs->role_sent = true;
    }
    if (rs->stream && rs->echo_len && !rs->echo_sent && rs->kind == DS_API_COMPLETIONS) {
        emit_choice(rs, sse, NULL, rs->echo, rs->echo_len, NULL, NULL);
        rs->echo_sent = true;
    }
    if (!rs->stream) {
        if (new_len) ds_tbuf_append(&rs->text, new_text, new_len);
    } else if (rs->kind == DS_API_CHAT) {
        ds_parse_delta d;
        memset(&d, 0, sizeof d);
        if (new_len) ds_output_parser_feed(rs->parser, new_text, new_len, &d);
        apply_delta(rs, &d, sse, &lp);
        ds_parse_delta_free(&d);
    } else if (new_len || lp) {
        emit_choice(rs, sse, NULL, new_text, new_len, lp, NULL);
        lp = NULL;
    }
    if (lp && rs->stream && rs->kind == DS_API_CHAT) {
        emit_choice(rs, sse, cJSON_CreateObject(), NULL, 0, lp, NULL);
        lp = NULL;
    }
    cJSON_Delete(lp);
    if (!r->finished || !rs->stream) return;
    rs->done = true;
    if (r->end == DS_END_ERROR || (r->end == DS_END_CANCELLED && !rs->aborted)) {
        ds_api_error e;
        const char *type = r->err_status == 503 ? "service_unavailable" : "server_error";
        ds_api_fail(&e, r->err_status ? r->err_status : 500, type, r->err_code[0] ? r->err_code : "internal_error", NULL,
                    "%s", r->err_msg[0] ? r->err_msg : "internal error");
        stream_error(rs, &e, sse);
        return;
    }
    int n_calls = rs->n_calls_sent;
    if (rs->kind == DS_API_CHAT) {
        ds_parse_delta d;
        memset(&d, 0, sizeof d);
        ds_output_parser_finish(rs->parser, r->end == DS_END_LENGTH, &d);
        n_calls += apply_delta(rs, &d, sse, &lp);
        ds_parse_delta_free(&d);
        const ds_parse_result *pr = ds_output_parser_result(rs->parser);
        if (pr->parse_failures) atomic_fetch_add(&rs->metrics->tool_parse_failures, (uint64_t)pr->parse_failures);
        if (pr->dropped_partial_calls) atomic_fetch_add(&rs->metrics->tool_calls_dropped, (uint64_t)pr->dropped_partial_calls);
        if (n_calls && r->stopped_by_eos) atomic_fetch_add(&rs->metrics->success[DS_FINISH_TOOL_CALLS], 1);
        ds_api_error e;
        if (!rs->aborted && tool_choice_unmet(rs, rs->required_seen, &e)) {
            stream_error(rs, &e, sse);
            return;
        }
    }
    emit_choice(rs, sse, cJSON_CreateObject(), "", 0, NULL, finish_reason(rs, r, n_calls));
}

void ds_resp_stream_tail(ds_resp *rs, ds_req **reqs, int n, ds_tbuf *sse) {
    bool failed = false;
    for (int i = 0; i < n; i++) failed |= rs[i].failed;
    if (!failed && rs->include_usage) {
        cJSON *o = chunk_base(rs);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_obj(rs, reqs, n));
        emit(sse, o);
    }
    ds_tbuf_puts(sse, "data: [DONE]\n\n");
}

static cJSON *prompt_logprobs_json(ds_resp *rs, ds_req *r) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; i < r->n_prompt; i++) {
        if (i == 0 || i >= r->n_plp) {
            cJSON_AddItemToArray(a, cJSON_CreateNull());
            continue;
        }
        const ds_sample_result *res = &r->plp[i];
        cJSON *o = cJSON_CreateObject();
        char key[16];
        size_t tn;
        char *t = token_text(rs->tok, res->token, &tn);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "logprob", res->logprob);
        cJSON_AddNumberToObject(e, "rank", res->rank);
        add_text(e, "decoded_token", t, tn);
        free(t);
        snprintf(key, sizeof key, "%d", res->token);
        cJSON_AddItemToObject(o, key, e);
        for (int k = 0; k < res->n_top; k++) {
            snprintf(key, sizeof key, "%d", res->top[k].id);
            if (cJSON_GetObjectItemCaseSensitive(o, key)) continue;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "logprob", res->top[k].logprob);
            cJSON_AddNumberToObject(x, "rank", k + 1);
            size_t ttn;
            char *tt = token_text(rs->tok, res->top[k].id, &ttn);
            add_text(x, "decoded_token", tt, ttn);
            free(tt);
            cJSON_AddItemToObject(o, key, x);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* One choice object; NULL with err set when tool_choice is not met. */
static cJSON *choice_json(ds_resp *rs, ds_req *r, ds_api_error *err) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", rs->index);
    int n_calls = 0;
    bool seen = false;
    if (rs->kind == DS_API_CHAT) {
        ds_parser_options po = {.thinking = rs->thinking};
        ds_parse_result pr;
        memset(&pr, 0, sizeof pr);
        ds_output_parse(rs->text.s ? rs->text.s : "", rs->text.n, &po, r->end == DS_END_LENGTH, &pr);
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        n_calls = pr.n_calls;
        if (!rs->parallel_tool_calls && n_calls > 1) {
            atomic_fetch_add(&rs->metrics->tool_calls_dropped, (uint64_t)(n_calls - 1));
            n_calls = 1;
        }
        if (n_calls && pr.content_len == 0) cJSON_AddNullToObject(msg, "content");
        else add_text(msg, "content", pr.content, pr.content_len);
        if (rs->thinking) add_text(msg, "reasoning_content", pr.reasoning, pr.reasoning_len);
        if (n_calls) {
            cJSON *tc = cJSON_AddArrayToObject(msg, "tool_calls");
            for (int i = 0; i < n_calls; i++) cJSON_AddItemToArray(tc, tool_call_obj(&pr.calls[i], false));
            for (int i = 0; i < n_calls; i++) seen |= !rs->required_tool || !strcmp(pr.calls[i].name, rs->required_tool);
        }
        if (pr.parse_failures) atomic_fetch_add(&rs->metrics->tool_parse_failures, (uint64_t)pr.parse_failures);
        if (pr.dropped_partial_calls) atomic_fetch_add(&rs->metrics->tool_calls_dropped, (uint64_t)pr.dropped_partial_calls);
        if (n_calls && r->stopped_by_eos) atomic_fetch_add(&rs->metrics->success[DS_FINISH_TOOL_CALLS], 1);
        ds_parse_result_free(&pr);
        if (!rs->aborted && tool_choice_unmet(rs, seen, err)) {
            cJSON_Delete(c);
            return NULL;
        }
        if (rs->logprobs) {
            cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
            cJSON_AddItemToObject(lp, "content", rs->lp_content);
            rs->lp_content = cJSON_CreateArray();
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        if (rs->echo_len) {
            ds_tbuf t = {0};
            ds_tbuf_append(&t, rs->echo, rs->echo_len);
            ds_tbuf_append(&t, rs->text.s ? rs->text.s : "", rs->text.n);
            add_text(c, "text", t.s, t.n);
            ds_tbuf_free(&t);
        } else {
            add_text(c, "text", rs->text.s, rs->text.n);
        }
        if (rs->logprobs) {
            cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
            cJSON_AddItemToObject(lp, "tokens", rs->lp_tokens);
            cJSON_AddItemToObject(lp, "token_logprobs", rs->lp_token_lps);
            cJSON_AddItemToObject(lp, "top_logprobs", rs->lp_tops);
            cJSON_AddItemToObject(lp, "text_offset", rs->lp_offsets);
            rs->lp_tokens = cJSON_CreateArray();
            rs->lp_token_lps = cJSON_CreateArray();
            rs->lp_tops = cJSON_CreateArray();
            rs->lp_offsets = cJSON_CreateArray();
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    cJSON_AddStringToObject(c, "finish_reason", finish_reason(rs, r, n_calls));
    if (rs->prompt_logprobs >= 0) cJSON_AddItemToObject(c, "prompt_logprobs", prompt_logprobs_json(rs, r));
    return c;
}

int ds_resp_render_all(ds_resp *rs, ds_req **reqs, int n, ds_tbuf *out, ds_api_error *err) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", rs->id);
    cJSON_AddStringToObject(o, "object", rs->kind == DS_API_CHAT ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)rs->created);
    cJSON_AddStringToObject(o, "model", rs->model);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) {
        cJSON *c = choice_json(&rs[i], reqs[i], err);
        if (!c) {
            cJSON_Delete(o);
            return -1;
        }
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(o, "usage", usage_obj(rs, reqs, n));
    ds_json_print(o, out);
    cJSON_Delete(o);
    return 0;
}
