#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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
    case Isa::kAmx: return "amx";
  }
  return "?";
}

namespace {

#if CACHET_TABLE_AMX
// AMX tiles need cpuid's AMX-TILE and AMX-BF16, the OS's XCR0 bits for the tile state, and (Linux 5.16+) the
// process's permission to use it: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once here.
bool amx_usable(const CpuFeatures& f) {
  if (!(f.amx_tile && f.amx_bf16)) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// Built on first use, after the checks above said yes: the AVX512_BF16 table with AMX's packed float kernel.
const Kernels* amx_table() {
  static const Kernels k = [] {
    Kernels t = avx512_bf16::kKernels;
    t.isa = Isa::kAmx;
    t.packed_dot_bf16 = amx::packed_dot_bf16;
    return t;
  }();
  return &k;
}
#endif

}  // namespace

// Only tables whose every instruction the CPU (and the OS's saved state) supports; nothing from an ISA file
// runs before this has said yes (the tables are constant-initialized: scripts/check_isa_objects.sh).
std::vector<const Kernels*> supported_kernels() {
  const CpuFeatures& f = cpu_features();
  std::vector<const Kernels*> v{&ref::kKernels};
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  // A build may leave tables out (CMake's CACHET_KERNEL_TABLES); avx2 is always there.
  if (avx2) v.push_back(&avx2::kKernels);
#if CACHET_TABLE_AVXVNNI
  if (avx2 && f.avx_vnni) v.push_back(&avx2_vnni::kKernels);
#endif
#if CACHET_TABLE_AVX512
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni) {
    v.push_back(&avx512::kKernels);
#if CACHET_TABLE_AVX512BF16
    if (f.avx512bf16) v.push_back(&avx512_bf16::kKernels);
#endif
#if CACHET_TABLE_AMX
    static const bool amx = f.avx512bf16 && amx_usable(f);
    if (amx) v.push_back(amx_table());
#endif
  }
#endif
  return v;
}

float* kernel_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

namespace {
struct Choice {
  const Kernels* table;
  Status status;
};

Choice choose() {
  auto all = supported_kernels();
  const char* force = std::getenv("CACHET_ISA");
  if (force && *force) {
    for (const Kernels* k : all)
      if (std::strcmp(isa_name(k->isa), force) == 0) return {k, Status::ok()};
    // A forced table the CPU cannot run would die on an illegal instruction; the best one stays, and the error
    // reaches whoever loads a model.
    std::string can;
    for (const Kernels* k : all) can += std::string(" ") + isa_name(k->isa);
    return {all.back(), invalid_argument(std::string("CACHET_ISA=") + force +
                                         ": not a kernel table this CPU can run (it can run:" + can + ")")};
  }
  return {all.back(), Status::ok()};
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}
}  // namespace

const Kernels& kernels() { return *choice().table; }

Status kernel_choice() { return choice().status; }

}  // namespace cachet
