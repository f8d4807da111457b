/* Client-text escaping (SERVING.md §11.2): a U+200B after the first character of every
 * control-token literal, so injected turn markers tokenize as ordinary text.
 *
 * Why a trie and "resume after the inserted mark": the literal set is the fixed §11.1 list plus
 * every added token of the tokenizer (hundreds for DeepSeek), and literals can overlap
 * (`<｜DSML｜` holds the literal `｜DSML｜` one character in).  Checking every position against a
 * byte trie and continuing right after the first character of each hit breaks every occurrence,
 * including overlapping ones, in one linear pass. */
#define _GNU_SOURCE
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer_internal.h"
#include <stdlib.h>
#include <string.h>

static const char *const FIXED_LITERALS[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜System｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜latest_reminder｜>", "<｜deepseek_image｜>", "<｜action｜>", "<｜query｜>", "<｜authority｜>",
    "<｜domain｜>", "<｜title｜>", "<｜read_url｜>", "<think>", "</think>", "｜DSML｜",
};

struct ds_escaper {
    lit_trie trie;
};

ds_escaper *ds_escaper_new(const ds_tokenizer *tok) {
    ds_escaper *e = ds_xcalloc(1, sizeof *e);
    ds_lit_trie_init(&e->trie);
    for (size_t i = 0; i < DS_ARRAY_LEN(FIXED_LITERALS); i++)
        ds_lit_trie_add(&e->trie, FIXED_LITERALS[i], strlen(FIXED_LITERALS[i]), 0);
    if (tok) {
        for (int i = 0; i < ds_tokenizer_added_count(tok); i++) {
            const char *lit = ds_tokenizer_added_content(tok, i, NULL, NULL);
            ds_lit_trie_add(&e->trie, lit, strlen(lit), 0);
        }
    }
    return e;
}

void ds_escaper_free(ds_escaper *e) {
    if (!e) return;
    ds_lit_trie_free(&e->trie);
    free(e);
}

static size_t utf8_char_len(unsigned char c) {
    return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
}

void ds_escaper_apply(const ds_escaper *e, const char *text, size_t len, ds_strbuf *out) {
    size_t run = 0, i = 0;
    ds_strbuf_append(out, "", 0);
    while (i < len) {
        size_t ml;
        if (!e->trie.first[(unsigned char)text[i]] || ds_lit_trie_longest(&e->trie, text + i, len - i, &ml) < 0) {
            i++;
            continue;
        }
        size_t cl = DS_MIN(utf8_char_len((unsigned char)text[i]), len - i);
        ds_strbuf_append(out, text + run, i + cl - run);
        ds_strbuf_append(out, "\xE2\x80\x8B", 3);   /* U+200B ZERO WIDTH SPACE */
        i += cl;
        run = i;
    }
    ds_strbuf_append(out, text + run, len - run);
}
