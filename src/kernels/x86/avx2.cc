// AVX2 + FMA + F16C kernels: 8 f32 lanes. Compiled with -mavx2 -mfma -mf16c; only called when cpuid says
// the CPU has them.
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

namespace cachet::avx2 {

namespace {

struct V {
  using reg = __m256;
  static constexpr Isa kIsa = Isa::kAvx2;
  static constexpr int kW = 8;
  static constexpr int kMR = 3;  // gemm register block: 3 x 4 accumulators + 4 operands <= 16 registers
  static constexpr int kNR = 4;
  // Attention tile: K rows per pass and query heads sharing them (kHeadsPerPass x kPB accumulators).
  static constexpr int kPB = 4;
  static constexpr int kHeadsPerPass = 3;

  static __m256i tail_mask(int64_t n) {
    alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
  }

  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg load_tail(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static void store(float* p, reg r) { _mm256_storeu_ps(p, r); }
  static void store_tail(float* p, reg r, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), r); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce(reg r) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  static __m128i load_u16_tail(const uint16_t* p, int64_t n) {
    alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (n > 0) std::memcpy(buf, p, n * sizeof(uint16_t));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
  static reg cvt_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

  template <DType T>
  static reg load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == DType::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
    if constexpr (T == DType::kF16) return _mm256_cvtph_ps(h);
    if constexpr (T == DType::kBF16) return cvt_bf16(h);
  }
  template <DType T>
  static reg load_w_tail(const uint8_t* row, int64_t k, int64_t n) {
    if constexpr (T == DType::kF32) return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + k, tail_mask(n));
    __m128i h = load_u16_tail(reinterpret_cast<const uint16_t*>(row) + k, n);
    if constexpr (T == DType::kF16) return _mm256_cvtph_ps(h);
    if constexpr (T == DType::kBF16) return cvt_bf16(h);
  }

  static void dequant_q8_0(const BlockQ8_0* b, reg* out) {
    reg d = _mm256_set1_ps(_cvtsh_ss(b->d));
    for (int i = 0; i < 4; ++i) {
      __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + 8 * i));
      out[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
  }
  // Nibble values of the 32 elements, 8 per register, in element order.
  static void nibbles(const uint8_t* qs, __m256i* q) {
    __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(raw, m);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m);
    q[0] = _mm256_cvtepu8_epi32(lo);
    q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    q[2] = _mm256_cvtepu8_epi32(hi);
    q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
  }
  static void dequant_q4_0(const BlockQ4_0* b, reg* out) {
    reg d = _mm256_set1_ps(_cvtsh_ss(b->d));
    __m256i q[4];
    nibbles(b->qs, q);
    __m256i eight = _mm256_set1_epi32(8);
    for (int i = 0; i < 4; ++i) out[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[i], eight)), d);
  }
  static void dequant_q4_1(const BlockQ4_1* b, reg* out) {
    reg d = _mm256_set1_ps(_cvtsh_ss(b->d));
    reg m = _mm256_set1_ps(_cvtsh_ss(b->m));
    __m256i q[4];
    nibbles(b->qs, q);
    for (int i = 0; i < 4; ++i) out[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[i]), d, m);
  }

  static reg kv_load(DType t, const uint8_t* row, int j) {
    return t == DType::kF16 ? load_w<DType::kF16>(row, j) : load_w<DType::kF32>(row, j);
  }
  static reg kv_load_tail(DType t, const uint8_t* row, int j, int n) {
    return t == DType::kF16 ? load_w_tail<DType::kF16>(row, j, n) : load_w_tail<DType::kF32>(row, j, n);
  }
  static void store_f16(uint16_t* dst, reg r) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }

  // Integer path (kernels/packed.h): a 16-row group in two halves of 8 rows, lane r = row r.
  // No VNNI: maddubs (u8 x s8 pairs to s16) then madd with ones (to s32).
  using ireg = __m256i;
  static constexpr int kFloatTokens = 4;  // packed bf16 path: 2 x NT accumulators
  static constexpr int kPackHalves = 2;
  static constexpr int kPackTokens = 4;
  static constexpr int kQ8Bias = 0;  // dot4_q8 removes the +128 bias itself (maddubs would saturate)
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg abs(reg a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static float reduce_max(reg a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static int32_t round_store_i8(reg v, int8_t* dst) {
    alignas(32) int32_t q[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_cvtps_epi32(v));
    int32_t sum = 0;
    for (int i = 0; i < 8; ++i) {
      dst[i] = static_cast<int8_t>(q[i]);
      sum += q[i];
    }
    return sum;
  }
  // The bf16 in the low / high half of each dword, as f32.
  static reg bf16_lo(ireg v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
  static reg bf16_hi(ireg v) {
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static ireg load_i(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static ireg nibble_lo(ireg q) { return _mm256_and_si256(q, _mm256_set1_epi8(0x0f)); }
  static ireg nibble_hi(ireg q) { return _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0f)); }
  static ireg set1_i(int32_t v) { return _mm256_set1_epi32(v); }
  static int32_t load4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static ireg dot4_u4(ireg acc, ireg w, const int8_t* x4p) {
    const int32_t x4 = load4(x4p);
    __m256i p = _mm256_maddubs_epi16(w, _mm256_set1_epi32(x4));  // |pair| <= 2 * 15 * 127: no saturation
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static ireg dot4_q8(ireg acc, ireg w_biased, const int8_t* x4p) {
    const int32_t x4 = load4(x4p);
    __m256i w = _mm256_xor_si256(w_biased, _mm256_set1_epi8(static_cast<char>(0x80)));  // back to int8
    __m256i x = _mm256_set1_epi32(x4);
    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));  // |pair| <= 2 * 128 * 127
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static ireg and_i(ireg a, ireg b) { return _mm256_and_si256(a, b); }
  static ireg or_i(ireg a, ireg b) { return _mm256_or_si256(a, b); }
  static ireg set1_i8(char v) { return _mm256_set1_epi8(v); }
  template <int N>
  static ireg shl16(ireg a) { return _mm256_slli_epi16(a, N); }
  template <int N>
  static ireg shr16(ireg a) { return _mm256_srli_epi16(a, N); }
  // 8 bytes at p as floats (unsigned / signed).
  static reg cvt_u8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static reg cvt_i8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static reg fnmadd(reg a, reg b, reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static reg cvt_i(ireg i) { return _mm256_cvtepi32_ps(i); }
  static reg load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  // Attention tile helpers. Lane i of the result = the sum of v[i]'s 8 lanes (an hadd tree).
  static reg reduce_lanes(const reg* v) {
    const reg a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const reg b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  // Lanes >= n become `fill`.
  static reg keep_first(reg r, int n, float fill) {
    if (n >= 8) return r;
    return _mm256_blendv_ps(_mm256_set1_ps(fill), r, _mm256_castsi256_ps(tail_mask(n)));
  }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg round_nearest(reg x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static reg pow2i(reg n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static reg select_below(reg x, float limit, reg if_below, reg otherwise) {
    return _mm256_blendv_ps(otherwise, if_below, _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_LT_OQ));
  }
};

}  // namespace

#include "kernels/x86/kernels_impl.inc"

}  // namespace cachet::avx2
