/* SHA-256 over OpenSSL EVP (see sha256.h for why we wrap rather than implement).  The only logic
 * of our own is hex conversion and naming the CPU extension OpenSSL will pick, which tools print
 * so that a slow run on a CPU without SHA extensions is explained by the output itself. */
#define _GNU_SOURCE
#include "base/sha256.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

struct ds_sha256 { EVP_MD_CTX *ctx; };

static void evp_die(const char *what) {
    /* EVP only fails for out-of-memory or a broken provider setup; neither is recoverable here. */
    fprintf(stderr, "dsflash: OpenSSL sha256 %s failed\n", what);
    abort();
}

ds_sha256 *ds_sha256_new(void) {
    ds_sha256 *h = ds_xmalloc(sizeof *h);
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx) evp_die("context allocation");
    ds_sha256_reset(h);
    return h;
}

void ds_sha256_free(ds_sha256 *h) {
    if (!h) return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void ds_sha256_reset(ds_sha256 *h) {
    if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) evp_die("init");
}

void ds_sha256_update(ds_sha256 *h, const void *data, size_t n) {
    if (n && EVP_DigestUpdate(h->ctx, data, n) != 1) evp_die("update");
}

void ds_sha256_final(ds_sha256 *h, uint8_t out[DS_SHA256_LEN]) {
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(h->ctx, out, &len) != 1 || len != DS_SHA256_LEN) evp_die("final");
}

void ds_sha256_to_hex(const uint8_t d[DS_SHA256_LEN], char hex[DS_SHA256_HEX_LEN + 1]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < DS_SHA256_LEN; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[DS_SHA256_HEX_LEN] = 0;
}

void ds_sha256_final_hex(ds_sha256 *h, char hex[DS_SHA256_HEX_LEN + 1]) {
    uint8_t d[DS_SHA256_LEN];
    ds_sha256_final(h, d);
    ds_sha256_to_hex(d, hex);
}

void ds_sha256_hex(const void *data, size_t n, char hex[DS_SHA256_HEX_LEN + 1]) {
    ds_sha256 *h = ds_sha256_new();
    ds_sha256_update(h, data, n);
    ds_sha256_final_hex(h, hex);
    ds_sha256_free(h);
}


static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;   /* uppercase is rejected on purpose: PARTS.sha256 is lowercase by definition */
}

int ds_sha256_is_hex(const char *s, size_t n) {
    if (n != DS_SHA256_HEX_LEN) return 0;
    for (size_t i = 0; i < n; i++)
        if (hexval(s[i]) < 0) return 0;
    return 1;
}

int ds_sha256_parse_hex(const char *hex, uint8_t d[DS_SHA256_LEN]) {
    if (!hex || strlen(hex) != DS_SHA256_HEX_LEN || !ds_sha256_is_hex(hex, DS_SHA256_HEX_LEN)) return -1;
    for (int i = 0; i < DS_SHA256_LEN; i++) d[i] = (uint8_t)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
    return 0;
}

static const char *cpu_extension(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    /* CPUID leaf 7, sub-leaf 0: EBX bit 29 is the SHA extension (SHA-NI). */
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if (b & (1u << 29)) {
            /* OPENSSL_ia32cap can mask the feature off; say so instead of claiming it. */
            return getenv("OPENSSL_ia32cap") ? "SHA-NI (OPENSSL_ia32cap set, may be masked)" : "SHA-NI";
        }
    }
    return "no SHA extensions (generic x86 code)";
#elif defined(__aarch64__)
#ifndef HWCAP_SHA2
#define HWCAP_SHA2 (1 << 6)
#endif
    return (getauxval(AT_HWCAP) & HWCAP_SHA2) ? "ARMv8 crypto extensions" : "no SHA extensions (generic code)";
#else
    return "generic code";
#endif
}

const char *ds_sha256_impl(void) {
    static char desc[160];
    if (!desc[0]) snprintf(desc, sizeof desc, "%s, %s", OpenSSL_version(OPENSSL_VERSION), cpu_extension());
    return desc;
}
