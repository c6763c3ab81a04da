// The Llama family: token embedding, RMSNorm, RoPE, GQA attention, SwiGLU FFN, tied or separate head.
#pragma once

#include <memory>
#include <vector>

#include "base/aligned_buffer.h"
#include "model/model.h"

namespace cachet {

struct LlamaLayerWeights {
  TensorView attn_norm;  // [n_embd] f32
  TensorView wq;         // [n_embd, n_head * head_dim]
  TensorView wk;         // [n_embd, n_head_kv * head_dim]
  TensorView wv;         // [n_embd, n_head_kv * head_dim]
  TensorView wo;         // [n_head * head_dim, n_embd]
  TensorView ffn_norm;   // [n_embd] f32
  TensorView w_gate;     // [n_embd, n_ff]
  TensorView w_up;       // [n_embd, n_ff]
  TensorView w_down;     // [n_ff, n_embd]
};

struct LlamaWeights {
  TensorView tok_embd;     // [n_embd, n_vocab]
  TensorView output_norm;  // [n_embd] f32
  TensorView output;       // [n_embd, n_vocab]; equals tok_embd when tied
  std::vector<LlamaLayerWeights> layers;
};

// Checks every weight's shape and type against the config; 1-D norm weights stored as F16/BF16 are
// converted to f32 into `owned`.
Status validate_llama_weights(const ModelConfig& cfg, LlamaWeights* w, std::vector<AlignedBuffer<float>>* owned);

// Builds a Llama model over weights that live in `storage` (kept alive by the model).
Result<std::unique_ptr<Model>> make_llama_model(ModelConfig cfg, LlamaWeights weights,
                                                std::vector<TensorView> all_tensors, SpecialTokens special,
                                                std::shared_ptr<void> storage, std::unique_ptr<GgufFile> gguf,
                                                std::shared_ptr<ThreadPool> pool, const LoadOptions& opts);

void register_llama_arch();

}  // namespace cachet
