#include "kv/kv_cache.h"

#include "base/check.h"

namespace cachet {

const std::vector<BlockId> ContiguousKvCache::kOneBlock{0};

ContiguousKvCache::ContiguousKvCache(const ModelConfig& cfg, int capacity, KvTypes types)
    : storage_(cfg, 1, capacity, types), state_(cfg, 1) {
  CACHET_CHECK(state_.allocate() == StateSlot{0});
}

}  // namespace cachet
