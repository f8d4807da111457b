/* dsflash tokenize: text (or a chat request) in, token ids out.
 *
 * Why it exists: the same tokenizer and chat encoder the server uses, reachable without a server,
 * for checking prompts, counting tokens and comparing against other tokenizers byte for byte.
 * Options are long and matched exactly (TOOLS.md §0); exit status 0 ok, 1 bad input content
 * (invalid UTF-8, a chat request the encoder rejects), 2 usage, 3 I/O error, 5 input missing. */
#define _GNU_SOURCE
#include "cli/commands.h"
#include "base/flags.h"
#include "base/common.h"
#include "base/fsutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/chat.h"
#include "tokenizer/json_canon.h"
#include "tokenizer/release_tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZE_USAGE \
    "usage: dsflash tokenize (--tokenizer FILE | --model DIR) [--text STRING | --file FILE | --chat FILE.json | --lines FILE]\n" \
    "                        [--no-special] [--json] [--print-prompt] [--time]\n" \
    "  Text comes from --text, --file or standard input.  Ids are printed space-separated on one line.\n" \
    "       dsflash tokenize --write-release-tokenizer DIR --vocab-size N --noise-id N --image-id N [--base FILE]\n" \
    "  writes a V4.1-style tokenizer.json + tokenizer_config.json into DIR (what mkmodel does)\n"

static ds_flag k_flags[] = {
    {.name = "--tokenizer", .type = DS_FLAG_STRING, .help = "tokenizer.json to encode with"},
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (its tokenizer.json)"},
    {.name = "--text", .type = DS_FLAG_STRING, .help = "the text to encode"},
    {.name = "--file", .type = DS_FLAG_STRING, .help = "read the text from FILE"},
    {.name = "--chat", .type = DS_FLAG_STRING, .help = "render a messages array (or an object with messages, tools, reasoning_effort, "
                                                       "chat_template_kwargs, response_format, add_generation_prompt, continue_final_message) "
                                                       "through the deepseek_v41 encoder"},
    {.name = "--lines", .type = DS_FLAG_STRING, .help = "batch mode: each line of FILE is one JSON string; prints one line of ids per input"},
    {.name = "--no-special", .type = DS_FLAG_SWITCH, .help = "do not recognise added-token literals in the text"},
    {.name = "--json", .type = DS_FLAG_SWITCH, .help = "print {\"count\":N,\"tokens\":[...]} instead"},
    {.name = "--print-prompt", .type = DS_FLAG_SWITCH, .help = "with --chat: print the rendered prompt text instead of ids"},
    {.name = "--time", .type = DS_FLAG_SWITCH, .help = "report encode time and throughput on standard error"},
};

static ds_flag k_release_flags[] = {
    {.name = "--write-release-tokenizer", .type = DS_FLAG_STRING, .help = "directory to write tokenizer.json + tokenizer_config.json into"},
    {.name = "--vocab-size", .type = DS_FLAG_INT, .lo = 0, .hi = 16777216, .help = "ids in the release vocabulary (required)"},
    {.name = "--noise-id", .type = DS_FLAG_INT, .lo = 0, .hi = 16777216, .help = "id of the DSpark noise token (required)"},
    {.name = "--image-id", .type = DS_FLAG_INT, .lo = 0, .hi = 16777216, .help = "id of the image placeholder token (required)"},
    {.name = "--base", .type = DS_FLAG_STRING, .help = "base tokenizer.json (default: the one scripts/install-deps.sh fetched)"},
};

static int load_tokenizer(const char *file, const char *model, ds_tokenizer **tok) {
    char *path = file ? ds_xstrdup(file) : ds_path_join(model, "tokenizer.json");
    ds_error err = {0};
    if (!ds_file_exists(path)) {
        fprintf(stderr, "dsflash tokenize: %s: no such file\n", path);
        free(path);
        return 5;
    }
    int rc = ds_tokenizer_load(path, tok, &err);
    free(path);
    if (rc < 0) {
        fprintf(stderr, "dsflash tokenize: %s\n", err.msg);
        return !strcmp(err.code, "E_IO") ? 3 : 1;
    }
    return 0;
}

/* A --chat file: a messages array, or an object holding the request fields. */
static int render_chat(const ds_tokenizer *tok, const char *data, size_t len, const char *path,
                       bool print_prompt, ds_tokens *ids, char **prompt_out) {
    ds_error err = {0};
    cJSON *root = ds_json_parse_exact(data, len, &err);
    if (!root) { fprintf(stderr, "dsflash tokenize: %s: %s\n", path, err.msg); return 1; }
    ds_chat_request req = {0};
    req.add_generation_prompt = true;
    if (cJSON_IsArray(root)) {
        req.messages = root;
    } else if (cJSON_IsObject(root)) {
        req.messages = cJSON_GetObjectItemCaseSensitive(root, "messages");
        req.tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
        if (cJSON_IsNull(req.tools)) req.tools = NULL;
        req.reasoning_effort = cJSON_GetObjectItemCaseSensitive(root, "reasoning_effort");
        req.chat_template_kwargs = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
        req.response_format = cJSON_GetObjectItemCaseSensitive(root, "response_format");
        req.allow_response_format = true;
        const cJSON *agp = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt");
        const cJSON *cfm = cJSON_GetObjectItemCaseSensitive(root, "continue_final_message");
        if (agp) req.add_generation_prompt = cJSON_IsTrue(agp);
        if (cfm) req.continue_final_message = cJSON_IsTrue(cfm);
    } else {
        fprintf(stderr, "dsflash tokenize: %s: expected a messages array or a request object\n", path);
        cJSON_Delete(root);
        return 1;
    }
    ds_chat_prompt p = {0};
    int rc = print_prompt ? ds_chat_render(tok, &req, &p, &err) : ds_chat_encode(tok, &req, &p, ids, &err);
    cJSON_Delete(root);
    if (rc < 0) {
        fprintf(stderr, "dsflash tokenize: %s: %s (%s%s%s)\n", path, err.msg, err.code,
                p.err_param[0] ? ", param " : "", p.err_param);
        ds_chat_prompt_free(&p);
        return 1;
    }
    *prompt_out = p.text;
    p.text = NULL;
    ds_chat_prompt_free(&p);
    return 0;
}

static int write_release(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash tokenize", .usage = TOKENIZE_USAGE, .flags = k_release_flags, .n = DS_ARRAY_LEN(k_release_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    for (size_t i = 1; i < DS_ARRAY_LEN(k_release_flags) - 1; i++)
        if (!k_release_flags[i].given)
            return ds_flags_fail(&fs, k_release_flags[i].name, "required with --write-release-tokenizer");
    const char *dir = ds_flag_str(&fs, "--write-release-tokenizer"), *base = ds_flag_str(&fs, "--base");
    int vocab = (int)ds_flag_int(&fs, "--vocab-size"), noise = (int)ds_flag_int(&fs, "--noise-id"), image = (int)ds_flag_int(&fs, "--image-id");
    if (!base) base = ds_tokenizer_default_base();
    if (!base || !ds_file_exists(base)) {
        fprintf(stderr, "dsflash tokenize: base tokenizer.json %s not found (run scripts/install-deps.sh, set DSFLASH_TOKENIZER_BASE or pass --base)\n", base ? base : "");
        return 5;
    }
    ds_error err = {0};
    if (ds_tokenizer_write_release(base, vocab, noise, image, dir, &err) < 0) {
        fprintf(stderr, "dsflash tokenize: %s\n", err.msg);
        return !strcmp(err.code, "E_IO") ? 3 : 1;
    }
    printf("wrote %s/tokenizer.json and tokenizer_config.json (%d ids)\n", dir, vocab);
    return 0;
}

/* --lines: one JSON string per line in, one line of ids per line out. */
static int tokenize_lines(const ds_tokenizer *tok, const char *data, size_t len, bool special, bool timing) {
    ds_strbuf out = {0};
    ds_error err = {0};
    double enc_time = 0;
    size_t bytes = 0;
    int lineno = 0;
    const char *p = data, *end = data + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
        lineno++;
        if (ll) {
            cJSON *v = ds_json_parse_exact(p, ll, &err);
            if (!v || !cJSON_IsString(v)) {
                fprintf(stderr, "dsflash tokenize: --lines line %d: %s\n", lineno, v ? "not a JSON string" : err.msg);
                cJSON_Delete(v);
                ds_strbuf_free(&out);
                return 1;
            }
            ds_tokens ids = {0};
            size_t n = strlen(v->valuestring);
            double t0 = ds_now();
            int rc = ds_tokenizer_encode(tok, v->valuestring, n, special, &ids, &err);
            enc_time += ds_now() - t0;
            bytes += n;
            cJSON_Delete(v);
            if (rc < 0) { fprintf(stderr, "dsflash tokenize: --lines line %d: %s\n", lineno, err.msg); ds_tokens_free(&ids); ds_strbuf_free(&out); return 1; }
            for (size_t i = 0; i < ids.n; i++) ds_strbuf_printf(&out, i ? " %d" : "%d", ids.ids[i]);
            ds_strbuf_putc(&out, '\n');
            ds_tokens_free(&ids);
        }
        p += ll + 1;
    }
    if (timing)
        fprintf(stderr, "encode: %zu bytes in %.3f s (%.2f MB/s)\n", bytes, enc_time, enc_time > 0 ? (double)bytes / enc_time / 1e6 : 0.0);
    int rc = out.n && fwrite(out.s, 1, out.n, stdout) != out.n ? 3 : 0;
    ds_strbuf_free(&out);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--write-release-tokenizer")) return write_release(argc, argv);
    ds_flagset fs = {.cmd = "dsflash tokenize", .usage = TOKENIZE_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    const char *tok_file = ds_flag_str(&fs, "--tokenizer"), *model = ds_flag_str(&fs, "--model");
    const char *text = ds_flag_str(&fs, "--text"), *file = ds_flag_str(&fs, "--file");
    const char *chat = ds_flag_str(&fs, "--chat"), *lines = ds_flag_str(&fs, "--lines");
    bool no_special = ds_flag_on(&fs, "--no-special"), json = ds_flag_on(&fs, "--json");
    bool print_prompt = ds_flag_on(&fs, "--print-prompt"), timing = ds_flag_on(&fs, "--time");
    if (!!tok_file + !!model != 1) return ds_flags_fail(&fs, "--tokenizer", "give exactly one of --tokenizer and --model");
    if (!!text + !!file + !!chat + !!lines > 1) return ds_flags_fail(&fs, "--text", "give at most one of --text, --file, --chat and --lines");
    if (print_prompt && !chat) return ds_flags_fail(&fs, "--print-prompt", "needs --chat");
    if (chat && no_special) return ds_flags_fail(&fs, "--no-special", "conflicts with --chat");
    if (lines && json) return ds_flags_fail(&fs, "--json", "conflicts with --lines");
    ds_tokenizer *tok = NULL;
    int rc = load_tokenizer(tok_file, model, &tok);
    if (rc) return rc;

    char *data = NULL;
    size_t len = 0;
    ds_error err = {0};
    const char *src = chat ? chat : lines ? lines : file;
    if (text) {
        data = ds_xstrdup(text);
        len = strlen(text);
    } else if (src) {
        if (!ds_file_exists(src)) { fprintf(stderr, "dsflash tokenize: %s: no such file\n", src); ds_tokenizer_free(tok); return 5; }
        if (ds_read_file(src, &data, &len, &err) < 0) {
            fprintf(stderr, "dsflash tokenize: %s\n", err.msg);
            ds_tokenizer_free(tok);
            return 3;
        }
    } else if (ds_read_stream(stdin, "standard input", &data, &len, &err) < 0) {
        fprintf(stderr, "dsflash tokenize: error reading standard input\n");
        ds_tokenizer_free(tok);
        return 3;
    }

    if (lines) {
        rc = tokenize_lines(tok, data, len, !no_special, timing);
        free(data);
        ds_tokenizer_free(tok);
        return rc;
    }
    ds_tokens ids = {0};
    char *prompt = NULL;
    double t0 = ds_now();
    if (chat) rc = render_chat(tok, data, len, chat, print_prompt, &ids, &prompt);
    else if (ds_tokenizer_encode(tok, data, len, !no_special, &ids, &err) < 0) {
        fprintf(stderr, "dsflash tokenize: %s%s%s\n", src ? src : "input", ": ", err.msg);
        rc = 1;
    }
    double dt = ds_now() - t0;
    if (rc == 0) {
        if (timing)
            fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.3f s (%.2f MB/s)\n", len, ids.n, dt,
                    dt > 0 ? (double)len / dt / 1e6 : 0.0);
        if (print_prompt) {
            fwrite(prompt, 1, strlen(prompt), stdout);
        } else if (json) {
            printf("{\"count\":%zu,\"tokens\":[", ids.n);
            for (size_t i = 0; i < ids.n; i++) printf(i ? ",%d" : "%d", ids.ids[i]);
            printf("]}\n");
        } else {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
            printf("\n");
        }
        if (fflush(stdout) != 0) rc = 3;
    }
    free(prompt);
    ds_tokens_free(&ids);
    free(data);
    ds_tokenizer_free(tok);
    return rc;
}
