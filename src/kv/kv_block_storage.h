// KvBlockStorage: the K and V memory of a cache, per layer [n_blocks, block_size, n_head_kv * head_dim] in the
// cache's K / V types; for a model that reads V from K's rows (MLA, ModelConfig::v_in_k) only K, and a V row is
// its K row. A token's rows live in one slot, block * block_size + offset; a sequence's positions
// map to slots through its block table (kv/kv_view.h). The paged cache is one storage of many blocks shared
// by every sequence; a contiguous cache is a storage of one block as long as its capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "kv/kv_types.h"

namespace cachet {

struct ModelConfig;
using BlockId = int32_t;

// Copy-on-write of a shared block: the first n_tokens slots of src go to dst, every layer's K and V. The
// block manager records these; the model makes them before the step that needs them (ForwardBatch::copies).
struct KvBlockCopy {
  BlockId src = 0, dst = 0;
  int n_tokens = 0;
  bool operator==(const KvBlockCopy& o) const { return src == o.src && dst == o.dst && n_tokens == o.n_tokens; }
};

// A process-unique number for each storage, never reused (tensor parallelism names storages by it).
uint64_t next_kv_storage_id();

class KvBlockStorage {
 public:
  KvBlockStorage(const ModelConfig& cfg, int n_blocks, int block_size, KvTypes types);
  KvTypes types() const { return types_; }
  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int64_t n_slots() const { return static_cast<int64_t>(n_blocks_) * block_size_; }
  int n_layers() const { return static_cast<int>(k_.size()); }
  uint64_t id() const { return id_; }
  // Bytes of one position's K / V in a layer (layers may differ: Gemma 4's global layers are wider).
  size_t k_row_bytes(int layer) const { return k_row_bytes_[layer]; }
  size_t v_row_bytes(int layer) const { return v_row_bytes_[layer]; }
  uint8_t* k_slot(int layer, int64_t slot) { return k_[layer].data() + static_cast<size_t>(slot) * k_row_bytes_[layer]; }
  uint8_t* v_slot(int layer, int64_t slot) {
    return v_in_k_ ? k_slot(layer, slot) : v_[layer].data() + static_cast<size_t>(slot) * v_row_bytes_[layer];
  }
  const uint8_t* k_slot(int layer, int64_t slot) const {
    return k_[layer].data() + static_cast<size_t>(slot) * k_row_bytes_[layer];
  }
  const uint8_t* v_slot(int layer, int64_t slot) const {
    return v_in_k_ ? k_slot(layer, slot) : v_[layer].data() + static_cast<size_t>(slot) * v_row_bytes_[layer];
  }
  // Whether V rows are K's (nothing of their own stored or copied).
  bool v_in_k() const { return v_in_k_; }
  uint8_t* k(int layer, BlockId b, int offset) { return k_slot(layer, static_cast<int64_t>(b) * block_size_ + offset); }
  uint8_t* v(int layer, BlockId b, int offset) { return v_slot(layer, static_cast<int64_t>(b) * block_size_ + offset); }
  void copy_block(const KvBlockCopy& c);
  size_t total_bytes() const;

 private:
  KvTypes types_;
  int block_size_;
  int n_blocks_;
  uint64_t id_ = next_kv_storage_id();
  bool v_in_k_ = false;
  std::vector<size_t> k_row_bytes_, v_row_bytes_;  // per layer
  std::vector<AlignedBuffer<uint8_t>> k_, v_;  // per layer: (n_blocks, block_size, kv_dim) in the K / V type
};

}  // namespace cachet
