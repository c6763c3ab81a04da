#include "kv/kv_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/quant_blocks.h"

namespace cachet {

namespace {

struct Info {
  KvType t;
  const char* name;
  int block;
  size_t block_bytes;
  DType layout;
};

constexpr Info kInfo[] = {
    {KvType::kF32, "f32", 1, 4, DType::kF32},          {KvType::kF16, "f16", 1, 2, DType::kF16},
    {KvType::kBF16, "bf16", 1, 2, DType::kBF16},       {KvType::kQ8_0, "q8_0", kQK, sizeof(BlockQ8_0), DType::kQ8_0},
    {KvType::kQ4_0, "q4_0", kQK, sizeof(BlockQ4_0), DType::kQ4_0},
    {KvType::kQ4R, "q4r", kQK, sizeof(BlockQ4_0), DType::kQ4_0},
};

const Info& info(KvType t) { return kInfo[static_cast<int>(t)]; }

// The fixed signs of the q4r rotation (a 32-bit pattern, bit j = element j negated).
constexpr uint32_t kSigns = 0x9E3779B9u;

// In-place Walsh-Hadamard transform of 32 values, scaled by 1/sqrt(32): orthonormal and its own inverse.
void hadamard32(float* x) {
  for (int len = 1; len < kQK; len <<= 1)
    for (int i = 0; i < kQK; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float s = 1.0f / std::sqrt(static_cast<float>(kQK));
  for (int j = 0; j < kQK; ++j) x[j] *= s;
}

void flip_signs(float* x) {
  for (int j = 0; j < kQK; ++j)
    if ((kSigns >> j) & 1u) x[j] = -x[j];
}

void quantize_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
}

void quantize_q4_0(const float* x, BlockQ4_0* b) {
  // As ggml: the value of largest magnitude maps to -8, so its sign decides which end gets the extra step.
  float amax = 0.0f, mx = 0.0f;
  for (int j = 0; j < kQK; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      mx = x[j];
    }
  const float d = mx / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    const int hi = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
    b->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace

const char* kv_type_name(KvType t) { return info(t).name; }

std::optional<KvType> kv_type_from_name(const std::string& s) {
  for (const Info& i : kInfo)
    if (s == i.name) return i.t;
  return std::nullopt;
}

const char* kv_type_names() { return "f32, f16, bf16, q8_0, q4_0, q4r"; }

KvType kv_type_of(DType t) {
  switch (t) {
    case DType::kF32: return KvType::kF32;
    case DType::kF16: return KvType::kF16;
    case DType::kBF16: return KvType::kBF16;
    default: CACHET_CHECK(false && "not a KV element type");
  }
  return KvType::kF16;
}

bool kv_quantized(KvType t) { return info(t).block > 1; }
int kv_block(KvType t) { return info(t).block; }
size_t kv_block_bytes(KvType t) { return info(t).block_bytes; }
size_t kv_row_bytes(KvType t, int64_t n) { return static_cast<size_t>(n / info(t).block) * info(t).block_bytes; }
DType kv_layout(KvType t) { return info(t).layout; }
bool kv_rotated(KvType t) { return t == KvType::kQ4R; }

void kv_rotate(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += kQK) {
    flip_signs(x + b);
    hadamard32(x + b);
  }
}

void kv_unrotate(float* x, int64_t n) {
  for (int64_t b = 0; b < n; b += kQK) {
    hadamard32(x + b);
    flip_signs(x + b);
  }
}

void kv_quantize_row(KvType t, const float* src, uint8_t* dst, int64_t n) {
  switch (t) {
    case KvType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case KvType::kF16: {
      auto* o = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_fp16(src[i]);
      return;
    }
    case KvType::kBF16: {
      auto* o = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(src[i]);
      return;
    }
    case KvType::kQ8_0:
      for (int64_t b = 0; b < n / kQK; ++b) quantize_q8_0(src + b * kQK, reinterpret_cast<BlockQ8_0*>(dst) + b);
      return;
    case KvType::kQ4_0:
      for (int64_t b = 0; b < n / kQK; ++b) quantize_q4_0(src + b * kQK, reinterpret_cast<BlockQ4_0*>(dst) + b);
      return;
    case KvType::kQ4R:
      for (int64_t b = 0; b < n / kQK; ++b) {
        float r[kQK];
        std::memcpy(r, src + b * kQK, sizeof r);
        kv_rotate(r, kQK);
        quantize_q4_0(r, reinterpret_cast<BlockQ4_0*>(dst) + b);
      }
      return;
  }
}

void kv_dequantize_row(KvType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case KvType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case KvType::kF16: {
      auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case KvType::kBF16: {
      auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case KvType::kQ8_0:
      for (int64_t b = 0; b < n / kQK; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(src)[b];
        const float d = fp16_to_f32(blk.d);
        for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = blk.qs[j] * d;
      }
      return;
    case KvType::kQ4_0:
    case KvType::kQ4R:
      for (int64_t b = 0; b < n / kQK; ++b) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(src)[b];
        const float d = fp16_to_f32(blk.d);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[b * kQK + j] = ((blk.qs[j] & 0x0f) - 8) * d;
          dst[b * kQK + j + kQK / 2] = ((blk.qs[j] >> 4) - 8) * d;
        }
      }
      if (t == KvType::kQ4R) kv_unrotate(dst, n);
      return;
  }
}

}  // namespace cachet
