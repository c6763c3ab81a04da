// KV cache element types, chosen separately for K and V (docs/kv_quant.md):
//   f32, f16, bf16     one value per element
//   q8_0               ggml's Q8_0 blocks: per 32 elements an f16 scale and 32 int8 (8.5 bits/element)
//   q4_0               ggml's Q4_0 blocks: per 32 elements an f16 scale and 32 4-bit codes (4.5 bits/element)
//   q4r                ours, 4.5 bits/element: IQ4_NL blocks (an f16 scale and 32 codes on 16 non-linear levels,
//                      denser near zero) with the scale of least squared error (either sign: the grid is
//                      asymmetric), where q4_0 takes max / -8 on its uniform grid
// The quantized types hold each head turned by a fixed orthonormal rotation (random signs, then a Walsh-Hadamard
// transform over the largest power of two dividing the head size, at most 256), as llama.cpp does for its
// quantized caches: a few outlier channels (keys have them; a block's range is spent on them) spread over the
// head, and a rotated block's values are close to Gaussian. Attention turns the query alike (q.k is unchanged by
// a rotation) and turns the output back.
// Rows hold the n_head_kv * head_dim values of one position; quantized types need head_dim % 32 == 0 (blocks never
// straddle heads). Quantization and dequantization here are portable C++ (one implementation, the same bits on
// every CPU).
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
// The block layout the kernels read (q4r: IQ4_NL).
DType kv_layout(KvType t);
bool kv_rotated(KvType t);

// dst = the n values of src as type t (n a multiple of kv_block(t) and of head_dim); quantized types turn each
// head first.
void kv_quantize_row(KvType t, const float* src, uint8_t* dst, int64_t n, int head_dim);
// dst = the values a row of type t holds, turned back to the original basis.
void kv_dequantize_row(KvType t, const uint8_t* src, float* dst, int64_t n, int head_dim);
// dst = the values as stored: quantized types still in the turned basis (what attention reads).
void kv_dequantize_row_raw(KvType t, const uint8_t* src, float* dst, int64_t n);

// The rotation of the quantized types, in place, head by head (n a multiple of head_dim, head_dim of 32): kv_rotate is R,
// kv_unrotate is R^T = R^-1. Blocks of kv_rotation_size(head_dim).
int kv_rotation_size(int head_dim);
void kv_rotate(float* x, int64_t n, int head_dim);
void kv_unrotate(float* x, int64_t n, int head_dim);

}  // namespace cachet
