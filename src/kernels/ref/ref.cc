// Scalar kernels: the specification every SIMD table is tested against. Plain loops, no intrinsics.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

namespace cachet::ref {

namespace {

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / kQK; ++i) {
        float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = static_cast<float>(b[i].qs[j]) * d;
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / kQK; ++i) {
        float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[i * kQK + j] = static_cast<float>((b[i].qs[j] & 0x0f) - 8) * d;
          dst[i * kQK + j + kQK / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::kQ4_1: {
      auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t i = 0; i < n / kQK; ++i) {
        float d = fp16_to_f32(b[i].d);
        float m = fp16_to_f32(b[i].m);
        for (int j = 0; j < kQK / 2; ++j) {
          dst[i * kQK + j] = std::fma(static_cast<float>(b[i].qs[j] & 0x0f), d, m);
          dst[i * kQK + j + kQK / 2] = std::fma(static_cast<float>(b[i].qs[j] >> 4), d, m);
        }
      }
      return;
    }
    default:
      CACHET_CHECK_MSG(false, "dequantize_row: type %s not computable", dtype_name(t));
  }
}

void dot_rows(DType t, const void* w, size_t row_stride, int n_rows, const float* x, int64_t n, float* out) {
  float buf[kQK];
  const int64_t bs = traits(t).block_size == 1 ? kQK : traits(t).block_size;
  const size_t chunk_bytes = *row_bytes(t, bs);
  for (int r = 0; r < n_rows; ++r) {
    auto* row = static_cast<const uint8_t*>(w) + r * row_stride;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < n; k0 += bs) {
      int64_t len = std::min<int64_t>(bs, n - k0);
      dequantize_row(t, row + (k0 / bs) * chunk_bytes, buf, len);
      for (int64_t j = 0; j < len; ++j) acc += buf[j] * x[k0 + j];
    }
    out[r] = acc;
  }
}

void gemm_nt(int m, int n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
             int64_t ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += a[i * lda + p] * b[j * ldb + p];
      c[i * ldc + j] = acc;
    }
}

float kv_at(DType t, const void* row, int i) {
  return t == DType::kF16 ? fp16_to_f32(static_cast<const uint16_t*>(row)[i]) : static_cast<const float*>(row)[i];
}

void kv_scores(DType t, const void* k, size_t stride, int n, const float* q, int d, float scale, float* scores) {
  for (int i = 0; i < n; ++i) {
    const void* row = static_cast<const uint8_t*>(k) + i * stride;
    float acc = 0.0f;
    for (int j = 0; j < d; ++j) acc += q[j] * kv_at(t, row, j);
    scores[i] = acc * scale;
  }
}

void kv_accumulate(DType t, const void* v, size_t stride, int n, const float* p, int d, float* out) {
  for (int i = 0; i < n; ++i) {
    const void* row = static_cast<const uint8_t*>(v) + i * stride;
    for (int j = 0; j < d; ++j) out[j] += p[i] * kv_at(t, row, j);
  }
}

void attn_tile(DType t, const void* k, const void* v, size_t stride, int n, const float* q, int group, int d,
               float scale, float* m, float* l, float* acc) {
  float p[kAttnTileMax];
  for (int g = 0; g < group; ++g) {
    kv_scores(t, k, stride, n, q + static_cast<size_t>(g) * d, d, scale, p);
    float m_new = m[g];
    for (int i = 0; i < n; ++i) m_new = std::max(m_new, p[i]);
    const float corr = std::exp(m[g] - m_new);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += p[i] = std::exp(p[i] - m_new);
    float* ag = acc + static_cast<size_t>(g) * d;
    for (int j = 0; j < d; ++j) ag[j] *= corr;
    kv_accumulate(t, v, stride, n, p, d, ag);
    l[g] = l[g] * corr + sum;
    m[g] = m_new;
  }
}

void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void kv_store(DType t, const float* src, void* dst, int n) {
  if (t == DType::kF32) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(float));
  } else {
    auto* h = static_cast<uint16_t*>(dst);
    for (int i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
  }
}

void quantize_act(const float* x, int64_t n, ActQ8* out) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      int q = static_cast<int>(std::nearbyint(xb[i] * id));  // round half to even, as cvtps2dq
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].sum = sum;
    out[b].ds = d * static_cast<float>(sum);
  }
}

// Unsigned stored weight of (row r, element e) of a packed block (see kernels/packed.h).
int packed_weight(DType t, const uint8_t* blk, int r, int e) {
  if (t == DType::kQ8_0) return blk[32 + (e / 4) * 64 + r * 4 + e % 4];
  const uint8_t* qs = blk + (t == DType::kQ4_0 ? 32 : 64);
  const int k = e % 16;
  const uint8_t byte = qs[(k / 4) * 64 + r * 4 + k % 4];
  return e < 16 ? (byte & 0x0f) : (byte >> 4);
}

void packed_dot(DType t, const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride, int n_tokens,
                float* out, int64_t out_stride) {
  const size_t bb = packed_block_bytes(t);
  const int bias = packed_bias(t);
  for (int tok = 0; tok < n_tokens; ++tok) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* blk = group + b * bb;
        const ActQ8& xb = x[tok * x_stride + b];
        int32_t isum = 0;
        for (int e = 0; e < 32; ++e) isum += (packed_weight(t, blk, r, e) - bias) * xb.q[e];
        const float d = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk)[r]);
        acc = std::fma(static_cast<float>(isum), d * xb.d, acc);
        if (t == DType::kQ4_1) {
          const float m = fp16_to_f32(reinterpret_cast<const uint16_t*>(blk + 32)[r]);
          acc = std::fma(m, xb.ds, acc);
        }
      }
      out[tok * out_stride + r] = acc;
    }
  }
}

}  // namespace

const Kernels kKernels = {Isa::kScalar, 1,        dequantize_row, dot_rows,     gemm_nt, kv_scores, kv_accumulate,
                          kv_store,     quantize_act, packed_dot, attn_tile, silu_mul};

}  // namespace cachet::ref
