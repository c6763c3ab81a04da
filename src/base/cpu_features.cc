#include "base/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace cachet {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  bool ymm_os = (xcr0_lo & 0x6) == 0x6;
  bool zmm_os = (xcr0_lo & 0xe6) == 0xe6;
  bool amx_os = (xcr0_lo & 0x60000) == 0x60000;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_os && (b & (1u << 5));
  if (!ymm_os) f.fma = f.f16c = false;
  f.avx512f = zmm_os && (b & (1u << 16));
  f.avx512dq = zmm_os && (b & (1u << 17));
  f.avx512bw = zmm_os && (b & (1u << 30));
  f.avx512vl = zmm_os && (b & (1u << 31));
  f.avx512vnni = zmm_os && (c & (1u << 11));
  f.amx_bf16 = amx_os && (d & (1u << 22));
  f.amx_tile = amx_os && (d & (1u << 24));
  f.amx_int8 = amx_os && (d & (1u << 25));
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
    f.avx512bf16 = zmm_os && (a1 & (1u << 5));
    f.avx_vnni = ymm_os && (a1 & (1u << 4));
  }
#endif
  return f;
}

}  // namespace

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx_vnni, "avx-vnni");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(amx_tile, "amx-tile");
  add(amx_int8, "amx-int8");
  add(amx_bf16, "amx-bf16");
  return s.empty() ? "scalar" : s;
}

std::string cpu_model_name() {
#if defined(__x86_64__)
  unsigned regs[12];
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    std::string s(reinterpret_cast<const char*>(regs), sizeof(regs));
    s = s.substr(0, s.find('\0'));
    const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
    if (b != std::string::npos) return s.substr(b, e - b + 1);
  }
#endif
  return "unknown";
}

CpuSignature cpu_signature() {
  CpuSignature s;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return s;
  const unsigned vendor[3] = {b, d, c};
  s.vendor.assign(reinterpret_cast<const char*>(vendor), sizeof(vendor));
  if (!__get_cpuid(1, &a, &b, &c, &d)) return s;
  const unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  s.stepping = a & 0xf;
  s.family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
  s.model = (base_family == 0x6 || base_family == 0xf) ? base_model + (((a >> 16) & 0xf) << 4) : base_model;
#endif
  return s;
}

std::string cpu_microarchitecture(const CpuSignature& s) {
  // Only the server and recent client parts this project's users run; anything else stays unnamed rather
  // than guessed.
  struct Range {
    const char* vendor;
    unsigned family, lo, hi;
    const char* name;
  };
  static constexpr Range kKnown[] = {
      {"AuthenticAMD", 0x17, 0x00, 0x2f, "Zen / Zen+"},  {"AuthenticAMD", 0x17, 0x30, 0xaf, "Zen 2"},
      {"AuthenticAMD", 0x19, 0x00, 0x0f, "Zen 3"},       {"AuthenticAMD", 0x19, 0x10, 0x1f, "Zen 4"},
      {"AuthenticAMD", 0x19, 0x20, 0x5f, "Zen 3"},       {"AuthenticAMD", 0x19, 0x60, 0xaf, "Zen 4"},
      {"AuthenticAMD", 0x1a, 0x00, 0xff, "Zen 5"},       {"GenuineIntel", 6, 0x55, 0x55, "Skylake-SP / Cascade Lake"},
      {"GenuineIntel", 6, 0x6a, 0x6c, "Ice Lake-SP"},    {"GenuineIntel", 6, 0x8f, 0x8f, "Sapphire Rapids"},
      {"GenuineIntel", 6, 0xcf, 0xcf, "Emerald Rapids"}, {"GenuineIntel", 6, 0xad, 0xae, "Granite Rapids"},
      {"GenuineIntel", 6, 0xaf, 0xaf, "Sierra Forest"},  {"GenuineIntel", 6, 0x97, 0x9a, "Alder Lake"},
      {"GenuineIntel", 6, 0xb7, 0xbf, "Raptor Lake"},    {"GenuineIntel", 6, 0xaa, 0xac, "Meteor Lake"},
  };
  for (const Range& r : kKnown)
    if (s.vendor == r.vendor && s.family == r.family && s.model >= r.lo && s.model <= r.hi) return r.name;
  return "";
}

std::string cpu_description() {
  const CpuSignature s = cpu_signature();
  std::string out = cpu_model_name();
  if (s.vendor.empty()) return out;
  out += " (" + s.vendor + " family " + std::to_string(s.family) + " model " + std::to_string(s.model) +
         " stepping " + std::to_string(s.stepping);
  const std::string name = cpu_microarchitecture(s);
  // A virtual machine may present a CPU model other than its host's: the name is of the signature, not a claim
  // about the silicon.
  if (!name.empty()) out += ": " + name + " signature";
  return out + ")";
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace cachet
