#!/usr/bin/python3
"""Writes a random tiny checkpoint (MODEL.md §8 "tiny") in the W4A8 release format, independently of
the engine's `mkmodel`.

It exists so the oracle can run end to end on its own, and it stays as a second, independent writer
of the release format (CHECKPOINT.md §1–§13): two trunk shards resolved through the index, the
description's labels, int4 experts packed along the output axis (low nibble = even row), int8
attention and shared experts, F32 compressors at ratio 2 and BF16 at ratio 1, Engram int8 tables
with power-of-two per-32 scales in `engram_int8/` (optionally one of them only as split parts with
PARTS.sha256), `engram_extra.safetensors` with its [1,1] placeholders, a precomputed token map
(class(v) = v mod 700) and the QuaRot file holding a random-sign normalized Hadamard block.

The weights are random, drawn "as if already rotated" (a random model folded with an orthogonal R
is again a random model), so only the Engram gate needs the block, exactly as in the release.
Draft stages are written too (one mtpq shard and its manifest) so that the engine's loader accepts
the directory, although the oracle itself has no draft stage.

usage: make_tiny.py --out DIR [--seed N] [--split-engram]
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import engram_hash  # noqa: E402
import numerics as nx  # noqa: E402
import safetensors_np as st  # noqa: E402

TINY = {
    "vocab_size": 1024, "hidden_size": 128, "num_hidden_layers": 8, "num_nextn_predict_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "qk_rope_head_dim": 16,
    "q_lora_rank": 64, "o_groups": 2, "o_lora_rank": 32, "rms_norm_eps": 1e-20, "sliding_window": 16,
    "compress_ratios": [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0], "kv_source_layer_ids": [2, 4],
    "index_source_layer_ids": [2, 4, 6], "candidate_source_layer_id": 4, "candidate_topk_blocks": 4,
    "candidate_block_size": 4, "index_n_heads": 4, "index_head_dim": 32, "index_topk": 8,
    "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 4096, "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1,
    "moe_intermediate_size": 64, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
    "norm_topk_prob": True, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hidden_act": "silu",
    "num_hash_layers": 0, "first_k_dense_replace": 0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
    "engram_layer_ids": [1, 2], "engram_num_embeddings": [6126, 6332], "engram_max_ngram_size": 4,
    "engram_vocab_size": 1000, "engram_n_heads": 2, "engram_head_dim": 32, "engram_pad_token_id": 2,
    "engram_compressed_vocab_size": 700, "engram_token_map_file": "engram_token_map.u32",
    "dspark_block_size": 5, "dspark_noise_token_id": 1001, "dspark_target_layer_ids": [5, 6, 7],
    "dspark_markov_rank": 16, "dspark_n_routed_experts": 8, "dspark_num_experts_per_tok": 2,
    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
}


class Writer:
    def __init__(self, rng):
        self.rng = rng
        self.tensors = {}   # name -> (dtype, array)
        self.labels = {}

    def bf16(self, name, a):
        self.tensors[name] = ("BF16", (nx.bf16(np.asarray(a, np.float32)).view(np.uint32) >> 16).astype(np.uint16))
        self.labels[name] = "FLOAT"

    def f32(self, name, a):
        self.tensors[name] = ("F32", np.asarray(a, np.float32))
        self.labels[name] = "FLOAT"

    def quant(self, prefix, w, bits):
        """Symmetric per-output-channel quantization of a float weight [out, in]."""
        qmax = 127 if bits == 8 else 7
        amax = np.maximum(np.abs(w).max(axis=1), 1e-12)
        s = (amax / qmax).astype(np.float32)
        codes = np.clip(np.rint(w / s[:, None]), -qmax - (bits == 4), qmax).astype(np.int8)
        label = "W8A8_DYNAMIC" if bits == 8 else "W4A8_DYNAMIC"
        out = w.shape[0]
        if bits == 4:
            c = codes.astype(np.int16)
            if out % 2:
                c = np.vstack([c, np.zeros((1, c.shape[1]), np.int16)])
            packed = ((c[0::2] & 0x0F) | ((c[1::2] & 0x0F) << 4)).astype(np.uint8).view(np.int8)
            self.tensors[prefix + ".weight"] = ("I8", packed)
            chunks = 16 if prefix.endswith("w2") else 1
            sums = codes.astype(np.float64).reshape(out, chunks, -1).sum(axis=2)
            self.tensors[prefix + ".scale_bias"] = ("F32", (8.0 * s[:, None] * sums).astype(np.float32))
            self.labels[prefix + ".scale_bias"] = label
        else:
            self.tensors[prefix + ".weight"] = ("I8", codes)
        self.tensors[prefix + ".weight_scale"] = ("F32", s.reshape(out, 1))
        self.tensors[prefix + ".weight_offset"] = ("F32", np.zeros((out, 1), np.float32))
        for suf in (".weight", ".weight_scale", ".weight_offset"):
            self.labels[prefix + suf] = label

    def randn(self, *shape, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)


def hadamard_block(rng):
    H = np.array([[1.0]])
    while H.shape[0] < 32:
        H = np.block([[H, H], [H, -H]])
    signs = rng.choice([-1.0, 1.0], size=32)
    return (H * signs[None, :] / np.sqrt(32.0)).astype(np.float32)


def block(w, c, p, ratio, role_full, role_index, n_experts):
    """Tensors of one block (MODEL.md §1.3 "tensors owned by role") under prefix p."""
    D, HC = c["hidden_size"], c["hc_mult"]
    H, dh, ql = c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, ol, I = c["o_groups"], c["o_lora_rank"], c["moe_intermediate_size"]
    nh, ihd = c["index_n_heads"], c["index_head_dim"]
    mix = (2 + HC) * HC
    for n in ("attn_norm", "ffn_norm"):
        w.bf16(p + n + ".weight", 1.0 + w.randn(D, scale=0.1))
    for site in ("attn", "ffn"):
        w.f32(p + f"hc_{site}_fn", w.randn(mix, HC * D, scale=(HC * D) ** -0.5))
        base = w.randn(mix, scale=0.2)
        base[2 * HC:] += 2.0 * np.eye(HC, dtype=np.float32).reshape(-1)   # keep the copies distinct
        w.f32(p + f"hc_{site}_base", base)
        w.f32(p + f"hc_{site}_scale", 0.5 + w.rng.random(3).astype(np.float32))
    a = p + "attn."
    w.quant(a + "wq_a", w.randn(ql, D, scale=D ** -0.5), 8)
    w.f32(a + "q_norm.weight", 1.0 + w.randn(ql, scale=0.1))
    w.quant(a + "wq_b", w.randn(H * dh, ql, scale=ql ** -0.5), 8)
    w.quant(a + "wkv", w.randn(dh, D, scale=D ** -0.5), 8)
    w.f32(a + "kv_norm.weight", 1.0 + w.randn(dh, scale=0.1))
    w.bf16(a + "wo_a.weight", w.randn(G * ol, H * dh // G, scale=(H * dh // G) ** -0.5))
    w.bf16(a + "wo_b.weight", w.randn(D, G * ol, scale=(G * ol) ** -0.5))
    w.f32(a + "attn_sink", w.randn(H))
    if role_full:
        if ratio >= 2:
            w.f32(a + "compressor.wkv.weight", w.randn(dh, D, scale=D ** -0.5))
            w.f32(a + "compressor.wgate.weight", w.randn(dh, D, scale=D ** -0.5))
        else:
            w.bf16(a + "compressor.wkv.weight", w.randn(dh, D, scale=D ** -0.5))
        w.bf16(a + "compressor.norm.weight", 1.0 + w.randn(dh, scale=0.1))
        w.bf16(a + "indexer.wk.weight", w.randn(ihd, dh, scale=dh ** -0.5))
        w.bf16(a + "indexer.k_norm.weight", 1.0 + w.randn(ihd, scale=0.1))
    if role_index:
        w.quant(a + "indexer.wq_b", w.randn(nh * ihd, ql, scale=ql ** -0.5), 8)
        w.bf16(a + "indexer.weights_proj.weight", w.randn(nh, D, scale=D ** -0.5))
    f = p + "ffn."
    w.bf16(f + "gate.weight", w.randn(n_experts, D, scale=D ** -0.5))
    w.f32(f + "gate.bias", w.randn(n_experts, scale=0.1))
    w.f32(f + "gate.bias_vl", w.randn(n_experts, scale=0.1))
    for e in list(range(n_experts)) + ["shared"]:
        pre = f + (f"experts.{e}." if e != "shared" else "shared_experts.")
        bits = 4 if e != "shared" else 8
        w.quant(pre + "w1", w.randn(I, D, scale=D ** -0.5), bits)
        w.quant(pre + "w3", w.randn(I, D, scale=D ** -0.5), bits)
        w.quant(pre + "w2", w.randn(D, I, scale=I ** -0.5), bits)


def build(out, seed, split_engram):
    c = TINY
    rng = np.random.default_rng(seed)
    w = Writer(rng)
    D, V, HC = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    w.bf16("embed.weight", w.randn(V, D))
    w.bf16("norm.weight", 1.0 + w.randn(D, scale=0.1))
    w.f32("head.weight", w.randn(V, D, scale=D ** -0.5))
    K, Ix = c["kv_source_layer_ids"], c["index_source_layer_ids"]
    for l in range(c["num_hidden_layers"]):
        block(w, c, f"layers.{l}.", c["compress_ratios"][l], l in K, l in Ix, c["n_routed_experts"])
    # draft stages (CHECKPOINT.md §11): ratio-0 blocks with their own experts, found through the manifest
    dw = Writer(rng)
    S, R = c["num_nextn_predict_layers"], c["dspark_markov_rank"]
    for s in range(S):
        block(dw, c, f"mtp.{s}.", 0, False, False, c["dspark_n_routed_experts"])
    n_t = len(c["dspark_target_layer_ids"])
    dw.bf16("mtp.0.main_proj.weight", dw.randn(D, n_t * D, scale=(n_t * D) ** -0.5))
    dw.bf16("mtp.0.main_norm.weight", 1.0 + dw.randn(D, scale=0.1))
    dw.bf16("mtp.0.embed.weight", dw.randn(V, D))
    last = f"mtp.{S - 1}."
    dw.bf16(last + "norm.weight", 1.0 + dw.randn(D, scale=0.1))
    dw.bf16(last + "markov_head.embed.weight", dw.randn(V, R))
    dw.bf16(last + "markov_head.head.weight", dw.randn(V, R, scale=R ** -0.5))
    dw.bf16(last + "confidence_head.proj.weight", dw.randn(1, D + R, scale=(D + R) ** -0.5))
    dw.bf16(last + "head.weight", dw.randn(V, D, scale=D ** -0.5))
    st.write(os.path.join(out_dir(out), "mtpq-00001-of-00001.safetensors"), dw.tensors)
    _json(os.path.join(out, "mtpq_manifest.json"), {
        "schema": "mtpq-draft-quant/1", "generated_utc": "1970-01-01T00:00:00Z", "src": "", "out": "",
        "options": {"aggressive": False, "quant_main_proj": False, "quant_vocab": False, "shard_gib": 1.0},
        "stats": {}, "mtp_input_tensors": len(dw.tensors), "mtp_output_tensors": len(dw.tensors),
        "output_shards": ["mtpq-00001-of-00001.safetensors"]})

    os.makedirs(os.path.join(out, "engram_int8"), exist_ok=True)
    os.makedirs(os.path.join(out, "optional"), exist_ok=True)
    # two trunk shards, split by name order, resolved through the index
    names = list(w.tensors)
    half = len(names) // 2
    shards = {"quant_model_weights-00001-of-00002.safetensors": names[:half],
              "quant_model_weights-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for fname, ns in shards.items():
        st.write(os.path.join(out, fname), {n: w.tensors[n] for n in ns})
        weight_map.update({n: fname for n in ns})
    # Engram: int8 tables with power-of-two scales, extras, token map
    hd, ncols = c["engram_head_dim"], (c["engram_max_ngram_size"] - 1) * c["engram_n_heads"]
    extra = {}
    for e, l in enumerate(c["engram_layer_ids"]):
        rows = c["engram_num_embeddings"][e]
        vals = rng.standard_normal((rows, hd)) * 0.5
        g = vals.reshape(rows, hd // 32, 32)
        amax = np.abs(g).max(axis=2)
        k = np.ceil(np.log2(np.maximum(amax, 1e-30) / 127.0))
        scale = np.where(amax == 0, 1.0, np.exp2(k)).astype(np.float32)
        codes = np.clip(np.rint(g / scale[:, :, None]), -127, 127).astype(np.int8).reshape(rows, hd)
        for kind, dt, arr in (("weight", "I8", codes), ("scale", "F32", scale)):
            rel = f"engram_int8/layers_{l}_engram_embed.{kind}.safetensors"
            st.write(os.path.join(out, rel), {f"layers.{l}.engram.embed.{kind}": (dt, arr)}, align=16)
            weight_map[f"layers.{l}.engram.embed.{kind}"] = rel
        ew = Writer(rng)
        ew.bf16(f"layers.{l}.engram.wkv.weight", ew.randn((HC + 1) * D, ncols * hd, scale=(ncols * hd) ** -0.5))
        ew.bf16(f"layers.{l}.engram.q_weight", 1.0 + ew.randn(HC, D, scale=0.2))
        ew.bf16(f"layers.{l}.engram.k_weight", 1.0 + ew.randn(HC, D, scale=0.2))
        extra.update(ew.tensors)
    for l in c["engram_layer_ids"]:             # [1,1] placeholders that the index overrides, F32 first
        extra[f"layers.{l}.engram.embed.scale"] = ("F32", np.zeros((1, 1), np.float32))
    for l in c["engram_layer_ids"]:
        extra[f"layers.{l}.engram.embed.weight"] = ("I8", np.zeros((1, 1), np.int8))
    st.write(os.path.join(out, "engram_extra.safetensors"), extra)
    if split_engram:
        _split(out, f"layers_{c['engram_layer_ids'][-1]}_engram_embed.weight.safetensors")
    np.arange(V, dtype="<u4").__mod__(c["engram_compressed_vocab_size"]).astype("<u4").tofile(
        os.path.join(out, c["engram_token_map_file"]))
    # QuaRot
    B = hadamard_block(rng)
    st.write(os.path.join(out, "optional/quarot.safetensors"),
             {"global_rotation": ("F32", np.kron(np.eye(D // 32, dtype=np.float32), B))})
    # config, index, description
    mults = [[str(m) for m in engram_hash.multipliers(l, c["engram_compressed_vocab_size"], c["engram_max_ngram_size"])]
             for l in c["engram_layer_ids"]]
    text = dict(c, engram_hash_multipliers=mults, model_type="deepseek_v41_text")
    cfg = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "text_config": text,
           "image_token_id": 1010, "quantization_config": {"quant_method": "ascend", "model_quant_type": "W4A8_DYNAMIC"}}
    _json(os.path.join(out, "config.json"), cfg)
    _json(os.path.join(out, "quant_model_weights.safetensors.index.json"),
          {"metadata": {}, "weight_map": weight_map})
    desc = {"version": "1.0.0", "model_quant_type": "W8A8_DYNAMIC", "group_size": 0, "metadata": {},
            "optional": {"quarot": {"rotation_map": {"global_rotation": "optional/quarot.safetensors"}}}}
    desc.update(w.labels)
    desc.update(dw.labels)
    _json(os.path.join(out, "quant_model_description.json"), desc)


def out_dir(out):
    os.makedirs(out, exist_ok=True)
    return out


def _split(out, fname, n_parts=3):
    path = os.path.join(out, "engram_int8", fname)
    with open(path, "rb") as fh:
        blob = fh.read()
    size = -(-len(blob) // n_parts)
    lines = [f"# {fname}", f"{hashlib.sha256(blob).hexdigest()}  {fname}"]
    for i in range(n_parts):
        part = blob[i * size:(i + 1) * size]
        pname = f"{fname}.part-{i:02d}-of-{n_parts:02d}"
        with open(os.path.join(out, "engram_int8", pname), "wb") as fh:
            fh.write(part)
        lines.append(f"{hashlib.sha256(part).hexdigest()}  {pname}")
    with open(os.path.join(out, "engram_int8", "PARTS.sha256"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.remove(path)


def _json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--split-engram", action="store_true")
    a = ap.parse_args()
    build(a.out, a.seed, a.split_engram)


if __name__ == "__main__":
    main()
