// The contiguous single-sequence cache: one storage of one block as long as its capacity, for the reference
// loop (--no-kv-cache's counterpart), perplexity, logits dumps and tests. The model sees it, like a paged
// sequence, as a KvView. A hybrid model's sequence also keeps its recurrent state here (one StateStore slot).
#pragma once

#include <vector>

#include "kv/kv_block_storage.h"
#include "kv/kv_types.h"
#include "kv/kv_view.h"
#include "kv/state_store.h"

namespace cachet {

class ContiguousKvCache {
 public:
  ContiguousKvCache(const ModelConfig& cfg, int capacity, KvTypes types);

  KvTypes types() const { return storage_.types(); }
  int capacity() const { return storage_.block_size(); }
  KvBlockStorage& storage() { return storage_; }
  const std::vector<BlockId>& blocks() const { return kOneBlock; }
  KvView view() const { return {&storage_, kOneBlock}; }
  uint8_t* k_row(int layer, int pos) { return storage_.k_slot(layer, pos); }
  uint8_t* v_row(int layer, int pos) { return storage_.v_slot(layer, pos); }
  size_t total_bytes() const { return storage_.total_bytes() + static_cast<size_t>(state_.total_bytes()); }
  // The sequence's recurrent state (hybrid models; a store of zero-width layers otherwise), in slot 0.
  StateStore& state() { return state_; }

 private:
  static const std::vector<BlockId> kOneBlock;
  KvBlockStorage storage_;
  StateStore state_;
};

}  // namespace cachet
