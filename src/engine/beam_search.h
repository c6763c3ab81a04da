// Beam search: keeps the `width` best partial sequences by total log-probability; finished hypotheses
// (an end-of-generation token) are ranked by logprob / length^length_penalty. The search runs over a scorer, so it is tested on
// hand-set toy distributions; beam_search_model() scores with a real model, every beam a paged-KV
// sequence forked from its parent (shared prompt blocks, copy-on-write on the first divergent token).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "cachet/status.h"
#include "model/model.h"

namespace cachet {

struct BeamSearchParams {
  int width = 4;
  int max_tokens = 32;
  float length_penalty = 1.0f;
  std::vector<int32_t> end_ids;  // tokens that end a hypothesis (end_of_generation_ids; empty: none)
};

struct BeamResult {
  std::vector<int32_t> tokens;  // generated tokens of the best hypothesis (its end token included if it ended so)
  double logprob = 0.0;         // total log-probability
  double score = 0.0;           // logprob / length^length_penalty
};

// scorer(parents, tokens): for each beam (its parent beam index in the previous step's list, and its newest
// token; parent -1 with the empty token at the first step) return next-token log-probabilities over the
// vocabulary. Beams are given in order; the scorer may keep per-beam state keyed by position in the list.
using BeamScorer = std::function<Result<std::vector<std::vector<float>>>(const std::vector<int>& parents,
                                                                          const std::vector<int32_t>& tokens)>;

Result<BeamResult> beam_search(const BeamSearchParams& p, const BeamScorer& scorer);

// Beam search on a model from a prompt, beams as forked paged-KV sequences.
Result<BeamResult> beam_search_model(Model& model, const std::vector<int32_t>& prompt, const BeamSearchParams& p);

}  // namespace cachet
