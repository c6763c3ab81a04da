"""An independent numpy reference forward for the decoder architectures cachet runs (llama incl. rope_freqs and
Mixtral-style experts, qwen2, qwen3, qwen3moe, qwen3vl(moe), gemma2, gemma3, phi3, smollm3, mistral3; qwen35 and
qwen35moe in reference_qwen35.py, lfm2 in reference_lfm2.py, gpt-oss in reference_gpt_oss.py, gemma4 in
reference_gemma4.py, granite / granitemoe / granitehybrid / nemotron_h in reference_mamba_hybrid.py, deepseek2 in
reference_deepseek2.py).

Reads GGUF files with the PyPI `gguf` package (its own parser and dequantizers) and llama2.c checkpoints
with numpy, then runs the plain transformer in float64 with no KV cache: every call recomputes the whole
sequence. Shares no code with cachet; it exists to disagree with us when we are wrong.
"""
from __future__ import annotations

import dataclasses
import struct

import numpy as np


@dataclasses.dataclass
class Config:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    rope_dim: int
    rope_theta: float
    rope_neox: bool
    eps: float
    embd_scale: float = 1.0
    attn_scale: float | None = None  # None: 1/sqrt(head_dim)
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    window: int = 0  # sliding window of the layers marked in swa
    swa: tuple = ()  # per layer: True = sliding window
    rope_theta_swa: float = 10000.0
    rope_freq_scale: float = 1.0
    rope_factors: np.ndarray | None = None
    act: str = "silu"
    n_expert: int = 0
    n_expert_used: int = 0


class Model:
    # Weight types whose matmuls take 8-bit activations (quantized per 32-block) in cachet, as in llama.cpp.
    INT8_ACTIVATION_TYPES = {"Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}
    # Weight types whose matmuls run in bf16 (weights and activations rounded to bf16, f32 sums) in cachet.
    BF16_TYPES = {"F16", "BF16"}

    def __init__(self, cfg: Config, w: dict[str, np.ndarray], types: dict[str, str] | None = None):
        self.cfg = cfg
        self.w = w  # name -> float64 array shaped [out, in] (numpy order) or [n]
        self.types = types or {}  # name -> stored type name
        self.quantize_activations = True  # round as cachet's fast path does (int8 blocks / bf16)
        self._bf16_w: dict[str, np.ndarray] = {}

    @staticmethod
    def q8_blocks(x: np.ndarray) -> np.ndarray:
        """x with each 32-block rounded to int8 levels: d = max|x| / 127 (float32), q = round-half-even(x / d)."""
        x32 = x.astype(np.float32).reshape(*x.shape[:-1], -1, 32)
        d = (np.abs(x32).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
        q = np.rint((x32 * inv).astype(np.float32))
        return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)

    @staticmethod
    def bf16(x: np.ndarray) -> np.ndarray:
        """x rounded to bfloat16 (nearest even; subnormals to zeros of their sign), as float64."""
        u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        r = np.where((u & 0x7FFFFFFF) < 0x00800000, u & 0x80000000, r)
        return r.astype(np.uint32).view(np.float32).astype(np.float64)

    def _mm(self, x, name):
        t = self.types.get(name)
        if self.quantize_activations and t in self.INT8_ACTIVATION_TYPES:
            x = self.q8_blocks(x)
        if self.quantize_activations and t in self.BF16_TYPES:
            if name not in self._bf16_w:
                self._bf16_w[name] = self.bf16(self.w[name])
            return self.bf16(x) @ self._bf16_w[name].T
        return x @ self.w[name].T

    # ---- loading -------------------------------------------------------------------------------------
    @staticmethod
    def from_gguf(path: str) -> "Model":
        from gguf import GGUFReader
        from gguf.quants import dequantize

        r = GGUFReader(path)
        arch = r.fields["general.architecture"].contents()

        def get(key, default=None):
            f = r.fields.get(f"{arch}.{key}")
            return default if f is None else f.contents()

        n_embd = int(get("embedding_length"))
        n_head = int(get("attention.head_count"))
        head_dim = int(get("attention.key_length", n_embd // n_head))
        neox_field = r.fields.get("cachet.rope.neox")
        w = {}
        types = {}
        for t in r.tensors:
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # numpy order: outermost first
            arr = dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64)
            name, ty = t.name, t.tensor_type.name
            if arch == "phi3" and name.endswith("attn_qkv.weight"):  # phi3: Q, K and V rows stacked
                p = name[: -len("attn_qkv.weight")]
                hd_ = int(get("attention.key_length", n_embd // n_head))
                nq, nkv = n_head * hd_, int(get("attention.head_count_kv", n_head)) * hd_
                for part, rows in (("q", arr[:nq]), ("k", arr[nq:nq + nkv]), ("v", arr[nq + nkv:])):
                    w[f"{p}attn_{part}.weight"], types[f"{p}attn_{part}.weight"] = rows, ty
            elif arch == "phi3" and name.endswith("ffn_up.weight"):  # phi3: gate rows, then up rows
                p = name[: -len("ffn_up.weight")]
                half = arr.shape[0] // 2
                w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = arr[:half], arr[half:]
                types[p + "ffn_gate.weight"] = types[p + "ffn_up.weight"] = ty
            elif arr.ndim == 3:  # experts: [n_expert, rows, cols]
                for e in range(arr.shape[0]):
                    w[f"{name}.{e}"], types[f"{name}.{e}"] = arr[e], ty
            else:
                w[name], types[name] = arr, ty
        gemma = arch in ("gemma2", "gemma3")
        n_layer = int(get("block_count"))
        window = int(get("attention.sliding_window", 4096 if arch == "gemma2" else 0)) if gemma else 0
        period = get("attention.sliding_window_pattern", 2 if arch == "gemma2" else 6)
        period = int(period) if not isinstance(period, list) else 0  # gemma4's per-layer bools: reference_gemma4
        scaling = get("rope.scaling.type", "none")
        cfg = Config(
            n_vocab=w["token_embd.weight"].shape[0],
            n_embd=n_embd,
            n_layer=int(get("block_count")),
            n_head=n_head,
            n_head_kv=int(max(kv_heads) if isinstance(kv_heads := get("attention.head_count_kv", n_head), list)
                          else kv_heads),
            head_dim=head_dim,
            n_ff=int(max(ff) if isinstance(ff := get("feed_forward_length"), list) else ff),
            rope_dim=int(get("rope.dimension_count", head_dim)),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rope_neox=(bool(neox_field.contents()) if neox_field is not None else False) or arch not in ("llama", "smollm3", "mistral3", "granite", "granitemoe", "granitehybrid", "nemotron_h",
                                                                                           "nemotron_h_moe"),
            eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            embd_scale=float(np.sqrt(np.float32(n_embd))) if gemma else 1.0,
            attn_softcap=float(get("attn_logit_softcapping", 50.0)) if arch == "gemma2" else 0.0,
            final_softcap=float(get("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)) if gemma else 0.0,
            window=window,
            swa=tuple(window > 0 and l % period < period - 1 for l in range(n_layer)),
            rope_theta_swa=float(get("rope.freq_base_swa", get("rope.freq_base", 10000.0) if arch == "gemma2"
                                     else 10000.0)),
            rope_freq_scale=1.0 / float(get("rope.scaling.factor")) if scaling == "linear" else 1.0,
            rope_factors=w.get("rope_freqs.weight"),
            act="gelu" if gemma else "silu",
            n_expert=int(get("expert_count", 0)),
            n_expert_used=int(get("expert_used_count", 0)),
        )
        if arch in ("qwen3moe", "qwen3vlmoe", "qwen35moe", "qwen3next"):
            cfg.n_ff = int(get("expert_feed_forward_length"))
        if "output.weight" not in w:
            w["output.weight"] = w["token_embd.weight"]
            types["output.weight"] = types["token_embd.weight"]
        m = Model(cfg, w, types)
        m.arch = arch
        # qwen3vl's interleaved M-RoPE sections: text has its time, height and width positions alike, so every
        # pair turns with the position (those past the sections with time's, as Hugging Face's
        # apply_interleaved_mrope): plain RoPE.
        if arch in ("qwen35", "qwen35moe", "qwen3next"):  # hybrid: reference_qwen35.py
            from reference_qwen35 import setup_hybrid
            setup_hybrid(m, arch, get, n_layer)
        if arch == "lfm2moe":  # experts n_ff wide after leading dense layers; sigmoid router with a selection bias
            cfg.n_ff = int(get("expert_feed_forward_length"))
            m.sigmoid_router = int(get("expert_gating_func", 2)) == 2
        if scaling == "yarn" and arch != "gpt-oss":  # HF's YaRN on every layer (reference_gpt_oss.yarn)
            from reference_gpt_oss import yarn
            m.yarn = yarn(cfg.rope_dim, cfg.rope_theta, float(get("rope.scaling.factor")),
                          int(get("rope.scaling.original_context_length", get("context_length"))),
                          float(get("rope.scaling.yarn_beta_fast", 32.0)), float(get("rope.scaling.yarn_beta_slow", 1.0)))
        if arch == "smollm3":  # every fourth layer without positions (NoPE)
            m.nope_interval = 4
        if arch == "mistral3" and get("attention.temperature_scale") is not None:  # Llama 4's query temperature
            m.attn_temp = (float(get("attention.temperature_scale")),
                           int(get("rope.scaling.original_context_length", get("context_length"))))
        if arch == "gpt-oss":  # sinks, biases, clamped SwiGLU, YaRN: reference_gpt_oss.py
            from reference_gpt_oss import setup_gpt_oss
            setup_gpt_oss(m, get)
        if arch == "gemma4":  # per-layer head shapes, shared KV, per-layer embeddings, MoE: reference_gemma4.py
            from reference_gemma4 import setup_gemma4
            setup_gemma4(m, get)
        if arch in ("granite", "granitemoe", "granitehybrid"):  # scales, Mamba-2: reference_mamba_hybrid.py
            from reference_mamba_hybrid import setup_granite
            setup_granite(m, arch, get)
        if arch in ("nemotron_h", "nemotron_h_moe"):  # one block per layer, Mamba-2, ReLU^2: reference_mamba_hybrid.py
            from reference_mamba_hybrid import setup_nemotron_h
            setup_nemotron_h(m, get)
        if arch == "deepseek2":  # multi-head latent attention, grouped routing: reference_deepseek2.py
            from reference_deepseek2 import setup_deepseek2
            setup_deepseek2(m, get)
        if arch in ("lfm2", "lfm2moe"):  # short conv layers: reference_lfm2.py
            m.conv_layers = [k == 0 for k in get("attention.head_count_kv")]
            w["output_norm.weight"] = w.pop("token_embd_norm.weight")
            if int(get("attention.sliding_window", 0)) > 0:  # on the attention layers, with the global RoPE base
                cfg.window = int(get("attention.sliding_window"))
                cfg.swa = tuple(not conv for conv in m.conv_layers)
                cfg.rope_theta_swa = cfg.rope_theta
        return m

    @staticmethod
    def from_llama2c(path: str) -> "Model":
        raw = open(path, "rb").read()
        dim, hidden, n_layer, n_head, n_kv, vocab, seq_len = struct.unpack("<7i", raw[:28])
        shared = vocab > 0
        vocab = abs(vocab)
        hs = dim // n_head
        data = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
        pos = 0

        def take(*shape):
            nonlocal pos
            n = int(np.prod(shape))
            a = data[pos:pos + n].reshape(shape)
            pos += n
            return a

        w = {"token_embd.weight": take(vocab, dim)}
        rms_att = take(n_layer, dim)
        wq = take(n_layer, n_head * hs, dim)
        wk = take(n_layer, n_kv * hs, dim)
        wv = take(n_layer, n_kv * hs, dim)
        wo = take(n_layer, dim, n_head * hs)
        rms_ffn = take(n_layer, dim)
        w1 = take(n_layer, hidden, dim)
        w2 = take(n_layer, dim, hidden)
        w3 = take(n_layer, hidden, dim)
        w["output_norm.weight"] = take(dim)
        take(seq_len, hs)  # freq_cis real + imag
        w["output.weight"] = w["token_embd.weight"] if shared else take(vocab, dim)
        for l in range(n_layer):
            p = f"blk.{l}."
            w[p + "attn_norm.weight"] = rms_att[l]
            w[p + "attn_q.weight"] = wq[l]
            w[p + "attn_k.weight"] = wk[l]
            w[p + "attn_v.weight"] = wv[l]
            w[p + "attn_output.weight"] = wo[l]
            w[p + "ffn_norm.weight"] = rms_ffn[l]
            w[p + "ffn_gate.weight"] = w1[l]
            w[p + "ffn_down.weight"] = w2[l]
            w[p + "ffn_up.weight"] = w3[l]
        cfg = Config(vocab, dim, n_layer, n_head, n_kv, hs, hidden, hs, 10000.0, False, 1e-5)
        return Model(cfg, w)

    @staticmethod
    def load(path: str) -> "Model":
        with open(path, "rb") as f:
            magic = f.read(4)
        return Model.from_gguf(path) if magic == b"GGUF" else Model.from_llama2c(path)

    # ---- forward -------------------------------------------------------------------------------------
    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * w

    def _rope(self, x, n_heads, swa=False):
        c = self.cfg
        T = x.shape[0]
        x = x.reshape(T, n_heads, c.head_dim).copy()
        half = c.rope_dim // 2
        theta, scale = (c.rope_theta_swa, 1.0) if swa else (c.rope_theta, c.rope_freq_scale)
        inv = theta ** (-2.0 * np.arange(half) / c.rope_dim) * scale
        if c.rope_factors is not None:
            inv = inv / c.rope_factors
        mscale = 1.0
        if getattr(self, "yarn", None) is not None and (not swa or getattr(self, "yarn_on_swa", False)):
            inv, mscale = self.yarn
        ang = np.arange(T)[:, None] * inv[None, :]
        cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
        if c.rope_neox:
            a, b = x[..., :half].copy(), x[..., half:c.rope_dim].copy()
            x[..., :half] = a * cos - b * sin
            x[..., half:c.rope_dim] = a * sin + b * cos
        else:
            a, b = x[..., 0:c.rope_dim:2].copy(), x[..., 1:c.rope_dim:2].copy()
            x[..., 0:c.rope_dim:2] = a * cos - b * sin
            x[..., 1:c.rope_dim:2] = a * sin + b * cos
        return x.reshape(T, n_heads * c.head_dim)

    def _act(self, g):
        if self.cfg.act == "gelu":
            return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))
        return g / (1.0 + np.exp(-g))

    def _glu(self, g, u):
        if self.cfg.act == "relu2":  # Nemotron-H: ungated, u is ones
            return np.maximum(g, 0.0) ** 2 * u
        if self.cfg.act == "swiglu_oai":
            from reference_gpt_oss import swiglu_oai
            return swiglu_oai(g, u)
        return self._act(g) * u

    def _ffn(self, h, p):
        c = self.cfg
        if p + "ffn_gate_inp.weight" not in self.w:  # dense (a MoE model's leading dense layers too)
            up = self._mm(h, p + "ffn_up.weight")
            if p + "ffn_gate.weight" not in self.w:  # ungated (Nemotron-H): act(up h)
                return self._mm(self._glu(up, np.ones_like(up)), p + "ffn_down.weight")
            return self._mm(self._glu(self._mm(h, p + "ffn_gate.weight"), up), p + "ffn_down.weight")
        z = self._mm(h, p + "ffn_gate_inp.weight") + self.w.get(p + "ffn_gate_inp.bias", 0.0)
        # gpt-oss: each expert's projections biased ([n_expert, width] each).
        bias = {n: self.w.get(f"{p}ffn_{n}_exps.bias") for n in ("gate", "up", "down")}
        def b(n, e):
            return 0.0 if bias[n] is None else bias[n][e]
        if getattr(self, "sigmoid_router", False):  # each expert's own probability (LFM2-MoE)
            prob = 1.0 / (1.0 + np.exp(-z))
        else:
            prob = np.exp(z - z.max(axis=-1, keepdims=True))
            prob /= prob.sum(axis=-1, keepdims=True)
        # The choice: by probability plus a selection bias where the file has one; the weights: the probabilities.
        score = prob + self.w.get(p + "exp_probs_b.bias", 0.0)
        groups, used = getattr(self, "expert_groups", (1, 1))
        if groups > 1:  # DeepSeek-V3: only the experts of the best groups (by their two best scores) compete
            g = score.reshape(score.shape[0], groups, -1)
            top2 = -np.sort(-g, axis=2)[:, :, :2].sum(axis=2)
            for t in range(score.shape[0]):
                order = sorted(range(groups), key=lambda i: (-top2[t, i], i))
                keep = order[:used]
                if used < groups:  # a near-tie between groups decides experts as much as one between experts
                    gap = 4.0 * (top2[t, order[used - 1]] - top2[t, order[used]])
                    self.router_margin[t] = min(self.router_margin[t], gap)
                score[t] = np.where(np.isin(np.arange(c.n_expert) // g.shape[2], keep), score[t], -np.inf)
        latent = p + "ffn_latent_down.weight" in self.w  # Nemotron 3 Super: experts in a latent width
        hx = self._mm(h, p + "ffn_latent_down.weight") if latent else h
        out = np.zeros_like(hx)
        # How close each token's routing is to a tie (the k-th and (k+1)-th router logits), for callers that
        # must tell rounding-decided expert choices from the rest. A sigmoid router chooses by probability (plus
        # its bias): its gap in logit units is at least 4x the probability gap (a sigmoid's slope is <= 1/4).
        zs = -np.sort(-(4.0 * score if getattr(self, "sigmoid_router", False) else z), axis=1)
        if c.n_expert_used < c.n_expert:
            self.router_margin = np.minimum(self.router_margin, zs[:, c.n_expert_used - 1] - zs[:, c.n_expert_used])
        for t in range(h.shape[0]):
            top = sorted(range(c.n_expert), key=lambda e: (-score[t, e], e))[: c.n_expert_used]
            wsum = max(sum(prob[t, e] for e in top), 6.103515625e-5)
            for e in top:
                x = hx[t:t + 1]
                u = self._mm(x, f"{p}ffn_up_exps.weight.{e}") + b("up", e)
                if f"{p}ffn_gate_exps.weight.{e}" in self.w:
                    g = self._mm(x, f"{p}ffn_gate_exps.weight.{e}") + b("gate", e)
                else:  # ungated (Nemotron-H): act(up x)
                    g, u = u, np.ones_like(u)
                down = self._mm(self._glu(g, u), f"{p}ffn_down_exps.weight.{e}")[0] + b("down", e)
                weight = prob[t, e] / wsum if getattr(self, "expert_norm", True) else prob[t, e]
                out[t] += weight * getattr(self, "expert_scale", 1.0) * down
        if latent:
            out = self._mm(out, p + "ffn_latent_up.weight")
        if p + "ffn_up_shexp.weight" in self.w:  # a shared expert, gated by sigmoid(h . gate_inp_shexp)
            up = self._mm(h, p + "ffn_up_shexp.weight")
            if p + "ffn_gate_shexp.weight" in self.w:
                shared = self._mm(self._glu(self._mm(h, p + "ffn_gate_shexp.weight"), up), p + "ffn_down_shexp.weight")
            else:  # ungated (Nemotron-H)
                shared = self._mm(self._glu(up, np.ones_like(up)), p + "ffn_down_shexp.weight")
            if p + "ffn_gate_inp_shexp.weight" in self.w:
                shared = shared / (1.0 + np.exp(-self._mm(h, p + "ffn_gate_inp_shexp.weight").reshape(-1, 1)))
            out += shared
        return out

    def logits(self, ids: list[int], kv_f16: bool = False) -> np.ndarray:
        """Next-token logits at every position: [len(ids), n_vocab] float64.

        kv_f16 rounds keys (after RoPE) and values to IEEE half, as an f16 KV cache stores them."""
        if getattr(self, "arch", "") in ("qwen35", "qwen35moe", "qwen3next"):
            from reference_qwen35 import qwen35_logits
            return qwen35_logits(self, ids)
        if getattr(self, "arch", "") == "deepseek2":
            from reference_deepseek2 import deepseek2_logits
            return deepseek2_logits(self, ids)
        if getattr(self, "arch", "") == "gemma4":
            from reference_gemma4 import gemma4_logits
            return gemma4_logits(self, ids)
        conv_layers = getattr(self, "conv_layers", None)
        mamba_layers = getattr(self, "mamba_layers", None)
        rs = getattr(self, "residual_scale", 1.0)  # Granite: block outputs times this before the residual add
        c, w = self.cfg, self.w
        T = len(ids)
        x = w["token_embd.weight"][np.asarray(ids)] * c.embd_scale
        self.router_margin = np.full(T, np.inf)
        causal = np.triu(np.full((T, T), -np.inf), k=1)
        dist = np.arange(T)[:, None] - np.arange(T)[None, :]
        group = c.n_head // c.n_head_kv
        scale = c.attn_scale if c.attn_scale is not None else 1.0 / np.sqrt(c.head_dim)
        for l in range(c.n_layer):
            p = f"blk.{l}."
            swa = bool(c.swa) and c.swa[l]
            mask = np.where(dist >= c.window, -np.inf, causal) if swa else causal
            h = self._rms(x, w[p + "attn_norm.weight"])
            if conv_layers and conv_layers[l]:  # LFM2's short conv in place of attention
                from reference_lfm2 import short_conv
                x = x + short_conv(self, h, p)
                x = x + self._ffn(self._rms(x, w[p + "ffn_norm.weight"]), p)
                continue
            one_block = getattr(self, "one_block", None)  # Nemotron-H: a mixer or an FFN, one residual add
            if mamba_layers and mamba_layers[l]:  # Granite 4.0-H's and Nemotron-H's Mamba-2 in place of attention
                from reference_mamba_hybrid import mamba2
                x = x + rs * mamba2(self, h, p)
                if not one_block:
                    x = x + rs * self._ffn(self._rms(x, w[p + "ffn_norm.weight"]), p)
                continue
            if one_block and one_block[l] == "F":  # Nemotron-H's FFN layers (MoE: experts and a shared one)
                x = x + self._ffn(h, p)
                continue
            q, k, v = (self._mm(h, p + f"attn_{n}.weight") for n in "qkv")
            if p + "attn_q.bias" in w:
                q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
            if p + "attn_q_norm.weight" in w:
                q = self._rms(q.reshape(T, c.n_head, c.head_dim), w[p + "attn_q_norm.weight"]).reshape(T, -1)
                k = self._rms(k.reshape(T, c.n_head_kv, c.head_dim), w[p + "attn_k_norm.weight"]).reshape(T, -1)
            nope = getattr(self, "nope_interval", 0)
            if not nope or (l + 1) % nope != 0:
                q, k = self._rope(q, c.n_head, swa), self._rope(k, c.n_head_kv, swa)
            q = q.reshape(T, c.n_head, c.head_dim)
            k = k.reshape(T, c.n_head_kv, c.head_dim)
            if getattr(self, "attn_temp", None) is not None:
                scale_t, floor_t = self.attn_temp
                q = q * (np.log(np.floor(np.arange(T) / floor_t) + 1.0) * scale_t + 1.0)[:, None, None]
            v = v.reshape(T, c.n_head_kv, c.head_dim)
            if kv_f16:
                k = k.astype(np.float32).astype(np.float16).astype(np.float64)
                v = v.astype(np.float32).astype(np.float16).astype(np.float64)
            out = np.empty((T, c.n_head, c.head_dim))
            for hh in range(c.n_head):
                kv = hh // group
                s = q[:, hh, :] @ k[:, kv, :].T * scale
                if c.attn_softcap:
                    s = c.attn_softcap * np.tanh(s / c.attn_softcap)
                s = s + mask
                if p + "attn_sinks.weight" in w:  # gpt-oss
                    from reference_gpt_oss import softmax_with_sink
                    s = softmax_with_sink(s, w[p + "attn_sinks.weight"][hh])
                else:
                    s = np.exp(s - s.max(axis=-1, keepdims=True))
                    s /= s.sum(axis=-1, keepdims=True)
                out[:, hh, :] = s @ v[:, kv, :]
            a = self._mm(out.reshape(T, -1), p + "attn_output.weight") + w.get(p + "attn_output.bias", 0.0)
            if p + "post_attention_norm.weight" in w and getattr(self, "attn_post_norm", True):
                a = self._rms(a, w[p + "post_attention_norm.weight"])
            x = x + rs * a
            if one_block:
                continue
            f = self._ffn(self._rms(x, w[p + getattr(self, "ffn_norm_name", "ffn_norm.weight")]), p)
            if p + "post_ffw_norm.weight" in w:
                f = self._rms(f, w[p + "post_ffw_norm.weight"])
            x = x + rs * f
        z = self._mm(self._rms(x, w["output_norm.weight"]), "output.weight") / getattr(self, "logit_scale", 1.0)
        if c.final_softcap:
            z = c.final_softcap * np.tanh(z / c.final_softcap)
        return z

    def greedy(self, ids: list[int], n: int) -> list[int]:
        seq = list(ids)
        out = []
        for _ in range(n):
            nxt = int(np.argmax(self.logits(seq)[-1]))
            out.append(nxt)
            seq.append(nxt)
        return out
