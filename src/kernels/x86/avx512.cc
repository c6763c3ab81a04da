// AVX-512 (F, BW, VL, DQ, VNNI) kernels: 16 f32 lanes. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mavx512vnni -mf16c -mfma; only called when cpuid says the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/quant_blocks.h"

namespace cachet::avx512 {

namespace {

struct V {
  using reg = __m512;
  static constexpr Isa kIsa = Isa::kAvx512;
  static constexpr int kW = 16;
  static constexpr int kMR = 4;  // gemm register block: 4 x 4 accumulators + 8 operands <= 32 registers
  static constexpr int kNR = 4;
  // Attention tile: K rows per pass and query heads sharing them (kHeadsPerPass x kPB accumulators).
  static constexpr int kPB = 8;
  static constexpr int kHeadsPerPass = 3;

  static __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg load_tail(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static void store(float* p, reg r) { _mm512_storeu_ps(p, r); }
  static void store_tail(float* p, reg r, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), r); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static float reduce(reg r) { return _mm512_reduce_add_ps(r); }

  static reg cvt_f16(__m256i h) { return _mm512_cvtph_ps(h); }
  static reg cvt_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

  template <DType T>
  static reg load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == DType::kF32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
    if constexpr (T == DType::kF16)
      return cvt_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k)));
    if constexpr (T == DType::kBF16)
      return cvt_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k)));
  }
  template <DType T>
  static reg load_w_tail(const uint8_t* row, int64_t k, int64_t n) {
    if constexpr (T == DType::kF32) return _mm512_maskz_loadu_ps(tail_mask(n), reinterpret_cast<const float*>(row) + k);
    __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), reinterpret_cast<const uint16_t*>(row) + k);
    if constexpr (T == DType::kF16) return cvt_f16(h);
    if constexpr (T == DType::kBF16) return cvt_bf16(h);
  }

  static void dequant_q8_0(const BlockQ8_0* b, reg* out) {
    reg d = _mm512_set1_ps(_cvtsh_ss(b->d));
    __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16));
    out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
    out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
  }
  static void nibbles(const uint8_t* qs, __m512i* lo, __m512i* hi) {
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    __m128i m = _mm_set1_epi8(0x0f);
    *lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, m));
    *hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m));
  }
  static void dequant_q4_0(const BlockQ4_0* b, reg* out) {
    reg d = _mm512_set1_ps(_cvtsh_ss(b->d));
    __m512i lo, hi;
    nibbles(b->qs, &lo, &hi);
    __m512i eight = _mm512_set1_epi32(8);
    out[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), d);
    out[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), d);
  }
  static void dequant_q4_1(const BlockQ4_1* b, reg* out) {
    reg d = _mm512_set1_ps(_cvtsh_ss(b->d));
    reg m = _mm512_set1_ps(_cvtsh_ss(b->m));
    __m512i lo, hi;
    nibbles(b->qs, &lo, &hi);
    out[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m);
    out[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m);
  }

  static reg kv_load(DType t, const uint8_t* row, int j) {
    return t == DType::kF16 ? load_w<DType::kF16>(row, j) : load_w<DType::kF32>(row, j);
  }
  static reg kv_load_tail(DType t, const uint8_t* row, int j, int n) {
    return t == DType::kF16 ? load_w_tail<DType::kF16>(row, j, n) : load_w_tail<DType::kF32>(row, j, n);
  }
  static void store_f16(uint16_t* dst, reg r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }

  // Integer path (kernels/packed.h): one 16-row group at once, lane r = row r; VNNI dot products.
  using ireg = __m512i;
  static constexpr int kFloatTokens = 8;  // packed bf16 path without vdpbf16ps: 2 x NT accumulators
  static constexpr int kPackHalves = 1;
  static constexpr int kPackTokens = 8;  // 8 weight registers + 8 accumulators + operands fit 32 registers (16 measured slower)
  static constexpr int kQ8Bias = 128;  // vpdpbusd takes the biased (unsigned) Q8 weights as they are
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg abs(reg a) { return _mm512_abs_ps(a); }
  static float reduce_max(reg a) { return _mm512_reduce_max_ps(a); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static int32_t round_store_i8(reg v, int8_t* dst) {
    __m512i i = _mm512_cvtps_epi32(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(i));
    return _mm512_reduce_add_epi32(i);
  }
  // The bf16 in the low / high half of each dword, as f32.
  static reg bf16_lo(ireg v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
  static reg bf16_hi(ireg v) {
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static ireg load_i(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static ireg nibble_lo(ireg q) { return _mm512_and_si512(q, _mm512_set1_epi8(0x0f)); }
  static ireg nibble_hi(ireg q) { return _mm512_and_si512(_mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0f)); }
  static ireg set1_i(int32_t v) { return _mm512_set1_epi32(v); }
  // The 4 activation bytes are broadcast straight from memory (an embedded {1to16} operand of vpdpbusd).
  static ireg bcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static ireg dot4_u4(ireg acc, ireg w, const int8_t* x4) { return _mm512_dpbusd_epi32(acc, w, bcast4(x4)); }
  static ireg dot4_q8(ireg acc, ireg w, const int8_t* x4) { return _mm512_dpbusd_epi32(acc, w, bcast4(x4)); }
  static ireg and_i(ireg a, ireg b) { return _mm512_and_si512(a, b); }
  static ireg or_i(ireg a, ireg b) { return _mm512_or_si512(a, b); }
  static ireg set1_i8(char v) { return _mm512_set1_epi8(v); }
  template <int N>
  static ireg shl16(ireg a) { return _mm512_slli_epi16(a, N); }
  template <int N>
  static ireg shr16(ireg a) { return _mm512_srli_epi16(a, N); }
  // 16 bytes at p as floats (unsigned / signed).
  static reg cvt_u8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static reg cvt_i8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static reg cvt_i(ireg i) { return _mm512_cvtepi32_ps(i); }
  static reg load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  // Attention tile helpers. Lane i of the result = the sum of v[i]'s 16 lanes (a transpose-and-add tree:
  // 15 adds and 30 shuffles instead of 16 separate horizontal reductions).
  static reg reduce_lanes(const reg* v) {
    reg x[8], y[4], z[2];
    for (int i = 0; i < 8; ++i)
      x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; ++i)
      y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xee));
    for (int i = 0; i < 2; ++i)
      z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xdd));
  }
  // Lanes >= n become `fill`.
  static reg keep_first(reg r, int n, float fill) {
    return _mm512_mask_blend_ps(n >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(n), _mm512_set1_ps(fill), r);
  }
  static reg min(reg a, reg b) { return _mm512_min_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg round_nearest(reg x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static reg pow2i(reg n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static reg select_below(reg x, float limit, reg if_below, reg otherwise) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_LT_OQ), otherwise, if_below);
  }
};

}  // namespace

#include "kernels/x86/kernels_impl.inc"

}  // namespace cachet::avx512
