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

// cpuid leaf 1's identity (display family and model: base plus extended fields), which names the
// microarchitecture where a virtual machine's brand string does not ("AMD EPYC").
struct CpuSignature {
  std::string vendor;  // "AuthenticAMD", "GenuineIntel", ... or "" off x86
  unsigned family = 0, model = 0, stepping = 0;
};
CpuSignature cpu_signature();
// The microarchitecture of a known signature ("Zen 4", "Sapphire Rapids"), or "" when not known.
std::string cpu_microarchitecture(const CpuSignature& s);
// "AMD EPYC (AuthenticAMD family 25 model 17 stepping 1: Zen 4 signature)": brand, signature and name.
std::string cpu_description();

}  // namespace cachet
