"""LFM2's short conv block in the numpy reference (float64, no cache): the input projection gives B, C and x; a
causal depthwise conv of the file's kernel (shortconv.l_cache, taps oldest first, zeros before the first token)
runs over B * x; the output projection reads C times the conv. Follows Liquid AI's definition (LFM2's
modeling code, as llama.cpp's converter lays its tensors out), not cachet's code. The attention layers and FFNs
are reference.py's."""
from __future__ import annotations

import numpy as np


def short_conv(m, h, p):
    T, d = h.shape
    bcx = m._mm(h, p + "shortconv.in_proj.weight")
    b, c, x = bcx[:, :d], bcx[:, d:2 * d], bcx[:, 2 * d:]
    taps = m.w[p + "shortconv.conv.weight"]  # [channels, kernel], oldest input first
    K = taps.shape[1]
    padded = np.concatenate([np.zeros((K - 1, d)), b * x])
    conv = sum(padded[j:j + T] * taps[:, j] for j in range(K))
    return m._mm(c * conv, p + "shortconv.out_proj.weight")
