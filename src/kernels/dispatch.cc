#include <cstdlib>
#include <cstring>

#include "base/cpu_features.h"
#include "kernels/kernels.h"

namespace cachet {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

std::vector<const Kernels*> supported_kernels() {
  const CpuFeatures& f = cpu_features();
  std::vector<const Kernels*> v{&ref::kKernels};
  if (f.avx2 && f.fma && f.f16c) v.push_back(&avx2::kKernels);
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.f16c) {
    v.push_back(&avx512::kKernels);
    if (f.avx512bf16) v.push_back(&avx512_bf16::kKernels);
  }
  return v;
}

namespace {
const Kernels* choose() {
  auto all = supported_kernels();
  const char* force = std::getenv("CACHET_ISA");
  if (force && *force) {
    for (const Kernels* k : all)
      if (std::strcmp(isa_name(k->isa), force) == 0) return k;
  }
  return all.back();
}
}  // namespace

const Kernels& kernels() {
  static const Kernels* k = choose();
  return *k;
}

}  // namespace cachet
