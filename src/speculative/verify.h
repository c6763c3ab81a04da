// The accept/resample rule of speculative sampling (seed 003; Leviathan et al. 2023, Chen et al. 2023): a draft
// token x drawn from the draft's distribution q is kept with probability min(1, p(x) / q(x)), where p is the
// target's distribution at the same position; on rejection the token is drawn from norm(max(0, p - q)) instead.
// Either way the emitted token is distributed exactly as p. p and q are the distributions after the whole
// sampler chain (penalties, bias, temperature, top-k, top-p, min-p), so the rule keeps every sampler setting.
// A deterministic draft (prompt lookup; a greedy draft model) has q = all mass on x: kept with probability p(x),
// else drawn from p without x. Greedy targets (p all on its best token) keep x exactly when it is the best.
// Model-free: tested on toy distributions (tests/test_speculative.cc).
#pragma once

#include <cstdint>

#include "sampling/sampler.h"

namespace cachet {

struct Verdict {
  bool accepted;
  int32_t token;  // x when accepted, else the replacement drawn from the residual
};

// q == nullptr: the draft was deterministic. u_accept, u_resample in [0, 1), from the request's generator.
Verdict verify_draft_token(const TokenDist& p, const TokenDist* q, int32_t x, double u_accept, double u_resample);

}  // namespace cachet
