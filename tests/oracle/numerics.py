"""Rounding primitives of the NumPy oracle (docs/NUMERICS.md, MODEL.md §0 and §2.0).

The oracle is only useful if it rounds exactly where the contract says and nowhere else, so every
value it carries is a NumPy float32 array, and bf16 quantities are float32 arrays whose low 16 bits
are zero.  The helpers below are the only places that round:

* ``f32(x)``     one rounding of a float64 evaluation to fp32 (contract rules 2 and 3);
* ``bf16(x)``    fp32 -> bf16 round-to-nearest-even done on the uint32 bits, NaN kept NaN; a float64
                 input is first rounded to fp32 (the contract never rounds float64 straight to bf16);
* ``dot64``      a reduction: operands widened to float64 (their products are exact there), summed,
                 then rounded once to fp32.

Linears come in the two flavours of MODEL.md §2.12: float (fp32 from a float64 dot product) and the
dynamic per-row int8 activation quantization of the W8A8/W4A8 schemes, with the integer accumulation
done exactly (float64 holds every partial sum of these small integer products exactly).
"""
import numpy as np

F32 = np.float32
F64 = np.float64


def f32(x):
    """Round a (float64) value or array once to fp32."""
    return np.asarray(x, dtype=F64).astype(F32)


def bf16(x):
    """fp32 -> bf16 -> fp32 with round-to-nearest-even on the bits (NaN stays NaN).

    float64 inputs go through fp32 first (docs/NUMERICS.md rule 3)."""
    a = np.asarray(x)
    if a.dtype != F32:
        a = a.astype(F64).astype(F32)
    u = np.ascontiguousarray(a).view(np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = (u.astype(np.uint64) + np.uint64(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)).astype(np.uint64))
    r = (r >> np.uint64(16)).astype(np.uint32) << np.uint32(16)
    r = np.where(nan, (u & np.uint32(0xFFFF0000)) | np.uint32(0x00400000), r).astype(np.uint32)
    return r.view(F32).reshape(a.shape)


def bf16_bits_to_f32(raw_u16):
    """Widen stored bf16 bit patterns (uint16) to the fp32 values they denote (exact)."""
    u = np.asarray(raw_u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
    return u.view(F32)


def f16_bits_to_f32(raw_u16):
    return np.asarray(raw_u16, dtype=np.uint16).view(np.float16).astype(F32)


def is_bf16(x):
    """True when every element of the fp32 array is a bf16 value."""
    u = np.ascontiguousarray(np.asarray(x, dtype=F32)).view(np.uint32)
    return bool(np.all((u & np.uint32(0xFFFF)) == 0))


def dot64(a, b):
    """fp32(Σ f64(a)·f64(b)) over the last axis of a and the last axis of b: a [..., n], b [m, n]
    -> [..., m].  One rounding (contract rule 2)."""
    return f32(np.asarray(a, dtype=F64) @ np.asarray(b, dtype=F64).T)


def sumsq64(x):
    """fp32(Σ f64(x)²) over the last axis."""
    x64 = np.asarray(x, dtype=F64)
    return f32(np.sum(x64 * x64, axis=-1))


def float_linear(x, w):
    """Float (FLOAT label) linear: y[o] = fp32(Σ f64(W[o,i])·f64(x[i])) for rows x [..., in], W [out, in]."""
    return dot64(x, w)


def quant_activation(x):
    """Dynamic per-row int8 quantization (MODEL.md §2.12, docs/NUMERICS.md): returns (codes as
    float64, s_x fp32 per row, zero-row mask).  x holds bf16 values in fp32."""
    x = np.asarray(x, dtype=F32)
    amax = np.max(np.abs(x), axis=-1)                       # exact
    zero = amax == 0
    s_x = (amax / F32(127.0)).astype(F32)                   # fp32 division
    safe = np.where(zero, F32(1.0), s_x).astype(F32)
    q = np.rint((x / safe[..., None]).astype(F32))          # fp32 division, ties to even
    q = np.clip(q, -127, 127).astype(F64)
    return q, s_x, zero


def quant_linear(x, wq, s_w):
    """W8A8/W4A8 dynamic linear: y = fp32(fp32(acc)·fp32(s_x·s_w)), acc exact.  wq: integer codes
    [out, in] (float64 or int), s_w: fp32 [out].  Returns fp32 (caller rounds to bf16)."""
    q, s_x, zero = quant_activation(x)
    acc = q @ np.asarray(wq, dtype=F64).T                   # exact: |acc| << 2^53
    scale = (s_x[..., None] * np.asarray(s_w, dtype=F32)).astype(F32)
    y = (acc.astype(F32) * scale).astype(F32)
    y[zero] = F32(0.0)
    return y


def rmsnorm(x, w, eps):
    """rmsnorm(x, w) = bf16(fp32(fp32(x·rs)·w)), rs = fp32(1/sqrt(f64(ss)/n + eps)), ss = fp32(Σ f64 x²)."""
    x = np.asarray(x, dtype=F32)
    n = x.shape[-1]
    ss = sumsq64(x)
    rs = f32(1.0 / np.sqrt(ss.astype(F64) / n + eps))
    return bf16(((x * rs[..., None]).astype(F32) * np.asarray(w, dtype=F32)).astype(F32))


def sigmoid64(z):
    z = np.asarray(z, dtype=F64)
    return 1.0 / (1.0 + np.exp(-z))


def topk_desc(scores, k):
    """Indices of the k largest scores per row, ties toward the lower index (stable sort of the
    negated scores), in selection order.  scores [..., n] fp32; -inf entries sort last."""
    order = np.argsort(-np.asarray(scores, dtype=F64), axis=-1, kind="stable")
    return order[..., :k]


# ------------------------------------------------------------------------------------------------
# the official runtime's activation numerics (CHECKPOINT.md §14, MODEL.md Appendix C): per 32
# inputs, E4M3 with a power-of-two scale.  Rounding is done against the table of every finite E4M3
# magnitude (nearest value, ties to the even code), not by bit manipulation as the engine does.

def _e4m3_magnitudes():
    codes = np.arange(0x7F)                                  # 0x00..0x7E: ascending magnitudes, 0x7F NaN
    e, m = codes >> 3, codes & 7
    return np.where(e == 0, np.ldexp(m.astype(F64), -9), np.ldexp((8 + m).astype(F64), e - 10))


E4M3_MAG = _e4m3_magnitudes()


def e4m3_round(t):
    """Non-negative float64 t -> the nearest E4M3 magnitude (ties to the even code), saturating at 448."""
    t = np.minimum(np.asarray(t, dtype=F64), 448.0)
    hi = np.clip(np.searchsorted(E4M3_MAG, t, side="left"), 1, len(E4M3_MAG) - 1)
    lo = hi - 1
    dl, dh = t - E4M3_MAG[lo], E4M3_MAG[hi] - t
    pick = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
    return E4M3_MAG[pick]


def e4m3_units(x):
    """Rows x [..., k] (bf16 values in fp32) -> (u int64 [..., k]: E4M3 value · 2^9, signed;
    kb int64 [..., ceil(k/32)]: the block's scale exponent).  amax floored at 1e-4; the exponent is
    read from the fp32 bits of amax · fp32(1/448) (Appendix C), rounded up when not a power of two."""
    x = np.asarray(x, dtype=F32)
    k = x.shape[-1]
    nb = (k + 31) // 32
    xp = np.zeros(x.shape[:-1] + (nb * 32,), dtype=F32)
    xp[..., :k] = x
    xb = xp.reshape(x.shape[:-1] + (nb, 32))
    amax = np.maximum(np.max(np.abs(xb), axis=-1), F32(1e-4)).astype(F32)
    v = (amax * (F32(1.0) / F32(448.0))).astype(F32)
    bits = np.ascontiguousarray(v).view(np.uint32).astype(np.int64)
    kb = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0)
    t = np.abs(xb.astype(F64)) * np.ldexp(1.0, -kb)[..., None]     # exact: a power-of-two scale
    u = (e4m3_round(t) * 512.0).astype(np.int64) * np.where(np.signbit(xb), -1, 1)
    return u.reshape(x.shape[:-1] + (nb * 32,))[..., :k], kb


def e4m3_fake(x):
    """The quantized rows as values (exact in bf16/fp32): u · 2^(kb - 9)."""
    u, kb = e4m3_units(x)
    k = u.shape[-1]
    scale = np.repeat(np.ldexp(1.0, kb - 9), 32, axis=-1)[..., :k]
    return (u.astype(F64) * scale).astype(F32)
