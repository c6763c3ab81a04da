"""deepseek2 (DeepSeek-V2 / V3, Kimi K2, GLM-4.7-Flash) in the numpy reference (float64, no cache), from the
models' own definition (HF transformers' DeepseekV2/V3 attention, as llama.cpp's converter lays the tensors out),
not cachet's code. Multi-head latent attention computed the plain way, every head decompressed: per token a latent
c = norm(kv_a x)[:kv_lora_rank] and one rotated key part k_pe; head h's key [c W_kb[h] | k_pe] and value c W_vb[h]^T
(attn_k_b, attn_v_b per head), its query [q_nope | rope(q_pe)] from attn_q (or attn_q_b after attn_q_a and its
norm); scores scaled by 1 / sqrt(nope + rope dims) times YaRN's mscale^2 (0.1 mscale_all_dim ln(factor) + 1) with
cos/sin unscaled. RoPE on adjacent pairs (GGUF's layout). Leading dense layers, then experts routed by softmax or
by sigmoid + selection bias, optionally group-limited (a group scored by its two best experts), beside shared
experts: reference.py's _ffn."""
from __future__ import annotations

import numpy as np


def setup_deepseek2(m, get):
    c = m.cfg
    m.n_mtp = int(get("nextn_predict_layers", 0))  # multi-token-prediction blocks after the trunk's
    c.n_layer -= m.n_mtp
    m.kv_lora = int(get("attention.kv_lora_rank"))
    m.q_lora = int(get("attention.q_lora_rank", 0))
    m.rd = int(get("rope.dimension_count"))
    m.nope = int(get("attention.key_length_mla")) - m.rd
    m.vd = int(get("attention.value_length_mla"))
    if c.n_expert > 0:
        c.n_ff = int(get("expert_feed_forward_length"))
        m.sigmoid_router = int(get("expert_gating_func", 1)) == 2
        m.expert_norm = bool(get("expert_weights_norm", False))
        m.expert_scale = float(get("expert_weights_scale", 1.0))
        m.expert_groups = (int(get("expert_group_count", 1)), int(get("expert_group_used_count", 1)))
    mscale = 1.0
    m.mla_inv = c.rope_theta ** (-np.arange(0, m.rd, 2) / m.rd)
    if get("rope.scaling.type", "none") == "yarn":
        from reference_gpt_oss import yarn
        factor = float(get("rope.scaling.factor"))
        m.mla_inv, _ = yarn(m.rd, c.rope_theta, factor,
                            int(get("rope.scaling.original_context_length", get("context_length"))),
                            float(get("rope.scaling.yarn_beta_fast", 32.0)),
                            float(get("rope.scaling.yarn_beta_slow", 1.0)))
        # HF: cos / sin times yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim), the scores
        # times yarn_get_mscale(factor, mscale_all_dim)^2; the converter keeps mscale_all_dim only, and the models
        # set mscale to it (a ratio of 1). Without it: both mscale and mscale_all_dim 1 in llama.cpp's reading.
        mscale_all_dim = float(get("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1
        if mscale_all_dim == 0.0:
            m.mla_cos = 0.1 * np.log(factor) + 1.0
            mscale_all_dim = 1.0
        mscale = 0.1 * mscale_all_dim * np.log(factor) + 1.0
    m.mla_scale = mscale * mscale / np.sqrt(m.nope + m.rd)


def rope_pairs(x, inv, mscale=1.0):
    """x: [T, heads, d] rotated on adjacent pairs (2i, 2i + 1) by position * inv[i], cos / sin times mscale."""
    T = x.shape[0]
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
    a, b = x[..., 0::2].copy(), x[..., 1::2].copy()
    out = x.copy()
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def layer(m, x, p):
    """One block: MLA over the positions of x, then the FFN (dense or experts), each with its residual."""
    c, w = m.cfg, m.w
    T, H, kvl, rd, nope, vd = x.shape[0], c.n_head, m.kv_lora, m.rd, m.nope, m.vd
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    mscale = getattr(m, "mla_cos", 1.0)
    h = m._rms(x, w[p + "attn_norm.weight"])
    if m.q_lora > 0:
        q = m._mm(m._rms(m._mm(h, p + "attn_q_a.weight"), w[p + "attn_q_a_norm.weight"]), p + "attn_q_b.weight")
    else:
        q = m._mm(h, p + "attn_q.weight")
    q = q.reshape(T, H, nope + rd)
    q_nope, q_pe = q[..., :nope], rope_pairs(q[..., nope:], m.mla_inv, mscale)
    kv = m._mm(h, p + "attn_kv_a_mqa.weight")
    lat = m._rms(kv[:, :kvl], w[p + "attn_kv_a_norm.weight"])
    k_pe = rope_pairs(kv[:, None, kvl:], m.mla_inv, mscale)[:, 0, :]
    out = np.empty((T, H, vd))
    for hh in range(H):
        k_nope = lat @ w[f"{p}attn_k_b.weight.{hh}"]        # [T, kvl] @ [kvl, nope]
        v = lat @ w[f"{p}attn_v_b.weight.{hh}"].T           # [T, kvl] @ [kvl, vd]
        s = (q_nope[:, hh] @ k_nope.T + q_pe[:, hh] @ k_pe.T) * m.mla_scale + causal
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        out[:, hh] = s @ v
    x = x + m._mm(out.reshape(T, -1), p + "attn_output.weight")
    return x + m._ffn(m._rms(x, w[p + "ffn_norm.weight"]), p)


def trunk(m, ids):
    """The trunk's final hidden states, before the output norm."""
    x = m.w["token_embd.weight"][np.asarray(ids)]
    m.router_margin = np.full(len(ids), np.inf)
    for l in range(m.cfg.n_layer):
        x = layer(m, x, f"blk.{l}.")
    return x


def deepseek2_logits(m, ids):
    return m._mm(m._rms(trunk(m, ids), m.w["output_norm.weight"]), "output.weight")


def deepseek2_mtp_logits(m, ids):
    """The multi-token-prediction block (GLM-4.7-Flash's, DeepSeek-V3's module): position p combines token p's
    embedding with the trunk's normed final state at p - 1 (zeros at p = 0) through eh_proj, then one MLA + MoE
    block over those positions, its norm and the head. Row p predicts token p + 2."""
    w = m.w
    h = m._rms(trunk(m, ids), w["output_norm.weight"])
    p = f"blk.{m.cfg.n_layer}."
    embd = w.get(p + "nextn.embed_tokens.weight", w["token_embd.weight"])[np.asarray(ids)]
    prev = np.vstack([np.zeros((1, h.shape[1])), h[:-1]])
    x = m._mm(np.concatenate([m._rms(embd, w[p + "nextn.enorm.weight"]), m._rms(prev, w[p + "nextn.hnorm.weight"])],
                             axis=1), p + "nextn.eh_proj.weight")
    x = m._rms(layer(m, x, p), w.get(p + "nextn.shared_head_norm.weight", w["output_norm.weight"]))
    head = p + "nextn.shared_head_head.weight"
    return m._mm(x, head if head in w else "output.weight")
