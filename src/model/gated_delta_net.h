// The gated delta net (Qwen3.5 / Qwen3-Next linear attention) after its input projections: a short causal conv
// with SiLU over q | k | v, L2-normalised q and k, the decay and beta gates, the delta-rule update of each value
// head's d x d state, and the gated RMSNorm of the output. Per sequence the tokens run in position order through
// the state in its StateStore slot, so a prompt in chunks, at once or token by token gives the same bits.
//
//   per token, per value head h (key head h % k_heads as Qwen3.5's files lay them out, h / (v/k) in Qwen3-Next's):
//     x      = silu(conv(window of qkv))            q, k <- q, k / sqrt(|.|^2 + eps);  q <- q / sqrt(d)
//     decay  = exp(softplus(alpha + dt_bias) * a)   (a = -exp(A_log), stored negative)
//     beta   = sigmoid(beta_raw)
//     S      = decay * S;  S += k (beta (v - S^T k))^T;  o = S^T q        (S: [d_k, d_v])
//     out    = rms_norm(o) * norm * silu(z)
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kv/state_store.h"
#include "model/causal_conv.h"

namespace cachet {

struct GatedDeltaNetArgs : RecurrentBatch {
  int64_t head_dim = 0, k_heads = 0, v_heads = 0, conv_kernel = 0;
  bool grouped_heads = false;            // value head h reads key head h / (v/k) (else h % k)
  float eps = 1e-6f;
  const float* conv_w = nullptr;         // [conv_dim, conv_kernel] taps, oldest first
  const float* dt_bias = nullptr;        // [v_heads]
  const float* a = nullptr;              // [v_heads]
  const float* norm = nullptr;           // [head_dim]
  float* qkv = nullptr;                  // [n_tokens, conv_dim] in: projections; clobbered
  const float* z = nullptr;              // [n_tokens, v_heads * head_dim] output gate
  const float* beta = nullptr;           // [n_tokens, v_heads] before the sigmoid
  const float* alpha = nullptr;          // [n_tokens, v_heads] before softplus
  float* out = nullptr;                  // [n_tokens, v_heads * head_dim]
};

void gated_delta_net(ThreadPool& pool, const GatedDeltaNetArgs& a);

}  // namespace cachet
