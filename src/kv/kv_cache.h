// The KV cache as the model sees it: per sequence, a place to write each new token's K and V rows, and
// contiguous runs ("spans") of cached positions to attend over. The contiguous single-user cache here and
// the paged cache (block tables) both implement it, so the model never knows which one it runs against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/dtype.h"
#include "cachet/status.h"

namespace cachet {

struct ModelConfig;

// Positions [pos0, pos0 + n) of one layer, stored as rows `stride` bytes apart; each row holds the
// n_head_kv * head_dim values of one position.
struct KvSpan {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t stride = 0;
  int pos0 = 0;
  int n = 0;
};

class KvSequence {
 public:
  virtual ~KvSequence() = default;
  virtual DType dtype() const = 0;
  // Largest position + 1 this sequence can hold.
  virtual int capacity() const = 0;
  // Where the K / V row of `layer` at `pos` lives (pos < capacity()).
  virtual uint8_t* k_row(int layer, int pos) = 0;
  virtual uint8_t* v_row(int layer, int pos) = 0;
  // Positions per span (the block size; the capacity for a contiguous cache).
  virtual int span_len() const = 0;
  // The span holding positions [index * span_len(), ...) of `layer`, cut at n_positions.
  virtual KvSpan span(int layer, int index, int n_positions) const = 0;
};

// One preallocated buffer per layer for K and for V: [capacity, n_head_kv * head_dim] each.
class ContiguousKvCache final : public KvSequence {
 public:
  ContiguousKvCache(const ModelConfig& cfg, int capacity, DType dtype);

  DType dtype() const override { return dtype_; }
  int capacity() const override { return capacity_; }
  uint8_t* k_row(int layer, int pos) override { return k_[layer].data() + pos * row_bytes_; }
  uint8_t* v_row(int layer, int pos) override { return v_[layer].data() + pos * row_bytes_; }
  int span_len() const override { return capacity_; }
  KvSpan span(int layer, int index, int n_positions) const override;

  size_t row_bytes() const { return row_bytes_; }
  size_t total_bytes() const { return 2 * k_.size() * row_bytes_ * capacity_; }

 private:
  DType dtype_;
  int capacity_;
  size_t row_bytes_;
  std::vector<AlignedBuffer<uint8_t>> k_;  // per layer: (capacity, kv_dim) in dtype_
  std::vector<AlignedBuffer<uint8_t>> v_;  // per layer: (capacity, kv_dim) in dtype_
};

}  // namespace cachet
