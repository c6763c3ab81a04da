// The short causal depthwise conv both hybrid families run before their mixers (Qwen3.5's gated delta nets over
// q | k | v with SiLU after it; LFM2's short convs over B * x, without): channel c of a token becomes
//   y = sum_{j < K-1} window[c][j] * taps[c][j] + x[c] * taps[c][K-1]
// where window[c] holds the channel's last K - 1 inputs of its sequence (oldest first), the sequence's state in
// its StateStore slot. Each sequence's tokens walk the window in position order, so a prompt at once, in chunks
// or token by token gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "kv/state_store.h"

namespace cachet {

// What every recurrent layer reads of a forward batch (gated delta nets, short convs): the tokens' positions and
// sequences, each sequence's state slot in the store, the layer's index among the recurrent layers, and the
// slots that also take the state after a token (checkpoints, speculation's snapshots).
struct RecurrentBatch {
  int n_tokens = 0;
  const int32_t* positions = nullptr;  // [n_tokens]
  const int32_t* seq_index = nullptr;  // [n_tokens]
  const StateSlot* slots = nullptr;    // [n_seqs] each sequence's state slot
  int n_seqs = 0;
  StateStore* store = nullptr;
  int layer = 0;                       // among the recurrent layers
  const StateSlot* snapshot = nullptr;  // [n_tokens] or null: -1, or a slot that also takes the state after it
};

struct CausalConvArgs {
  const std::vector<std::vector<int>>* toks = nullptr;  // per sequence: its batch rows in position order
  const StateSlot* slots = nullptr;                      // per sequence: its state slot
  StateStore* store = nullptr;
  int layer = 0;                                         // among the recurrent layers
  int64_t channels = 0, kernel = 0;
  const float* taps = nullptr;                           // [channels, kernel], oldest first
  float* x = nullptr;                                    // row t at x + t * stride: in, replaced by the conv
  int64_t stride = 0;
  const float* bias = nullptr;                           // [channels] or null: added to each output (Mamba-2)
  bool silu = false;                                     // SiLU of each output (after the bias)
  const StateSlot* snapshot = nullptr;                   // [n_tokens] or null: a slot taking the window after it
};

void causal_conv(ThreadPool& pool, const CausalConvArgs& a);

// The gates' softplus (f32, libm's exp and log1p: the same bits on every table). SiLU is the tables' (Kernels::
// causal_conv and silu_mul).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// A sequence's batch rows `ts` (position order) in runs a recurrence kernel takes at once: consecutive rows, a run
// ending at a row whose state is snapshotted. fn(first row, number of rows) for each run, in order.
template <typename Fn>
void for_each_state_run(const std::vector<int>& ts, const StateSlot* snapshot, Fn&& fn) {
  for (size_t i0 = 0; i0 < ts.size();) {
    size_t i1 = i0 + 1;
    while (i1 < ts.size() && ts[i1] == ts[i1 - 1] + 1 && !(snapshot && snapshot[ts[i1 - 1]] >= 0)) ++i1;
    fn(ts[i0], static_cast<int>(i1 - i0));
    i0 = i1;
  }
}

// Per sequence of a batch, its rows in order; the layer's state (window and matrix) of each sequence whose first
// row here is at position 0 is zeroed first (a sequence that starts, or starts over).
std::vector<std::vector<int>> rows_by_sequence(const RecurrentBatch& b);

}  // namespace cachet
