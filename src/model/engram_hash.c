/* Engram multipliers, primes, offsets and row ids (see engram_hash.h for why all of it is integer). */
#include "model/engram_hash.h"
#include <string.h>

/* ---- seed sequence (Appendix A), 32-bit wrapping arithmetic ---- */
#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_L 0xca01f9ddu
#define MIX_R 0x4973f715u

typedef struct { uint32_t hc; } seed_hash;

static uint32_t hashmix(seed_hash *h, uint32_t v) {
    v ^= h->hc;
    h->hc *= MULT_A;
    v *= h->hc;
    v ^= v >> 16;
    return v;
}
static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = MIX_L * x - MIX_R * y;
    r ^= r >> 16;
    return r;
}

static void seed_words(uint64_t seed, uint64_t u[4]) {
    uint32_t ent[2];
    int n_ent = 0;
    do {
        ent[n_ent++] = (uint32_t)(seed & 0xffffffffu);
        seed >>= 32;
    } while (seed);
    seed_hash h = {INIT_A};
    uint32_t pool[4];
    for (int i = 0; i < 4; i++) pool[i] = hashmix(&h, i < n_ent ? ent[i] : 0);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) pool[d] = mix(pool[d], hashmix(&h, pool[s]));
    for (int s = 4; s < n_ent; s++) /* never taken for seeds < 2^64, kept for the literal algorithm */
        for (int d = 0; d < 4; d++) pool[d] = mix(pool[d], hashmix(&h, ent[s]));
    uint32_t hb = INIT_B, w[8];
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4] ^ hb;
        hb *= MULT_B;
        v *= hb;
        v ^= v >> 16;
        w[i] = v;
    }
    for (int k = 0; k < 4; k++) u[k] = (uint64_t)w[2 * k] | ((uint64_t)w[2 * k + 1] << 32);
}

static unsigned __int128 pcg_mult(void) {
    return ((unsigned __int128)2549297995355413924ull << 64) | (unsigned __int128)4865540595714422341ull;
}

void ds_pcg64_seed(ds_pcg64 *g, uint64_t seed) {
    uint64_t u[4];
    seed_words(seed, u);
    const unsigned __int128 M = pcg_mult();
    g->inc = ((((unsigned __int128)u[2] << 64) | u[3]) << 1) | 1u;
    g->st = 0;
    g->st = g->st * M + g->inc;
    g->st += ((unsigned __int128)u[0] << 64) | u[1];
    g->st = g->st * M + g->inc;
}

uint64_t ds_pcg64_next(ds_pcg64 *g) {
    g->st = g->st * pcg_mult() + g->inc;
    uint64_t x = (uint64_t)(g->st >> 64) ^ (uint64_t)g->st;
    unsigned rot = (unsigned)(g->st >> 122);
    return rot ? (x >> rot) | (x << (64 - rot)) : x;
}

uint64_t ds_pcg64_draw(ds_pcg64 *g, uint64_t bound) {
    unsigned __int128 m = (unsigned __int128)ds_pcg64_next(g) * bound;
    if ((uint64_t)m < bound) {
        uint64_t t = (0 - bound) % bound;                 /* (2^64 - B) mod B */
        while ((uint64_t)m < t) m = (unsigned __int128)ds_pcg64_next(g) * bound;
    }
    return (uint64_t)(m >> 64);
}

uint64_t ds_engram_mult_bound(int64_t n_classes) {
    if (n_classes <= 0) return 1;
    uint64_t b = ((uint64_t)INT64_MAX / (uint64_t)n_classes) / 2;
    return b ? b : 1;
}

int ds_engram_multipliers(int layer_id, int64_t n_classes, int count, int64_t *out) {
    uint64_t bound = ds_engram_mult_bound(n_classes);
    if (bound - 1 < ((uint64_t)1 << 32)) return -1;
    ds_pcg64 g;
    ds_pcg64_seed(&g, (uint64_t)10007 * (uint64_t)layer_id);
    for (int k = 0; k < count; k++) out[k] = (int64_t)(2 * ds_pcg64_draw(&g, bound) + 1);
    return 0;
}

static int is_prime(int64_t n) {
    if (n < 2) return 0;
    if (n % 2 == 0) return n == 2;
    if (n % 3 == 0) return n == 3;
    for (int64_t f = 5; f * f <= n; f += 6)
        if (n % f == 0 || n % (f + 2) == 0) return 0;
    return 1;
}

int64_t ds_next_prime(int64_t n) {
    int64_t c = n + 1;
    while (!is_prime(c)) c++;
    return c;
}

int ds_engram_consts_init(ds_engram_consts *c, const ds_config *cfg, ds_error *err) {
    memset(c, 0, sizeof *c);
    c->n_layers = cfg->n_engram;
    c->max_ngram = cfg->engram_max_ngram;
    c->n_heads = cfg->engram_n_heads;
    if (c->n_layers == 0) return 0;
    if (c->max_ngram < 2 || c->max_ngram > DS_MAX_NGRAM)
        return ds_fail(err, "E_CONFIG", "engram_max_ngram_size: expected 2..%d, found %d", DS_MAX_NGRAM, c->max_ngram);
    c->n_cols = (c->max_ngram - 1) * c->n_heads;
    if (c->n_heads < 1 || c->n_cols > DS_ENGRAM_MAX_COLS)
        return ds_fail(err, "E_CONFIG", "engram_n_heads: (max_ngram-1)*n_heads expected 1..%d, found %d",
                       DS_ENGRAM_MAX_COLS, c->n_cols);
    int64_t cand = cfg->engram_vocab_size - 1;
    for (int e = 0; e < c->n_layers; e++) {
        int64_t acc = 0;
        for (int k = 0; k < c->n_cols; k++) {
            cand = ds_next_prime(cand);
            c->primes[e][k] = cand;
            c->offsets[e][k] = acc;
            acc += cand;
        }
        c->prime_sum[e] = acc;
        if (ds_engram_multipliers(cfg->engram_layers[e], cfg->engram_classes, c->max_ngram, c->mult[e]) < 0)
            return ds_fail(err, "E_CONFIG",
                           "engram_compressed_vocab_size: expected a value whose multiplier bound exceeds 2^32 "
                           "(the 64-bit multiplier draw), found %d", cfg->engram_classes);
    }
    return 0;
}

void ds_engram_row_ids(const ds_engram_consts *c, int e, const int64_t *t, int64_t *rows) {
    /* prod[s] = t[s]·M[s] cannot overflow: t < V_c and M < 2·bound+1 <= (2^63-1)/V_c. */
    uint64_t prod[DS_MAX_NGRAM];
    for (int s = 0; s < c->max_ngram; s++) prod[s] = (uint64_t)t[s] * (uint64_t)c->mult[e][s];
    uint64_t acc = prod[0];
    for (int g = 2; g <= c->max_ngram; g++) {
        acc ^= prod[g - 1];
        for (int h = 0; h < c->n_heads; h++) {
            int col = (g - 2) * c->n_heads + h;
            rows[col] = (int64_t)(acc % (uint64_t)c->primes[e][col]) + c->offsets[e][col];
        }
    }
}
