// How a request chooses its tokens (docs/sampling.md). One chain, in this order:
//
//   penalties -> logit bias -> temperature -> top-k -> top-p -> min-p -> draw
//
// Temperature 0 is greedy: penalties and bias still apply, then the largest logit wins (lowest id on ties).
// Every request has its own seeded generator: the same seed gives the same tokens whatever else runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachet/export.h"
#include "cachet/status.h"

namespace cachet {

class Grammar;  // a grammar compiled against the model's vocabulary (LLM::grammar_*; docs/structured-output.md)

struct CACHET_API SamplingParams {
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
  // Constrained decoding: only tokens the grammar allows are drawn (masked before the chain), and the request
  // ends when the grammar is complete and an end-of-generation token is drawn. nullptr = free.
  std::shared_ptr<const Grammar> grammar;

  // Errors name the field and the accepted range. n_vocab bounds the logit_bias keys.
  Status validate(int64_t n_vocab) const;
};

struct TokenLogprob {
  int32_t id;
  float logprob;
};

}  // namespace cachet
