"""Damage one tensor of an official-layout fixture in place (a copy made by the caller), for the
refusal tests of run_fp8.sh.  Modes:
  nan TENSOR BYTE      set one data byte of TENSOR (0xFF: E8M0 NaN in a scale, E4M3 NaN in a weight)
  shape TENSOR D0 D1   rewrite TENSOR's shape in the header (same byte count: the file stays valid
                       safetensors, only the block layout is wrong)
  truncate             cut 100 bytes off the end of the shard holding the last index entry
The header is rewritten to its original length (padded with spaces), so offsets stay valid."""
import json
import os
import struct
import sys


def shard_of(d, name):
    wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    return os.path.join(d, wm[name] if name else wm[sorted(wm)[-1]])


def main():
    d, mode = sys.argv[1], sys.argv[2]
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
        elif mode == "shape":
            hdr[name]["shape"] = [int(sys.argv[4]), int(sys.argv[5])]
            text = json.dumps(hdr, separators=(",", ":")).encode()
            if len(text) > n:
                sys.exit("header grew")
            fh.seek(8)
            fh.write(text + b" " * (n - len(text)))
    print(os.path.basename(p))


if __name__ == "__main__":
    main()
