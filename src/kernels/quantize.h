// f32 -> stored type conversion (round to nearest; ggml's reference rules for the block types). Used by
// the GGUF writer (fixtures now, `cachet quantize` later). Scalar: this runs once per model, not per token.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "cachet/status.h"

namespace cachet {

// Writes row_bytes(t, n) bytes to dst. n must be a multiple of the type's block size.
Status quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace cachet
