#!/usr/bin/python3
"""same_release.py A B: exit 0 when two release directories hold the same files with the same bytes,
except for reassemble's machine-local `.verified` stamps and the manifests' informational "out"
field (the destination path each run was given, CHECKPOINT.md §11 / TOOLS.md §3.5)."""
import json
import os
import sys


def files(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs if not f.endswith(".verified"))


a, b = sys.argv[1], sys.argv[2]
if files(a) != files(b):
    sys.exit(f"file sets differ: {sorted(set(files(a)) ^ set(files(b)))}")
for f in files(a):
    with open(os.path.join(a, f), "rb") as fa, open(os.path.join(b, f), "rb") as fb:
        x, y = fa.read(), fb.read()
    if f.endswith("_manifest.json"):
        x, y = json.loads(x), json.loads(y)
        x.pop("out", None)
        y.pop("out", None)
    if x != y:
        sys.exit(f"{f} differs")
