// Prompt lookup (n-gram) drafting, no model: find the latest earlier place where the request's last n tokens
// (n = max_ngram down to min_ngram) occurred in its own prompt and output, and propose the tokens that
// followed there. Pays on input-grounded work (rewrite, summarize, edit a given file), where the output
// copies long runs of the input. The draft is deterministic.
#pragma once

#include "speculative/proposer.h"

namespace cachet {

class LookupProposer final : public Proposer {
 public:
  explicit LookupProposer(int min_ngram = 2, int max_ngram = 4) : min_ngram_(min_ngram), max_ngram_(max_ngram) {}
  Status propose(std::span<DraftJob> jobs) override;

  // The continuation (at most k tokens) after the latest earlier occurrence of tokens' last n tokens.
  static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int n, int k);

 private:
  int min_ngram_, max_ngram_;
};

}  // namespace cachet
