#include "model/mamba2.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/kernels.h"

namespace cachet {

void mamba2(ThreadPool& pool, const Mamba2Args& a) {
  const int T = a.n_tokens;
  const int64_t H = a.heads, hd = a.head_dim, ds = a.state, G = a.groups, K = a.conv_kernel;
  const int64_t inner = H * hd, cd = inner + 2 * G * ds, in_dim = inner + cd + H;
  StateStore& st = *a.store;
  CACHET_CHECK(st.conv_floats() == (K - 1) * cd && st.ssm_floats() == inner * ds && H % G == 0);
  const std::vector<std::vector<int>> toks = rows_by_sequence(a);

  // The causal conv over x | B | C, its bias, then SiLU (model/causal_conv.h).
  CausalConvArgs conv;
  conv.toks = &toks;
  conv.slots = a.slots;
  conv.store = &st;
  conv.layer = a.layer;
  conv.channels = cd;
  conv.kernel = K;
  conv.taps = a.conv_w;
  conv.bias = a.conv_b;
  conv.x = a.zxbcdt + inner;
  conv.stride = in_dim;
  conv.silu = true;
  conv.snapshot = a.snapshot;
  causal_conv(pool, conv);

  // The scan: each (sequence, head) walks its tokens in order through its state (a run of consecutive batch
  // rows at once, the kernel's prefill form; a run ends at a token whose state is snapshotted), then adds the
  // skip D x.
  const Kernels& kern = kernels();
  const int64_t units = static_cast<int64_t>(a.n_seqs) * H;
  pool.parallel_for(units, [&](int, int64_t b, int64_t e) {
    std::vector<float> dt, da;
    for (int64_t u = b; u < e; ++u) {
      const int s = static_cast<int>(u / H);
      const int64_t h = u % H, g = h / (H / G);
      const std::vector<int>& ts = toks[s];
      if (ts.empty()) continue;
      float* S = st.ssm(a.slots[s], a.layer) + h * hd * ds;
      for_each_state_run(ts, a.snapshot, [&](int t0, int n) {
        dt.resize(static_cast<size_t>(n));
        da.resize(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          dt[i] = softplus(a.zxbcdt[static_cast<int64_t>(t0 + i) * in_dim + inner + cd + h] + a.dt_bias[h]);
          da[i] = std::exp(dt[i] * a.a[h]);
        }
        const float* row = a.zxbcdt + static_cast<int64_t>(t0) * in_dim + inner;  // x | B | C after the conv
        float* y = a.out + static_cast<int64_t>(t0) * inner + h * hd;
        kern.ssm_scan(S, row + h * hd, row + inner + g * ds, row + inner + G * ds + g * ds, in_dim, dt.data(),
                      da.data(), y, inner, n, static_cast<int>(hd), static_cast<int>(ds));
        const int last = t0 + n - 1;
        if (a.snapshot && a.snapshot[last] >= 0) std::copy_n(S, hd * ds, st.ssm(a.snapshot[last], a.layer) + h * hd * ds);
        for (int t = t0; t <= last; ++t) {
          const float* x = a.zxbcdt + static_cast<int64_t>(t) * in_dim + inner + h * hd;
          float* yt = a.out + static_cast<int64_t>(t) * inner + h * hd;
          for (int64_t i = 0; i < hd; ++i) yt[i] += a.d[h] * x[i];
        }
      });
    }
  });

  // The gate and the grouped RMSNorm, per token.
  const int64_t gw = inner / G;
  pool.parallel_for(T, [&](int, int64_t b, int64_t e) {
    std::vector<float> gate(static_cast<size_t>(inner));
    for (int64_t t = b; t < e; ++t) {
      const float* z = a.zxbcdt + t * in_dim;
      float* y = a.out + t * inner;
      std::copy_n(z, inner, gate.data());  // y = silu(z) * y, with the table's SiLU
      kern.silu_mul(gate.data(), y, inner);
      std::copy_n(gate.data(), inner, y);
      for (int64_t g = 0; g < G; ++g) {
        float* yg = y + g * gw;
        float ss = 0.0f;
        for (int64_t i = 0; i < gw; ++i) ss += yg[i] * yg[i];
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(gw) + a.eps);
        for (int64_t i = 0; i < gw; ++i) yg[i] = yg[i] * inv * a.norm[g * gw + i];
      }
    }
  });
}

}  // namespace cachet
