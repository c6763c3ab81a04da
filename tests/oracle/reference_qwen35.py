"""The numpy reference forward of Qwen3.5 / Qwen3.6 (qwen35, qwen35moe) and Qwen3-Next (qwen3next): gated delta
net layers and gated attention layers, in float64, with no cache (the recurrence runs from a zero state over the
whole sequence). Follows the model's definition (Hugging Face's Qwen3-Next / Qwen3.5 modeling code as llama.cpp's
converter lays its tensors out), not cachet's code."""
from __future__ import annotations

import numpy as np


def setup_hybrid(m, arch, get, n_layer):
    """Layer kinds, delta-net shape and RoPE sections from the file; Qwen3-Next's fused tensors split. The
    multi-token-prediction blocks (nextn_predict_layers) follow the trunk's and are not part of it."""
    m.n_mtp = int(get("nextn_predict_layers", 0))
    m.cfg.n_layer = n_layer - m.n_mtp
    interval = int(get("full_attention_interval", 4))
    m.recurrent = [(l + 1) % interval != 0 for l in range(n_layer)]
    d, kh, vh = int(get("ssm.state_size")), int(get("ssm.group_count")), int(get("ssm.time_step_rank"))
    m.ssm = {"head_dim": d, "k_heads": kh, "v_heads": vh, "grouped": arch == "qwen3next"}
    if arch != "qwen3next":
        return
    r = vh // kh
    for name in [n for n in m.w if n.endswith("ssm_ba.weight") or n.endswith("ssm_in.weight")]:
        p, a, ty = name[: name.rindex("ssm_")], m.w.pop(name), m.types.pop(name)
        groups = a.reshape(kh, -1, a.shape[1])  # per key head
        if name.endswith("ssm_ba.weight"):  # [beta x r, alpha x r] per key head
            parts = {"ssm_beta.weight": groups[:, :r], "ssm_alpha.weight": groups[:, r:]}
        else:  # [q x d, k x d, v x r d, z x r d] per key head
            qkv = np.concatenate([groups[:, :d].reshape(-1, a.shape[1]), groups[:, d:2 * d].reshape(-1, a.shape[1]),
                                  groups[:, 2 * d:2 * d + r * d].reshape(-1, a.shape[1])])
            parts = {"attn_qkv.weight": qkv, "attn_gate.weight": groups[:, 2 * d + r * d:]}
        for k, v in parts.items():
            m.w[p + k], m.types[p + k] = v.reshape(-1, a.shape[1]), ty


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def _delta_net(m, h, p):
    c, w, s = m.cfg, m.w, m.ssm
    T, d, KH, VH = h.shape[0], s["head_dim"], s["k_heads"], s["v_heads"]
    kd = KH * d
    qkv = m._mm(h, p + "attn_qkv.weight")
    z = m._mm(h, p + "attn_gate.weight").reshape(T, VH, d)
    beta = _sigmoid(m._mm(h, p + "ssm_beta.weight"))
    decay = np.exp(_softplus(m._mm(h, p + "ssm_alpha.weight") + w[p + "ssm_dt.bias"]) * w[p + "ssm_a"])
    taps = w[p + "ssm_conv1d.weight"]  # [channels, kernel], oldest input first
    K = taps.shape[1]
    padded = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv])
    x = _silu(sum(padded[j:j + T] * taps[:, j] for j in range(K)))
    q = x[:, :kd].reshape(T, KH, d)
    k = x[:, kd:2 * kd].reshape(T, KH, d)
    v = x[:, 2 * kd:].reshape(T, VH, d)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + c.eps) / np.sqrt(d)
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + c.eps)
    # Value head h reads key head h % KH (Qwen3.5's layout) or h // (VH / KH) (Qwen3-Next's).
    kh = np.arange(VH) // (VH // KH) if s["grouped"] else np.arange(VH) % KH
    S = np.zeros((VH, d, d))  # [head, key dim, value dim]
    o = np.empty((T, VH, d))
    for t in range(T):
        S *= decay[t][:, None, None]
        kt, qt = k[t, kh], q[t, kh]
        err = (v[t] - np.einsum("hkv,hk->hv", S, kt)) * beta[t][:, None]
        S += kt[:, :, None] * err[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, qt)
    o = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + c.eps) * w[p + "ssm_norm.weight"] * _silu(z)
    return m._mm(o.reshape(T, -1), p + "ssm_out.weight")


def _gated_attention(m, h, p):
    c, w = m.cfg, m.w
    T, H, KH, hd = h.shape[0], c.n_head, c.n_head_kv, c.head_dim
    qg = m._mm(h, p + "attn_q.weight").reshape(T, H, 2, hd)
    q, gate = m._rms(qg[:, :, 0], w[p + "attn_q_norm.weight"]), qg[:, :, 1].reshape(T, H * hd)
    k = m._rms(m._mm(h, p + "attn_k.weight").reshape(T, KH, hd), w[p + "attn_k_norm.weight"])
    v = m._mm(h, p + "attn_v.weight").reshape(T, KH, hd)
    # Partial NeoX rotation; under interleaved M-RoPE sections a text token turns every pair with its position
    # (time, height and width all carry it; pairs past the sections go with time, as Hugging Face's
    # apply_interleaved_mrope).
    half = c.rope_dim // 2
    i = np.arange(half)
    inv = c.rope_theta ** (-2.0 * i / c.rope_dim)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):
        x = x.copy()
        a, b = x[..., :half].copy(), x[..., half:c.rope_dim].copy()
        x[..., :half] = a * cos - b * sin
        x[..., half:c.rope_dim] = a * sin + b * cos
        return x

    q, k = rope(q), rope(k)
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    out = np.empty((T, H, hd))
    for hh in range(H):
        kv = hh // (H // KH)
        s = q[:, hh] @ k[:, kv].T / np.sqrt(hd) + causal
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        out[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, kv]
    return m._mm(out.reshape(T, -1) * _sigmoid(gate), p + "attn_output.weight")


def _trunk(m, ids):
    c, w = m.cfg, m.w
    x = w["token_embd.weight"][np.asarray(ids)]
    m.router_margin = np.full(len(ids), np.inf)
    for l in range(c.n_layer):
        p = f"blk.{l}."
        h = m._rms(x, w[p + "attn_norm.weight"])
        x = x + (_delta_net(m, h, p) if m.recurrent[l] else _gated_attention(m, h, p))
        x = x + m._ffn(m._rms(x, w[p + "post_attention_norm.weight"]), p)
    return m._rms(x, w["output_norm.weight"])


def qwen35_logits(m, ids):
    return m._mm(_trunk(m, ids), "output.weight")


def qwen35_mtp_logits(m, ids):
    """The first multi-token-prediction block over the prompt (DeepSeek-V3's MTP module as Qwen3.5 ships it):
    position p combines the embedding of token p with the trunk's final (normed) hidden state at p - 1, zeros at
    p = 0, through eh_proj; then a gated-attention block over those positions and the head. Row p predicts token
    p + 2."""
    w = m.w
    h = _trunk(m, ids)
    p = f"blk.{m.cfg.n_layer}."
    embd = w.get(p + "nextn.embed_tokens.weight", w["token_embd.weight"])[np.asarray(ids)]
    prev = np.vstack([np.zeros((1, h.shape[1])), h[:-1]])
    x = m._mm(np.concatenate([m._rms(embd, w[p + "nextn.enorm.weight"]), m._rms(prev, w[p + "nextn.hnorm.weight"])],
                             axis=1), p + "nextn.eh_proj.weight")
    x = x + _gated_attention(m, m._rms(x, w[p + "attn_norm.weight"]), p)
    x = x + m._ffn(m._rms(x, w[p + "post_attention_norm.weight"]), p)
    x = m._rms(x, w.get(p + "nextn.shared_head_norm.weight", w["output_norm.weight"]))
    head = p + "nextn.shared_head_head.weight"
    return m._mm(x, head if head in w else "output.weight")
