// The AVX-512 table with AVX512_BF16 for the packed float path: vdpbf16ps multiplies 32 bf16 pairs into 16 f32
// lanes per instruction, twice the rate of f32 FMA (measured here: 234 vs 117 GFLOP/s per core). The AVX-512
// sources compiled again with -mavx512bf16 added, so that the whole table is a constant (nothing here runs
// before dispatch); only chosen when cpuid reports AVX512_BF16. F16/BF16 weights are packed as bf16 pairs
// (FloatPack::kBf16Pairs); everything else is the AVX-512 table's arithmetic, bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/quant_blocks.h"

namespace cachet::avx512_bf16 {

namespace {

#include "kernels/x86/avx512_ops.inc"

}  // namespace

#include "kernels/x86/kernels_impl.inc"

namespace {

void round_bf16_vdp(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    std::memcpy(out + i, &h, 32);
  }
  for (; i < n; ++i) out[i] = f32_to_bf16_daz(x[i]);
}

// NT tokens x 16 rows, two chains (even / odd pairs) per token; x is broadcast a pair at a time.
template <int NT>
void dot_n(const uint8_t* group, int64_t n_pairs, const uint32_t* x, int64_t x_stride, float* out,
           int64_t out_stride) {
  __m512 c0[NT], c1[NT];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) c0[t] = c1[t] = _mm512_setzero_ps();
  const auto bcast = [&](int t, int64_t p) {
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[t * x_stride + p])));
  };
  int64_t p = 0;
  for (; p + 2 <= n_pairs; p += 2) {
    // Every walk, not only one token's: with 8 tokens the group's arithmetic (one vdpbf16ps a cycle) takes as long
    // as its read from memory, and unprefetched the two added up (bench_kernels packed_dot F16/8/64, from memory:
    // 7.9 -> 5.3 ms; F16/9/64 9.7 -> 7.3).
    prefetch_ahead(group + p * kPackRows * 4, 2 * kPackRows * 4);
    const auto w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(group + p * kPackRows * 4));
    const auto w1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(group + (p + 1) * kPackRows * 4));
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) c0[t] = _mm512_dpbf16_ps(c0[t], w0, bcast(t, p));
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) c1[t] = _mm512_dpbf16_ps(c1[t], w1, bcast(t, p + 1));
  }
  if (p < n_pairs) {
    const auto w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(group + p * kPackRows * 4));
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) c0[t] = _mm512_dpbf16_ps(c0[t], w0, bcast(t, p));
  }
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + t * out_stride, _mm512_add_ps(c0[t], c1[t]));
}

constexpr int kTokens = 8;  // 16 accumulators + 2 weight registers; broadcasts are memory operands

void packed_dot_bf16_vdp(const uint8_t* group, int64_t n_pairs, const uint32_t* x, int64_t x_stride, int n_tokens,
                         float* out, int64_t out_stride) {
  even_walks<kTokens>(n_tokens, [&](int t, int nt) {
    with_tokens<kTokens>(nt, [&]<int NT>() {
      dot_n<NT>(group, n_pairs, x + t * x_stride, x_stride, out + t * out_stride, out_stride);
    });
  });
}

constexpr Kernels make_table() {
  Kernels k = kTable;
  k.isa = Isa::kAvx512Bf16;
  k.float_pack = FloatPack::kBf16Pairs;
  k.round_bf16 = round_bf16_vdp;
  k.packed_dot_bf16 = packed_dot_bf16_vdp;
  return k;
}

}  // namespace

constinit const Kernels kKernels = make_table();

}  // namespace cachet::avx512_bf16
