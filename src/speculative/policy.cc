#include "speculative/policy.h"

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

double CostCurve::largest_measured() const {
  double m = 0;
  for (const Bucket& b : b_)
    if (b.w > 0) m = std::max(m, b.n / b.w);
  return m;
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
  if (proposed <= 0) return;
  first_tried = first_tried * decay + 1.0;
  first_accepted = first_accepted * decay + (accepted_n >= 1 ? 1.0 : 0.0);
  // Token j >= 2 was tried when token j - 1 was accepted; tokens after the first rejection were never tested.
  const int cont_n = accepted_n >= 1 ? std::min(accepted_n + 1, proposed) - 1 : 0;
  cont_tried = cont_tried * decay + cont_n;
  cont_accepted = cont_accepted * decay + std::max(accepted_n - 1, 0);
}

double SpecPolicy::draft_time(int n) const {
  const double own = draft_.predict(n);
  const double m = draft_.largest_measured();
  if (m <= 0 || n <= m || !target_.measured()) return own;
  const double tm = target_.predict(static_cast<int>(std::lround(m)));
  if (tm <= 0) return own;
  return std::max(own, target_.predict(n) * draft_.predict(static_cast<int>(std::lround(m))) / tm);
}

int SpecPolicy::idle_retry(int idle_steps, int catch_up, int batch) {
  if (idle_steps < 32) return 0;
  if (catch_up <= 8) return 1;
  if (guard_holds(batch)) return 0;
  const double cost = draft_time(catch_up);
  if (retry_credit_ < cost && !(idle_steps >= 256 && retry_credit_ >= 0)) return 0;
  retry_credit_ -= cost;
  return 2;
}

bool SpecPolicy::guard_holds(int batch) const {
  const int b = batch_bucket(batch);
  return drafted_[b].w >= 4 && plain_[b].w >= 4 && drafted_[b].rate() < plain_[b].rate();
}

bool SpecPolicy::drafting_proven(int batch) const {
  const int b = batch_bucket(batch);
  return drafted_[b].w >= 4 && plain_[b].w >= 4 && drafted_[b].rate() > plain_[b].rate();
}

int SpecPolicy::batch_bucket(int batch) {
  int b = 0;
  while ((2 << b) <= batch && b < 15) ++b;
  return b;
}

void SpecPolicy::observe_step(int batch, bool drafted, int tokens, double seconds) {
  const int b = batch_bucket(batch);
  Rate& r = (drafted ? drafted_ : plain_)[b];
  constexpr double kDecay = 0.95;
  r.w = r.w * kDecay + 1.0;
  r.tokens = r.tokens * kDecay + tokens;
  r.seconds = r.seconds * kDecay + seconds;
}

bool SpecPolicy::plain_probe(int batch) {
  int& c = probe_[batch_bucket(batch)];
  return ++c % 16 == 0;
}

bool SpecPolicy::explore_probe(int batch) const { return probe_[batch_bucket(batch)] % 16 == 8; }

std::vector<int> SpecPolicy::choose(const std::vector<AcceptRates>& rates, const std::vector<bool>& uses_draft_model,
                                    int other_tokens, int batch, const std::vector<int>* catch_up,
                                    const std::vector<int>* remaining) {
  const int n = static_cast<int>(rates.size());
  std::vector<int> k(n, 0);
  if (k_max_ <= 0 || n == 0) return k;
  const int b = batch > 0 ? batch : n + other_tokens;
  if (guard_holds(b) && ++retry_[batch_bucket(b)] % 32 != 0) return k;
  k = best_split(rates, uses_draft_model, other_tokens, catch_up, remaining);
  // A draft model's catch-up (its prompt, or the tokens it missed) is paid once and earned back over the steps
  // that follow; a step made cheap to extend by someone's prefill chunk says nothing about those. So a request
  // starts (or resumes) drafting only if it would draft in a plain decode step of this batch as well.
  const int steady_other = std::max(0, (batch > 0 ? batch : n) - n);
  if (catch_up && steady_other < other_tokens) {
    bool any = false;
    for (int i = 0; i < n; ++i) any = any || (k[i] > 0 && (*catch_up)[i] > 2);
    if (any) {
      const std::vector<int> steady = best_split(rates, uses_draft_model, steady_other, catch_up, remaining);
      for (int i = 0; i < n; ++i)
        if ((*catch_up)[i] > 2 && steady[i] == 0) k[i] = 0;
    }
  }
  // Where drafting has not been measured faster than plain steps at this batch size, a catch-up is an
  // experiment, paid from the credit (after the checks above, so none is charged for a draft they cancel).
  if (catch_up && !drafting_proven(b))
    for (int i = 0; i < n; ++i) {
      if (k[i] == 0 || (*catch_up)[i] <= 8) continue;
      const double cost = draft_time((*catch_up)[i]);
      if (retry_credit_ >= cost) retry_credit_ -= cost;
      else k[i] = 0;
    }
  return k;
}

std::vector<int> SpecPolicy::best_split(const std::vector<AcceptRates>& rates,
                                        const std::vector<bool>& uses_draft_model, int other_tokens,
                                        const std::vector<int>* catch_up, const std::vector<int>* remaining) const {
  const int n = static_cast<int>(rates.size());
  std::vector<int> k(n, 0);
  // Nothing is drafted before a plain step of this size was measured: until then the curve below it is a guess.
  if (!target_.measured_at_or_below(other_tokens + n)) return k;
  // Expected tokens emitted this step over its predicted time. Draft tokens are added one at a time, the most
  // likely to be accepted first, to every cap; the best prefix of that order wins. The draft model's pass j
  // carries one token of each request drafting more than j (pass 0 also its catch-up: about two tokens).
  int verify_tokens = other_tokens + n;
  std::vector<int> pass_tokens;  // draft model tokens per pass
  auto time_of = [&](int verify, const std::vector<int>& passes) {
    double t = target_.predict(verify);
    for (int m : passes) t += draft_time(m);
    return t;
  };
  double gain = n;
  double time = time_of(verify_tokens, pass_tokens);
  const double rate_without = gain / std::max(time, 1e-12);
  double best_rate = rate_without;
  std::vector<int> best_k = k;
  std::vector<double> next(n);  // each candidate's next marginal gain: first * cont^k
  for (int i = 0; i < n; ++i) next[i] = rates[i].first;
  // Until the draft model's one-token-per-request passes are measured, at most two draft tokens each.
  int n_draft_reqs = 0;
  for (bool u : uses_draft_model) n_draft_reqs += u;
  const int draft_cap = draft_.measured_at_or_below(std::max(n_draft_reqs, 1)) ? k_max_ : std::min(k_max_, 2);
  // Tokens a request emits per drafting step, to spread a draft model's catch-up prefill over the steps it serves.
  auto per_step = [&](int i) {
    double e = 1.0, p = rates[i].first;
    for (int j = 0; j < k_max_; ++j, p *= rates[i].cont) e += p;
    return e;
  };
  for (;;) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (k[i] < (uses_draft_model[i] ? draft_cap : k_max_) && (best < 0 || next[i] > next[best])) best = i;
    if (best < 0) break;
    if (uses_draft_model[best]) {
      if (static_cast<int>(pass_tokens.size()) <= k[best]) pass_tokens.resize(k[best] + 1, 0);
      pass_tokens[k[best]] += k[best] == 0 ? 2 : 1;
    }
    ++verify_tokens;
    // A draft model's catch-up prefill is charged once its request drafts at all, in proportion to the steps
    // the prefill will serve.
    double shares = 0;
    for (int i = 0; i < n; ++i)
      if (uses_draft_model[i] && catch_up && remaining && (*catch_up)[i] > 2 && (k[i] > 0 || i == best))
        shares += draft_time((*catch_up)[i]) / std::max(1.0, (*remaining)[i] / per_step(i));
    time = time_of(verify_tokens, pass_tokens) + shares;
    gain += next[best];
    ++k[best];
    next[best] *= rates[best].cont;
    const double rate = gain / std::max(time, 1e-12);
    if (rate > best_rate) {
      best_rate = rate;
      best_k = k;
    }
  }
  // What the model leaves out (sampling the verified rows, the draft's bookkeeping) and the noise of a shared
  // machine: a step drafts only when the predicted gain is at least 5%.
  if (best_rate < 1.05 * rate_without) std::fill(best_k.begin(), best_k.end(), 0);
  return best_k;
}

}  // namespace cachet
