/* UTF-8 helpers shared by the tokenizer, the detokenizer and the parsers.
 *
 * Why they are our own: decoding must replace invalid input exactly as HF's decoder does (Rust's
 * `String::from_utf8_lossy`: one U+FFFD per maximal invalid subpart, Unicode §3.9), and the
 * streaming detokenizer needs to know where a valid-but-incomplete sequence ends, which no
 * library call exposes. */
#ifndef DS_TOKENIZER_UTF8_H
#define DS_TOKENIZER_UTF8_H
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Decode one scalar value at s[0..n).  Returns its length (1..4) and stores it in *cp, or 0 for
 * an invalid or incomplete sequence (*cp untouched). */
int ds_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Length of the maximal invalid subpart at s (>= 1), for lossy replacement.  Returns 0 when s[0..n)
 * is a valid but incomplete prefix of a sequence (more bytes could complete it). */
int ds_utf8_invalid_len(const uint8_t *s, size_t n);
/* Encode cp into out (4 bytes room); returns the length. */
int ds_utf8_encode(uint32_t cp, char *out);
/* Offset of the first invalid byte, or n when s is entirely valid UTF-8. */
size_t ds_utf8_validate(const uint8_t *s, size_t n);
/* Lossy-convert s[0..n) into out (room for 3n+1 bytes), replacing invalid subparts by U+FFFD.
 * With final = false, a valid-but-incomplete tail is left unconsumed.  Returns bytes written and
 * stores the number of input bytes consumed in *consumed. */
size_t ds_utf8_lossy(const uint8_t *s, size_t n, bool final, char *out, size_t *consumed);

#endif
