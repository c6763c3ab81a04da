"""IBM Granite and NVIDIA Nemotron-H in the numpy reference (float64, no cache): Granite's four scalars
(embedding, residual, attention and logit scales) on reference.py's block; Nemotron-H's one block per layer (a
Mamba-2 mixer, attention without RoPE, or an FFN down(relu(up h)^2)); and the Mamba-2 mixer both hybrids use,
written from the Mamba-2 paper's recurrence and the models' modeling code (as llama.cpp's converter lays the
tensors out), not from cachet's code:

  zxbcdt = ssm_in h;  xBC = silu(causal_conv(xBC) + bias)  (taps oldest first, zeros before the first token)
  per head h (group g = h // (heads / groups)):  dt = softplus(dt_raw + dt_bias);  S = exp(dt A) S + dt x B^T
  y = S C + D x;  y = y * silu(z);  RMSNorm over each group's d_inner / groups channels, times ssm_norm
"""
from __future__ import annotations

import numpy as np


def setup_granite(m, arch, get):
    m.cfg.embd_scale = float(get("embedding_scale", 1.0)) or 1.0
    m.residual_scale = float(get("residual_scale", 1.0)) or 1.0
    m.logit_scale = float(get("logit_scale", 1.0)) or 1.0
    if get("attention.scale") is not None:
        m.cfg.attn_scale = float(get("attention.scale"))
    if not get("rope.scaling.finetuned", True):
        m.nope_interval = 1  # no layer sees positions
    if m.cfg.n_expert:
        m.cfg.n_ff = int(get("feed_forward_length"))
    if arch == "granitehybrid":
        m.mamba_layers = [k == 0 for k in get("attention.head_count_kv")]
        m.ssm = dict(kernel=int(get("ssm.conv_kernel")), state=int(get("ssm.state_size")),
                     groups=int(get("ssm.group_count")), heads=int(get("ssm.time_step_rank")),
                     inner=int(get("ssm.inner_size")))


def setup_nemotron_h(m, get):
    kv, ff = get("attention.head_count_kv"), get("feed_forward_length")
    m.one_block = ["A" if k > 0 else "F" if f > 0 else "M" for k, f in zip(kv, ff)]
    m.mamba_layers = [k == "M" for k in m.one_block]
    m.nope_interval = 1
    m.cfg.act = "relu2"
    m.cfg.n_ff = max(ff)
    if m.cfg.n_expert:  # nemotron_h_moe: sigmoid router with a selection bias, weights renormalized and scaled
        m.sigmoid_router = True
        m.expert_norm = bool(get("expert_weights_norm", False))
        m.expert_scale = float(get("expert_weights_scale", 1.0)) or 1.0
    m.cfg.eps = float(get("attention.layer_norm_rms_epsilon", get("attention.layer_norm_epsilon", 1e-5)))
    m.ssm = dict(kernel=int(get("ssm.conv_kernel")), state=int(get("ssm.state_size")),
                 groups=int(get("ssm.group_count")), heads=int(get("ssm.time_step_rank")),
                 inner=int(get("ssm.inner_size")))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def mamba2(m, h, p):
    s = m.ssm
    T = h.shape[0]
    H, G, N, inner = s["heads"], s["groups"], s["state"], s["inner"]
    hd = inner // H
    zxbcdt = m._mm(h, p + "ssm_in.weight")
    z, xbc, dt = zxbcdt[:, :inner], zxbcdt[:, inner:2 * inner + 2 * G * N], zxbcdt[:, 2 * inner + 2 * G * N:]
    taps = m.w[p + "ssm_conv1d.weight"]  # [channels, kernel], oldest input first
    K = taps.shape[1]
    padded = np.concatenate([np.zeros((K - 1, xbc.shape[1])), xbc])
    conv = sum(padded[j:j + T] * taps[:, j] for j in range(K)) + m.w.get(p + "ssm_conv1d.bias", 0.0)
    xbc = conv / (1.0 + np.exp(-conv))
    x = xbc[:, :inner].reshape(T, H, hd)
    B = xbc[:, inner:inner + G * N].reshape(T, G, N)
    C = xbc[:, inner + G * N:].reshape(T, G, N)
    dt = softplus(dt + m.w[p + "ssm_dt.bias"])
    A = m.w[p + "ssm_a"].reshape(-1)
    D = m.w[p + "ssm_d"].reshape(-1)
    y = np.empty((T, H, hd))
    for hh in range(H):
        g = hh // (H // G)
        S = np.zeros((hd, N))
        for t in range(T):
            S = np.exp(dt[t, hh] * A[hh]) * S + dt[t, hh] * np.outer(x[t, hh], B[t, g])
            y[t, hh] = S @ C[t, g] + D[hh] * x[t, hh]
    y = y.reshape(T, inner) * (z / (1.0 + np.exp(-z)))
    yg = y.reshape(T, G, inner // G)
    yg = yg / np.sqrt((yg * yg).mean(axis=-1, keepdims=True) + m.cfg.eps)
    y = yg.reshape(T, inner) * m.w[p + "ssm_norm.weight"].reshape(-1)
    return m._mm(y, p + "ssm_out.weight")
