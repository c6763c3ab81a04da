#include "spec/policy.h"

#include <algorithm>
#include <cmath>

namespace cachet {

void LinearFit::add(double x, double y) {
  sw_ = sw_ * decay_ + 1.0;
  sx_ = sx_ * decay_ + x;
  sy_ = sy_ * decay_ + y;
  sxx_ = sxx_ * decay_ + x * x;
  sxy_ = sxy_ * decay_ + x * y;
  n_ += 1;
}

double LinearFit::b() const {
  if (!fitted()) return 0.0;
  const double mx = sx_ / sw_, my = sy_ / sw_;
  return std::max(0.0, (sxy_ / sw_ - mx * my) / var_x());
}

double LinearFit::a() const {
  if (!fitted()) return mean_y();
  return std::max(0.0, sy_ / sw_ - b() * (sx_ / sw_));
}

void Acceptance::add(int proposed, int accepted_n) {
  // Tokens after the first rejection were never tested: count the accepted ones and that one rejection.
  const int tried_n = accepted_n + (accepted_n < proposed ? 1 : 0);
  accepted = accepted * 0.9 + accepted_n;
  tried = tried * 0.9 + tried_n;
}

// Before the fits have seen varied step sizes, the cost per token is taken as 1/64 of the fixed cost: the
// knee of a memory-bound CPU matmul (measured on the default model: a 64-token step costs about twice a
// 1-token step). The first prefill or speculative step replaces it with the measured slope.
double SpecPolicy::target_a() const { return target_.fitted() ? target_.a() : std::max(target_.mean_y(), 1e-6); }
double SpecPolicy::target_b() const { return target_.fitted() ? target_.b() : target_a() / 64.0; }
double SpecPolicy::draft_c() const { return draft_.fitted() ? draft_.a() : draft_.mean_y(); }
double SpecPolicy::draft_d() const { return draft_.fitted() ? draft_.b() : draft_c() / 64.0; }

std::vector<int> SpecPolicy::choose(const std::vector<double>& alphas, const std::vector<bool>& uses_draft_model,
                                    int other_tokens) const {
  const int n = static_cast<int>(alphas.size());
  std::vector<int> k(n, 0);
  if (k_max_ <= 0 || n == 0) return k;
  const double a = target_a(), b = target_b(), c = draft_c(), d = draft_d();
  // Expected tokens emitted this step and its time, with no draft at all.
  double gain = n;
  double time = a + b * (other_tokens + n);
  int draft_passes = 0;
  std::vector<double> next(n);  // each candidate's next marginal gain alpha^(k+1)
  for (int i = 0; i < n; ++i) next[i] = alphas[i];
  for (;;) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (k[i] < k_max_ && (best < 0 || next[i] > next[best])) best = i;
    if (best < 0) break;
    double dt = b;  // one more position verified
    if (uses_draft_model[best]) {
      dt += d;  // one more token through a draft pass
      if (k[best] + 1 > draft_passes) dt += c;  // a new pass
    }
    const double new_gain = gain + next[best];
    if (new_gain * time <= gain * (time + dt)) break;  // tokens per second would not rise
    gain = new_gain;
    time += dt;
    if (uses_draft_model[best]) draft_passes = std::max(draft_passes, k[best] + 1);
    ++k[best];
    next[best] *= alphas[best];
  }
  return k;
}

}  // namespace cachet
