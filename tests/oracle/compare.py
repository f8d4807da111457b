#!/usr/bin/python3
"""Compares the engine's greedy generation traces against the NumPy oracle.

For every prompt length it builds a deterministic pseudo-random prompt (ids in [3, 1000): no noise
or image ids), runs `dsflash generate --trace` once per chunk size, and checks the trace
(agreed format: tokens, generated, hidden.{l}, logits, metadata chunk/prompt_len) against one oracle
forward over the same token sequence — one-shot processing equals chunked and token-by-token
processing (MODEL.md §6.2, `index_keys = arch`), so a single oracle run serves every chunk size.

Modes:
  decisive  every per-layer hidden state and the logits within max relative error `--tol`
            (max|c − o| / max|o|), and every greedy token identical to the oracle's argmax
            (ties → lowest id) at row P−1+i;
  robust    (non-decisive fixtures, where near-ties make exact agreement impossible) the trace is
            well-formed and finite; errors and the greedy agreement rate are reported, not gated.

Each (prompt, chunk) run is one test case; per-layer max errors are printed for every case.  In
decisive mode the oracle also measures, once per token sequence, the smallest relative gap between
the k-th and (k+1)-th score of every router, indexer and candidate-block choice, and that the
fixture is decisive (all gaps ≥ --min-margin) is one more case: a near-tie would make a 1e-4
comparison meaningless, so the generator's claim is checked independently.
Ends with one line "N passed, N failed".
"""
import argparse
import os
import shlex
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numerics as nx  # noqa: E402
from checkpoint import Checkpoint  # noqa: E402
from model import Oracle  # noqa: E402
from safetensors_np import SafeTensorsFile  # noqa: E402


def prompt_ids(seed, length):
    return np.random.default_rng([seed, length]).integers(3, 1000, length).tolist()


def rel_err(c, o):
    c, o = np.asarray(c, np.float64), np.asarray(o, np.float64)
    den = np.max(np.abs(o))
    return float(np.max(np.abs(c - o)) / den) if den > 0 else float(np.max(np.abs(c - o)))


def read_trace(path, cfg, P, G, K):
    """Load and structurally check a trace; returns (tokens, generated, hidden list, logits)."""
    f = SafeTensorsFile(path)
    T = P + G - 1
    want = {"tokens": ("I32", (T,)), "generated": ("I32", (G,)), "logits": ("F32", (T, cfg.vocab_size))}
    for l in range(cfg.n_layers):
        want[f"hidden.{l}"] = ("BF16", (T, cfg.hc, cfg.dim))
    for name, (dt, shape) in want.items():
        if name not in f:
            raise ValueError(f"{path}: tensor {name} missing")
        info = f.info(name)
        if info.dtype != dt or info.shape != shape:
            raise ValueError(f"{path}: {name} is {info.dtype}{list(info.shape)}, expected {dt}{list(shape)}")
    md = f.metadata
    if md.get("chunk") != str(K) or md.get("prompt_len") != str(P):
        raise ValueError(f"{path}: __metadata__ {md}, expected chunk={K} prompt_len={P}")
    hidden = [nx.bf16_bits_to_f32(f.get(f"hidden.{l}")).reshape(T, cfg.hc, cfg.dim) for l in range(cfg.n_layers)]
    return (np.array(f.get("tokens"), np.int64), np.array(f.get("generated"), np.int64), hidden,
            np.array(f.get("logits"), np.float32))


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--bin", required=True, help="the dsflash binary (a command line: split like a shell)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--prompt-lens", default="100,157,233,300")
    ap.add_argument("--chunks", default="1,7,16,64")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mode", choices=("decisive", "robust"), default="decisive")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--min-margin", type=float, default=1e-3,
                    help="decisive mode: smallest relative top-k margin the fixture must show")
    ap.add_argument("--label", default="")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed for one generate run")
    ap.add_argument("--kernels", default="reference",
                    help="engine kernel family: the 1e-4 contract binds the reference path (docs/NUMERICS.md)")
    ap.add_argument("--activations", default="int8", choices=("int8", "e4m3"),
                    help="official layout: the engine's and the oracle's activation numerics")
    ap.add_argument("--numerics", default="exact", choices=("exact", "fast"),
                    help="engine numerics tier: the oracle contract binds the exact tier (generate defaults to fast)")
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    t0 = time.time()
    oracle = Oracle(Checkpoint(a.model, activations=a.activations))
    cfg = oracle.cfg
    cache = {}
    passed = failed = 0
    agree_tot = agree_n = 0
    tag = f"[{a.label}] " if a.label else ""
    for P in [int(v) for v in a.prompt_lens.split(",")]:
        prompt = prompt_ids(a.seed, P)
        for K in [int(v) for v in a.chunks.split(",")]:
            name = f"{tag}{a.mode} P={P} chunk={K} kernels={a.kernels}"
            trace = os.path.join(a.tmp, f"trace_P{P}_K{K}.safetensors")
            if os.path.exists(trace):
                os.remove(trace)
            cmd = shlex.split(a.bin) + ["generate", "--ignore-eos", "--model", a.model, "--prompt-ids", ",".join(map(str, prompt)),
                                        "--max-tokens", str(a.gen), "--chunk", str(K), "--trace", trace,
                                        "--kernels", a.kernels, "--numerics", a.numerics,
                                        "--activations", a.activations]
            try:
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=a.timeout)
            except (OSError, subprocess.TimeoutExpired) as e:
                print(f"FAIL {name}: cannot run {cmd[0]}: {e}")
                failed += 1
                continue
            if r.returncode != 0:
                print(f"FAIL {name}: dsflash generate exited {r.returncode}: {r.stderr.strip()[-600:]}")
                failed += 1
                continue
            try:
                tokens, gen, hidden, logits = read_trace(trace, cfg, P, a.gen, K)
            except ValueError as e:
                print(f"FAIL {name}: {e}")
                failed += 1
                continue
            problems = []
            if tokens[:P].tolist() != prompt:
                problems.append("trace tokens do not start with the prompt")
            if tokens[P:].tolist() != gen[:-1].tolist():
                problems.append("trace tokens after the prompt are not the generated tokens fed back")
            key = tokens.tobytes()
            if key not in cache:
                cache[key] = oracle.forward(tokens)
                m = cache[key]["margins"]
                print(f"     {tag}oracle forward over {len(tokens)} rows; smallest relative selection margins: "
                      + ", ".join(f"{k} {v:.1e}" for k, v in sorted(m.items())))
                if a.mode == "decisive":
                    # the oracle's own measurement of the fixture's decisiveness (MODEL.md §8)
                    low = [f"{k} {v:.1e}" for k, v in sorted(m.items()) if not v >= a.min_margin]
                    dname = f"{tag}fixture decisive at P={P} (oracle margins >= {a.min_margin:g})"
                    if low:
                        print(f"FAIL {dname}: " + ", ".join(low))
                        failed += 1
                    else:
                        print(f"ok   {dname}")
                        passed += 1
            ref = cache[key]
            errs = [rel_err(c, o) for c, o in zip(hidden, ref["hidden"])]
            lerr = rel_err(logits, ref["logits"])
            # MODEL.md §2.11: the noise token is never emitted (its logit counts as -inf)
            gl = np.array(ref["logits"][P - 1:P - 1 + a.gen], copy=True)
            if 0 <= cfg.noise_id < gl.shape[1]:
                gl[:, cfg.noise_id] = -np.inf
            o_greedy = np.argmax(gl, axis=1)
            same = o_greedy == gen
            first_diff = int(np.argmin(same)) if not same.all() else -1
            agree_tot += int(same.sum())
            agree_n += a.gen
            finite = all(np.all(np.isfinite(h)) for h in hidden) and bool(np.all(np.isfinite(logits)))
            print(f"     {name}: max rel err per layer " + " ".join(f"L{l}={e:.2e}" for l, e in enumerate(errs))
                  + f" logits={lerr:.2e}; greedy {int(same.sum())}/{a.gen} identical"
                  + (f" (first difference at token {first_diff})" if first_diff >= 0 else ""))
            if not finite:
                problems.append("non-finite values in the trace")
            if a.mode == "decisive":
                bad = [f"hidden.{l} {e:.2e}" for l, e in enumerate(errs) if not e <= a.tol]
                if not lerr <= a.tol:
                    bad.append(f"logits {lerr:.2e}")
                if bad:
                    problems.append(f"errors above {a.tol:g}: " + ", ".join(bad))
                if first_diff >= 0:
                    problems.append(f"greedy token {first_diff}: engine {gen[first_diff]}, oracle "
                                    f"{o_greedy[first_diff]}")
            if problems:
                print(f"FAIL {name}: " + "; ".join(problems))
                failed += 1
            else:
                print(f"ok   {name}")
                passed += 1
    if agree_n:
        print(f"{tag}greedy agreement with the oracle: {agree_tot}/{agree_n} = {agree_tot / agree_n:.3f} "
              f"({time.time() - t0:.1f} s)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
