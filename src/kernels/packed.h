// Packed weights for the integer decode/prefill path of the quantized types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4).
//
// At load time a matrix is repacked into groups of 16 rows. Within a group, each 32-element block stores
// the 16 rows' scales side by side and their quants interleaved so that one 64-byte load holds 4 consecutive
// elements of every row: lane r of a 16 x int32 vector is row r. The activations are quantized per
// 32-block to int8 (ActQ8). A row's dot product is a float accumulation over its blocks in order, each
// block's integer dot product exact in int32 and then scaled (the formulas below), one lane per row, no
// horizontal reduction. Every implementation (scalar, AVX2,
// AVX-512) performs exactly these float operations per (row, token), so results are bitwise identical
// across ISAs, thread counts and batch sizes (decode vs prefill).
//
// Layouts (PackedLayout): a group is a run of super-blocks, each `header` bytes then `blocks` 32-element
// blocks of `block_bytes` (the 32-block types have no header and one block per super-block). In a block,
// per-row values sit side by side (16 of them), and the quants of step s (elements 4s..4s+3 of each row) form
// one 64-byte vector, byte r*4+i = element 4s+i of row r:
//   Q8_0: d[16] f16 | q[8 steps][64] (int8 + 128)                                       w = (q-128)*d
//   Q4_0: d[16] | nib[4][64]: step s < 4 the low nibbles of vector s, step s >= 4 the high ones of s-4   w = (q-8)*d
//   IQ4_NL: d[16] | nib (the 4-bit codes c)      q = grid[c] + 128 (a byte shuffle), then as Q8_0: w = (q-128)*d
//   MXFP4:  d[16] | nib (E2M1 codes c)    q = grid[c] + 12 (a byte shuffle; grid: E2M1 values doubled, |grid| <= 12),
//           then as Q4_0 with bias 12: w = (q-12)*d, d = 2^(e-128) as f16 (exact for e in 104..143: mxfp4_packed_scale)
//   Q4_1: d[16] | m[16] f16 | nib                                                        w = q*d + m
//   Q5_0: d[16] | nib | hi[64]: bit s of byte r*4+i = bit 4 of element 4s+i               w = (q-16)*d
//   Q5_1: d[16] | m[16] | nib | hi                                                       w = q*d + m
//   Q4_K: header D[16] Dmin[16] f16; block sc[16] u8 | mn[16] u8 | nib                    w = D*sc*q - Dmin*mn
//   Q5_K: as Q4_K, block sc | mn | nib | hi
//   Q6_K: header D[16]; block sc0[16] sc1[16] int8 (elements 0..15, 16..31) | nib | hi2[2][64]: bits 2u, 2u+1 of
//         byte r*4+i of vector k = bits 4, 5 of element 4(4k+u)+i                         w = D*sc*(q-32)
//   Q2_K: header D[16] Dmin[16] f16; block sc0 sc1 mn0 mn1 [16] u8 (elements 0..15, 16..31) | q2[2][64]: bits
//         2u, 2u+1 of byte r*4+i of vector k = element 4(4k+u)+i (0..3)                  w = D*sc*q - Dmin*mn
//   Q3_K: header D[16]; block sc0[16] sc1[16] int8 | q2 (the low 2 bits, as Q2_K) | hi[64]: bit s of byte r*4+i
//         = bit 2 of element 4s+i                                                          w = D*sc*(q-4)
// For a block, with isum = sum_i (q_i - bias) * x_q[i] over its elements (exact int32):
//   *_0, IQ4_NL:  acc = fma(isum, d*d_x, acc);         *_1: that, then acc = fma(m, ActQ8::ds, acc)
//   Q4_K, Q5_K: s = D*float(sc); acc = fma(isum, s*d_x, acc); acc = fma(-(Dmin*float(mn)), ActQ8::ds, acc)
//   Q6_K, Q3_K: per half h (16 elements, bias 32 / 4 times ActQ8::hsum[h]): acc = fma(isum_h, (D*float(sc_h))*d_x, acc)
//   Q2_K: per half h, that (no bias), then acc = fma(-(Dmin*float(mn_h)), d_x*float(ActQ8::hsum[h]), acc)
//
// That is KSums::kPerBlock, every table's arithmetic for the 32-block types. For the K types a table may instead
// take KSums::kPerSuper (Kernels::k_sums; the AVX2 table, where the per-block float work was a fifth of a
// prefill tile's instructions): the scales of a super-block's activation blocks are its largest scale d_S times
// 2^-e_j, e_j in 0..3 (quantize_act with blocks_per_scale 8; act_scale_shift), so its sub-blocks add up in
// integers and the float work is once per super-block. llama.cpp's Q8_K takes one scale per 256 elements; the
// powers of two give a block far below the super-block's peak up to 3 more bits, which keeps the int8 path's
// error below llama.cpp's (tests/python/test_architectures.py). Per super-block, with k_j = 3 - e_j
// (ActQ8::shift), u = d_S / 8 (= d_j 2^-k_j, exactly) and isum_j, sum_j as above per 32-block j:
//   Q4_K, Q5_K: S = sum_j sc_j * isum_j * 2^k_j, M = sum_j mn_j * sum_j * 2^k_j (exact int32);
//               acc = fma(float(S), D*u, acc); acc = fma(-float(M), Dmin*u, acc)
// Q6_K (and Q3_K, Q2_K) take the same activations (one matmul may feed Q4_K and Q6_K weights) in the
// per-block arithmetic above, each block with its own d_x (super_sums).
// A row then differs from the kPerBlock tables by the activation rounding, within the tolerance
// docs/numerics.md gives; it is the same bits in the scalar reference (ref::packed_dot_super) and whatever the
// token and thread counts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace cachet {

constexpr int kPackRows = 16;

// One quantized activation block: x[i] ~ d * q[i].
struct ActQ8 {
  float d;
  float ds;          // d * float(sum), for the zero-point terms
  int16_t sum;       // sum of q (at most 32 * 127 in magnitude)
  int16_t hsum[2];   // sums of q[0..16) and q[16..32), for Q6_K's per-half bias
  uint8_t shift;     // super-block activations (KSums::kPerSuper): k, with d = u 2^k; else 0
  uint8_t pad = 0;
  int8_t q[32];
};
static_assert(sizeof(ActQ8) == 48);

struct PackedLayout {
  int blocks = 0;      // 32-element blocks per super-block
  size_t header = 0;   // bytes before the first block of a super-block
  size_t block_bytes = 0;  // bytes of one 32-element block of 16 rows
  size_t qs = 0;       // offset of the quants within a block
  size_t hi = 0;       // offset of the high-bit plane (0: none)
  int bias = 0;        // integer zero point of the stored unsigned quants
  constexpr size_t super_bytes() const { return header + blocks * block_bytes; }
};

// Float weights (F16, BF16) are packed in one of two ways, chosen by the kernel table (Kernels::float_pack):
//
// FloatPack::kBf16Pairs (the AVX512_BF16 table: vdpbf16ps multiplies bf16 pairs at twice the rate of f32 FMA).
// A group stores, for each pair p of k (elements 2p, 2p+1), the 16 rows' pairs side by side: dword r (64 bytes
// per pair) = w[r][2p] | w[r][2p+1] << 16, as bf16. F16 weights are rounded to bf16 at repack (round to nearest
// even), subnormals become zeros of their sign (the hardware reads them as zero anyway), an odd k is padded with
// a zero. Activations are rounded the same way (Kernels::round_bf16) into pairs. For row r and token t, two f32
// chains over the pairs p = 0, 1 (mod 2) in increasing p, each step c = (c + w[2p+1] * x[2p+1]) + w[2p] * x[2p]
// (the products are exact in f32, so this is two roundings: exactly what one lane of vdpbf16ps does), and the
// result is c0 + c1. The scalar reference computes exactly this (ref::packed_dot_bf16); the one difference left
// is that vdpbf16ps flushes a partial sum that falls below 2^-126 to zero.
//
// FloatPack::kHalfRows (every other table: F16C conversion, or a shift for bf16, then f32 FMA). The weights keep
// the file's 16-bit type exactly: for each element e of k, the 16 rows' values side by side (32 bytes per
// element). Activations are the f32 rows as they are. For row r and token t, two f32 chains over the elements
// e = 0, 1 (mod 2) in increasing e, c = fma(w[r][e], x[e], c), and the result is c0 + c1: the same bits in the
// scalar, AVX2 and AVX-512 tables.
//
// The two differ by the bf16 rounding of weights and activations (a relative error of up to 2^-9 per product,
// which averages out over a row: docs/quantize.md measures it as +0.02% perplexity).
enum class FloatPack { kBf16Pairs, kHalfRows };
// How a table sums the K types (see above).
enum class KSums { kPerBlock, kPerSuper };

bool packable(DType t);          // every type below, block or float
bool packed_is_float(DType t);   // F16, BF16
// The type whose packed layout and kernel a type uses: itself, except
// - IQ4_XS, repacked into IQ4_NL's: its codes as they are, each 32-block's scale d * (ls - 32) rounded to f16 (a
//   relative change of at most 2^-11 per 32-block, far inside the int8 activations' rounding), reading 1.06x
//   the bytes of the file;
// so that they run the integer kernels instead of the float path (docs/quantize.md).
constexpr DType packed_as(DType t) {
  return t == DType::kIQ4_XS ? DType::kIQ4_NL : t;
}
// Whether a packed type's kernels take Q8_0's steps (biased unsigned int8 quants): Q8_0 as stored, IQ4_NL
// after its codes' lookup.
constexpr bool packed_q8_steps(DType t) { return packed_as(t) == DType::kQ8_0 || packed_as(t) == DType::kIQ4_NL; }
// The packed types whose 4-bit codes index a 16-level grid (a byte shuffle in the kernels): IQ4_NL's levels span
// int8 (grid + 128, then Q8_0's steps); MXFP4's are small (|grid| <= 12: grid + 12, then Q4_0's cheaper steps,
// whose unsigned-by-signed byte products cannot saturate at 24 x 127).
constexpr bool packed_lut(DType t) { return packed_as(t) == DType::kIQ4_NL || t == DType::kMXFP4; }
// Block types only; a type without a packed layout is a caller's bug (checked in packed_group_bytes).
constexpr PackedLayout packed_layout(DType t) {
  switch (packed_as(t)) {
    case DType::kQ8_0: return {1, 0, 32 + 512, 32, 0, 128};
    case DType::kQ4_0: return {1, 0, 32 + 256, 32, 0, 8};
    case DType::kIQ4_NL: return {1, 0, 32 + 256, 32, 0, 128};
    case DType::kMXFP4: return {1, 0, 32 + 256, 32, 0, 12};
    case DType::kQ4_1: return {1, 0, 64 + 256, 64, 0, 0};
    case DType::kQ5_0: return {1, 0, 32 + 256 + 64, 32, 32 + 256, 16};
    case DType::kQ5_1: return {1, 0, 64 + 256 + 64, 64, 64 + 256, 0};
    case DType::kQ4_K: return {8, 64, 32 + 256, 32, 0, 0};
    case DType::kQ5_K: return {8, 64, 32 + 256 + 64, 32, 32 + 256, 0};
    case DType::kQ6_K: return {8, 32, 32 + 256 + 128, 32, 32 + 256, 32};
    case DType::kQ2_K: return {8, 64, 64 + 128, 64, 0, 0};
    case DType::kQ3_K: return {8, 32, 32 + 128 + 64, 32, 32 + 128, 4};
    default: return {};
  }
}
// The 32-blocks that share one activation scale in a matmul over weights of type t under `sums`: 1, or the
// super-block's 8 for the K types under kPerSuper.
constexpr int act_blocks_per_scale(DType t, KSums sums) {
  return sums == KSums::kPerSuper && packed_layout(t).blocks > 1 ? packed_layout(t).blocks : 1;
}
// Whether a matmul over weights of type t sums per super-block under `sums` (Q4_K and Q5_K under kPerSuper;
// Q6_K, Q3_K and Q2_K keep the per-block arithmetic, on the same activations).
constexpr bool super_sums(DType t, KSums sums) {
  return sums == KSums::kPerSuper && (t == DType::kQ4_K || t == DType::kQ5_K);
}
// Super-block activations (kernels/packed.h, KSums::kPerSuper): the shift e_j of a block whose largest |x| is
// a_j, in a super-block whose largest is A and whose scale is d_S = A / 127: the largest e in 0..3 with
// a_j <= A 2^-e (so the block's quants stay within 127 at scale d_S 2^-e); 0 when d_S is so small that d_S 2^-3
// could be subnormal.
inline int act_scale_shift(float a_j, float A, float d_S) {
  if (!(d_S >= 0x1p-100f)) return 0;
  int e = 0;
  while (e < 3 && a_j <= A * (0.5f / static_cast<float>(1 << e))) ++e;
  return e;
}
// MXFP4's block scale 2^(e-128) as the packed layout's f16: exact for e in 104..143 (2^-24..2^15), which holds
// every weight block of a real model; below, it rounds to 0 or 2^-24 (the block's weights are then at most
// 12 * 2^-25 in magnitude); above, it is held at 2^15.
uint16_t mxfp4_packed_scale(uint8_t e);
// Bytes of one packed 16-row group of rows of k elements (`fp` matters for the float types only).
size_t packed_group_bytes(DType t, int64_t k, FloatPack fp);

// A 64-byte aligned buffer of at least `bytes` for the calling thread's kernels (a kernel's own re-layout of a group), valid
// until the thread's next call; compiled for the baseline ISA, so the ISA tables need no std templates.
uint8_t* packed_scratch(size_t bytes);

// Repacks rows [0, n_rows) (n_rows <= 16; missing rows are zero) of `src` (stored rows of K elements,
// row_bytes apart) into one group at dst (packed_group_bytes(t, k, fp) bytes).
void repack_group(DType t, const uint8_t* src, size_t row_bytes, int n_rows, int64_t k, FloatPack fp, uint8_t* dst);

}  // namespace cachet
