/* SHA-256 for every module that needs it (reassemble/split, quantizer manifests, tests), as a thin
 * wrapper over OpenSSL's EVP interface.  We never ship our own SHA-256: OpenSSL picks SHA-NI or
 * the ARMv8 crypto extensions at run time, which is the difference between ~0.5 and ~2 GB/s per
 * core, and a hand-written implementation would only add a place for bugs.  The context is an
 * opaque heap object so that callers do not need OpenSSL headers. */
#ifndef DS_BASE_SHA256_H
#define DS_BASE_SHA256_H
#include "base/common.h"

#define DS_SHA256_LEN 32
#define DS_SHA256_HEX_LEN 64   /* lowercase hex, without the terminating NUL */

typedef struct ds_sha256 ds_sha256;

/* A fresh context (aborts on out-of-memory, like ds_xmalloc). */
ds_sha256 *ds_sha256_new(void);
void ds_sha256_free(ds_sha256 *h);
/* Start over (a context may be reused after final). */
void ds_sha256_reset(ds_sha256 *h);
void ds_sha256_update(ds_sha256 *h, const void *data, size_t n);
/* Finish; `out` receives 32 bytes.  The context must be reset before reuse. */
void ds_sha256_final(ds_sha256 *h, uint8_t out[DS_SHA256_LEN]);
/* Finish into 64 lowercase hex digits plus NUL. */
void ds_sha256_final_hex(ds_sha256 *h, char hex[DS_SHA256_HEX_LEN + 1]);

/* One-shot digest of a buffer, as hex. */
void ds_sha256_hex(const void *data, size_t n, char hex[DS_SHA256_HEX_LEN + 1]);

/* Bytes <-> hex.  ds_sha256_parse_hex accepts exactly 64 lowercase hex digits (the PARTS.sha256
 * rule); returns 0 or -1. */
void ds_sha256_to_hex(const uint8_t d[DS_SHA256_LEN], char hex[DS_SHA256_HEX_LEN + 1]);
int ds_sha256_parse_hex(const char *hex, uint8_t d[DS_SHA256_LEN]);
int ds_sha256_is_hex(const char *s, size_t n);

/* A short description of the implementation in use, e.g. "OpenSSL 3.0.11, SHA-NI" or
 * "OpenSSL 3.0.11, no SHA extensions", for tools that must name the accelerated path. */
const char *ds_sha256_impl(void);

#endif
