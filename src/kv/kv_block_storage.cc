#include "kv/kv_block_storage.h"

#include <atomic>
#include <cstring>

#include "base/check.h"
#include "model/config.h"

namespace cachet {

uint64_t next_kv_storage_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

KvBlockStorage::KvBlockStorage(const ModelConfig& cfg, int n_blocks, int block_size, KvTypes types)
    : types_(types), block_size_(block_size), n_blocks_(n_blocks), v_in_k_(cfg.v_in_k()) {
  CACHET_CHECK(kv_types_fit(cfg, types).is_ok());
  // Whole attention tiles per block (16 positions, kernels.h kAttnTileMax), so a chunk's tiles never straddle
  // one; or one block only (a contiguous cache: one span from position 0).
  CACHET_CHECK(n_blocks > 0 && block_size > 0 && (block_size % 16 == 0 || n_blocks == 1));
  // Layers that keep KV (not a hybrid model's recurrent layers, nor layers that read an earlier layer's), each
  // as wide as its heads.
  k_.resize(cfg.n_kv_layers());
  v_.resize(cfg.n_kv_layers());
  for (int l = 0; l < static_cast<int>(cfg.n_kv_layers()); ++l) {
    k_row_bytes_.push_back(kv_row_bytes(types.k, cfg.kv_dim_of_kv_layer(l)));
    v_row_bytes_.push_back(kv_row_bytes(types.v, cfg.kv_dim_of_kv_layer(l)));
    k_[l].resize(k_row_bytes_[l] * block_size * n_blocks);
    v_[l].resize(v_in_k_ ? 0 : v_row_bytes_[l] * block_size * n_blocks);
    k_[l].zero();
    v_[l].zero();
  }
}

void KvBlockStorage::copy_block(const KvBlockCopy& c) {
  CACHET_CHECK(c.src >= 0 && c.src < n_blocks_ && c.dst >= 0 && c.dst < n_blocks_ && c.n_tokens >= 0 &&
               c.n_tokens <= block_size_);
  for (int l = 0; l < n_layers(); ++l) {
    std::memcpy(k(l, c.dst, 0), k(l, c.src, 0), k_row_bytes_[l] * c.n_tokens);
    if (!v_in_k_) std::memcpy(v(l, c.dst, 0), v(l, c.src, 0), v_row_bytes_[l] * c.n_tokens);
  }
}

size_t KvBlockStorage::total_bytes() const {
  size_t n = 0;
  for (int l = 0; l < n_layers(); ++l) n += k_[l].size() + v_[l].size();
  return n;
}

}  // namespace cachet
