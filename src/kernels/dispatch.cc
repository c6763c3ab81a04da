#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/cpu_features.h"
#include "kernels/kernels.h"

namespace cachet {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "?";
}

// Only tables whose every instruction the CPU (and the OS's saved state) supports; nothing from an ISA file
// runs before this has said yes (the tables are constant-initialized: scripts/check_isa_objects.sh).
std::vector<const Kernels*> supported_kernels() {
  const CpuFeatures& f = cpu_features();
  std::vector<const Kernels*> v{&ref::kKernels};
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2) v.push_back(&avx2::kKernels);
  if (avx2 && f.avx_vnni) v.push_back(&avx2_vnni::kKernels);
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni) {
    v.push_back(&avx512::kKernels);
    if (f.avx512bf16) v.push_back(&avx512_bf16::kKernels);
  }
  return v;
}

float* kernel_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

namespace {
const Kernels* choose() {
  auto all = supported_kernels();
  const char* force = std::getenv("CACHET_ISA");
  if (force && *force) {
    for (const Kernels* k : all)
      if (std::strcmp(isa_name(k->isa), force) == 0) return k;
    // A forced table the CPU cannot run would die on an illegal instruction later; say so now instead.
    std::fprintf(stderr, "error: CACHET_ISA=%s: not a kernel table this CPU can run (it can run:", force);
    for (const Kernels* k : all) std::fprintf(stderr, " %s", isa_name(k->isa));
    std::fprintf(stderr, ")\n");
    std::exit(2);
  }
  return all.back();
}
}  // namespace

const Kernels& kernels() {
  static const Kernels* k = choose();
  return *k;
}

}  // namespace cachet
