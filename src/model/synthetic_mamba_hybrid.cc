// Synthetic granite, granitemoe and granitehybrid files: the keys and tensor names llama.cpp's converter writes
// for IBM's Granite 3.x and 4.0-H (Granite's four scalars, none of them 1; granitehybrid: Mamba-2
// where attention.head_count_kv is 0, every `full_attn_interval`-th layer attending without RoPE, d_inner twice
// the width as llama.cpp requires), so llama.cpp loads them too and serves as the oracle.
#include <vector>

#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

namespace {

// A Mamba-2 mixer's tensors, `inner` = heads x head width: z | x B C | dt, the conv (taps oldest first, a bias),
// dt's bias, A < 0, D, the grouped norm, the output projection.
Status add_mamba2(RandomTensors& add, const SyntheticSpec& s, const std::string& p, int64_t inner) {
  const int64_t H = s.ssm_v_heads, G = s.ssm_groups, ds = s.ssm_state, cd = inner + 2 * G * ds;
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add(p + "ssm_in.weight", s.type, s.n_embd, 2 * inner + 2 * G * ds + H, lim(s.n_embd), 0.0f));
  CACHET_RETURN_IF_ERROR(add(p + "ssm_conv1d.weight", DType::kF32, s.ssm_conv_kernel, cd, 0.6f, 0.0f));
  CACHET_RETURN_IF_ERROR(add(p + "ssm_conv1d.bias", DType::kF32, cd, 1, 0.1f, 0.0f));
  CACHET_RETURN_IF_ERROR(add(p + "ssm_dt.bias", DType::kF32, H, 1, 1.5f, -3.0f));
  CACHET_RETURN_IF_ERROR(add.nd(p + "ssm_a", DType::kF32, {1, H}, 3.0f, -4.0f));
  CACHET_RETURN_IF_ERROR(add.nd(p + "ssm_d", DType::kF32, {1, H}, 0.5f, 1.0f));
  CACHET_RETURN_IF_ERROR(add.nd(p + "ssm_norm.weight", DType::kF32, {inner / G, G}, 0.1f, 1.0f));
  return add(p + "ssm_out.weight", s.type, inner, s.n_embd, lim(inner), 0.0f);
}

void add_mamba2_keys(GgufWriter* w, const SyntheticSpec& s, int64_t inner) {
  const std::string a = s.arch + ".";
  w->set_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.ssm_conv_kernel));
  w->set_u32(a + "ssm.state_size", static_cast<uint32_t>(s.ssm_state));
  w->set_u32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_groups));
  w->set_u32(a + "ssm.inner_size", static_cast<uint32_t>(inner));
  w->set_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_v_heads));
  w->set_bool(a + "rope.scaling.finetuned", false);  // no positions in the attention layers
}

bool bad_mamba2(const SyntheticSpec& s, int64_t inner) {
  const int64_t H = s.ssm_v_heads, G = s.ssm_groups;
  return s.ssm_conv_kernel < 2 || H <= 0 || inner % H != 0 || G <= 0 || H % G != 0 || s.ssm_state <= 0;
}

}  // namespace

Status write_synthetic_granite(const SyntheticSpec& s, const std::string& path) {
  const bool hybrid = s.arch == "granitehybrid", moe = s.n_expert > 0;
  if (s.arch == "granitemoe" && !moe) return invalid_argument("synthetic model: granitemoe needs experts");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert))
    return invalid_argument("synthetic model: experts used must be in 1..experts");
  const int64_t inner = 2 * s.n_embd;
  if (s.n_head % s.n_head_kv != 0 || (hybrid && (s.full_attn_interval < 1 || bad_mamba2(s, inner))))
    return invalid_argument("synthetic model: bad granite shape (Mamba-2 heads must divide 2 x n_embd, groups the heads)");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t qd = s.n_head * hd, kvd = s.n_head_kv * hd;
  const std::string a = s.arch + ".";
  auto attends = [&](int64_t l) { return !hybrid || (l + 1) % s.full_attn_interval == 0; };
  GgufWriter w;
  add_common_keys(&w, s);
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  if (hybrid) {
    std::vector<int32_t> kv_heads;
    for (int64_t l = 0; l < s.n_layer; ++l) kv_heads.push_back(attends(l) ? static_cast<int32_t>(s.n_head_kv) : 0);
    w.set_i32_array(a + "attention.head_count_kv", kv_heads);
    add_mamba2_keys(&w, s, inner);
  } else {
    w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  }
  if (hd != s.n_embd / s.n_head) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  add_rope_keys(&w, s, hd);
  // (Granite 4.0's own, 12 and 0.22, make a random file's residual stream mostly its token's embedding: a tied
  // head then predicts the token it was given. So do embeddings as wide as the other writers': these are 0.4.)
  w.set_f32(a + "embedding_scale", 1.25f);
  w.set_f32(a + "residual_scale", 0.75f);
  w.set_f32(a + "logit_scale", 6.0f);
  w.set_f32(a + "attention.scale", 1.0f / static_cast<float>(hd));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    if (s.n_ff_shared > 0) w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shared));
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 0.4f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  if (!s.tied_output) CACHET_RETURN_IF_ERROR(add("output.weight", s.type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (attends(l)) {
      CACHET_RETURN_IF_ERROR(add_attention(add, s, p, qd, kvd));
    } else {
      CACHET_RETURN_IF_ERROR(add_mamba2(add, s, p, inner));
    }
    CACHET_RETURN_IF_ERROR(add(p + "ffn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (moe) {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, s.n_expert, 3.0f * lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", s.type, {s.n_ff, s.n_embd, s.n_expert}, lim(s.n_ff), 0.0f));
      if (s.n_ff_shared > 0) {
        const int64_t sf = s.n_ff_shared;
        CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_shexp.weight", s.type, s.n_embd, sf, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ffn_up_shexp.weight", s.type, s.n_embd, sf, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ffn_down_shexp.weight", s.type, sf, s.n_embd, lim(sf), 0.0f));
      }
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, s.n_embd, lim(s.n_ff), 0.0f));
    }
  }
  return w.write(path);
}

Status write_synthetic_nemotron_h(const SyntheticSpec& s, const std::string& path) {
  const int64_t inner = s.ssm_v_heads * s.ssm_head_dim;
  const bool moe = s.arch == "nemotron_h_moe";
  if (moe != (s.n_expert > 0)) return invalid_argument("synthetic model: nemotron_h_moe, and only it, has experts");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_ff_shared <= 0))
    return invalid_argument("synthetic model: nemotron_h_moe needs 1..experts used and a shared expert");
  if (s.n_head % s.n_head_kv != 0 || s.full_attn_interval < 1 || bad_mamba2(s, inner))
    return invalid_argument("synthetic model: bad nemotron_h shape");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t qd = s.n_head * hd, kvd = s.n_head_kv * hd;
  const std::string a = s.arch + ".";
  // Every full_attn_interval-th layer attends; of the others, even ones are Mamba-2, odd ones FFNs.
  // A multi-token-prediction block after the trunk (Nemotron 3's): attention and experts in one layer, listed
  // with both KV heads and an FFN width.
  if (s.n_mtp < 0 || (s.n_mtp > 0 && !moe)) return invalid_argument("synthetic model: nemotron_h's MTP blocks need experts");
  auto kind = [&](int64_t l) {
    return l >= s.n_layer ? 'X' : (l + 1) % s.full_attn_interval == 0 ? 'A' : l % 2 == 0 ? 'M' : 'F';
  };
  SyntheticSpec all = s;
  all.n_layer += s.n_mtp;
  GgufWriter w;
  add_common_keys(&w, all, /*ff_key=*/false);
  if (s.n_mtp > 0) w.set_u32(a + "nextn_predict_layers", static_cast<uint32_t>(s.n_mtp));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  std::vector<int32_t> kv_heads, ff;
  for (int64_t l = 0; l < all.n_layer; ++l) {
    kv_heads.push_back(kind(l) == 'A' || kind(l) == 'X' ? static_cast<int32_t>(s.n_head_kv) : 0);
    ff.push_back(kind(l) == 'F' || kind(l) == 'X' ? static_cast<int32_t>(s.n_ff) : 0);
  }
  w.set_i32_array(a + "attention.head_count_kv", kv_heads);
  w.set_i32_array(a + "feed_forward_length", ff);
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w.set_f32(a + "attention.layer_norm_epsilon", 1e-5f);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  add_mamba2_keys(&w, s, inner);
  if (moe) {  // Nemotron 3 Nano's: one group, weights renormalized then scaled
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(s.n_ff_shared));
    w.set_u32(a + "expert_shared_count", 1);
    w.set_bool(a + "expert_weights_norm", true);
    w.set_f32(a + "expert_weights_scale", 2.5f);
    w.set_u32(a + "expert_group_count", 1);
    if (s.moe_latent > 0) w.set_u32(a + "moe_latent_size", static_cast<uint32_t>(s.moe_latent));
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  if (!s.tied_output) CACHET_RETURN_IF_ERROR(add("output.weight", s.type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  for (int64_t l = 0; l < all.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (kind(l) == 'X') {  // the MTP block: eh_proj and its norms, attention, post_attention_norm, then experts
      CACHET_RETURN_IF_ERROR(add(p + "nextn.eh_proj.weight", s.type, 2 * s.n_embd, s.n_embd, lim(2 * s.n_embd), 0.0f));
      for (const char* n : {"nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight",
                            "post_attention_norm.weight"})
        CACHET_RETURN_IF_ERROR(add(p + n, DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add_attention(add, s, p, qd, kvd));
    }
    if (kind(l) == 'A') {
      CACHET_RETURN_IF_ERROR(add_attention(add, s, p, qd, kvd));
    } else if ((kind(l) == 'F' || kind(l) == 'X') && moe) {  // ungated ReLU^2 experts behind a biased sigmoid router; a shared one
      // (Nemotron 3 Super: the experts in a latent width, between ffn_latent_down and ffn_latent_up.)
      const int64_t E = s.n_expert, sf = s.n_ff_shared, ed = s.moe_latent > 0 ? s.moe_latent : s.n_embd;
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, E, 3.0f * lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "exp_probs_b.bias", DType::kF32, E, 1, 0.1f, 0.0f));
      if (s.moe_latent > 0) {
        CACHET_RETURN_IF_ERROR(add(p + "ffn_latent_down.weight", s.type, s.n_embd, ed, lim(s.n_embd), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + "ffn_latent_up.weight", s.type, ed, s.n_embd, lim(ed), 0.0f));
      }
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", s.type, {ed, s.n_ff, E}, lim(ed), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", s.type, {s.n_ff, ed, E}, lim(s.n_ff), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up_shexp.weight", s.type, s.n_embd, sf, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down_shexp.weight", s.type, sf, s.n_embd, lim(sf), 0.0f));
    } else if (kind(l) == 'F') {  // not gated: down(relu(up x)^2)
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, s.n_embd, lim(s.n_ff), 0.0f));
    } else {
      CACHET_RETURN_IF_ERROR(add_mamba2(add, s, p, inner));
    }
  }
  return w.write(path);
}

}  // namespace cachet
