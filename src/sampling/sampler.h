// Token selection from a logits row. Greedy (temperature 0) and seeded temperature sampling; the full
// chain (top-k, top-p, min-p, penalties, ...) is the sampling issue's work and extends this file's API.
#pragma once

#include <cstdint>
#include <random>

#include "cachet/status.h"

namespace cachet {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  uint64_t seed = 0;

  Status validate() const;
};

// Index of the largest logit; the lowest index wins ties. n > 0.
int32_t argmax(const float* logits, int64_t n);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  int32_t sample(const float* logits, int64_t n);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace cachet
