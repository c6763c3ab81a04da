// The KV cache as the model sees it: per sequence, a place to write each new token's K and V rows, and
// contiguous runs ("spans") of cached positions to attend over. The contiguous single-user cache here and
// the paged cache (block tables) both implement it, so the model never knows which one it runs against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/dtype.h"
#include "cachet/status.h"
#include "kv/kv_type.h"

namespace cachet {

struct ModelConfig;

// The element types of a cache's K and of its V (kv/kv_type.h). From one DType: both the same.
struct KvTypes {
  KvType k = KvType::kF16, v = KvType::kF16;
  KvTypes() = default;
  KvTypes(KvType kv) : k(kv), v(kv) {}                         // NOLINT: one type for both
  KvTypes(DType t) : k(kv_type_of(t)), v(k) {}                 // NOLINT: f32 / f16 / bf16 for both
  KvTypes(KvType kt, KvType vt) : k(kt), v(vt) {}
  bool operator==(const KvTypes& o) const { return k == o.k && v == o.v; }
  // Bytes of K and V for one position of one layer, kv_dim values each.
  size_t row_bytes(int64_t kv_dim) const { return kv_row_bytes(k, kv_dim) + kv_row_bytes(v, kv_dim); }
};

// Positions [pos0, pos0 + n) of one layer, stored as rows k_stride / v_stride bytes apart; each row holds the
// n_head_kv * head_dim values of one position in the cache's K / V type.
struct KvSpan {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t k_stride = 0, v_stride = 0;
  int pos0 = 0;
  int n = 0;
};

class KvBlockStorage;

// A process-unique number for each K/V storage (a contiguous cache, a paged pool), never reused.
uint64_t next_kv_storage_id();

class KvSequence {
 public:
  // How a process holding another shard of every layer (tensor parallelism, dist/) finds the same rows in its
  // own cache: the storage's id and shape, and this sequence's blocks in position order (a contiguous cache
  // is one block of its capacity). `paged` is the pool when there is one (its copies must be mirrored too).
  struct Mirror {
    uint64_t storage_id = 0;
    int n_blocks = 0, block_size = 0;
    const std::vector<int32_t>* blocks = nullptr;
    KvBlockStorage* paged = nullptr;
  };
  virtual ~KvSequence() = default;
  // Empty for a view that cannot be mirrored (a test's or an inspection tool's own wrapper).
  virtual std::optional<Mirror> mirror() const { return std::nullopt; }
  virtual KvTypes types() const = 0;
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
  ContiguousKvCache(const ModelConfig& cfg, int capacity, KvTypes types);

  KvTypes types() const override { return types_; }
  int capacity() const override { return capacity_; }
  uint8_t* k_row(int layer, int pos) override { return k_[layer].data() + pos * k_row_bytes_; }
  uint8_t* v_row(int layer, int pos) override { return v_[layer].data() + pos * v_row_bytes_; }
  int span_len() const override { return capacity_; }
  KvSpan span(int layer, int index, int n_positions) const override;
  std::optional<Mirror> mirror() const override;

  size_t total_bytes() const { return k_.size() * (k_row_bytes_ + v_row_bytes_) * capacity_; }

 private:
  KvTypes types_;
  int capacity_;
  uint64_t id_ = next_kv_storage_id();
  size_t k_row_bytes_, v_row_bytes_;
  std::vector<AlignedBuffer<uint8_t>> k_;  // per layer: (capacity, kv_dim) in dtype_
  std::vector<AlignedBuffer<uint8_t>> v_;  // per layer: (capacity, kv_dim) in dtype_
};

// OK when the model's head size is a whole number of each type's blocks (a block never straddles heads).
Status kv_types_fit(const ModelConfig& cfg, KvTypes t);

}  // namespace cachet
