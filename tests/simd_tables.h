// The vector kernel tables this CPU runs (every one but the scalar reference), for tests comparing them with it.
#pragma once

#include <vector>

#include "kernels/kernels.h"

namespace cachet {

inline std::vector<const Kernels*> simd_tables() {
  std::vector<const Kernels*> v;
  for (const Kernels* k : supported_kernels())
    if (k->isa != Isa::kScalar) v.push_back(k);
  return v;
}

}  // namespace cachet
