// Scalar kernels: the specification every SIMD table is tested against. Plain loops, no intrinsics.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

namespace cachet::ref {

namespace {

// A 32-block of 4-bit codes (element e < 16 the low nibble of qs[e], e >= 16 the high one of qs[e - 16]) on a
// 16-level grid (IQ4_NL's, MXFP4's) at scale d.
void grid_block(const int8_t* grid, const uint8_t* qs, float d, float* dst) {
  for (int j = 0; j < kQK / 2; ++j) {
    dst[j] = static_cast<float>(grid[qs[j] & 0x0f]) * d;
    dst[j + kQK / 2] = static_cast<float>(grid[qs[j] >> 4]) * d;
  }
}

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
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const size_t bytes = t == DType::kQ5_0 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1);
      for (int64_t i = 0; i < n / kQK; ++i) {
        const auto* p = static_cast<const uint8_t*>(src) + i * bytes;
        const float d = fp16_to_f32(*reinterpret_cast<const uint16_t*>(p));
        const bool q50 = t == DType::kQ5_0;
        const float m = q50 ? 0.0f : fp16_to_f32(reinterpret_cast<const BlockQ5_1*>(p)->m);
        const uint8_t* qh = q50 ? reinterpret_cast<const BlockQ5_0*>(p)->qh : reinterpret_cast<const BlockQ5_1*>(p)->qh;
        const uint8_t* qs = q50 ? reinterpret_cast<const BlockQ5_0*>(p)->qs : reinterpret_cast<const BlockQ5_1*>(p)->qs;
        const uint32_t h = qh[0] | qh[1] << 8 | qh[2] << 16 | static_cast<uint32_t>(qh[3]) << 24;
        for (int j = 0; j < kQK; ++j) {
          const int q = (j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4) | ((h >> j) & 1) << 4;
          dst[i * kQK + j] = q50 ? static_cast<float>(q - 16) * d : std::fma(static_cast<float>(q), d, m);
        }
      }
      return;
    }
    case DType::kIQ4_NL: {
      auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / kQK; ++i) grid_block(kIq4nlGrid, b[i].qs, fp16_to_f32(b[i].d), dst + i * kQK);
      return;
    }
    case DType::kMXFP4: {
      auto* b = static_cast<const BlockMXFP4*>(src);
      for (int64_t i = 0; i < n / kQK; ++i) grid_block(kMxfp4Grid, b[i].qs, mxfp4_scale(b[i].e), dst + i * kQK);
      return;
    }
    case DType::kIQ4_XS:
      for (int64_t i = 0; i < n / kQKK; ++i) {
        const auto& b = static_cast<const BlockIQ4_XS*>(src)[i];
        const float d = fp16_to_f32(b.d);
        for (int j = 0; j < kQKK / kQK; ++j)
          grid_block(kIq4nlGrid, b.qs + 16 * j, d * static_cast<float>(iq4xs_scale(b, j)), dst + i * kQKK + kQK * j);
      }
      return;
    case DType::kQ2_K:
      for (int64_t i = 0; i < n / kQKK; ++i) {
        const auto& b = static_cast<const BlockQ2_K*>(src)[i];
        const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
        for (int e = 0; e < kQKK; ++e) {
          const int h = e / 128, s = e / 32 % 4, k = e / 16 % 2, l = e % 16, j = 8 * h + 2 * s + k;
          const int q = (b.qs[32 * h + 16 * k + l] >> (2 * s)) & 3;
          dst[i * kQKK + e] = (d * static_cast<float>(b.scales[j] & 15)) * static_cast<float>(q) -
                              dmin * static_cast<float>(b.scales[j] >> 4);
        }
      }
      return;
    case DType::kQ3_K:
      for (int64_t i = 0; i < n / kQKK; ++i) {
        const auto& b = static_cast<const BlockQ3_K*>(src)[i];
        const float d = fp16_to_f32(b.d);
        for (int e = 0; e < kQKK; ++e) {
          const int h = e / 128, s = e / 32 % 4, k = e / 16 % 2, l = e % 16, j = 8 * h + 2 * s + k;
          const int q = ((b.qs[32 * h + 16 * k + l] >> (2 * s)) & 3) | ((b.hmask[16 * k + l] >> (4 * h + s)) & 1) << 2;
          dst[i * kQKK + e] = (d * static_cast<float>(q3k_scale(b.scales, j) - 32)) * static_cast<float>(q - 4);
        }
      }
      return;
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const size_t bytes = t == DType::kQ4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
      for (int64_t i = 0; i < n / kQKK; ++i) {
        const auto* p = static_cast<const uint8_t*>(src) + i * bytes;
        const auto* b4 = reinterpret_cast<const BlockQ4_K*>(p);
        const auto* b5 = reinterpret_cast<const BlockQ5_K*>(p);
        const float d = fp16_to_f32(b4->d), dmin = fp16_to_f32(b4->dmin);
        const uint8_t* qs = t == DType::kQ4_K ? b4->qs : b5->qs;
        for (int e = 0; e < kQKK; ++e) {
          const int pr = e / 64, k = e / 32 % 2, l = e % 32;
          int q = k == 0 ? qs[32 * pr + l] & 0x0f : qs[32 * pr + l] >> 4;
          if (t == DType::kQ5_K) q |= ((b5->qh[l] >> (2 * pr + k)) & 1) << 4;
          int sc, m;
          q4k_scale_min(b4->scales, 2 * pr + k, &sc, &m);
          dst[i * kQKK + e] = (d * static_cast<float>(sc)) * static_cast<float>(q) - dmin * static_cast<float>(m);
        }
      }
      return;
    }
    case DType::kQ6_K:
      for (int64_t i = 0; i < n / kQKK; ++i) {
        const auto& b = static_cast<const BlockQ6_K*>(src)[i];
        const float d = fp16_to_f32(b.d);
        for (int e = 0; e < kQKK; ++e) {
          const int h = e / 128, s = e / 32 % 4, l = e % 32;
          const uint8_t lo = b.ql[64 * h + 32 * (s % 2) + l];
          const int q = (s < 2 ? lo & 0x0f : lo >> 4) | ((b.qh[32 * h + l] >> (2 * s)) & 3) << 4;
          dst[i * kQKK + e] = (d * static_cast<float>(b.scales[8 * h + 2 * s + l / 16])) * static_cast<float>(q - 32);
        }
      }
      return;
    default:
      CACHET_CHECK_MSG(false, "dequantize_row: type %s not computable", dtype_name(t));
  }
}

void dot_rows(DType t, const void* w, size_t row_stride, int n_rows, const float* x, int64_t n, float* out) {
  float buf[kQKK];
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
  const auto* b = static_cast<const uint8_t*>(row);
  switch (t) {
    case DType::kF16: return fp16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case DType::kQ8_0: {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(b)[i / 32];
      return blk.qs[i % 32] * fp16_to_f32(blk.d);
    }
    case DType::kQ4_0:
    case DType::kIQ4_NL: {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(b)[i / 32];
      const int j = i % 32;
      const int code = j < 16 ? blk.qs[j] & 0x0f : blk.qs[j - 16] >> 4;
      return (t == DType::kQ4_0 ? code - 8 : kIq4nlGrid[code]) * fp16_to_f32(blk.d);
    }
    default: return static_cast<const float*>(row)[i];
  }
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

// Element e of a Q8_0 / Q4_0 / IQ4_NL block as its integer value (Q4_0: code - 8; IQ4_NL: its grid value).
int block_int(DType t, const uint8_t* blk, int e) {
  if (t == DType::kQ8_0) return reinterpret_cast<const BlockQ8_0*>(blk)->qs[e];
  const uint8_t byte = reinterpret_cast<const BlockQ4_0*>(blk)->qs[e % 16];
  const int code = e < 16 ? byte & 0x0f : byte >> 4;
  return t == DType::kQ4_0 ? code - 8 : kIq4nlGrid[code];
}

// Integer Q.K (kernels.h attn_tile): per block the exact integer dot product of the key's integer values with
// the query's int16 (kernels/attn_query.h: 256 hi + lo), then one fma with the product of the two scales.
void block_scores(DType t, const void* k, size_t stride, int n, const ActQ8* qq, int d, float scale, float* scores) {
  const size_t block_bytes = t == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  for (int i = 0; i < n; ++i) {
    const uint8_t* row = static_cast<const uint8_t*>(k) + i * stride;
    float a = 0.0f;
    for (int b = 0; b < d / 32; ++b) {
      const uint8_t* blk = row + b * block_bytes;
      int32_t isum = 0;
      for (int e = 0; e < 32; ++e) isum += block_int(t, blk, e) * (kQueryHiScale * qq[2 * b].q[e] + qq[2 * b + 1].q[e]);
      const float dk = fp16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
      a = std::fma(static_cast<float>(isum), dk * qq[2 * b + 1].d, a);
    }
    scores[i] = a * scale;
  }
}

// Block-quantized values (kernels.h attn_tile): the weight of row i's block is p_i times the block's scale,
// times the integer values.
void block_values_accumulate(DType t, const void* v, size_t stride, int n, const float* p, int d, float* out) {
  const size_t block_bytes = t == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  for (int i = 0; i < n; ++i) {
    const uint8_t* row = static_cast<const uint8_t*>(v) + i * stride;
    for (int b = 0; b < d / 32; ++b) {
      const uint8_t* blk = row + b * block_bytes;
      const float w = p[i] * fp16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
      for (int e = 0; e < 32; ++e)
        out[32 * b + e] = std::fma(w, static_cast<float>(block_int(t, blk, e)), out[32 * b + e]);
    }
  }
}

void attn_tile(DType tk, DType tv, const void* k, size_t k_stride, const void* v, size_t v_stride, int n,
               const float* q, const ActQ8* qq, int group, int d, float scale, float softcap, float* m, float* l,
               float* acc) {
  float p[kAttnTileMax];
  for (int g = 0; g < group; ++g) {
    if (attn_integer_keys(tk)) {
      CACHET_CHECK(qq != nullptr);
      block_scores(tk, k, k_stride, n, qq + static_cast<size_t>(g) * (d / 16), d, scale, p);
    } else {
      kv_scores(tk, k, k_stride, n, q + static_cast<size_t>(g) * d, d, scale, p);
    }
    if (softcap != 0.0f)
      for (int i = 0; i < n; ++i) p[i] = 2.0f * softcap / (1.0f + std::exp(p[i] * (-2.0f / softcap))) - softcap;
    float m_new = m[g];
    for (int i = 0; i < n; ++i) m_new = std::max(m_new, p[i]);
    const float corr = std::exp(m[g] - m_new);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += p[i] = std::exp(p[i] - m_new);
    float* ag = acc + static_cast<size_t>(g) * d;
    for (int j = 0; j < d; ++j) ag[j] *= corr;
    if (attn_integer_keys(tv)) {
      block_values_accumulate(tv, v, v_stride, n, p, d, ag);
    } else {
      kv_accumulate(tv, v, v_stride, n, p, d, ag);
    }
    l[g] = l[g] * corr + sum;
    m[g] = m_new;
  }
}

// Per head, the chunk as a run of tiles from a fresh state (kernels.h attn_chunk); prefetch hints are ignored.
void attn_chunk(DType tk, DType tv, const AttnChunk& c, const float* q, const ActQ8* qq, int group, int d, float scale,
                float softcap, float* m, float* l, float* acc) {
  for (int h = 0; h < c.n_heads; ++h) {
    const size_t ko = c.k_off + h * c.k_head, vo = c.v_off + h * c.v_head, so = h * c.state_stride;
    const float* qh = q + h * c.q_stride;
    const ActQ8* qqh = qq != nullptr ? qq + h * c.q_stride / 16 : nullptr;
    float *mh = m + so, *lh = l + so, *ah = acc + so;
    std::fill(ah, ah + static_cast<size_t>(group) * d, 0.0f);
    std::fill(mh, mh + group, -std::numeric_limits<float>::infinity());
    std::fill(lh, lh + group, 0.0f);
    for (int j = 0; j < c.n_tiles; ++j) {
      const AttnTile& t = c.tiles[j];
      attn_tile(tk, tv, t.k + ko, t.k_stride, t.v + vo, t.v_stride, t.n, qh, qqh, group, d, scale, softcap, mh, lh,
                ah);
    }
  }
}

void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void gelu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = x / (1.0f + std::exp(x * (x * x * -kGeluC2 - kGeluC1))) * u[i];
  }
}

float exp_sum(float* x, int64_t n, float shift) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - shift;
    x[i] = d < -87.33654f ? 0.0f : std::exp(d);
    sum += x[i];
  }
  return sum;
}

void delta_rule(float* S, const float* q0, const float* k0, const float* v0, int64_t in_stride, const float* decay,
                const float* beta, float* o0, int64_t out_stride, int n, int d) {
  for (int t = 0; t < n; ++t) {
    const float *q = q0 + t * in_stride, *k = k0 + t * in_stride, *v = v0 + t * in_stride;
    float* o = o0 + t * out_stride;
    for (int j = 0; j < d; ++j) {
      float* s = S + static_cast<int64_t>(j) * d;
      float sk = 0.0f;
      for (int i = 0; i < d; ++i) {
        s[i] *= decay[t];
        sk = std::fma(s[i], k[i], sk);
      }
      const float e = beta[t] * (v[j] - sk);
      float oj = 0.0f;
      for (int i = 0; i < d; ++i) {
        s[i] = std::fma(e, k[i], s[i]);
        oj = std::fma(s[i], q[i], oj);
      }
      o[j] = oj;
    }
  }
}

void ssm_scan(float* S, const float* x0, const float* b0, const float* c0, int64_t in_stride, const float* dt,
              const float* da, float* y0, int64_t out_stride, int n, int hd, int ds) {
  for (int t = 0; t < n; ++t) {
    const float *x = x0 + t * in_stride, *b = b0 + t * in_stride, *c = c0 + t * in_stride;
    float* y = y0 + t * out_stride;
    for (int i = 0; i < hd; ++i) {
      float* s = S + static_cast<int64_t>(i) * ds;
      const float xdt = x[i] * dt[t];
      float yi = 0.0f;
      for (int j = 0; j < ds; ++j) {
        s[j] = std::fma(b[j], xdt, s[j] * da[t]);
        yi = std::fma(s[j], c[j], yi);
      }
      y[i] = yi;
    }
  }
}

void causal_conv(float* win, const float* taps, const float* bias, float* x, int64_t stride, int n, int64_t channels,
                 int k, bool silu) {
  for (int64_t c = 0; c < channels; ++c) {
    float* w = win + c * (k - 1);
    const float* tap = taps + c * k;
    for (int t = 0; t < n; ++t) {
      float* xt = x + t * stride + c;
      float y = k > 1 ? w[0] * tap[0] : *xt * tap[0];
      for (int j = 1; j + 1 < k; ++j) y = std::fma(w[j], tap[j], y);
      if (k > 1) y = std::fma(*xt, tap[k - 1], y);
      for (int j = 0; j + 2 < k; ++j) w[j] = w[j + 1];
      if (k > 1) w[k - 2] = *xt;
      if (bias) y += bias[c];
      *xt = silu ? y / (1.0f + std::exp(-y)) : y;
    }
  }
}

void kv_store(DType t, const float* src, void* dst, int n) {
  if (t == DType::kF32) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(float));
  } else {
    auto* h = static_cast<uint16_t*>(dst);
    for (int i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
  }
}

float block_amax(const float* xb) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
  return amax;
}

void quantize_act(const float* x, int64_t n, int blocks_per_scale, ActQ8* out) {
  CACHET_CHECK(blocks_per_scale >= 1 && n % (32 * blocks_per_scale) == 0);
  float A = 0.0f, dS = 0.0f, idS = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    if (b % blocks_per_scale == 0) {
      A = 0.0f;
      for (int j = 0; j < blocks_per_scale; ++j) A = std::max(A, block_amax(xb + 32 * j));
      dS = A / 127.0f;
      idS = dS != 0.0f ? 1.0f / dS : 0.0f;
    }
    // One scale per block (blocks_per_scale 1), or the super-block's times a power of two (packed.h).
    const int e = blocks_per_scale == 1 ? 0 : act_scale_shift(block_amax(xb), A, dS);
    const float d = dS / static_cast<float>(1 << e), id = idS * static_cast<float>(1 << e);
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      int q = static_cast<int>(std::nearbyint(xb[i] * id));  // round half to even, as cvtps2dq
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    int32_t lo = 0;
    for (int i = 0; i < 16; ++i) lo += out[b].q[i];
    out[b].d = d;
    out[b].sum = static_cast<int16_t>(sum);
    out[b].ds = d * static_cast<float>(sum);
    out[b].hsum[0] = static_cast<int16_t>(lo);
    out[b].hsum[1] = static_cast<int16_t>(sum - lo);
    out[b].shift = static_cast<uint8_t>(blocks_per_scale == 1 ? 0 : 3 - e);
    out[b].pad = 0;
  }
}

// Unsigned stored quant of (row r, element e) of a packed block (see kernels/packed.h).
int packed_weight(DType t, const PackedLayout& l, const uint8_t* blk, int r, int e) {
  const int s = e / 4, i = e % 4;
  if (t == DType::kQ8_0) return blk[l.qs + s * 64 + r * 4 + i];
  if (t == DType::kQ2_K || t == DType::kQ3_K) {
    const int q = (blk[l.qs + (s / 4) * 64 + r * 4 + i] >> (2 * (s % 4))) & 3;
    return t == DType::kQ2_K ? q : q | ((blk[l.hi + r * 4 + i] >> s) & 1) << 2;
  }
  const uint8_t byte = blk[l.qs + (s % 4) * 64 + r * 4 + i];
  int q = s < 4 ? (byte & 0x0f) : (byte >> 4);
  if (t == DType::kIQ4_NL) return kIq4nlGrid[q] + 128;
  if (t == DType::kMXFP4) return kMxfp4Grid[q] + 12;
  if (t == DType::kQ6_K) {
    q |= ((blk[l.hi + (s / 4) * 64 + r * 4 + i] >> (2 * (s % 4))) & 3) << 4;
  } else if (l.hi != 0) {
    q |= ((blk[l.hi + r * 4 + i] >> s) & 1) << 4;
  }
  return q;
}

float f16_at(const uint8_t* p, int i) { return fp16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]); }

void packed_dot(DType t, const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride, int n_tokens,
                float* out, int64_t out_stride) {
  t = packed_as(t);
  const PackedLayout l = packed_layout(t);
  const bool is_k = l.blocks > 1;
  for (int tok = 0; tok < n_tokens; ++tok) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* sup = group + (b / l.blocks) * l.super_bytes();
        const uint8_t* blk = sup + l.header + (b % l.blocks) * l.block_bytes;
        const ActQ8& xb = x[tok * x_stride + b];
        if (t == DType::kQ6_K || t == DType::kQ3_K || t == DType::kQ2_K) {
          for (int h = 0; h < 2; ++h) {
            int32_t isum = 0;
            for (int e = 16 * h; e < 16 * h + 16; ++e) isum += (packed_weight(t, l, blk, r, e) - l.bias) * xb.q[e];
            const uint8_t sc = blk[16 * h + r];
            const float s = f16_at(sup, r) * (t == DType::kQ2_K ? static_cast<float>(sc) : static_cast<int8_t>(sc));
            acc = std::fma(static_cast<float>(isum), s * xb.d, acc);
            if (t == DType::kQ2_K) {
              const float mn = f16_at(sup + 32, r) * static_cast<float>(blk[32 + 16 * h + r]);
              acc = std::fma(-mn, xb.d * static_cast<float>(xb.hsum[h]), acc);
            }
          }
          continue;
        }
        int32_t isum = 0;
        for (int e = 0; e < 32; ++e) isum += (packed_weight(t, l, blk, r, e) - l.bias) * xb.q[e];
        if (is_k) {
          const float s = f16_at(sup, r) * static_cast<float>(blk[r]);
          const float mn = f16_at(sup + 32, r) * static_cast<float>(blk[16 + r]);
          acc = std::fma(static_cast<float>(isum), s * xb.d, acc);
          acc = std::fma(-mn, xb.ds, acc);
        } else {
          acc = std::fma(static_cast<float>(isum), f16_at(blk, r) * xb.d, acc);
          if (t == DType::kQ4_1 || t == DType::kQ5_1) acc = std::fma(f16_at(blk + 32, r), xb.ds, acc);
        }
      }
      out[tok * out_stride + r] = acc;
    }
  }
}

}  // namespace

void packed_dot_super(DType t, const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride,
                      int n_tokens, float* out, int64_t out_stride) {
  CACHET_CHECK(super_sums(t, KSums::kPerSuper));
  const PackedLayout l = packed_layout(t);
  CACHET_CHECK(n_blocks % l.blocks == 0);
  for (int tok = 0; tok < n_tokens; ++tok) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0.0f;
      for (int64_t sb = 0; sb < n_blocks / l.blocks; ++sb) {
        const uint8_t* sup = group + sb * l.super_bytes();
        const ActQ8* xs = x + tok * x_stride + sb * l.blocks;
        const float u = xs[0].d / static_cast<float>(1 << xs[0].shift);
        int32_t s = 0, m = 0;
        for (int j = 0; j < l.blocks; ++j) {
          const uint8_t* blk = sup + l.header + j * l.block_bytes;
          const int32_t p2 = 1 << xs[j].shift;
          int32_t isum = 0;
          for (int e = 0; e < 32; ++e) isum += (packed_weight(t, l, blk, r, e) - l.bias) * xs[j].q[e];
          s += blk[r] * isum * p2;
          m += blk[16 + r] * xs[j].sum * p2;
        }
        acc = std::fma(static_cast<float>(s), f16_at(sup, r) * u, acc);
        acc = std::fma(-static_cast<float>(m), f16_at(sup + 32, r) * u, acc);
      }
      out[tok * out_stride + r] = acc;
    }
  }
}

namespace {

void round_bf16(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16_daz(x[i]);
}

void packed_dot_bf16(const uint8_t* group, int64_t n_pairs, const uint32_t* x, int64_t x_stride, int n_tokens,
                     float* out, int64_t out_stride) {
  const auto* w = reinterpret_cast<const uint32_t*>(group);
  for (int tok = 0; tok < n_tokens; ++tok) {
    const uint32_t* xt = x + tok * x_stride;
    for (int r = 0; r < kPackRows; ++r) {
      float c[2] = {0.0f, 0.0f};
      for (int64_t p = 0; p < n_pairs; ++p) {
        const uint32_t wv = w[p * kPackRows + r], xv = xt[p];
        c[p % 2] = std::fma(bf16_pair_hi(wv), bf16_pair_hi(xv), c[p % 2]);
        c[p % 2] = std::fma(bf16_pair_lo(wv), bf16_pair_lo(xv), c[p % 2]);
      }
      out[tok * out_stride + r] = c[0] + c[1];
    }
  }
}

void packed_dot_half(DType t, const uint8_t* group, int64_t k, const float* x, int64_t x_stride, int n_tokens,
                     float* out, int64_t out_stride) {
  CACHET_CHECK(t == DType::kF16 || t == DType::kBF16);
  const auto* w = reinterpret_cast<const uint16_t*>(group);
  for (int tok = 0; tok < n_tokens; ++tok) {
    const float* xt = x + tok * x_stride;
    for (int r = 0; r < kPackRows; ++r) {
      float c[2] = {0.0f, 0.0f};
      for (int64_t e = 0; e < k; ++e) {
        const uint16_t h = w[e * kPackRows + r];
        c[e % 2] = std::fma(t == DType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h), xt[e], c[e % 2]);
      }
      out[tok * out_stride + r] = c[0] + c[1];
    }
  }
}

}  // namespace

constinit const Kernels kKernels = {Isa::kScalar,       1,          dequantize_row,  dot_rows,        gemm_nt,
                                    kv_scores,          kv_accumulate, kv_store,     quantize_act,    packed_dot,
                                    KSums::kPerBlock,
                                    FloatPack::kHalfRows, round_bf16, packed_dot_bf16, packed_dot_half, attn_tile,
                                    attn_chunk,
                                    silu_mul,           gelu_mul,        exp_sum,         delta_rule,
                                    ssm_scan,           causal_conv};

}  // namespace cachet::ref
