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
#include <string>
#include <unordered_map>
#include <vector>

#include "cachet/status.h"

namespace cachet {

struct SamplingParams {
  float temperature = 0.0f;        // 0 = greedy
  int32_t top_k = 0;               // 0 = off
  float top_p = 1.0f;              // 1 = off; keep the smallest set whose mass reaches top_p
  float min_p = 0.0f;              // 0 = off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f; // 1 = off; CTRL-style: positive logits / r, negative * r
  float frequency_penalty = 0.0f;  // subtract count * f
  float presence_penalty = 0.0f;   // subtract p once a token has appeared
  int32_t penalty_last_n = 64;     // window of recent tokens the penalties look at; -1 = whole context
  bool penalize_prompt = true;     // the window includes prompt tokens
  std::unordered_map<int32_t, float> logit_bias;  // added to the logit (-inf bans)
  uint64_t seed = 0;
  std::vector<std::string> stop;   // stop sequences (text), never returned
  int32_t max_tokens = 128;
  int32_t logprobs = -1;           // -1 = none; N >= 0: chosen token's logprob and the top N alternatives

  // Errors name the field and the accepted range. n_vocab bounds the logit_bias keys.
  Status validate(int64_t n_vocab) const;
};

// Index of the largest value; the lowest index wins ties; NaN never wins. n > 0.
int32_t argmax(const float* logits, int64_t n);

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct SampleResult {
  int32_t id = -1;
  float logprob = 0.0f;               // of the chosen token under the raw logits (log-softmax)
  std::vector<TokenLogprob> top;      // the N most likely tokens under the raw logits, most likely first
};

// A candidate set: (token id, logit) pairs; stages shrink it and rescale logits.
struct Candidate {
  int32_t id;
  float logit;
};

// The stages, exposed so tests can run the chain with one stage replaced.
namespace sampling {
void apply_penalties(std::vector<Candidate>& c, const SamplingParams& p, const std::vector<int32_t>& history);
void apply_logit_bias(std::vector<Candidate>& c, const SamplingParams& p);
void apply_temperature(std::vector<Candidate>& c, float temperature);
void top_k(std::vector<Candidate>& c, int32_t k);
void top_p(std::vector<Candidate>& c, float p);
void min_p(std::vector<Candidate>& c, float p);
// Draws from softmax(c) with u in [0, 1); candidates are visited in id order, so the draw depends only
// on the set, never on how earlier stages permuted it.
int32_t draw(std::vector<Candidate>& c, double u);
}  // namespace sampling

class Sampler {
 public:
  // params must have passed validate().
  explicit Sampler(SamplingParams params);

  // Picks the next token. `history` is the sequence so far (prompt first), for the penalties.
  SampleResult sample(const float* logits, int64_t n_vocab, const std::vector<int32_t>& history,
                      int32_t n_prompt);

  const SamplingParams& params() const { return p_; }
  // A uniform double in [0, 1) from the request's own generator (53 random bits).
  double next_uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<Candidate> cand_;
};

}  // namespace cachet
