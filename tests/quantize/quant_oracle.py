#!/usr/bin/python3
"""Independent NumPy check of a release written by `dsflash quantize` / `dsflash mkmodel`
against the float checkpoint it was made from (TOOLS.md §3.2–§3.5, CHECKPOINT.md §1–§11).

Everything is recomputed from the float weights with NumPy, written from the spec text, not from
the C code: the label plan (§3.2) with its own name patterns, W8A8 min-max, the W4A8 "ssz" search
over 10 clipping ratios (ties to the larger ratio) with output-dimension nibble packing and
scale_bias, the Engram int8 conversion with the frexp exponent rule, and the un-rotated draft
vocabulary copies.  Every release tensor must equal the recomputed bytes exactly.  The structural
rules are checked as well: index coverage and total_size, description labels for every written
tensor, Engram files with data at byte 112 and one tensor, the [1,1] engram_extra placeholders,
the mtpq manifest (schema, shards that exist), quant_manifest error statistics, PARTS.sha256.

usage: quant_oracle.py --float DIR --release DIR   (prints one line per check; exit 1 on failure)
"""
import argparse
import hashlib
import json
import math
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from safetensors_np import SafeTensorsFile  # noqa: E402

FAILS = []
RMSE = {}


def fail(msg):
    FAILS.append(msg)
    print("FAIL", msg)


def widen(dtype, a):
    if dtype == "F32":
        return np.asarray(a, dtype=np.float32)
    if dtype == "BF16":
        return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return np.asarray(a, dtype=np.uint16).view(np.float16).astype(np.float32)
    raise ValueError(dtype)


class Dir:
    """Tensors of a directory through its index (paths relative to the directory)."""

    def __init__(self, path, index):
        self.path = path
        with open(os.path.join(path, index)) as fh:
            self.index = json.load(fh)
        self.wm = self.index["weight_map"]
        self.files = {}

    def file(self, rel):
        if rel not in self.files:
            self.files[rel] = SafeTensorsFile(os.path.join(self.path, rel))
        return self.files[rel]

    def info(self, name):
        return self.file(self.wm[name]).info(name)

    def raw(self, name):
        return self.file(self.wm[name]).get(name)


# ------------------------------------------------------------------------------------------- plan
W4 = re.compile(r"^(layers|mtp)\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$")
W8 = re.compile(r"^(layers|mtp)\.\d+\.(attn\.(wq_a|wq_b|wkv|indexer\.wq_b)|ffn\.shared_experts\.w[123])\.weight$")
ENGRAM = re.compile(r"^layers\.(\d+)\.engram\.embed\.weight$")


def label(name):
    if W4.match(name):
        return "W4A8_DYNAMIC"
    if W8.match(name):
        return "W8A8_DYNAMIC"
    if ENGRAM.match(name):
        return "ENGRAM"
    return "FLOAT"


# ------------------------------------------------------------------------------------- quantizers
def q_w8(w):
    m = np.max(np.abs(w), axis=1)
    s = (m / np.float32(127.0)).astype(np.float32)
    zero = m == 0
    s = np.where(zero, np.float32(1.0), s).astype(np.float32)
    q = np.clip(np.rint((w / s[:, None]).astype(np.float32)), -127, 127)
    q[zero] = 0
    return q.astype(np.int8), s


def q_w4(w, steps=10):
    out = w.shape[0]
    m = np.max(np.abs(w), axis=1)
    w64 = w.astype(np.float64)
    best_e = np.full(out, np.inf)
    best_s = np.ones(out, dtype=np.float32)
    for k in range(steps):
        s = ((1.0 - 0.05 * k) * m.astype(np.float64) / 7.0).astype(np.float32)
        safe = np.where(s > 0, s, np.float32(1.0)).astype(np.float32)
        q = np.clip(np.rint((w / safe[:, None]).astype(np.float32)), -8, 7)
        e = np.sum((w64 - safe.astype(np.float64)[:, None] * q) ** 2, axis=1)
        better = (e < best_e) & (s > 0)
        best_e = np.where(better, e, best_e)
        best_s = np.where(better, s, best_s).astype(np.float32)
    zero = m == 0
    best_s[zero] = 1.0
    q = np.clip(np.rint((w / best_s[:, None]).astype(np.float32)), -8, 7).astype(np.int8)
    q[zero] = 0
    return q, best_s


def pack4(q):
    out, n = q.shape
    if out % 2:
        q = np.concatenate([q, np.zeros((1, n), dtype=np.int8)])
    lo = q[0::2].astype(np.uint8) & 0x0F
    hi = (q[1::2].astype(np.uint8) & 0x0F) << 4
    return (lo | hi).astype(np.uint8).view(np.int8)


def scale_bias(q, s, chunks):
    out, n = q.shape
    cols = []
    for c in range(chunks):
        a, b = c * n // chunks, (c + 1) * n // chunks
        cols.append(q[:, a:b].astype(np.int64).sum(axis=1))
    sums = np.stack(cols, axis=1).astype(np.float32)
    return ((np.float32(8.0) * s).astype(np.float32)[:, None] * sums).astype(np.float32)


def q_engram(x):
    rows, width = x.shape
    g = x.reshape(rows, width // 32, 32)
    a = np.max(np.abs(g), axis=2)
    exps = np.zeros(a.shape, dtype=np.int64)
    flat = a.reshape(-1)
    ef = exps.reshape(-1)
    for i, v in enumerate(flat):
        if v == 0:
            continue
        f, k = math.frexp(float(v) / 127.0)
        ef[i] = k - 1 if f == 0.5 else k
    scale = np.where(a == 0, np.float32(1.0), np.ldexp(np.float32(1.0), exps).astype(np.float32)).astype(np.float32)
    codes = np.clip(np.rint((g / scale[:, :, None]).astype(np.float32)), -127, 127).astype(np.int8)
    return codes.reshape(rows, width), scale


# ------------------------------------------------------------------------------------------ checks
def check_file_layout(path, engram):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
    size = os.path.getsize(path)
    if (8 + n) % 8:
        fail(f"{path}: data section starts at {8 + n}, not a multiple of 8")
    spans = sorted(v["data_offsets"] for k, v in hdr.items() if k != "__metadata__")
    end = 0
    for b, e in spans:
        if b != end:
            fail(f"{path}: gap or overlap at data offset {b} (previous end {end})")
        end = e
    if 8 + n + end != size:
        fail(f"{path}: file size {size} != 8 + {n} + {end}")
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        item = {"F32": 4, "BF16": 2, "F16": 2, "I8": 1, "U8": 1}[v["dtype"]]
        if (8 + n + v["data_offsets"][0]) % item:
            fail(f"{path}: {k} not aligned to its item size")
    if engram and (n != 104 or len(hdr) != 1):
        fail(f"{path}: Engram table file: header {n} bytes with {len(hdr)} entries (want 104 and exactly one tensor)")


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--float", required=True)
    ap.add_argument("--release", required=True)
    ap.add_argument("--ssz-steps", type=int, default=10)
    a = ap.parse_args()
    flt = Dir(a.float, "model.safetensors.index.json")
    rel = Dir(a.release, "quant_model_weights.safetensors.index.json")
    with open(os.path.join(a.release, "quant_model_description.json")) as fh:
        desc = json.load(fh)
    with open(os.path.join(a.release, "config.json")) as fh:
        cfg = json.load(fh)
    tc = cfg.get("text_config", cfg)
    n_mtp = tc["num_nextn_predict_layers"]
    counts = {"FLOAT": 0, "W8A8_DYNAMIC": 0, "W4A8_DYNAMIC": 0, "ENGRAM": 0}
    expected = set()

    def expect(name, lab):
        expected.add(name)
        if name not in rel.wm:
            fail(f"{name}: missing from the release index")
            return False
        if lab is not None and desc.get(name) != lab:
            fail(f"{name}: description label {desc.get(name)!r}, expected {lab}")
        return True

    for name in sorted(flt.wm):
        info = flt.info(name)
        lab = label(name)
        w = widen(info.dtype, flt.raw(name))
        counts[lab] += 1
        if lab == "FLOAT":
            if expect(name, "FLOAT"):
                ri = rel.info(name)
                if ri.dtype != info.dtype or list(ri.shape) != list(info.shape) or \
                        rel.raw(name).tobytes() != flt.raw(name).tobytes():
                    fail(f"{name}: FLOAT tensor not copied verbatim ({ri.dtype} {ri.shape} vs {info.dtype} {info.shape})")
            continue
        w = w.reshape(info.shape)
        if lab == "ENGRAM":
            codes, scale = q_engram(w)
            sname = name[:-len(".weight")] + ".scale"
            if expect(name, None) and expect(sname, None):
                if not np.array_equal(rel.raw(name).view(np.int8), codes):
                    fail(f"{name}: Engram codes differ ({int(np.sum(rel.raw(name).view(np.int8) != codes))} values)")
                if not np.array_equal(np.asarray(rel.raw(sname), dtype=np.float32), scale):
                    fail(f"{sname}: Engram scales differ")
                if name in desc or sname in desc:
                    fail(f"{name}: Engram tables must be unlabelled")
            continue
        base = name[:-len(".weight")]
        if lab == "W8A8_DYNAMIC":
            q, s = q_w8(w)
            packed = q
        else:
            q, s = q_w4(w, a.ssz_steps)
            packed = pack4(q)
        names = [name, base + ".weight_scale", base + ".weight_offset"] + ([base + ".scale_bias"] if lab == "W4A8_DYNAMIC" else [])
        if not all(expect(n, lab) for n in names):
            continue
        deq = q.astype(np.float64) * s.astype(np.float64)[:, None]
        RMSE[name] = float(np.sqrt(np.sum((w.astype(np.float64) - deq) ** 2) / np.sum(w.astype(np.float64) ** 2)))
        got = rel.raw(name).view(np.int8)
        if got.shape != packed.shape or not np.array_equal(got, packed):
            fail(f"{name}: {lab} codes differ from the NumPy re-quantization "
                 f"({int(np.sum(got != packed)) if got.shape == packed.shape else 'shape ' + str(got.shape)})")
        gs = np.asarray(rel.raw(base + ".weight_scale"), dtype=np.float32).reshape(-1)
        if not np.array_equal(gs, s):
            fail(f"{base}.weight_scale differs (max rel {float(np.max(np.abs(gs - s) / s)):.3g})")
        if np.any(np.asarray(rel.raw(base + ".weight_offset")) != 0):
            fail(f"{base}.weight_offset is not all zero")
        if lab == "W4A8_DYNAMIC":
            chunks = 16 if name.endswith(".w2.weight") else 1
            sb = scale_bias(q, s, chunks)
            gsb = np.asarray(rel.raw(base + ".scale_bias"), dtype=np.float32)
            if gsb.shape != sb.shape or not np.array_equal(gsb, sb):
                fail(f"{base}.scale_bias differs (shape {gsb.shape} vs {sb.shape})")

    # un-rotated draft vocabulary copies: present in the float source (mkmodel) or copied from embed/head
    for dn, tn in (("mtp.0.embed.weight", "embed.weight"), (f"mtp.{n_mtp - 1}.head.weight", "head.weight")):
        if n_mtp and dn not in flt.wm:
            if expect(dn, "FLOAT"):
                src = widen(flt.info(tn).dtype, flt.raw(tn))
                got = widen(rel.info(dn).dtype, rel.raw(dn))
                # BF16 copy (an F32 head is rounded to nearest even; a BF16 embed is copied as is)
                u = src.view(np.uint32).astype(np.uint64)
                want = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
                if rel.info(dn).dtype != "BF16" or not np.array_equal(got, want.reshape(got.shape)):
                    fail(f"{dn}: not the BF16 copy of {tn} ({rel.info(dn).dtype})")

    # index coverage, total size, description
    extra = set(rel.wm) - expected
    if extra:
        fail(f"index lists tensors not derived from the source: {sorted(extra)[:5]}")
    total = sum(int(np.prod(rel.info(n).shape)) * {"F32": 4, "BF16": 2, "F16": 2, "I8": 1}[rel.info(n).dtype] for n in rel.wm)
    if rel.index["metadata"].get("total_size") != total:
        fail(f"index metadata.total_size {rel.index['metadata'].get('total_size')} != summed tensor bytes {total}")
    for k in ("version", "group_size"):
        want = {"version": "1.0.0", "group_size": 0}[k]
        if desc.get(k) != want:
            fail(f"description {k} = {desc.get(k)!r}, want {want!r}")
    labelled = {k for k, v in desc.items() if k not in ("version", "model_quant_type", "group_size", "metadata", "optional")
                and isinstance(v, str)}
    stray = labelled - set(rel.wm)
    if stray:
        fail(f"description labels tensors that are not written: {sorted(stray)[:5]}")
    # file layouts
    for relp in sorted(set(rel.wm.values())):
        check_file_layout(os.path.join(a.release, relp), relp.startswith("engram_int8/"))
    extra_f = SafeTensorsFile(os.path.join(a.release, "engram_extra.safetensors"))
    for m in re.finditer(r"layers\.(\d+)\.engram\.embed\.weight", " ".join(rel.wm)):
        for ph in (f"layers.{m.group(1)}.engram.embed.weight", f"layers.{m.group(1)}.engram.embed.scale"):
            if ph not in extra_f or list(extra_f.info(ph).shape) != [1, 1]:
                fail(f"engram_extra.safetensors: placeholder {ph} [1,1] missing")
    # manifests
    with open(os.path.join(a.release, "mtpq_manifest.json")) as fh:
        mm = json.load(fh)
    if mm.get("schema") != "mtpq-draft-quant/1":
        fail(f"mtpq_manifest schema {mm.get('schema')!r}")
    for sh in mm.get("output_shards", []):
        if not os.path.exists(os.path.join(a.release, sh)):
            fail(f"mtpq_manifest lists {sh}, which does not exist")
    draft_files = {rel.wm[n] for n in rel.wm if n.startswith("mtp.")}
    if set(mm.get("output_shards", [])) != draft_files:
        fail(f"mtpq output_shards {mm.get('output_shards')} != files holding mtp.* tensors {sorted(draft_files)}")
    with open(os.path.join(a.release, "quant_manifest.json")) as fh:
        qm = json.load(fh)
    if qm.get("schema") != "v41-quant/1" or qm.get("input_tensors") != len(flt.wm):
        fail(f"quant_manifest schema/input_tensors: {qm.get('schema')!r} / {qm.get('input_tensors')}")
    for lab in ("W8A8_DYNAMIC", "W4A8_DYNAMIC"):
        e = qm.get("error", {}).get(lab)
        if not e or not (0 < e["rel_rmse_mean"] <= e["rel_rmse_max"]):
            fail(f"quant_manifest error.{lab} missing or inconsistent: {e}")
    # per-tensor reconstruction error against the NumPy value ‖W − Ŵ‖ / ‖W‖
    for name, rr in RMSE.items():
        got = qm.get("rel_rmse", {}).get(name)
        if got is None or abs(got - rr) > 1e-9 + 1e-6 * rr:
            fail(f"quant_manifest rel_rmse[{name}] = {got}, NumPy {rr:.9g}")
    # PARTS.sha256: every listed file hashes as listed
    parts = os.path.join(a.release, "engram_int8", "PARTS.sha256")
    n_parts = 0
    if os.path.exists(parts):
        for line in open(parts):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            h, fn = line.split(None, 1)
            fn = fn.lstrip("*")
            p = os.path.join(a.release, "engram_int8", fn)
            if os.path.exists(p):
                n_parts += 1
                with open(p, "rb") as fh:
                    if hashlib.sha256(fh.read()).hexdigest() != h:
                        fail(f"PARTS.sha256: {fn} does not match its listed hash")
    print(f"checked {len(flt.wm)} source tensors: FLOAT {counts['FLOAT']}, W8A8 {counts['W8A8_DYNAMIC']}, "
          f"W4A8 {counts['W4A8_DYNAMIC']}, Engram {counts['ENGRAM']}; {len(rel.wm)} index entries; "
          f"{n_parts} hashed files in PARTS.sha256; W8A8 rel_rmse mean "
          f"{qm['error']['W8A8_DYNAMIC']['rel_rmse_mean']:.4f}, W4A8 {qm['error']['W4A8_DYNAMIC']['rel_rmse_mean']:.4f}")
    print("quant_oracle:", "PASS" if not FAILS else f"FAIL ({len(FAILS)})")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
