// Packed weights for the integer decode/prefill path of the 8-bit and 4-bit block types.
//
// At load time a Q4_0 / Q4_1 / Q8_0 matrix is repacked into groups of 16 rows. Within a group, each
// 32-element block stores the 16 rows' scales side by side and their quants interleaved so that one
// 64-byte load holds 4 consecutive elements of every row: lane r of a 16 x int32 vector is row r. The
// activations are quantized per 32-block to int8 (ActQ8). A row's dot product is then
//
//   acc = 0;  for each block b:  isum = sum_i w_q[i] * x_q[i]          (exact int32)
//                               acc = fma(float(isum), d_w * d_x, acc)
//                               Q4_1 only: acc = fma(m_w, d_x * float(sum_i x_q[i]), acc)  (ActQ8::ds)
//
// one lane per row, blocks in order, no horizontal reduction. Every implementation (scalar, AVX2,
// AVX-512) performs exactly these float operations per (row, token), so results are bitwise identical
// across ISAs, thread counts and batch sizes (decode vs prefill).
//
// Block layouts within a group (f16 scales; quants as unsigned bytes):
//   Q4_0: d[16] (32 B) | qs[4][16][4] (256 B): byte (j, r, i) = q[r][4j+i] | q[r][16+4j+i] << 4,  w = (q-8)*d
//   Q4_1: d[16] | m[16] (32 B) | qs as Q4_0,                                                   w = q*d + m
//   Q8_0: d[16] | qs[8][16][4] (512 B): byte (j, r, i) = q[r][4j+i] + 128 (int8 biased to uint8),  w = q*d
// The unsigned weights (Q4 nibbles, biased Q8) are undone per block with a bias term c * sum(x_q):
// c = 8 for Q4_0, 128 for Q8_0, 0 for Q4_1 (whose zero point is the separate m term).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace cachet {

constexpr int kPackRows = 16;

// One quantized activation block: x[i] ~ d * q[i].
struct ActQ8 {
  float d;
  int32_t sum;  // sum of q
  float ds;     // d * float(sum), for Q4_1's zero-point term
  int8_t q[32];
};
static_assert(sizeof(ActQ8) == 44);

bool packable(DType t);
// Bytes of one 32-element block of a 16-row group.
size_t packed_block_bytes(DType t);
// Integer bias of the stored unsigned weights (see above).
int packed_bias(DType t);

// Repacks rows [0, n_rows) (n_rows <= 16; missing rows are zero) of `src` (stored rows of K elements,
// row_bytes apart) into one group of K/32 blocks at dst (K/32 * packed_block_bytes(t) bytes).
void repack_group(DType t, const uint8_t* src, size_t row_bytes, int n_rows, int64_t k, uint8_t* dst);

}  // namespace cachet
