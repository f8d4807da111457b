/* The small endpoints of SERVING.md §10.2: health, models, version, metrics, server_info,
 * tokenize and detokenize.
 *
 * Why apart from generation: none of these touches the engine's queue, and all of them answer
 * from one parsed body in one reply, so they share nothing with the waiting and streaming
 * machinery of http_generate.c.  Token-id arrays are walked once (ds_api_int_array) and text
 * goes out through the NUL-safe JSON printer, so a 5M-id body costs linear time and a decoded
 * U+0000 never truncates a reply. */
#define _GNU_SOURCE
#include "server/http_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum MHD_Result ds_http_health(struct MHD_Connection *c, ds_server *s) {
    char b[256];
    if (atomic_load(&s->draining)) return ds_http_send_json(c, s, "/health", 503, "{\"status\":\"shutting_down\"}", NULL);
    if (atomic_load(&s->ready)) {
        snprintf(b, sizeof b, "{\"status\":\"ok\",\"model\":\"%s\",\"instance_id\":\"%s\"}", s->cfg.names[0], s->instance);
        return ds_http_send_json(c, s, "/health", 200, b, NULL);
    }
    pthread_mutex_lock(&s->mu);
    snprintf(b, sizeof b, "{\"status\":\"starting\",\"phase\":\"%s\"}", s->phase);
    pthread_mutex_unlock(&s->mu);
    return ds_http_send_json(c, s, "/health", 503, b, NULL);
}

static cJSON *model_card(ds_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->cfg.names[0]);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "v41");
    cJSON_AddStringToObject(m, "root", s->cfg.root ? s->cfg.root : "");
    cJSON_AddNumberToObject(m, "max_model_len", (double)s->cfg.max_model_len);
    return m;
}

/* GET /v1/models, or GET /v1/models/{id} when one_id is given (any served name or alias). */
enum MHD_Result ds_http_models(struct MHD_Connection *c, ds_server *s, const char *one_id) {
    if (one_id) {
        for (int i = 0; i < s->cfg.n_names; i++)
            if (!strcmp(one_id, s->cfg.names[i])) return ds_http_send_cjson(c, s, "/v1/models", 200, model_card(s));
        ds_api_error err;
        ds_api_fail(&err, 404, "not_found_error", "model_not_found", "model", "The model '%s' does not exist; this server serves '%s'",
                    one_id, s->cfg.names[0]);
        return ds_http_send_error(c, s, "/v1/models", &err, NULL);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_card(s));
    return ds_http_send_cjson(c, s, "/v1/models", 200, o);
}

enum MHD_Result ds_http_version(struct MHD_Connection *c, ds_server *s) {
    return ds_http_send_json(c, s, "/version", 200, "{\"version\":\"" DS_SERVER_VERSION "\"}", NULL);
}

enum MHD_Result ds_http_metrics(struct MHD_Connection *c, ds_server *s) {
    ds_metrics_gauges g;
    memset(&g, 0, sizeof g);
    ds_engine *e = __atomic_load_n(&s->e, __ATOMIC_ACQUIRE);
    if (e) ds_engine_gauges(e, &g);
    g.ready = atomic_load(&s->ready) && !atomic_load(&s->draining);
    ds_tbuf b = {0};
    ds_metrics_render(s->m, &g, &b);
    enum MHD_Result rc = ds_http_send_text(c, s, "/metrics", 200, "text/plain; version=0.0.4", b.s, b.n, NULL, NULL);
    ds_tbuf_free(&b);
    return rc;
}

enum MHD_Result ds_http_server_info(struct MHD_Connection *c, ds_server *s) {
    pthread_mutex_lock(&s->mu);
    cJSON *info = cJSON_Parse(s->cfg.server_info_json ? s->cfg.server_info_json : "{}");
    pthread_mutex_unlock(&s->mu);
    if (!info) info = cJSON_CreateObject();
    cJSON_DeleteItemFromObjectCaseSensitive(info, "instance_id");
    cJSON_AddStringToObject(info, "instance_id", s->instance);
    cJSON_AddBoolToObject(info, "ready", atomic_load(&s->ready));
    return ds_http_send_cjson(c, s, "/server_info", 200, info);
}

enum MHD_Result ds_http_tokenize(struct MHD_Connection *c, ds_server *s, const char *body, size_t len) {
    ds_api_error err = {0};
    cJSON *b = ds_http_parse_object_body(body, len, NULL, &err);
    enum MHD_Result rc;
    ds_tokens toks = {0};
    char *text = NULL;
    if (!b) goto fail;
    if (ds_api_check_model(b, false, &s->lim, &err)) goto fail;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt");
    if (cJSON_IsNull(p)) p = NULL;
    if (p && cJSON_GetObjectItemCaseSensitive(b, "messages")) {   /* which one to count is the caller's call */
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_value", "prompt", "give 'prompt' or 'messages', not both");
        goto fail;
    }
    if (p && !cJSON_IsString(p)) {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_type", "prompt", "'prompt' must be a string");
        goto fail;
    }
    if (p) {
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(b, "add_special_tokens");
        bool add = !as || !cJSON_IsFalse(as);
        if (ds_api_tokenize_completion(s->tok, p->valuestring, add, &toks, &err)) goto fail;
        text = ds_xstrdup(p->valuestring);
    } else if (cJSON_GetObjectItemCaseSensitive(b, "messages")) {
        bool thinking, required;
        char *named = NULL;   /* a named tool_choice narrows the tools as the generation does (same count) */
        int bad = ds_api_tool_choice(b, &required, &named, &err);
        free(named);
        if (bad || ds_api_encode_chat(s->tok, b, &s->lim, &toks, &text, &thinking, &err)) goto fail;
    } else {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_value", "prompt", "'prompt' (a string) or 'messages' is required");
        goto fail;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)toks.n);
    cJSON_AddNumberToObject(o, "max_model_len", (double)s->cfg.max_model_len);
    cJSON *ta = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < toks.n; i++) cJSON_AddItemToArray(ta, cJSON_CreateNumber(toks.ids[i]));
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(b, "return_text");
    if (rt && cJSON_IsTrue(rt) && text) { /* the parser's NUL marker back to U+0000, printed as \u0000 */
        size_t tlen = ds_json_nul_restore(text, strlen(text));
        cJSON_AddItemToObject(o, "text", ds_json_text(text, tlen));
    } else if (rt && cJSON_IsTrue(rt)) {
        cJSON_AddStringToObject(o, "text", "");
    }
    rc = ds_http_send_cjson(c, s, "/tokenize", 200, o);
    goto done;
fail:
    rc = ds_http_send_error(c, s, "/tokenize", &err, NULL);
done:
    free(text);
    ds_tokens_free(&toks);
    cJSON_Delete(b);
    return rc;
}

enum MHD_Result ds_http_detokenize(struct MHD_Connection *c, ds_server *s, const char *body, size_t len) {
    ds_api_error err = {0};
    ds_json_capture cap = {.key = "tokens"}; /* ids straight to int32: no node per id */
    cJSON *b = ds_http_parse_object_body(body, len, &cap, &err);
    enum MHD_Result rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!b) goto fail;
    if (ds_api_check_model(b, false, &s->lim, &err)) goto fail;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "tokens");
    if (!t || !cJSON_IsArray(t)) {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_type", "tokens", "'tokens' must be a list of token ids");
        goto fail;
    }
    if (cap.captured) {
        ids = cap.ids, n = cap.n;
        cap.ids = NULL;
        if (ds_api_check_ids(ids, n, 0, s->lim.vocab, "tokens", &err)) goto fail;
    } else if (ds_api_int_array(t, 0, s->lim.vocab, "tokens", &ids, &n, &err)) {
        goto fail;
    }
    cJSON_Delete(b); /* the tree of a large body is most of the memory: drop it before decoding */
    b = NULL;
    if (ds_http_client_gone(ds_http_conn_fd(c))) { /* nobody is waiting: skip the decode */
        free(ids);
        return MHD_NO;
    }
    ds_error de = {0};
    size_t tlen = 0;
    char *text = ds_tokenizer_decode(s->tok, ids, n, false, &tlen, &de);
    if (!text) {
        ds_api_fail(&err, 400, "invalid_request_error", "invalid_value", "tokens", "%s", de.msg);
        goto fail;
    }
    ds_strbuf js = {0}; /* written directly: length-aware (NUL bytes become \u0000), one pass over the text */
    ds_strbuf_puts(&js, "{\"prompt\":");
    ds_json_write_string(&js, text, tlen);
    ds_strbuf_putc(&js, '}');
    free(text);
    rc = ds_http_send_text(c, s, "/detokenize", 200, "application/json", js.s, js.n, NULL, NULL);
    ds_strbuf_free(&js);
    goto done;
fail:
    rc = ds_http_send_error(c, s, "/detokenize", &err, NULL);
done:
    free(ids);
    free(cap.ids);
    cJSON_Delete(b);
    return rc;
}
