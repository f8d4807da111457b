#!/usr/bin/env python3
"""Write a synthetic llama-architecture GGUF whose decode reads as many weight bytes per token as a
dsflash checkpoint does, so llama.cpp and dsflash can be compared as a share of the same read
bandwidth (bench/llamacpp_bench.sh).

Why synthetic and why this shape: decode speed on a CPU is set by the weight bytes each token
streams, not by what the weights mean, so random weights of the right formats and sizes are a fair
load.  The layout mirrors the dsflash checkpoint as closely as llama.cpp allows: the same vocabulary,
width and layer count, attention in Q8_0 (our W8A8), FFN in Q4_0 (our W4A8 experts) and an F32
output head (our float head); the FFN width is then solved so that the bytes per token match the
measured figure.  Written with NumPy only (GGUF v3, our own writer).

usage: make_gguf.py --out FILE.gguf --bytes-per-token B --vocab V --dim D --layers L --heads H
                    [--head-type f32|q8_0] [--info FILE.json]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
ALIGN = 32
# GGUF metadata value types and ggml tensor types (the two spec enums we use)
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
G_F32, G_Q4_0, G_Q8_0 = 0, 2, 8
BLOCK = 32
BLOCK_BYTES = {G_Q4_0: 18, G_Q8_0: 34}   # fp16 scale + 32 x 4-bit / 8-bit quants


def tensor_bytes(gtype, n_elems):
    if gtype == G_F32:
        return 4 * n_elems
    return n_elems // BLOCK * BLOCK_BYTES[gtype]


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == T_UINT32:
        return out + struct.pack("<I", value)
    if vtype == T_FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == T_STRING:
        return out + gguf_string(value)
    raise ValueError(vtype)


def kv_array(key, etype, values):
    out = gguf_string(key) + struct.pack("<IIQ", T_ARRAY, etype, len(values))
    if etype == T_STRING:
        return out + b"".join(gguf_string(v) for v in values)
    fmt = {T_FLOAT32: "f", T_INT32: "i"}[etype]
    return out + np.asarray(values, dtype="<" + fmt).tobytes()


def vocabulary(n):
    """SentencePiece-style list llama.cpp accepts: unk, bos, eos, the 256 byte tokens, then words."""
    if n < 300:
        sys.exit("make_gguf: --vocab %d: expected at least 300 entries (specials + 256 byte tokens)" % n)
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256            # unknown, control, control, byte
    toks += ["\u2581w%d" % i for i in range(n - len(toks))]
    types += [1] * (n - len(types))          # normal
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return toks, scores, types


def random_tensor(rng, gtype, n_elems, scale):
    """Random weights of a plausible size (about 0.02 per weight, so activations stay finite)."""
    if gtype == G_F32:
        return (rng.standard_normal(n_elems, dtype=np.float32) * scale).astype("<f4").tobytes()
    nb = n_elems // BLOCK
    blocks = rng.integers(0, 256, size=(nb, BLOCK_BYTES[gtype]), dtype=np.uint8)
    d = np.float16(scale / (74.0 if gtype == G_Q8_0 else 4.6)).tobytes()
    blocks[:, 0] = d[0]
    blocks[:, 1] = d[1]
    return blocks.tobytes()


def plan(a):
    """Tensors (name, gguf dims innermost first, type) and the FFN width that matches the bytes."""
    D, V, L = a.dim, a.vocab, a.layers
    head_t = G_F32 if a.head_type == "f32" else G_Q8_0
    per_tok_fixed = tensor_bytes(head_t, V * D) + 4 * D + tensor_bytes(G_Q8_0, D)   # head, final norm, 1 embed row
    per_layer_fixed = 4 * tensor_bytes(G_Q8_0, D * D) + 2 * 4 * D
    ffn_bytes_per_unit = 3 * tensor_bytes(G_Q4_0, D * BLOCK) / BLOCK                 # gate + up + down per FFN unit
    budget = a.bytes_per_token - per_tok_fixed - L * per_layer_fixed
    F = int(round(budget / (L * ffn_bytes_per_unit) / BLOCK)) * BLOCK
    if F < BLOCK:
        sys.exit("make_gguf: --bytes-per-token %.0f leaves no room for an FFN after the head and attention "
                 "(%.0f bytes); expected more" % (a.bytes_per_token, per_tok_fixed + L * per_layer_fixed))
    t = [("token_embd.weight", [D, V], G_Q8_0), ("output_norm.weight", [D], G_F32), ("output.weight", [D, V], head_t)]
    for i in range(L):
        p = "blk.%d." % i
        t += [(p + "attn_norm.weight", [D], G_F32), (p + "attn_q.weight", [D, D], G_Q8_0),
              (p + "attn_k.weight", [D, D], G_Q8_0), (p + "attn_v.weight", [D, D], G_Q8_0),
              (p + "attn_output.weight", [D, D], G_Q8_0), (p + "ffn_norm.weight", [D], G_F32),
              (p + "ffn_gate.weight", [D, F], G_Q4_0), (p + "ffn_up.weight", [D, F], G_Q4_0),
              (p + "ffn_down.weight", [F, D], G_Q4_0)]
    read = sum(tensor_bytes(g, int(np.prod(d))) for n, d, g in t if n != "token_embd.weight") + tensor_bytes(G_Q8_0, D)
    return t, F, read


def write(a):
    tensors, F, read = plan(a)
    toks, scores, types = vocabulary(a.vocab)
    meta = [kv("general.architecture", T_STRING, "llama"), kv("general.name", T_STRING, "dsflash-bytes-twin"),
            kv("llama.context_length", T_UINT32, 8192), kv("llama.embedding_length", T_UINT32, a.dim),
            kv("llama.block_count", T_UINT32, a.layers), kv("llama.feed_forward_length", T_UINT32, F),
            kv("llama.attention.head_count", T_UINT32, a.heads), kv("llama.attention.head_count_kv", T_UINT32, a.heads),
            kv("llama.rope.dimension_count", T_UINT32, a.dim // a.heads),
            kv("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-6),
            kv("tokenizer.ggml.model", T_STRING, "llama"), kv_array("tokenizer.ggml.tokens", T_STRING, toks),
            kv_array("tokenizer.ggml.scores", T_FLOAT32, scores), kv_array("tokenizer.ggml.token_type", T_INT32, types),
            kv("tokenizer.ggml.unknown_token_id", T_UINT32, 0), kv("tokenizer.ggml.bos_token_id", T_UINT32, 1),
            kv("tokenizer.ggml.eos_token_id", T_UINT32, 2)]
    infos, offset = [], 0
    for name, dims, g in tensors:
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims) +
                     struct.pack("<IQ", g, offset))
        offset += (tensor_bytes(g, int(np.prod(dims))) + ALIGN - 1) // ALIGN * ALIGN
    tmp = a.out + ".tmp"
    rng = np.random.default_rng(1)
    with open(tmp, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", 3, len(tensors), len(meta)))
        for m in meta + infos:
            f.write(m)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for name, dims, g in tensors:
            n = int(np.prod(dims))
            data = np.ones(n, dtype="<f4").tobytes() if name.endswith("norm.weight") else \
                random_tensor(rng, g, n, 0.02)
            f.write(data)
            f.write(b"\0" * (-len(data) % ALIGN))
    os.replace(tmp, a.out)   # never a partial file under the final name
    info = {"gguf": os.path.basename(a.out), "bytes_per_token": read, "target_bytes_per_token": a.bytes_per_token,
            "ffn": F, "vocab": a.vocab, "dim": a.dim, "layers": a.layers, "heads": a.heads,
            "formats": "attention Q8_0, FFN Q4_0, head %s" % a.head_type.upper()}
    if a.info:
        with open(a.info, "w") as f:
            json.dump(info, f)
    print("make_gguf: %s, FFN %d, %.1f MB read per token (target %.1f MB)" %
          (a.out, F, read / 1e6, a.bytes_per_token / 1e6))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--bytes-per-token", type=float, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--head-type", choices=["f32", "q8_0"], default="f32")
    p.add_argument("--info")
    a = p.parse_args()
    if a.dim % BLOCK or a.dim % a.heads or a.layers < 1:
        sys.exit("make_gguf: --dim %d must be a multiple of 32 and of --heads %d; --layers %d >= 1"
                 % (a.dim, a.heads, a.layers))
    write(a)


if __name__ == "__main__":
    main()
