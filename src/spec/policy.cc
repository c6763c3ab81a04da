#include "spec/policy.h"

#include <algorithm>
#include <cmath>

namespace cachet {

int CostCurve::bucket(int n) {
  if (n <= 32) return std::max(n, 1) - 1;  // 0..31
  int b = 32, top = 64;
  while (n > top && b < 47) {
    top *= 2;
    ++b;
  }
  return b;  // 33..64 -> 32, 65..128 -> 33, ...
}

void CostCurve::observe(int n_tokens, double seconds) {
  Bucket& b = b_[bucket(n_tokens)];
  constexpr double kDecay = 0.8;  // about the last five passes of this size
  b.w = b.w * kDecay + 1.0;
  b.n = b.n * kDecay + n_tokens;
  b.t = b.t * kDecay + seconds;
}

bool CostCurve::measured() const {
  for (const Bucket& b : b_)
    if (b.w > 0) return true;
  return false;
}

double CostCurve::predict(int n) const {
  const Bucket* lo = nullptr;
  const Bucket* hi = nullptr;
  for (const Bucket& b : b_) {
    if (b.w <= 0) continue;
    const double bn = b.n / b.w;
    if (bn <= n) lo = &b;
    else if (!hi) hi = &b;
  }
  auto mean_n = [](const Bucket* b) { return b->n / b->w; };
  auto mean_t = [](const Bucket* b) { return b->t / b->w; };
  if (!lo && !hi) return 0.0;
  if (!lo) return mean_t(hi);
  if (!hi) {
    // Past the largest measured count: the slope between the two largest measured buckets; with one bucket only, 1/64 of its time per
    // extra token until more is measured (speculation's own steps measure the counts just above decode).
    const Bucket* below = nullptr;
    for (const Bucket& b : b_)
      if (b.w > 0 && &b != lo) below = &b;
    double slope = mean_t(lo) / 64.0;
    if (below) slope = std::max(0.0, (mean_t(lo) - mean_t(below)) / (mean_n(lo) - mean_n(below)));
    return mean_t(lo) + slope * (n - mean_n(lo));
  }
  const double f = (n - mean_n(lo)) / (mean_n(hi) - mean_n(lo));
  return mean_t(lo) + f * (mean_t(hi) - mean_t(lo));
}

void Acceptance::add(int proposed, int accepted_n) {
  // Tokens after the first rejection were never tested: count the accepted ones and that one rejection.
  const int tried_n = accepted_n + (accepted_n < proposed ? 1 : 0);
  accepted = accepted * 0.9 + accepted_n;
  tried = tried * 0.9 + tried_n;
}

std::vector<int> SpecPolicy::choose(const std::vector<double>& alphas, const std::vector<bool>& uses_draft_model,
                                    int other_tokens) const {
  const int n = static_cast<int>(alphas.size());
  std::vector<int> k(n, 0);
  if (k_max_ <= 0 || n == 0) return k;
  // Expected tokens emitted this step over its predicted time; draft tokens are added one at a time, the most
  // likely to be accepted first, while that ratio rises. The draft model's pass j carries one token of each
  // request drafting more than j (pass 0 also its catch-up: about two tokens).
  int verify_tokens = other_tokens + n;
  std::vector<int> pass_tokens;  // draft model tokens per pass
  auto time_of = [&](int verify, const std::vector<int>& passes) {
    double t = target_.predict(verify);
    for (int m : passes) t += draft_.predict(m);
    return t;
  };
  double gain = n;
  double time = time_of(verify_tokens, pass_tokens);
  std::vector<double> next(n);  // each candidate's next marginal gain alpha^(k+1)
  for (int i = 0; i < n; ++i) next[i] = alphas[i];
  for (;;) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (k[i] < k_max_ && (best < 0 || next[i] > next[best])) best = i;
    if (best < 0) break;
    std::vector<int> passes = pass_tokens;
    if (uses_draft_model[best]) {
      if (static_cast<int>(passes.size()) <= k[best]) passes.resize(k[best] + 1, 0);
      passes[k[best]] += k[best] == 0 ? 2 : 1;
    }
    const double new_time = time_of(verify_tokens + 1, passes);
    const double new_gain = gain + next[best];
    if (new_gain * time <= gain * new_time) break;  // tokens per second would not rise
    gain = new_gain;
    time = new_time;
    pass_tokens = std::move(passes);
    ++verify_tokens;
    ++k[best];
    next[best] *= alphas[best];
  }
  return k;
}

}  // namespace cachet
