// KvView: one sequence's cached positions as the model reads them: its blocks of a storage, in position order
// (position p is slot blocks[p / block_size] * block_size + p % block_size). Plain data: a paged sequence's
// block table, a contiguous cache's one block, or another rank's copy of either (tensor parallelism).
#pragma once

#include <cstdint>
#include <span>

#include "kv/kv_block_storage.h"

namespace cachet {

// Positions [pos0, pos0 + n) of one layer, stored as rows k_stride / v_stride bytes apart; each row holds the
// n_head_kv * head_dim values of one position in the cache's K / V type.
struct KvSpan {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t k_stride = 0, v_stride = 0;
  int pos0 = 0;
  int n = 0;
};

struct KvView {
  const KvBlockStorage* storage = nullptr;
  std::span<const BlockId> blocks;

  KvTypes types() const { return storage->types(); }
  // Largest position + 1 the view can hold.
  int capacity() const { return static_cast<int>(blocks.size()) * storage->block_size(); }
  // Positions per span (a block).
  int span_len() const { return storage->block_size(); }
  int64_t slot(int pos) const {
    const int bs = storage->block_size();
    return static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs;
  }
  const uint8_t* k_row(int layer, int pos) const { return storage->k_slot(layer, slot(pos)); }
  const uint8_t* v_row(int layer, int pos) const { return storage->v_slot(layer, slot(pos)); }
  // The span holding positions [index * span_len(), ...) of `layer`, cut at n_positions.
  KvSpan span(int layer, int index, int n_positions) const {
    const int bs = storage->block_size(), pos0 = index * bs;
    const int64_t s0 = static_cast<int64_t>(blocks[index]) * bs;
    return {storage->k_slot(layer, s0), storage->v_slot(layer, s0), storage->k_row_bytes(layer), storage->v_row_bytes(layer),
            pos0, n_positions - pos0 < bs ? n_positions - pos0 : bs};
  }
};

}  // namespace cachet
