/* deepseek_v41 encoder: the 45 golden prompts of tests/data/encoding_golden.jsonl (SERVING.md §11.6),
 * the rule that escaped client text never tokenizes to a control id, the request errors of
 * §10.3/§11.2/§11.3, and the §11.4 JSON serializer (spec examples, and 3000 random doubles checked
 * against Python's repr, the serializer the reference used). */
#define _GNU_SOURCE
#include "check.h"
#include "tokenizer/chat.h"
#include "tokenizer/json_canon.h"
#include "tokenizer/release_tokenizer.h"
#include "base/fsutil.h"

#define GOLDEN "tests/data/encoding_golden.jsonl"   /* a copy of the specification's golden vectors */

static ds_tokenizer *g_tok;   /* the V4.1-style tokenizer (all §11.1 literals are added tokens) */
static ds_tokenizer *v41(void) {
    if (g_tok) return g_tok;
    const char *base = ds_tokenizer_default_base();
    CHECK(base != NULL, "no base tokenizer (scripts/install-deps.sh)");
    if (!base) return NULL;
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/v41", ds_test_tmpdir());
    ds_error err = {0};
    CHECK(ds_tokenizer_write_release(base, 129280, 128799, 129264, dir, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CHECK(ds_tokenizer_load(path, &g_tok, &err) == 0, "%s", err.msg);
    return g_tok;
}

/* Build the request of one golden line (numbers keep their spelling: ds_json_parse_exact). */
static void request_from_golden(const cJSON *g, ds_chat_request *r, cJSON **kwargs) {
    const cJSON *o = cJSON_GetObjectItem(g, "options");
    memset(r, 0, sizeof *r);
    r->messages = cJSON_GetObjectItem(g, "messages");
    r->tools = cJSON_GetObjectItem(g, "tools");
    r->reasoning_effort = cJSON_GetObjectItem(o, "reasoning_effort");
    r->response_format = cJSON_GetObjectItem(o, "response_format");
    r->allow_response_format = true;
    r->add_generation_prompt = true;
    r->continue_final_message = cJSON_IsTrue(cJSON_GetObjectItem(o, "continue_final_message"));
    const cJSON *et = cJSON_GetObjectItem(o, "enable_thinking");
    *kwargs = NULL;
    if (cJSON_IsBool(et)) {
        *kwargs = cJSON_CreateObject();
        cJSON_AddBoolToObject(*kwargs, "enable_thinking", cJSON_IsTrue(et));
        r->chat_template_kwargs = *kwargs;
    }
}

/* Every string inside a JSON value, escaped, must tokenize with no added-token id. */
static int check_strings(ds_tokenizer *t, const ds_escaper *e, const cJSON *v, int *bad) {
    int n = 0;
    if (cJSON_IsString(v)) {
        ds_strbuf b = {0};
        ds_escaper_apply(e, v->valuestring, strlen(v->valuestring), &b);
        ds_tokens ids = {0};
        ds_error err;
        ds_tokenizer_encode(t, b.s, b.n, true, &ids, &err);
        for (size_t i = 0; i < ids.n; i++) if (ds_tokenizer_is_added(t, ids.ids[i], NULL)) (*bad)++;
        ds_tokens_free(&ids);
        ds_strbuf_free(&b);
        return 1;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        n += check_strings(t, e, it, bad);
        /* tool-call arguments are JSON inside a string: check their strings too */
        if (it->string && !strcmp(it->string, "arguments") && cJSON_IsString(it)) {
            ds_error err;
            cJSON *a = ds_json_parse_exact(it->valuestring, strlen(it->valuestring), &err);
            if (a) n += check_strings(t, e, a, bad);
            cJSON_Delete(a);
        }
    }
    return n;
}

TEST(encoding_golden_prompts) {
    char *data;
    size_t len;
    ds_error err = {0};
    CHECK(ds_read_file(GOLDEN, &data, &len, &err) == 0, "cannot read %s: %s", GOLDEN, err.msg);
    if (!data) return;
    ds_tokenizer *t = v41();
    ds_escaper *esc = ds_escaper_new(t);
    int n = 0, ok = 0, strings = 0;
    char *save = NULL;
    for (char *line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *g = ds_json_parse_exact(line, strlen(line), &err);
        CHECK(g != NULL, "golden line %d: %s", n + 1, err.msg);
        if (!g) continue;
        const char *name = cJSON_GetObjectItem(g, "name")->valuestring;
        const char *want = cJSON_GetObjectItem(g, "prompt")->valuestring;
        const cJSON *o = cJSON_GetObjectItem(g, "options");
        ds_chat_request r;
        cJSON *kw;
        request_from_golden(g, &r, &kw);
        for (int with_tok = 0; with_tok < 2; with_tok++) {
            ds_chat_prompt p;
            int rc = ds_chat_render(with_tok ? t : NULL, &r, &p, &err);
            bool match = rc == 0 && !strcmp(p.text, want);
            if (!match) {
                size_t k = 0;
                while (rc == 0 && p.text[k] && p.text[k] == want[k]) k++;
                CHECK(0, "%s (tokenizer %d): %s; first difference at byte %zu: got '%.60s' want '%.60s'", name, with_tok,
                      rc ? err.msg : "mismatch", k, rc ? "" : p.text + k, want + k);
            } else {
                bool thinking = !strcmp(cJSON_GetObjectItem(o, "thinking_mode")->valuestring, "thinking");
                const cJSON *eb = cJSON_GetObjectItem(o, "effort_budget");
                CHECK(p.thinking == thinking && p.effort == (cJSON_IsNumber(eb) ? eb->valueint : 0), "%s: mode/effort", name);
                if (with_tok) ok++;
            }
            ds_chat_prompt_free(&p);
        }
        if (t) {
            /* the prompt's control ids are exactly its literal occurrences; escaped text adds none */
            ds_tokens ids = {0};
            ds_chat_prompt p;
            CHECK(ds_chat_encode(t, &r, &p, &ids, &err) == 0, "%s: %s", name, err.msg);
            int bad = 0;
            strings += check_strings(t, esc, r.messages, &bad) + check_strings(t, esc, r.tools, &bad);
            CHECK(bad == 0, "%s: %d control ids from escaped client text", name, bad);
            size_t dl;
            char *back = ds_tokenizer_decode(t, ids.ids, ids.n, false, &dl, &err);
            CHECK(back && !strcmp(back, want), "%s: ids do not decode to the prompt", name);
            free(back);
            int nctl = 0;
            for (size_t i = 0; i < ids.n; i++) nctl += ds_tokenizer_is_added(t, ids.ids[i], NULL);
            int nlit = 0;
            for (int a = 0; a < ds_tokenizer_added_count(t); a++) {
                const char *lit = ds_tokenizer_added_content(t, a, NULL, NULL);
                for (const char *q = strstr(want, lit); q; q = strstr(q + 1, lit)) nlit++;
            }
            CHECK(nctl == nlit, "%s: %d control ids for %d literal occurrences", name, nctl, nlit);
            ds_tokens_free(&ids);
            ds_chat_prompt_free(&p);
        }
        cJSON_Delete(kw);
        cJSON_Delete(g);
        n++;
    }
    CHECK(n == 45, "expected 45 golden prompts, read %d", n);
    printf("  %d/%d golden prompts byte-exact; %d client strings escaped and tokenized without control ids\n", ok, n, strings);
    ds_escaper_free(esc);
    free(data);
}

static int render_json(const char *req_json, bool default_thinking, ds_chat_prompt *p, ds_error *err) {
    cJSON *req = ds_json_parse_exact(req_json, strlen(req_json), err);
    if (!req) return -2;
    ds_chat_request r = {0};
    r.messages = cJSON_GetObjectItem(req, "messages");
    r.tools = cJSON_GetObjectItem(req, "tools");
    r.reasoning_effort = cJSON_GetObjectItem(req, "reasoning_effort");
    r.chat_template_kwargs = cJSON_GetObjectItem(req, "chat_template_kwargs");
    r.response_format = cJSON_GetObjectItem(req, "response_format");
    r.add_generation_prompt = !cJSON_IsFalse(cJSON_GetObjectItem(req, "add_generation_prompt"));
    r.continue_final_message = cJSON_IsTrue(cJSON_GetObjectItem(req, "continue_final_message"));
    r.default_thinking = default_thinking;
    int rc = ds_chat_render(NULL, &r, p, err);
    cJSON_Delete(req);
    return rc;
}

TEST(request_errors_are_400_class) {
    struct { const char *req, *code, *param, *msg; } cases[] = {
        {"{\"messages\":[]}", "invalid_messages", "messages", "non-empty"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "invalid_messages", "messages[0]", "wizard"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]}", "invalid_messages", "messages[0].content", "audio"},
        {"{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"image_url\"}]}]}", "invalid_messages", "messages[0].content", "image"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "invalid_messages", "messages[0].content", "required"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"tool\",\"tool_call_id\":\"c9\",\"content\":\"r\"}]}",
         "invalid_messages", "messages[1].tool_call_id", "c9"},
        {"{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
         "invalid_messages", "messages[0].tool_calls", "not a JSON object"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":0}", "invalid_value", "reasoning_effort", "1-100"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":101}", "invalid_value", "reasoning_effort", "1-100"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":true}", "invalid_value", "reasoning_effort", "string"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":50.5}", "invalid_value", "reasoning_effort", "50.5"},
        /* once undefined behaviour (a double far outside int cast to int; found by fuzz_http) */
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":6666666666666666666666666661}", "invalid_value", "reasoning_effort", "1-100"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":-1e300}", "invalid_value", "reasoning_effort", "1-100"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"extreme\"}", "invalid_value", "reasoning_effort", "extreme"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":false}}",
         "invalid_value", "reasoning_effort", "enable_thinking is false"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"temperature\":1}}", "invalid_value", "chat_template_kwargs", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]}", "invalid_value", "tools[0]", "A-Za-z0-9"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
         "invalid_value", "tools[1]", "duplicate"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}", "unsupported_parameter", "response_format", "json_object"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"continue_final_message\":true}", "invalid_messages", "continue_final_message", "assistant"},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(cases); i++) {
        ds_chat_prompt p;
        ds_error err = {0};
        int rc = render_json(cases[i].req, false, &p, &err);
        CHECK(rc == -1 && !strcmp(err.code, cases[i].code) && !strcmp(p.err_param, cases[i].param) && strstr(err.msg, cases[i].msg),
              "case %zu: rc=%d code=%s param=%s msg=%s", i, rc, err.code, p.err_param, err.msg);
        ds_chat_prompt_free(&p);
    }
}

TEST(generation_prompt_and_defaults) {
    ds_chat_prompt p;
    ds_error err = {0};
    CHECK(render_json("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"add_generation_prompt\":false}", false, &p, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(p.text, "<｜begin▁of▁sentence｜><｜User｜>Hi"), "'%s'", p.text);
    ds_chat_prompt_free(&p);
    /* a server that defaults to thinking: effort 75, prompt ends inside reasoning */
    CHECK(render_json("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", true, &p, &err) == 0, "%s", err.msg);
    CHECK(p.thinking && p.effort == 75 && p.ends_in_reasoning, "default thinking");
    ds_chat_prompt_free(&p);
    CHECK(render_json("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"reasoning_effort\":\"none\"}", true, &p, &err) == 0, "%s", err.msg);
    CHECK(!p.thinking && !p.ends_in_reasoning, "\"none\" overrides a thinking default");
    ds_chat_prompt_free(&p);
    CHECK(render_json("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"},{\"type\":\"input_text\",\"text\":\"?\"}]}]}", false, &p, &err) == 0, "%s", err.msg);
    CHECK(p.n_images == 1 && strstr(p.text, "<｜deepseek_image｜>\n\n?"), "image part: %s", p.text);
    ds_chat_prompt_free(&p);
}

TEST(json_serializer_spec_examples) {
    struct { const char *in, *out; } ex[] = {
        {"1.0", "1.0"}, {"2.50", "2.5"}, {"1e3", "1000.0"}, {"0.1", "0.1"}, {"-0.0", "-0.0"}, {"1e-7", "1e-07"},
        {"1.5e-5", "1.5e-05"}, {"1e16", "1e+16"}, {"-0", "0"}, {"12345678901234567890", "12345678901234567890"},
        {"0.0001", "0.0001"}, {"123456789012345.6", "123456789012345.6"}, {"1E+300", "1e+300"}, {"5e-324", "5e-324"},
        {"{\"b\":[1,{},[]],\"a\":\"x\\u0001\\u001f\\u2028/\\\"\"}", "{\"b\": [1, {}, []], \"a\": \"x\\u0001\\u001f\u2028/\\\"\"}"},
        {"[true,false,null,\"\\t\\b\\f\\r\\n\"]", "[true, false, null, \"\\t\\b\\f\\r\\n\"]"},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(ex); i++) {
        ds_error err = {0};
        cJSON *v = ds_json_parse_exact(ex[i].in, strlen(ex[i].in), &err);
        CHECK(v != NULL, "%s: %s", ex[i].in, err.msg);
        ds_strbuf b = {0};
        ds_json_write(&b, v, NULL);
        CHECK(b.s && !strcmp(b.s, ex[i].out), "%s -> '%s', want '%s'", ex[i].in, b.s, ex[i].out);
        ds_strbuf_free(&b);
        cJSON_Delete(v);
    }
    const char *bad[] = {"01", "1.", "[1,]", "{\"a\" 1}", "\"\\ud800\"", "tru", "1 2", "\"a\x01\""};
    for (size_t i = 0; i < DS_ARRAY_LEN(bad); i++) {
        ds_error err = {0};
        cJSON *v = ds_json_parse_exact(bad[i], strlen(bad[i]), &err);
        CHECK(v == NULL && !strcmp(err.code, "E_JSON") && strstr(err.msg, "byte"), "'%s' accepted", bad[i]);
        cJSON_Delete(v);
    }
}

TEST(doubles_match_python_repr) {
    /* 3000 random binary64 values (bit patterns over the whole exponent range) written by our
     * serializer; Python checks repr(float.fromhex(h)) equals each, and prints the mismatches. */
    char path[600];
    snprintf(path, sizeof path, "%s/doubles.txt", ds_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 3000; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double x;
        uint64_t bits = s;
        if (i % 3 == 0) bits = (bits & 0x800FFFFFFFFFFFFFull) | ((uint64_t)(1023 + (int)(s % 80) - 40) << 52);   /* near 1 */
        memcpy(&x, &bits, 8);
        if (x != x || x - x != 0) continue;   /* NaN and infinities are not JSON numbers */
        ds_strbuf b = {0};
        ds_json_write_double(&b, x);
        fprintf(f, "%a %s\n", x, b.s);
        ds_strbuf_free(&b);
    }
    fclose(f);
    char out[4096];
    int rc = ds_test_sh(out, sizeof out,
        "/usr/bin/python3 -c \"import sys\nbad=0\nfor l in open('%s'):\n h,o=l.split()\n r=repr(float.fromhex(h))\n"
        " if r!=o:\n  bad+=1\n  print(h,o,r) if bad<5 else None\nprint('mismatches',bad)\nsys.exit(1 if bad else 0)\"", path);
    CHECK(rc == 0, "python repr disagrees: %s", out);
}

CLEANUP(free_shared_tokenizer) { ds_tokenizer_free(g_tok); g_tok = NULL; }

RUN_ALL()
