// IEEE half and bfloat16 conversions (scalar; the specification the SIMD paths must match bit for bit).
#pragma once

#include <cstdint>
#include <cstring>

namespace cachet {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float fp16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, as F16C's vcvtps2ph with rounding mode 0.
inline uint16_t f32_to_fp16(float f) {
  uint32_t x = f32_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (ax < 0x38800000u) {                                               // subnormal or zero in half
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);            // < 2^-25 rounds to 0
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (112 - e) + 13 - 13 ... maps to half subnormal
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ax - 0x38000000u;  // rebias exponent (127 -> 15)
  uint32_t lsb = (r >> 13) & 1;
  r += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }
// The two bf16 of a packed pair (low half = the first element), as f32.
inline float bf16_pair_lo(uint32_t v) { return bits_to_f32(v << 16); }
inline float bf16_pair_hi(uint32_t v) { return bits_to_f32(v & 0xffff0000u); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// As f32_to_bf16, but a subnormal input becomes a zero of its sign first: what AVX512_BF16's vcvtneps2bf16
// does (it always treats denormals as zero). Branch-free, so the per-ISA loops over it vectorize.
inline uint16_t f32_to_bf16_daz(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint32_t ax = x & 0x7fffffffu;
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  r = ax > 0x7f800000u ? ((x >> 16) | 0x40u) : r;
  r = ax < 0x00800000u ? ((x >> 16) & 0x8000u) : r;
  return static_cast<uint16_t>(r);
}

}  // namespace cachet
