"""The DSpark draft (MODEL.md §4) in the oracle, written from the spec alone.

Given the committed token sequence, one oracle forward gives every position's aux features (the
HC-mean of the residual entering each dspark target layer: fp32 sum of the copies in copy order
times fp32(1/HC), one bf16 rounding), hence ctx = rmsnorm(bf16(main_proj·aux), main_norm) and every
stage's ring row rope_SWA(rmsnorm(bf16(wkv_s·ctx), kv_norm_s), p).  A draft pass at anchor position
P+1 runs the block [anchor, noise…] through the stages — the lagged mHC block of §2.3 whose
attention keys are the ring rows of positions max(0, P−W+1)..P plus all block rows (non-causal),
and whose MoE uses the draft's own expert counts — then the head on rmsnorm(collapse(X), norm), the
serial Markov correction (greedy, noise id masked) and the confidence head.  Roundings follow
docs/NUMERICS.md through numerics.py, as in model.py.
"""
import json

import numpy as np

import numerics as nx
from model import F32, F64, Layer, collapse, expand, hc_mixes, rope


def draft_settings(config_path):
    with open(config_path, "r", encoding="utf-8") as fh:
        top = json.load(fh)
    t = top.get("text_config", top)
    n_exp = t.get("dspark_n_routed_experts", 0) or t["n_routed_experts"]
    n_act = t.get("dspark_num_experts_per_tok", 0) or t["num_experts_per_tok"]
    return {"targets": list(t["dspark_target_layer_ids"]), "block": int(t["dspark_block_size"]),
            "rank": int(t["dspark_markov_rank"]), "n_experts": int(n_exp), "n_active": int(n_act),
            "noise": int(t["dspark_noise_token_id"])}


class DraftOracle:
    def __init__(self, oracle, config_path):
        self.o = oracle
        ck, cfg = oracle.ck, oracle.cfg
        self.ds = draft_settings(config_path)
        S = self.S = cfg.n_mtp
        self.stages = [self._load_stage(s) for s in range(S)]
        own = ck.has("mtp.0.embed.weight")
        self.embed = ck.float_tensor("mtp.0.embed.weight") if own else oracle.embed
        self.head = ck.linear(f"mtp.{S - 1}.head") if own else oracle.head
        self.main_proj = ck.linear("mtp.0.main_proj")
        self.main_norm = ck.float_tensor("mtp.0.main_norm.weight")
        self.norm = ck.float_tensor(f"mtp.{S - 1}.norm.weight")
        self.markov_embed = ck.float_tensor(f"mtp.{S - 1}.markov_head.embed.weight")
        self.markov_head = ck.linear(f"mtp.{S - 1}.markov_head.head")
        self.conf = ck.float_tensor(f"mtp.{S - 1}.confidence_head.proj.weight").reshape(-1)

    def _load_stage(self, s):
        ck, p = self.o.ck, f"mtp.{s}."
        L = Layer()
        L.attn_norm, L.ffn_norm = ck.float_tensor(p + "attn_norm.weight"), ck.float_tensor(p + "ffn_norm.weight")
        for site in ("attn", "ffn"):
            setattr(L, f"hc_{site}", (ck.float_tensor(p + f"hc_{site}_fn"), ck.float_tensor(p + f"hc_{site}_base"),
                                      ck.float_tensor(p + f"hc_{site}_scale")))
        a = p + "attn."
        L.wq_a, L.wq_b, L.wkv = ck.linear(a + "wq_a"), ck.linear(a + "wq_b"), ck.linear(a + "wkv")
        L.q_norm, L.kv_norm = ck.float_tensor(a + "q_norm.weight"), ck.float_tensor(a + "kv_norm.weight")
        L.wo_a, L.wo_b = ck.linear(a + "wo_a"), ck.linear(a + "wo_b")
        L.sink = ck.float_tensor(a + "attn_sink")
        f = p + "ffn."
        L.gate_w, L.gate_b = ck.float_tensor(f + "gate.weight"), ck.float_tensor(f + "gate.bias")
        L.experts = [(ck.linear(f + f"experts.{e}.w1"), ck.linear(f + f"experts.{e}.w3"),
                      ck.linear(f + f"experts.{e}.w2")) for e in range(self.ds["n_experts"])]
        L.shared = (ck.linear(f + "shared_experts.w1"), ck.linear(f + "shared_experts.w3"),
                    ck.linear(f + "shared_experts.w2"))
        return L

    # ---------------------------------------------------------------------------- features, rings
    def rings(self, tokens):
        """Ring rows [S][T, d_h] of every position of `tokens` (all committed)."""
        o, cfg = self.o, self.o.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        out = o.forward(tokens, want_hidden=True)
        feats = []
        for l in self.ds["targets"]:
            X = out["hidden"][l - 1]
            L = o.layers[l]
            if L.role["engram"] >= 0:
                X = o.engram(L, X, tokens)
            s = X[:, 0, :].astype(F32)
            for k in range(1, cfg.hc):
                s = (s + X[:, k, :]).astype(F32)
            feats.append(nx.bf16((s * F32(1.0 / cfg.hc)).astype(F32)))
        aux = np.concatenate(feats, axis=1)
        ctx = nx.rmsnorm(nx.bf16(self.main_proj(aux)), self.main_norm, cfg.norm_eps)
        cos, sin = o.rope_swa.cos_sin(np.arange(len(tokens)))
        return [rope(nx.rmsnorm(nx.bf16(L.wkv(ctx)), L.kv_norm, cfg.norm_eps), cos, sin) for L in self.stages]

    # ---------------------------------------------------------------------------- one draft pass
    def propose(self, rings, P, anchor):
        """Draft pass for the anchor at position P+1: (drafts [B], logits [B, V] fp32, conf [B] fp32)."""
        o, cfg, ds = self.o, self.o.cfg, self.ds
        B, HC = ds["block"], cfg.hc
        ids = np.array([anchor] + [ds["noise"]] * (B - 1), dtype=np.int64)
        cos, sin = o.rope_swa.cos_sin(np.arange(P + 1, P + 1 + B))
        X = np.repeat(self.embed[ids][:, None, :], HC, axis=1).astype(F32)
        pre = np.zeros((B, HC), dtype=F32)
        pre[:, 0] = 1.0
        lo = max(0, P - cfg.window + 1)
        for s, L in enumerate(self.stages):
            ring = rings[s][lo:P + 1]
            R = X
            a_pre, a_post, a_C = hc_mixes(X, *L.hc_attn, cfg)
            u = nx.rmsnorm(collapse(X, pre), L.attn_norm, cfg.norm_eps)
            X = expand(self.attention(L, u, ring, cos, sin), R, a_post, a_C)
            R = X
            f_pre, f_post, f_C = hc_mixes(X, *L.hc_ffn, cfg)
            u = nx.rmsnorm(collapse(X, a_pre), L.ffn_norm, cfg.norm_eps)
            X = expand(self.moe(L, u), R, f_post, f_C)
            pre = f_pre
        hid = collapse(X, pre)
        base = self.head(nx.rmsnorm(hid, self.norm, cfg.norm_eps))
        prev, drafts, logits, conf = anchor, [], [], []
        D = cfg.dim
        for i in range(B):
            me = self.markov_embed[prev]
            li = (base[i] + self.markov_head(me[None, :])[0]).astype(F32)
            masked = li.copy()
            masked[ds["noise"]] = -np.inf
            d = int(np.argmax(masked))                    # first maximum: ties to the lower id
            c = nx.f32(np.sum(self.conf[:D].astype(F64) * hid[i].astype(F64))
                       + np.sum(self.conf[D:].astype(F64) * me.astype(F64)))
            drafts.append(d)
            logits.append(li)
            conf.append(c)
            prev = d
        return np.array(drafts), np.stack(logits), np.array(conf, dtype=F32)

    def attention(self, L, u, ring, cos, sin):
        """MODEL.md §4.1 draft attention: keys = ring rows then every block row, no causal mask."""
        cfg = self.o.cfg
        B, H, dh = u.shape[0], cfg.n_heads, cfg.head_dim
        qr = nx.rmsnorm(nx.bf16(L.wq_a(u)), L.q_norm, cfg.norm_eps)
        q = rope(nx.bf16(L.wq_b(qr)).reshape(B, H, dh), cos, sin)
        kv = rope(nx.rmsnorm(nx.bf16(L.wkv(u)), L.kv_norm, cfg.norm_eps), cos, sin)
        keys = np.concatenate([ring, kv], axis=0).astype(F64)
        scale = nx.f32(1.0 / np.sqrt(F64(dh)))
        s = (nx.f32(np.einsum("thd,kd->htk", q.astype(F64), keys)) * scale).astype(F32)   # [H, B, nk]
        sink = L.sink.astype(F32)[:, None]
        m = np.maximum(s.max(axis=2), sink)
        e = nx.f32(np.exp(s.astype(F64) - m.astype(F64)[:, :, None]))
        e_s = nx.f32(np.exp(sink.astype(F64) - m.astype(F64)))
        den = nx.f32(e.astype(F64).sum(axis=2) + e_s.astype(F64))
        p = (e / den[:, :, None]).astype(F32)
        o = rope(nx.bf16(nx.f32(np.einsum("htk,kd->thd", p.astype(F64), keys))), cos, sin, inverse=True)
        o = o.reshape(B, H * dh)
        G, gin, gout = cfg.o_groups, H * dh // cfg.o_groups, cfg.o_lora
        z = np.concatenate([L.wo_a.rows(g * gout, (g + 1) * gout)(o[:, g * gin:(g + 1) * gin]) for g in range(G)], axis=1)
        return nx.bf16(L.wo_b(nx.bf16(z)))

    def moe(self, L, u):
        """MODEL.md §2.9 with the draft's expert counts (no bias_vl: text rows only)."""
        cfg, k = self.o.cfg, self.ds["n_active"]
        z = nx.dot64(u, L.gate_w)
        if cfg.gate_temp != 1.0:
            z = (z / F32(cfg.gate_temp)).astype(F32)
        z64 = z.astype(F64)
        sc = nx.f32(np.sqrt(np.where(z64 > 20.0, z64, np.log1p(np.exp(np.minimum(z64, 20.0))))))
        sel = nx.topk_desc((sc + L.gate_b).astype(F32), k)
        w = np.take_along_axis(sc, sel, axis=1)
        if cfg.norm_topk and k > 1:
            tot = nx.f32(w.astype(F64).sum(axis=1))
            w = (w / nx.f32(tot.astype(F64) + 1e-20)[:, None]).astype(F32)
        w = (w * F32(cfg.route_scale)).astype(F32)
        acc = self.o.expert(L.shared, u, None).astype(F64)
        for e in range(self.ds["n_experts"]):
            rows, slot = np.nonzero(sel == e)
            if rows.size:
                acc[rows] += self.o.expert(L.experts[e], u[rows], w[rows, slot]).astype(F64)
        return nx.bf16(nx.f32(acc))
