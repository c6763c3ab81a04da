// llama2.c checkpoints (Karpathy's `run.c` format): a header of seven int32 fields
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means the
// classifier is stored separately), then f32 weights in that format's fixed order. Memory-mapped.
#pragma once

#include <memory>
#include <string>

#include "cachet/status.h"
#include "model/model.h"

namespace cachet {

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

// True when the file's size matches the size its header implies (how load_model recognizes the format).
bool looks_like_llama2c(const uint8_t* data, size_t size);

Result<std::unique_ptr<Model>> load_llama2c(const std::string& path, std::shared_ptr<ThreadPool> pool,
                                           const LoadOptions& opts);

}  // namespace cachet
