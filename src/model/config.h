// ModelConfig: the hyper-parameters of a decoder-only transformer, read once from a model file.
// The field list below is the single source of truth: it drives printing and equality.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "cachet/status.h"

namespace cachet {

// X(type, name, default, description)
#define CACHET_MODEL_CONFIG_FIELDS(X)                                                                      \
  X(std::string, arch, "", "architecture")                                                                 \
  X(int64_t, n_vocab, 0, "vocabulary size")                                                                \
  X(int64_t, n_ctx_train, 0, "training context length")                                                    \
  X(int64_t, n_embd, 0, "model width (d_model)")                                                           \
  X(int64_t, n_layer, 0, "transformer blocks")                                                             \
  X(int64_t, n_head, 0, "query heads")                                                                     \
  X(int64_t, n_head_kv, 0, "key/value heads (GQA when < n_head)")                                          \
  X(int64_t, head_dim, 0, "width of one head")                                                             \
  X(int64_t, n_ff, 0, "feed-forward hidden width (of one expert in a MoE layer)")                          \
  X(int64_t, rope_dim, 0, "rotated dims per head")                                                         \
  X(double, rope_theta, 10000.0, "RoPE base frequency")                                                    \
  X(bool, rope_neox, false, "NeoX rotation (pairs i, i+d/2) instead of interleaved")                       \
  X(double, rope_freq_scale, 1.0, "linear RoPE scaling: positions times this (1: none)")                   \
  X(bool, rope_freq_factors, false, "per-pair RoPE frequency divisors (Llama 3 rope_freqs)")                \
  X(std::string, rope_scaling, "none", "RoPE scaling: none, linear or yarn (model/rope_scaling.h)")         \
  X(double, rope_yarn_ext_factor, 0.0, "YaRN: extrapolation mix of the ramp (0: no YaRN)")                 \
  X(double, rope_attn_factor, 1.0, "RoPE cos/sin multiplied by this (file's rope.scaling.attn_factor)")    \
  X(double, rope_yarn_log_mul, 0.0, "YaRN: yarn_log_multiplier (DeepSeek-style attention factor)")         \
  X(int64_t, rope_yarn_orig_ctx, 0, "YaRN: the context the model was trained at (0: n_ctx_train)")         \
  X(double, rope_yarn_beta_fast, 32.0, "YaRN: turns within the original context where extrapolation ends") \
  X(double, rope_yarn_beta_slow, 1.0, "YaRN: turns within the original context where interpolation starts") \
  X(double, rms_eps, 1e-5, "RMSNorm epsilon")                                                              \
  X(bool, tied_output, false, "output head shares the token embedding")                                    \
  X(double, embd_scale, 1.0, "token embeddings multiplied by this (Gemma: sqrt(n_embd))")                  \
  X(double, attn_scale, 0.0, "query scale before Q.K (0: 1/sqrt(head_dim))")                               \
  X(double, attn_softcap, 0.0, "attention scores soft-capped as c*tanh(s/c) (0: none)")                    \
  X(double, final_softcap, 0.0, "output logits soft-capped as c*tanh(z/c) (0: none)")                      \
  X(int64_t, sliding_window, 0, "window of the sliding-window layers, in positions (0: none)")             \
  X(std::string, swa_layers, "", "per layer: S = sliding window, G = global (empty: all global)")          \
  X(double, rope_theta_swa, 10000.0, "RoPE base of the sliding-window layers")                             \
  X(double, rope_freq_scale_swa, 1.0, "linear RoPE scaling of the sliding-window layers")                   \
  X(bool, qkv_bias, false, "Q, K and V projections have biases")                                           \
  X(bool, qk_norm, false, "per-head RMSNorm of Q and K before RoPE")                                        \
  X(bool, post_norms, false, "RMSNorm of the attention and FFN outputs before the residual add")           \
  X(std::string, ffn_act, "silu", "FFN activation: gated silu, gelu (tanh approximation), swiglu_oai (gpt-oss); relu2 (not gated)") \
  X(std::string, pooling, "", "embedding pooling the file names: none, mean, cls, last, rank (empty: none named)") \
  X(bool, causal, true, "causal attention (false: every token of a sequence sees all of it, an encoder)")     \
  X(bool, swa_symmetric, false, "the sliding window is centred: positions within window / 2 either side")    \
  X(std::string, image_attention, "both", "an image's rows among themselves: both (ways), swa (both ways in sliding-window layers only), causal") \
  X(std::string, rank_input, "", "rank pooling: the state the classifier reads (cls, last or mean)")        \
  X(int64_t, n_cls_out, 0, "classifier outputs of a reranker's head (cls.output; 0: none)")                 \
  X(int64_t, n_expert, 0, "experts per MoE layer (0: dense FFN)")                                          \
  X(int64_t, n_expert_used, 0, "experts each token is routed to")                                          \
  X(bool, expert_norm, true, "top-k router weights renormalized to sum 1")                                 \
  X(double, expert_weights_scale, 1.0, "routed expert weights multiplied by this")                        \
  X(std::string, layer_kinds, "", "per layer: A = attention, R = gated delta net, C = short conv (LFM2), M = Mamba-2, F = FFN only") \
  X(bool, attn_output_gate, false, "Q carries a per-head gate: attention output times sigmoid(gate)")     \
  X(std::string, rope_sections, "", "M-RoPE sections t,h,w,e (Qwen3.5, interleaved; text: t = h = w)")     \
  X(bool, mrope_interleaved, true, "M-RoPE sections interleaved pair by pair (Qwen3-VL, 3.5), else consecutive (Qwen2-VL)") \
  X(int64_t, ssm_conv_kernel, 0, "gated delta net: causal conv width")                                     \
  X(int64_t, ssm_head_dim, 0, "gated delta net: width of a key / value head (state is d x d per head)")    \
  X(int64_t, ssm_k_heads, 0, "gated delta net: query / key heads")                                         \
  X(int64_t, ssm_v_heads, 0, "gated delta net: value heads (a multiple of the key heads)")                 \
  X(bool, ssm_grouped_heads, false, "gated delta net: value head h reads key head h / (v/k), not h % k")    \
  X(int64_t, n_ff_shared, 0, "MoE: the shared expert's width (0: none)")                                  \
  X(std::string, expert_gating, "softmax", "MoE router: softmax, or sigmoid (each expert's own probability)") \
  X(int64_t, n_dense_lead, 0, "MoE: leading layers with a dense FFN instead of experts")                     \
  X(int64_t, n_ff_dense, 0, "MoE: the leading dense layers' FFN width (0: n_ff)")                           \
  X(int64_t, n_mtp_layers, 0, "multi-token-prediction blocks the file carries after the trunk (not run by it)") \
  X(int64_t, nope_interval, 0, "layers l with (l + 1) % n == 0 attend without RoPE (SmolLM3: 4; 0: none)")   \
  X(double, attn_temp_scale, 0.0, "queries times log(floor(pos / attn_temp_floor) + 1) * this + 1 (0: none)")  \
  X(int64_t, attn_temp_floor, 0, "positions per step of the attention temperature (the YaRN original context)") \
  X(bool, attn_sinks, false, "a learned per-head logit in every attention softmax (gpt-oss's sinks)")       \
  X(bool, out_bias, false, "the attention output projection has a bias")                                  \
  X(bool, expert_biases, false, "MoE: the router's logits and every expert's projections have biases")       \
  X(int64_t, head_dim_swa, 0, "the sliding-window layers' head width (0: head_dim; Gemma 4)")                   \
  X(int64_t, n_head_kv_swa, 0, "the sliding-window layers' KV heads (0: n_head_kv)")                          \
  X(int64_t, rope_dim_swa, 0, "the sliding-window layers' rotated dims (0: rope_dim)")                        \
  X(int64_t, kv_shared_layers, 0, "the last layers attend over the KV of the last earlier layer of their kind") \
  X(bool, v_from_k, false, "a layer without attn_v takes K's projection (before K's norm and RoPE) as V")     \
  X(bool, v_norm, false, "V RMS-normalized per head without a weight (Gemma 4)")                              \
  X(int64_t, n_embd_per_layer, 0, "per-layer embedding width (Gemma 4's small models; 0: none)")              \
  X(int64_t, n_deepstack_layers, 0, "Qwen3-VL: layers after which an image's deepstack rows are added (text: none)") \
  X(int64_t, n_ff_wide, 0, "dense FFN width of layers ffn_wide_from.. (Gemma 4 E2B's shared-KV layers; 0: none)") \
  X(int64_t, ffn_wide_from, 0, "the first layer whose dense FFN is n_ff_wide wide")                           \
  X(bool, moe_beside_dense, false, "MoE layers: a dense MLP n_ff_dense wide beside the experts (Gemma 4)")      \
  X(double, residual_scale, 1.0, "attention and FFN outputs times this before the residual add (Granite)")   \
  X(double, logit_scale, 1.0, "output logits divided by this (Granite)")                                     \
  X(int64_t, ssm_state_size, 0, "Mamba-2: state width per head channel (d_state)")                           \
  X(int64_t, ssm_groups, 0, "Mamba-2: groups of B and C the heads share")                                    \
  X(bool, one_block_layers, false, "each layer one block behind one norm: a mixer (A, M) or an FFN (F) (Nemotron-H)") \
  X(bool, mtp_head, false, "a multi-token-prediction head: input eh_proj(enorm(embedding) | hnorm(trunk's hidden))") \
  X(int64_t, kv_lora_rank, 0, "MLA: the compressed KV latent's width (0: not MLA); the cache holds latent | rope part") \
  X(int64_t, q_lora_rank, 0, "MLA: the compressed query's width (0: Q straight from the input)")            \
  X(int64_t, mla_k_dim, 0, "MLA: a decompressed query / key head's width (no-RoPE part + rope_dim)")        \
  X(int64_t, mla_v_dim, 0, "MLA: a decompressed value head's width")                                        \
  X(int64_t, moe_latent, 0, "MoE: experts work in this width, between ffn_latent_down and _up (0: n_embd; Nemotron 3 Super)") \
  X(int64_t, n_expert_groups, 1, "MoE: experts in this many groups; only the best n_expert_groups_used are chosen from") \
  X(int64_t, n_expert_groups_used, 1, "MoE: groups a token's experts come from (scored by their two best experts)")

struct ModelConfig {
#define CACHET_DECLARE_FIELD(type, name, def, desc) type name = def;
  CACHET_MODEL_CONFIG_FIELDS(CACHET_DECLARE_FIELD)
#undef CACHET_DECLARE_FIELD

  // Widths of the global layers (every layer's, unless the sliding-window ones have their own: Gemma 4).
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  // Layer l's head width, KV heads, rotated dims, and Q and K/V widths.
  int64_t head_dim_at(int64_t l) const { return is_swa(l) && head_dim_swa > 0 ? head_dim_swa : head_dim; }
  int64_t kv_heads_at(int64_t l) const { return is_swa(l) && n_head_kv_swa > 0 ? n_head_kv_swa : n_head_kv; }
  int64_t rope_dim_at(int64_t l) const { return is_swa(l) && rope_dim_swa > 0 ? rope_dim_swa : rope_dim; }
  int64_t q_dim_at(int64_t l) const { return n_head * head_dim_at(l); }
  int64_t kv_dim_at(int64_t l) const { return kv_heads_at(l) * head_dim_at(l); }
  // The widest layer's Q and K/V (scratch sizes).
  int64_t max_q_dim() const;
  int64_t max_kv_dim() const;
  // Multi-head latent attention (DeepSeek-V2/V3, Kimi, GLM-4.7-Flash): the cache's one KV head holds each
  // token's normalized latent (kv_lora_rank) then its rotated key part (rope_dim), head_dim wide; V is the
  // latent, read from K's rows (no V rows of its own). Queries attend in the latent space (model/mla.h).
  bool is_mla() const { return kv_lora_rank > 0; }
  int64_t mla_nope_dim() const { return mla_k_dim - rope_dim; }
  // Whether V is read from K's rows (MLA) rather than stored.
  bool v_in_k() const { return is_mla(); }
  // Whether layer l keeps K and V of its own (attends, and is not one of the last kv_shared_layers).
  bool has_own_kv(int64_t l) const { return attends(l) && l < n_layer - kv_shared_layers; }
  // Whether layer l attends (not a recurrent mixer, not an FFN-only layer), and whether it has an FFN.
  bool attends(int64_t l) const { return !is_recurrent(l) && !is_ffn_only(l); }
  bool is_ffn_only(int64_t l) const { return l < static_cast<int64_t>(layer_kinds.size()) && layer_kinds[l] == 'F'; }
  bool has_ffn(int64_t l) const { return !one_block_layers || is_ffn_only(l); }
  // Layer l's K/V width in the cache's kl-th layer.
  int64_t kv_dim_of_kv_layer(int kl) const;
  // Bytes of K and V for one token across all layers, for a cache element size.
  int64_t kv_bytes_per_token(int64_t elem_bytes) const;

  // Hybrid models: which layers carry a recurrent state per sequence and no KV (gated delta nets, LFM2's
  // short convs), which attend.
  bool is_recurrent(int64_t l) const {
    return l < static_cast<int64_t>(layer_kinds.size()) &&
           (layer_kinds[l] == 'R' || layer_kinds[l] == 'C' || layer_kinds[l] == 'M');
  }
  bool is_mamba2(int64_t l) const { return l < static_cast<int64_t>(layer_kinds.size()) && layer_kinds[l] == 'M'; }
  bool has_mamba2() const { return layer_kinds.find('M') != std::string::npos; }
  bool is_short_conv(int64_t l) const { return l < static_cast<int64_t>(layer_kinds.size()) && layer_kinds[l] == 'C'; }
  // LFM2's short conv layers: a gated depthwise conv over the width (no delta rule, no matrix state).
  bool has_short_conv() const { return layer_kinds.find('C') != std::string::npos; }
  int64_t n_recurrent_layers() const;
  // Layers with a KV cache of their own, and the KV storage layer layer l reads (a shared layer: that of the
  // last earlier layer of its kind, sliding-window or global, that keeps its own).
  int64_t n_kv_layers() const;
  int kv_layer(int64_t l) const;
  // The layer whose KV layer l reads: itself, or for a shared layer that earlier layer (-1: none).
  int64_t kv_source(int64_t l) const;
  // Gated delta net widths: key dims (q and k), value dims, the conv's channels (q | k | v).
  int64_t ssm_key_dim() const { return ssm_k_heads * ssm_head_dim; }
  int64_t ssm_value_dim() const { return ssm_v_heads * ssm_head_dim; }
  int64_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
  // Mamba-2's conv channels: x (heads x head width) | B | C (groups x state width each).
  int64_t mamba2_conv_dim() const { return ssm_value_dim() + 2 * ssm_groups * ssm_state_size; }
  // f32 values of one sequence's recurrent state in one gated delta net layer: the conv's last
  // (kernel - 1) inputs, then the d x d matrix of every value head. (Short conv layers: the conv's last
  // (kernel - 1) inputs over the width, no matrix; Mamba-2: over x | B | C, then a head width x state width
  // matrix per head.)
  int64_t conv_state_floats() const {
    return (ssm_conv_kernel - 1) * (has_short_conv() ? n_embd : has_mamba2() ? mamba2_conv_dim() : ssm_conv_dim());
  }
  int64_t ssm_state_floats() const {
    if (has_short_conv()) return 0;
    return has_mamba2() ? ssm_value_dim() * ssm_state_size : ssm_v_heads * ssm_head_dim * ssm_head_dim;
  }
  int64_t state_bytes_per_seq() const {
    return n_recurrent_layers() * (conv_state_floats() + ssm_state_floats()) * static_cast<int64_t>(sizeof(float));
  }

  // Whether layer l's FFN is a mixture of experts (else dense, ffn_width(l) wide).
  bool is_moe(int64_t l) const { return n_expert > 0 && l >= n_dense_lead; }
  int64_t ffn_width(int64_t l) const {
    if (n_ff_wide > 0 && l >= ffn_wide_from && !is_moe(l)) return n_ff_wide;
    return is_moe(l) || n_ff_dense == 0 ? n_ff : n_ff_dense;
  }
  int64_t max_ffn_width() const { return std::max({n_ff, n_ff_dense, n_ff_wide}); }

  // Whether layer l rotates Q and K (SmolLM3's NoPE layers do not).
  bool uses_rope(int64_t l) const { return nope_interval <= 0 || (l + 1) % nope_interval != 0; }
  // Whether layer l uses the sliding window.
  bool is_swa(int64_t l) const {
    return sliding_window > 0 && l < static_cast<int64_t>(swa_layers.size()) && swa_layers[l] == 'S';
  }
  float query_scale(int64_t l = 0) const;
  // Llama 4 / Mistral 3's attention temperature: queries at position pos times this (1 when attn_temp_scale is 0).
  float attn_temperature(int32_t pos) const;

  // Checks every field for sanity (non-zero sizes, heads dividing the width, ...).
  Status validate() const;
  std::string to_string() const;
  bool operator==(const ModelConfig& o) const;
};


}  // namespace cachet
