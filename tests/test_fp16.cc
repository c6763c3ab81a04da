#include <immintrin.h>

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "base/cpu_features.h"
#include "base/fp16.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

__attribute__((target("f16c"))) uint16_t hw_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
__attribute__((target("f16c"))) float hw_to_float(uint16_t h) { return _cvtsh_ss(h); }

TEST(Fp16, EveryHalfConvertsLikeF16c) {
  if (!cpu_features().f16c) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h < 65536; ++h) {
    float ours = fp16_to_f32(static_cast<uint16_t>(h));
    float hw = hw_to_float(static_cast<uint16_t>(h));
    if (std::isnan(hw)) {
      EXPECT_TRUE(std::isnan(ours)) << h;
      continue;
    }
    ASSERT_EQ(f32_to_bits(ours), f32_to_bits(hw)) << "half 0x" << std::hex << h;
    ASSERT_EQ(f32_to_fp16(ours), h) << "round trip of 0x" << std::hex << h;
  }
}

TEST(Fp16, FloatToHalfRoundsLikeF16c) {
  if (!cpu_features().f16c) GTEST_SKIP() << "no F16C on this CPU";
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns cover subnormals, overflow and ties; skip NaNs (payloads differ by design).
    float f = bits_to_f32(rng());
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), hw_to_half(f)) << f;
  }
  for (float f : {65504.0f, 65520.0f, 65519.99f, 5.96e-8f, 2.98e-8f, 2.99e-8f, -0.0f, 6.1035e-05f})
    EXPECT_EQ(f32_to_fp16(f), hw_to_half(f)) << f;
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // tie, rounds up to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace cachet
