#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cachet {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Candidate order for every selection: higher logit first, then lower id. A strict total order, so
// "the k best" and "the smallest prefix" are unique and never depend on the input permutation.
inline bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void drop_neg_inf(std::vector<Candidate>& c) {
  c.erase(std::remove_if(c.begin(), c.end(), [](const Candidate& x) { return !(x.logit > kNegInf); }), c.end());
}

}  // namespace

Status SamplingParams::validate(int64_t n_vocab) const {
  auto bad = [](const std::string& m) { return invalid_argument(m); };
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return bad("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (top_k < 0) return bad("top_k must be >= 0 (0 disables it), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return bad("repetition_penalty must be a finite number > 0, got " + std::to_string(repetition_penalty));
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    return bad("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (penalty_last_n < -1) return bad("penalty_last_n must be >= -1, got " + std::to_string(penalty_last_n));
  for (const auto& [id, b] : logit_bias) {
    if (id < 0 || id >= n_vocab)
      return bad("logit_bias token " + std::to_string(id) + " is outside the vocabulary (0.." +
                 std::to_string(n_vocab - 1) + ")");
    if (std::isnan(b) || b == std::numeric_limits<float>::infinity())
      return bad("logit_bias for token " + std::to_string(id) + " must be a number or -inf");
  }
  for (const auto& s : stop)
    if (s.empty()) return bad("stop sequences must not be empty");
  if (max_tokens < 0) return bad("max_tokens must be >= 0, got " + std::to_string(max_tokens));
  if (logprobs > 20) return bad("logprobs must be at most 20, got " + std::to_string(logprobs));
  return Status::ok();
}

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

namespace sampling {

void apply_penalties(std::vector<Candidate>& c, const SamplingParams& p, const std::vector<int32_t>& history) {
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  if (history.empty() || p.penalty_last_n == 0) return;
  // Counts over the window; the candidate vector is indexed by id at this point (it holds the whole vocab).
  size_t start = p.penalty_last_n < 0 ? 0 : history.size() - std::min<size_t>(history.size(), p.penalty_last_n);
  std::unordered_map<int32_t, int32_t> counts;
  for (size_t i = start; i < history.size(); ++i) counts[history[i]]++;
  for (const auto& [id, n] : counts) {
    if (id < 0 || static_cast<size_t>(id) >= c.size()) continue;
    float& l = c[id].logit;
    if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
  }
}

void apply_logit_bias(std::vector<Candidate>& c, const SamplingParams& p) {
  for (const auto& [id, b] : p.logit_bias)
    if (id >= 0 && static_cast<size_t>(id) < c.size()) c[id].logit += b;
}

void apply_temperature(std::vector<Candidate>& c, float temperature) {
  const float inv = 1.0f / temperature;
  for (auto& x : c) x.logit *= inv;
}

void top_k(std::vector<Candidate>& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) return;
  std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), better);
  c.resize(k);
}

// Smallest prefix (in `better` order) whose probability mass reaches p, by weighted quickselect: linear
// expected time, no sort. Always keeps at least one token.
void top_p(std::vector<Candidate>& c, float p) {
  if (p >= 1.0f || c.size() <= 1) return;
  float mx = kNegInf;
  for (const auto& x : c) mx = std::max(mx, x.logit);
  double total = 0.0;
  for (const auto& x : c) total += std::exp(static_cast<double>(x.logit - mx));
  const double target = static_cast<double>(p) * total;
  auto w = [&](const Candidate& x) { return std::exp(static_cast<double>(x.logit - mx)); };
  // Invariant: c[0, lo) is kept (mass `kept`), c[lo, hi) undecided, everything after hi is dropped.
  size_t lo = 0, hi = c.size();
  double kept = 0.0;
  while (hi - lo > 1) {
    // Deterministic pivot: median of three by position.
    size_t mid = lo + (hi - lo) / 2;
    Candidate a = c[lo], b = c[mid], d = c[hi - 1];
    Candidate pivot = better(a, b) ? (better(b, d) ? b : (better(a, d) ? d : a)) : (better(a, d) ? a : (better(b, d) ? d : b));
    auto split = std::partition(c.begin() + lo, c.begin() + hi, [&](const Candidate& x) { return better(x, pivot); });
    size_t s = split - c.begin();  // c[lo, s) beat the pivot; c[s] is the pivot after this swap
    auto piv = std::find_if(c.begin() + s, c.begin() + hi, [&](const Candidate& x) { return x.id == pivot.id; });
    std::iter_swap(c.begin() + s, piv);
    double upper = 0.0;
    for (size_t i = lo; i < s; ++i) upper += w(c[i]);
    if (kept + upper >= target) {
      hi = s;  // the prefix ends inside the better part
    } else if (kept + upper + w(c[s]) >= target) {
      lo = hi = s + 1;  // the pivot is the crossing token
    } else {
      kept += upper + w(c[s]);
      lo = s + 1;
    }
  }
  // One undecided token left at lo (when lo < hi): it is the crossing token.
  c.resize(std::max<size_t>(1, std::min(c.size(), hi)));
}

void min_p(std::vector<Candidate>& c, float p) {
  if (p <= 0.0f || c.empty()) return;
  float mx = kNegInf;
  for (const auto& x : c) mx = std::max(mx, x.logit);
  // p_i >= p * p_max  <=>  logit_i >= max + ln(p)
  const float threshold = mx + std::log(p);
  c.erase(std::remove_if(c.begin(), c.end(), [&](const Candidate& x) { return x.logit < threshold; }), c.end());
}

int32_t draw(std::vector<Candidate>& c, double u) {
  std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  float mx = kNegInf;
  for (const auto& x : c) mx = std::max(mx, x.logit);
  double total = 0.0;
  for (const auto& x : c) total += std::exp(static_cast<double>(x.logit - mx));
  const double target = u * total;
  double acc = 0.0;
  int32_t last = c.empty() ? -1 : c.back().id;
  for (const auto& x : c) {
    double px = std::exp(static_cast<double>(x.logit - mx));
    if (px <= 0.0) continue;
    acc += px;
    last = x.id;
    if (target < acc) return x.id;
  }
  return last;
}

}  // namespace sampling

Sampler::Sampler(SamplingParams params) : p_(std::move(params)), rng_(p_.seed) {}

SampleResult Sampler::sample(const float* logits, int64_t n_vocab, const std::vector<int32_t>& history,
                             int32_t n_prompt) {
  SampleResult r;
  cand_.resize(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i)
    cand_[i] = {static_cast<int32_t>(i), std::isnan(logits[i]) ? kNegInf : logits[i]};
  if (!p_.penalize_prompt && n_prompt > 0) {
    std::vector<int32_t> generated(history.begin() + std::min<size_t>(history.size(), n_prompt), history.end());
    sampling::apply_penalties(cand_, p_, generated);
  } else {
    sampling::apply_penalties(cand_, p_, history);
  }
  sampling::apply_logit_bias(cand_, p_);
  if (p_.temperature <= 0.0f) {
    // Greedy: the best remaining logit, lowest id on ties; -inf everywhere falls back to the raw argmax.
    int32_t best = -1;
    for (const auto& x : cand_)
      if (x.logit > kNegInf && (best < 0 || x.logit > cand_[best].logit)) best = x.id;
    r.id = best >= 0 ? best : argmax(logits, n_vocab);
  } else {
    drop_neg_inf(cand_);
    if (cand_.empty()) {
      r.id = argmax(logits, n_vocab);
    } else {
      sampling::apply_temperature(cand_, p_.temperature);
      sampling::top_k(cand_, p_.top_k);
      sampling::top_p(cand_, p_.top_p);
      sampling::min_p(cand_, p_.min_p);
      r.id = sampling::draw(cand_, next_uniform());
    }
  }
  if (p_.logprobs >= 0) {
    // Log-softmax of the raw logits (before penalties, bias and temperature), as OpenAI reports them.
    float mx = logits[argmax(logits, n_vocab)];
    double total = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i)
      if (!std::isnan(logits[i])) total += std::exp(static_cast<double>(logits[i] - mx));
    const double log_total = std::log(total);
    auto lp = [&](int32_t id) { return static_cast<float>(logits[id] - mx - log_total); };
    r.logprob = lp(r.id);
    if (p_.logprobs > 0) {
      std::vector<Candidate> all(n_vocab);
      for (int64_t i = 0; i < n_vocab; ++i)
        all[i] = {static_cast<int32_t>(i), std::isnan(logits[i]) ? kNegInf : logits[i]};
      sampling::top_k(all, p_.logprobs);
      std::sort(all.begin(), all.end(), better);
      for (const auto& x : all) r.top.push_back({x.id, lp(x.id)});
    }
  }
  return r;
}

}  // namespace cachet
