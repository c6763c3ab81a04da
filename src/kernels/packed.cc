#include "kernels/packed.h"

#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/quant_blocks.h"

namespace cachet {

bool packable(DType t) { return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ8_0; }

size_t packed_block_bytes(DType t) {
  switch (t) {
    case DType::kQ4_0: return 32 + 256;
    case DType::kQ4_1: return 64 + 256;
    case DType::kQ8_0: return 32 + 512;
    default: CACHET_CHECK_MSG(false, "type %s is not packable", dtype_name(t));
  }
  return 0;
}

int packed_bias(DType t) { return t == DType::kQ4_0 ? 8 : t == DType::kQ8_0 ? 128 : 0; }

void repack_group(DType t, const uint8_t* src, size_t row_bytes, int n_rows, int64_t k, uint8_t* dst) {
  CACHET_CHECK(packable(t) && n_rows >= 0 && n_rows <= kPackRows && k % 32 == 0);
  const int64_t n_blocks = k / 32;
  const size_t bb = packed_block_bytes(t);
  std::memset(dst, 0, bb * n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* out = dst + b * bb;
    auto* d = reinterpret_cast<uint16_t*>(out);
    for (int r = 0; r < n_rows; ++r) {
      const uint8_t* row = src + r * row_bytes;
      if (t == DType::kQ8_0) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
        d[r] = blk.d;
        uint8_t* qs = out + 32;
        for (int j = 0; j < 8; ++j)
          for (int i = 0; i < 4; ++i)
            qs[j * 64 + r * 4 + i] = static_cast<uint8_t>(static_cast<int>(blk.qs[4 * j + i]) + 128);
      } else {
        const uint8_t* nib;
        if (t == DType::kQ4_0) {
          const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
          d[r] = blk.d;
          nib = blk.qs;
        } else {
          const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
          d[r] = blk.d;
          reinterpret_cast<uint16_t*>(out + 32)[r] = blk.m;
          nib = blk.qs;
        }
        uint8_t* qs = out + (t == DType::kQ4_0 ? 32 : 64);
        // Element e < 16 is the low nibble of nib[e], element 16 + e the high nibble.
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) qs[j * 64 + r * 4 + i] = nib[4 * j + i];
      }
    }
    // Rows past n_rows: scale 0, and quants equal to the bias so their integer sums are 0 too.
    if (t == DType::kQ8_0) {
      for (int r = n_rows; r < kPackRows; ++r)
        for (int j = 0; j < 8; ++j)
          for (int i = 0; i < 4; ++i) out[32 + j * 64 + r * 4 + i] = 128;
    } else if (t == DType::kQ4_0) {
      for (int r = n_rows; r < kPackRows; ++r)
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) out[32 + j * 64 + r * 4 + i] = 0x88;
    }
  }
}

}  // namespace cachet
