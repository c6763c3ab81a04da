#include "speculative/draft_token.h"

namespace cachet {

Result<bool> next_draft_token(const float* row, int64_t V, Sampler& sampler, const std::vector<int32_t>& history,
                              float p_min, DraftJob& j, int32_t* x) {
  const SamplingParams& sp = *j.params;
  if (sp.temperature <= 0.0f) {
    // Greedy: the best token after the chain (penalties and bias change it; plain argmax otherwise).
    const bool plain = sp.logit_bias.empty() && sp.repetition_penalty == 1.0f && sp.frequency_penalty == 0.0f &&
                       sp.presence_penalty == 0.0f;
    if (plain) {
      *x = argmax(row, V);
    } else {
      CACHET_ASSIGN_OR_RETURN(const TokenDist* q, sampler.distribution(row, V, history, j.n_prompt));
      *x = q->live()[0];
    }
    // The proposer's confidence under its raw logits: below p_min the next tokens are likely wasted.
    return j.draft.empty() || top_probability(row, V) >= p_min;
  }
  CACHET_ASSIGN_OR_RETURN(const TokenDist* q, sampler.distribution(row, V, history, j.n_prompt));
  *x = q->draw(sampler.next_uniform());
  j.q.push_back(*q);
  return true;
}

}  // namespace cachet
