#include "model/config.h"

#include <cmath>
#include <sstream>

#include "io/gguf.h"

namespace cachet {

namespace {

Result<int64_t> get_dim(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback) {
  if (!f.find(key)) {
    if (fallback) return *fallback;
    return not_found("missing metadata key '" + key + "'");
  }
  CACHET_ASSIGN_OR_RETURN(uint64_t v, f.get_uint(key));
  if (v == 0 || v > (uint64_t{1} << 31)) return invalid_argument("metadata '" + key + "' = " + std::to_string(v) +
                                                                 " is not a plausible size");
  return static_cast<int64_t>(v);
}

}  // namespace

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
  return Status::ok();
}

std::string ModelConfig::to_string() const {
  std::ostringstream os;
#define CACHET_PRINT_FIELD(type, name, desc) os << "  " #name " = " << std::boolalpha << name << "  (" desc ")\n";
  CACHET_MODEL_CONFIG_FIELDS(CACHET_PRINT_FIELD)
#undef CACHET_PRINT_FIELD
  return os.str();
}

bool ModelConfig::operator==(const ModelConfig& o) const {
#define CACHET_EQ_FIELD(type, name, desc) \
  if (!(name == o.name)) return false;
  CACHET_MODEL_CONFIG_FIELDS(CACHET_EQ_FIELD)
#undef CACHET_EQ_FIELD
  return true;
}

Result<ModelConfig> llama_config_from_gguf(const GgufFile& f, const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  const std::string p = arch + ".";
  CACHET_ASSIGN_OR_RETURN(c.n_embd, get_dim(f, p + "embedding_length", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_layer, get_dim(f, p + "block_count", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_ff, get_dim(f, p + "feed_forward_length", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_head, get_dim(f, p + "attention.head_count", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_head_kv, get_dim(f, p + "attention.head_count_kv", c.n_head));
  if (c.n_embd % c.n_head != 0 && !f.find(p + "attention.key_length"))
    return invalid_argument("n_head " + std::to_string(c.n_head) + " does not divide n_embd " +
                            std::to_string(c.n_embd) + " and attention.key_length is not given");
  CACHET_ASSIGN_OR_RETURN(c.head_dim, get_dim(f, p + "attention.key_length", c.n_embd / c.n_head));
  if (f.find(p + "attention.value_length")) {
    CACHET_ASSIGN_OR_RETURN(int64_t vl, get_dim(f, p + "attention.value_length", std::nullopt));
    if (vl != c.head_dim) return unimplemented("attention.value_length != key_length is not supported");
  }
  CACHET_ASSIGN_OR_RETURN(c.rope_dim, get_dim(f, p + "rope.dimension_count", c.head_dim));
  CACHET_ASSIGN_OR_RETURN(c.n_ctx_train, get_dim(f, p + "context_length", int64_t{4096}));
  c.rope_theta = 10000.0;
  if (f.find(p + "rope.freq_base")) {
    CACHET_ASSIGN_OR_RETURN(c.rope_theta, f.get_float(p + "rope.freq_base"));
  }
  c.rms_eps = 1e-5;
  if (f.find(p + "attention.layer_norm_rms_epsilon")) {
    CACHET_ASSIGN_OR_RETURN(c.rms_eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  }
  // GGUF "llama" weights are stored for the interleaved rotation; files written from HF-layout weights
  // without the Q/K permutation say so with cachet.rope.neox (docs/decisions.md).
  c.rope_neox = false;
  if (f.find("cachet.rope.neox")) {
    CACHET_ASSIGN_OR_RETURN(c.rope_neox, f.get_bool("cachet.rope.neox"));
  }
  if (f.find(p + "rope.scaling.type")) {
    CACHET_ASSIGN_OR_RETURN(std::string st, f.get_string(p + "rope.scaling.type"));
    if (st != "none") return unimplemented("RoPE scaling '" + st + "' is not supported yet");
  }
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return not_found("missing tensor 'token_embd.weight'");
  c.n_vocab = emb->ne[1];
  if (f.find(p + "vocab_size")) {
    CACHET_ASSIGN_OR_RETURN(int64_t nv, get_dim(f, p + "vocab_size", std::nullopt));
    if (nv != c.n_vocab)
      return invalid_argument(p + "vocab_size " + std::to_string(nv) + " does not match token_embd rows " +
                              std::to_string(c.n_vocab));
  }
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  CACHET_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace cachet
