#!/usr/bin/env python3
"""Independent checks of `dsflash bench` / `bench-plot` outputs (JSON, CSV, prompt logs).

Usage: check_bench.py CHECK FILE [ARGS...]; exits 0 when the check holds, else prints why and exits 1.
The expected values come from TOOLS.md §4.4 (field names) and from the stub's scripted behaviour
(delays, counters, tokenizer), never from dsflash itself."""
import csv, json, sys

ROW_KEYS = {"conc", "ok", "fail", "prompt_tokens", "out_per_req", "per_stream_med", "per_stream_mean", "total_decode",
            "total_e2e", "ttft_med", "decode_wall", "e2e_wall", "accept_len", "accept_rate", "decode_step_ms", "speedup",
            "efficiency", "prefix_hit_tokens", "uniq2_med", "flags", "n_reps"}
TOP_KEYS = {"schema", "label", "base_url", "model", "started_utc", "prompt_tokens", "output_tokens", "repeats",
            "ignore_eos", "spec_tokens", "server", "calibration", "rows", "tool_version", "command_line"}


def fail(msg):
    print("  check failed: " + msg)
    sys.exit(1)


def near(name, got, lo, hi):
    if got is None or not (lo <= got <= hi):
        fail(f"{name} = {got}, expected in [{lo}, {hi}]")


def load(path):
    with open(path) as f:
        return json.load(f)


def shape(d, levels, prompt_tokens, output_tokens, repeats):
    missing = TOP_KEYS - d.keys()
    if missing:
        fail(f"top-level fields missing: {sorted(missing)}")
    if d["schema"] != "v41-bench/1":
        fail(f"schema {d['schema']}")
    if (d["prompt_tokens"], d["output_tokens"], d["repeats"]) != (prompt_tokens, output_tokens, repeats):
        fail("prompt/output/repeats not echoed")
    cal = d["calibration"]
    if set(cal) != {"exact", "n", "max_dev", "overlap_chars"} or cal["n"] != max(levels):
        fail(f"calibration {cal}")
    if [r["conc"] for r in d["rows"]] != levels:
        fail(f"row levels {[r['conc'] for r in d['rows']]} != {levels}")
    for r in d["rows"]:
        if ROW_KEYS - r.keys():
            fail(f"row fields missing: {sorted(ROW_KEYS - r.keys())}")
        if r["n_reps"] != repeats or r["out_per_req"] != output_tokens or r["prompt_tokens"] != prompt_tokens:
            fail(f"row {r['conc']}: n_reps/out_per_req/prompt_tokens wrong")
        for k in ("ttft_s", "tpot_ms", "itl_ms"):
            if set(r["latency"][k]) != {"p50", "p90", "p99"}:
                fail(f"latency.{k}")
        p = r["latency"]["ttft_s"]
        if not (p["p50"] <= p["p90"] <= p["p99"]):
            fail(f"ttft percentiles not ordered {p}")


def main():
    check, path, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    if check == "shape":  # levels prompt output repeats
        shape(load(path), [int(x) for x in rest[0].split(",")], int(rest[1]), int(rest[2]), int(rest[3]))
    elif check == "stub_timing":  # ttft itl: TTFT, TPOT, ITL and per-stream rate from the stub's delays
        d, ttft, itl = load(path), float(rest[0]), float(rest[1])
        for r in d["rows"]:
            near(f"c={r['conc']} ttft_med", r["ttft_med"], ttft, ttft + 0.25)
            # arrival jitter can make one gap slightly shorter than the stub's sleep: 3 ms of slack below
            near(f"c={r['conc']} itl p50 ms", r["latency"]["itl_ms"]["p50"], 1000 * itl - 3, 1000 * itl + 15)
            near(f"c={r['conc']} tpot p50 ms", r["latency"]["tpot_ms"]["p50"], 1000 * itl - 3, 1000 * itl + 15)
            near(f"c={r['conc']} per_stream_med", r["per_stream_med"], 1 / (itl + 0.015), 1 / (itl - 0.003))
            near(f"c={r['conc']} decode_step_ms", r["decode_step_ms"], r["accept_len"] * 1000 / r["per_stream_med"] - 1e-6,
                 r["accept_len"] * 1000 / r["per_stream_med"] + 1e-6)
            if r["ok"] != max(x["conc"] for x in d["rows"]) or r["fail"] != 0:
                fail(f"c={r['conc']} ok/fail {r['ok']}/{r['fail']}")
            near(f"c={r['conc']} uniq2_med", r["uniq2_med"], 0.999, 1.0)
    elif check == "accept":  # A accept_rate
        for r in load(path)["rows"]:
            near(f"c={r['conc']} accept_len", r["accept_len"], float(rest[0]) - 1e-9, float(rest[0]) + 1e-9)
            near(f"c={r['conc']} accept_rate", r["accept_rate"], float(rest[1]) - 1e-9, float(rest[1]) + 1e-9)
    elif check == "flags":  # conc flag present|absent
        rows = {r["conc"]: r for r in load(path)["rows"]}
        has = rest[1] in rows[int(rest[0])]["flags"]
        if has != (rest[2] == "present"):
            fail(f"c={rest[0]} flags {rows[int(rest[0])]['flags']}: '{rest[1]}' should be {rest[2]}")
    elif check == "degenerate":  # conc: flagged, uniq2 low, two samples of at most 300 characters
        r = {r["conc"]: r for r in load(path)["rows"]}[int(rest[0])]
        if "degenerate" not in r["flags"] or not r["uniq2_med"] < 0.5:
            fail(f"flags {r['flags']}, uniq2_med {r['uniq2_med']}")
        s = r.get("samples", [])
        if len(s) != 2 or not all(x.startswith(" la la") and len(x) <= 300 for x in s):
            fail(f"samples {s!r}")
    elif check == "field":  # dotted.path expected (JSON literal)
        v = load(path)
        for k in rest[0].split("."):
            v = v[int(k)] if isinstance(v, list) else v.get(k)
        if v != json.loads(rest[1]):
            fail(f"{rest[0]} = {v!r}, expected {rest[1]}")
    elif check == "speedup":  # speedup / efficiency defined from c=1
        rows = load(path)["rows"]
        one = next(r for r in rows if r["conc"] == 1)
        for r in rows:
            near("speedup", r["speedup"], r["total_decode"] / one["total_decode"] - 1e-9, r["total_decode"] / one["total_decode"] + 1e-9)
            near("efficiency", r["efficiency"], r["per_stream_med"] / one["per_stream_med"] - 1e-9,
                 r["per_stream_med"] / one["per_stream_med"] + 1e-9)
    elif check == "prompts":  # stub prompt log: target tokens, N distinct prompts, markers, no front matter
        target, n = int(rest[0]), int(rest[1])
        prompts = [json.loads(l) for l in open(path)]
        measured = [p for p in prompts if p.startswith("[req-")]
        if sorted(set(measured)) != sorted(set(measured[:n])) or len(set(measured)) != n:
            fail(f"{len(set(measured))} distinct measured prompts, expected {n}")
        for p in set(measured):
            if len(p) // 4 + 1 != target:
                fail(f"prompt of {len(p) // 4 + 1} stub tokens, expected {target}: {p[:40]!r}")
            if "Front matter" in p or "START OF THE CORPUS" in p:
                fail("front matter was not skipped")
        if not any(p.startswith("[warmup] ") for p in prompts):
            fail("no warm-up request")
        suffixes = {p.rsplit("\n\n", 1)[-1] for p in set(measured)}
        if n >= 2 and len(suffixes) < 2:
            fail(f"suffixes do not rotate: {suffixes}")
    elif check == "prompt_of":  # rid START END: the last prompt sent for request rid starts/ends so
        rid, start, end = int(rest[0]), rest[1], rest[2]
        mine = [json.loads(l) for l in open(path)]
        mine = [p for p in mine if p.startswith(f"[req-{rid:05d}] ")]
        if not mine or not mine[-1].startswith(start) or not mine[-1].endswith(end):
            fail(f"request {rid}: {mine[-1][:60]!r}...{mine[-1][-30:]!r}" if mine else f"request {rid} never sent")
    elif check == "csv":  # CSV columns and values equal the JSON files given after it
        rows = list(csv.DictReader(open(path)))
        if list(rows[0].keys()) != ["label", "conc", "per_stream_med", "total_decode", "ttft_med", "accept_len",
                                    "decode_step_ms"]:
            fail(f"CSV header {list(rows[0].keys())}")
        want = [(d["label"], r) for d in map(load, rest) for r in d["rows"]]
        if len(rows) != len(want):
            fail(f"{len(rows)} CSV rows, expected {len(want)}")
        for got, (label, r) in zip(rows, want):
            if got["label"] != label or int(got["conc"]) != r["conc"]:
                fail(f"CSV row {got} vs {label} c={r['conc']}")
            for k in ("per_stream_med", "total_decode", "ttft_med", "accept_len", "decode_step_ms"):
                if abs(float(got[k]) - r[k]) > 1e-5 * max(1, abs(r[k])):
                    fail(f"CSV {k} {got[k]} vs JSON {r[k]}")
    else:
        fail("unknown check " + check)


main()
