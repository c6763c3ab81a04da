// Mixture of experts (Mixtral, Qwen3-MoE): a softmax router picks each token's top-k experts; the layer's
// output is the weighted sum of those experts' gated FFNs. The routing is a pure function, tested without a
// model; the expert FFN groups a batch's tokens per expert, so each expert's weights are read once per step.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "model/ops.h"
#include "model/tensor.h"

namespace cachet {

struct MoeRouting {
  int n_tokens = 0;
  int k = 0;
  std::vector<int32_t> expert;  // [n_tokens, k]: chosen experts, highest probability first
  std::vector<float> weight;    // [n_tokens, k]: their weights
};

// logits: [n_tokens, n_expert] router outputs. Per token: p = softmax(logits) (f32, max subtracted), or with
// `sigmoid` each expert's sigmoid(logit) (LFM2-MoE, DeepSeek-V3); the k largest p + select_bias (a per-expert
// selection bias that does not weigh: [n_expert] or null; ties: the lower expert index first), their p
// renormalized to sum 1 when `renormalize` (the sum clamped below at 2^-14, as llama.cpp), then times `scale`.
// Group-limited (DeepSeek-V3): with n_groups > 1 the experts are n_groups consecutive groups, each scored by the
// sum of its two best selection scores; only the experts of the groups_used best groups (ties: the lower group)
// are chosen from. Depends on nothing but the token's own logits.
MoeRouting route_experts(const float* logits, int n_tokens, int n_expert, int k, bool renormalize, float scale,
                         bool sigmoid = false, const float* select_bias = nullptr, int n_groups = 1,
                         int groups_used = 1);

struct MoeWeights {
  const std::vector<TensorView>* gate;  // n_expert of [n_embd, n_ff]; nullptr: ungated experts (nomic-bert-moe)
  const std::vector<TensorView>* up;    // n_expert of [n_embd, n_ff]
  const std::vector<TensorView>* down;  // n_expert of [n_ff, n_embd]
  Glu act = Glu::kSilu;                 // the gate's activation
  // Per-expert biases (gpt-oss), each [n_expert, width] f32 or null: of the gate and up outputs (n_ff wide) and
  // of the down projection's (n_embd).
  const float* gate_b = nullptr;
  const float* up_b = nullptr;
  const float* down_b = nullptr;
};

// out[t] = sum over token t's experts j, in routing order, of weight_j * down_j(act(gate_j x_t) * up_j x_t)
// (ungated: down_j(act(up_j x_t))), each projection plus its bias where there are biases.
// x, out: [n_tokens, n_embd]. Each expert runs once on the rows of every token routed to it; a token's result
// is bitwise the same whatever else shares its batch.
void moe_ffn(ThreadPool& pool, const MoeWeights& w, const MoeRouting& r, const float* x, int64_t n_embd,
             int64_t n_ff, float* out);

}  // namespace cachet
