// What the CPU we run on can do, read once from cpuid. Kernels dispatch on this at start-up.
#pragma once

#include <string>

namespace cachet {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;  // VEX-encoded vpdpbusd on 256-bit registers
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;

  std::string to_string() const;
};

const CpuFeatures& cpu_features();
// The CPU's brand string ("AMD EPYC 9R45"), or "unknown".
std::string cpu_model_name();

}  // namespace cachet
