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
  kv_quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()), 64);
  kv_dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()), 64);
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
  EXPECT_EQ(kv_layout(KvType::kQ4R), DType::kIQ4_NL);
}

// q8_0 and q4_0 are ggml's blocks of the rotated values, byte for byte: the same bytes as the weight quantizer
// (which matches llama.cpp's reference quantization, tests/test_quantize.cc) gives for the turned row.
TEST(KvType, Q8_0AndQ4_0AreGgmlBlocksOfTheTurnedRow) {
  const auto x = normal(256, 1, 3.0f);
  auto turned = x;
  kv_rotate(turned.data(), 256, 64);
  for (auto [kt, dt] : {std::pair{KvType::kQ8_0, DType::kQ8_0}, std::pair{KvType::kQ4_0, DType::kQ4_0}}) {
    std::vector<uint8_t> a(kv_row_bytes(kt, 256)), b(a.size());
    kv_quantize_row(kt, x.data(), a.data(), 256, 64);
    ASSERT_TRUE(quantize_row(dt, turned.data(), b.data(), 256).is_ok());
    EXPECT_EQ(a, b) << kv_type_name(kt);
  }
}

// Per head, the round trip's squared error is at most what half a step of each block allows (float types:
// element by element). The rotation is orthonormal, so errors made in the turned basis keep their size.
TEST(KvType, RoundTripsWithinEachTypesStep) {
  const int n = 512, hd = 128;
  const auto x = normal(n, 2, 2.0f);
  auto turned = x;
  kv_rotate(turned.data(), n, hd);
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kQ4R}) {
    std::vector<uint8_t> q(kv_row_bytes(t, n));
    std::vector<float> y(n);
    kv_quantize_row(t, x.data(), q.data(), n, hd);
    kv_dequantize_row(t, q.data(), y.data(), n, hd);
    if (!kv_quantized(t)) {
      for (int i = 0; i < n; ++i) {
        const float tol = t == KvType::kF32 ? 0.0f : t == KvType::kF16 ? std::fabs(x[i]) * 1e-3f : std::fabs(x[i]) * 8e-3f;
        ASSERT_LE(std::fabs(x[i] - y[i]), tol) << kv_type_name(t) << " " << i;
      }
      continue;
    }
    for (int h = 0; h < n; h += hd) {
      double err = 0, allowed = 0;
      for (int i = h; i < h + hd; ++i) err += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
      for (int b = h; b < h + hd; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(turned[b + j]));
        // A full step for the 4-bit types (the far end clamps), half a step for q8_0, plus the f16 scale.
        const double step = t == KvType::kQ8_0 ? amax / 127.0 * 0.51 : amax / 7.0;
        allowed += 32 * (step + amax * 1e-3) * (step + amax * 1e-3);
      }
      ASSERT_LE(err, allowed) << kv_type_name(t) << " head at " << h;
    }
  }
}
TEST(KvType, RotationIsOrthonormalAndUndone) {
  auto x = normal(96, 3);
  const auto orig = x;
  double n0 = 0, n1 = 0;
  for (float v : x) n0 += v * static_cast<double>(v);
  kv_rotate(x.data(), 96, 96);  // head 96: blocks of 32
  for (float v : x) n1 += v * static_cast<double>(v);
  EXPECT_NEAR(n1, n0, 1e-4 * n0);
  double moved = 0;
  for (size_t i = 0; i < x.size(); ++i) moved += std::fabs(x[i] - orig[i]);
  EXPECT_GT(moved, 10.0);  // it does turn
  kv_unrotate(x.data(), 96, 96);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], orig[i], 1e-5f);
  // Dot products survive the rotation (why attention may rotate q instead of un-rotating K).
  auto a = normal(64, 4), b = normal(64, 5);
  double d0 = 0, d1 = 0;
  for (int i = 0; i < 64; ++i) d0 += a[i] * static_cast<double>(b[i]);
  kv_rotate(a.data(), 64, 64);
  kv_rotate(b.data(), 64, 64);
  EXPECT_EQ(kv_rotation_size(64), 64);
  EXPECT_EQ(kv_rotation_size(96), 32);
  EXPECT_EQ(kv_rotation_size(512), 256);
  for (int i = 0; i < 64; ++i) d1 += a[i] * static_cast<double>(b[i]);
  EXPECT_NEAR(d1, d0, 1e-4 * std::fabs(d0) + 1e-5);
}

// Keys of small models have a few channels far larger than the rest; ggml's q4_0 spends each block's range on
// them. The rotation spreads them over the head (our q4_0 is rotated, as llama.cpp's quantized caches are), and
// on near-Gaussian rows (what real heads look like once turned) q4r's grid and fitted scale do better again.
TEST(KvType, RotationAndQ4rBeatPlainQ4_0) {
  const int n = 64 * 256;
  auto x = normal(n, 6);
  for (int i = 0; i < n; i += 64) {
    x[i + 3] *= 20.0f;
    x[i + 41] *= 12.0f;
  }
  // ggml's q4_0 of the row as it is.
  std::vector<uint8_t> q(kv_row_bytes(KvType::kQ4_0, n));
  std::vector<float> y(n);
  ASSERT_TRUE(quantize_row(DType::kQ4_0, x.data(), q.data(), n).is_ok());
  kv_dequantize_row_raw(KvType::kQ4_0, q.data(), y.data(), n);
  double plain = 0;
  for (int i = 0; i < n; ++i) plain += (x[i] - y[i]) * static_cast<double>(x[i] - y[i]);
  plain /= n;
  const double rotated = mse(KvType::kQ4_0, x), r = mse(KvType::kQ4R, x);
  EXPECT_LT(rotated, 0.6 * plain) << "plain " << plain << " rotated " << rotated;
  // Two huge channels leave a turned block bimodal, not Gaussian: q4r's grid is about as good as uniform there.
  EXPECT_LT(r, 1.1 * rotated) << "q4_0 " << rotated << " q4r " << r;
  const auto g = normal(n, 7);
  EXPECT_LT(mse(KvType::kQ4R, g), 0.9 * mse(KvType::kQ4_0, g));
  EXPECT_LT(mse(KvType::kQ8_0, x), 0.02 * rotated);
}

}  // namespace
}  // namespace cachet
