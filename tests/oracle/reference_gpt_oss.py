"""gpt-oss in the numpy reference (float64, no cache): what sets it apart from reference.py's decoder, from
OpenAI's model definition (gpt-oss's reference code and HF transformers' GptOss, as llama.cpp's converter lays
its tensors out), not cachet's code:
- attention sinks: a learned logit per head that joins each softmax's denominator and weighs no value;
- Q/K/V and output biases; even layers attend within attention.sliding_window, odd layers fully;
- the FFN input norm is post_attention_norm (there is no post-norm of the attention output);
- a biased router: top-k experts by logit, weighed by the softmax over the chosen logits; each expert's gate, up
  and down projections biased, its activation the clamped SwiGLU (alpha 1.702, limit 7);
- YaRN on every layer (HF's _compute_yarn_parameters: the interpolation/extrapolation ramp between the
  correction dims of beta_fast and beta_slow, floored and ceiled, and cos/sin times 0.1 ln(factor) + 1)."""
from __future__ import annotations

import numpy as np

ALPHA, LIMIT = 1.702, 7.0


def setup_gpt_oss(m, get):
    c = m.cfg
    c.n_ff = int(get("expert_feed_forward_length"))
    c.act = "swiglu_oai"
    c.window = int(get("attention.sliding_window"))
    c.swa = tuple(l % 2 == 0 for l in range(c.n_layer))
    c.rope_theta_swa = c.rope_theta
    m.ffn_norm_name = "post_attention_norm.weight"
    m.attn_post_norm = False
    m.yarn_on_swa = True  # its local layers scale as the global ones
    if get("rope.scaling.type", "none") == "yarn":
        m.yarn = yarn(c.rope_dim, c.rope_theta, float(get("rope.scaling.factor")),
                      int(get("rope.scaling.original_context_length", get("context_length"))),
                      float(get("rope.scaling.yarn_beta_fast", 32.0)), float(get("rope.scaling.yarn_beta_slow", 1.0)))


def yarn(dim, base, factor, orig_ctx, beta_fast, beta_slow):
    """(inverse frequency per pair, cos/sin multiplier) as HF transformers computes YaRN's."""
    def correction_dim(rotations):
        return dim * np.log(orig_ctx / (rotations * 2 * np.pi)) / (2 * np.log(base))
    low = max(np.floor(correction_dim(beta_fast)), 0)
    high = min(np.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2) - low) / (high - low), 0, 1)
    extrapolation = 1.0 / base ** (np.arange(0, dim, 2) / dim)
    interpolation = extrapolation / factor
    extrapolation_weight = 1 - ramp
    inv = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv, 0.1 * np.log(factor) + 1.0


def swiglu_oai(g, u):
    x = np.minimum(g, LIMIT)
    y = np.clip(u, -LIMIT, LIMIT)
    return x / (1.0 + np.exp(-ALPHA * x)) * (y + 1.0)


def softmax_with_sink(s, sink):
    """Each row's softmax with one more logit `sink` in the denominator (s: [T, T] masked scores)."""
    top = np.maximum(s.max(axis=-1, keepdims=True), sink)
    e = np.exp(s - top)
    return e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - top))
