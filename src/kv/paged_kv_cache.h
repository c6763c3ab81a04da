// The paged KV cache: K and V storage for every block, per layer [n_blocks, block_size, n_head_kv * head_dim],
// and PagedKvSequence, one sequence's view through its block table (what the model sees, as KvSequence).
#pragma once

#include "base/aligned_buffer.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_manager.h"

namespace cachet {

class KvBlockStorage {
 public:
  KvBlockStorage(const ModelConfig& cfg, int n_blocks, int block_size, KvTypes types);
  KvTypes types() const { return types_; }
  int block_size() const { return block_size_; }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  uint8_t* k(int layer, BlockId b, int offset) {
    return k_[layer].data() + (static_cast<size_t>(b) * block_size_ + offset) * k_row_bytes_;
  }
  uint8_t* v(int layer, BlockId b, int offset) {
    return v_[layer].data() + (static_cast<size_t>(b) * block_size_ + offset) * v_row_bytes_;
  }
  int n_blocks() const { return n_blocks_; }
  uint64_t id() const { return id_; }
  // Copies the first n token slots of block src to block dst, every layer (copy-on-write).
  void copy_block(BlockId src, BlockId dst, int n_tokens);
  // Told of every copy_block after it happens (tensor parallelism mirrors them on the other ranks).
  void set_copy_observer(std::function<void(BlockId, BlockId, int)> f) { copy_observer_ = std::move(f); }
  size_t total_bytes() const { return k_.size() * (k_[0].size() + v_[0].size()); }

 private:
  KvTypes types_;
  int block_size_;
  int n_blocks_;
  uint64_t id_ = next_kv_storage_id();
  size_t k_row_bytes_, v_row_bytes_;
  std::vector<AlignedBuffer<uint8_t>> k_, v_;  // per layer: (n_blocks, block_size, kv_dim) in the K / V type
  std::function<void(BlockId, BlockId, int)> copy_observer_;
};

class PagedKvSequence final : public KvSequence {
 public:
  PagedKvSequence(KvBlockStorage& storage, const KvCacheManager& manager, SeqId seq)
      : storage_(storage), manager_(manager), seq_(seq) {}
  KvTypes types() const override { return storage_.types(); }
  int capacity() const override { return static_cast<int>(manager_.block_table(seq_).size()) * storage_.block_size(); }
  uint8_t* k_row(int layer, int pos) override;
  uint8_t* v_row(int layer, int pos) override;
  int span_len() const override { return storage_.block_size(); }
  KvSpan span(int layer, int index, int n_positions) const override;
  std::optional<Mirror> mirror() const override {
    return Mirror{storage_.id(), storage_.n_blocks(), storage_.block_size(), &manager_.block_table(seq_), &storage_};
  }

 private:
  KvBlockStorage& storage_;
  const KvCacheManager& manager_;
  SeqId seq_;
};

}  // namespace cachet
