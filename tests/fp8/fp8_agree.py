"""Direct load of the official FP8/MXFP4 layout vs the same model converted by `quantize --src-format fp8`.

Both runs see one prompt (teacher forced, `generate --max-tokens 1 --trace`), and their logits are
compared position by position: relative L2 error and top-1 agreement.  The converted release adds
the W4A8 quantizer's error (int4 experts, int8 dense) on top of the direct load's exact decoding, so
its error is measured against a yardstick from the same run: the W4A8 release that mkmodel writes
from the very same float weights (unrotated) — that is what "the quantizer's error" is on this
model.  Prints the figures and "N passed, N failed"."""
import argparse
import subprocess
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/oracle")
from safetensors_np import SafeTensorsFile  # noqa: E402


def logits(bin_, model, ids, tmp, tag):
    trace = f"{tmp}/{tag}.trace.safetensors"
    r = subprocess.run([bin_, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "1",
                        "--numerics", "exact", "--trace", trace], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"generate on {model} failed: {r.stderr.strip()[-400:]}")
    return np.array(SafeTensorsFile(trace).get("logits"), np.float64)


def compare(a, b):
    rel = np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(a, axis=1), 1e-30)
    return float(np.mean(rel)), float(np.mean(np.argmax(a, 1) == np.argmax(b, 1)))


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--official", required=True)
    ap.add_argument("--converted", required=True)
    ap.add_argument("--w4a8", required=True, help="W4A8 release written by mkmodel from the same float weights")
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--len", type=int, default=120)
    a = ap.parse_args()
    ids = np.random.default_rng([7, a.len]).integers(3, 1000, a.len).tolist()
    passed = failed = 0
    try:
        d = logits(a.bin, a.official, ids, a.tmp, "direct")
        c = logits(a.bin, a.converted, ids, a.tmp, "converted")
        w = logits(a.bin, a.w4a8, ids, a.tmp, "w4a8")
    except Exception as e:  # the comparison could not be made: a failure
        print(f"FAIL runs: {e}")
        print("0 passed, 1 failed")
        return 1
    e_conv, t_conv = compare(d, c)
    e_ref, t_ref = compare(d, w)
    print(f"     logits over {a.len} prompt positions, exact tier: direct vs converted rel L2 {e_conv:.4f}, top-1 agree {t_conv:.3f}; "
          f"direct vs W4A8-from-float (quantizer yardstick) rel L2 {e_ref:.4f}, top-1 agree {t_ref:.3f}")
    checks = [("converted within 2x the quantizer's own error (+0.01)", e_conv <= 2 * e_ref + 0.01),
              ("converted top-1 agreement within 0.1 of the yardstick's", t_conv >= t_ref - 0.1),
              ("the two loads are not trivially identical (the comparison measures something)", e_conv > 0)]
    for name, ok in checks:
        print(("ok   " if ok else "FAIL ") + name)
        passed, failed = passed + ok, failed + (not ok)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
