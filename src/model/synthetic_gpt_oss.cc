// Synthetic gpt-oss files: the keys and tensor names llama.cpp's converter writes for gpt-oss (attention sinks,
// Q/K/V/output biases, alternating sliding-window layers, a biased router and biased experts), so llama.cpp
// loads them too and serves as the oracle. The experts take the spec's type (MXFP4 as the real files ship).
#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

Status write_synthetic_gpt_oss(const SyntheticSpec& s, const std::string& path) {
  if (s.n_expert < 1 || s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
    return invalid_argument("synthetic model: gpt-oss needs experts (1 <= used <= experts)");
  if (s.n_head % s.n_head_kv != 0) return invalid_argument("synthetic model: bad gpt-oss heads");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t qd = s.n_head * hd, kvd = s.n_head_kv * hd;
  const std::string a = s.arch + ".";
  const DType xt = s.expert_type.value_or(s.type);
  GgufWriter w;
  add_common_keys(&w, s);
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window > 0 ? s.sliding_window : 128));
  add_rope_keys(&w, s, hd);
  w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
  w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
  w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  CACHET_RETURN_IF_ERROR(add("output.weight", s.embd_type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, qd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_q.bias", DType::kF32, qd, 1, 0.3f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_k.bias", DType::kF32, kvd, 1, 0.3f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_v.bias", DType::kF32, kvd, 1, 0.3f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, qd, s.n_embd, lim(qd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.bias", DType::kF32, s.n_embd, 1, 0.3f, 0.0f));
    // Sinks about as large as the scores (a few units): they take a real share of each softmax.
    CACHET_RETURN_IF_ERROR(add(p + "attn_sinks.weight", DType::kF32, s.n_head, 1, 2.0f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "post_attention_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    // Router logits of a few units' spread (as Mixtral's fixture): the expert choice is decided by the weights.
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, s.n_expert, 4 * lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.bias", DType::kF32, s.n_expert, 1, 0.5f, 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_exps.weight", xt, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", xt, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", xt, {s.n_ff, s.n_embd, s.n_expert}, lim(s.n_ff), 0.0f));
    // Gate biases up to the clamp (7): the SwiGLU's limits are reached on some elements.
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_exps.bias", DType::kF32, s.n_ff, s.n_expert, 1.0f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up_exps.bias", DType::kF32, s.n_ff, s.n_expert, 1.0f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down_exps.bias", DType::kF32, s.n_embd, s.n_expert, 0.3f, 0.0f));
  }
  return w.write(path);
}

}  // namespace cachet
