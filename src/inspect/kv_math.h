// KV cache memory arithmetic, exact in bytes: what one token, one sequence and one batch cost, what paging
// (fixed blocks) and KV quantization change, and how many sequences fit beside the weights in a budget.
#pragma once

#include <cstdint>
#include <string>

#include "kv/kv_type.h"

namespace cachet {

struct KvShape {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  KvType k = KvType::kF16, v = KvType::kF16;  // kv/kv_type.h (blocks of 32 along each head's vector)
  // Hybrid models: n_layer counts the attention layers only; each sequence also holds this many bytes of
  // recurrent state (conv windows and delta-net matrices, f32), whatever its length.
  int64_t state_bytes_per_sequence = 0;
  // A second kind of layer with heads of its own (Gemma 4's sliding-window layers: more, narrower KV heads):
  // n_layer_b more layers of n_head_kv_b x head_dim_b.
  int64_t n_layer_b = 0, n_head_kv_b = 0, head_dim_b = 0;
  // V read from K's rows (MLA: the one KV head holds the latent and the rotated key; V is the latent): K only.
  bool v_in_k = false;
};

struct KvMath {
  int64_t bytes_per_token;    // K and V, all layers
  int64_t bytes_per_sequence;  // contiguous, at `context` tokens (plus a hybrid model's recurrent state)
  int64_t bytes_per_batch;
  int64_t paged_bytes_per_sequence;  // ceil(context / block) blocks
  int64_t paged_waste_bytes;         // slots allocated but holding no token (last block's tail)
  int64_t max_sequences;             // in (budget - weights), contiguous at `context`; -1 without a budget
  int64_t max_sequences_paged;
};

// Errors (as a message) when a size is not positive or the dtype cannot hold head_dim values.
std::string kv_math(const KvShape& s, int64_t context, int64_t batch, int64_t block_size, int64_t budget_bytes,
                    int64_t weight_bytes, KvMath* out);

// "1.28 GiB (1374389534 bytes)"-style rendering in binary units.
std::string format_bytes(int64_t bytes);

}  // namespace cachet
