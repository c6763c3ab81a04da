// Synthetic deepseek2 files: the keys and tensor names llama.cpp's converter writes for MLA models (the latent
// and rotated key from attn_kv_a_mqa, per-head attn_k_b / attn_v_b, optionally a compressed query), leading dense
// layers then experts beside shared ones, so llama.cpp loads them too and serves as the oracle.
#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

Status write_synthetic_deepseek2(const SyntheticSpec& s, const std::string& path) {
  const int64_t nope = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head, rd = s.mla_rope_dim;
  const int64_t kvl = s.kv_lora_rank, vd = s.mla_v_dim > 0 ? s.mla_v_dim : nope, H = s.n_head;
  const bool moe = s.n_expert > 0;
  if (kvl <= 0 || rd <= 0 || rd % 2 != 0 || s.q_lora_rank < 0)
    return invalid_argument("synthetic model: deepseek2 needs a latent and an even rotated part");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_ff_shared <= 0 ||
              s.n_ff_shared % s.n_ff != 0 || s.n_dense_lead > s.n_layer || (s.n_dense_lead > 0 && s.n_ff_dense <= 0)))
    return invalid_argument("synthetic model: deepseek2's experts need 1 <= used <= experts, shared experts (a "
                            "multiple of n_ff wide) and, with leading dense layers, their width");
  if (s.n_mtp < 0 || (s.n_mtp > 0 && !moe)) return invalid_argument("synthetic model: deepseek2's MTP blocks need experts");
  const std::string a = s.arch + ".";
  SyntheticSpec all = s;  // block_count counts the MTP blocks after the trunk's
  all.n_layer += s.n_mtp;
  GgufWriter w;
  add_common_keys(&w, all, false);
  if (s.n_mtp > 0) w.set_u32(a + "nextn_predict_layers", static_cast<uint32_t>(s.n_mtp));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(moe ? s.n_ff_dense : s.n_ff));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(s.n_vocab));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(H));
  w.set_u32(a + "attention.head_count_kv", 1);
  w.set_u32(a + "attention.q_lora_rank", static_cast<uint32_t>(s.q_lora_rank));
  w.set_u32(a + "attention.kv_lora_rank", static_cast<uint32_t>(kvl));
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(kvl + rd));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(kvl));
  w.set_u32(a + "attention.key_length_mla", static_cast<uint32_t>(nope + rd));
  w.set_u32(a + "attention.value_length_mla", static_cast<uint32_t>(vd));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  add_rope_keys(&w, s, rd);
  if (s.rope_yarn_log_mul != 0.0)
    w.set_f32(a + "rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * s.rope_yarn_log_mul));
  w.set_u32(a + "leading_dense_block_count", static_cast<uint32_t>(moe ? s.n_dense_lead : s.n_layer));
  w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + "expert_shared_count", static_cast<uint32_t>(moe ? s.n_ff_shared / s.n_ff : 0));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_f32(a + "expert_weights_scale", s.sigmoid_router ? 2.5f : 1.0f);
    w.set_bool(a + "expert_weights_norm", s.sigmoid_router);
    w.set_u32(a + "expert_gating_func", s.sigmoid_router ? 2 : 1);
    if (s.n_expert_groups > 1) {
      w.set_u32(a + "expert_group_count", static_cast<uint32_t>(s.n_expert_groups));
      w.set_u32(a + "expert_group_used_count", static_cast<uint32_t>(s.n_expert_groups_used));
    }
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  // Rows too short for the spec's block type (the per-head decompressions' nope / latent rows against a
  // K-quant's 256) are written as llama.cpp's quantizer falls back: Q8_0, else F32.
  auto type_for = [&](int64_t row) {
    const int64_t bs = traits(s.type).block_size;
    return row % bs == 0 ? s.type : row % 32 == 0 && s.type != DType::kF32 ? DType::kQ8_0 : DType::kF32;
  };
  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  const int64_t d = s.n_embd;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, d, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
  if (!s.tied_output) CACHET_RETURN_IF_ERROR(add("output.weight", s.embd_type, d, s.n_vocab, lim(d), 0.0f));
  for (int64_t l = 0; l < s.n_layer + s.n_mtp; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (l >= s.n_layer) {  // a multi-token-prediction block (GLM-4.7-Flash's): eh_proj, its norms, the head's norm
      CACHET_RETURN_IF_ERROR(add(p + "nextn.eh_proj.weight", s.type, 2 * d, d, lim(2 * d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "nextn.enorm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "nextn.hnorm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "nextn.shared_head_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
    if (s.q_lora_rank > 0) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_q_a.weight", type_for(d), d, s.q_lora_rank, lim(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_q_a_norm.weight", DType::kF32, s.q_lora_rank, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(
          add(p + "attn_q_b.weight", type_for(s.q_lora_rank), s.q_lora_rank, H * (nope + rd), lim(s.q_lora_rank), 0.0f));
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", type_for(d), d, H * (nope + rd), lim(d), 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "attn_kv_a_mqa.weight", type_for(d), d, kvl + rd, lim(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_kv_a_norm.weight", DType::kF32, kvl, 1, 0.1f, 1.0f));
    // Per head: q_nope -> the latent (rows of nope), the latent -> a value head (rows of kv_lora_rank).
    CACHET_RETURN_IF_ERROR(add.nd(p + "attn_k_b.weight", type_for(nope), {nope, kvl, H}, lim(nope), 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "attn_v_b.weight", type_for(kvl), {kvl, vd, H}, lim(kvl), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", type_for(H * vd), H * vd, d, lim(H * vd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
    if (!moe || l < s.n_dense_lead) {
      const int64_t ff = moe ? s.n_ff_dense : s.n_ff;
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, d, ff, lim(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, d, ff, lim(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", type_for(ff), ff, d, lim(ff), 0.0f));
      continue;
    }
    const int64_t E = s.n_expert, ff = s.n_ff, sf = s.n_ff_shared;
    // Router logits of a few units' spread; a sigmoid router's selection bias the size of its probabilities.
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, d, E, 4 * lim(d), 0.0f));
    if (s.sigmoid_router) CACHET_RETURN_IF_ERROR(add(p + "exp_probs_b.bias", DType::kF32, E, 1, 0.1f, 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_exps.weight", s.type, {d, ff, E}, lim(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", s.type, {d, ff, E}, lim(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", type_for(ff), {ff, d, E}, lim(ff), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_shexp.weight", s.type, d, sf, lim(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up_shexp.weight", s.type, d, sf, lim(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down_shexp.weight", type_for(sf), sf, d, lim(sf), 0.0f));
  }
  return w.write(path);
}

}  // namespace cachet
