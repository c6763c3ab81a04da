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

bool CostCurve::measured_at_or_below(int n) const {
  for (const Bucket& b : b_)
    if (b.w > 0 && b.n / b.w <= n) return true;
  return false;
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
  // Below every measured count: a guess, pessimistic about how much cheaper fewer tokens are.
  if (!lo) return mean_t(hi) * std::max(0.5, n / mean_n(hi));
  if (!hi) {
    // Past the largest measured count: the slope between the two largest measured buckets; with one bucket only,
    // 1/8 of its time per extra token (the pessimistic side: on the default model a 4-token pass measured 1.35x a
    // 1-token one) until speculation's own steps measure the counts just above decode.
    const Bucket* below = nullptr;
    for (const Bucket& b : b_)
      if (b.w > 0 && &b != lo) below = &b;
    double slope = mean_t(lo) / 8.0;
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

int SpecPolicy::batch_bucket(int batch) {
  int b = 0;
  while ((2 << b) <= batch && b < 15) ++b;
  return b;
}

void SpecPolicy::observe_step(int batch, bool drafted, int tokens, double seconds) {
  Rate& r = (drafted ? drafted_ : plain_)[batch_bucket(batch)];
  constexpr double kDecay = 0.95;
  r.w = r.w * kDecay + 1.0;
  r.tokens = r.tokens * kDecay + tokens;
  r.seconds = r.seconds * kDecay + seconds;
}

bool SpecPolicy::plain_probe(int batch) {
  int& c = probe_[batch_bucket(batch)];
  return ++c % 16 == 0;
}

std::vector<int> SpecPolicy::choose(const std::vector<double>& alphas, const std::vector<bool>& uses_draft_model,
                                    int other_tokens, int batch, const std::vector<int>* catch_up,
                                    const std::vector<int>* remaining) const {
  const int n = static_cast<int>(alphas.size());
  std::vector<int> k(n, 0);
  if (k_max_ <= 0 || n == 0) return k;
  // Nothing is drafted before a plain step of this size was measured: until then the curve below it is a guess.
  if (!target_.measured_at_or_below(other_tokens + n)) return k;
  const int bucket = batch_bucket(batch > 0 ? batch : n + other_tokens);
  if (drafted_[bucket].w >= 4 && plain_[bucket].w >= 4 && drafted_[bucket].rate() < plain_[bucket].rate()) return k;
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
  const double rate_without = gain / std::max(time, 1e-12);
  std::vector<double> next(n);  // each candidate's next marginal gain alpha^(k+1)
  for (int i = 0; i < n; ++i) next[i] = alphas[i];
  // Until the draft model's one-token-per-request passes are measured, at most two draft tokens each.
  int n_draft_reqs = 0;
  for (bool u : uses_draft_model) n_draft_reqs += u;
  const int draft_cap = draft_.measured_at_or_below(std::max(n_draft_reqs, 1)) ? k_max_ : std::min(k_max_, 2);
  for (;;) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (k[i] < (uses_draft_model[i] ? draft_cap : k_max_) && (best < 0 || next[i] > next[best])) best = i;
    if (best < 0) break;
    std::vector<int> passes = pass_tokens;
    if (uses_draft_model[best]) {
      if (static_cast<int>(passes.size()) <= k[best]) passes.resize(k[best] + 1, 0);
      passes[k[best]] += k[best] == 0 ? 2 : 1;
    }
    double new_time = time_of(verify_tokens + 1, passes);
    if (uses_draft_model[best] && k[best] == 0 && catch_up && remaining && (*catch_up)[best] > 2) {
      const double per_step = std::min(1.0 / std::max(1.0 - alphas[best], 1e-3), k_max_ + 1.0);
      const double steps_left = std::max(1.0, (*remaining)[best] / per_step);
      new_time += draft_.predict((*catch_up)[best]) / steps_left;
    }
    const double new_gain = gain + next[best];
    if (new_gain * time <= gain * new_time) break;  // tokens per second would not rise
    gain = new_gain;
    time = new_time;  // (a catch-up share stays in: it is paid once the request drafts at all)
    pass_tokens = std::move(passes);
    ++verify_tokens;
    ++k[best];
    next[best] *= alphas[best];
  }
  // What the model leaves out (sampling the verified rows, the draft's bookkeeping) and the noise of a shared
  // machine: a step drafts only when the predicted gain is at least 5%.
  if (gain / std::max(time, 1e-12) < 1.05 * rate_without) std::fill(k.begin(), k.end(), 0);
  return k;
}

}  // namespace cachet
