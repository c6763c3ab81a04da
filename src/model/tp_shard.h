// Tensor parallelism as the model sees it (seed 000, 13.5): each of `size` processes holds a shard of every
// layer. Q/K/V are cut by whole KV groups (a KV head and the query heads that read it) and gate/up by FFN
// columns: rows of the stored [n_in, n_out] matrices, so views, no copy. Then two ways on:
// - reduce (Megatron's): the attention output and FFN down matrices are cut by the matching input columns
//   (copied, whole quant blocks); each rank's product is a partial sum, and one all-reduce after each gives
//   every rank the full residual stream. Two collectives per layer; the sums' order differs from one rank's,
//   so results agree with --tp 1 within float rounding - and on the int8-activation path a rounding flip
//   in a later layer's activation quantization can grow to ~1e-3 of the logits (docs/tensor_parallel.md).
// - exact (the default): every matmul output is computed whole by one rank with the same kernel as --tp 1:
//   the attention output and the gated FFN activations are all-gathered, the output and down matrices cut by
//   output rows, and their slices all-gathered. Four collectives per layer, no extra arithmetic, and the
//   logits are bitwise those of --tp 1 (batch and thread-count invariance carry over).
// MoE layers always use reduce (their experts are cut by FFN column). The head is cut by vocabulary rows in
// both modes (each logit a whole dot product; rank 0 gathers them). Norms and the embedding are replicated. The transport is not here: the model calls TpReducer (dist/ has the MPI one).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/aligned_buffer.h"
#include "cachet/status.h"
#include "model/config.h"

namespace cachet {

struct DecoderWeights;

class TpReducer {
 public:
  virtual ~TpReducer() = default;
  // Sums x[0..n) over every rank in place; every rank gets the same bits.
  virtual void sum(float* x, int64_t n) = 0;
  // Row t of `full` ([T, sum of widths]) becomes the concatenation, in rank order, of row t of every rank's
  // `mine` ([T, widths[rank]]).
  // root_only: only rank 0 receives (`full` is unused elsewhere).
  virtual void gather(const float* mine, int64_t T, const std::vector<int64_t>& widths, float* full,
                      bool root_only = false) = 0;
};

struct TpOptions {
  int rank = 0;
  int size = 1;  // 1: no tensor parallelism
  bool exact = true;
  std::shared_ptr<TpReducer> reducer;
};

// What the forward pass needs to know of every rank's shard (exact mode's gathers).
struct TpLayout {
  bool exact = false;
  std::vector<int64_t> q_widths, ff_widths, d_widths;  // per rank: query columns, FFN columns, output rows
  std::vector<int64_t> v_widths;                       // per rank: rows of the head (vocabulary entries)
  int64_t q_full = 0, ff_full = 0;
};

// This rank's share of the heads and of the FFN width. KV heads (with their query heads) and FFN columns, in
// units of `ff_unit`, go out as evenly as they divide; lower ranks take the remainder.
struct TpSplit {
  int64_t kv_head0 = 0, kv_head1 = 0;  // KV heads [kv_head0, kv_head1)
  int64_t ff0 = 0, ff1 = 0;            // FFN columns [ff0, ff1)
  int64_t d0 = 0, d1 = 0;              // exact: output rows [d0, d1) of the attention output and FFN down
  int64_t v0 = 0, v1 = 0;              // rows [v0, v1) of the head: logits of these vocabulary entries
};
Result<TpSplit> tp_split(const ModelConfig& cfg, int rank, int size, int64_t ff_unit);

// Cuts the validated full weights down to this rank's shard and `cfg` to the shard's shape (n_head,
// n_head_kv and n_ff become the local counts). Column cuts are copied into `owned`. An error names the
// tensor and the reason when a cut would split a quant block or a rank would get no KV head.
Status shard_decoder_weights(const TpOptions& tp, ModelConfig* cfg, DecoderWeights* w,
                             std::vector<AlignedBuffer<uint8_t>>* owned, TpLayout* layout);

}  // namespace cachet
