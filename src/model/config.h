// ModelConfig: the hyper-parameters of a decoder-only transformer, read once from a model file.
// The field list below is the single source of truth: it drives printing and equality.
#pragma once

#include <cstdint>
#include <string>

#include "cachet/status.h"

namespace cachet {

class GgufFile;

// X(type, name, description)
#define CACHET_MODEL_CONFIG_FIELDS(X)                                        \
  X(std::string, arch, "architecture")                                       \
  X(int64_t, n_vocab, "vocabulary size")                                     \
  X(int64_t, n_ctx_train, "training context length")                         \
  X(int64_t, n_embd, "model width (d_model)")                                \
  X(int64_t, n_layer, "transformer blocks")                                  \
  X(int64_t, n_head, "query heads")                                          \
  X(int64_t, n_head_kv, "key/value heads (GQA when < n_head)")               \
  X(int64_t, head_dim, "width of one head")                                  \
  X(int64_t, n_ff, "feed-forward hidden width")                              \
  X(int64_t, rope_dim, "rotated dims per head")                              \
  X(double, rope_theta, "RoPE base frequency")                               \
  X(bool, rope_neox, "NeoX rotation (pairs i, i+d/2) instead of interleaved") \
  X(double, rms_eps, "RMSNorm epsilon")                                      \
  X(bool, tied_output, "output head shares the token embedding")

struct ModelConfig {
#define CACHET_DECLARE_FIELD(type, name, desc) type name{};
  CACHET_MODEL_CONFIG_FIELDS(CACHET_DECLARE_FIELD)
#undef CACHET_DECLARE_FIELD

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  // Bytes of K and V for one token across all layers, for a cache element size.
  int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * n_layer * kv_dim() * elem_bytes; }

  // Checks every field for sanity (non-zero sizes, heads dividing the width, ...).
  Status validate() const;
  std::string to_string() const;
  bool operator==(const ModelConfig& o) const;
};

// Reads the Llama-family hyper-parameters `{arch}.*` of a GGUF file (before tensor shapes are checked).
Result<ModelConfig> llama_config_from_gguf(const GgufFile& f, const std::string& arch);

}  // namespace cachet
