// Synthetic gemma4 files: the keys and tensor names llama.cpp's converter writes for Gemma 4 (sliding and global
// layers with their own head widths, KV head counts and RoPE dims; proportional RoPE on the global layers as a
// rope_freqs of 1 for the rotated quarter and 1e30 for the rest; per-head Q/K norms; optional K-as-V on the
// global layers, KV shared by the last layers, per-layer embeddings, and the MoE block: a dense MLP beside
// fused gate|up experts behind a scaled router), so llama.cpp loads them too and serves as the oracle.
#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

Status write_synthetic_gemma4(const SyntheticSpec& s, const std::string& path) {
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t ghd = s.global_head_dim > 0 ? s.global_head_dim : 2 * hd;
  const int64_t gkv = s.n_head_kv_global > 0 ? s.n_head_kv_global : s.n_head_kv;
  const int64_t period = s.full_attn_interval;
  const bool moe = s.n_expert > 0;
  const int64_t ff = moe && s.n_ff_dense > 0 ? s.n_ff_dense : s.n_ff;  // the dense MLP's width
  const int64_t pl = s.n_embd_per_layer;
  if (period < 1 || s.n_head % s.n_head_kv != 0 || s.n_head % gkv != 0 || ghd % 8 != 0)
    return invalid_argument("synthetic model: bad gemma4 heads or layer pattern");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert))
    return invalid_argument("synthetic model: experts used must be in 1..experts");
  std::vector<bool> swa(static_cast<size_t>(s.n_layer));
  for (int64_t l = 0; l < s.n_layer; ++l) swa[l] = (l + 1) % period != 0;
  const int64_t kv_from = s.n_layer - s.n_kv_shared;  // layers from here reuse earlier layers' KV
  if (s.n_kv_shared < 0 || (s.n_kv_shared > 0 && (kv_from < 2 || !swa[kv_from - 2] || swa[kv_from - 1])))
    return invalid_argument("synthetic model: gemma4's shared KV layers must follow a local then a global layer");
  std::vector<int32_t> kv_heads;
  for (int64_t l = 0; l < s.n_layer; ++l) kv_heads.push_back(static_cast<int32_t>(swa[l] ? s.n_head_kv : gkv));

  const std::string a = s.arch + ".";
  GgufWriter w;
  SyntheticSpec common = s;
  common.n_ff = ff;  // feed_forward_length: the dense MLP's width ...
  add_common_keys(&w, common, !s.double_wide_mlp);
  const auto ff_at = [&](int64_t l) { return s.double_wide_mlp && l >= kv_from ? 2 * ff : ff; };
  if (s.double_wide_mlp) {  // ... or one per layer, twice as wide on the shared-KV layers
    if (moe || s.n_kv_shared == 0) return invalid_argument("synthetic model: a double-wide MLP needs shared KV layers");
    std::vector<int32_t> widths;
    for (int64_t l = 0; l < s.n_layer; ++l) widths.push_back(static_cast<int32_t>(ff_at(l)));
    w.set_i32_array(a + "feed_forward_length", widths);
  }
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_i32_array(a + "attention.head_count_kv", kv_heads);
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(ghd));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(ghd));
  w.set_u32(a + "attention.key_length_swa", static_cast<uint32_t>(hd));
  w.set_u32(a + "attention.value_length_swa", static_cast<uint32_t>(hd));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window > 0 ? s.sliding_window : 512));
  w.set_bool_array(a + "attention.sliding_window_pattern", swa);
  w.set_u32(a + "attention.shared_kv_layers", static_cast<uint32_t>(s.n_kv_shared));
  w.set_u32(a + "embedding_length_per_layer_input", static_cast<uint32_t>(pl));
  add_rope_keys(&w, s, ghd);
  w.set_u32(a + "rope.dimension_count_swa", static_cast<uint32_t>(hd));
  w.set_f32(a + "rope.freq_base_swa", 10000.0f);
  if (s.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", static_cast<float>(s.final_softcap));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  const auto norm = [&](const std::string& name, int64_t n) { return add(name, DType::kF32, n, 1, 0.1f, 1.0f); };
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(norm("output_norm.weight", s.n_embd));
  if (!s.tied_output)
    CACHET_RETURN_IF_ERROR(add("output.weight", s.embd_type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  // Proportional RoPE: a quarter of the global head's pairs turn, the rest (factor 1e30) stand still.
  std::vector<float> factors(static_cast<size_t>(ghd / 2), 1e30f);
  for (int64_t i = 0; i < ghd / 8; ++i) factors[i] = 1.0f;
  CACHET_RETURN_IF_ERROR(w.add_tensor_f32("rope_freqs.weight", DType::kF32, {ghd / 2}, factors.data()));
  if (pl > 0) {
    CACHET_RETURN_IF_ERROR(add("per_layer_token_embd.weight", s.embd_type, pl * s.n_layer, s.n_vocab, 1.0f, 0.0f));
    CACHET_RETURN_IF_ERROR(add("per_layer_model_proj.weight", s.type, s.n_embd, pl * s.n_layer, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(norm("per_layer_proj_norm.weight", pl));
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t h = swa[l] ? hd : ghd, qd = s.n_head * h, kvd = kv_heads[l] * h;
    const bool has_kv = l < kv_from;
    CACHET_RETURN_IF_ERROR(norm(p + "attn_norm.weight", s.n_embd));
    CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, qd, lim(s.n_embd), 0.0f));
    if (has_kv) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
      if (swa[l] || !s.k_eq_v) CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, qd, s.n_embd, lim(qd), 0.0f));
    CACHET_RETURN_IF_ERROR(norm(p + "attn_q_norm.weight", h));
    if (has_kv) CACHET_RETURN_IF_ERROR(norm(p + "attn_k_norm.weight", h));
    CACHET_RETURN_IF_ERROR(norm(p + "post_attention_norm.weight", s.n_embd));
    CACHET_RETURN_IF_ERROR(add(p + "layer_output_scale.weight", DType::kF32, 1, 1, 0.3f, 0.8f));
    CACHET_RETURN_IF_ERROR(norm(p + "ffn_norm.weight", s.n_embd));
    const int64_t f = ff_at(l);
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, s.n_embd, f, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, f, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, f, s.n_embd, lim(f), 0.0f));
    CACHET_RETURN_IF_ERROR(norm(p + "post_ffw_norm.weight", s.n_embd));
    if (moe) {
      // Router logits of a few units' spread (its input is rms(x) / sqrt(d)): the weights decide the experts.
      const float router_lim = 4 * lim(s.n_embd) * std::sqrt(static_cast<float>(s.n_embd));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, s.n_expert, router_lim, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.scale", DType::kF32, s.n_embd, 1, 0.5f, 1.0f));
      CACHET_RETURN_IF_ERROR(norm(p + "pre_ffw_norm_2.weight", s.n_embd));
      CACHET_RETURN_IF_ERROR(norm(p + "post_ffw_norm_1.weight", s.n_embd));
      CACHET_RETURN_IF_ERROR(norm(p + "post_ffw_norm_2.weight", s.n_embd));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_up_exps.weight", s.type, {s.n_embd, 2 * s.n_ff, s.n_expert},
                                    lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", s.type, {s.n_ff, s.n_embd, s.n_expert}, lim(s.n_ff), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down_exps.scale", DType::kF32, s.n_expert, 1, 0.5f, 1.0f));
    }
    if (pl > 0) {
      CACHET_RETURN_IF_ERROR(add(p + "inp_gate.weight", s.type, s.n_embd, pl, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "proj.weight", s.type, pl, s.n_embd, lim(pl), 0.0f));
      CACHET_RETURN_IF_ERROR(norm(p + "post_norm.weight", s.n_embd));
    }
  }
  return w.write(path);
}

}  // namespace cachet
