/* The deepseek_v41 prompt renderer (SERVING.md §11.2–§11.4); see chat.h for the interface.
 *
 * Structure, in the spec's order: (1) resolve the mode and effort; (2) validate each message and
 * turn it into an item with all client text already escaped — developer becomes user, a run of
 * user/tool messages becomes one user turn whose tool results are permuted into the call order of
 * the latest assistant message with tool calls, and an empty system item hosts tools and
 * response_format when message 0 is not a system message; (3) render the items with the
 * generation-prefix and reasoning rules.  Every string constant here is an interface constant
 * copied from the spec byte for byte. */
#define _GNU_SOURCE
#include "tokenizer/chat.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define IMAGE "<｜deepseek_image｜>"

static const char TOOLS_HEAD[] =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";
static const char TOOLS_TAIL[] =
    "\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
static const char RF_HEAD[] = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

enum { IT_SYS0, IT_SYS, IT_USER, IT_ASSIST, IT_REMIND };

typedef struct part {
    char *text;
    int order;      /* tool result: index of its call in the latest assistant's calls; -1 for text */
} part;

typedef struct item {
    int kind;
    char *text;           /* SYS0 / SYS / REMIND text; ASSIST content */
    part *parts;          /* USER */
    int nparts;
    char *reasoning;      /* ASSIST (escaped) or NULL */
    char *dsml;           /* ASSIST tool-call block or NULL */
} item;

typedef struct rctx {
    ds_error *err;
    char *param;
    size_t param_len;
    const ds_escaper *esc;
    int n_images;
} rctx;

static int rfail(rctx *c, const char *code, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int rfail(rctx *c, const char *code, const char *param, const char *fmt, ...) {
    char m[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (c->param) snprintf(c->param, c->param_len, "%s", param ? param : "");
    return ds_fail(c->err, code, "%s", m);
}

static char *esc_dup(rctx *c, const char *s) {
    ds_strbuf b = {0};
    ds_escaper_apply(c->esc, s, strlen(s), &b);
    return ds_strbuf_take(&b, NULL);
}

/* ---- mode and effort (§11.2 Modes, §11.3) --------------------------------------------------- */

static int parse_effort(rctx *c, const cJSON *e, bool *present, bool *none, int *n) {
    *present = false; *none = false; *n = 0;
    if (!e || cJSON_IsNull(e)) return 0;
    *present = true;
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring;
        static const struct { const char *name; int n; } names[] = {
            {"low", 50}, {"minimal", 50}, {"high", 75}, {"medium", 75}, {"xhigh", 75}, {"max", 100},
        };
        if (!strcmp(s, "none")) { *none = true; return 0; }
        for (size_t i = 0; i < DS_ARRAY_LEN(names); i++)
            if (!strcmp(s, names[i].name)) { *n = names[i].n; return 0; }
        size_t len = strlen(s);
        if (len >= 1 && len <= 3 && strspn(s, "0123456789") == len && s[0] != '0') {
            int v = atoi(s);
            if (v >= 1 && v <= 100) { *n = v; return 0; }
        }
        return rfail(c, "invalid_value", "reasoning_effort",
                     "reasoning_effort \"%.60s\" is not one of none, minimal, low, medium, high, xhigh, max or an integer 1-100", s);
    }
    if (cJSON_IsNumber(e)) {
        double v = e->valuedouble;
        /* range first: casting an out-of-range double to int is undefined behaviour */
        bool in_range = v >= 1 && v <= 100;
        bool integral = in_range && v == (double)(int)v && !(e->valuestring && strpbrk(e->valuestring, ".eE"));
        if (integral) { *n = (int)v; return 0; }
        return rfail(c, "invalid_value", "reasoning_effort", "reasoning_effort %g is not an integer in 1-100", v);
    }
    return rfail(c, "invalid_value", "reasoning_effort", "reasoning_effort must be a string or an integer 1-100");
}

static int resolve_mode(rctx *c, const ds_chat_request *r, bool *thinking, int *effort) {
    int kw = -1;   /* -1 absent, 0 false, 1 true */
    if (r->chat_template_kwargs && !cJSON_IsNull(r->chat_template_kwargs)) {
        if (!cJSON_IsObject(r->chat_template_kwargs))
            return rfail(c, "invalid_type", "chat_template_kwargs", "chat_template_kwargs must be an object");
        const cJSON *it;
        cJSON_ArrayForEach(it, r->chat_template_kwargs) {
            if (strcmp(it->string, "enable_thinking") && strcmp(it->string, "thinking"))
                return rfail(c, "invalid_value", "chat_template_kwargs",
                             "chat_template_kwargs key \"%.60s\" is not supported (only enable_thinking, thinking)", it->string);
            if (!cJSON_IsBool(it))
                return rfail(c, "invalid_type", "chat_template_kwargs", "chat_template_kwargs.%s must be a boolean", it->string);
            int v = cJSON_IsTrue(it);
            if (kw >= 0 && kw != v)
                return rfail(c, "invalid_value", "chat_template_kwargs", "chat_template_kwargs.enable_thinking and .thinking disagree");
            kw = v;
        }
    }
    bool present, none;
    int n;
    if (parse_effort(c, r->reasoning_effort, &present, &none, &n) < 0) return -1;
    bool level = present && !none;
    if (kw == 0 && level)
        return rfail(c, "invalid_value", "reasoning_effort",
                     "reasoning_effort selects thinking mode but chat_template_kwargs.enable_thinking is false");
    if (kw == 1 && none)
        return rfail(c, "invalid_value", "reasoning_effort",
                     "reasoning_effort \"none\" selects chat mode but chat_template_kwargs.enable_thinking is true");
    *thinking = level || kw == 1 || (kw < 0 && !none && r->default_thinking);
    *effort = *thinking ? (level ? n : 75) : 0;
    return 0;
}

/* ---- message validation --------------------------------------------------------------------- */

/* Text of a content field: a string, or parts joined by "\n\n" (images become the placeholder). */
static int content_text(rctx *c, const cJSON *content, int mi, bool required, bool allow_images, char **out) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", mi);
    *out = NULL;
    if (!content || cJSON_IsNull(content)) {
        if (required) return rfail(c, "invalid_messages", param, "messages[%d]: content is required", mi);
        *out = ds_xstrdup("");
        return 0;
    }
    if (cJSON_IsString(content)) { *out = esc_dup(c, content->valuestring); return 0; }
    if (!cJSON_IsArray(content))
        return rfail(c, "invalid_messages", param, "messages[%d]: content must be a string or a list of parts", mi);
    ds_strbuf b = {0};
    ds_strbuf_append(&b, "", 0);
    int k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, content) {
        const char *type = cJSON_IsObject(p) ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "type")) : NULL;
        if (k++) ds_strbuf_puts(&b, "\n\n");
        if (type && (!strcmp(type, "text") || !strcmp(type, "input_text") || !strcmp(type, "output_text"))) {
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
            if (!t) { ds_strbuf_free(&b); return rfail(c, "invalid_messages", param, "messages[%d]: part %d of type %s has no string \"text\"", mi, k - 1, type); }
            ds_escaper_apply(c->esc, t, strlen(t), &b);
        } else if (type && (!strcmp(type, "image_url") || !strcmp(type, "input_image"))) {
            if (!allow_images) { ds_strbuf_free(&b); return rfail(c, "invalid_messages", param, "messages[%d]: image parts are not allowed in this role", mi); }
            ds_strbuf_puts(&b, IMAGE);
            c->n_images++;
        } else {
            ds_strbuf_free(&b);
            return rfail(c, "invalid_messages", param, "messages[%d]: part %d has unsupported type \"%.40s\" (text, input_text, output_text, image_url, input_image)",
                         mi, k - 1, type ? type : "(missing)");
        }
    }
    *out = ds_strbuf_take(&b, NULL);
    return 0;
}

/* The DSML block of an assistant message's tool calls (§11.4). */
static int render_calls(rctx *c, const cJSON *calls, int mi, char **out, char ***ids, int *nids) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", mi);
    *out = NULL;
    if (!cJSON_IsArray(calls)) return rfail(c, "invalid_messages", param, "messages[%d]: tool_calls must be a list", mi);
    int n = cJSON_GetArraySize(calls);
    if (n == 0) return 0;
    *ids = ds_xcalloc((size_t)n, sizeof **ids);
    *nids = n;
    ds_strbuf b = {0};
    ds_strbuf_puts(&b, "<｜DSML｜ calls>\n");
    int k = 0;
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "type"));
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(call, "id"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsObject(call) || !cJSON_IsObject(fn) || !name || !*name || (type && strcmp(type, "function"))) {
            ds_strbuf_free(&b);
            return rfail(c, "invalid_messages", param, "messages[%d].tool_calls[%d]: expected {\"type\":\"function\",\"function\":{\"name\",\"arguments\"}}", mi, k);
        }
        if (!cJSON_IsString(args)) {
            ds_strbuf_free(&b);
            return rfail(c, "invalid_messages", param, "messages[%d].tool_calls[%d]: function.arguments must be a JSON string", mi, k);
        }
        ds_error perr = {0};
        cJSON *obj = ds_json_parse_exact(args->valuestring, strlen(args->valuestring), &perr);
        if (!obj || !cJSON_IsObject(obj)) {
            cJSON_Delete(obj);
            ds_strbuf_free(&b);
            return rfail(c, "invalid_messages", param, "messages[%d].tool_calls[%d]: arguments is not a JSON object%s%s", mi, k,
                         obj ? "" : ": ", obj ? "" : perr.msg);
        }
        (*ids)[k] = id ? ds_xstrdup(id) : NULL;
        if (k) ds_strbuf_putc(&b, '\n');
        ds_strbuf_puts(&b, "<｜DSML｜ invoke name=\"");
        ds_escaper_apply(c->esc, name, strlen(name), &b);
        ds_strbuf_puts(&b, "\">\n");
        const cJSON *a;
        int j = 0;
        cJSON_ArrayForEach(a, obj) {
            if (j++) ds_strbuf_putc(&b, '\n');
            ds_strbuf_puts(&b, "<｜DSML｜ parameter name=\"");
            ds_escaper_apply(c->esc, a->string, strlen(a->string), &b);
            bool str = cJSON_IsString(a);
            ds_strbuf_puts(&b, str ? "\" string=\"true\">" : "\" string=\"false\">");
            if (str) ds_escaper_apply(c->esc, a->valuestring, strlen(a->valuestring), &b);
            else ds_json_write(&b, a, c->esc);
            ds_strbuf_puts(&b, "</｜DSML｜ parameter>");
        }
        ds_strbuf_puts(&b, "\n</｜DSML｜ invoke>");
        cJSON_Delete(obj);
        k++;
    }
    ds_strbuf_puts(&b, "\n</｜DSML｜ calls>");
    *out = ds_strbuf_take(&b, NULL);
    return 0;
}

static bool valid_tool_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
            return false;
    }
    return true;
}

/* The tools section (§11.4): fixed text around one canonical tool object per line. */
static int render_tools(rctx *c, const cJSON *tools, ds_strbuf *b) {
    ds_strbuf_puts(b, TOOLS_HEAD);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char param[48];
        snprintf(param, sizeof param, "tools[%d]", i);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "type"));
        if (!cJSON_IsObject(t) || !type || strcmp(type, "function"))
            return rfail(c, "invalid_value", param, "tools[%d]: type must be \"function\"", i);
        if (!cJSON_IsObject(fn)) return rfail(c, "invalid_value", param, "tools[%d]: missing \"function\" object", i);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        if (!name || !valid_tool_name(name))
            return rfail(c, "invalid_value", param, "tools[%d]: function.name must be 1-64 characters of [A-Za-z0-9_.-]", i);
        const cJSON *t2;
        int j = 0;
        cJSON_ArrayForEach(t2, tools) {
            if (j++ >= i) break;
            const char *n2 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t2, "function"), "name"));
            if (n2 && !strcmp(n2, name)) return rfail(c, "invalid_value", param, "tools[%d]: duplicate function name \"%s\"", i, name);
        }
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (desc && !cJSON_IsNull(desc) && !cJSON_IsString(desc))
            return rfail(c, "invalid_type", param, "tools[%d]: function.description must be a string", i);
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params))
            return rfail(c, "invalid_type", param, "tools[%d]: function.parameters must be an object", i);
        if (i) ds_strbuf_putc(b, '\n');
        ds_strbuf_puts(b, "{\"name\": ");
        ds_json_write(b, cJSON_GetObjectItemCaseSensitive(fn, "name"), c->esc);
        ds_strbuf_puts(b, ", \"description\": ");
        if (cJSON_IsString(desc)) ds_json_write(b, desc, c->esc);
        else ds_strbuf_puts(b, "\"\"");
        ds_strbuf_puts(b, ", \"parameters\": ");
        if (cJSON_IsObject(params)) ds_json_write(b, params, c->esc);
        else ds_strbuf_puts(b, "{}");
        ds_strbuf_putc(b, '}');
        i++;
    }
    ds_strbuf_puts(b, TOOLS_TAIL);
    return 0;
}

static void free_items(item *items, int n) {
    for (int i = 0; i < n; i++) {
        free(items[i].text);
        free(items[i].reasoning);
        free(items[i].dsml);
        for (int j = 0; j < items[i].nparts; j++) free(items[i].parts[j].text);
        free(items[i].parts);
    }
    free(items);
}

static void add_part(item *it, char *text, int order) {
    it->parts = ds_xrealloc(it->parts, (size_t)(it->nparts + 1) * sizeof *it->parts);
    it->parts[it->nparts++] = (part){text, order};
}

/* Tool results take the slots they occupy, in call order; text parts stay put (§11.2 step 5). */
static void order_tool_results(item *it) {
    int n = 0;
    part *tools = ds_xmalloc((size_t)(it->nparts ? it->nparts : 1) * sizeof *tools);
    for (int i = 0; i < it->nparts; i++) if (it->parts[i].order >= 0) tools[n++] = it->parts[i];
    for (int i = 1; i < n; i++) {             /* stable insertion sort by call order */
        part p = tools[i];
        int j = i - 1;
        while (j >= 0 && tools[j].order > p.order) { tools[j + 1] = tools[j]; j--; }
        tools[j + 1] = p;
    }
    for (int i = 0, k = 0; i < it->nparts; i++) if (it->parts[i].order >= 0) it->parts[i] = tools[k++];
    free(tools);
}

int ds_chat_render(const ds_tokenizer *tok, const ds_chat_request *req, ds_chat_prompt *out, ds_error *err) {
    memset(out, 0, sizeof *out);
    ds_escaper *esc = ds_escaper_new(tok);
    rctx c = {err, out->err_param, sizeof out->err_param, esc, 0};
    item *items = NULL;
    int nitems = 0, rc = -1;
    char **call_ids = NULL;
    int ncall_ids = 0;
    ds_strbuf b = {0};

    bool thinking = false;
    int effort = 0;
    if (resolve_mode(&c, req, &thinking, &effort) < 0) goto done;
    const cJSON *msgs = req->messages;
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) < 1) {
        rfail(&c, "invalid_messages", "messages", "messages must be a non-empty list");
        goto done;
    }
    const cJSON *tools = req->tools && !cJSON_IsNull(req->tools) ? req->tools : NULL;
    if (tools && !cJSON_IsArray(tools)) { rfail(&c, "invalid_type", "tools", "tools must be a list"); goto done; }
    if (tools && cJSON_GetArraySize(tools) == 0) tools = NULL;
    const cJSON *rf = req->response_format && !cJSON_IsNull(req->response_format) ? req->response_format : NULL;
    if (rf) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rf, "type"));
        if (!cJSON_IsObject(rf) || !type) { rfail(&c, "invalid_type", "response_format", "response_format must be an object with a string \"type\""); goto done; }
        if (!strcmp(type, "text")) rf = NULL;
        else if (!req->allow_response_format) {
            rfail(&c, "unsupported_parameter", "response_format", "response_format type \"%.40s\" is not supported (text, json_object or json_schema)", type);
            goto done;
        }
    }
    int nmsg = cJSON_GetArraySize(msgs);
    if (req->continue_final_message) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, nmsg - 1), "role"));
        if (!role || strcmp(role, "assistant")) {
            rfail(&c, "invalid_messages", "continue_final_message", "continue_final_message requires the last message to be an assistant message");
            goto done;
        }
    }

    /* (2) messages → items */
    items = ds_xcalloc((size_t)nmsg + 1, sizeof *items);
    const cJSON *m0 = cJSON_GetArrayItem(msgs, 0);
    const char *role0 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m0, "role"));
    if ((tools || rf) && !(role0 && !strcmp(role0, "system"))) items[nitems++] = (item){.kind = IT_SYS0, .text = ds_xstrdup("")};
    int mi = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", mi);
        const char *role = cJSON_IsObject(m) ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role")) : NULL;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!role) { rfail(&c, "invalid_messages", param, "messages[%d]: missing \"role\"", mi); goto done; }
        if (!strcmp(role, "system")) {
            item it = {.kind = mi == 0 ? IT_SYS0 : IT_SYS};
            if (content_text(&c, content, mi, true, false, &it.text) < 0) goto done;
            items[nitems++] = it;
        } else if (!strcmp(role, "latest_reminder")) {
            item it = {.kind = IT_REMIND};
            if (content_text(&c, content, mi, true, false, &it.text) < 0) goto done;
            items[nitems++] = it;
        } else if (!strcmp(role, "user") || !strcmp(role, "developer") || !strcmp(role, "tool")) {
            bool is_tool = !strcmp(role, "tool");
            if (!nitems || items[nitems - 1].kind != IT_USER) items[nitems++] = (item){.kind = IT_USER};
            char *text;
            if (content_text(&c, content, mi, true, true, &text) < 0) goto done;
            int order = -1;
            if (is_tool) {
                const char *tid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "tool_call_id"));
                for (int k = 0; tid && k < ncall_ids; k++) if (call_ids[k] && !strcmp(call_ids[k], tid)) { order = k; break; }
                if (order < 0) {
                    free(text);
                    char p2[64];
                    snprintf(p2, sizeof p2, "messages[%d].tool_call_id", mi);
                    rfail(&c, "invalid_messages", p2, "messages[%d]: tool_call_id %s%.64s%s matches no call of the latest assistant message with tool calls",
                          mi, tid ? "\"" : "", tid ? tid : "(missing)", tid ? "\"" : "");
                    goto done;
                }
                size_t tl = strlen(text);
                char *wrapped = ds_xmalloc(tl + 32);
                snprintf(wrapped, tl + 32, "<tool_result>%s</tool_result>", text);
                free(text);
                text = wrapped;
            }
            add_part(&items[nitems - 1], text, order);
        } else if (!strcmp(role, "assistant")) {
            item it = {.kind = IT_ASSIST};
            if (content_text(&c, content, mi, false, false, &it.text) < 0) goto done;
            items[nitems++] = it;
            const cJSON *rc_ = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
            if (rc_ && !cJSON_IsNull(rc_)) {
                if (!cJSON_IsString(rc_)) { rfail(&c, "invalid_messages", param, "messages[%d]: reasoning_content must be a string", mi); goto done; }
                items[nitems - 1].reasoning = esc_dup(&c, rc_->valuestring);
            }
            const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
            if (calls && !cJSON_IsNull(calls)) {
                char **ids = NULL;
                int nids = 0;
                if (render_calls(&c, calls, mi, &items[nitems - 1].dsml, &ids, &nids) < 0) {
                    for (int k = 0; k < nids; k++) free(ids[k]);
                    free(ids);
                    goto done;
                }
                if (nids) {
                    for (int k = 0; k < ncall_ids; k++) free(call_ids[k]);
                    free(call_ids);
                    call_ids = ids;
                    ncall_ids = nids;
                }
            }
        } else {
            rfail(&c, "invalid_messages", param, "messages[%d]: unknown role \"%.40s\" (system, user, assistant, tool, developer, latest_reminder)", mi, role);
            goto done;
        }
        mi++;
    }
    for (int i = 0; i < nitems; i++) if (items[i].kind == IT_USER) order_tool_results(&items[i]);

    /* (3) rendering */
    int last_user = -1;
    for (int i = 0; i < nitems; i++) if (items[i].kind == IT_USER || items[i].kind == IT_SYS) last_user = i;
    bool with_tools = tools != NULL;
    ds_strbuf_puts(&b, BOS);
    if (items[0].kind == IT_SYS0 || thinking) {
        ds_strbuf_puts(&b, "<｜System｜>");
        if (thinking)
            ds_strbuf_printf(&b, "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n", effort);
    }
    for (int i = 0; i < nitems; i++) {
        item *it = &items[i];
        bool last = i == nitems - 1;
        switch (it->kind) {
        case IT_SYS0:
            ds_strbuf_puts(&b, it->text);
            if (tools) { ds_strbuf_puts(&b, "\n\n"); if (render_tools(&c, tools, &b) < 0) goto done; }
            if (rf) { ds_strbuf_puts(&b, "\n\n"); ds_strbuf_puts(&b, RF_HEAD); ds_json_write(&b, rf, esc); }
            break;
        case IT_SYS:
            ds_strbuf_puts(&b, "<｜System｜>");
            ds_strbuf_puts(&b, it->text);
            break;
        case IT_REMIND:
            ds_strbuf_puts(&b, "<｜latest_reminder｜>");
            ds_strbuf_puts(&b, it->text);
            break;
        case IT_USER:
            ds_strbuf_puts(&b, "<｜User｜>");
            for (int j = 0; j < it->nparts; j++) {
                if (j) ds_strbuf_puts(&b, "\n\n");
                ds_strbuf_puts(&b, it->parts[j].text);
            }
            break;
        case IT_ASSIST: {
            bool keep_reasoning = thinking && (with_tools || i > last_user);
            if (keep_reasoning) {
                if (it->reasoning) ds_strbuf_puts(&b, it->reasoning);
                ds_strbuf_puts(&b, "</think>");
            }
            ds_strbuf_puts(&b, it->text);
            if (it->dsml) { ds_strbuf_puts(&b, "\n\n"); ds_strbuf_puts(&b, it->dsml); }
            if (!(last && req->continue_final_message)) ds_strbuf_puts(&b, EOS);
            break;
        }
        }
        /* generation prefix after a user turn or a mid-conversation system message */
        if (it->kind == IT_USER || it->kind == IT_SYS) {
            int nk = last ? -1 : items[i + 1].kind;
            bool want = last ? req->add_generation_prompt : (nk == IT_ASSIST || nk == IT_REMIND);
            if (want) {
                bool open = thinking && (with_tools || i == last_user);
                ds_strbuf_puts(&b, open ? "<｜Assistant｜><think>" : "<｜Assistant｜></think>");
            }
        }
    }
    out->thinking = thinking;
    out->effort = effort;
    out->n_images = c.n_images;
    out->text = ds_strbuf_take(&b, &out->len);
    out->ends_in_reasoning = out->len >= 7 && !memcmp(out->text + out->len - 7, "<think>", 7);
    rc = 0;
done:
    ds_strbuf_free(&b);
    if (items) free_items(items, nitems);
    for (int k = 0; k < ncall_ids; k++) free(call_ids[k]);
    free(call_ids);
    ds_escaper_free(esc);
    return rc;
}

int ds_chat_encode(const ds_tokenizer *tok, const ds_chat_request *req, ds_chat_prompt *out,
                   ds_tokens *ids, ds_error *err) {
    if (ds_chat_render(tok, req, out, err) < 0) return -1;
    out->len = ds_json_nul_restore(out->text, out->len); /* client text may hold U+0000 */
    if (ds_tokenizer_encode(tok, out->text, out->len, true, ids, err) < 0) {
        ds_error_prefix(err, "tokenizing the rendered prompt");
        return -1;
    }
    return 0;
}

void ds_chat_prompt_free(ds_chat_prompt *p) {
    free(p->text);
    p->text = NULL;
    p->len = 0;
}
