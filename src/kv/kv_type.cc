#include "kv/kv_type.h"

#include <algorithm>
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
    {KvType::kQ4R, "q4r", kQK, sizeof(BlockQ4_0), DType::kQ4_0},
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

// q4r's two grids, chosen per block by the sign of its f16 scale (no extra bits): d > 0, the Lloyd-Max levels of
// a unit Gaussian (what most rotated blocks look like) scaled so the outermost is 127; d < 0, Q4_0's uniform
// levels q - 8 at |d| (better for a block where one large outlier dominates even after the rotation).
// Value = |d| * grid[code].
constexpr int8_t kQ4rLevels[16] = {-127, -96, -75, -58, -44, -31, -18, -6, 6, 18, 31, 44, 58, 75, 96, 127};
constexpr int8_t kQ4rUniform[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// The positive half's midpoints of the Gaussian grid: |v| in level units is nearest level 8 + (how many of these
// it exceeds).
constexpr float kQ4rMid[7] = {12.0f, 24.5f, 37.5f, 51.0f, 66.5f, 85.5f, 111.5f};

// codes[j] and the squared error of x at scale d > 0 on one grid.
double q4r_assign(const float* x, float d, bool gaussian, uint8_t* codes) {
  const float id = 1.0f / d;
  const int8_t* grid = gaussian ? kQ4rLevels : kQ4rUniform;
  double err = 0;
  for (int j = 0; j < kQK; ++j) {
    int code;
    if (gaussian) {
      const float v = std::fabs(x[j]) * id;
      int k = 0;
      for (float m : kQ4rMid) k += v > m;  // branch-free: 0..7
      code = x[j] < 0.0f ? 7 - k : 8 + k;
    } else {
      code = std::max(0, std::min(15, static_cast<int>(std::lround(x[j] * id)) + 8));
    }
    codes[j] = static_cast<uint8_t>(code);
    const float e = x[j] - d * grid[code];
    err += static_cast<double>(e) * e;
  }
  return err;
}

// The grid and scale of least squared error: a few scales per grid, then a least-squares refit of the best.
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
  bool best_g = true;
  double best = 1e300;
  auto consider = [&](float d, bool g) {
    if (!(d > 0.0f)) return;
    const double e = q4r_assign(x, d, g, q);
    if (e < best) {
      best = e;
      best_d = d;
      best_g = g;
      std::memcpy(best_q, q, sizeof q);
    }
  };
  for (float f : {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f}) consider(amax / 127.0f * f, true);
  for (float f : {1.0f, 0.9f, 0.8f}) consider(amax / 7.0f * f, false);
  consider(amax / 8.0f, false);
  const int8_t* grid = best_g ? kQ4rLevels : kQ4rUniform;
  double num = 0, den = 0;
  for (int j = 0; j < kQK; ++j) {
    num += static_cast<double>(x[j]) * grid[best_q[j]];
    den += static_cast<double>(grid[best_q[j]]) * grid[best_q[j]];
  }
  if (den > 0) consider(static_cast<float>(num / den), best_g);
  b->d = f32_to_fp16(best_g ? best_d : -best_d);
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
        const float sd = fp16_to_f32(blk.d);
        // q4_0: levels q - 8 at d (either sign); q4r: the grid the scale's sign names, at |d|.
        const int8_t* grid = t == KvType::kQ4R && sd > 0.0f ? kQ4rLevels : kQ4rUniform;
        const float d = t == KvType::kQ4R ? std::fabs(sd) : sd;
        for (int j = 0; j < kQK / 2; ++j) {
          dst[b * kQK + j] = grid[blk.qs[j] & 0x0f] * d;
          dst[b * kQK + j + kQK / 2] = grid[blk.qs[j] >> 4] * d;
        }
      }
      return;
  }
}

}  // namespace cachet
