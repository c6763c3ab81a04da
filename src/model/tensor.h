// TensorView: a non-owning view of a weight tensor in its stored type (usually inside a memory-mapped file).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace cachet {

struct TensorView {
  std::string name;
  DType type = DType::kF32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] innermost: a matmul weight is [n_in, n_out]
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;                    // bytes of one ne[0]-row
  // The same matrix repacked for the integer path (kernels/packed.h), when its type has one: groups of 16
  // rows, packed_group_bytes apart. Owned by the model; nullptr when not packed.
  const uint8_t* packed = nullptr;
  size_t packed_group_bytes = 0;

  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  const uint8_t* row(int64_t r) const { return data + r * row_bytes; }
  size_t n_bytes() const { return row_bytes * n_rows(); }
  // Its dims, innermost first, without trailing 1s (as traces print it).
  std::vector<int64_t> shape() const {
    std::vector<int64_t> s(ne.begin(), ne.end());
    while (s.size() > 1 && s.back() == 1) s.pop_back();
    return s;
  }
};

}  // namespace cachet
