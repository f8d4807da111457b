/* A small backtracking regular-expression engine over Unicode code points, for the pre-tokenizer
 * `Split` patterns of tokenizer.json files.
 *
 * Why our own: HF tokenizers evaluates these patterns with Oniguruma; what matters is the same
 * leftmost-first backtracking semantics and the same Unicode classes (\p{L}, \p{N}, \p{P}, \p{S},
 * \p{M}, \s = White_Space, \d = Nd, \w = L|M|Nd|Pc).  A dedicated engine keeps one set of Unicode
 * tables (utf8proc's) for the tokenizer and the Engram map and needs no further dependency.
 * Supported: literals and escapes, `.`, classes with ranges / negation / \p{..} / \P{..},
 * \s \S \d \D \w \W, groups `(...)` `(?:...)` `(?i:...)`, lookahead `(?=...)` `(?!...)`,
 * alternation, greedy and lazy quantifiers `* + ? {n} {n,} {n,m}` (a group at most 16 times, so
 * the recursion depth stays bounded on any text), anchors `^ $`.  Anything else
 * (lookbehind, backreferences, possessive quantifiers, nested classes) is a compile error. */
#ifndef DS_TOKENIZER_UREGEX_H
#define DS_TOKENIZER_UREGEX_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef struct ds_uregex ds_uregex;

/* Compile a UTF-8 pattern.  NULL on error, with a message (naming the offset) in errbuf. */
ds_uregex *ds_uregex_compile(const char *pattern, char *errbuf, size_t errlen);
void ds_uregex_free(ds_uregex *re);
/* Leftmost match in subject cps[0..n) starting at or after `from`.  Returns true and the match
 * [*ms, *me) in code-point indices. */
bool ds_uregex_find(const ds_uregex *re, const uint32_t *cps, int n, int from, int *ms, int *me);

/* Unicode helpers on utf8proc's tables (BMP results cached). */
int ds_ucat(uint32_t cp);            /* utf8proc_category_t value */
bool ds_uwhite(uint32_t cp);         /* White_Space property */

#endif
