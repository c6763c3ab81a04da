// The query of integer Q.K (kernels.h attn_tile with block-quantized keys), in two int8 parts per 32-block.
// A single int8 per element (ggml's Q8_0 activation rule) adds its own rounding to every score: on the default
// model it raised the q8_0 cache's KL divergence from 0.0064 to 0.0070, above llama.cpp's 0.0068 (docs/kv_quant.md).
// Here each block is scaled to int16 range, x ~ d * xi with |xi| <= 127 * 256, and split as xi = 256 * hi + lo,
// hi and lo in [-127, 127] (a lo of -128 is taken as -127: maddubs' sign trick cannot negate -128), so that Q.K
// stays two int8 dot products (vpdpbusd: the hi sums shifted left by 8 are the accumulator of the lo ones) and
// the query's rounding is about 1/32512 of its block's largest value.
#pragma once

#include <cstdint>

#include "kernels/packed.h"

namespace cachet {

// The split factor: xi = kQueryHiScale * hi + lo.
constexpr int kQueryHiScale = 256;

// x[0..n) (n a multiple of 32) -> 2 * n / 32 blocks: out[2b] holds hi (its sum in .sum), out[2b + 1] holds lo
// (.sum) and the block's scale d (.d). Portable C++: the same bits on every CPU.
void quantize_query(const float* x, int64_t n, ActQ8* out);

}  // namespace cachet
