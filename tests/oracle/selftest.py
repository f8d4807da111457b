#!/usr/bin/python3
"""Checks of the oracle itself, runnable without the engine.

Each check compares the oracle against something it was not derived from: constants printed in
MODEL.md (Engram multipliers, primes and offsets, YaRN band), an independent scalar re-derivation
(bf16 rounding via exact rational arithmetic, int4 unpacking, quantized linears in Python integers,
top-k/candidate selection with sorted()), structural properties (Sinkhorn output nearly doubly
stochastic, routing weights summing to the routed scale, causality: the rows of a prefix are
bit-identical to the same rows of the whole sequence), and the QuaRot un-rotation (a gate computed
from B^T-rotated copies equals the gate of the unrotated copies).

usage: selftest.py --tmp DIR     (writes a random tiny fixture under DIR)
Ends with one line "N passed, N failed".
"""
import argparse
import os
import struct
import sys
import traceback
from fractions import Fraction

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint  # noqa: E402
import engram_hash  # noqa: E402
import make_tiny  # noqa: E402
import model  # noqa: E402
import numerics as nx  # noqa: E402
import safetensors_np as st  # noqa: E402

RESULTS = []


def case(fn):
    RESULTS.append(fn)
    return fn


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


# ------------------------------------------------------------------------------------------------ constants

@case
def engram_multipliers_match_model_md():
    exp = {  # MODEL.md §2.10.2 (V_c = 99092) and §8 (tiny V_c = 700, mini layer 6)
        (1, 99092): [76632096046245, 4839876093313, 35959672319349, 73987337458391],
        (14, 99092): [67716810739261, 51510806800915, 30921347202721, 82619226485591],
        (1, 700): [10848039516306619, 685132859769461, 5090451213527091, 10473647490610037],
        (2, 700): [10830397415046839, 5251565313253021, 3205963898546285, 10110859572717759],
        (6, 99092): [39757161197093, 90288823459075, 10790497458921, 26965969153235],
    }
    for (layer, vc), want in exp.items():
        got = engram_hash.multipliers(layer, vc, 4)
        check(got == want, f"layer {layer} V_c {vc}: {got} != {want}")
    check(engram_hash.multiplier_bound(99092) == 46539438283891, "bound for V_c 99092")


@case
def engram_primes_and_offsets_match_model_md():
    tiny = engram_hash.primes_and_offsets(2, 4, 2, 1000)
    check(tiny[0][0] == [1009, 1013, 1019, 1021, 1031, 1033], f"tiny layer 1 primes {tiny[0][0]}")
    check(tiny[1][0] == [1039, 1049, 1051, 1061, 1063, 1069], f"tiny layer 2 primes {tiny[1][0]}")
    check([sum(p) for p, _ in tiny] == [6126, 6332], "tiny sums")
    v41 = engram_hash.primes_and_offsets(2, 4, 8, 16000000)
    check(v41[0][0][:4] == [16000057, 16000079, 16000081, 16000097] and v41[0][0][-1] == 16000463, "V4.1 layer 1")
    check(v41[1][0][0] == 16000477 and v41[1][0][-1] == 16000889, "V4.1 layer 14")
    check([sum(p) for p, _ in v41] == [384006168, 384016682], "V4.1 sums")
    check(v41[0][1][:4] == [0, 16000057, 32000136, 48000217] and v41[0][1][-1] == 368005705, "V4.1 layer 1 offsets")
    check(v41[1][1][-1] == 368015793 and v41[1][1][12] == 192007016, "V4.1 layer 14 offsets")
    mini = engram_hash.primes_and_offsets(2, 4, 8, 50000)
    check(mini[0][0][0] == 50021 and mini[1][0][-1] == 50513, "mini first/last prime")


@case
def engram_row_ids_in_range_and_padded():
    mults, (primes, offs) = engram_hash.multipliers(1, 700, 4), engram_hash.primes_and_offsets(1, 4, 2, 1000)[0]
    cls = [5, 699, 0, 17, 42, 5, 5]
    rows = engram_hash.row_ids(cls, 2, mults, primes, offs, 4, 2)
    for p, r in enumerate(rows):
        for c, v in enumerate(r):
            check(offs[c] <= v < offs[c] + primes[c], f"row {p} col {c} = {v} outside its prime's range")
    # position 0: history [5, pad, pad, pad] computed by hand
    acc = 5 * mults[0] ^ 2 * mults[1]
    check(rows[0][0] == acc % primes[0] and rows[0][1] == acc % primes[1] + offs[1], "position 0, 2-gram")
    acc ^= 2 * mults[2]
    check(rows[0][2] == acc % primes[2] + offs[2], "position 0, 3-gram")


@case
def yarn_band_matches_model_md():
    t = model.RopeTable(16, 160000.0, (16.0, 65536, 32.0, 1.0))
    check((t.low, t.high) == (3, 7), f"tiny band {(t.low, t.high)} != (3, 7)")
    t = model.RopeTable(64, 160000.0, (16.0, 65536, 32.0, 1.0))
    check((t.low, t.high) == (15, 25), f"V4.1 band {(t.low, t.high)} != (15, 25)")
    base = model.RopeTable(64, 160000.0)
    check(np.array_equal(t.freq[:16], base.freq[:16]), "pairs below low keep their frequency")
    check(np.array_equal(t.freq[25:], (base.freq[25:] / np.float32(16)).astype(np.float32)), "pairs >= high / 16")


# ------------------------------------------------------------------------------------------------ numerics

def _bf16_exact(x):
    """Independent bf16 rounding through exact rationals (round half to even), for finite x."""
    if x == 0 or not np.isfinite(x):
        return np.float32(x)
    fx = Fraction(float(x))
    e = int(np.floor(np.log2(abs(float(x)))))
    if Fraction(2) ** e > abs(fx):
        e -= 1
    elif Fraction(2) ** (e + 1) <= abs(fx):
        e += 1
    ulp = Fraction(2) ** (max(e, -126) - 7)
    q = round(fx / ulp)                           # Python rounds halves to even
    v = np.copysign(float(q * ulp), float(x))     # a value that rounds to zero keeps its sign
    return np.float32(v) if abs(v) < 3.4e38 else np.float32(np.copysign(np.inf, v))


@case
def bf16_rounding_matches_exact_rationals():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32)
    ties = (bits & np.uint32(0xFFFF0000)) | np.uint32(0x8000)         # exact halfway cases
    xs = np.concatenate([bits, ties]).view(np.float32)
    xs = xs[np.isfinite(xs)]
    got = nx.bf16(xs)
    want = np.array([_bf16_exact(x) for x in xs], dtype=np.float32)
    bad = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
    check(bad.size == 0, f"{bad.size} mismatches, first x={xs[bad[0]] if bad.size else None!r}")
    check(nx.bf16(np.float32(1 + 2 ** -8)) == 1.0 and nx.bf16(np.float32(1 + 3 * 2 ** -8)) == 1 + 2 ** -6, "ties")
    n = nx.bf16(np.array([np.nan, np.inf, -np.inf], dtype=np.float32))
    check(np.isnan(n[0]) and n[1] == np.inf and n[2] == -np.inf, "nan/inf")


@case
def quant_linear_matches_integer_arithmetic():
    rng = np.random.default_rng(2)
    x = nx.bf16(rng.standard_normal((5, 48)).astype(np.float32))
    x[3] = 0.0
    codes = rng.integers(-127, 128, (7, 48))
    s_w = rng.random(7).astype(np.float32) * 0.01
    got = nx.quant_linear(x, codes, s_w)
    for r in range(5):
        amax = max(abs(float(v)) for v in x[r])
        for o in range(7):
            if amax == 0:
                check(got[r, o] == 0, "zero row")
                continue
            s_x = np.float32(np.float32(amax) / np.float32(127))
            q = [int(np.clip(np.rint(np.float32(np.float32(v) / s_x)), -127, 127)) for v in x[r]]
            acc = sum(qi * int(c) for qi, c in zip(q, codes[o]))
            want = np.float32(np.float32(acc) * np.float32(s_x * s_w[o]))
            check(got[r, o] == want, f"row {r} out {o}: {got[r, o]} != {want}")


@case
def int4_unpack_low_nibble_is_even_row():
    packed = np.array([[0x7F, 0x08], [0x1E, 0xF0]], dtype=np.uint8).view(np.int8)
    codes = checkpoint.unpack_int4(packed, 3)
    want = np.array([[-1, -8], [7, 0], [-2, 0]])
    check(np.array_equal(codes, want), f"{codes.tolist()} != {want.tolist()}")


@case
def sinkhorn_is_nearly_doubly_stochastic():
    class C:
        norm_eps, hc_eps, sinkhorn_iters = 1e-20, 1e-6, 20
    rng = np.random.default_rng(3)
    X = nx.bf16(rng.standard_normal((6, 4, 64)).astype(np.float32))
    fn = (rng.standard_normal((24, 256)) * 0.1).astype(np.float32)
    pre, post, Cm = model.hc_mixes(X, fn, rng.standard_normal(24).astype(np.float32),
                                   np.ones(3, np.float32), C)
    check(np.all(np.abs(Cm.sum(axis=1) - 1) < 1e-4), "column sums")
    check(np.all(np.abs(Cm.sum(axis=2) - 1) < 1e-2), "row sums")
    check(np.all((pre > 0) & (pre < 1.01) & (post > 0) & (post < 2)), "pre/post ranges")


def _scalar_topk(scores, k):
    idx = [i for i in range(len(scores)) if scores[i] != -np.inf]
    idx.sort(key=lambda i: (-float(scores[i]), i))
    return sorted(idx[:k])


@case
def indexer_selection_matches_scalar_rederivation():
    class Cfg:
        cand_bs, cand_blocks = 4, 3
    o = model.Oracle.__new__(model.Oracle)
    o.cfg, o.margins = Cfg, {}
    rng = np.random.default_rng(4)
    T, N = 40, 40
    I = np.round(rng.standard_normal((T, N)), 1).astype(np.float32)   # many ties on purpose
    n_vis = np.arange(T) + 1
    I = np.where(np.arange(N)[None, :] < n_vis[:, None], I, -np.inf).astype(np.float32)
    cand = o.candidates(I, n_vis)
    for t in range(T):
        nv = int(n_vis[t])
        nb = -(-nv // 4)
        best = [max(float(I[t, s]) for s in range(b * 4, min(nv, b * 4 + 4))) for b in range(nb)]
        best[(nv - 1) // 4] = np.inf
        keep = sorted(range(nb), key=lambda b: (-best[b], b))[:3]
        want = [s for s in range(nv) if s // 4 in keep]
        check(list(np.nonzero(cand[t])[0]) == want, f"row {t}: candidates differ")
        masked = np.where(cand[t], I[t], -np.inf)
        got = np.sort(nx.topk_desc(masked, min(8, nv))[:min(8, nv)])
        check(list(got) == _scalar_topk(masked, 8), f"row {t}: top-k differs")


# ------------------------------------------------------------------------------------------------ files

@case
def safetensors_round_trip_and_rejections(tmp):
    p = os.path.join(tmp, "rt.safetensors")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([-3, 5], dtype=np.int8)
    st.write(p, {"a": ("F32", a), "b": ("I8", b)}, metadata={"k": "v"})
    f = st.SafeTensorsFile(p)
    check(np.array_equal(f.get("a"), a) and np.array_equal(f.get("b"), b) and f.metadata == {"k": "v"}, "round trip")
    bad = os.path.join(tmp, "bad.safetensors")
    for hdr, why in ((b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', "size mismatch"),
                     (b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                      b'"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}', "overlap"),
                     (b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', "truncated"),
                     (b'{"a":1,"a":2}', "duplicate")):
        with open(bad, "wb") as fh:
            fh.write(struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8)
        try:
            st.SafeTensorsFile(bad)
            check(False, f"{why} accepted")
        except st.FormatError:
            pass


@case
def fixture_reads_back_through_index_and_parts(tmp):
    ck = checkpoint.Checkpoint(os.path.join(tmp, "tiny"))
    check(ck.cfg.roles[2]["kind"] == "FULL" and ck.cfg.roles[3]["kind"] == "REUSE"
          and ck.cfg.roles[6]["kind"] == "REINDEX" and ck.cfg.roles[6]["uses_candidates"]
          and ck.cfg.roles[4]["cand_source"], "tiny role table (MODEL.md §8)")
    codes, scales = ck.engram_table(2)                 # layer 2's table exists only as split parts
    check(codes.shape == (6332, 32) and scales.shape == (6332, 1), f"parts table shape {codes.shape}")
    B = ck.rotation_block()
    check(B is not None and np.allclose(B.T.astype(np.float64) @ B, np.eye(32), atol=1e-6), "rotation block")
    lin = ck.linear("layers.0.ffn.experts.3.w2")
    check(lin.label == "W4A8_DYNAMIC" and lin.codes.shape == (128, 64) and lin.codes.min() >= -8, "W4A8 decode")


# ------------------------------------------------------------------------------------------------ forward

@case
def causal_prefix_rows_are_bit_identical(tmp):
    o = model.Oracle(checkpoint.Checkpoint(os.path.join(tmp, "tiny")))
    toks = np.random.default_rng(6).integers(3, 1000, 90)
    full = o.forward(toks)
    for T in (37, 64):       # odd and even prefix ends (ratio-2 groups), past window, top-k and blocks
        part = o.forward(toks[:T])
        for l in range(len(full["hidden"])):
            check(np.array_equal(part["hidden"][l].view(np.uint32), full["hidden"][l][:T].view(np.uint32)),
                  f"prefix {T}: hidden.{l} differs")
        check(np.array_equal(part["logits"], full["logits"][:T]), f"prefix {T}: logits differ")
    check(all(np.all(np.isfinite(h)) for h in full["hidden"]) and np.all(np.isfinite(full["logits"])), "finite")


@case
def routing_weights_sum_to_routed_scale(tmp):
    o = model.Oracle(checkpoint.Checkpoint(os.path.join(tmp, "tiny")))
    o.margins = {}
    u = nx.bf16(np.random.default_rng(7).standard_normal((9, o.cfg.dim)).astype(np.float32))
    sel, w = o.router(o.layers[3], u)
    check(np.all(np.abs(w.astype(np.float64).sum(axis=1) - 1.5) < 1e-5), f"routing weight sums {w.sum(axis=1)}")
    check(all(len(set(r)) == o.cfg.n_active for r in sel.tolist()), "distinct experts per row")


@case
def engram_gate_unrotates_the_copies(tmp):
    o = model.Oracle(checkpoint.Checkpoint(os.path.join(tmp, "tiny")))
    L = o.layers[1]
    rng = np.random.default_rng(8)
    T, HC, D = 5, o.cfg.hc, o.cfg.dim
    X = rng.standard_normal((T, HC, D)).astype(np.float32)
    kv = nx.bf16(rng.standard_normal((T, (HC + 1) * D)).astype(np.float32))
    Xrot = np.einsum("ji,tkbj->tkbi", o.B.astype(np.float64), X.reshape(T, HC, D // 32, 32)).reshape(T, HC, D)
    g_rot = o.engram_gate(L, Xrot.astype(np.float32), kv)
    o.gate_unrotate = False
    g_plain = o.engram_gate(L, X, kv)
    g_wrong = o.engram_gate(L, Xrot.astype(np.float32), kv)
    check(np.max(np.abs(g_rot - g_plain)) < 1e-5, f"un-rotated gate differs by {np.max(np.abs(g_rot - g_plain))}")
    check(np.max(np.abs(g_wrong - g_plain)) > 1e-3, "the rotation has no effect: test is vacuous")


def _compare(tmp, perturb):
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    gen = f"{sys.executable} {os.path.join(here, 'oracle_generate.py')}" + (f" --perturb {perturb}" if perturb else "")
    r = subprocess.run([sys.executable, os.path.join(here, "compare.py"), "--bin", gen, "--model",
                        os.path.join(tmp, "tiny"), "--tmp", os.path.join(tmp, "cmp"), "--prompt-lens", "37",
                        "--chunks", "5", "--gen", "3", "--min-margin", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


@case
def comparison_harness_accepts_an_exact_trace(tmp):
    rc, out = _compare(tmp, "")
    check(rc == 0 and "2 passed, 0 failed" in out, f"rc {rc}: {out[-400:]}")


@case
def comparison_harness_rejects_one_bf16_step_and_one_token(tmp):
    for what, expect in (("hidden.3", "hidden.3"), ("logits", "logits"), ("token", "greedy token 2")):
        rc, out = _compare(tmp, what)
        check(rc == 1 and "1 passed, 1 failed" in out and expect in out, f"{what} not caught: {out[-400:]}")


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    make_tiny.build(os.path.join(a.tmp, "tiny"), 11, split_engram=True)
    passed = failed = 0
    for fn in RESULTS:
        try:
            if fn.__code__.co_argcount:
                fn(a.tmp)
            else:
                fn()
            print(f"ok   {fn.__name__}")
            passed += 1
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the suite
            print(f"FAIL {fn.__name__}: {e}")
            if not isinstance(e, Failed):
                traceback.print_exc()
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
