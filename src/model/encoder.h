// The bidirectional encoder of BERT-family embedding and reranking models (bert: BGE, MiniLM, E5; nomic-bert
// and its mixture of experts; modern-bert): token embedding (plus token-type row 0 and absolute position rows when the file has them),
// LayerNorm, then per layer attention over the whole input (biases optional, RoPE or not, a centred sliding
// window on some layers) and a feed-forward block (GELU, or gated GELU / SiLU), each either post-norm (BERT:
// LayerNorm after the residual add) or pre-norm (ModernBERT: LayerNorm before, a final norm at the end).
// A reranker's classifier head (cls, cls.norm, cls.output) runs on the pooled state (Model::pooled_head).
// Which of these a model does is decided by the config and the weights present, never by its name.
#pragma once

#include <memory>
#include <vector>

#include "model/model.h"

namespace cachet {

class ArchReader;

struct EncoderLayerWeights {
  TensorView attn_norm;                    // pre-norm LayerNorm before attention (optional; modern-bert)
  TensorView wq, wk, wv;                   // [n_embd, n_embd] (views into attn_qkv when fused)
  TensorView bq, bk, bv;                   // optional biases
  TensorView wo, bo;                       // [n_embd, n_embd], optional bias
  TensorView attn_out_norm, attn_out_norm_b;  // post-norm after the attention residual (bert, nomic-bert)
  TensorView ffn_norm;                     // pre-norm LayerNorm before the FFN (modern-bert)
  TensorView w_gate;                       // optional: a gated FFN (view into ffn_up when fused gate|up)
  TensorView w_up, b_up;                   // [n_embd, n_ff], optional bias
  TensorView w_down, b_down;               // [n_ff, n_embd], optional bias
  TensorView out_norm, out_norm_b;         // post-norm after the FFN residual (bert, nomic-bert)
  // A mixture-of-experts FFN instead (nomic-bert-moe, every moe_every_n_layers-th layer from layer 1): a
  // softmax router, the top n_expert_used experts' ungated GELU FFNs, weighted, not renormalized.
  TensorView router;                       // [n_embd, n_expert]
  std::vector<TensorView> up_exps, down_exps;
};

struct EncoderWeights {
  TensorView tok_embd;                 // [n_embd, n_vocab]
  TensorView type_embd;                // optional [n_embd, n_types]: row 0 added to every token
  TensorView pos_embd;                 // optional [n_embd, n_ctx_train]: absolute positions (bert)
  TensorView embd_norm, embd_norm_b;   // LayerNorm of the embeddings (bias optional)
  TensorView output_norm;              // optional final LayerNorm (pre-norm encoders)
  TensorView cls, cls_b;               // optional classifier dense layer [n_embd, n_embd] ...
  TensorView cls_norm;                 // ... its LayerNorm (modern-bert) ...
  TensorView cls_out, cls_out_b;       // ... and the output layer [n_embd, n_cls_out]
  std::vector<EncoderLayerWeights> layers;
};

// How an encoder's file spells its parts (the arch files: bert.cc).
struct EncoderSpec {
  bool rope = false;              // rotary positions (NeoX) instead of position embeddings
  bool gelu_classifier = false;   // the classifier's activation: GELU (modern-bert) rather than tanh
};

// Reads an encoder's weights by llama.cpp's tensor names, validates them against cfg, and builds the model.
Result<std::unique_ptr<Model>> load_encoder(ArchReader& r, ModelConfig cfg, const EncoderSpec& spec,
                                            std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                            const LoadOptions& opts);

}  // namespace cachet
