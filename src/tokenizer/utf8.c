/* UTF-8 decoding with the "maximal subpart" replacement rule (Unicode §3.9, as Rust's
 * from_utf8_lossy applies it).  A sequence is judged byte by byte against the well-formed table:
 * the lead byte fixes the length and the allowed range of the second byte (E0: A0–BF, ED: 80–9F,
 * F0: 90–BF, F4: 80–8F), later bytes are 80–BF.  The bytes that were accepted before the first
 * unacceptable one form one invalid subpart → one U+FFFD. */
#include "tokenizer/utf8.h"
#include <string.h>

/* Expected total length for a lead byte, 0 if it cannot start a sequence. */
static int lead_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

static bool second_ok(uint8_t lead, uint8_t b) {
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
    }
}

/* Number of bytes of s that form a valid (possibly incomplete) prefix: returns k = accepted bytes
 * and sets *complete when k equals the full sequence length. */
static int scan(const uint8_t *s, size_t n, bool *complete) {
    *complete = false;
    int L = lead_len(s[0]);
    if (L == 0) return 0;
    if (L == 1) { *complete = true; return 1; }
    int k = 1;
    while (k < L && (size_t)k < n) {
        bool ok = (k == 1) ? second_ok(s[0], s[1]) : (s[k] >= 0x80 && s[k] <= 0xBF);
        if (!ok) return k;
        k++;
    }
    if (k == L) *complete = true;
    return k;
}

int ds_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    bool complete;
    int k = scan(s, n, &complete);
    if (!complete) return 0;
    uint32_t c;
    switch (k) {
    case 1: c = s[0]; break;
    case 2: c = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); break;
    case 3: c = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); break;
    default:
        c = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
            ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
    *cp = c;
    return k;
}

int ds_utf8_invalid_len(const uint8_t *s, size_t n) {
    bool complete;
    int k = scan(s, n, &complete);
    if (k == 0) return 1;                    /* bad lead byte */
    if ((size_t)k == n && !complete) return 0; /* ran out of input: could still complete */
    return k;                                /* accepted bytes before the offending one */
}

int ds_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ds_utf8_validate(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int k = ds_utf8_decode(s + i, n - i, &cp);
        if (k == 0) return i;
        i += (size_t)k;
    }
    return n;
}

size_t ds_utf8_lossy(const uint8_t *s, size_t n, bool final, char *out, size_t *consumed) {
    size_t i = 0, o = 0;
    while (i < n) {
        if (s[i] < 0x80) { out[o++] = (char)s[i++]; continue; }
        uint32_t cp;
        int k = ds_utf8_decode(s + i, n - i, &cp);
        if (k > 0) { memcpy(out + o, s + i, (size_t)k); o += (size_t)k; i += (size_t)k; continue; }
        int bad = ds_utf8_invalid_len(s + i, n - i);
        if (bad == 0) {                     /* incomplete tail */
            if (!final) break;
            bad = (int)(n - i);
        }
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += (size_t)bad;
    }
    out[o] = 0;
    if (consumed) *consumed = i;
    return o;
}
