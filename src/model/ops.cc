#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "kernels/kernels.h"

namespace cachet {

void rms_norm(const float* x, const float* w, float* y, int n_rows, int64_t n, float eps) {
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

void rope_table(const int32_t* positions, int n_tokens, int rope_dim, double theta, float* cos_sin) {
  const int half = rope_dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      double inv_freq = std::pow(theta, -2.0 * i / rope_dim);
      double angle = positions[t] * inv_freq;
      cos_sin[t * rope_dim + 2 * i] = static_cast<float>(std::cos(angle));
      cos_sin[t * rope_dim + 2 * i + 1] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope(float* x, const float* cos_sin, int n_tokens, int n_heads, int head_dim, int rope_dim, bool neox) {
  const int half = rope_dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float* cs = cos_sin + t * rope_dim;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        // Interleaved pairs (2i, 2i+1) or NeoX pairs (i, i + rope_dim/2).
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

namespace {

// Per-thread scratch for dequantized weight tiles and score rows; grows, never shrinks.
thread_local AlignedBuffer<float> t_scratch;

float* scratch(size_t n) {
  if (t_scratch.size() < n) t_scratch.resize(n);
  return t_scratch.data();
}

constexpr int kRowGrain = 4;
// Prefill tiles: this many bytes of dequantized weights per tile (fits L2 beside a few activation rows).
constexpr int64_t kTileBytes = 192 * 1024;
// Below this many tokens, decode-style dot products beat dequantize-then-GEMM.
constexpr int kGemmMinTokens = 4;

}  // namespace

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int n_tokens, float* y) {
  const Kernels& k = kernels();
  const int64_t K = w.ne[0];
  const int64_t N = w.n_rows();
  if (n_tokens < kGemmMinTokens) {
    pool.parallel_for(
        N,
        [&](int, int64_t r0, int64_t r1) {
          float* tmp = scratch(r1 - r0);
          for (int t = 0; t < n_tokens; ++t) {
            k.dot_rows(w.type, w.row(r0), w.row_bytes, static_cast<int>(r1 - r0), x + t * K, K, tmp);
            std::copy(tmp, tmp + (r1 - r0), y + t * N + r0);
          }
        },
        kRowGrain);
    return;
  }
  const int64_t lda = K;
  int64_t tile = std::clamp<int64_t>(kTileBytes / (K * 4) / kRowGrain * kRowGrain, kRowGrain, 256);
  pool.parallel_for(
      N,
      [&](int, int64_t r0, int64_t r1) {
        float* buf = w.type == DType::kF32 ? nullptr : scratch(tile * K);
        for (int64_t j0 = r0; j0 < r1; j0 += tile) {
          int64_t nj = std::min(tile, r1 - j0);
          const float* b;
          if (buf) {
            for (int64_t j = 0; j < nj; ++j) k.dequantize_row(w.type, w.row(j0 + j), buf + j * K, K);
            b = buf;
          } else {
            b = reinterpret_cast<const float*>(w.row(j0));
          }
          k.gemm_nt(n_tokens, static_cast<int>(nj), K, x, lda, b, K, y + j0, N);
        }
      },
      kRowGrain);
}

void attention(ThreadPool& pool, const AttentionArgs& a) {
  const Kernels& k = kernels();
  const int group = a.n_head / a.n_head_kv;
  const int q_dim = a.n_head * a.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  pool.parallel_for(static_cast<int64_t>(a.n_tokens) * a.n_head, [&](int, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int t = static_cast<int>(i / a.n_head);
      const int h = static_cast<int>(i % a.n_head);
      const int kvh = h / group;
      KvSequence* seq = a.seqs[a.seq_index[t]];
      const int n_ctx = a.positions[t] + 1;
      const size_t elem = seq->dtype() == DType::kF16 ? 2 : 4;
      const size_t head_off = static_cast<size_t>(kvh) * a.head_dim * elem;
      const float* q = a.q + static_cast<int64_t>(t) * q_dim + h * a.head_dim;
      float* out = a.out + static_cast<int64_t>(t) * q_dim + h * a.head_dim;
      float* scores = scratch(n_ctx);
      const int len = seq->span_len();
      for (int s = 0; s * len < n_ctx; ++s) {
        KvSpan sp = seq->span(a.layer, s, n_ctx);
        k.kv_scores(seq->dtype(), sp.k + head_off, sp.stride, sp.n, q, a.head_dim, scale, scores + sp.pos0);
      }
      float mx = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n_ctx; ++j) mx = std::max(mx, scores[j]);
      float sum = 0.0f;
      for (int j = 0; j < n_ctx; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      const float inv = 1.0f / sum;
      for (int j = 0; j < n_ctx; ++j) scores[j] *= inv;
      std::fill(out, out + a.head_dim, 0.0f);
      for (int s = 0; s * len < n_ctx; ++s) {
        KvSpan sp = seq->span(a.layer, s, n_ctx);
        k.kv_accumulate(seq->dtype(), sp.v + head_off, sp.stride, sp.n, scores + sp.pos0, a.head_dim, out);
      }
    }
  });
}

}  // namespace cachet

