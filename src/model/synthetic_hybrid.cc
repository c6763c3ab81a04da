// Synthetic qwen35 / qwen35moe / qwen3next files: the keys and tensor names llama.cpp's converter writes for Qwen3.5 / 3.6
// (gated delta net layers with every full_attn_interval-th layer a gated attention layer), so llama.cpp loads
// them too and serves as the oracle.
#include <cmath>
#include <vector>

#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

Status write_synthetic_qwen35(const SyntheticSpec& s, const std::string& path) {
  const bool next = s.arch == "qwen3next";  // Qwen3-Next: fused beta|alpha (and q|k|v|z in legacy files), no sections
  const bool moe = s.arch == "qwen35moe" || next;
  if (moe != (s.n_expert > 0)) return invalid_argument("synthetic model: qwen35moe and qwen3next, and only they, have experts");
  if (s.legacy_ssm_in && !next) return invalid_argument("synthetic model: ssm_in is qwen3next's");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert))
    return invalid_argument("synthetic model: experts used must be in 1..experts");
  if (s.n_head % s.n_head_kv != 0) return invalid_argument("synthetic model: KV heads must divide the heads");
  if (s.ssm_k_heads <= 0 || s.ssm_v_heads % s.ssm_k_heads != 0 || s.ssm_head_dim <= 0 || s.ssm_conv_kernel < 1 ||
      s.full_attn_interval < 1)
    return invalid_argument("synthetic model: bad gated delta net shape");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t qd = s.n_head * hd, kvd = s.n_head_kv * hd;
  const int64_t n_rot = hd / 4 * 2 > 0 ? hd / 4 * 2 : 2;  // a quarter of the head rotates (Qwen3.5: 64 of 256)
  const int64_t sd = s.ssm_head_dim, kd = s.ssm_k_heads * sd, vd = s.ssm_v_heads * sd, cd = 2 * kd + vd;
  const std::string a = s.arch + ".";
  if (s.n_mtp < 0 || (s.n_mtp > 0 && next)) return invalid_argument("synthetic model: MTP blocks are qwen35 / qwen35moe's");
  GgufWriter w;
  SyntheticSpec all = s;  // block_count counts the MTP blocks too
  all.n_layer += s.n_mtp;
  add_common_keys(&w, all);
  if (s.n_mtp > 0) w.set_u32(a + "nextn_predict_layers", static_cast<uint32_t>(s.n_mtp));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(n_rot));
  w.set_f32(a + "rope.freq_base", static_cast<float>(s.rope_theta));
  // Sections over n_rot / 2 pairs as Qwen3.5's [11, 11, 10, 0] split 32: t and h a third each, w the rest.
  const int32_t pairs = static_cast<int32_t>(n_rot / 2), third = (pairs + 2) / 3;
  if (!next) w.set_i32_array(a + "rope.dimension_sections", {third, third, pairs - 2 * third, 0});
  w.set_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.ssm_conv_kernel));
  w.set_u32(a + "ssm.state_size", static_cast<uint32_t>(sd));
  w.set_u32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_k_heads));
  w.set_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_v_heads));
  w.set_u32(a + "ssm.inner_size", static_cast<uint32_t>(vd));
  w.set_u32(a + "full_attention_interval", static_cast<uint32_t>(s.full_attn_interval));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
    if (s.n_ff_shared > 0) w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shared));
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  if (!s.tied_output) CACHET_RETURN_IF_ERROR(add("output.weight", s.type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  for (int64_t l = 0; l < s.n_layer + s.n_mtp; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool mtp = l >= s.n_layer;  // a multi-token-prediction block: gated attention, the trunk's FFN kind
    // With mtp_echo, the block's output projections write zeros and its norms are ones.
    const float out_lim = mtp && s.mtp_echo ? 0.0f : 1.0f, norm_lim = mtp && s.mtp_echo ? 0.0f : 0.1f;
    if (mtp) {
      if (s.mtp_echo) {  // [0 | I]: the layer's input is hnorm(h)
        std::vector<float> eh(static_cast<size_t>(2 * s.n_embd * s.n_embd), 0.0f);
        for (int64_t i = 0; i < s.n_embd; ++i) eh[static_cast<size_t>(i * 2 * s.n_embd + s.n_embd + i)] = 1.0f;
        CACHET_RETURN_IF_ERROR(w.add_tensor_f32(p + "nextn.eh_proj.weight", s.type, {2 * s.n_embd, s.n_embd}, eh.data()));
      } else {
        CACHET_RETURN_IF_ERROR(add(p + "nextn.eh_proj.weight", s.type, 2 * s.n_embd, s.n_embd, lim(2 * s.n_embd), 0.0f));
      }
      CACHET_RETURN_IF_ERROR(add(p + "nextn.enorm.weight", DType::kF32, s.n_embd, 1, norm_lim, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "nextn.hnorm.weight", DType::kF32, s.n_embd, 1, norm_lim, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "nextn.shared_head_norm.weight", DType::kF32, s.n_embd, 1, norm_lim, 1.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (!mtp && (l + 1) % s.full_attn_interval != 0) {  // gated delta net
      if (s.legacy_ssm_in) {
        CACHET_RETURN_IF_ERROR(add(p + "ssm_in.weight", s.type, s.n_embd, cd + vd, lim(s.n_embd), 0.0f));
      } else {
        CACHET_RETURN_IF_ERROR(add(p + "attn_qkv.weight", s.type, s.n_embd, cd, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "attn_gate.weight", s.type, s.n_embd, vd, lim(s.n_embd), 0.0f));
      }
      CACHET_RETURN_IF_ERROR(add(p + "ssm_conv1d.weight", DType::kF32, s.ssm_conv_kernel, cd, 0.5f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ssm_dt.bias", DType::kF32, s.ssm_v_heads, 1, 1.0f, 0.0f));
      // A = -exp(A_log): negative, so each step's decay exp(softplus(.) * A) is in (0, 1).
      CACHET_RETURN_IF_ERROR(add(p + "ssm_a", DType::kF32, s.ssm_v_heads, 1, 0.4f, -0.5f));
      if (next) {
        CACHET_RETURN_IF_ERROR(add(p + "ssm_ba.weight", s.type, s.n_embd, 2 * s.ssm_v_heads, lim(s.n_embd), 0.0f));
      } else {
        CACHET_RETURN_IF_ERROR(add(p + "ssm_beta.weight", s.type, s.n_embd, s.ssm_v_heads, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ssm_alpha.weight", s.type, s.n_embd, s.ssm_v_heads, lim(s.n_embd), 0.0f));
      }
      CACHET_RETURN_IF_ERROR(add(p + "ssm_norm.weight", DType::kF32, sd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ssm_out.weight", s.type, vd, s.n_embd, lim(vd), 0.0f));
    } else {  // gated attention: Q rows hold [q, gate] per head
      CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, 2 * qd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", DType::kF32, hd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", DType::kF32, hd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, qd, s.n_embd, out_lim * lim(qd), 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "post_attention_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (moe) {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, s.n_expert, 4 * lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", s.type, {s.n_ff, s.n_embd, s.n_expert}, out_lim * lim(s.n_ff), 0.0f));
      if (s.n_ff_shared > 0) {
        CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp_shexp.weight", DType::kF32, s.n_embd, 1, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_shexp.weight", s.type, s.n_embd, s.n_ff_shared, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ffn_up_shexp.weight", s.type, s.n_embd, s.n_ff_shared, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ffn_down_shexp.weight", s.type, s.n_ff_shared, s.n_embd, out_lim * lim(s.n_ff_shared), 0.0f));
      }
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, s.n_embd, out_lim * lim(s.n_ff), 0.0f));
    }
  }
  return w.write(path);
}

}  // namespace cachet
