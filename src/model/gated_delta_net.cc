#include "model/gated_delta_net.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/kernels.h"
#include "model/causal_conv.h"

namespace cachet {

void gated_delta_net(ThreadPool& pool, const GatedDeltaNetArgs& a) {
  const int T = a.n_tokens;
  const int64_t d = a.head_dim, KH = a.k_heads, VH = a.v_heads, K = a.conv_kernel;
  const int64_t kd = KH * d, vd = VH * d, cd = 2 * kd + vd;
  StateStore& st = *a.store;
  CACHET_CHECK(st.conv_floats() == (K - 1) * cd && st.ssm_floats() == VH * d * d);

  // Each sequence's tokens in batch (= position) order; a sequence starting at position 0 starts from zero.
  const std::vector<std::vector<int>> toks =
      rows_by_sequence(a);

  // The causal conv over q | k | v, then SiLU (model/causal_conv.h).
  CausalConvArgs conv;
  conv.toks = &toks;
  conv.slots = a.slots;
  conv.store = &st;
  conv.layer = a.layer;
  conv.channels = cd;
  conv.kernel = K;
  conv.taps = a.conv_w;
  conv.x = a.qkv;
  conv.stride = cd;
  conv.silu = true;
  conv.snapshot = a.snapshot;
  causal_conv(pool, conv);

  // q and k of every token and key head to unit length (eps inside the root, as llama.cpp's l2 norm of Qwen3.5).
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  pool.parallel_for(static_cast<int64_t>(T) * 2 * KH, [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = i / (2 * KH), h = i % (2 * KH);
      float* v = a.qkv + t * cd + h * d;
      float ss = 0.0f;
      for (int64_t j = 0; j < d; ++j) ss += v[j] * v[j];
      const float inv = 1.0f / std::sqrt(ss + a.eps) * (h < KH ? q_scale : 1.0f);
      for (int64_t j = 0; j < d; ++j) v[j] *= inv;
    }
  });

  // The delta rule: each (sequence, value head) walks its tokens in order through its d x d state (the kernel
  // takes a run of consecutive batch rows at once, its prefill form; a run ends at a token whose state is
  // snapshotted), then the gated RMSNorm of each token's output.
  const int64_t units = static_cast<int64_t>(a.n_seqs) * VH;
  const Kernels& kern = kernels();
  pool.parallel_for(units, [&](int, int64_t b, int64_t e) {
    std::vector<float> decay, beta, gate(static_cast<size_t>(d));
    for (int64_t u = b; u < e; ++u) {
      const int s = static_cast<int>(u / VH);
      const int64_t h = u % VH, kh = a.grouped_heads ? h / (VH / KH) : h % KH;
      const std::vector<int>& ts = toks[s];
      if (ts.empty()) continue;
      float* S = st.ssm(a.slots[s], a.layer) + h * d * d;
      for_each_state_run(ts, a.snapshot, [&](int t0, int n) {
        decay.resize(static_cast<size_t>(n));
        beta.resize(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          const int t = t0 + i;
          decay[i] = std::exp(softplus(a.alpha[t * VH + h] + a.dt_bias[h]) * a.a[h]);
          beta[i] = 1.0f / (1.0f + std::exp(-a.beta[t * VH + h]));
        }
        const float* row = a.qkv + static_cast<int64_t>(t0) * cd;
        kern.delta_rule(S, row + kh * d, row + kd + kh * d, row + 2 * kd + h * d, cd, decay.data(), beta.data(),
                        a.out + static_cast<int64_t>(t0) * vd + h * d, vd, n, static_cast<int>(d));
        const int last = t0 + n - 1;
        if (a.snapshot && a.snapshot[last] >= 0) std::copy_n(S, d * d, st.ssm(a.snapshot[last], a.layer) + h * d * d);
        for (int t = t0; t <= last; ++t) {  // gated RMSNorm of this head's output
          float* o = a.out + static_cast<int64_t>(t) * vd + h * d;
          float ss = 0.0f;
          for (int64_t j = 0; j < d; ++j) ss += o[j] * o[j];
          const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + a.eps);
          const float* z = a.z + static_cast<int64_t>(t) * vd + h * d;
          for (int64_t j = 0; j < d; ++j) o[j] = o[j] * inv * a.norm[j];
          std::copy_n(z, d, gate.data());  // o = silu(z) * o, with the table's SiLU
          kern.silu_mul(gate.data(), o, d);
          std::copy_n(gate.data(), d, o);
        }
      });
    }
  });
}

}  // namespace cachet
