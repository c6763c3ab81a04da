// A hybrid model's recurrent mixers, from a layer's normed input to its output projection: gated delta nets
// (Qwen3.5 / Qwen3-Next, model/gated_delta_net.h), short convs (LFM2, model/short_conv.h) and Mamba-2
// (Granite 4.0-H, model/mamba2.h). Owns their activations; the decoder calls it for each recurrent layer.
#pragma once

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "model/causal_conv.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/trace.h"

namespace cachet {

class RecurrentMixer {
 public:
  // Room for batches of n_tokens.
  void reserve(const ModelConfig& c, int n_tokens);
  // Layer l's mixer on xn [T, n_embd] into proj [T, n_embd]; b: the batch as this recurrent layer reads it;
  // its ops reported to `tracer` when not null.
  void run(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L, const RecurrentBatch& b,
           const float* xn, float* proj, Tracer* tracer);

 private:
  void gated_delta(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L, const RecurrentBatch& b,
                   const float* xn, float* proj, Tracer* tracer);
  void short_conv(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L, const RecurrentBatch& b,
                  const float* xn, float* proj, Tracer* tracer);
  void mamba2(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L, const RecurrentBatch& b,
              const float* xn, float* proj, Tracer* tracer);

  AlignedBuffer<float> qkv_;    // [n_tokens, conv_dim] gated delta net: q | k | v
  AlignedBuffer<float> z_;      // [n_tokens, value_dim] its output gate
  AlignedBuffer<float> beta_;   // [n_tokens, v_heads]
  AlignedBuffer<float> alpha_;  // [n_tokens, v_heads]
  AlignedBuffer<float> o_;      // [n_tokens, value_dim] the mixer's output before the projection (every kind)
  AlignedBuffer<float> bcx_;    // [n_tokens, 3 n_embd] short conv: B | C | x
  AlignedBuffer<float> zxbcdt_;  // [n_tokens, 2 d_inner + 2 groups state + heads] Mamba-2's input projection
};

}  // namespace cachet
