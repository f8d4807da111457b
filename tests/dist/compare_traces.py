#!/usr/bin/env python3
"""Greedy agreement and max |delta logprob| of a trace against the one-process trace.

usage: compare_traces.py REF.st OTHER.st
Reads the `generated` ids and `logits` rows of two `dsflash generate --trace` files (safetensors,
parsed here with NumPy, independently of the engine) and prints one line:
  agree N/M  max_dlogprob X
The log-softmax rows are compared up to the first position where the fed-back tokens differ (after
that the two runs see different inputs).
"""
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dt = {"F32": np.float32, "I32": np.int32, "BF16": np.uint16}[t["dtype"]]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(t["shape"])
    return out


def logsoftmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


ref, oth = read(sys.argv[1]), read(sys.argv[2])
g1, g2 = ref["generated"], oth["generated"]
agree = int((g1 == g2).sum())
t1, t2 = ref["tokens"], oth["tokens"]
same = len(t1)
for i in range(len(t1)):
    if t1[i] != t2[i]:
        same = i
        break
rows = min(same + 1, ref["logits"].shape[0])
d = np.abs(logsoftmax(ref["logits"][:rows]) - logsoftmax(oth["logits"][:rows])).max()
print(f"agree {agree}/{len(g1)}  max_dlogprob {d:.3e}")
