#include <gtest/gtest.h>

#include <cpuid.h>

#include "base/cpu_features.h"

namespace cachet {
namespace {

TEST(CpuFeatures, SignatureNamesOnlyKnownParts) {
  EXPECT_EQ(cpu_microarchitecture({"AuthenticAMD", 25, 1, 1}), "Zen 3");    // EPYC Milan
  EXPECT_EQ(cpu_microarchitecture({"AuthenticAMD", 25, 17, 1}), "Zen 4");   // EPYC Genoa
  EXPECT_EQ(cpu_microarchitecture({"AuthenticAMD", 26, 2, 0}), "Zen 5");    // EPYC Turin
  EXPECT_EQ(cpu_microarchitecture({"GenuineIntel", 6, 143, 8}), "Sapphire Rapids");
  // A model number no table names (a virtual machine's invented one, say) is left unnamed, not guessed.
  EXPECT_EQ(cpu_microarchitecture({"GenuineIntel", 6, 167, 1}), "");
  EXPECT_EQ(cpu_microarchitecture({"AuthenticAMD", 6, 17, 1}), "");
  EXPECT_EQ(cpu_microarchitecture({"", 25, 17, 1}), "");
}

TEST(CpuFeatures, SignatureIsLeafOnesDisplayFamilyAndModel) {
  unsigned a, b, c, d;
  ASSERT_TRUE(__get_cpuid(1, &a, &b, &c, &d));
  const CpuSignature s = cpu_signature();
  EXPECT_EQ(s.vendor.size(), 12u);
  const unsigned base_family = (a >> 8) & 0xf;
  EXPECT_EQ(s.family, base_family == 0xf ? 0xf + ((a >> 20) & 0xff) : base_family);
  EXPECT_EQ(s.model & 0xf, (a >> 4) & 0xf);
  EXPECT_EQ(s.stepping, a & 0xf);
  const std::string desc = cpu_description();
  EXPECT_NE(desc.find(cpu_model_name()), std::string::npos);
  EXPECT_NE(desc.find("family " + std::to_string(s.family) + " model " + std::to_string(s.model)), std::string::npos);
}

}  // namespace
}  // namespace cachet
