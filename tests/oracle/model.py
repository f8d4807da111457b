"""The oracle forward (MODEL.md §2, §3 item 1, §6.2), written from the spec alone.

It processes a whole token sequence in one shot: every row at position p sees exactly what the
token-by-token semantics give it (its own window, the compressed entries with index < N_p, the
candidate mask and top-k selections computed for that row), which MODEL.md §6.2 states is what any
chunking must reproduce, with the default `index_keys = arch` reading of §7.1.  Working over all
rows at once lets NumPy vectorize every step; causality is enforced by masks, never by ordering,
and the self-test checks that a prefix of a sequence gives bit-identical rows.

Every rounding follows docs/NUMERICS.md through the helpers of numerics.py; the comments name the
MODEL.md section of each step.  Values are fp32 arrays; quantities MODEL.md stores in bf16 hold
bf16 values.  Draft (DSpark) stages are not part of this forward.
"""
import numpy as np

import engram_hash
import numerics as nx
from checkpoint import CheckpointError

F32, F64 = np.float32, np.float64


# ------------------------------------------------------------------------------------------------
# RoPE (MODEL.md §2.5)

class RopeTable:
    def __init__(self, r_d, base, yarn=None):
        """yarn = (factor, orig, beta_fast, beta_slow) for the CMP table, None for SWA."""
        n = r_d // 2
        i = np.arange(n, dtype=F64)
        pw = nx.f32(np.power(F64(base), 2.0 * i / r_d))           # correctly rounded power, one rounding
        f = (F32(1.0) / pw).astype(F32)                            # fp32 reciprocal
        if yarn is not None and yarn[1] > 0:
            factor, orig, bf, bs = yarn

            def cd(b):
                return r_d * np.log(orig / (b * 2.0 * np.pi)) / (2.0 * np.log(base))
            low = max(int(np.floor(cd(bf))), 0)
            high = min(int(np.ceil(cd(bs))), r_d - 1)
            ramp = nx.f32(np.clip((i - low) / max(high - low, 0.001), 0.0, 1.0))
            smooth = (F32(1.0) - ramp).astype(F32)
            one_minus = (F32(1.0) - smooth).astype(F32)
            f = ((((f / F32(factor)).astype(F32) * one_minus).astype(F32)) + (f * smooth).astype(F32)).astype(F32)
            self.low, self.high = low, high
        self.freq = f

    def cos_sin(self, pos):
        ang = (np.asarray(pos, dtype=F32)[:, None] * self.freq[None, :]).astype(F32)   # fp32 product
        a64 = ang.astype(F64)
        return nx.f32(np.cos(a64)), nx.f32(np.sin(a64))


def rope(x, cos, sin, inverse=False):
    """Rotate the last r_d dims of x [T, ..., n] (interleaved pairs) by +angle (or -angle); bf16 result.
    cos/sin: [T, r_d/2], broadcast over the middle axes."""
    x = np.array(x, dtype=F32)
    r_d = 2 * cos.shape[-1]
    shape = (cos.shape[0],) + (1,) * (x.ndim - 2) + (cos.shape[-1],)
    c, s = cos.reshape(shape).astype(F64), sin.reshape(shape).astype(F64)
    a = x[..., x.shape[-1] - r_d::2].astype(F64)
    b = x[..., x.shape[-1] - r_d + 1::2].astype(F64)
    if inverse:
        na, nb = a * c + b * s, -a * s + b * c
    else:
        na, nb = a * c - b * s, a * s + b * c
    x[..., x.shape[-1] - r_d::2] = nx.bf16(nx.f32(na))
    x[..., x.shape[-1] - r_d + 1::2] = nx.bf16(nx.f32(nb))
    return x


# ------------------------------------------------------------------------------------------------
# hyper-connections (MODEL.md §2.3)

def hc_mixes(X, fn, base, scale, cfg):
    """X [T, HC, D] -> pre [T, HC], post [T, HC], C [T, HC, HC] (row = source copy)."""
    T, HC, D = X.shape
    f = X.reshape(T, HC * D)
    ss = nx.sumsq64(f)
    rs = nx.f32(1.0 / np.sqrt(ss.astype(F64) / (HC * D) + cfg.norm_eps))
    m = (nx.dot64(f, fn) * rs[:, None]).astype(F32)
    eps = F32(cfg.hc_eps)
    arg_pre = ((m[:, :HC] * scale[0]).astype(F32) + base[:HC]).astype(F32)
    pre = (nx.f32(nx.sigmoid64(arg_pre)) + eps).astype(F32)
    arg_post = ((m[:, HC:2 * HC] * scale[1]).astype(F32) + base[HC:2 * HC]).astype(F32)
    post = nx.f32(2.0 * nx.sigmoid64(arg_post))
    C = ((m[:, 2 * HC:] * scale[2]).astype(F32) + base[2 * HC:]).astype(F32).reshape(T, HC, HC)
    # truncated Sinkhorn, exactly as written: row softmax (+eps), column normalization, then
    # (iters-1) rounds of row and column normalization with eps in each denominator
    mx = np.max(C, axis=2, keepdims=True)
    e = nx.f32(np.exp((C - mx).astype(F32).astype(F64)))
    den = nx.f32(np.sum(e.astype(F64), axis=2, keepdims=True))
    C = ((e / den).astype(F32) + eps).astype(F32)
    C = (C / (nx.f32(np.sum(C.astype(F64), axis=1, keepdims=True)) + eps).astype(F32)).astype(F32)
    for _ in range(cfg.sinkhorn_iters - 1):
        C = (C / (nx.f32(np.sum(C.astype(F64), axis=2, keepdims=True)) + eps).astype(F32)).astype(F32)
        C = (C / (nx.f32(np.sum(C.astype(F64), axis=1, keepdims=True)) + eps).astype(F32)).astype(F32)
    return pre, post, C


def collapse(X, w):
    """bf16(fp32(Σ_k f64(w_k)·f64(X_k)))  X [T, HC, D], w [T, HC]."""
    return nx.bf16(nx.f32(np.einsum("tk,tkd->td", w.astype(F64), X.astype(F64))))


def expand(y, R, post, C):
    """Y[j] = bf16(fp32(f64(post_j)·f64(y) + Σ_i f64(C_ij)·f64(R_i)))."""
    acc = post.astype(F64)[:, :, None] * y.astype(F64)[:, None, :]
    acc += np.einsum("tij,tid->tjd", C.astype(F64), R.astype(F64))
    return nx.bf16(nx.f32(acc))


# ------------------------------------------------------------------------------------------------
# the model

class Layer:
    pass


class Oracle:
    def __init__(self, ckpt):
        self.ck = ckpt
        cfg = self.cfg = ckpt.cfg
        self.rope_swa = RopeTable(cfg.rope_dim, cfg.rope_theta)
        self.rope_cmp = RopeTable(cfg.rope_dim, cfg.crope_theta,
                                  (cfg.rope_factor, cfg.rope_orig, cfg.beta_fast, cfg.beta_slow))
        self.embed = ckpt.float_tensor("embed.weight")
        self.norm_w = ckpt.float_tensor("norm.weight")
        self.head = ckpt.linear("head")
        self.layers = [self._load_layer(l) for l in range(cfg.n_layers)]
        self._init_engram()

    # -------------------------------------------------------------------------------- loading
    def _load_layer(self, l):
        ck, cfg, p = self.ck, self.cfg, f"layers.{l}."
        L = Layer()
        L.role = cfg.roles[l]
        for n in ("attn_norm", "ffn_norm"):
            setattr(L, n, ck.float_tensor(p + n + ".weight"))
        for site in ("attn", "ffn"):
            setattr(L, f"hc_{site}", (ck.float_tensor(p + f"hc_{site}_fn"), ck.float_tensor(p + f"hc_{site}_base"),
                                      ck.float_tensor(p + f"hc_{site}_scale")))
        a = p + "attn."
        L.wq_a, L.wq_b, L.wkv = ck.linear(a + "wq_a"), ck.linear(a + "wq_b"), ck.linear(a + "wkv")
        L.q_norm, L.kv_norm = ck.float_tensor(a + "q_norm.weight"), ck.float_tensor(a + "kv_norm.weight")
        L.wo_a, L.wo_b = ck.linear(a + "wo_a"), ck.linear(a + "wo_b")
        L.sink = ck.float_tensor(a + "attn_sink")
        kind = L.role["kind"]
        if kind == "FULL":
            L.c_wkv = ck.linear(a + "compressor.wkv")
            L.c_wgate = ck.linear(a + "compressor.wgate") if L.role["ratio"] >= 2 else None
            L.c_norm = ck.float_tensor(a + "compressor.norm.weight")
            L.i_wk = ck.linear(a + "indexer.wk")
            L.i_knorm = ck.float_tensor(a + "indexer.k_norm.weight")
        if kind in ("FULL", "REINDEX"):
            L.i_wq_b = ck.linear(a + "indexer.wq_b")
            L.i_wproj = ck.linear(a + "indexer.weights_proj")
        f = p + "ffn."
        L.gate_w = ck.float_tensor(f + "gate.weight")
        L.gate_b = ck.float_tensor(f + "gate.bias")
        L.experts = [(ck.linear(f + f"experts.{e}.w1"), ck.linear(f + f"experts.{e}.w3"),
                      ck.linear(f + f"experts.{e}.w2")) for e in range(cfg.n_experts)]
        L.shared = (ck.linear(f + "shared_experts.w1"), ck.linear(f + "shared_experts.w3"),
                    ck.linear(f + "shared_experts.w2"))
        if L.role["engram"] >= 0:
            e = p + "engram."
            L.e_codes, L.e_scales = ck.engram_table(l)
            L.e_wkv = ck.linear(e + "wkv")
            L.e_wq = (ck.float_tensor(e + "q_weight") * ck.float_tensor(e + "k_weight")).astype(F32)
        return L

    def _init_engram(self):
        cfg = self.cfg
        self.B = self.ck.rotation_block()
        rot = cfg.engram_rot or {}
        if rot.get("runtime_delta_rotation", False):
            raise CheckpointError(f"{cfg.path}: engram_rotation_config.runtime_delta_rotation=true is unsupported")
        self.gate_unrotate = self.B is not None and rot.get("key_and_gate_basis", "original") == "original"
        self.value_rotate = self.B is not None and not rot.get("value_projection_rotated", True)
        if not cfg.engram_layers:
            return
        self.token_class = self.ck.token_map()
        self.engram_pad = int(self.token_class[cfg.engram_pad])
        po = engram_hash.primes_and_offsets(len(cfg.engram_layers), cfg.engram_max_ngram, cfg.engram_heads,
                                            cfg.engram_vocab)
        self.engram_const = []
        for e, l in enumerate(cfg.engram_layers):
            primes, offs = po[e]
            if sum(primes) != cfg.engram_rows[e]:
                raise CheckpointError(f"{cfg.path}: engram_num_embeddings[{e}] = {cfg.engram_rows[e]}, but the primes "
                                      f"of layer {l} sum to {sum(primes)} (MODEL.md §2.10.2)")
            mults = engram_hash.multipliers(l, cfg.engram_classes, cfg.engram_max_ngram)
            if cfg.engram_mults is not None and list(cfg.engram_mults[e]) != mults:
                raise CheckpointError(f"{cfg.path}: engram_hash_multipliers[{e}] = {cfg.engram_mults[e]}, computed "
                                      f"{mults} (Appendix A)")
            self.engram_const.append((mults, primes, offs))

    # -------------------------------------------------------------------------------- forward
    def forward(self, tokens, want_hidden=True):
        """tokens: ids at positions 0..T-1.  Returns {'hidden': [L × [T, HC, D]], 'logits': [T, V], 'sel': …}."""
        cfg = self.cfg
        tokens = np.asarray(tokens, dtype=np.int64)
        T, HC = len(tokens), cfg.hc
        pos = np.arange(T)
        self.cs_swa = self.rope_swa.cos_sin(pos)
        self.cs_cmp = self.rope_cmp.cos_sin(pos)
        x = self.embed[tokens]                                         # bf16 rows
        X = np.repeat(x[:, None, :], HC, axis=1).astype(F32)
        pre = np.zeros((T, HC), dtype=F32)
        pre[:, 0] = 1.0
        step = {"entries": {}, "idxk": {}, "sel": {}, "cand": None}
        self.margins = {}
        hidden = []
        for l, L in enumerate(self.layers):
            if L.role["engram"] >= 0:
                X = self.engram(L, X, tokens)
            X, pre = self.block(l, L, X, pre, step)
            if want_hidden:
                hidden.append(X)
        y = nx.rmsnorm(collapse(X, pre), self.norm_w, cfg.norm_eps)
        logits = self.head(y)                                          # fp32 logits
        return {"hidden": hidden, "logits": logits, "sel": step["sel"], "margins": dict(self.margins)}

    def block(self, l, L, X, pre_in, step):
        cfg = self.cfg
        R = X
        a_pre, a_post, a_C = hc_mixes(X, *L.hc_attn, cfg)
        u = nx.rmsnorm(collapse(X, pre_in), L.attn_norm, cfg.norm_eps)
        X = expand(self.attention(l, L, u, step), R, a_post, a_C)
        R = X
        f_pre, f_post, f_C = hc_mixes(X, *L.hc_ffn, cfg)
        u = nx.rmsnorm(collapse(X, a_pre), L.ffn_norm, cfg.norm_eps)
        X = expand(self.moe(L, u), R, f_post, f_C)
        return X, f_pre

    # -------------------------------------------------------------------------------- attention
    def attention(self, l, L, u, step):
        """MODEL.md §2.6, with the compressor (§2.7) and indexer (§2.8) of FULL/REINDEX layers."""
        cfg = self.cfg
        T = u.shape[0]
        H, dh = cfg.n_heads, cfg.head_dim
        role = L.role
        cos, sin = self.cs_cmp if role["ratio"] > 0 else self.cs_swa
        qr = nx.rmsnorm(nx.bf16(L.wq_a(u)), L.q_norm, cfg.norm_eps)
        q = rope(nx.bf16(L.wq_b(qr)).reshape(T, H, dh), cos, sin)
        kv = rope(nx.rmsnorm(nx.bf16(L.wkv(u)), L.kv_norm, cfg.norm_eps), cos, sin)
        if role["kind"] == "FULL":                      # writes before reads: entries, keys, then indexer
            self.compress(l, L, u, step)
        if role["kind"] in ("FULL", "REINDEX"):
            step["sel"][l] = self.indexer(l, L, u, qr, step)
        if role["ratio"] > 0:
            sel = step["sel"][role["idx_src"]]
            entries = step["entries"][role["kv_src"]]
        else:
            sel, entries = None, None

        pos = np.arange(T)
        wmask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - cfg.window)   # [q, key]
        scale = nx.f32(1.0 / np.sqrt(F64(dh)))
        q64 = q.astype(F64)
        s_w = (nx.f32(np.einsum("thd,kd->htk", q64, kv.astype(F64))) * scale).astype(F32)      # [H, T, T]
        s_w = np.where(wmask[None], s_w, -np.inf).astype(F32)
        if sel is not None and entries.shape[0] > 0:
            cmask = np.zeros((T, entries.shape[0]), dtype=bool)
            for t in range(T):
                cmask[t, sel[t]] = True
            s_c = (nx.f32(np.einsum("thd,kd->htk", q64, entries.astype(F64))) * scale).astype(F32)
            s_c = np.where(cmask[None], s_c, -np.inf).astype(F32)
        else:
            cmask, s_c = None, np.full((H, T, 0), -np.inf, dtype=F32)
        sink = L.sink.astype(F32)[:, None]                                                   # [H, 1]
        m = np.maximum(np.maximum(s_w.max(axis=2), s_c.max(axis=2, initial=-np.inf)), sink)   # [H, T]
        m64 = m.astype(F64)[:, :, None]
        e_w = np.where(wmask[None], nx.f32(np.exp(s_w.astype(F64) - m64)), F32(0))
        e_c = (np.where(cmask[None], nx.f32(np.exp(s_c.astype(F64) - m64)), F32(0))
               if cmask is not None else s_c * 0)
        e_s = nx.f32(np.exp(sink.astype(F64) - m.astype(F64)))                               # [H, T]
        den = nx.f32(e_w.astype(F64).sum(axis=2) + e_c.astype(F64).sum(axis=2) + e_s.astype(F64))
        p_w = (e_w / den[:, :, None]).astype(F32)
        o64 = np.einsum("htk,kd->thd", p_w.astype(F64), kv.astype(F64))
        if cmask is not None:
            p_c = (e_c / den[:, :, None]).astype(F32)
            o64 = o64 + np.einsum("htk,kd->thd", p_c.astype(F64), entries.astype(F64))
        o = rope(nx.bf16(nx.f32(o64)), cos, sin, inverse=True).reshape(T, H * dh)
        G, gin, gout = cfg.o_groups, H * dh // cfg.o_groups, cfg.o_lora
        z = np.concatenate([L.wo_a.rows(g * gout, (g + 1) * gout)(o[:, g * gin:(g + 1) * gin])
                            for g in range(G)], axis=1)                # group g sees only its heads
        return nx.bf16(L.wo_b(nx.bf16(z)))

    def compress(self, l, L, u, step):
        """Compressed entries and index keys of every group complete within the sequence (§2.7)."""
        cfg = self.cfg
        r = L.role["ratio"]
        T = u.shape[0]
        n = T // r
        if r == 1:
            lat = nx.rmsnorm(nx.bf16(L.c_wkv(u)), L.c_norm, cfg.norm_eps)
        else:
            a = L.c_wkv(u)[:n * r]                          # fp32 (float linear on the widened bf16 row)
            a = a.reshape(n, r, a.shape[-1])
            g = L.c_wgate(u)[:n * r]
            g = g.reshape(n, r, g.shape[-1])
            mx = np.max(g, axis=1, keepdims=True)
            e = nx.f32(np.exp(g.astype(F64) - mx.astype(F64)))
            den = nx.f32(e.astype(F64).sum(axis=1, keepdims=True))
            w = (e / den).astype(F32)
            pooled = nx.f32((w.astype(F64) * a.astype(F64)).sum(axis=1))
            lat = nx.rmsnorm(nx.bf16(pooled), L.c_norm, cfg.norm_eps)
        epos = np.arange(n) * r                              # first token of each group
        cos, sin = self.rope_cmp.cos_sin(epos)
        idxk = rope(nx.rmsnorm(nx.bf16(L.i_wk(lat)), L.i_knorm, cfg.norm_eps), cos, sin)
        step["idxk"][l] = idxk
        step["entries"][l] = rope(lat, cos, sin)

    def indexer(self, l, L, u, qr, step):
        """Per-row top-k selection (sorted ascending) of compressed entries (§2.8)."""
        cfg = self.cfg
        role = L.role
        r = role["ratio"]
        T = u.shape[0]
        nh, hd = cfg.idx_heads, cfg.idx_dim
        idxk = step["idxk"][role["kv_src"]]
        N = idxk.shape[0]
        n_vis = (np.arange(T) + 1) // r                      # N_p
        qi = rope(nx.bf16(L.i_wq_b(qr)).reshape(T, nh, hd), *self.cs_cmp)
        # weights_proj is a linear like any other: bf16 output, widened, times the fp32 constant
        cst = nx.f32(1.0 / np.sqrt(F64(hd * nh)))
        w = (nx.bf16(L.i_wproj(u)) * cst).astype(F32)                                        # [T, nh]
        dots = nx.f32(np.einsum("thd,sd->ths", qi.astype(F64), idxk.astype(F64)))           # [T, nh, N]
        I = nx.f32(np.einsum("th,ths->ts", w.astype(F64), np.maximum(dots, F32(0)).astype(F64)))
        visible = np.arange(N)[None, :] < n_vis[:, None]
        I = np.where(visible, I, -np.inf).astype(F32)
        if role["cand_source"]:
            step["cand"] = self.candidates(I, n_vis)
        if role["uses_candidates"]:
            I = np.where(step["cand"], I, -np.inf).astype(F32)
        self._note_margin("indexer", I, cfg.idx_topk, rows=n_vis > cfg.idx_topk)
        order = nx.topk_desc(I, min(cfg.idx_topk, N) if N else 0)
        sel = []
        for t in range(T):
            k = min(cfg.idx_topk, int(n_vis[t]))
            s = order[t, :k]
            if k and not np.all(np.isfinite(I[t, s])):
                raise AssertionError(f"layer {l} row {t}: top-k reached a masked entry (MODEL.md §1.2 rule 7)")
            sel.append(np.sort(s))
        return sel

    def candidates(self, I, n_vis):
        """Candidate mask [T, N] built by the candidate source from its own scores (§2.8)."""
        cfg = self.cfg
        T, N = I.shape
        B = cfg.cand_bs
        if N == 0:
            return np.zeros((T, 0), dtype=bool)
        nbt = -(-N // B)
        Ipad = np.full((T, nbt * B), -np.inf, dtype=F32)
        Ipad[:, :N] = I
        bs = Ipad.reshape(T, nbt, B).max(axis=2)
        newest = np.maximum(n_vis - 1, 0) // B
        bs_inf = bs.copy()
        bs_inf[np.arange(T), newest] = np.inf
        self._note_margin("cand_blocks", bs_inf, cfg.cand_blocks, rows=-(-n_vis // B) > cfg.cand_blocks)
        cand = np.zeros((T, N), dtype=bool)
        for t in range(T):
            nv = int(n_vis[t])
            if nv == 0:
                continue
            nb = -(-nv // B)
            b = bs[t, :nb].copy()
            b[(nv - 1) // B] = np.inf
            keep = nx.topk_desc(b, min(cfg.cand_blocks, nb))
            blk = np.arange(nv) // B
            cand[t, :nv] = np.isin(blk, keep)
        return cand

    # -------------------------------------------------------------------------------- MoE
    def router(self, L, u):
        """MODEL.md §2.9 router: sqrt-softplus scores, bias-steered top-k, normalized and scaled weights.
        Returns (sel [T, k] in selection order, w [T, k] fp32)."""
        cfg = self.cfg
        z = nx.dot64(u, L.gate_w)
        if cfg.gate_temp != 1.0:
            z = (z / F32(cfg.gate_temp)).astype(F32)
        z64 = z.astype(F64)
        sp = np.where(z64 > 20.0, z64, np.log1p(np.exp(np.minimum(z64, 20.0))))
        s = nx.f32(np.sqrt(sp))
        biased = (s + L.gate_b).astype(F32)
        k = cfg.n_active
        sel = nx.topk_desc(biased, k)
        self._note_margin("router", biased, k)
        w = np.take_along_axis(s, sel, axis=1)
        if cfg.norm_topk and k > 1:
            tot = nx.f32(w.astype(F64).sum(axis=1))
            w = (w / nx.f32(tot.astype(F64) + 1e-20)[:, None]).astype(F32)
        return sel, (w * F32(cfg.route_scale)).astype(F32)

    def moe(self, L, u):
        """MODEL.md §2.9: routed SwiGLU experts plus the shared one, summed in ascending expert order
        (float64, one rounding, so the order is immaterial)."""
        sel, w = self.router(L, u)
        acc = self.expert(L.shared, u, None).astype(F64)
        for e in range(self.cfg.n_experts):
            rows, slot = np.nonzero(sel == e)
            if rows.size:
                acc[rows] += self.expert(L.experts[e], u[rows], w[rows, slot]).astype(F64)
        return nx.bf16(nx.f32(acc))

    def _note_margin(self, kind, scores, k, rows=None):
        """Smallest relative gap between the k-th and (k+1)-th score over rows (diagnostic only: it
        tells a reader whether a mismatch sits on a near-tie)."""
        if scores.shape[-1] <= k or k == 0:
            return
        s = np.sort(scores.astype(F64), axis=-1)[..., ::-1]
        a, b = s[..., k - 1], s[..., k]
        ok = np.isfinite(a) & np.isfinite(b)
        if rows is not None:
            ok &= rows
        if not np.any(ok):
            return
        gap = np.min((a[ok] - b[ok]) / np.maximum(np.abs(a[ok]), 1e-30))
        self.margins[kind] = min(self.margins.get(kind, np.inf), float(gap))

    def expert(self, ex, u, w):
        w1, w3, w2 = ex
        g = nx.bf16(w1(u))
        v = nx.bf16(w3(u))
        lim = self.cfg.swiglu_limit
        if lim > 0:
            v = np.clip(v, F32(-lim), F32(lim)).astype(F32)
            g = np.minimum(g, F32(lim)).astype(F32)
        g64 = g.astype(F64)
        a = nx.f32(g64 / (1.0 + np.exp(-g64)) * v.astype(F64))
        if w is not None:
            a = (a * w[:, None]).astype(F32)                 # routing weight before w2
        return nx.bf16(w2(nx.bf16(a)))

    # -------------------------------------------------------------------------------- Engram
    def engram(self, L, X, tokens):
        """MODEL.md §2.10 with the QuaRot un-rotation of the gate input (§3 item 1)."""
        cfg = self.cfg
        T, HC, D = X.shape
        e_idx = L.role["engram"]
        mults, primes, offs = self.engram_const[e_idx]
        cls = [int(c) for c in self.token_class[tokens]]
        rows = np.array(engram_hash.row_ids(cls, self.engram_pad, mults, primes, offs,
                                            cfg.engram_max_ngram, cfg.engram_heads), dtype=np.int64)
        if L.e_codes.shape[1] != cfg.engram_hd or L.e_scales.shape[1] * 32 != cfg.engram_hd:
            raise CheckpointError(f"layers.{cfg.engram_layers[e_idx]}.engram.embed: rows of {L.e_codes.shape[1]} codes "
                                  f"and {L.e_scales.shape[1]} scales, expected engram_head_dim {cfg.engram_hd}")
        codes = L.e_codes[rows].astype(F32)                                   # [T, ncols, hd]
        sc = np.repeat(L.e_scales[rows], 32, axis=2)                           # per-32 scale
        emb = (codes * sc).astype(F32).reshape(T, -1)                          # exact in bf16
        if not nx.is_bf16(emb):
            raise CheckpointError(f"layers.{cfg.engram_layers[e_idx]}.engram.embed: dequantized rows are not exact "
                                  "in bf16 (scales must be powers of two, CHECKPOINT.md §9)")
        kv = nx.bf16(L.e_wkv(emb))
        value = kv[:, HC * D:]
        if self.value_rotate:
            value = nx.bf16(nx.f32(np.einsum("ji,tbj->tbi", self.B.astype(F64),
                                             value.reshape(T, D // 32, 32).astype(F64)).reshape(T, D)))
        gate = self.engram_gate(L, X, kv)
        return nx.bf16(nx.f32(X.astype(F64) + gate.astype(F64)[:, :, None] * value.astype(F64)[:, None, :]))

    def engram_gate(self, L, X, kv):
        """gate [T, HC] of every copy: signed-sqrt sigmoid of the normalized key·query dot, the query
        being the copy un-rotated to the original basis when the release is rotated (§3 item 1)."""
        cfg = self.cfg
        T, HC, D = X.shape
        dm05 = nx.f32(1.0 / np.sqrt(F64(D)))
        gate = np.empty((T, HC), dtype=F32)
        for k in range(HC):
            h = X[:, k]
            key = kv[:, k * D:(k + 1) * D]
            if self.gate_unrotate:                                             # o_b = B · h'_b
                o = nx.f32(np.einsum("ij,tbj->tbi", self.B.astype(F64),
                                     h.reshape(T, D // 32, 32).astype(F64))).reshape(T, D)
            else:
                o = h
            ss_o, ss_k = nx.sumsq64(o), nx.sumsq64(key)
            rstd = nx.f32((1.0 / np.sqrt(ss_o.astype(F64) / D + cfg.norm_eps))
                          * (1.0 / np.sqrt(ss_k.astype(F64) / D + cfg.norm_eps)))
            S = nx.f32(((o.astype(F64) * L.e_wq[k].astype(F64)) * key.astype(F64)).sum(axis=1))
            dot = ((S * rstd).astype(F32) * dm05).astype(F32)
            d64 = dot.astype(F64)
            gate[:, k] = nx.f32(nx.sigmoid64(np.copysign(np.sqrt(np.maximum(np.abs(d64), 1e-6)), d64)))
        return gate
