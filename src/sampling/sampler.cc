#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cachet {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return invalid_argument("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  return Status::ok();
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t Sampler::sample(const float* logits, int64_t n) {
  if (p_.temperature <= 0.0f) return argmax(logits, n);
  const float mx = logits[argmax(logits, n)];
  std::vector<double> w(n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::exp((static_cast<double>(logits[i]) - mx) / p_.temperature);
    sum += w[i];
  }
  // Inverse-CDF draw with a 53-bit uniform: reproducible for a seed on any platform.
  double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    acc += w[i];
    if (u < acc && w[i] > 0.0) return static_cast<int32_t>(i);
  }
  for (int64_t i = n - 1; i >= 0; --i)
    if (w[i] > 0.0) return static_cast<int32_t>(i);
  return argmax(logits, n);
}

}  // namespace cachet
