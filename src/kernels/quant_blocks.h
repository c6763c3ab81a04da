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

// IQ4_NL's 16 levels (ggml's kvalues_iq4nl): an IQ4_NL block is a Q4_0 block whose code c means d * grid[c].
// The KV cache's q4r type is this layout (kv/kv_type.h).
alignas(16) inline constexpr int8_t kIq4nlGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                     1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4 (the OCP microscaling format): 32 E2M1 values (codes as in Q4_0's nibbles) behind one E8M0 exponent e.
// kMxfp4Grid holds the values doubled (ggml's kvalues_mxfp4), so w = grid[c] * 2^(e - 128) (mxfp4_scale).
struct BlockMXFP4 {
  uint8_t e;             // E8M0: the block's scale is 2^(e - 127)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);
alignas(16) inline constexpr int8_t kMxfp4Grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128), exactly (a subnormal float for e < 2).
inline float mxfp4_scale(uint8_t e) {
  uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

struct BlockQ4_1 {
  uint16_t d;            // fp16 scale
  uint16_t m;            // fp16 minimum
  uint8_t qs[kQK / 2];   // nibbles as in Q4_0; w = q*d + m
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;            // fp16 scale
  uint8_t qh[4];         // bit j (little-endian u32) = bit 4 of element j
  uint8_t qs[kQK / 2];   // low 4 bits, nibbles as in Q4_0; w = (q-16)*d
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;            // fp16 scale
  uint16_t m;            // fp16 minimum
  uint8_t qh[4];         // as Q5_0
  uint8_t qs[kQK / 2];   // as Q5_0; w = q*d + m
};
static_assert(sizeof(BlockQ5_1) == 24);

// The K-quants: 256-element super-blocks with per-sub-block integer scales under fp16 super-scales.
constexpr int kQKK = 256;

// 16 sub-blocks of 16: w = d*(scales[j] & 15)*q - dmin*(scales[j] >> 4), q in 0..3.
// Element 128*h + 32*s + 16*k + l (h < 2, s < 4, k < 2, l < 16): bits 2s..2s+1 of qs[32h + 16k + l],
// sub-block 8h + 2s + k.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 sub-blocks of 16: w = d*(s[j]-32)*(q-4), q = low 2 bits as Q2_K | hmask bit << 2, where the hmask bit
// of element 128*h + 32*s + 16*k + l is bit 4h+s of hmask[16k + l]; s[j] 6-bit, packed in 12 bytes:
// low 4 bits: j < 8 low nibble of scales[j], else high nibble of scales[j-8]; high 2 bits: bits 2(j/4)..
// of scales[8 + j%4].
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// 8 sub-blocks of 32 with 6-bit scale sc and min m (12 bytes, see q4k_scale_min): w = d*sc*q - dmin*m,
// q in 0..15. Element 64*p + 32*k + l: low (k=0) or high (k=1) nibble of qs[32p + l], sub-block 2p + k.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// As Q4_K with a fifth bit: bit 2p + k of qh[l] is bit 4 of element 64*p + 32*k + l; q in 0..31.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 sub-blocks of 16 with int8 scales: w = d*scales[j]*(q-32), q in 0..63. Element 128*h + 32*s + l
// (s < 4, l < 32): low 4 bits from ql[64h + 32*(s%2) + l] (low nibble for s < 2, high for s >= 2), high 2 bits
// = bits 2s..2s+1 of qh[32h + l]; sub-block 8h + 2s + l/16.
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// IQ4_XS: a super-block of 256 in 8 sub-blocks of 32, each an IQ4_NL block's codes (element l < 16 the low
// nibble of qs[16j + l], l >= 16 the high one of qs[16j + l - 16]) with a 6-bit scale: w = d*(ls_j - 32)*grid[c].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;     // bits 2j, 2j+1: the high 2 bits of ls_j
  uint8_t scales_l[4];   // nibble j % 2 of byte j / 2: the low 4 bits of ls_j
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// Sub-block j's signed scale ls_j - 32 (-32..31) of an IQ4_XS block.
inline int iq4xs_scale(const BlockIQ4_XS& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}

// Sub-block j's (scale, min) of a Q4_K / Q5_K block: 6 bits each, packed in 12 bytes.
inline void q4k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Sub-block j's 6-bit scale of a Q3_K block (0..63; the weight uses scale - 32).
inline int q3k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace cachet
