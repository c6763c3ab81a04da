// ggml's block layouts, byte for byte as stored in GGUF files.
#pragma once

#include <cstdint>

namespace cachet {

constexpr int kQK = 32;  // elements per block of the *_0 / *_1 types

struct BlockQ8_0 {
  uint16_t d;        // fp16 scale
  int8_t qs[kQK];    // w = qs[j] * d
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;            // fp16 scale
  uint8_t qs[kQK / 2];   // element j < 16: low nibble of qs[j]; j >= 16: high nibble of qs[j-16]; w = (q-8)*d
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  uint16_t d;            // fp16 scale
  uint16_t m;            // fp16 minimum
  uint8_t qs[kQK / 2];   // nibbles as in Q4_0; w = q*d + m
};
static_assert(sizeof(BlockQ4_1) == 20);

}  // namespace cachet
