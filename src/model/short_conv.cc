#include "model/short_conv.h"

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "model/causal_conv.h"

namespace cachet {

void short_conv(ThreadPool& pool, const ShortConvArgs& a) {
  const int T = a.n_tokens;
  const int64_t w = a.width;
  StateStore& st = *a.store;
  CACHET_CHECK(st.conv_floats() == (a.kernel - 1) * w);
  const std::vector<std::vector<int>> toks =
      rows_by_sequence(a);
  // B * x into B's columns, the conv over them in place, then C * conv.
  for (int t = 0; t < T; ++t) {
    float* row = a.bcx + static_cast<int64_t>(t) * 3 * w;
    for (int64_t c = 0; c < w; ++c) row[c] *= row[2 * w + c];
  }
  CausalConvArgs conv;
  conv.toks = &toks;
  conv.slots = a.slots;
  conv.store = &st;
  conv.layer = a.layer;
  conv.channels = w;
  conv.kernel = a.kernel;
  conv.taps = a.taps;
  conv.x = a.bcx;
  conv.stride = 3 * w;
  conv.snapshot = a.snapshot;
  causal_conv(pool, conv);
  for (int t = 0; t < T; ++t) {
    const float* row = a.bcx + static_cast<int64_t>(t) * 3 * w;
    float* o = a.out + static_cast<int64_t>(t) * w;
    for (int64_t c = 0; c < w; ++c) o[c] = row[w + c] * row[c];
  }
}

}  // namespace cachet
