#include "kv/kv_cache.h"

#include <atomic>

#include "base/check.h"
#include "kernels/kernels.h"
#include "model/config.h"

namespace cachet {

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int capacity, KvTypes types)
    : types_(types), capacity_(capacity) {
  CACHET_CHECK(capacity > 0);
  CACHET_CHECK(kv_types_fit(cfg, types).is_ok());
  k_row_bytes_ = kv_row_bytes(types.k, cfg.kv_dim());
  v_row_bytes_ = kv_row_bytes(types.v, cfg.kv_dim());
  k_.resize(cfg.n_layer);
  v_.resize(cfg.n_layer);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    k_[l].resize(k_row_bytes_ * capacity);
    v_[l].resize(v_row_bytes_ * capacity);
    k_[l].zero();
    v_[l].zero();
  }
}

uint64_t next_kv_storage_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

std::optional<KvSequence::Mirror> ContiguousKvCache::mirror() const {
  static const std::vector<int32_t> kOneBlock{0};
  return Mirror{id_, 1, capacity_, &kOneBlock, nullptr};
}

KvSpan ContiguousKvCache::span(int layer, int index, int n_positions) const {
  CACHET_CHECK(index == 0 && n_positions <= capacity_);
  return {k_[layer].data(), v_[layer].data(), k_row_bytes_, v_row_bytes_, 0, n_positions};
}

Status kv_types_fit(const ModelConfig& cfg, KvTypes t) {
  for (KvType x : {t.k, t.v})
    if (cfg.head_dim % kv_block(x) != 0)
      return invalid_argument(std::string("KV type ") + kv_type_name(x) + " needs a head size that is a multiple of " +
                              std::to_string(kv_block(x)) + "; this model's is " + std::to_string(cfg.head_dim));
  for (KvType x : {t.k, t.v})
    if (kv_block(x) > 1 && cfg.head_dim > kAttnMaxBlockHeadDim)
      return invalid_argument(std::string("KV type ") + kv_type_name(x) + " supports head sizes up to " +
                              std::to_string(kAttnMaxBlockHeadDim) + "; this model's is " +
                              std::to_string(cfg.head_dim));
  return Status::ok();
}

}  // namespace cachet
