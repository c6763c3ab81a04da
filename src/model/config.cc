#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <sstream>


namespace cachet {

Status ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v <= 0) return invalid_argument(std::string(name) + " must be positive, is " + std::to_string(v));
    return Status::ok();
  };
  CACHET_RETURN_IF_ERROR(positive(n_vocab, "n_vocab"));
  CACHET_RETURN_IF_ERROR(positive(n_embd, "n_embd"));
  CACHET_RETURN_IF_ERROR(positive(n_layer, "n_layer"));
  CACHET_RETURN_IF_ERROR(positive(n_head, "n_head"));
  CACHET_RETURN_IF_ERROR(positive(n_head_kv, "n_head_kv"));
  CACHET_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  CACHET_RETURN_IF_ERROR(positive(n_ff, "n_ff"));
  CACHET_RETURN_IF_ERROR(positive(rope_dim, "rope_dim"));
  CACHET_RETURN_IF_ERROR(positive(n_ctx_train, "n_ctx_train"));
  if (n_head % n_head_kv != 0)
    return invalid_argument("n_head_kv " + std::to_string(n_head_kv) + " does not divide n_head " +
                            std::to_string(n_head));
  if (head_dim % 2 != 0) return invalid_argument("head_dim " + std::to_string(head_dim) + " is odd");
  if (rope_dim % 2 != 0 || rope_dim > head_dim)
    return invalid_argument("rope_dim " + std::to_string(rope_dim) + " must be even and at most head_dim " +
                            std::to_string(head_dim));
  if (!(rope_theta > 0.0) || !std::isfinite(rope_theta))
    return invalid_argument("rope_theta must be a positive number");
  if (!(rms_eps > 0.0) || rms_eps > 1.0) return invalid_argument("rms_eps must be in (0, 1]");
  auto finite_nonneg = [](double v, const char* name) -> Status {
    if (!std::isfinite(v) || v < 0.0) return invalid_argument(std::string(name) + " must be a finite number >= 0");
    return Status::ok();
  };
  CACHET_RETURN_IF_ERROR(finite_nonneg(attn_scale, "attn_scale"));
  CACHET_RETURN_IF_ERROR(finite_nonneg(attn_softcap, "attn_softcap"));
  CACHET_RETURN_IF_ERROR(finite_nonneg(final_softcap, "final_softcap"));
  if (!(embd_scale > 0.0) || !std::isfinite(embd_scale)) return invalid_argument("embd_scale must be positive");
  if (!(residual_scale > 0.0) || !std::isfinite(residual_scale) || !(logit_scale > 0.0) || !std::isfinite(logit_scale))
    return invalid_argument("residual_scale and logit_scale must be positive");
  if (!(rope_freq_scale > 0.0) || !std::isfinite(rope_freq_scale))
    return invalid_argument("rope_freq_scale must be positive");
  if (rope_scaling != "none" && rope_scaling != "linear" && rope_scaling != "yarn")
    return invalid_argument("rope_scaling must be none, linear or yarn");
  if (!(rope_attn_factor > 0.0) || !std::isfinite(rope_attn_factor))
    return invalid_argument("rope_attn_factor must be positive");
  if (rope_yarn_ext_factor != 0.0 && (!(rope_yarn_beta_fast > 0.0) || !(rope_yarn_beta_slow > 0.0) ||
                                      !std::isfinite(rope_yarn_beta_fast) || !std::isfinite(rope_yarn_beta_slow)))
    return invalid_argument("YaRN beta_fast and beta_slow must be positive");
  if (rope_yarn_orig_ctx < 0) return invalid_argument("rope_yarn_orig_ctx must not be negative");
  if (!(rope_freq_scale_swa > 0.0) || !std::isfinite(rope_freq_scale_swa))
    return invalid_argument("rope_freq_scale_swa must be positive");
  if (!(rope_theta_swa > 0.0) || !std::isfinite(rope_theta_swa))
    return invalid_argument("rope_theta_swa must be positive");
  if (sliding_window < 0) return invalid_argument("sliding_window must be >= 0");
  if (!swa_layers.empty()) {
    if (static_cast<int64_t>(swa_layers.size()) != n_layer)
      return invalid_argument("swa_layers names " + std::to_string(swa_layers.size()) + " layers, the model has " +
                              std::to_string(n_layer));
    if (swa_layers.find_first_not_of("SG") != std::string::npos)
      return invalid_argument("swa_layers holds a letter other than S and G");
  }
  if (ffn_act != "silu" && ffn_act != "gelu" && ffn_act != "swiglu_oai" && ffn_act != "relu2")
    return invalid_argument("ffn_act '" + ffn_act + "' is not silu, gelu, swiglu_oai or relu2");
  if (!rank_input.empty() && rank_input != "cls" && rank_input != "last" && rank_input != "mean")
    return invalid_argument("rank_input '" + rank_input + "' is not cls, last or mean");
  if (n_cls_out < 0) return invalid_argument("n_cls_out must be >= 0");
  if (n_expert < 0 || n_expert_used < 0 || n_expert_used > n_expert || (n_expert > 0 && n_expert_used == 0))
    return invalid_argument("expert counts " + std::to_string(n_expert_used) + " of " + std::to_string(n_expert) +
                            " are not 0 < used <= experts");
  if (!std::isfinite(expert_weights_scale) || expert_weights_scale <= 0.0)
    return invalid_argument("expert_weights_scale must be positive");
  if (!layer_kinds.empty()) {
    if (static_cast<int64_t>(layer_kinds.size()) != n_layer)
      return invalid_argument("layer_kinds names " + std::to_string(layer_kinds.size()) + " layers, the model has " +
                              std::to_string(n_layer));
    if (layer_kinds.find_first_not_of("ARCMF") != std::string::npos)
      return invalid_argument("layer_kinds holds a letter other than A, R, C, M and F");
    const int kinds = (layer_kinds.find('R') != std::string::npos) + has_short_conv() + has_mamba2();
    if (kinds > 1)
      return invalid_argument("layer_kinds mixes recurrent layer kinds (one state shape per model)");
  }
  if (has_short_conv()) {
    CACHET_RETURN_IF_ERROR(positive(ssm_conv_kernel, "ssm_conv_kernel"));
  } else if (has_mamba2()) {
    CACHET_RETURN_IF_ERROR(positive(ssm_conv_kernel, "ssm_conv_kernel"));
    CACHET_RETURN_IF_ERROR(positive(ssm_head_dim, "ssm_head_dim"));
    CACHET_RETURN_IF_ERROR(positive(ssm_v_heads, "ssm_v_heads"));
    CACHET_RETURN_IF_ERROR(positive(ssm_state_size, "ssm_state_size"));
    CACHET_RETURN_IF_ERROR(positive(ssm_groups, "ssm_groups"));
    if (ssm_v_heads % ssm_groups != 0)
      return invalid_argument("Mamba-2: " + std::to_string(ssm_groups) + " groups do not divide " +
                              std::to_string(ssm_v_heads) + " heads");
  } else if (n_recurrent_layers() > 0) {
    CACHET_RETURN_IF_ERROR(positive(ssm_conv_kernel, "ssm_conv_kernel"));
    CACHET_RETURN_IF_ERROR(positive(ssm_head_dim, "ssm_head_dim"));
    CACHET_RETURN_IF_ERROR(positive(ssm_k_heads, "ssm_k_heads"));
    CACHET_RETURN_IF_ERROR(positive(ssm_v_heads, "ssm_v_heads"));
    if (ssm_v_heads % ssm_k_heads != 0)
      return invalid_argument("gated delta net: " + std::to_string(ssm_k_heads) + " key heads do not divide " +
                              std::to_string(ssm_v_heads) + " value heads");
  }
  if (n_ff_shared < 0) return invalid_argument("n_ff_shared must be >= 0");
  if (head_dim_swa < 0 || n_head_kv_swa < 0 || rope_dim_swa < 0 || n_embd_per_layer < 0)
    return invalid_argument("head_dim_swa, n_head_kv_swa, rope_dim_swa and n_embd_per_layer must be >= 0");
  for (int64_t l = 0; l < n_layer; ++l) {
    if (!attends(l)) continue;
    const int64_t hd = head_dim_at(l), kvh = kv_heads_at(l), rd = rope_dim_at(l);
    if (hd % 2 != 0 || n_head % kvh != 0 || rd % 2 != 0 || rd > hd)
      return invalid_argument("layer " + std::to_string(l) + ": head width " + std::to_string(hd) + ", " +
                              std::to_string(kvh) + " KV heads and " + std::to_string(rd) +
                              " rotated dims do not fit its " + std::to_string(n_head) + " heads");
  }
  if (kv_shared_layers < 0 || kv_shared_layers >= n_layer)
    return invalid_argument("kv_shared_layers must be in 0..n_layer - 1");
  for (int64_t l = n_layer - kv_shared_layers; l < n_layer; ++l) {
    const int64_t src = kv_source(l);
    if (src < 0 || kv_dim_at(src) != kv_dim_at(l) || head_dim_at(src) != head_dim_at(l))
      return invalid_argument("shared-KV layer " + std::to_string(l) + " has no earlier layer of its kind and shape");
  }
  if (expert_gating != "softmax" && expert_gating != "sigmoid")
    return invalid_argument("expert_gating must be softmax or sigmoid, is " + expert_gating);
  if (n_expert_groups < 1 || n_expert_groups_used < 1 || n_expert_groups_used > n_expert_groups ||
      (n_expert_groups > 1 && (n_expert % n_expert_groups != 0 || n_expert / n_expert_groups < 2 ||
                               n_expert_used > n_expert_groups_used * (n_expert / n_expert_groups))))
    return invalid_argument("expert groups: " + std::to_string(n_expert_groups_used) + " of " +
                            std::to_string(n_expert_groups) + " groups do not fit " + std::to_string(n_expert) +
                            " experts, " + std::to_string(n_expert_used) + " used");
  if (is_mla()) {
    if (n_head_kv != 1 || head_dim != kv_lora_rank + rope_dim || mla_k_dim <= rope_dim || mla_v_dim <= 0 ||
        q_lora_rank < 0 || !layer_kinds.empty() || sliding_window > 0 || kv_shared_layers > 0)
      return invalid_argument("MLA: one KV head of kv_lora_rank + rope_dim (" + std::to_string(kv_lora_rank) + " + " +
                              std::to_string(rope_dim) + "), got " + std::to_string(n_head_kv) + " of " +
                              std::to_string(head_dim) + "; the decompressed key head (" + std::to_string(mla_k_dim) +
                              ") wider than its rotated part, a value head, no other layer kinds");
  }
  if (n_dense_lead < 0 || n_dense_lead > n_layer || n_ff_dense < 0)
    return invalid_argument("n_dense_lead must be in 0..n_layer and n_ff_dense >= 0");
  return Status::ok();
}

int64_t ModelConfig::n_recurrent_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layer; ++l) n += is_recurrent(l);
  return n;
}

int64_t ModelConfig::n_kv_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layer; ++l) n += has_own_kv(l);
  return n;
}

int64_t ModelConfig::kv_source(int64_t l) const {
  if (!attends(l) || has_own_kv(l)) return l;
  int64_t src = n_layer - kv_shared_layers - 1;  // the last earlier layer of its kind with KV of its own
  while (src >= 0 && (is_swa(src) != is_swa(l) || !has_own_kv(src))) --src;
  return src;
}

int ModelConfig::kv_layer(int64_t l) const {
  if (const int64_t src = kv_source(l); src >= 0) l = src;
  int k = 0;
  for (int64_t i = 0; i < l; ++i) k += has_own_kv(i);
  return k;
}

int64_t ModelConfig::kv_dim_of_kv_layer(int kl) const {
  for (int64_t l = 0; l < n_layer; ++l)
    if (has_own_kv(l) && kl-- == 0) return kv_dim_at(l);
  return kv_dim();
}

int64_t ModelConfig::kv_bytes_per_token(int64_t elem_bytes) const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layer; ++l)
    if (has_own_kv(l)) n += (v_in_k() ? 1 : 2) * kv_dim_at(l) * elem_bytes;
  return n;
}

int64_t ModelConfig::max_q_dim() const {
  int64_t m = q_dim();
  for (int64_t l = 0; l < n_layer; ++l) m = std::max(m, q_dim_at(l));
  return m;
}

int64_t ModelConfig::max_kv_dim() const {
  int64_t m = kv_dim();
  for (int64_t l = 0; l < n_layer; ++l) m = std::max(m, kv_dim_at(l));
  return m;
}

float ModelConfig::query_scale(int64_t l) const {
  if (attn_scale > 0.0) return static_cast<float>(attn_scale);
  if (is_mla()) {
    // The decompressed heads' scale, times mscale^2 (llama.cpp's deepseek2 graph): mscale = the attention factor
    // RoPE's cos / sin get under YaRN (the file's, times 1 + 0.1 ln(1/fs) unless yarn_log_multiplier is given;
    // without YaRN the file's times 1 + 0.1 ln(1/fs)), times 1 + 0.1 yarn_log_multiplier ln(1/fs).
    const float ls = std::log(1.0f / static_cast<float>(rope_freq_scale));
    const float yarn = rope_yarn_log_mul != 0.0 || rope_freq_scale >= 1.0 ? 1.0f : 1.0f + 0.1f * ls;
    const float org = static_cast<float>(rope_attn_factor) * (rope_yarn_ext_factor != 0.0 ? yarn : 1.0f + 0.1f * ls);
    const float m = org * (1.0f + 0.1f * static_cast<float>(rope_yarn_log_mul) * ls);
    return m * m / std::sqrt(static_cast<float>(mla_k_dim));
  }
  return 1.0f / std::sqrt(static_cast<float>(head_dim_at(l)));
}

float ModelConfig::attn_temperature(int32_t pos) const {
  if (attn_temp_scale == 0.0) return 1.0f;
  const double steps = std::floor(static_cast<double>(pos) / static_cast<double>(attn_temp_floor));
  return static_cast<float>(std::log(steps + 1.0) * attn_temp_scale + 1.0);
}

std::string ModelConfig::to_string() const {
  std::ostringstream os;
#define CACHET_PRINT_FIELD(type, name, def, desc) os << "  " #name " = " << std::boolalpha << name << "  (" desc ")\n";
  CACHET_MODEL_CONFIG_FIELDS(CACHET_PRINT_FIELD)
#undef CACHET_PRINT_FIELD
  return os.str();
}

bool ModelConfig::operator==(const ModelConfig& o) const {
#define CACHET_EQ_FIELD(type, name, def, desc) \
  if (!(name == o.name)) return false;
  CACHET_MODEL_CONFIG_FIELDS(CACHET_EQ_FIELD)
#undef CACHET_EQ_FIELD
  return true;
}

}  // namespace cachet
