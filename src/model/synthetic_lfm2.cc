// Synthetic lfm2 files: the keys and tensor names llama.cpp's converter writes for LFM2 (short conv layers where
// the per-layer attention.head_count_kv is 0; every `full_attn_interval`-th layer attends), so llama.cpp loads
// them too and serves as the oracle.
#include <vector>

#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

Status write_synthetic_lfm2(const SyntheticSpec& s, const std::string& path) {
  const bool moe = s.arch == "lfm2moe";
  if (moe != (s.n_expert > 0)) return invalid_argument("synthetic model: lfm2moe, and only it, has experts");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_dense_lead > s.n_layer ||
              (s.n_dense_lead > 0 && s.n_ff_dense <= 0)))
    return invalid_argument("synthetic model: bad lfm2moe experts");
  if (s.n_head % s.n_head_kv != 0 || s.ssm_conv_kernel < 2 || s.full_attn_interval < 1)
    return invalid_argument("synthetic model: bad lfm2 shape");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t qd = s.n_head * hd, kvd = s.n_head_kv * hd;
  const std::string a = s.arch + ".";
  auto attends = [&](int64_t l) { return (l + 1) % s.full_attn_interval == 0; };
  GgufWriter w;
  SyntheticSpec common = s;  // lfm2moe: feed_forward_length is the dense layers' width
  if (moe) common.n_ff = s.n_ff_dense > 0 ? s.n_ff_dense : s.n_ff;
  add_common_keys(&w, common);
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  std::vector<int32_t> kv_heads;
  for (int64_t l = 0; l < s.n_layer; ++l) kv_heads.push_back(attends(l) ? static_cast<int32_t>(s.n_head_kv) : 0);
  w.set_i32_array(a + "attention.head_count_kv", kv_heads);
  if (hd != s.n_embd / s.n_head) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(a + "rope.freq_base", static_cast<float>(s.rope_theta));
  w.set_u32(a + "shortconv.l_cache", static_cast<uint32_t>(s.ssm_conv_kernel));
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.set_u32(a + "leading_dense_block_count", static_cast<uint32_t>(s.n_dense_lead));
    w.set_u32(a + "expert_gating_func", 2);  // sigmoid
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("token_embd_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  if (!s.tied_output) CACHET_RETURN_IF_ERROR(add("output.weight", s.type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (attends(l)) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, qd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", DType::kF32, hd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", DType::kF32, hd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, qd, s.n_embd, lim(qd), 0.0f));
    } else {  // short conv: B | C | x, the taps (oldest first), the output projection
      CACHET_RETURN_IF_ERROR(add(p + "shortconv.in_proj.weight", s.type, s.n_embd, 3 * s.n_embd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "shortconv.conv.weight", DType::kF32, s.ssm_conv_kernel, s.n_embd, 0.6f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "shortconv.out_proj.weight", s.type, s.n_embd, s.n_embd, lim(s.n_embd), 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "ffn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (moe && l >= s.n_dense_lead) {  // experts s.n_ff wide; a selection bias of the size of the probabilities
      // Router logits of about unit spread: sigmoid probabilities spread over (0, 1), not saturated in ties.
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, s.n_expert, 3.0f * lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "exp_probs_b.bias", DType::kF32, s.n_expert, 1, 0.1f, 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", s.type, {s.n_ff, s.n_embd, s.n_expert}, lim(s.n_ff), 0.0f));
    } else {  // dense: lfm2moe's leading layers are n_ff_dense wide
      const int64_t ff = moe ? s.n_ff_dense : s.n_ff;
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, s.n_embd, ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, ff, s.n_embd, lim(ff), 0.0f));
    }
  }
  return w.write(path);
}

}  // namespace cachet
