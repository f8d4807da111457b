/* dsflash detokenize: token ids in, text out.
 *
 * Why it exists: the inverse of `dsflash tokenize`, through the same decoder the server uses, for
 * inspecting generations and checking round trips.  `--stream` runs the incremental detokenizer
 * and prints each chunk it releases as one JSON string per line, which shows that characters and
 * control tokens are never split.  Exit status: 0 ok, 1 an id outside the vocabulary or malformed
 * id list, 2 usage, 3 I/O error, 5 input missing (TOOLS.md §0). */
#define _GNU_SOURCE
#include "cli/commands.h"
#include "base/flags.h"
#include "base/common.h"
#include "base/fsutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/json_canon.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DETOKENIZE_USAGE \
    "usage: dsflash detokenize (--tokenizer FILE | --model DIR) [--ids \"1 2 3\" | --file FILE]\n" \
    "                          [--skip-special] [--stream] [--lines]\n" \
    "  Ids come from --ids, --file or standard input: integers separated by spaces, commas or\n" \
    "  newlines, or a JSON array.  The text is written to standard output as is.\n"

static ds_flag k_flags[] = {
    {.name = "--tokenizer", .type = DS_FLAG_STRING, .help = "tokenizer.json to decode with"},
    {.name = "--model", .type = DS_FLAG_STRING, .help = "checkpoint directory (its tokenizer.json)"},
    {.name = "--ids", .type = DS_FLAG_STRING, .help = "the ids: \"1 2 3\", \"1,2,3\" or \"[1, 2, 3]\""},
    {.name = "--file", .type = DS_FLAG_STRING, .help = "read the ids from FILE"},
    {.name = "--skip-special", .type = DS_FLAG_SWITCH, .help = "drop added tokens marked special (BOS, EOS, PAD)"},
    {.name = "--stream", .type = DS_FLAG_SWITCH, .help = "decode incrementally; print each released chunk as a JSON string per line"},
    {.name = "--lines", .type = DS_FLAG_SWITCH, .help = "batch mode: each input line is one id list; prints one JSON string per line"},
};

/* Parse "1 2 3", "1,2,3" or "[1, 2, 3]" into ids (the shared base/flags.h rules); -1 with a message
 * naming the offending item and its offset.  Any 32-bit id is passed on: the decoder names ids
 * outside the vocabulary. */
static int parse_ids(const char *s, ds_tokens *ids) {
    char why[160];
    if (ds_parse_ids(s, INT32_MIN, INT32_MAX, NULL, &ids->ids, &ids->n, &ids->cap, why, sizeof why) == 0) return 0;
    fprintf(stderr, "dsflash detokenize: %s\n", why);
    return -1;
}

int cmd_detokenize(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash detokenize", .usage = DETOKENIZE_USAGE, .flags = k_flags, .n = DS_ARRAY_LEN(k_flags)};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    const char *tok_file = ds_flag_str(&fs, "--tokenizer"), *model = ds_flag_str(&fs, "--model");
    const char *ids_arg = ds_flag_str(&fs, "--ids"), *file = ds_flag_str(&fs, "--file");
    bool skip = ds_flag_on(&fs, "--skip-special"), stream = ds_flag_on(&fs, "--stream"), lines = ds_flag_on(&fs, "--lines");
    if (!!tok_file + !!model != 1) return ds_flags_fail(&fs, "--tokenizer", "give exactly one of --tokenizer and --model");
    if (ids_arg && file) return ds_flags_fail(&fs, "--ids", "conflicts with --file (one source of ids)");
    if (lines && stream) return ds_flags_fail(&fs, "--lines", "conflicts with --stream");
    char *path = tok_file ? ds_xstrdup(tok_file) : ds_path_join(model, "tokenizer.json");
    if (!ds_file_exists(path)) { fprintf(stderr, "dsflash detokenize: %s: no such file\n", path); free(path); return 5; }
    ds_error err = {0};
    ds_tokenizer *tok;
    int rc = ds_tokenizer_load(path, &tok, &err);
    free(path);
    if (rc < 0) { fprintf(stderr, "dsflash detokenize: %s\n", err.msg); return !strcmp(err.code, "E_IO") ? 3 : 1; }

    char *data = NULL;
    size_t len;
    if (ids_arg) data = ds_xstrdup(ids_arg);
    else if (file) {
        if (!ds_file_exists(file)) { fprintf(stderr, "dsflash detokenize: %s: no such file\n", file); ds_tokenizer_free(tok); return 5; }
        if (ds_read_file(file, &data, &len, &err) < 0) { fprintf(stderr, "dsflash detokenize: %s\n", err.msg); ds_tokenizer_free(tok); return 3; }
    } else if (ds_read_stream(stdin, "standard input", &data, &len, &err) < 0) {
        fprintf(stderr, "dsflash detokenize: error reading standard input\n");
        ds_tokenizer_free(tok);
        return 3;
    }
    ds_tokens ids = {0};
    if (lines) {
        ds_strbuf out = {0};
        char *save = NULL;
        int lineno = 0;
        for (char *ln = strtok_r(data, "\n", &save); ln && rc == 0; ln = strtok_r(NULL, "\n", &save)) {
            lineno++;
            ids.n = 0;
            if (parse_ids(ln, &ids) < 0) { fprintf(stderr, "dsflash detokenize: --lines line %d\n", lineno); rc = 1; break; }
            size_t n;
            char *text = ds_tokenizer_decode(tok, ids.ids, ids.n, skip, &n, &err);
            if (!text) { fprintf(stderr, "dsflash detokenize: line %d: %s\n", lineno, err.msg); rc = 1; break; }
            ds_json_write_string(&out, text, n);
            ds_strbuf_putc(&out, '\n');
            free(text);
        }
        if (rc == 0 && out.n) fwrite(out.s, 1, out.n, stdout);
        ds_strbuf_free(&out);
        free(data);
        ds_tokens_free(&ids);
        ds_tokenizer_free(tok);
        return rc;
    }
    rc = parse_ids(data, &ids) < 0 ? 1 : 0;
    free(data);
    if (rc == 0 && !stream) {
        size_t n;
        char *text = ds_tokenizer_decode(tok, ids.ids, ids.n, skip, &n, &err);
        if (!text) { fprintf(stderr, "dsflash detokenize: %s\n", err.msg); rc = 1; }
        else { fwrite(text, 1, n, stdout); free(text); }
    } else if (rc == 0) {
        ds_detok_stream *s = ds_detok_stream_new(tok, skip);
        ds_strbuf line = {0};
        for (size_t i = 0; i <= ids.n && rc == 0; i++) {
            size_t n;
            const char *chunk = i < ids.n ? ds_detok_stream_push(s, ids.ids[i], &n, &err) : ds_detok_stream_flush(s, &n);
            if (!chunk) { fprintf(stderr, "dsflash detokenize: %s\n", err.msg); rc = 1; break; }
            if (!n) continue;
            line.n = 0;
            ds_json_write_string(&line, chunk, n);
            ds_strbuf_putc(&line, '\n');
            fwrite(line.s, 1, line.n, stdout);
        }
        ds_strbuf_free(&line);
        ds_detok_stream_free(s);
    }
    if (fflush(stdout) != 0 && rc == 0) rc = 3;
    ds_tokens_free(&ids);
    ds_tokenizer_free(tok);
    return rc;
}
