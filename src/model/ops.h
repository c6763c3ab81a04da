// The transformer's building blocks over row-major f32 activations, parallel on a ThreadPool and calling
// the kernel table for the hot loops. Shapes in comments: [rows, cols].
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "kv/kv_view.h"
#include "model/rope_scaling.h"
#include "model/tensor.h"

namespace cachet {

// y[t] = x[t] / rms(x[t]) * w, for t < n_rows; x, y: [n_rows, n]; w: [n] (f32) or null (no weight). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int n_rows, int64_t n, float eps);

// y[t] = (x[t] - mean(x[t])) / sqrt(var(x[t]) + eps) * w + b, for t < n_rows; b may be null. y may alias x.
void layer_norm(const float* x, const float* w, const float* b, float* y, int n_rows, int64_t n, float eps);


// One K or V row of n values into the cache as type t: f32 / f16 through the kernel table, the others through
// kv_quantize_row (portable, the same bits on every CPU).
void kv_store(KvType t, const float* src, uint8_t* dst, int64_t n, int head_dim);

// g[i] = silu(g[i]) * u[i]; g, u: [n]
void silu_mul(float* g, const float* u, int64_t n);
// g[i] = gelu(g[i]) * u[i] (tanh approximation); g, u: [n]
void gelu_mul(float* g, const float* u, int64_t n);
// gpt-oss's clamped SwiGLU: with x = min(g[i], 7) and y = clamp(u[i], -7, 7), g[i] = x sigmoid(1.702 x) (y + 1),
// computed as silu(1.702 x) (y + 1) / 1.702 on the kernel's silu (u is overwritten); g, u: [n]
void swiglu_oai_mul(float* g, float* u, int64_t n);
// The gated activations, by ModelConfig::ffn_act ("silu", "gelu", "swiglu_oai").
// kRelu2: g = max(g, 0)^2 * u (Nemotron-H's FFNs are not gated: their up projection in g, ones in u).
enum class Glu { kSilu, kGelu, kSwigluOai, kRelu2 };
Glu glu_of(const std::string& ffn_act);
// g[i] = act(g[i]) * u[i] (kSwigluOai overwrites u).
void glu_mul(Glu act, float* g, float* u, int64_t n);
// x[t] += b for t < n_rows; x: [n_rows, n], b: [n].
void add_bias(float* x, const float* b, int n_rows, int64_t n);
// x[i] = c * tanh(x[i] / c); x: [n].
void softcap(float* x, int64_t n, float c);

// Repacks a Q4_0 / Q4_1 / Q8_0 matmul weight for the integer path into `storage` (no-op for other types).
void pack_weight(ThreadPool& pool, TensorView* w, AlignedBuffer<uint8_t>* storage);

// Y = X W^T: X [n_tokens, K] f32, W a weight [K, N] in any computable type, Y [n_tokens, N].
// Bitwise independent of n_tokens (see the reduction contract in kernels/kernels.h).
void matmul(ThreadPool& pool, const TensorView& w, const float* x, int n_tokens, float* y);

// Matmuls so far (process-wide) over a weight of a type the loader repacks that ran unpacked: the slow path, which a
// model loaded without --precise never takes (tests hold every architecture to it).
int64_t unpacked_matmuls();

// Several matmuls of the same input (Q, K and V; gate and up): Y_i = X W_i^T. When every weight is packed,
// X is quantized once and one parallel region covers all their row groups (fewer synchronizations, better
// balance); each output is bitwise what matmul() gives.
struct MatmulOut {
  const TensorView* w;
  float* y;
};
void matmul_multi(ThreadPool& pool, std::initializer_list<MatmulOut> outs, const float* x, int n_tokens);

// Attention for a batch (causal unless `ends` is given). q: [n_tokens, n_head * head_dim] (already rotated);
// out: [n_tokens, n_head * head_dim]. Token t attends to positions [0, positions[t]] of seqs[seq_index[t]]
// in layer `layer` (with a window w > 0: positions (positions[t] - w, positions[t]]). Scores are
// scale * q.k, soft-capped when softcap != 0.
struct AttentionArgs {
  const float* q;
  float* out;
  int n_tokens;
  const int32_t* positions;
  const int32_t* seq_index;
  const KvView* seqs;  // [n_seqs]
  int layer;
  int n_head;
  int n_head_kv;
  int head_dim;
  float scale = 0.0f;  // 0: 1/sqrt(head_dim)
  int window = 0;
  float softcap = 0.0f;
  // Bidirectional attention (an encoder): token t attends up to position ends[t] (its sequence's last position
  // in the batch, whose K and V are written before attention) instead of positions[t]. nullptr: causal.
  const int32_t* ends = nullptr;
  // The window is centred on the token: positions within window / 2 either side (EmbeddingGemma's local layers).
  bool symmetric_window = false;
  // Attention sinks (gpt-oss): [n_head] learned logits, one more term of each head's softmax with no value, so the
  // weights of the positions sum to less than 1. nullptr: none.
  const float* sinks = nullptr;
};
void attention(ThreadPool& pool, const AttentionArgs& a);

}  // namespace cachet
