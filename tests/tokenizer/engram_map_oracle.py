"""Independent oracle for the Engram token normalization map (MODEL.md §2.10.1).

Written from the spec with Python's own unicodedata tables and its own byte-level decoding, sharing
no code with src/tokenizer/engram_map.c.  Usage: engram_map_oracle.py TOKENIZER_JSON MAP_FILE
Prints "classes N mismatches M" and exits 1 when the map file differs from the oracle.
"""
import json
import struct
import sys
import unicodedata

WHITE_SPACE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
                  + list(range(0x2000, 0x200B)))


def byte_table():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    tok = json.load(open(sys.argv[1], encoding="utf-8"))
    strings = {}
    for s, i in tok["model"]["vocab"].items():
        strings[i] = s
    for a in tok["added_tokens"]:
        strings[a["id"]] = a["content"]
    V = max(strings) + 1
    c2b = byte_table()
    keys, classes = {}, []
    for v in range(V):
        s = strings[v]
        if all(ch in c2b for ch in s):
            text = bytes(c2b[ch] for ch in s).decode("utf-8", errors="replace")
        else:
            text = s
        if "\ufffd" in text:
            key = s
        else:
            t = unicodedata.normalize("NFKC", text)
            t = unicodedata.normalize("NFD", t)
            t = "".join(ch for ch in t if not unicodedata.category(ch).startswith("M"))
            t = "".join(ch.lower() if ch != "\u0130" else "i\u0307" for ch in t)
            out, prev_space = [], False
            for ch in t:
                if ch in " \t\r\n":
                    if not prev_space:
                        out.append(" ")
                    prev_space = True
                else:
                    out.append(ch)
                    prev_space = False
            t = "".join(out)
            if t == " ":
                t = "\ue000"
            while t and ord(t[0]) in WHITE_SPACE:
                t = t[1:]
            while t and ord(t[-1]) in WHITE_SPACE:
                t = t[:-1]
            t = t.replace("\ue000", " ")
            key = t if t else text
        if key not in keys:
            keys[key] = len(keys)
        classes.append(keys[key])
    data = open(sys.argv[2], "rb").read()
    got = list(struct.unpack("<%dI" % (len(data) // 4), data))
    mismatches = sum(1 for a, b in zip(got, classes) if a != b) + abs(len(got) - len(classes))
    print("classes %d mismatches %d unicode %s" % (len(keys), mismatches, unicodedata.unidata_version))
    if mismatches:
        for v in range(min(len(got), len(classes))):
            if got[v] != classes[v]:
                print("  first mismatch at id %d: %r map %d oracle %d" % (v, strings[v], got[v], classes[v]))
                break
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
