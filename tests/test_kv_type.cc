// KV element types (kv/kv_type.h): layouts, round trips, the q4r rotation, and the reason q4r exists.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"
#include "kv/kv_type.h"

namespace cachet {
namespace {

std::vector<float> normal(int n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

double mse(KvType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(kv_row_bytes(t, static_cast<int64_t>(x.size())));
  std::vector<float> y(x.size());
  kv_quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  kv_dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
  return e / static_cast<double>(x.size());
}

TEST(KvType, NamesSizesAndLayouts) {
  for (const char* n : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4r"}) {
    auto t = kv_type_from_name(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_STREQ(kv_type_name(*t), n);
  }
  EXPECT_FALSE(kv_type_from_name("q4_1").has_value());
  EXPECT_EQ(kv_row_bytes(KvType::kF16, 192), 384u);
  EXPECT_EQ(kv_row_bytes(KvType::kQ8_0, 192), 6u * 34);
  EXPECT_EQ(kv_row_bytes(KvType::kQ4_0, 192), 6u * 18);
  EXPECT_EQ(kv_row_bytes(KvType::kQ4R, 192), 6u * 18);
  EXPECT_EQ(kv_layout(KvType::kQ4R), DType::kQ4_0);
}

// q8_0 and q4_0 are ggml's blocks, byte for byte: the same bytes as the weight quantizer (which matches
// llama.cpp's reference quantization, tests/test_quantize.cc).
TEST(KvType, Q8_0AndQ4_0AreGgmlBlocks) {
  const auto x = normal(256, 1, 3.0f);
  for (auto [kt, dt] : {std::pair{KvType::kQ8_0, DType::kQ8_0}, std::pair{KvType::kQ4_0, DType::kQ4_0}}) {
    std::vector<uint8_t> a(kv_row_bytes(kt, 256)), b(a.size());
    kv_quantize_row(kt, x.data(), a.data(), 256);
    ASSERT_TRUE(quantize_row(dt, x.data(), b.data(), 256).is_ok());
    EXPECT_EQ(a, b) << kv_type_name(kt);
  }
}

TEST(KvType, RoundTripsWithinEachTypesStep) {
  const auto x = normal(512, 2, 2.0f);
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kQ4R}) {
    std::vector<uint8_t> q(kv_row_bytes(t, 512));
    std::vector<float> y(512);
    kv_quantize_row(t, x.data(), q.data(), 512);
    kv_dequantize_row(t, q.data(), y.data(), 512);
    for (int b = 0; b < 512; b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      // Half a step of each type, plus the f16 rounding of its scale.
      const float tol = t == KvType::kF32    ? 0.0f
                        : t == KvType::kF16  ? amax * 1e-3f
                        : t == KvType::kBF16 ? amax * 8e-3f
                        : t == KvType::kQ8_0 ? amax / 127.0f * 0.51f + amax * 1e-3f
                        : t == KvType::kQ4_0 ? amax / 8.0f * 1.01f + amax * 1e-3f  // the far end clamps at 7
                                             : amax * 0.5f;  // q4r: bounded by the rotated block's range
      for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(x[b + j] - y[b + j]), tol) << kv_type_name(t) << " " << b + j;
    }
  }
}

TEST(KvType, RotationIsOrthonormalAndUndone) {
  auto x = normal(96, 3);
  const auto orig = x;
  double n0 = 0, n1 = 0;
  for (float v : x) n0 += v * static_cast<double>(v);
  kv_rotate(x.data(), 96);
  for (float v : x) n1 += v * static_cast<double>(v);
  EXPECT_NEAR(n1, n0, 1e-4 * n0);
  double moved = 0;
  for (size_t i = 0; i < x.size(); ++i) moved += std::fabs(x[i] - orig[i]);
  EXPECT_GT(moved, 10.0);  // it does turn
  kv_unrotate(x.data(), 96);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], orig[i], 1e-5f);
  // Dot products survive the rotation (why attention may rotate q instead of un-rotating K).
  auto a = normal(64, 4), b = normal(64, 5);
  double d0 = 0, d1 = 0;
  for (int i = 0; i < 64; ++i) d0 += a[i] * static_cast<double>(b[i]);
  kv_rotate(a.data(), 64);
  kv_rotate(b.data(), 64);
  for (int i = 0; i < 64; ++i) d1 += a[i] * static_cast<double>(b[i]);
  EXPECT_NEAR(d1, d0, 1e-4 * std::fabs(d0) + 1e-5);
}

// Keys of small models have a few channels far larger than the rest; q4_0 spends each block's range on them.
// q4r spreads them over the block first: on such rows its error is well below q4_0's (and on plain Gaussian
// rows no worse than about q4_0's).
TEST(KvType, Q4rBeatsQ4_0OnOutlierChannels) {
  const int n = 64 * 256;
  auto x = normal(n, 6);
  for (int i = 0; i < n; i += 64) {
    x[i + 3] *= 20.0f;
    x[i + 41] *= 12.0f;
  }
  const double e40 = mse(KvType::kQ4_0, x), e4r = mse(KvType::kQ4R, x);
  EXPECT_LT(e4r, 0.5 * e40) << "q4_0 " << e40 << " q4r " << e4r;
  const auto g = normal(n, 7);
  EXPECT_LT(mse(KvType::kQ4R, g), 1.15 * mse(KvType::kQ4_0, g));
  EXPECT_LT(mse(KvType::kQ8_0, x), 0.02 * e40);
}

}  // namespace
}  // namespace cachet
