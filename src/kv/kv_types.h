// The element types of a cache's K and of its V (kv/kv_type.h), and whether a model's heads can hold them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "cachet/status.h"
#include "kv/kv_type.h"

namespace cachet {

struct ModelConfig;

// From one DType: both the same.
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

// OK when the model's head size is a whole number of each type's blocks (a block never straddles heads).
Status kv_types_fit(const ModelConfig& cfg, KvTypes t);

}  // namespace cachet
