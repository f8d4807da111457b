"""Engram constants and row ids (MODEL.md §2.10.2–§2.10.3, Appendix A), in plain Python integers.

Python's unbounded integers make the wrap-around arithmetic of the seed sequence and the 128-bit
permuted congruential generator explicit (every step masks to 32, 64 or 128 bits), so nothing here
can silently lose precision the way a float64 path would (the multipliers exceed 2^53).  Row ids are
computed per row with the rolling XOR of the spec; the inputs are small enough that NumPy would add
nothing but a risk of overflow.
"""
M32 = (1 << 32) - 1
M64 = (1 << 64) - 1
M128 = (1 << 128) - 1

INIT_A, MULT_A, INIT_B, MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
MIX_L, MIX_R = 0xCA01F9DD, 0x4973F715
PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341


def _seed_words(seed):
    """Seed sequence of Appendix A: four 64-bit words u[0..3]."""
    ent = []
    s = seed
    while True:
        ent.append(s & M32)
        s >>= 32
        if s == 0:
            break
    hc = INIT_A

    def hashmix(v):
        nonlocal hc
        v = (v ^ hc) & M32
        hc = (hc * MULT_A) & M32
        v = (v * hc) & M32
        return v ^ (v >> 16)

    def mix(x, y):
        r = (MIX_L * x - MIX_R * y) & M32
        return r ^ (r >> 16)

    pool = [hashmix(ent[i] if i < len(ent) else 0) for i in range(4)]
    for s_ in range(4):
        for d in range(4):
            if s_ != d:
                pool[d] = mix(pool[d], hashmix(pool[s_]))
    for s_ in range(4, len(ent)):
        for d in range(4):
            pool[d] = mix(pool[d], hashmix(ent[s_]))
    h = INIT_B
    w = []
    for i in range(8):
        v = pool[i % 4] ^ h
        h = (h * MULT_B) & M32
        v = (v * h) & M32
        w.append(v ^ (v >> 16))
    return [w[2 * k] | (w[2 * k + 1] << 32) for k in range(4)]


class Pcg64:
    """128-bit LCG state with the XSL-RR output function, seeded as Appendix A says."""

    def __init__(self, seed):
        u = _seed_words(seed)
        self.inc = ((((u[2] << 64) | u[3]) << 1) | 1) & M128
        st = 0
        st = (st * PCG_MULT + self.inc) & M128
        st = (st + ((u[0] << 64) | u[1])) & M128
        st = (st * PCG_MULT + self.inc) & M128
        self.st = st

    def next64(self):
        self.st = (self.st * PCG_MULT + self.inc) & M128
        x = ((self.st >> 64) ^ self.st) & M64
        rot = self.st >> 122
        return ((x >> rot) | (x << ((64 - rot) & 63))) & M64

    def draw(self, bound):
        """Bounded draw in [0, bound): 64-bit multiply-shift with rejection."""
        m = self.next64() * bound
        if (m & M64) < bound:
            t = ((1 << 64) - bound) % bound
            while (m & M64) < t:
                m = self.next64() * bound
        return m >> 64


def multiplier_bound(n_classes):
    return max(1, (((1 << 63) - 1) // n_classes) // 2)


def multipliers(layer_id, n_classes, max_ngram):
    """M_l[0..max_ngram-1] = 2·draw(B)+1 with the generator seeded by 10007·layer_id."""
    bound = multiplier_bound(n_classes)
    if bound - 1 < (1 << 32):
        raise ValueError(f"engram_compressed_vocab_size {n_classes}: multiplier bound {bound} needs the "
                         "32-bit draw, which this engine does not implement (Appendix A)")
    g = Pcg64(10007 * layer_id)
    return [2 * g.draw(bound) + 1 for _ in range(max_ngram)]


def _is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def primes_and_offsets(n_layers, max_ngram, n_heads, vocab_floor):
    """Per Engram layer (config order): the (max_ngram-1)·n_heads primes, strictly increasing across
    layers, the first being the smallest prime > vocab_floor - 1, and their exclusive prefix sums."""
    out = []
    cand = vocab_floor - 1
    for _ in range(n_layers):
        primes = []
        for _slot in range((max_ngram - 1) * n_heads):
            cand += 1
            while not _is_prime(cand):
                cand += 1
            primes.append(cand)
        offs, acc = [], 0
        for p in primes:
            offs.append(acc)
            acc += p
        out.append((primes, offs))
    return out


def row_ids(classes, pad, mults, primes, offsets, max_ngram, n_heads):
    """Row ids for every position of one sequence (no image rows): [T][(max_ngram-1)·n_heads].
    classes: normalized class of each token in order; history slots before position 0 are `pad`."""
    T = len(classes)
    rows = []
    for p in range(T):
        t = [classes[p - s] if p - s >= 0 else pad for s in range(max_ngram)]
        prod = [t[s] * mults[s] for s in range(max_ngram)]
        acc = prod[0]
        r = []
        for g in range(2, max_ngram + 1):
            acc ^= prod[g - 1]
            for h in range(n_heads):
                c = (g - 2) * n_heads + h
                r.append(acc % primes[c] + offsets[c])
        rows.append(r)
    return rows
