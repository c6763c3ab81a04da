// Test helper: one row of d values stored as attn_tile / attn_chunk read them in type t.
#pragma once

#include <gtest/gtest.h>

#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kv/kv_type.h"

namespace cachet::testing {

inline void store_kv_row(DType t, const float* x, uint8_t* dst, int d) {
  if (t == DType::kIQ4_NL) {
    kv_quantize_row(KvType::kQ4R, x, dst, d, d);  // IQ4_NL blocks (of the turned values)
  } else if (t == DType::kQ8_0 || t == DType::kQ4_0) {
    ASSERT_TRUE(quantize_row(t, x, dst, d).is_ok());
  } else if (t == DType::kBF16) {
    for (int j = 0; j < d; ++j) reinterpret_cast<uint16_t*>(dst)[j] = f32_to_bf16(x[j]);
  } else {
    ref::kKernels.kv_store(t, x, dst, d);
  }
}

}  // namespace cachet::testing
