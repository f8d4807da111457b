"""Damage one tensor of an official-layout fixture in place (a copy made by the caller), for the
refusal tests of run_fp8.sh.  Modes:
  nan TENSOR BYTE      set one data byte of TENSOR (0xFF: E8M0 NaN in a scale, E4M3 NaN in a weight)
  shape TENSOR D0 D1   rewrite TENSOR's shape in the header (same byte count: the file stays valid
                       safetensors, only the block layout is wrong)
  truncate             cut 100 bytes off the end of the shard holding the last index entry
  f4                   not damage: retag every routed-expert weight of every shard from packed U8/I8
                       [out, in/2] to safetensors' F4 [out, in] (the same bytes; CHECKPOINT.md §14
                       allows both), rewriting each header (data section untouched); prints the count
  f4bytes TENSOR       retag TENSOR as F4 but keep its shape [out, in/2]: half the bytes it declares
The header is rewritten to its original length (padded with spaces), so offsets stay valid, except
in mode f4, which writes a new header padded to an 8-byte data start."""
import json
import os
import struct
import sys


def shard_of(d, name):
    wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    return os.path.join(d, wm[name] if name else wm[sorted(wm)[-1]])


def retag_f4(d):
    """Mode f4: every shard's routed-expert weights become F4 [out, in]."""
    wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    count = 0
    for f in sorted(set(wm.values())):
        p = os.path.join(d, f)
        with open(p, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
            data = fh.read()
        for name, e in hdr.items():
            if name != "__metadata__" and ".ffn.experts." in name and name.endswith(".weight") and e["dtype"] in ("U8", "I8"):
                e["dtype"], e["shape"] = "F4", [e["shape"][0], 2 * e["shape"][1]]
                count += 1
        text = json.dumps(hdr, separators=(",", ":")).encode()
        text += b" " * ((-(8 + len(text))) % 8)
        with open(p + ".tmp", "wb") as fh:
            fh.write(struct.pack("<Q", len(text)) + text + data)
        os.replace(p + ".tmp", p)
    print(count)


def main():
    d, mode = sys.argv[1], sys.argv[2]
    if mode == "f4":
        retag_f4(d)
        return
    if mode == "truncate":
        p = shard_of(d, None)
        os.truncate(p, os.path.getsize(p) - 100)
        print(os.path.basename(p))
        return
    name = sys.argv[3]
    p = shard_of(d, name)
    with open(p, "r+b") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
        if mode == "nan":
            fh.seek(8 + n + hdr[name]["data_offsets"][0] + int(sys.argv[4]))
            fh.write(b"\xff")
        elif mode in ("shape", "f4bytes"):
            if mode == "shape":
                hdr[name]["shape"] = [int(sys.argv[4]), int(sys.argv[5])]
            else:
                hdr[name]["dtype"] = "F4"
            text = json.dumps(hdr, separators=(",", ":")).encode()
            if len(text) > n:
                sys.exit("header grew")
            fh.seek(8)
            fh.write(text + b" " * (n - len(text)))
    print(os.path.basename(p))


if __name__ == "__main__":
    main()
