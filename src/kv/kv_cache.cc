#include "kv/kv_cache.h"

#include "base/check.h"
#include "model/config.h"

namespace cachet {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int capacity, DType dtype)
    : dtype_(dtype), capacity_(capacity) {
  CACHET_CHECK(dtype == DType::kF32 || dtype == DType::kF16);
  CACHET_CHECK(capacity > 0);
  row_bytes_ = cfg.kv_dim() * (dtype == DType::kF32 ? 4 : 2);
  k_.resize(cfg.n_layer);
  v_.resize(cfg.n_layer);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    k_[l].resize(row_bytes_ * capacity);
    v_[l].resize(row_bytes_ * capacity);
    k_[l].zero();
    v_[l].zero();
  }
}

KvSpan ContiguousKvCache::span(int layer, int index, int n_positions) const {
  CACHET_CHECK(index == 0 && n_positions <= capacity_);
  return {k_[layer].data(), v_[layer].data(), row_bytes_, 0, n_positions};
}

}  // namespace cachet
