// Token selection from a logits row. One documented chain (docs/sampling.md):
//
//   penalties -> logit bias -> temperature -> top-k -> top-p -> min-p -> draw
//
// Temperature 0 is greedy: penalties and bias still apply, then the largest logit wins (lowest id on ties).
// No stage sorts the vocabulary: top-k and top-p are linear-time selections. One RNG per request, seeded:
// the same seed gives the same tokens whatever else runs and whatever the thread count.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachet/sampling.h"
#include "cachet/status.h"

namespace cachet {

// Index of the largest value; the lowest index wins ties; NaN never wins. n > 0.
int32_t argmax(const float* logits, int64_t n);
// softmax(logits)[argmax]: how sure a row is of its best token (one vectorized pass).
float top_probability(const float* logits, int64_t n);

struct SampleResult {
  int32_t id = -1;
  float logprob = 0.0f;               // of the chosen token under the raw logits (log-softmax)
  std::vector<TokenLogprob> top;      // the N most likely tokens under the raw logits, most likely first
};

// The working distribution over the whole vocabulary, dense by token id: logits after penalties, bias and
// temperature, then weights w = exp(logit - max) where a dropped token has w = 0. Every stage is a linear
// pass or a linear-time selection; none sorts the vocabulary. Ties are broken by token id (lower first),
// so "the k best" and "the smallest set reaching p" are unique.
class TokenDist {
 public:
  // Copies a logits row times `scale` (the temperature's 1/T, or 1); returns the number of NaNs found (they
  // become -inf and are never drawn).
  int64_t reset(const float* logits, int64_t n, float scale = 1.0f);
  int64_t size() const { return static_cast<int64_t>(logit_.size()); }
  float* logits() { return logit_.data(); }

  // Penalties over the history, then the logit bias, on the raw logits (`raw`, the row reset copied) of the
  // tokens they touch, which are then scaled as reset scaled the rest: each logit is ((raw penalized) + bias) x
  // scale, the chain's order, with one pass over the vocabulary in all.
  void adjust(const SamplingParams& p, const float* raw, const int32_t* history, size_t n_history, float scale);
  // Keeps the k best logits (k <= 0: all). Call before compute_weights.
  void top_k(int32_t k);
  // w = exp(logit - max) for every token (0 for -inf); returns false when no token is left.
  bool compute_weights();
  // Keeps the smallest set, best first, whose mass reaches p of the total (at least one token).
  void top_p(float p);
  // Keeps tokens with w >= p * w_max.
  void min_p(float p);
  // The token where u * (total weight) falls, visiting tokens in id order. u in [0, 1).
  int32_t draw(double u) const;
  // Best remaining token by logit (greedy).
  int32_t best() const;
  std::vector<int32_t> kept() const;  // ids with w > 0 (tests)
  // The final weights (dense by id, 0 = dropped) and the tokens that can carry weight: live() when not
  // empty (after top-k, ascending), else every id.
  const float* weights() const { return w_.data(); }
  const std::vector<int32_t>& live() const { return live_; }
  double total_weight() const;
  // Probability of id under the final weights.
  double prob(int32_t id) const;
  // All the mass on one token (greedy, or a chain that left nothing).
  void one_hot(int32_t id);

 private:
  std::vector<float> logit_;   // [n_vocab]
  std::vector<float> w_;       // [n_vocab] unnormalized probabilities, 0 = dropped
  struct Entry {
    float logit;
    int32_t id;
    float w;
  };
  std::vector<Entry> sel_;     // scratch for selections (contiguous, so comparisons stay in cache)
  std::vector<int32_t> idx_;   // scratch for penalty counts
  std::vector<int32_t> touched_;  // scratch: the tokens penalties and bias touch, each once
  std::vector<double> mass_;   // top-p histogram
  std::vector<int32_t> live_;  // after top-k: the only tokens left, ascending; empty = all tokens
};

class Sampler {
 public:
  // params must have passed validate().
  explicit Sampler(SamplingParams params);

  // Picks the next token. `history` is the sequence so far (prompt first), for the penalties. NaN logits
  // (a model or numerics failure) are an error, never silently sampled around.
  Result<SampleResult> sample(const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                              int32_t n_prompt);

  // The chain without the draw: the distribution the next token would be drawn from, after penalties, bias,
  // temperature, top-k, top-p and min-p (greedy: all the mass on the best token). Speculative decoding
  // compares these for the target and the draft. Valid until the next call.
  Result<const TokenDist*> distribution(const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                                        int32_t n_prompt);
  // The logprob of id under the raw logits and the params.logprobs best alternatives (no-op when logprobs < 0).
  void fill_logprobs(const float* logits, int64_t n_vocab, SampleResult* r);

  const SamplingParams& params() const { return p_; }
  // A uniform double in [0, 1) from the request's own generator (53 random bits).
  double next_uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  TokenDist dist_;  // distribution()'s (sample() works in a per-thread one)

  // The logits copied into `dist` (times the temperature's 1/T), then penalties and bias; NaN logits are an error.
  Status prepare(TokenDist& dist, const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                 int32_t n_prompt, float scale);
  // The whole chain into `dist`: the one token it leaves (greedy; nothing left -> raw argmax), or -1 when `dist`
  // holds weights to draw from.
  Result<int32_t> chain(TokenDist& dist, const float* logits, int64_t n_vocab, std::span<const int32_t> history,
                        int32_t n_prompt);
};

}  // namespace cachet
