#include "kernels/attn_query.h"

#include <algorithm>
#include <cmath>

namespace cachet {

void quantize_query(const float* x, int64_t n, ActQ8* out) {
  constexpr int kMax = 127 * 256;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xb[e]));
    const float d = amax / static_cast<float>(kMax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    ActQ8& hi = out[2 * b];
    ActQ8& lo = out[2 * b + 1];
    int32_t sum_hi = 0, sum_lo = 0;
    for (int e = 0; e < 32; ++e) {
      const int xi = std::clamp(static_cast<int>(std::nearbyint(xb[e] * id)), -kMax, kMax);
      // hi = floor((xi + 128) / 256), so lo = xi - 256 hi lies in [-128, 127]; -128 becomes -127 (xi moved by one
      // unit, 1/32512 of the block's largest value), since maddubs' sign trick cannot negate -128.
      const int h = (xi + 128) >> 8;
      const int l = std::max(xi - kQueryHiScale * h, -127);
      hi.q[e] = static_cast<int8_t>(h);
      lo.q[e] = static_cast<int8_t>(l);
      sum_hi += h;
      sum_lo += l;
    }
    hi.d = d * kQueryHiScale;
    lo.d = d;
    hi.sum = static_cast<int16_t>(sum_hi);
    lo.sum = static_cast<int16_t>(sum_lo);
    hi.ds = lo.ds = 0.0f;
    hi.hsum[0] = hi.hsum[1] = lo.hsum[0] = lo.hsum[1] = 0;
    hi.shift = lo.shift = 0;
  }
}

}  // namespace cachet
