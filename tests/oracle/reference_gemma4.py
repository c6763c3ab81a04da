"""Gemma 4 in the numpy reference (float64, no cache), from Google's model definition (HF transformers' Gemma4,
as llama.cpp's converter lays its tensors out), not cachet's code:
- sliding and global layers with their own head width, KV head count and RoPE base; the global layers' RoPE is
  "proportional": only the first quarter of the pairs turn (the file's rope_freqs: 1 there, 1e30 elsewhere);
- per-head RMSNorm of Q and K (weights as stored), V RMS-normalized without a weight; where a layer has no
  attn_v, V is K's projection (before K's norm and RoPE); no query scaling (scores are Q.K);
- the last shared_kv_layers layers compute only Q and attend over the KV of the last earlier layer of their kind;
- post-norms of the attention and FFN outputs; GELU; the MoE block: a dense MLP (ffn_norm -> post_ffw_norm_1)
  plus experts (pre_ffw_norm_2 -> fused gate|up, down times the expert's scale -> post_ffw_norm_2) routed by
  rms(x) / sqrt(d) * scale, softmax, top-k renormalized; their sum through post_ffw_norm;
- per-layer embeddings: per_layer_token_embd rows * sqrt(width) plus the RMS-normed projection of the scaled
  embedding / sqrt(d), over sqrt(2); after each layer gelu(inp_gate(x)) * its slice -> proj -> post_norm, added;
- each layer's output times layer_output_scale; the final logits soft-capped."""
from __future__ import annotations

import numpy as np


def gelu(g):
    return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))


def rms(x, w, eps):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def rope_neox(x, theta, factors):
    """x: [T, heads, d]; every pair (i, i + d/2) turns by pos * theta^(-2i/d) / factors[i]."""
    T, _, d = x.shape
    half = d // 2
    inv = theta ** (-2.0 * np.arange(half) / d)
    if factors is not None:
        inv = inv / factors
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def gemma4_logits(m, ids):
    g, w, eps = m.gemma4, m.w, m.cfg.eps
    d, L, H = m.cfg.n_embd, m.cfg.n_layer, m.cfg.n_head
    T = len(ids)
    ids = np.asarray(ids)
    x = w["token_embd.weight"][ids] * float(np.sqrt(np.float32(d)))
    m.router_margin = np.full(T, np.inf)
    pl = g["per_layer"]
    if pl:
        tok = w["per_layer_token_embd.weight"][ids].reshape(T, L, pl) * float(np.sqrt(np.float32(pl)))
        proj = (m._mm(x, "per_layer_model_proj.weight") / float(np.sqrt(np.float32(d)))).reshape(T, L, pl)
        per_layer = (rms(proj, w["per_layer_proj_norm.weight"], eps) + tok) / np.sqrt(2.0)
    dist = np.arange(T)[:, None] - np.arange(T)[None, :]
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    kv_from = L - g["shared"]
    kv = {}
    for l in range(L):
        p = f"blk.{l}."
        swa = g["swa"][l]
        hd = g["hd_swa"] if swa else g["hd"]
        kvh = g["kv_heads"][l]
        theta = g["theta_swa"] if swa else g["theta"]
        factors = None if swa else w.get("rope_freqs.weight")
        h = rms(x, w[p + "attn_norm.weight"], eps)
        q = rms(m._mm(h, p + "attn_q.weight").reshape(T, H, hd), w[p + "attn_q_norm.weight"], eps)
        q = rope_neox(q, theta, factors)
        if l < kv_from:
            k_raw = m._mm(h, p + "attn_k.weight").reshape(T, kvh, hd)
            v = m._mm(h, p + "attn_v.weight").reshape(T, kvh, hd) if p + "attn_v.weight" in w else k_raw
            k = rope_neox(rms(k_raw, w[p + "attn_k_norm.weight"], eps), theta, factors)
            kv[l] = (k, rms(v, None, eps))
            k, v = kv[l]
        else:  # the last earlier layer of this kind that keeps its KV
            src = max(j for j in range(kv_from) if g["swa"][j] == swa)
            k, v = kv[src]
        mask = np.where(dist >= g["window"], -np.inf, causal) if swa else causal
        out = np.empty((T, H, hd))
        for hh in range(H):
            kh = hh // (H // k.shape[1])
            s = q[:, hh, :] @ k[:, kh, :].T + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, hh, :] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kh, :]
        a = rms(m._mm(out.reshape(T, -1), p + "attn_output.weight"), w[p + "post_attention_norm.weight"], eps)
        x = x + a
        f = dense(m, rms(x, w[p + "ffn_norm.weight"], eps), p)
        if p + "ffn_gate_inp.weight" in w:
            f = rms(f, w[p + "post_ffw_norm_1.weight"], eps) + rms(experts(m, x, p), w[p + "post_ffw_norm_2.weight"], eps)
        x = x + rms(f, w[p + "post_ffw_norm.weight"], eps)
        if pl:
            gate = gelu(m._mm(x, p + "inp_gate.weight")) * per_layer[:, l, :]
            x = x + rms(m._mm(gate, p + "proj.weight"), w[p + "post_norm.weight"], eps)
        if p + "layer_output_scale.weight" in w:
            x = x * w[p + "layer_output_scale.weight"][0]
    z = m._mm(rms(x, w["output_norm.weight"], eps), "output.weight")
    c = g["final_softcap"]
    return c * np.tanh(z / c) if c else z


def dense(m, h, p):
    return m._mm(gelu(m._mm(h, p + "ffn_gate.weight")) * m._mm(h, p + "ffn_up.weight"), p + "ffn_down.weight")


def experts(m, x, p):
    w, eps, n_used = m.w, m.cfg.eps, m.cfg.n_expert_used
    d = x.shape[1]
    z = (rms(x, None, eps) / float(np.sqrt(np.float32(d))) * w[p + "ffn_gate_inp.scale"]) @ w[p + "ffn_gate_inp.weight"].T
    prob = np.exp(z - z.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    zs = -np.sort(-z, axis=1)
    if n_used < z.shape[1]:
        m.router_margin = np.minimum(m.router_margin, zs[:, n_used - 1] - zs[:, n_used])
    h = rms(x, w[p + "pre_ffw_norm_2.weight"], eps)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        top = sorted(range(z.shape[1]), key=lambda e: (-prob[t, e], e))[:n_used]
        wsum = sum(prob[t, e] for e in top)
        for e in top:
            gu = m._mm(h[t:t + 1], f"{p}ffn_gate_up_exps.weight.{e}")
            half = gu.shape[1] // 2
            down = m._mm(gelu(gu[:, :half]) * gu[:, half:], f"{p}ffn_down_exps.weight.{e}")[0]
            out[t] += prob[t, e] / wsum * down * w[p + "ffn_down_exps.scale"][e]
    return out


def setup_gemma4(m, get):
    n_layer = m.cfg.n_layer
    swa = [bool(s) for s in get("attention.sliding_window_pattern")]
    kv_heads = get("attention.head_count_kv")
    m.gemma4 = {
        "swa": swa,
        "kv_heads": [int(k) for k in kv_heads] if isinstance(kv_heads, list) else [int(kv_heads)] * n_layer,
        "hd": int(get("attention.key_length")),
        "hd_swa": int(get("attention.key_length_swa")),
        "theta": float(get("rope.freq_base", 10000.0)),
        "theta_swa": float(get("rope.freq_base_swa", 10000.0)),
        "window": int(get("attention.sliding_window")),
        "shared": int(get("attention.shared_kv_layers", 0)),
        "per_layer": int(get("embedding_length_per_layer_input", 0)),
        "final_softcap": float(get("final_logit_softcapping", 0.0)),
    }
