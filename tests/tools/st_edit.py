#!/usr/bin/python3
"""Tiny safetensors editor for the verifier's fault fixtures (reads the header itself, so it is
independent of the C reader it helps to test).

  st_edit.py get    FILE TENSOR INDEX           print element INDEX (flat, typed)
  st_edit.py set    FILE TENSOR INDEX VALUE     overwrite element INDEX with VALUE
  st_edit.py nibble FILE TENSOR INDEX DELTA     add DELTA to the low int4 code of byte INDEX (clamped to -8..7)
  st_edit.py count  FILE                        number of tensors in the header
"""
import json, struct, sys

FMT = {"F32": ("<f", 4), "I8": ("<b", 1), "U8": ("<B", 1), "F16": ("<e", 2), "I32": ("<i", 4), "I64": ("<q", 8)}

def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n

def locate(path, name, index):
    h, start = header(path)
    t = h[name]
    dt = t["dtype"]
    size = 2 if dt == "BF16" else FMT[dt][1]
    b, e = t["data_offsets"]
    off = start + b + index * size
    assert off + size <= start + e, "index out of range"
    return dt, off, size

def get(path, name, index):
    dt, off, size = locate(path, name, index)
    with open(path, "rb") as f:
        f.seek(off)
        raw = f.read(size)
    if dt == "BF16":
        return struct.unpack("<f", b"\0\0" + raw)[0]
    return struct.unpack(FMT[dt][0], raw)[0]

def put(path, name, index, value):
    dt, off, size = locate(path, name, index)
    if dt == "BF16":
        raw = struct.pack("<f", float(value))[2:]
    elif dt in ("F32", "F16"):
        raw = struct.pack(FMT[dt][0], float(value))
    else:
        raw = struct.pack(FMT[dt][0], int(value))
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(raw)

cmd = sys.argv[1]
if cmd == "get":
    print(get(sys.argv[2], sys.argv[3], int(sys.argv[4])))
elif cmd == "set":
    put(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
elif cmd == "nibble":
    path, name, i, d = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    b = get(path, name, i) & 0xFF
    lo = b & 15
    lo = lo - 16 if lo >= 8 else lo
    lo = max(-8, min(7, lo + d))
    nb = (b & 0xF0) | (lo & 15)
    put(path, name, i, nb - 256 if nb >= 128 else nb)
elif cmd == "count":
    print(len([k for k in header(sys.argv[2])[0] if k != "__metadata__"]))
else:
    sys.exit("unknown command " + cmd)
