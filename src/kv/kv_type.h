// KV cache element types, chosen separately for K and V (docs/kv_quant.md):
//   f32, f16, bf16     one value per element
//   q8_0               ggml's Q8_0 blocks: per 32 elements an f16 scale and 32 int8 (8.5 bits/element)
//   q4_0               ggml's Q4_0 blocks: per 32 elements an f16 scale and 32 4-bit codes (4.5 bits/element)
//   q4r                ours: each 32-element block turned by a fixed orthonormal rotation (random signs, then a
//                      Walsh-Hadamard transform) before Q4_0 quantization. A few outlier channels (keys have
//                      them, and q4_0 spends a block's whole range on them) spread over the block, so every
//                      element keeps more of its bits; same 4.5 bits/element as q4_0. Attention rotates the
//                      query by the same blocks (q.k is unchanged by a rotation) and rotates the output back.
// Rows hold the n_head_kv * head_dim values of one position; quantized types need head_dim % 32 == 0 (blocks never
// straddle heads). Quantization and dequantization here are portable C++ (one implementation, the same bits on
// every CPU); the attention kernels read the blocks in place (kernels.h attn_tile).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/dtype.h"

namespace cachet {

enum class KvType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4R };

const char* kv_type_name(KvType t);                          // "f16", "q8_0", ...
std::optional<KvType> kv_type_from_name(const std::string& s);
const char* kv_type_names();                                 // "f32, f16, bf16, q8_0, q4_0, q4r"
KvType kv_type_of(DType t);                                  // kF32 / kF16 / kBF16 (others: CHECK)

bool kv_quantized(KvType t);
// Elements per block (1 for float types) and bytes per block.
int kv_block(KvType t);
size_t kv_block_bytes(KvType t);
// Bytes of a row of n elements (n a multiple of kv_block(t)).
size_t kv_row_bytes(KvType t, int64_t n);
// The block layout the attention kernels read (q4r is q4_0's layout in the rotated basis).
DType kv_layout(KvType t);
bool kv_rotated(KvType t);

// dst = the n values of src as type t (n a multiple of kv_block(t)); q4r rotates each block first.
void kv_quantize_row(KvType t, const float* src, uint8_t* dst, int64_t n);
// dst = the values a row of type t holds; q4r: turned back to the original basis.
void kv_dequantize_row(KvType t, const uint8_t* src, float* dst, int64_t n);

// The q4r rotation, in place, block by block (n a multiple of 32): kv_rotate is R, kv_unrotate is R^T = R^-1.
void kv_rotate(float* x, int64_t n);
void kv_unrotate(float* x, int64_t n);

}  // namespace cachet
