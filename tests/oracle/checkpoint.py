"""Configuration and weights of a W4A8-release model directory, read for the oracle (CHECKPOINT.md
§1–§13, MODEL.md §1).

This is deliberately a second, independent reading of the formats: names are resolved through
`quant_model_weights.safetensors.index.json` first and only then through the auxiliary files in
the order of CHECKPOINT.md §4; labels come from `quant_model_description.json`; the Engram tables
come from `engram_int8/` (a table that exists only as split parts is concatenated in memory after
its SHA-256 lines are checked); the QuaRot block comes from the file the description names.  Every
weight is handed to the forward already decoded: float tensors widened to fp32, quantized linears
as integer codes (int4 unpacked along the output axis, low nibble = even row) plus fp32 scales.

Anything the oracle does not understand is an error that names the file, tensor, value and rule —
a silent fallback here would make every comparison meaningless.
"""
import hashlib
import json
import os
import re

import numpy as np

import numerics as nx
from safetensors_np import SafeTensorsFile

INDEX_NAME = "quant_model_weights.safetensors.index.json"
OFFICIAL_INDEX = "model.safetensors.index.json"
F64 = np.float64
DESC_NAME = "quant_model_description.json"


class CheckpointError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# configuration

# (attribute, HF name(s) under text_config or top level, flat name, default or REQUIRED)
REQ = object()
FIELDS = [
    ("vocab_size", ["vocab_size"], "vocab_size", REQ),
    ("dim", ["hidden_size"], "dim", REQ),
    ("n_layers", ["num_hidden_layers"], "n_layers", REQ),
    ("n_mtp", ["num_nextn_predict_layers"], "n_mtp_layers", 0),
    ("n_heads", ["num_attention_heads"], "n_heads", REQ),
    ("n_kv_heads", ["num_key_value_heads"], None, 1),
    ("head_dim", ["head_dim"], "head_dim", REQ),
    ("rope_dim", ["qk_rope_head_dim"], "rope_head_dim", REQ),
    ("q_lora", ["q_lora_rank"], "q_lora_rank", REQ),
    ("o_groups", ["o_groups"], "o_groups", REQ),
    ("o_lora", ["o_lora_rank"], "o_lora_rank", REQ),
    ("norm_eps", ["rms_norm_eps"], "norm_eps", REQ),
    ("window", ["sliding_window"], "window_size", REQ),
    ("compress_ratios", ["compress_ratios"], "compress_ratios", REQ),
    ("kv_src", ["kv_source_layer_ids"], "kv_source_layers", []),
    ("idx_src", ["index_source_layer_ids"], "index_source_layers", []),
    ("cand_layer", ["candidate_source_layer_id"], "candidate_source_layer", -1),
    ("cand_blocks", ["candidate_topk_blocks"], "candidate_topk_blocks", 0),
    ("cand_bs", ["candidate_block_size"], "candidate_block_size", 0),
    ("idx_heads", ["index_n_heads"], "index_n_heads", 0),
    ("idx_dim", ["index_head_dim"], "index_head_dim", 0),
    ("idx_topk", ["index_topk"], "index_topk", 0),
    ("rope_theta", ["rope_theta"], "rope_theta", REQ),
    ("crope_theta", ["compress_rope_theta"], "compress_rope_theta", REQ),
    ("n_experts", ["n_routed_experts"], "n_routed_experts", REQ),
    ("n_active", ["num_experts_per_tok"], "n_activated_experts", REQ),
    ("n_shared", ["n_shared_experts"], "n_shared_experts", REQ),
    ("moe_inter", ["moe_intermediate_size"], "moe_inter_dim", REQ),
    ("score_func", ["scoring_func"], "score_func", REQ),
    ("norm_topk", ["norm_topk_prob"], "norm_topk_prob", REQ),
    ("route_scale", ["routed_scaling_factor"], "route_scale", REQ),
    ("gate_temp", ["gate_temp"], "gate_temp", 1.0),
    ("swiglu_limit", ["swiglu_limit"], "swiglu_limit", REQ),
    ("hc", ["hc_mult"], "hc_mult", REQ),
    ("sinkhorn_iters", ["hc_sinkhorn_iters"], "hc_sinkhorn_iters", REQ),
    ("hc_eps", ["hc_eps"], "hc_eps", REQ),
    ("engram_layers", ["engram_layer_ids"], "engram_layer_ids", []),
    ("engram_rows", ["engram_num_embeddings"], "engram_num_embeddings", []),
    ("engram_max_ngram", ["engram_max_ngram_size"], "engram_max_ngram_size", None),
    ("engram_vocab", ["engram_vocab_size"], "engram_vocab_size", None),
    ("engram_heads", ["engram_n_heads"], "engram_n_heads", None),
    ("engram_hd", ["engram_head_dim"], "engram_head_dim", None),
    ("engram_pad", ["engram_pad_token_id", "engram_pad_id"], "engram_pad_id", None),
    ("engram_classes", ["engram_compressed_vocab_size"], "engram_compressed_vocab_size", None),
    ("engram_mults", ["engram_hash_multipliers"], "engram_hash_multipliers", None),
    ("engram_map_file", ["engram_token_map_file"], "engram_token_map_file", None),
    ("noise_id", ["dspark_noise_token_id"], "dspark_noise_token_id", -1),
    ("first_k_dense", ["first_k_dense_replace"], None, 0),
    ("num_hash_layers", ["num_hash_layers"], None, 0),
]


class Config:
    """The fields of MODEL.md §1.1 the forward needs, plus the derived role table (§1.2)."""

    def __init__(self, path):
        with open(path, "r", encoding="utf-8") as fh:
            top = json.load(fh)
        self.path = path
        hf = "text_config" in top
        text = top.get("text_config", {}) if hf else {}
        for attr, hf_names, flat, default in FIELDS:
            val, found = None, False
            if hf:
                for n in hf_names:
                    for src in (text, top):
                        if n in src:
                            val, found = src[n], True
                            break
                    if found:
                        break
            elif flat is not None and flat in top:
                val, found = top[flat], True
            if not found:
                if default is REQ:
                    raise CheckpointError(f"{path}: field {hf_names[0] if hf else flat!r} is missing (MODEL.md §1.1)")
                val = default
            setattr(self, attr, val)
        # YaRN: nested rope_scaling (HF) or flat names
        if hf:
            # absent rope_scaling = no YaRN (original length 0, MODEL.md §2.5 "whenever original length > 0")
            rs = text.get("rope_scaling", top.get("rope_scaling")) or {}
            self.rope_factor = float(rs.get("factor", 1.0))
            self.rope_orig = int(rs.get("original_max_position_embeddings", 0))
            self.beta_fast = float(rs.get("beta_fast", 32.0))
            self.beta_slow = float(rs.get("beta_slow", 1.0))
            qc = top.get("quantization_config", {})
            self.quant_method = qc.get("quant_method")
            self.engram_rot = top.get("engram_rotation_config", text.get("engram_rotation_config"))
        else:
            for attr, n, d in (("rope_factor", "rope_factor", 1.0), ("rope_orig", "original_seq_len", 0),
                               ("beta_fast", "beta_fast", 32.0), ("beta_slow", "beta_slow", 1.0)):
                setattr(self, attr, top.get(n, d))
            self.quant_method = "ascend" if top.get("dtype") != "fp8" else "fp8"
            self.engram_rot = top.get("engram_rotation_config")
        if self.quant_method not in ("ascend", "fp8"):
            raise CheckpointError(f"{path}: quantization_config.quant_method is {self.quant_method!r}; the oracle "
                                  "reads the W4A8 release (\"ascend\", CHECKPOINT.md §13) and the official \"fp8\" "
                                  "layout (§14) only")
        if self.cand_layer is None:
            self.cand_layer = -1
        if self.engram_mults is not None:
            self.engram_mults = [[int(v) for v in row] for row in self.engram_mults]  # exact, never float
        self._validate_and_derive()

    def _fail(self, rule, msg):
        raise CheckpointError(f"{self.path}: MODEL.md §1.2 rule {rule}: {msg}")

    def _validate_and_derive(self):
        L, S = self.n_layers, self.n_mtp
        cr = list(self.compress_ratios)
        if len(cr) == L:
            cr += [0] * S
        if len(cr) != L + S:
            self._fail(1, f"compress_ratios has {len(cr)} entries, expected {L + S} (L + S_d) or {L}")
        if any(r < 0 for r in cr) or any(cr[l] != 0 for l in range(L, L + S)):
            self._fail(1, f"compress_ratios {cr}: entries must be >= 0 and draft entries 0")
        self.ratios = cr
        K, I, c = list(self.kv_src), list(self.idx_src), self.cand_layer
        if not set(K) <= set(I):
            self._fail(2, f"kv sources {K} not a subset of index sources {I}")
        for i in I:
            if cr[i] <= 0:
                self._fail(2, f"index source {i} has ratio {cr[i]}")
        if self.score_func != "sqrtsoftplus":
            self._fail(8, f"scoring_func {self.score_func!r} (only sqrtsoftplus is implemented)")
        if (self.n_kv_heads != 1 or self.n_shared != 1 or self.first_k_dense != 0 or self.num_hash_layers != 0
                or self.rope_dim % 2 or self.rope_dim > self.head_dim or self.rope_dim > self.idx_dim
                or self.n_heads % self.o_groups):
            self._fail(6, "structural constraint violated")
        self.roles = []
        for l in range(L):
            r = cr[l]
            role = {"ratio": r, "kind": "SWA", "kv_src": -1, "idx_src": -1,
                    "cand_source": l == c, "uses_candidates": False,
                    "engram": self.engram_layers.index(l) if l in self.engram_layers else -1}
            if r > 0:
                ks = [k for k in K if k <= l]
                ix = [i for i in I if i <= l]
                if not ks or not ix:
                    self._fail(3, f"layer {l} (ratio {r}) has no kv or index source at or below it")
                role["kv_src"], role["idx_src"] = max(ks), max(ix)
                if any(cr[m] != r for m in range(role["kv_src"], l + 1)):
                    self._fail(3, f"layer {l}: ratio changes inside its kv group")
                role["kind"] = "FULL" if l in K else ("REINDEX" if l in I else "REUSE")
                role["uses_candidates"] = (l in I) and c >= 0 and c < l
            self.roles.append(role)
        if c >= 0:
            if c not in I:
                self._fail(4, f"candidate source {c} not an index source")
            if (self.cand_blocks - 1) * self.cand_bs + 1 < self.idx_topk:
                self._fail(7, f"(candidate_topk_blocks-1)*block+1 = {(self.cand_blocks - 1) * self.cand_bs + 1} "
                              f"< index_topk {self.idx_topk}")
        if len(self.engram_rows) != len(self.engram_layers):
            self._fail(5, "len(engram_num_embeddings) != len(engram_layer_ids)")


# ------------------------------------------------------------------------------------------------
# weights

class Linear:
    """A decoded linear: kind 'float' (w fp32 [out, in]) or 'quant' (codes float64 [out, in], s_w fp32)."""

    def __init__(self, kind, w=None, codes=None, s_w=None, label=None, act="int8"):
        self.kind, self.w, self.codes, self.s_w, self.label, self.act = kind, w, codes, s_w, label, act

    @property
    def out_features(self):
        return (self.w if self.kind == "float" else self.codes).shape[0]

    def rows(self, lo, hi):
        """The same linear restricted to output rows lo..hi-1 (a grouped projection such as wo_a)."""
        if self.kind == "float":
            return Linear("float", w=self.w[lo:hi], label=self.label, act=self.act)
        return Linear("quant", codes=self.codes[lo:hi], s_w=self.s_w[lo:hi], label=self.label)

    def __call__(self, x):
        """fp32 output rows (callers round to bf16 where MODEL.md stores bf16)."""
        if self.kind == "float":
            return nx.float_linear(nx.e4m3_fake(x) if self.act == "e4m3" else x, self.w)
        return nx.quant_linear(x, self.codes, self.s_w)


def unpack_int4(packed, out):
    """I8 [ceil(out/2), in] -> codes [out, in]: low nibble = even output row (CHECKPOINT.md §6.1)."""
    b = packed.astype(np.uint8)
    lo = (b & 0x0F).astype(np.int16)
    hi = (b >> 4).astype(np.int16)
    lo = np.where(lo >= 8, lo - 16, lo)
    hi = np.where(hi >= 8, hi - 16, hi)
    codes = np.empty((2 * b.shape[0], b.shape[1]), dtype=np.int16)
    codes[0::2], codes[1::2] = lo, hi
    return codes[:out]


# ------------------------------------------------------------------------------------------------
# the official FP8 / MXFP4 layout (CHECKPOINT.md §14), decoded from the format definitions

def e4m3_values(codes):
    """F8_E4M3 bytes -> exact fp32 values (FN variant: 0x7F/0xFF NaN, no infinities)."""
    b = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    e, m = (b >> 3) & 15, b & 7
    mag = np.where(e == 0, np.ldexp(m.astype(F64), -9), np.ldexp((8 + m).astype(F64), (e - 10).astype(np.int64)))
    v = np.where(b & 0x80, -mag, mag)
    v = np.where((b & 0x7F) == 0x7F, np.nan, v)
    return v.astype(np.float32)


def e8m0_exponents(s, name):
    s = np.asarray(s, dtype=np.uint8).astype(np.int64)
    if np.any(s == 255):
        raise CheckpointError(f"{name}: E8M0 scale 255 (NaN) (CHECKPOINT.md §14)")
    return s - 127


E2M1_TIMES2 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int64)


EXACT_SPREAD = 37   # kernels/kern_official.h


class Mxfp4Linear:
    """A routed expert in MXFP4, evaluated as the engine's integer path (kernels/kern_official.h):
    per-row int8 activations q (the W4A8 quantization), bsum[b] = Σ_{i in b} 2·e2m1(c_i)·q_i exactly;
    a row whose scale exponents span <= 37 sums bsum[b]·2^(e_b - 1) exactly (integers shifted above
    the row's smallest exponent) and rounds once to float64; a wider row sums in float64 with b
    ascending; y = fp32(acc · f64(s_x))."""

    def __init__(self, c2, exps, label="MXFP4", act="int8"):
        self.c2, self.exps, self.label, self.kind, self.act = c2, exps, label, "mxfp4", act

    @property
    def out_features(self):
        return self.c2.shape[0]

    def rows(self, lo, hi):
        return Mxfp4Linear(self.c2[lo:hi], self.exps[lo:hi], self.label, self.act)

    def __call__(self, x):
        if self.act == "e4m3":
            return self.call_e4m3(x)
        q, s_x, zero = nx.quant_activation(x)
        lead = q.shape[:-1]
        q = q.reshape(-1, q.shape[-1]).astype(np.int64)
        out, nin = self.c2.shape
        nb = nin // 32
        bs = np.einsum("rbj,obj->rob", q.reshape(-1, nb, 32), self.c2.reshape(out, nb, 32))  # exact int64
        emin = self.exps.min(axis=1)
        exact = (self.exps.max(axis=1) - emin) <= EXACT_SPREAD
        shift = np.where(exact[:, None], self.exps - emin[:, None], 0)
        total = (bs << shift[None, :, :]).sum(axis=2)                              # exact: < 2^63
        acc = total.astype(F64) * np.ldexp(1.0, emin - 1)[None, :]                 # one rounding
        if not np.all(exact):
            seq = np.zeros(bs.shape[:2], dtype=F64)
            for b in range(nb):                                                   # fixed order
                seq = seq + bs[:, :, b].astype(F64) * np.ldexp(1.0, self.exps[:, b] - 1)[None, :]
            acc = np.where(exact[None, :], acc, seq)
        y = (acc * s_x.reshape(-1).astype(F64)[:, None]).astype(np.float32)
        y = y.reshape(lead + (out,))
        y[zero] = np.float32(0.0)
        return y


    def call_e4m3(self, x):
        """The official activation numerics (kernels/official_e4m3.c): E4M3 units u = value·2^9 and
        block exponents kb per row; bsum[b] = Σ 2·e2m1(c_i)·u_i exactly; term exponents
        E[b] = e_w[b] + kb[b] - 10; a (row, output) pair whose E spans <= 24 (and <= 4096 blocks)
        sums exactly and rounds once to float64, else float64 with b ascending; y = fp32(acc)."""
        u, kb = nx.e4m3_units(x)
        lead = u.shape[:-1]
        u, kb = u.reshape(-1, u.shape[-1]), kb.reshape(-1, kb.shape[-1])
        out, nin = self.c2.shape
        nb = nin // 32
        bs = np.einsum("rbj,obj->rob", u.reshape(-1, nb, 32), self.c2.reshape(out, nb, 32))  # exact int64
        E = self.exps[None, :, :] + kb[:, None, :] - 10
        emin = E.min(axis=2)
        exact = ((E.max(axis=2) - emin) <= 24) & (nb <= 4096)
        shift = np.where(exact[:, :, None], E - emin[:, :, None], 0)
        acc = (bs << shift).sum(axis=2).astype(F64) * np.ldexp(1.0, emin)                # one rounding
        if not np.all(exact):
            seq = np.zeros(bs.shape[:2], dtype=F64)
            for b in range(nb):                                                        # fixed order
                seq = seq + bs[:, :, b].astype(F64) * np.ldexp(1.0, E[:, :, b])
            acc = np.where(exact, acc, seq)
        return acc.astype(np.float32).reshape(lead + (out,))


def fp8_tile_weights(codes, scale, name):
    """F8_E4M3 [out, in] with F8_E8M0 [ceil(out/32), ceil(in/32)] -> exact fp32 [out, in]."""
    out, nin = codes.shape
    if scale.shape != ((out + 31) // 32, (nin + 31) // 32):
        raise CheckpointError(f"{name}: scale shape {scale.shape}, expected {((out + 31) // 32, (nin + 31) // 32)}")
    ex = e8m0_exponents(scale, name)
    full = np.repeat(np.repeat(ex, 32, axis=0)[:out], 32, axis=1)[:, :nin]
    return np.ldexp(e4m3_values(codes).astype(F64), full).astype(np.float32)


class Checkpoint:
    def __init__(self, model_dir, activations="int8"):
        """activations "e4m3": the official layout's own numerics on every FP8/FP4 linear but wo_a."""
        self.dir = model_dir
        self.cfg = Config(os.path.join(model_dir, "config.json"))
        if activations == "e4m3" and self.cfg.quant_method != "fp8":
            raise CheckpointError(f"{model_dir}: E4M3 activations apply to the official fp8 layout only")
        self.activations = activations
        self._files = {}
        self.official = self.cfg.quant_method == "fp8"
        self.index_name = OFFICIAL_INDEX if self.official else INDEX_NAME
        with open(self._p(self.index_name), encoding="utf-8") as fh:
            self.weight_map = json.load(fh)["weight_map"]
        if self.official:        # no description, rotation, draft manifest or auxiliary files (§14)
            self.desc = {}
            self._aux = []
            return
        with open(self._p(DESC_NAME), encoding="utf-8") as fh:
            self.desc = json.load(fh)
        if self.desc.get("version") != "1.0.0" or self.desc.get("group_size") != 0:
            raise CheckpointError(f"{self._p(DESC_NAME)}: version {self.desc.get('version')!r} / group_size "
                                  f"{self.desc.get('group_size')!r}, expected '1.0.0' / 0 (CHECKPOINT.md §5)")
        for name, rel in self.weight_map.items():
            if os.path.isabs(rel) or ".." in rel.split("/"):
                raise CheckpointError(f"{self._p(INDEX_NAME)}: {name}: path {rel!r} is absolute or has '..'")
        self._aux = self._aux_files()

    def _p(self, rel):
        return os.path.join(self.dir, rel)

    def _aux_files(self):
        """Auxiliary files in the lookup order of CHECKPOINT.md §4 (those that exist)."""
        files = []
        man = self._p("mtpq_manifest.json")
        if os.path.exists(man):
            with open(man, encoding="utf-8") as fh:
                files += json.load(fh).get("output_shards", [])
        for f in ("mtp-vocab-00001-of-00001.safetensors", "vision-00001-of-00001.safetensors",
                  "engram_extra.safetensors"):
            files.append(f)
        return [f for f in files if os.path.exists(self._p(f))]

    def _file(self, rel):
        if rel not in self._files:
            path = self._p(rel)
            if os.path.exists(path):
                self._files[rel] = SafeTensorsFile(path)
            else:
                data = self._join_parts(rel)
                if data is None:
                    raise CheckpointError(f"{path}: file named by {INDEX_NAME} does not exist")
                self._files[rel] = SafeTensorsFile(path, data=data)
        return self._files[rel]

    def _join_parts(self, rel):
        """A file present only as <rel>.part-NN-of-MM: concatenate in memory, checking PARTS.sha256."""
        d, base = os.path.split(self._p(rel))
        if not os.path.isdir(d):
            return None
        pat = re.compile(re.escape(base) + r"\.part-(\d+)-of-(\d+)$")
        parts = sorted((int(m.group(1)), int(m.group(2)), f) for f in os.listdir(d) if (m := pat.match(f)))
        if not parts:
            return None
        mm = parts[0][1]
        if [p[0] for p in parts] != list(range(mm)) or any(p[1] != mm for p in parts):
            raise CheckpointError(f"{self._p(rel)}: split parts {[p[2] for p in parts]} do not form 00..{mm - 1:02d}")
        sums = {}
        sfile = os.path.join(d, "PARTS.sha256")
        if os.path.exists(sfile):
            with open(sfile, encoding="utf-8") as fh:
                for line in fh:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        h, name = line.split(None, 1)
                        sums[name.lstrip("*")] = h
        blob = b""
        for _, _, f in parts:
            with open(os.path.join(d, f), "rb") as fh:
                b = fh.read()
            if f in sums and hashlib.sha256(b).hexdigest() != sums[f]:
                raise CheckpointError(f"{os.path.join(d, f)}: SHA-256 differs from PARTS.sha256")
            blob += b
        if base in sums and hashlib.sha256(blob).hexdigest() != sums[base]:
            raise CheckpointError(f"{self._p(rel)}: reassembled SHA-256 differs from PARTS.sha256")
        return blob

    def has(self, name):
        return self._locate(name, required=False) is not None

    def _locate(self, name, required=True):
        if name in self.weight_map:
            f = self._file(self.weight_map[name])
            if name not in f:
                raise CheckpointError(f"{f.path}: tensor {name} listed in {INDEX_NAME} is absent from the file")
            return f
        for rel in self._aux:
            f = self._file(rel)
            if name in f:
                return f
        if required:
            raise CheckpointError(f"{self.dir}: tensor {name} not found in the index or auxiliary files")
        return None

    def raw(self, name):
        f = self._locate(name)
        return f.info(name).dtype, f.get(name)

    def label(self, name):
        return self.desc.get(name)

    def float_tensor(self, name):
        """A FLOAT tensor widened to fp32."""
        dt, a = self.raw(name)
        if dt == "F32":
            return np.array(a, dtype=np.float32)
        if dt == "BF16":
            return nx.bf16_bits_to_f32(a).reshape(a.shape)
        if dt == "F16":
            return nx.f16_bits_to_f32(a).reshape(a.shape)
        raise CheckpointError(f"{self._locate(name).path}: {name}: dtype {dt} is not a float dtype")

    def linear(self, prefix, out=None):
        """The linear `prefix` (…/wq_a): float, W8A8 or W4A8 according to its label and tensors."""
        wname = prefix + ".weight"
        dt, w = self.raw(wname)
        label = self.label(wname)
        if dt in ("F32", "BF16", "F16"):
            if label not in (None, "FLOAT"):
                raise CheckpointError(f"{wname}: label {label} but dtype {dt}")
            return Linear("float", w=self.float_tensor(wname), label="FLOAT")
        if self.official and self.has(prefix + ".scale"):
            sdt, sc = self.raw(prefix + ".scale")
            if sdt not in ("F8_E8M0", "U8"):
                raise CheckpointError(f"{wname}: scale dtype {sdt}, expected F8_E8M0")
            act = "int8" if prefix.endswith(".wo_a") or prefix == "wo_a" else self.activations   # §14: wo_a sees bf16
            if dt == "F8_E4M3":
                return Linear("float", w=fp8_tile_weights(w, sc, wname), label="FP8", act=act)
            if dt in ("I8", "U8", "F4"):   # F4 [out, in] arrives as its bytes [out, in/2]: the same packing
                out, half = w.shape
                if sc.shape != (out, 2 * half // 32):
                    raise CheckpointError(f"{wname}: scale shape {sc.shape}, expected {(out, 2 * half // 32)}")
                b = np.asarray(w).view(np.uint8).astype(np.int64)
                c2 = np.empty((out, 2 * half), dtype=np.int64)
                c2[:, 0::2], c2[:, 1::2] = E2M1_TIMES2[b & 15], E2M1_TIMES2[b >> 4]   # low nibble = even input
                return Mxfp4Linear(c2, e8m0_exponents(sc, wname), act=act)
            raise CheckpointError(f"{wname}: dtype {dt} with a .scale tensor is not an official format")
        if dt not in ("I8", "U8"):
            raise CheckpointError(f"{self._locate(wname).path}: {wname}: dtype {dt} unsupported")
        s_w = self.float_tensor(prefix + ".weight_scale").reshape(-1)
        if self.has(prefix + ".weight_offset"):
            off = self.float_tensor(prefix + ".weight_offset")
            if np.any(off != 0):
                raise CheckpointError(f"{wname}: weight_offset has non-zero values (CHECKPOINT.md §6.4)")
        n_out = s_w.shape[0]
        if label == "W4A8_DYNAMIC":
            if w.shape[0] != (n_out + 1) // 2:
                raise CheckpointError(f"{wname}: packed rows {w.shape[0]} != ceil({n_out}/2)")
            codes = unpack_int4(w.view(np.int8), n_out)
        elif label == "W8A8_DYNAMIC":
            if w.shape[0] != n_out:
                raise CheckpointError(f"{wname}: rows {w.shape[0]} != weight_scale rows {n_out}")
            codes = w.view(np.int8)
        else:
            raise CheckpointError(f"{wname}: quantized tensor with label {label!r} (CHECKPOINT.md §5)")
        return Linear("quant", codes=codes.astype(np.float64), s_w=s_w.astype(np.float32), label=label)

    def rotation_block(self):
        """The 32×32 QuaRot block B (MODEL.md §3), checked block-diagonal and orthogonal; None if the
        release has no rotation file."""
        if self.official:
            return None
        rel = (self.desc.get("optional", {}).get("quarot", {}).get("rotation_map", {})
               .get("global_rotation", "optional/quarot.safetensors"))
        path = self._p(rel)
        if not os.path.exists(path):
            return None
        R = np.array(SafeTensorsFile(path).get("global_rotation"), dtype=np.float32)
        D = self.cfg.dim
        if R.shape != (D, D):
            raise CheckpointError(f"{path}: global_rotation shape {R.shape}, expected {(D, D)}")
        B = R[:32, :32].copy()
        mask = np.kron(np.eye(D // 32), np.ones((32, 32))) > 0
        tiled = np.kron(np.eye(D // 32), B)
        if np.max(np.abs(np.where(mask, R - tiled, R))) > 1e-6:
            raise CheckpointError(f"{path}: global_rotation is not block-diagonal with one repeated 32x32 block")
        if np.max(np.abs(B.astype(np.float64).T @ B - np.eye(32))) > 1e-4:
            raise CheckpointError(f"{path}: rotation block is not orthogonal within 1e-4")
        return B

    def token_map(self):
        """raw id -> Engram class from the fixture's map file (u32 little-endian, vocab_size entries)."""
        cfg = self.cfg
        if not cfg.engram_map_file:
            raise CheckpointError(f"{cfg.path}: Engram layers configured but no engram_token_map_file; the oracle "
                                  "does not compute the tokenizer normalization map")
        path = self._p(cfg.engram_map_file)
        m = np.fromfile(path, dtype="<u4")
        if m.shape[0] != cfg.vocab_size:
            raise CheckpointError(f"{path}: {m.shape[0]} entries, expected vocab_size {cfg.vocab_size}")
        if len(np.unique(m)) != cfg.engram_classes:
            raise CheckpointError(f"{path}: {len(np.unique(m))} classes, expected {cfg.engram_classes}")
        return m.astype(np.int64)

    def engram_table(self, layer):
        """(codes int8 [rows, hd], scales fp32 [rows, hd/32]) of an Engram layer's table."""
        if self.official:   # FP8 rows with E8M0 per-32 scales: decoded values and exact fp32 powers of two
            name = f"layers.{layer}.engram.embed"
            codes = e4m3_values(self.raw(name + ".weight")[1])
            scales = np.ldexp(np.float32(1.0), e8m0_exponents(self.raw(name + ".scale")[1], name)).astype(np.float32)
            want = self.cfg.engram_rows[self.cfg.engram_layers.index(layer)]
            if codes.shape[0] != want or scales.shape[0] != want:
                raise CheckpointError(f"{name}: {codes.shape[0]} rows, expected engram_num_embeddings {want}")
            return codes, scales
        codes = self.raw(f"layers.{layer}.engram.embed.weight")[1]
        scales = self.float_tensor(f"layers.{layer}.engram.embed.scale")
        want = self.cfg.engram_rows[self.cfg.engram_layers.index(layer)]
        if codes.shape[0] != want or scales.shape[0] != want:
            raise CheckpointError(f"layers.{layer}.engram.embed: {codes.shape[0]} code rows / {scales.shape[0]} scale "
                                  f"rows, expected engram_num_embeddings {want} (CHECKPOINT.md §9)")
        return codes.view(np.int8), scales
