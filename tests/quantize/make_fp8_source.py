#!/usr/bin/python3
"""Build an official-format FP8/MXFP4 checkpoint (CHECKPOINT.md §14) from an un-rotated float model,
and the exact float decoding of it, for testing `dsflash quantize --src-format fp8`.

Encoding is written here from the format definitions, independently of the C decoder: dense FP8
linears (E4M3 with one E8M0 power-of-two scale per 32×32 tile, scale = 2^ceil(log2(amax/448))),
routed experts as MXFP4 (E2M1 pairs packed along the input dimension, low nibble = even input,
one E8M0 scale per 32 inputs, 2^ceil(log2(amax/6))), Engram rows as E4M3 with per-32 scales;
every rounding is to nearest with ties to the even code.  Other tensors become BF16 (F32 for hc
parameters, sinks and gate biases), the draft vocabulary copies and the rotation file are dropped
(the official release shares embed/head and has R = I), and quantization_config says fp8.

The decoded directory holds what the checkpoint means: every encoded weight decoded exactly to
BF16, ratio-2 compressors widened to F32 (the dtype the W4A8 release pins); it is the reference
that tests/quantize/quant_oracle.py compares the quantized release against.

usage: make_fp8_source.py --float DIR --out FP8_DIR --decoded DIR
"""
import argparse
import json
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import safetensors_np as st  # noqa: E402

DENSE = re.compile(r"^(layers|mtp)\.\d+\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b|indexer\.wq_b)|ffn\.shared_experts\.w[123]|engram\.wkv)\.weight$"
                   r"|^mtp\.0\.main_proj\.weight$")
EXPERT = re.compile(r"^(layers|mtp)\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$")
ENGRAM = re.compile(r"^layers\.\d+\.engram\.embed\.weight$")
F32_KEEP = re.compile(r"(hc_(attn|ffn)_(fn|base|scale)|attn\.attn_sink|ffn\.gate\.bias(_vl)?)$")


def e4m3_table():
    vals = []
    for b in range(0x7F):                      # positive finite codes 0x00..0x7E
        e, m = (b >> 3) & 0xF, b & 7
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


E4M3 = e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def nearest_code(mag, table):
    """index of the nearest table value, ties to the even index (codes are monotonic in value)."""
    mag = np.minimum(mag, table[-1])          # saturate
    hi = np.clip(np.searchsorted(table, mag), 1, len(table) - 1)
    lo = hi - 1
    dlo, dhi = mag - table[lo], table[hi] - mag
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return pick


def pow2_exp(amax, limit):
    """smallest k with amax / 2^k <= limit (k for amax == 0: 0)."""
    k = np.zeros(amax.shape, dtype=np.int64)
    nz = amax > 0
    f, e = np.frexp(amax[nz] / limit)
    k[nz] = np.where(f == 0.5, e - 1, e)
    return k


def enc_e4m3(x, k):
    """x / 2^k encoded as E4M3 bytes; x and k broadcastable."""
    v = x / np.ldexp(1.0, k)
    code = nearest_code(np.abs(v), E4M3)
    return (code | np.where(v < 0, 0x80, 0)).astype(np.uint8)


def dec_e4m3(b):
    return np.where(b & 0x80, -1.0, 1.0) * E4M3[b & 0x7F]


def bf16_bits(x32):
    u = np.asarray(x32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def widen(dt, a):
    if dt == "F32":
        return np.asarray(a, dtype=np.float32)
    return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--float", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--decoded", required=True)
    a = ap.parse_args()
    os.makedirs(a.out)
    os.makedirs(a.decoded)
    wm = json.load(open(os.path.join(a.float, "model.safetensors.index.json")))["weight_map"]
    cfg = json.load(open(os.path.join(a.float, "config.json")))
    tc = cfg.get("text_config", cfg)
    ratio = tc["compress_ratios"]
    n_mtp = tc["num_nextn_predict_layers"]
    enc, dec = {}, {}
    for name in sorted(wm):
        if name in ("mtp.0.embed.weight", f"mtp.{n_mtp - 1}.head.weight"):
            continue
        f = st.SafeTensorsFile(os.path.join(a.float, wm[name]))
        x = widen(f.info(name).dtype, f.get(name)).reshape(f.info(name).shape).astype(np.float64)
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        if DENSE.match(name):
            o, i = x.shape
            t = np.zeros(((o + 31) // 32 * 32, (i + 31) // 32 * 32))
            t[:o, :i] = np.abs(x)
            amax = t.reshape((o + 31) // 32, 32, (i + 31) // 32, 32).max(axis=(1, 3))
            k = pow2_exp(amax, 448.0)
            kk = np.repeat(np.repeat(k, 32, axis=0), 32, axis=1)[:o, :i]
            b = enc_e4m3(x, kk)
            enc[name] = ("F8_E4M3", b)
            enc[base + ".scale"] = ("F8_E8M0", (k + 127).astype(np.uint8))
            dec[name] = ("BF16", bf16_bits(np.ldexp(dec_e4m3(b), kk).astype(np.float32)))
        elif EXPERT.match(name) or ENGRAM.match(name):
            o, i = x.shape
            g = x.reshape(o, i // 32, 32)
            amax = np.abs(g).max(axis=2)
            if ENGRAM.match(name):
                k = pow2_exp(amax, 448.0)
                b = enc_e4m3(g, k[:, :, None]).reshape(o, i)
                enc[name] = ("F8_E4M3", b)
                val = np.ldexp(dec_e4m3(b).reshape(o, i // 32, 32), k[:, :, None]).reshape(o, i)
            else:
                k = pow2_exp(amax, 6.0)
                v = g / np.ldexp(1.0, k)[:, :, None]
                code = nearest_code(np.abs(v), E2M1) | np.where(v < 0, 8, 0)
                code = code.reshape(o, i).astype(np.uint8)
                enc[name] = ("I8", ((code[:, 0::2] & 0xF) | (code[:, 1::2] << 4)).astype(np.uint8).view(np.int8))
                mag = E2M1[code & 7] * np.where(code & 8, -1.0, 1.0)
                val = np.ldexp(mag.reshape(o, i // 32, 32), k[:, :, None]).reshape(o, i)
            enc[base + ".scale"] = ("F8_E8M0", (k + 127).astype(np.uint8))
            dec[name] = ("BF16", bf16_bits(val.astype(np.float32)))
        else:
            x32 = x.astype(np.float32)
            if F32_KEEP.search(name):
                enc[name] = dec[name] = ("F32", x32)
            else:
                enc[name] = ("BF16", bf16_bits(x32))
                m = re.match(r"^layers\.(\d+)\.attn\.compressor\.(wkv|wgate)\.weight$", name)
                # the W4A8 release pins ratio-2 compressors to F32: the exact widening of the BF16 file
                dec[name] = ("F32", widen("BF16", bf16_bits(x32))) if m and ratio[int(m.group(1))] >= 2 else enc[name]
    for d, tensors in ((a.out, enc), (a.decoded, dec)):
        st.write(os.path.join(d, "model-00001-of-00001.safetensors"), tensors, {"format": "pt"})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as fh:
            json.dump({"metadata": {}, "weight_map": {n: "model-00001-of-00001.safetensors" for n in tensors}}, fh)
        for aux in ("tokenizer.json", "tokenizer_config.json", tc.get("engram_token_map_file")):
            if aux:
                shutil.copy(os.path.join(a.float, aux), os.path.join(d, aux))
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                                  "scale_fmt": "ue8m0", "expert_dtype": "fp4"}
    for d in (a.out, a.decoded):
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(cfg, fh, indent=1)
    print(f"fp8 source: {sum(1 for n in enc if n.endswith('.scale'))} encoded weights, {len(enc)} tensors")


if __name__ == "__main__":
    main()
