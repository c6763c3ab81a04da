#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"

namespace cachet {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x) for x <= 0, accurate to about 2 ulp, branch-free so the compiler vectorizes the loops that use
// it: range reduction by ln 2 (in two parts), a degree-6 polynomial on [-ln2/2, ln2/2], and 2^n built
// in the exponent bits. Inputs below -87 give 0 (they are below the smallest normal float anyway).
inline float exp_nonpositive(float x) {
  const bool tiny = x < -87.0f;
  x = std::max(x, -87.0f);
  // floor(y + 0.5) by truncation of a positive number (y >= -125.6 here): SSE2 has no floor, this vectorizes.
  const float n = static_cast<float>(static_cast<int32_t>(x * 1.44269504088896341f + 128.5f)) - 128.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return tiny ? 0.0f : e * scale;
}

// Sum of w[0..n) in float, vectorized (reassociation allowed: the lanes' order, the same on every call).
float block_sum(const float* w, int64_t n) {
  float part = 0.0f;
  {
#pragma clang fp reassociate(on)
    for (int64_t i = 0; i < n; ++i) part += w[i];
  }
  return part;
}

// Sum of w[i] (float) in double precision, vectorized: block_sum over blocks of 4096, added in double.
double sum_weights(const float* w, int64_t n) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += 4096) total += block_sum(w + b, std::min<int64_t>(4096, n - b));
  return total;
}

// The largest of x[0..n) that is not NaN (-inf when there is none), vectorized: a NaN never replaces a lane's
// maximum.
float max_of(const float* x, int64_t n) {
  float m[8];
  for (float& v : m) v = kNegInf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  float r = kNegInf;
  for (float v : m) r = v > r ? v : r;
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// Token a ranks before token b: higher logit, then lower id.
inline bool ranks_before(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }

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
  // The largest value (a vectorized pass), then the first index holding it; all NaN -> 0.
  const float mx = max_of(logits, n);
  for (int64_t i = 0; i < n; ++i)
    if (logits[i] == mx) return static_cast<int32_t>(i);
  return 0;
}

float top_probability(const float* logits, int64_t n) {
  const float mx = max_of(logits, n);
  double total = 0.0;
  float w[4096];
  for (int64_t b = 0; b < n; b += 4096) {
    const int64_t e = std::min(n, b + 4096);
    for (int64_t i = b; i < e; ++i) w[i - b] = logits[i] == logits[i] ? exp_nonpositive(logits[i] - mx) : 0.0f;
    total += sum_weights(w, e - b);
  }
  return total > 0.0 ? static_cast<float>(1.0 / total) : 0.0f;
}

int64_t TokenDist::reset(const float* logits, int64_t n, float scale) {
  live_.clear();
  logit_.resize(n);
  w_.resize(n);  // written whole by compute_weights or one_hot before anything reads it
  int64_t n_nan = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool nan = logits[i] != logits[i];
    n_nan += nan;
    logit_[i] = nan ? kNegInf : logits[i] * scale;
  }
  return n_nan;
}

void TokenDist::adjust(const SamplingParams& p, const float* raw, const int32_t* history, size_t n_history,
                       float scale) {
  const bool penalties = (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) &&
                         n_history > 0 && p.penalty_last_n != 0;
  if (!penalties && p.logit_bias.empty()) return;
  // Count in place with a sort of the (short) window, so no hash map on the hot path.
  idx_.clear();
  if (penalties) {
    const size_t start = p.penalty_last_n < 0 ? 0 : n_history - std::min<size_t>(n_history, p.penalty_last_n);
    idx_.assign(history + start, history + n_history);
    std::sort(idx_.begin(), idx_.end());
  }
  // The tokens touched here, each once: back to their raw logits, adjusted, then scaled as reset scaled the rest.
  touched_.clear();
  for (size_t i = 0; i < idx_.size(); ++i)
    if (i == 0 || idx_[i] != idx_[i - 1]) touched_.push_back(idx_[i]);
  for (const auto& [id, b] : p.logit_bias) touched_.push_back(id);
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  std::erase_if(touched_, [&](int32_t id) { return id < 0 || id >= size(); });
  for (int32_t id : touched_) logit_[id] = raw[id] != raw[id] ? kNegInf : raw[id];
  for (size_t i = 0; i < idx_.size();) {
    size_t j = i;
    while (j < idx_.size() && idx_[j] == idx_[i]) ++j;
    const int32_t id = idx_[i];
    if (id >= 0 && id < size()) {
      float& l = logit_[id];
      if (p.repetition_penalty != 1.0f) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
      l -= static_cast<float>(j - i) * p.frequency_penalty + p.presence_penalty;
    }
    i = j;
  }
  for (const auto& [id, b] : p.logit_bias)
    if (id >= 0 && id < size()) logit_[id] += b;
  for (int32_t id : touched_) logit_[id] *= scale;
}

void TokenDist::top_k(int32_t k) {
  if (k <= 0 || k >= size()) return;
  auto before = [](const Entry& a, const Entry& b) { return ranks_before(a.logit, a.id, b.logit, b.id); };
  sel_.clear();
  if (k <= 1024) {
    // One pass with a heap of the k best so far (its top is the worst of them): almost every token is
    // rejected by a single comparison against that threshold, and once the heap is full a block of 64 whose
    // largest logit does not beat it outright is skipped whole (ids come in ascending order, so a tie loses).
    const int64_t n = size();
    for (int64_t b = 0; b < n; b += 64) {
      const int64_t e = std::min<int64_t>(n, b + 64);
      if (static_cast<int32_t>(sel_.size()) == k && !(max_of(logit_.data() + b, e - b) > sel_.front().logit)) continue;
      for (int32_t i = static_cast<int32_t>(b); i < e; ++i) {
        const float l = logit_[i];
        if (!(l > kNegInf)) continue;
        if (static_cast<int32_t>(sel_.size()) < k) {
          sel_.push_back({l, i, 0.0f});
          std::push_heap(sel_.begin(), sel_.end(), before);
        } else if (ranks_before(l, i, sel_.front().logit, sel_.front().id)) {
          std::pop_heap(sel_.begin(), sel_.end(), before);
          sel_.back() = {l, i, 0.0f};
          std::push_heap(sel_.begin(), sel_.end(), before);
        }
      }
    }
    if (static_cast<int32_t>(sel_.size()) < k) return;
  } else {
    for (int32_t i = 0; i < size(); ++i)
      if (logit_[i] > kNegInf) sel_.push_back({logit_[i], i, 0.0f});
    if (static_cast<int64_t>(sel_.size()) <= k) return;
    std::nth_element(sel_.begin(), sel_.begin() + (k - 1), sel_.end(), before);
    std::swap(sel_.front(), sel_[k - 1]);
  }
  const Entry last = sel_.front();  // the worst token kept
  for (int32_t i = 0; i < size(); ++i)
    if (ranks_before(last.logit, last.id, logit_[i], i)) logit_[i] = kNegInf;
  // Later stages only need to look at these k tokens.
  live_.clear();
  for (const Entry& e : sel_) live_.push_back(e.id);
  std::sort(live_.begin(), live_.end());
}

bool TokenDist::compute_weights() {
  if (!live_.empty()) {
    std::fill(w_.begin(), w_.end(), 0.0f);
    float mx = kNegInf;
    for (int32_t i : live_) mx = std::max(mx, logit_[i]);
    for (int32_t i : live_) w_[i] = exp_nonpositive(logit_[i] - mx);
    return mx > kNegInf;
  }
  // The whole vocabulary: the logits copied with their largest found on the way, then the kernel table's
  // exponential in place (its widest vectors; -inf - mx -> 0), a table with itself bit for bit, tables within
  // rounding (docs/numerics.md).
  const int64_t n = size();
  const float* l = logit_.data();
  float* w = w_.data();
  float m[8];
  for (float& v : m) v = kNegInf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      w[i + j] = l[i + j];
      m[j] = m[j] > l[i + j] ? m[j] : l[i + j];
    }
  float mx = kNegInf;
  for (float v : m) mx = std::max(mx, v);
  for (; i < n; ++i) {
    w[i] = l[i];
    mx = std::max(mx, l[i]);
  }
  if (!(mx > kNegInf)) return false;
  kernels().exp_sum(w, n, mx);
  return true;
}

void TokenDist::top_p(float p) {
  if (p >= 1.0f) return;
  auto before = [](const Entry& a, const Entry& b) { return ranks_before(a.logit, a.id, b.logit, b.id); };
  if (!live_.empty()) {
    // After top-k: order the few live tokens outright.
    sel_.clear();
    double total = 0.0;
    for (int32_t i : live_)
      if (w_[i] > 0.0f) {
        sel_.push_back({logit_[i], i, w_[i]});
        total += w_[i];
      }
    std::sort(sel_.begin(), sel_.end(), before);
    double kept = 0.0;
    size_t keep = 0;
    while (keep < sel_.size()) {
      kept += sel_[keep++].w;
      if (kept >= p * total) break;
    }
    for (size_t j = std::max<size_t>(keep, 1); j < sel_.size(); ++j) w_[sel_[j].id] = 0.0f;
    return;
  }
  // A histogram of the weights by their top 16 bits (exponent and 7 mantissa bits; weights are in (0, 1],
  // so the key is monotone in the weight): one pass accumulates each bucket's mass, a scan from the top finds
  // the bucket where the cumulative mass crosses p, and only that bucket's tokens are ordered exactly.
  constexpr int kBuckets = 1 << 14;  // keys of floats in (0, 1] stay below 0x3F81
  mass_.assign(kBuckets, 0.0);
  const int64_t n = size();
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(w_.data());
  for (int64_t i = 0; i < n; ++i) mass_[bits[i] >> 16] += w_[i];  // dropped tokens (w = 0) land in bucket 0
  double total = 0.0;
  for (int b = 1; b < kBuckets; ++b) total += mass_[b];
  const double target = static_cast<double>(p) * total;
  double above = 0.0;
  int crossing = kBuckets - 1;
  for (; crossing > 1; --crossing) {
    if (above + mass_[crossing] >= target) break;
    above += mass_[crossing];
  }
  sel_.clear();
  for (int32_t i = 0; i < n; ++i)
    if (static_cast<int>(bits[i] >> 16) == crossing && w_[i] > 0.0f) sel_.push_back({logit_[i], i, w_[i]});
  if (sel_.empty()) return;
  std::sort(sel_.begin(), sel_.end(), before);
  size_t keep = 0;
  double kept = above;
  while (keep < sel_.size()) {
    kept += sel_[keep++].w;
    if (kept >= target) break;
  }
  // Drop every lower bucket wholesale and the crossing bucket's tail.
  const uint32_t cut = static_cast<uint32_t>(crossing) << 16;
  for (int64_t i = 0; i < n; ++i) w_[i] = bits[i] < cut ? 0.0f : w_[i];
  for (size_t j = std::max<size_t>(keep, 1); j < sel_.size(); ++j) w_[sel_[j].id] = 0.0f;
}

void TokenDist::min_p(float p) {
  if (p <= 0.0f) return;
  if (!live_.empty()) {
    float wmax = 0.0f;
    for (int32_t i : live_) wmax = std::max(wmax, w_[i]);
    for (int32_t i : live_) w_[i] = w_[i] < p * wmax ? 0.0f : w_[i];
    return;
  }
  const float wmax = max_of(w_.data(), size());
  const float threshold = p * wmax;
  for (float& w : w_) w = w < threshold ? 0.0f : w;
}

int32_t TokenDist::draw(double u) const {
  if (!live_.empty()) {  // ids in ascending order, as below
    double total = 0.0;
    for (int32_t i : live_) total += w_[i];
    double acc = 0.0;
    int32_t last = -1;
    for (int32_t i : live_) {
      if (w_[i] <= 0.0f) continue;
      acc += w_[i];
      last = i;
      if (u * total < acc) return i;
    }
    return last;
  }
  // Blocks of 64 tokens: a block whose sum (block_sum) leaves the running total short of the target is passed
  // whole; the one it reaches is walked token by token from the total before it. Rounding can leave the walk
  // short of the target inside that block: then it goes on past the block, and past the end to the last token
  // with weight.
  const int64_t n = size();
  const float* w = w_.data();
  const double target = u * sum_weights(w, n);
  double acc = 0.0;
  for (int64_t b = 0; b < n; b += 64) {
    const int64_t e = std::min<int64_t>(n, b + 64);
    const double part = block_sum(w + b, e - b);
    if (target < acc + part) {
      double a = acc;
      for (int64_t i = b; i < e; ++i) {
        if (w[i] <= 0.0f) continue;
        a += w[i];
        if (target < a) return static_cast<int32_t>(i);
      }
    }
    acc += part;
  }
  for (int64_t i = n - 1; i >= 0; --i)
    if (w[i] > 0.0f) return static_cast<int32_t>(i);
  return -1;
}

int32_t TokenDist::best() const {
  // The largest logit (a vectorized pass), then the first token holding it: the lowest id wins ties.
  const float mx = max_of(logit_.data(), size());
  if (!(mx > kNegInf)) return -1;
  return static_cast<int32_t>(std::find(logit_.begin(), logit_.end(), mx) - logit_.begin());
}

double TokenDist::total_weight() const {
  if (!live_.empty()) {
    double t = 0.0;
    for (int32_t i : live_) t += w_[i];
    return t;
  }
  return sum_weights(w_.data(), size());
}

double TokenDist::prob(int32_t id) const {
  if (id < 0 || id >= size() || w_[id] <= 0.0f) return 0.0;
  return w_[id] / total_weight();
}

void TokenDist::one_hot(int32_t id) {
  std::fill(w_.begin(), w_.end(), 0.0f);
  w_[id] = 1.0f;
  live_.assign(1, id);
}

std::vector<int32_t> TokenDist::kept() const {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < size(); ++i)
    if (w_[i] > 0.0f) v.push_back(i);
  return v;
}

Sampler::Sampler(SamplingParams params) : p_(std::move(params)), rng_(p_.seed) {}

Status Sampler::prepare(TokenDist& dist, const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                       int32_t n_prompt, float scale) {
  if (int64_t n_nan = dist.reset(logits, n_vocab, scale); n_nan > 0)
    return invalid_argument("the logits contain " + std::to_string(n_nan) + " NaN value(s) (first at token " +
                            std::to_string(std::find_if(logits, logits + n_vocab, [](float x) { return x != x; }) -
                                           logits) +
                            "): the model produced invalid numbers");
  const size_t skip = p_.penalize_prompt ? 0 : std::min<size_t>(history.size(), std::max(0, n_prompt));
  dist.adjust(p_, logits, history.data() + skip, history.size() - skip, scale);
  return Status::ok();
}

Result<int32_t> Sampler::chain(TokenDist& dist, const float* logits, int64_t n_vocab,
                               std::span<const int32_t> history, int32_t n_prompt) {
  // Temperature is applied with the copy (1/T times each logit; greedy: times 1, the logits themselves).
  const bool greedy = p_.temperature <= 0.0f;
  CACHET_RETURN_IF_ERROR(prepare(dist, logits, n_vocab, history, n_prompt, greedy ? 1.0f : 1.0f / p_.temperature));
  int32_t only = -1;
  if (greedy) {
    only = dist.best();
  } else {
    dist.top_k(p_.top_k);
    if (dist.compute_weights()) {
      dist.top_p(p_.top_p);
      dist.min_p(p_.min_p);
      return -1;
    }
  }
  return only >= 0 ? only : argmax(logits, n_vocab);  // everything banned: fall back to the raw argmax
}

Result<SampleResult> Sampler::sample(const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                                     int32_t n_prompt) {
  // The working distribution is the thread's, not the request's: nothing of it outlives the call, and one pair
  // of vocabulary-sized arrays a thread stays in its cache from one request's draw to the next (a request's own
  // pair, 64 of them at once, did not).
  thread_local TokenDist scratch;
  SampleResult r;
  CACHET_ASSIGN_OR_RETURN(r.id, chain(scratch, logits, n_vocab, history, n_prompt));
  if (r.id < 0) r.id = scratch.draw(next_uniform());
  if (r.id < 0) r.id = argmax(logits, n_vocab);
  fill_logprobs(logits, n_vocab, &r);
  return r;
}

Result<const TokenDist*> Sampler::distribution(const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                                               int32_t n_prompt) {
  CACHET_ASSIGN_OR_RETURN(int32_t only, chain(dist_, logits, n_vocab, history, n_prompt));
  if (only >= 0) dist_.one_hot(only);
  return &dist_;
}

void Sampler::fill_logprobs(const float* logits, int64_t n_vocab, SampleResult* out) {
  SampleResult& r = *out;
  if (p_.logprobs >= 0) {
    // Log-softmax of the raw logits (before penalties, bias and temperature), as OpenAI reports them.
    const float mx = logits[argmax(logits, n_vocab)];
    thread_local std::vector<float> lp_w;  // the normalizer's scratch, the thread's
    lp_w.resize(n_vocab);
    for (int64_t i = 0; i < n_vocab; ++i) lp_w[i] = logits[i] == logits[i] ? logits[i] : kNegInf;
    kernels().exp_sum(lp_w.data(), n_vocab, mx);  // NaN and -inf -> 0
    const double total = sum_weights(lp_w.data(), n_vocab);
    const double log_total = std::log(total);
    auto lp = [&](int32_t id) { return static_cast<float>(logits[id] - mx - log_total); };
    r.logprob = lp(r.id);
    // The top N in one pass with a small sorted buffer. Ids come in ascending order, so once the buffer is full a
    // token must beat its worst logit outright; a block of 64 whose largest does not is skipped whole.
    std::vector<int32_t> top;
    const auto full = [&] { return static_cast<int32_t>(top.size()) == p_.logprobs; };
    for (int64_t b = 0; b < n_vocab && p_.logprobs > 0; b += 64) {
      const int64_t e = std::min<int64_t>(n_vocab, b + 64);
      if (full() && !(max_of(logits + b, e - b) > logits[top.back()])) continue;
      for (int32_t i = static_cast<int32_t>(b); i < e; ++i) {
        if (logits[i] != logits[i]) continue;
        if (full() && !ranks_before(logits[i], i, logits[top.back()], top.back())) continue;
        auto pos = std::upper_bound(top.begin(), top.end(), i, [&](int32_t a, int32_t b) {
          return ranks_before(logits[a], a, logits[b], b);
        });
        top.insert(pos, i);
        if (static_cast<int32_t>(top.size()) > p_.logprobs) top.pop_back();
      }
    }
    for (int32_t id : top) r.top.push_back({id, lp(id)});
  }
}

}  // namespace cachet
