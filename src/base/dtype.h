// Tensor element types, numbered as in ggml/GGUF. Every type GGUF defines is known here (so a loader can
// check a file's layout); which ones cachet can compute with is a separate question (dtype_computable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace cachet {

enum class DType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39, kNVFP4 = 40, kQ1_0 = 41,
};

struct DTypeTraits {
  const char* name;
  int64_t block_size;  // elements per block
  size_t block_bytes;  // bytes per block
};

// nullopt for a number GGUF does not define.
std::optional<DTypeTraits> dtype_traits(uint32_t raw);
const DTypeTraits& traits(DType t);
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(const std::string& name);

// Bytes of a row of n elements; nullopt when n is not a whole number of blocks or the size overflows.
std::optional<size_t> row_bytes(DType t, int64_t n);

// Types the matmul kernels compute with.
bool dtype_computable(DType t);

}  // namespace cachet
