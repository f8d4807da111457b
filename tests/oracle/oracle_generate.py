#!/usr/bin/python3
"""The oracle behind the `dsflash generate --trace` command line, used to test the comparison
harness itself (compare.py): with no perturbation its traces must pass, and a perturbation of one
value by one bf16 step, or one changed greedy token, must fail.  It generates greedily by re-running
the whole forward for every new token (the oracle has no cache; fine for the short sequences the
self-test uses) and writes the agreed trace format.

usage: oracle_generate.py generate --model DIR --prompt-ids a,b,c --max-tokens G --chunk K
                          --trace OUT [--perturb hidden.L|logits|token]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402
from checkpoint import Checkpoint  # noqa: E402
from model import Oracle  # noqa: E402


def greedy(oracle, prompt, n):
    """n greedy tokens (ties → lowest id) and the forward over prompt + generated[:-1]."""
    toks = list(prompt)
    gen = []
    for _ in range(n):
        r = oracle.forward(toks, want_hidden=False)
        last = np.array(r["logits"][-1], copy=True)
        if 0 <= oracle.cfg.noise_id < last.shape[0]:
            last[oracle.cfg.noise_id] = -np.inf  # MODEL.md §2.11: never emitted
        gen.append(int(np.argmax(last)))
        toks.append(gen[-1])
    return gen, oracle.forward(toks[:-1])


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("command", choices=("generate",))
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--chunk", type=int, required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--perturb", default="")
    ap.add_argument("--kernels", default="reference")
    ap.add_argument("--numerics", default="exact", choices=("exact",))  # the oracle is the exact tier
    ap.add_argument("--ignore-eos", action="store_true")  # the oracle never stops early
    ap.add_argument("--activations", default="int8", choices=("int8", "e4m3"))
    a = ap.parse_args()
    prompt = [int(v) for v in a.prompt_ids.split(",")]
    o = Oracle(Checkpoint(a.model, activations=a.activations))
    gen, r = greedy(o, prompt, a.max_tokens)
    tokens = np.array(prompt + gen[:-1], np.int32)
    hidden = [h.copy() for h in r["hidden"]]
    logits = r["logits"].copy()
    if a.perturb.startswith("hidden."):
        h = hidden[int(a.perturb.split(".")[1])]
        i = np.unravel_index(np.argmax(np.abs(h)), h.shape)
        h[i] = h[i] * np.float32(1 + 2 ** -7)          # one bf16 step at the largest element
    elif a.perturb == "logits":
        i = np.unravel_index(np.argmax(np.abs(logits)), logits.shape)
        logits[i] *= np.float32(1 + 1e-3)
    elif a.perturb == "token":
        gen[-1] = (gen[-1] + 1) % o.cfg.vocab_size
    tensors = {"tokens": ("I32", tokens), "generated": ("I32", np.array(gen, np.int32))}
    for l, h in enumerate(hidden):
        tensors[f"hidden.{l}"] = ("BF16", (np.ascontiguousarray(h).view(np.uint32) >> 16).astype(np.uint16))
    tensors["logits"] = ("F32", logits)
    st.write(a.trace, tensors, metadata={"chunk": str(a.chunk), "prompt_len": str(len(prompt))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
