#!/usr/bin/python3
"""Logits of a float checkpoint versus the release quantized from it, through the NumPy oracle
(tests/oracle/model.py), plus the C engine's logits of the release from a `dsflash generate
--trace` file.

The oracle reads only the release layout, so the float model is presented to it as a "float
view": a directory whose index maps every float tensor of the --float-out checkpoint (quantizable
linears stay BF16, which the oracle runs as float linears) and whose Engram tables are the
release's int8 tables (the only tensors a float checkpoint cannot hand to the oracle directly; the
comparison therefore measures the W4A8/W8A8 linears' error).  Files are symlinked, never copied.

Modes:
  --float F --release R --view V [--trace T]   quantized vs float logits (and C vs oracle)
  --float F --float2 F2 --release R --release2 R2 --view V
                                               two float models that differ only in the QuaRot
                                               rotation (MODEL.md §3): their logits must agree
Prints the measured errors; exits 1 when a bound is exceeded.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from checkpoint import Checkpoint  # noqa: E402
from model import Oracle  # noqa: E402
from safetensors_np import SafeTensorsFile  # noqa: E402


def make_view(flt, rel, view):
    os.makedirs(view, exist_ok=True)
    with open(os.path.join(flt, "model.safetensors.index.json")) as fh:
        fwm = json.load(fh)["weight_map"]
    with open(os.path.join(rel, "quant_model_weights.safetensors.index.json")) as fh:
        rwm = json.load(fh)["weight_map"]
    wm = {}
    for name, f in fwm.items():
        if name.endswith(".engram.embed.weight"):
            continue
        wm[name] = f
    for name, f in rwm.items():
        if ".engram.embed." in name:
            wm[name] = f

    def link(src, name):
        dst = os.path.join(view, name)
        if not os.path.lexists(dst):
            os.symlink(os.path.abspath(src), dst)

    for f in set(fwm.values()):
        link(os.path.join(flt, f), f)
    link(os.path.join(rel, "engram_int8"), "engram_int8")
    link(os.path.join(flt, "optional"), "optional")
    with open(os.path.join(rel, "config.json")) as fh:
        cfg = json.load(fh)
    mapf = cfg.get("text_config", cfg).get("engram_token_map_file")
    if mapf:
        link(os.path.join(flt, mapf), mapf)
    link(os.path.join(rel, "config.json"), "config.json")
    with open(os.path.join(view, "quant_model_weights.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {}, "weight_map": wm}, fh)
    with open(os.path.join(view, "quant_model_description.json"), "w") as fh:
        json.dump({"version": "1.0.0", "model_quant_type": "W4A8_DYNAMIC", "group_size": 0, "metadata": {},
                   "optional": {"quarot": {"rotation_map": {"global_rotation": "optional/quarot.safetensors"}}}}, fh)
    return view


def rel_err(a, b):
    return float(np.linalg.norm((a - b).astype(np.float64)) / np.linalg.norm(b.astype(np.float64)))


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--float", required=True)
    ap.add_argument("--release", required=True)
    ap.add_argument("--view", required=True)
    ap.add_argument("--float2")
    ap.add_argument("--release2")
    ap.add_argument("--trace")
    ap.add_argument("--tokens", default="")
    ap.add_argument("--max-rel", type=float, default=0.5)
    a = ap.parse_args()
    ok = True
    if a.float2:
        v1 = make_view(a.float, a.release, os.path.join(a.view, "a"))
        v2 = make_view(a.float2, a.release2, os.path.join(a.view, "b"))
        toks = [int(t) for t in a.tokens.split(",")] if a.tokens else list(range(3, 67))
        l1 = Oracle(Checkpoint(v1)).forward(toks, want_hidden=False)["logits"]
        l2 = Oracle(Checkpoint(v2)).forward(toks, want_hidden=False)["logits"]
        e = rel_err(l1, l2)
        agree = float(np.mean(np.argmax(l1, axis=1) == np.argmax(l2, axis=1)))
        print(f"rotated vs un-rotated float model: logits rel error {e:.3e}, greedy agreement {agree:.3f} over {len(toks)} rows")
        if not (e < 0.05 and np.all(np.isfinite(l1))):
            print(f"FAIL rotation changed the model: rel error {e:.3e} >= 0.05")
            ok = False
        sys.exit(0 if ok else 1)

    view = make_view(a.float, a.release, a.view)
    if a.trace:
        tr = SafeTensorsFile(a.trace)
        toks = [int(t) for t in np.asarray(tr.get("tokens"))]
        lc = np.asarray(tr.get("logits"), dtype=np.float32)
    else:
        toks = [int(t) for t in a.tokens.split(",")] if a.tokens else list(range(3, 67))
        lc = None
    lf = Oracle(Checkpoint(view)).forward(toks, want_hidden=False)["logits"]
    lq = Oracle(Checkpoint(a.release)).forward(toks, want_hidden=False)["logits"]
    e = rel_err(lq, lf)
    agree = float(np.mean(np.argmax(lq, axis=1) == np.argmax(lf, axis=1)))
    print(f"quantized vs float model (oracle): logits rel error {e:.3e}, greedy agreement {agree:.3f} over {len(toks)} rows")
    if not (np.all(np.isfinite(lq)) and e < a.max_rel):
        print(f"FAIL quantized logits too far from the float model: {e:.3e} (bound {a.max_rel})")
        ok = False
    if lc is not None:
        ec = rel_err(lc, lq)
        ef = rel_err(lc, lf)
        agree_c = float(np.mean(np.argmax(lc, axis=1) == np.argmax(lf, axis=1)))
        print(f"C engine on the quantized release: rel error {ec:.3e} vs oracle (same release), {ef:.3e} vs float model; "
              f"greedy agreement with float {agree_c:.3f}")
        if not (np.all(np.isfinite(lc)) and ec < 0.05 and ef < a.max_rel):
            print("FAIL C engine logits out of bounds")
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
