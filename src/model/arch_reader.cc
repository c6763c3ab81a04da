#include "model/arch_reader.h"

#include <algorithm>
#include <functional>
#include <cmath>

#include "io/gguf.h"
#include "model/rope_scaling.h"

namespace cachet {

namespace {

// `{arch}.*` keys that do not change what a forward pass computes.
const std::set<std::string>& harmless_keys() {
  static const std::set<std::string> k = {
      "context_length",                      // read, informational (cachet sizes its cache from flags)
      "vocab_size",                          // checked against the embedding
      "tensor_data_layout",                  // how the converter ordered Q/K rows; the tensors are what they are
      "rope.scaling.finetuned",              // informational
  };
  return k;
}

}  // namespace

TensorView view_of_tensor(const GgufTensorInfo* ti) {
  TensorView v;
  if (!ti) return v;
  v.name = ti->name;
  v.type = ti->type;
  v.ne = ti->ne;
  v.data = ti->data;
  v.row_bytes = *row_bytes(ti->type, ti->ne[0]);
  return v;
}

bool ArchReader::has(const std::string& key) const { return f_.find(arch_ + "." + key) != nullptr; }

Result<int64_t> ArchReader::dim(const std::string& key, std::optional<int64_t> fallback) {
  const std::string k = arch_ + "." + key;
  keys_read_.insert(k);
  if (!f_.find(k)) {
    if (fallback) return *fallback;
    return not_found("missing metadata key '" + k + "'");
  }
  CACHET_ASSIGN_OR_RETURN(uint64_t v, f_.get_uint(k));
  if (v > (uint64_t{1} << 31)) return invalid_argument("metadata '" + k + "' = " + std::to_string(v) +
                                                       " is not a plausible size");
  return static_cast<int64_t>(v);
}

Result<double> ArchReader::real(const std::string& key, std::optional<double> fallback) {
  const std::string k = arch_ + "." + key;
  keys_read_.insert(k);
  if (!f_.find(k)) {
    if (fallback) return *fallback;
    return not_found("missing metadata key '" + k + "'");
  }
  CACHET_ASSIGN_OR_RETURN(double v, f_.get_float(k));
  if (!std::isfinite(v)) return invalid_argument("metadata '" + k + "' is not a finite number");
  return v;
}

Result<std::string> ArchReader::text(const std::string& key, std::optional<std::string> fallback) {
  const std::string k = arch_ + "." + key;
  keys_read_.insert(k);
  if (!f_.find(k)) {
    if (fallback) return *fallback;
    return not_found("missing metadata key '" + k + "'");
  }
  return f_.get_string(k);
}

TensorView ArchReader::tensor(const std::string& name) {
  tensors_read_.insert(name);
  return view_of_tensor(f_.find_tensor(name));
}

Result<ModelConfig> ArchReader::base_config() {
  ModelConfig c;
  c.arch = arch_;
  auto positive = [&](const std::string& key, std::optional<int64_t> fallback) -> Result<int64_t> {
    CACHET_ASSIGN_OR_RETURN(int64_t v, dim(key, fallback));
    if (v <= 0) return invalid_argument("metadata '" + arch_ + "." + key + "' must be positive");
    return v;
  };
  CACHET_ASSIGN_OR_RETURN(c.n_embd, positive("embedding_length", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_layer, positive("block_count", std::nullopt));
  if (const GgufValue* v = f_.find(arch_ + ".feed_forward_length"); v && v->type == GgufType::kArray) {
    keys_read_.insert(arch_ + ".feed_forward_length");
    if (!gguf_type_is_integer(v->elem_type) || static_cast<int64_t>(v->count) != c.n_layer)
      return invalid_argument(arch_ + ".feed_forward_length must hold one integer per layer");
    // (0: a layer without an FFN, Nemotron-H's mixers; n_ff is the first FFN's width.)
    for (size_t i = 0; i < v->count; ++i) {
      if (v->int_at(i) < 0 || v->int_at(i) > (int64_t{1} << 31))
        return invalid_argument(arch_ + ".feed_forward_length holds a negative width");
      ff_per_layer_.push_back(v->int_at(i));
      if (c.n_ff == 0) c.n_ff = v->int_at(i);
    }
    if (c.n_ff == 0) return invalid_argument(arch_ + ".feed_forward_length gives no layer an FFN");
  } else {
    CACHET_ASSIGN_OR_RETURN(c.n_ff, positive("feed_forward_length", std::nullopt));
  }
  CACHET_ASSIGN_OR_RETURN(c.n_head, positive("attention.head_count", std::nullopt));
  if (const GgufValue* v = f_.find(arch_ + ".attention.head_count_kv"); v && v->type == GgufType::kArray) {
    // One count per layer (LFM2: 0 where a layer does not attend). The attending layers must agree; an
    // architecture that has layers without attention reads them (kv_heads_per_layer), else finish() refuses.
    keys_read_.insert(arch_ + ".attention.head_count_kv");
    if (!gguf_type_is_integer(v->elem_type) || static_cast<int64_t>(v->count) != c.n_layer)
      return invalid_argument(arch_ + ".attention.head_count_kv must hold one integer per layer");
    for (size_t i = 0; i < v->count; ++i) {
      const int64_t n = v->int_at(i);
      if (n < 0 || n > c.n_head) return invalid_argument(arch_ + ".attention.head_count_kv holds " + std::to_string(n));
      if (n > 0 && c.n_head_kv > 0 && n != c.n_head_kv) kv_heads_differ_ = true;
      if (n > 0 && c.n_head_kv == 0) c.n_head_kv = n;
      kv_heads_per_layer_.push_back(n);
    }
    if (c.n_head_kv <= 0) return invalid_argument(arch_ + ".attention.head_count_kv has no attending layer");
  } else {
    CACHET_ASSIGN_OR_RETURN(c.n_head_kv, positive("attention.head_count_kv", c.n_head));
  }
  if (c.n_embd % c.n_head != 0 && !has("attention.key_length"))
    return invalid_argument("n_head " + std::to_string(c.n_head) + " does not divide n_embd " +
                            std::to_string(c.n_embd) + " and attention.key_length is not given");
  CACHET_ASSIGN_OR_RETURN(c.head_dim, positive("attention.key_length", c.n_embd / c.n_head));
  CACHET_ASSIGN_OR_RETURN(int64_t value_len, positive("attention.value_length", c.head_dim));
  value_len_ = value_len;
  value_len_differs_ = value_len != c.head_dim;
  CACHET_ASSIGN_OR_RETURN(c.rope_dim, positive("rope.dimension_count", c.head_dim));
  CACHET_ASSIGN_OR_RETURN(c.n_ctx_train, positive("context_length", int64_t{4096}));
  CACHET_ASSIGN_OR_RETURN(c.rope_theta, real("rope.freq_base", 10000.0));
  CACHET_ASSIGN_OR_RETURN(c.rms_eps, real("attention.layer_norm_rms_epsilon", 1e-5));
  CACHET_ASSIGN_OR_RETURN(c.attn_scale, real("attention.scale", 0.0));
  // An embedding model's pooling of its final hidden states (llama.cpp's enum: 0 none .. 4 rank).
  // A file without the key names none (an embedding request must ask for one); 0 is "none": per-token states.
  if (has("pooling_type")) {
    CACHET_ASSIGN_OR_RETURN(int64_t pooling, dim("pooling_type"));
    static const char* const kPoolings[] = {"none", "mean", "cls", "last", "rank"};
    if (pooling < 0 || pooling > 4)
      return invalid_argument(arch_ + ".pooling_type " + std::to_string(pooling) + " is not one of 0..4");
    c.pooling = kPoolings[pooling];
  }

  // RoPE scaling (model/rope_scaling.h): linear and YaRN, for the layers that use the base frequency.
  CACHET_ASSIGN_OR_RETURN(std::string scaling, text("rope.scaling.type", std::string("none")));
  CACHET_ASSIGN_OR_RETURN(double factor, real("rope.scaling.factor", 0.0));
  CACHET_ASSIGN_OR_RETURN(double legacy_linear, real("rope.scale_linear", 0.0));
  CACHET_ASSIGN_OR_RETURN(c.rope_attn_factor, real("rope.scaling.attn_factor", 1.0));
  CACHET_ASSIGN_OR_RETURN(c.rope_yarn_orig_ctx, dim("rope.scaling.original_context_length", c.n_ctx_train));
  CACHET_ASSIGN_OR_RETURN(c.rope_yarn_beta_fast, real("rope.scaling.yarn_beta_fast", 32.0));
  CACHET_ASSIGN_OR_RETURN(c.rope_yarn_beta_slow, real("rope.scaling.yarn_beta_slow", 1.0));
  CACHET_ASSIGN_OR_RETURN(double log_mul, real("rope.scaling.yarn_log_multiplier", 0.0));
  if (!(c.rope_attn_factor > 0.0)) return invalid_argument(arch_ + ".rope.scaling.attn_factor must be positive");
  if (scaling == "linear" || (scaling == "none" && legacy_linear > 0.0 && !has("rope.scaling.type"))) {
    const double f = scaling == "linear" ? (factor == 0.0 ? 1.0 : factor) : legacy_linear;
    if (!(f > 0.0)) return invalid_argument(arch_ + ".rope.scaling.factor must be positive for linear scaling");
    c.rope_scaling = "linear";
    c.rope_freq_scale = 1.0 / f;
  } else if (scaling == "yarn") {
    if (!(factor > 0.0)) return invalid_argument(arch_ + ".rope.scaling.factor must be positive for YaRN");
    set_yarn(&c, factor, c.rope_attn_factor, log_mul);
    CACHET_ASSIGN_OR_RETURN(c.rope_yarn_ext_factor, real("rope.scaling.yarn_ext_factor", 1.0));
  } else if (scaling != "none") {
    return unimplemented(arch_ + ".rope.scaling.type '" + scaling + "' is not supported (none, linear, yarn)");
  } else if (factor != 0.0 && factor != 1.0) {
    return unimplemented(arch_ + ".rope.scaling.factor " + std::to_string(factor) +
                         " without a scaling type is not understood");
  }

  // GGUF "llama" weights are stored for the interleaved rotation; files written from HF-layout weights
  // without the Q/K permutation say so with cachet.rope.neox (docs/decisions.md). Architectures whose
  // rotation is NeoX set it themselves.
  if (f_.find("cachet.rope.neox")) {
    CACHET_ASSIGN_OR_RETURN(c.rope_neox, f_.get_bool("cachet.rope.neox"));
  }
  const GgufTensorInfo* emb = f_.find_tensor("token_embd.weight");
  if (!emb) return not_found("missing tensor 'token_embd.weight'");
  c.n_vocab = emb->ne[1];
  if (has("vocab_size")) {
    CACHET_ASSIGN_OR_RETURN(int64_t nv, dim("vocab_size"));
    if (nv != c.n_vocab)
      return invalid_argument(arch_ + ".vocab_size " + std::to_string(nv) + " does not match token_embd rows " +
                              std::to_string(c.n_vocab));
  }
  c.tied_output = f_.find_tensor("output.weight") == nullptr;
  return c;
}

Status ArchReader::experts(ModelConfig* c, const char* expert_ff_key) {
  CACHET_ASSIGN_OR_RETURN(c->n_expert, dim("expert_count", int64_t{0}));
  CACHET_ASSIGN_OR_RETURN(c->n_expert_used, dim("expert_used_count", int64_t{0}));
  CACHET_ASSIGN_OR_RETURN(double scale, real("expert_weights_scale", 0.0));
  c->expert_weights_scale = scale == 0.0 ? 1.0 : scale;
  if (c->n_expert > 0 && expert_ff_key) {
    CACHET_ASSIGN_OR_RETURN(c->n_ff, dim(expert_ff_key, c->n_ff));
  }
  return Status::ok();
}

Status ArchReader::expert_groups(ModelConfig* c) {
  CACHET_ASSIGN_OR_RETURN(c->n_expert_groups, dim("expert_group_count", int64_t{1}));
  CACHET_ASSIGN_OR_RETURN(c->n_expert_groups_used, dim("expert_group_used_count", c->n_expert_groups));
  if (c->n_expert_groups == 0) c->n_expert_groups = 1;  // (0: not set)
  if (c->n_expert_groups_used == 0) c->n_expert_groups_used = c->n_expert_groups;
  return Status::ok();
}

Status ArchReader::mrope_sections(ModelConfig* c, bool required) {
  const std::string sk = arch_ + ".rope.dimension_sections";
  consume("rope.dimension_sections");
  const GgufValue* v = f_.find(sk);
  if (!v) return required ? invalid_argument("a " + arch_ + " file without " + sk) : Status::ok();
  if (v->type != GgufType::kArray || v->count < 3 || v->count > 4 || !gguf_type_is_integer(v->elem_type))
    return invalid_argument(sk + " must hold 3 or 4 integers");
  int64_t sec[4] = {0, 0, 0, 0}, sum = 0;
  for (size_t i = 0; i < v->count; ++i) sum += sec[i] = v->int_at(i);
  if (sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[3] < 0 || 2 * sum > c->rope_dim)
    return invalid_argument(sk + " covers more pairs than rope.dimension_count has");
  c->rope_sections = std::to_string(sec[0]) + "," + std::to_string(sec[1]) + "," + std::to_string(sec[2]) + "," +
                     std::to_string(sec[3]);
  return Status::ok();
}

Status ArchReader::mamba2(ModelConfig* c) {
  CACHET_ASSIGN_OR_RETURN(c->ssm_conv_kernel, dim("ssm.conv_kernel"));
  CACHET_ASSIGN_OR_RETURN(c->ssm_state_size, dim("ssm.state_size"));
  CACHET_ASSIGN_OR_RETURN(c->ssm_groups, dim("ssm.group_count"));
  CACHET_ASSIGN_OR_RETURN(c->ssm_v_heads, dim("ssm.time_step_rank"));
  CACHET_ASSIGN_OR_RETURN(int64_t inner, dim("ssm.inner_size"));
  const std::string a = arch_ + ".";
  if (c->ssm_conv_kernel < 1 || c->ssm_state_size <= 0)
    return invalid_argument(a + "ssm.conv_kernel and ssm.state_size must be positive");
  if (c->ssm_v_heads <= 0 || inner <= 0 || inner % c->ssm_v_heads != 0)
    return invalid_argument(a + "ssm.inner_size " + std::to_string(inner) + " is not a multiple of ssm.time_step_rank");
  if (c->ssm_groups <= 0 || c->ssm_v_heads % c->ssm_groups != 0)
    return invalid_argument(a + "ssm.group_count must divide ssm.time_step_rank (the heads)");
  c->ssm_head_dim = inner / c->ssm_v_heads;
  return Status::ok();
}

Result<std::string> ArchReader::swa_layers(int64_t n_layer, int64_t default_period, bool dense_first) {
  const std::string k = arch_ + ".attention.sliding_window_pattern";
  keys_read_.insert(k);
  std::string layers(n_layer, 'S');
  const GgufValue* v = f_.find(k);
  if (v && v->type == GgufType::kArray) {
    if (static_cast<int64_t>(v->count) != n_layer || v->elem_type != GgufType::kBool)
      return invalid_argument(k + " must hold one bool per layer (" + std::to_string(n_layer) + ")");
    for (int64_t l = 0; l < n_layer; ++l) layers[l] = v->int_at(l) ? 'S' : 'G';
    return layers;
  }
  int64_t period = default_period;
  if (v) {
    CACHET_ASSIGN_OR_RETURN(uint64_t p, f_.get_uint(k));
    if (p > static_cast<uint64_t>(n_layer) + 1) return invalid_argument(k + " is larger than the layer count");
    period = static_cast<int64_t>(p);
  }
  if (period > 1)
    for (int64_t l = 0; l < n_layer; ++l)
      layers[l] = (dense_first ? l % period != 0 : l % period < period - 1) ? 'S' : 'G';
  return layers;
}

Status ArchReader::finish() const {
  const std::string prefix = arch_ + ".";
  if (!kv_layers_taken_ && std::find(kv_heads_per_layer_.begin(), kv_heads_per_layer_.end(), 0) != kv_heads_per_layer_.end())
    return unimplemented(arch_ + ".attention.head_count_kv gives layers without attention, which cachet's " + arch_ +
                         " architecture does not have; the file is refused");
  if (!kv_heads_differ_ok_ && kv_heads_differ_)
    return unimplemented(arch_ + ".attention.head_count_kv differs between layers, which cachet's " + arch_ +
                         " architecture does not apply; the file is refused");
  if (!ff_layers_taken_ && std::adjacent_find(ff_per_layer_.begin(), ff_per_layer_.end(), std::not_equal_to<>()) !=
                               ff_per_layer_.end())
    return unimplemented(arch_ + ".feed_forward_length differs between layers, which cachet's " + arch_ +
                         " architecture does not apply; the file is refused");
  if (value_len_differs_ && !value_len_taken_)
    return unimplemented(arch_ + ".attention.value_length " + std::to_string(value_len_) +
                         " differs from key_length, which cachet's " + arch_ + " architecture does not apply");
  for (const std::string& k : f_.keys()) {
    if (k.compare(0, prefix.size(), prefix) != 0 || keys_read_.count(k)) continue;
    if (harmless_keys().count(k.substr(prefix.size()))) continue;
    return unimplemented("metadata key '" + k + "' is not understood by cachet's " + arch_ +
                         " architecture; it may change the model's math, so the file is refused");
  }
  for (const auto& t : f_.tensors()) {
    if (tensors_read_.count(t.name)) continue;
    return unimplemented("tensor '" + t.name + "' is not used by cachet's " + arch_ +
                         " architecture; it may change the model's math, so the file is refused");
  }
  return Status::ok();
}

}  // namespace cachet
