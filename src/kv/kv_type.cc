#include "kv/kv_type.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

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
    {KvType::kQ4R, "q4r", kQK, sizeof(BlockQ4_0), DType::kIQ4_NL},
};

const Info& info(KvType t) { return kInfo[static_cast<int>(t)]; }

constexpr int kMaxRot = 256;

// The fixed signs of the q4r rotation: element j of a rotation block is negated when bit j is set.
struct Signs {
  bool neg[kMaxRot];
  Signs() {
    uint64_t z = 0x9E3779B97F4A7C15ull;
    for (bool& b : neg) {  // splitmix64, one bit per element
      z += 0x9E3779B97F4A7C15ull;
      uint64_t x = z;
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      b = ((x ^ (x >> 31)) & 1u) != 0;
    }
  }
};
const Signs& signs() {
  static const Signs s;
  return s;
}

// In-place Walsh-Hadamard transform of r values, scaled by 1/sqrt(r): orthonormal and its own inverse.
void hadamard(float* x, int r) {
  for (int len = 1; len < r; len <<= 1)
    for (int i = 0; i < r; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float s = 1.0f / std::sqrt(static_cast<float>(r));
  for (int j = 0; j < r; ++j) x[j] *= s;
}

void flip_signs(float* x, int r) {
  const Signs& sg = signs();
  for (int j = 0; j < r; ++j)
    if (sg.neg[j]) x[j] = -x[j];
}

// q4r's grid: IQ4_NL's 16 non-linear levels (denser near zero, as a rotated block's near-Gaussian values are),
// value = d * kIq4nl[code]; the grid is asymmetric, so the scale's sign chooses which end has the extra reach.
// A q4r block is an IQ4_NL block byte for byte: the kernels read it under that type.
constexpr const int8_t* kIq4nl = kIq4nlGrid;

// codes[j] and the squared error of x at scale d (either sign): the nearest level by counting midpoints.
double q4r_assign(const float* x, float d, uint8_t* codes) {
  static const auto mids = [] {
    std::array<float, 15> m{};
    for (int i = 0; i < 15; ++i) m[i] = 0.5f * (kIq4nl[i] + kIq4nl[i + 1]);
    return m;
  }();
  const float id = 1.0f / d;
  double err = 0;
  for (int j = 0; j < kQK; ++j) {
    const float v = x[j] * id;
    int code = 0;
    for (float m : mids) code += v > m;  // branch-free: 0..15
    codes[j] = static_cast<uint8_t>(code);
    const float e = x[j] - d * kIq4nl[code];
    err += static_cast<double>(e) * e;
  }
  return err;
}

// The scale of least squared error: candidates around amax / 127 and amax / 113 of both signs (the grid's two
// ends), then a least-squares refit of the best one's codes.
void quantize_q4r(const float* x, BlockQ4_0* b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  if (amax == 0.0f) {
    b->d = 0;
    std::memset(b->qs, 0x88, sizeof b->qs);
    return;
  }
  uint8_t q[kQK], best_q[kQK];
  float best_d = 0.0f;
  double best = 1e300;
  auto consider = [&](float d) {
    if (d == 0.0f || !std::isfinite(d)) return;
    const double e = q4r_assign(x, d, q);
    if (e < best) {
      best = e;
      best_d = d;
      std::memcpy(best_q, q, sizeof q);
    }
  };
  for (float f : {1.0f, 0.93f, 0.86f})
    for (float sign : {1.0f, -1.0f}) {
      consider(sign * amax / 127.0f * f);
      consider(sign * amax / 113.0f * f);
    }
  double num = 0, den = 0;
  for (int j = 0; j < kQK; ++j) {
    num += static_cast<double>(x[j]) * kIq4nl[best_q[j]];
    den += static_cast<double>(kIq4nl[best_q[j]]) * kIq4nl[best_q[j]];
  }
  if (den > 0) consider(static_cast<float>(num / den));
  b->d = f32_to_fp16(best_d);
  for (int j = 0; j < kQK / 2; ++j) b->qs[j] = static_cast<uint8_t>(best_q[j] | (best_q[j + kQK / 2] << 4));
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
bool kv_rotated(KvType t) { return kv_quantized(t); }

int kv_rotation_size(int head_dim) {
  int r = 1;
  while (r < kMaxRot && head_dim % (2 * r) == 0) r *= 2;
  return r;
}

void kv_rotate(float* x, int64_t n, int head_dim) {
  const int r = kv_rotation_size(head_dim);
  for (int64_t b = 0; b < n; b += r) {
    flip_signs(x + b, r);
    hadamard(x + b, r);
  }
}

void kv_unrotate(float* x, int64_t n, int head_dim) {
  const int r = kv_rotation_size(head_dim);
  for (int64_t b = 0; b < n; b += r) {
    hadamard(x + b, r);
    flip_signs(x + b, r);
  }
}

void kv_quantize_row(KvType t, const float* src, uint8_t* dst, int64_t n, int head_dim) {
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
    case KvType::kQ4_0:
    case KvType::kQ4R: {
      thread_local std::vector<float> turned;
      turned.assign(src, src + n);
      kv_rotate(turned.data(), n, head_dim);
      for (int64_t b = 0; b < n / kQK; ++b) {
        const float* x = turned.data() + b * kQK;
        if (t == KvType::kQ8_0) quantize_q8_0(x, reinterpret_cast<BlockQ8_0*>(dst) + b);
        else if (t == KvType::kQ4_0) quantize_q4_0(x, reinterpret_cast<BlockQ4_0*>(dst) + b);
        else quantize_q4r(x, reinterpret_cast<BlockQ4_0*>(dst) + b);
      }
      return;
    }
  }
}

void kv_dequantize_row(KvType t, const uint8_t* src, float* dst, int64_t n, int head_dim) {
  kv_dequantize_row_raw(t, src, dst, n);
  if (kv_rotated(t)) kv_unrotate(dst, n, head_dim);
}

void kv_dequantize_row_raw(KvType t, const uint8_t* src, float* dst, int64_t n) {
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
          const int lo = blk.qs[j] & 0x0f, hi = blk.qs[j] >> 4;
          dst[b * kQK + j] = (t == KvType::kQ4R ? kIq4nl[lo] : lo - 8) * d;
          dst[b * kQK + j + kQK / 2] = (t == KvType::kQ4R ? kIq4nl[hi] : hi - 8) * d;
        }
      }
      return;
  }
}

}  // namespace cachet
