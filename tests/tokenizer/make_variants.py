"""Writes tokenizer.json variants that exercise the pipeline components the DeepSeek file does not
use, for the byte-exact comparison with HF tokenizers (run_reference.sh): NFKC / NFD normalizers
(normalized added tokens are matched in normalized form), Digits, String splits, the
MergedWithNext / MergedWithPrevious / Removed / Contiguous behaviours, invert, a case-insensitive
group (?i:...), and an lstrip/rstrip added token.  Usage: make_variants.py BASE_TOKENIZER OUT_DIR
"""
import json
import os
import sys

base = json.load(open(sys.argv[1], encoding="utf-8"))
BL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
QWEN = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
        "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
variants = {
    "nfkc_digits": ({"type": "NFKC"}, [
        {"type": "Digits", "individual_digits": True},
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        dict(BL, use_regex=True)]),
    "nfd_removed": ({"type": "Sequence", "normalizers": [{"type": "NFD"}]}, [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[a-z]+"}, "behavior": "Removed", "invert": True},
        dict(BL, use_regex=False)]),
    "contiguous_icase": (None, [
        {"type": "Split", "pattern": {"Regex": QWEN}, "behavior": "Contiguous", "invert": False},
        dict(BL, use_regex=False)]),
}
for name, (norm, pre) in variants.items():
    t = json.loads(json.dumps(base))
    t["normalizer"] = norm
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre}
    top = max(a["id"] for a in t["added_tokens"])
    t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] != top]
    t["added_tokens"].append({"id": top, "content": "<mask>", "single_word": False, "lstrip": True,
                              "rstrip": True, "normalized": False, "special": True})
    os.makedirs(os.path.join(sys.argv[2], name), exist_ok=True)
    with open(os.path.join(sys.argv[2], name, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
