#include "model/causal_conv.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace cachet {

std::vector<std::vector<int>> rows_by_sequence(const RecurrentBatch& b) {
  StateStore& st = *b.store;
  std::vector<std::vector<int>> toks(static_cast<size_t>(b.n_seqs));
  for (int t = 0; t < b.n_tokens; ++t) toks[b.seq_index[t]].push_back(t);
  for (int s = 0; s < b.n_seqs; ++s)
    if (!toks[s].empty() && b.positions[toks[s][0]] == 0) {
      std::fill_n(st.conv(b.slots[s], b.layer), st.conv_floats(), 0.0f);
      std::fill_n(st.ssm(b.slots[s], b.layer), st.ssm_floats(), 0.0f);
    }
  return toks;
}

void causal_conv(ThreadPool& pool, const CausalConvArgs& a) {
  const int64_t K = a.kernel;
  StateStore& st = *a.store;
  const Kernels& kern = kernels();
  // Channel ranges in whole vectors of the widest table (a channel's bits do not depend on its range).
  pool.parallel_for(a.channels, [&](int, int64_t c0, int64_t c1) {
    for (size_t s = 0; s < a.toks->size(); ++s) {
      const std::vector<int>& ts = (*a.toks)[s];
      if (ts.empty()) continue;
      float* win = st.conv(a.slots[s], a.layer);
      for_each_state_run(ts, a.snapshot, [&](int t0, int n) {
        kern.causal_conv(win + c0 * (K - 1), a.taps + c0 * K, a.bias ? a.bias + c0 : nullptr,
                         a.x + static_cast<int64_t>(t0) * a.stride + c0, a.stride, n, c1 - c0, static_cast<int>(K),
                         a.silu);
        const int last = t0 + n - 1;
        if (a.snapshot && a.snapshot[last] >= 0)  // this range of channels' window after the run's last token
          std::copy(win + c0 * (K - 1), win + c1 * (K - 1), st.conv(a.snapshot[last], a.layer) + c0 * (K - 1));
      });
    }
  }, 16);
}

}  // namespace cachet
