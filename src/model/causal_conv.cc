#include "model/causal_conv.h"

#include <algorithm>
#include <cmath>

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
  pool.parallel_for(a.channels, [&](int, int64_t c0, int64_t c1) {
    for (size_t s = 0; s < a.toks->size(); ++s) {
      const std::vector<int>& ts = (*a.toks)[s];
      if (ts.empty()) continue;
      float* win = st.conv(a.slots[s], a.layer);
      for (int t : ts) {
        float* x = a.x + static_cast<int64_t>(t) * a.stride;
        for (int64_t c = c0; c < c1; ++c) {
          float* w = win + c * (K - 1);
          const float* tap = a.taps + c * K;
          float y = 0.0f;
          for (int64_t j = 0; j < K - 1; ++j) y += w[j] * tap[j];
          y += x[c] * tap[K - 1];
          for (int64_t j = 0; j + 1 < K - 1; ++j) w[j] = w[j + 1];
          if (K > 1) w[K - 2] = x[c];
          if (a.bias) y += a.bias[c];
          x[c] = a.silu ? silu(y) : y;
        }
        if (a.snapshot && a.snapshot[t] >= 0)  // this range of channels' window after token t
          std::copy(win + c0 * (K - 1), win + c1 * (K - 1), st.conv(a.snapshot[t], a.layer) + c0 * (K - 1));
      }
    }
  }, 16);
}

}  // namespace cachet
