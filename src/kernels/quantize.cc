#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/quant_blocks.h"

namespace cachet {

namespace {

void quantize_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  float d = amax / 127.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
}

void quantize_q4_0(const float* x, BlockQ4_0* b) {
  // The value of largest magnitude maps to -8, so its sign picks the side with the extra level.
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  float d = max / -8.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  for (int j = 0; j < kQK / 2; ++j) {
    int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    int q1 = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  float d = (hi - lo) / 15.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  b->m = f32_to_fp16(lo);
  for (int j = 0; j < kQK / 2; ++j) {
    int q0 = std::clamp(static_cast<int>((x[j] - lo) * id + 0.5f), 0, 15);
    int q1 = std::clamp(static_cast<int>((x[j + kQK / 2] - lo) * id + 0.5f), 0, 15);
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
  if (n % traits(t).block_size != 0)
    return invalid_argument(std::string("row of ") + std::to_string(n) + " elements is not a whole number of " +
                            dtype_name(t) + " blocks");
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return Status::ok();
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
      return Status::ok();
    }
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return Status::ok();
    }
    case DType::kQ8_0:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q8_0(src + i * kQK, static_cast<BlockQ8_0*>(dst) + i);
      return Status::ok();
    case DType::kQ4_0:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q4_0(src + i * kQK, static_cast<BlockQ4_0*>(dst) + i);
      return Status::ok();
    case DType::kQ4_1:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q4_1(src + i * kQK, static_cast<BlockQ4_1*>(dst) + i);
      return Status::ok();
    default:
      return unimplemented(std::string("quantizing to ") + dtype_name(t) + " is not supported yet");
  }
}

}  // namespace cachet
