// A model-based proposer's next draft token from its own logits row (a draft model, an MTP head): one rule for
// both, so a request drafts alike whichever model proposes.
#pragma once

#include <cstdint>
#include <vector>

#include "cachet/status.h"
#include "sampling/sampler.h"
#include "speculative/proposer.h"

namespace cachet {

// Greedy requests take the best token after the request's sampler chain (the plain argmax when the chain
// changes nothing), and stop drafting (false) where the proposer's own confidence under its raw logits falls
// below p_min (never at the first draft token: a draft of one is always tried). Sampling requests draw from the
// chain's distribution with the proposer's own generator (`sampler`) and append it to j.q. `history`: the
// request's tokens and its draft so far. On true, *x is the token (not yet appended to j.draft).
Result<bool> next_draft_token(const float* row, int64_t n_vocab, Sampler& sampler, const std::vector<int32_t>& history,
                              float p_min, DraftJob& j, int32_t* x);

}  // namespace cachet
