// Multi-head latent attention (DeepSeek-V2 / V3, Kimi K2, GLM-4.7-Flash: llama.cpp's `deepseek2`), absorbed:
// each token's KV is one latent c = norm(W_kv_a x)[:kv_lora_rank] and one rotated key part k_pe shared by every
// head, cached together as the one KV head's row [c | k_pe]. A query head's no-RoPE part is taken into the latent
// space through its key decompression (q_abs = W_k_b[h] q_nope), so that q.k = [q_abs | q_pe] . [c | k_pe]: MQA
// over the cached rows, with V = c read from the same rows (KvBlockStorage::v_in_k). Each head's output, a
// weighted sum of latents, is decompressed by its W_v_b[h] into a value head; the decoder then applies attn_output.
// Scores are scaled as the decompressed heads' (1 / sqrt(mla_k_dim), times YaRN's mscale^2: ModelConfig::attn_scale).
#pragma once

#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "cachet/status.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/forward_batch.h"
#include "model/trace.h"

namespace cachet {

class ArchReader;

// Layer l's MLA tensors (attn_q or attn_q_a / attn_q_a_norm / attn_q_b, attn_kv_a_mqa, attn_kv_a_norm, attn_k_b,
// attn_v_b) into L; a file with only the fused attn_kv_b (converted before llama.cpp split it) is refused.
Status read_mla_weights(ArchReader& r, const ModelConfig& c, int64_t l, DecoderLayerWeights* L);
// Their shapes against the config; the norms as f32 (kept in `owned`).
Status validate_mla_weights(const ModelConfig& c, DecoderLayerWeights* L, std::vector<AlignedBuffer<float>>* owned,
                            int64_t l);

class MlaAttention {
 public:
  // Room for batches of n_tokens.
  void reserve(const ModelConfig& c, int n_tokens);
  // Layer l (KV layer kl) on xn [T, n_embd] into out [T, n_head * mla_v_dim] (attn_output's input): writes the
  // batch's latents into the cache, attends over each token's sequence (views: the batch's sequences), and
  // decompresses. cos_sin: the batch's RoPE table [T, rope_dim]. Ops reported to `tracer` when not null.
  void run(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L, const ForwardBatch& batch,
           const KvView* views, int kl, const float* cos_sin, const float* xn, float* out, Tracer* tracer);

 private:
  AlignedBuffer<float> qa_;    // [T, q_lora_rank] the compressed query
  AlignedBuffer<float> q_;     // [T, n_head, mla_k_dim] the decompressed query: q_nope | q_pe per head
  AlignedBuffer<float> kv_;    // [T, kv_lora_rank + rope_dim] the latent | k_pe: the cache's row
  AlignedBuffer<float> pe_;    // [T, n_head, rope_dim] rotated parts, turned together
  AlignedBuffer<float> qabs_;  // [T, n_head, kv_lora_rank + rope_dim] the absorbed query: q_abs | q_pe
  AlignedBuffer<float> att_;   // [T, n_head, kv_lora_rank + rope_dim] attention output (the latent part used)
  AlignedBuffer<float> hin_;   // [T, max(nope, kv_lora_rank, rope_dim)] one head's input to its decompression
  AlignedBuffer<float> hout_;  // [T, max(kv_lora_rank, mla_v_dim)] its output
};

}  // namespace cachet
