#include "kv/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "model/config.h"

namespace cachet {

KvBlockStorage::KvBlockStorage(const ModelConfig& cfg, int n_blocks, int block_size, KvTypes types)
    : types_(types), block_size_(block_size), n_blocks_(n_blocks) {
  CACHET_CHECK(kv_types_fit(cfg, types).is_ok());
  // Whole attention tiles per block (16 positions, kernels.h kAttnTileMax), so a chunk's tiles never straddle
  // one; or one block only (a contiguous cache mirrored on tensor-parallel ranks: one span from position 0).
  CACHET_CHECK(block_size > 0 && (block_size % 16 == 0 || n_blocks == 1));
  k_row_bytes_ = kv_row_bytes(types.k, cfg.kv_dim());
  v_row_bytes_ = kv_row_bytes(types.v, cfg.kv_dim());
  k_.resize(cfg.n_layer);
  v_.resize(cfg.n_layer);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    k_[l].resize(k_row_bytes_ * block_size * n_blocks);
    v_[l].resize(v_row_bytes_ * block_size * n_blocks);
    k_[l].zero();
    v_[l].zero();
  }
}

void KvBlockStorage::copy_block(BlockId src, BlockId dst, int n_tokens) {
  for (size_t l = 0; l < k_.size(); ++l) {
    std::memcpy(k(static_cast<int>(l), dst, 0), k(static_cast<int>(l), src, 0), k_row_bytes_ * n_tokens);
    std::memcpy(v(static_cast<int>(l), dst, 0), v(static_cast<int>(l), src, 0), v_row_bytes_ * n_tokens);
  }
  if (copy_observer_) copy_observer_(src, dst, n_tokens);
}

uint8_t* PagedKvSequence::k_row(int layer, int pos) {
  const auto& t = manager_.block_table(seq_);
  const int bs = storage_.block_size();
  CACHET_CHECK(pos / bs < static_cast<int>(t.size()));
  return storage_.k(layer, t[pos / bs], pos % bs);
}

uint8_t* PagedKvSequence::v_row(int layer, int pos) {
  const auto& t = manager_.block_table(seq_);
  const int bs = storage_.block_size();
  CACHET_CHECK(pos / bs < static_cast<int>(t.size()));
  return storage_.v(layer, t[pos / bs], pos % bs);
}

KvSpan PagedKvSequence::span(int layer, int index, int n_positions) const {
  const auto& t = manager_.block_table(seq_);
  const int bs = storage_.block_size();
  const int pos0 = index * bs;
  auto& st = const_cast<KvBlockStorage&>(storage_);
  return {st.k(layer, t[index], 0), st.v(layer, t[index], 0), st.k_row_bytes(), st.v_row_bytes(), pos0,
          std::min(bs, n_positions - pos0)};
}

}  // namespace cachet
