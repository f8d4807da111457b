#!/usr/bin/python3
"""Compares the engine's DSpark draft passes against the NumPy oracle (MODEL.md §4).

Runs `dsflash eval acceptance --trace` (greedy speculative decoding of one prompt: every step drafts
from the committed context, verifies, accepts, commits) and checks, for every verify step, that the
oracle's draft pass at the same anchor position — computed from scratch from the final committed
token sequence — gives the same proposals, the same Markov-corrected draft logits and the same
confidence logits.  Gates: proposals identical, logits and confidences bit-identical in at least
`--min-exact` of the rows and within relative error `--tol` everywhere (float64 sums in another
order may move a rare fp32 rounding).  Also checks that every anchor is the committed token at its
position.  Ends with one line "N passed, N failed".
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import Checkpoint  # noqa: E402
from draft import DraftOracle  # noqa: E402
from model import Oracle  # noqa: E402
from safetensors_np import SafeTensorsFile  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--prompt-len", type=int, default=40)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--min-exact", type=float, default=0.99)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    ids = np.random.default_rng([a.seed, a.prompt_len]).integers(3, 1000, a.prompt_len + 8 * a.steps + 16)
    tok_path, tr_path = os.path.join(a.tmp, "prompt.u32"), os.path.join(a.tmp, "draft_trace.st")
    ids.astype("<u4").tofile(tok_path)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(("PASS " if ok else "FAIL ") + (a.label + ": " if a.label else "") + what)
        if ok:
            passed += 1
        else:
            failed += 1

    cmd = [a.bin, "eval", "acceptance", "--model", a.model, "--tokens", tok_path, "--starts", str(a.prompt_len),
           "--steps", str(a.steps), "--kernels", "reference", "--trace", tr_path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, f"engine speculative run ({' '.join(cmd[1:3])}) exit {r.returncode} {r.stderr.strip()[-300:]}")
    if r.returncode != 0:
        print(f"{passed} passed, {failed} failed")
        return 1
    f = SafeTensorsFile(tr_path)
    tokens, pos = f.get("tokens").astype(np.int64), f.get("anchor_pos").astype(np.int64)
    drafts, logits, conf = f.get("drafts"), f.get("draft_logits"), f.get("conf")
    ck = Checkpoint(a.model)
    orc = Oracle(ck)
    dor = DraftOracle(orc, os.path.join(a.model, "config.json"))
    rings = dor.rings(tokens)
    same_drafts, exact_rows, rows, worst = 0, 0, 0, 0.0
    anchors_ok = True
    for j in range(len(pos)):
        P = int(pos[j]) - 1
        anchor = int(tokens[P + 1])
        d, lg, cf = dor.propose(rings, P, anchor)
        same_drafts += int(np.array_equal(d, drafts[j]))
        for i in range(len(d)):
            rows += 1
            eq = np.array_equal(lg[i].view(np.uint32), logits[j, i].view(np.uint32)) and \
                np.float32(cf[i]).view(np.uint32) == np.float32(conf[j, i]).view(np.uint32)
            exact_rows += int(eq)
            den = max(float(np.max(np.abs(lg[i]))), 1e-30)
            worst = max(worst, float(np.max(np.abs(lg[i].astype(np.float64) - logits[j, i])) / den),
                        abs(float(cf[i]) - float(conf[j, i])) / max(abs(float(cf[i])), 1e-30))
        if j + 1 < len(pos) and pos[j + 1] > len(tokens):
            anchors_ok = False
    print(f"  {len(pos)} draft passes, {rows} rows: proposals equal {same_drafts}/{len(pos)}, bit-identical rows "
          f"{exact_rows}/{rows}, max relative error {worst:.3e}")
    check(same_drafts == len(pos), "draft proposals equal the oracle's at every verify step")
    check(rows > 0 and exact_rows >= a.min_exact * rows, f"draft logits and confidences bit-identical in >= {a.min_exact:.0%} of rows")
    check(worst <= a.tol, f"draft logits within relative error {a.tol:g}")
    check(anchors_ok and len(pos) == a.steps, "every step's anchor lies in the committed sequence")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
