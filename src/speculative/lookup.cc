#include "speculative/lookup.h"

#include <algorithm>

namespace cachet {

std::vector<int32_t> LookupProposer::lookup(std::span<const int32_t> tokens, int n, int k) {
  const int len = static_cast<int>(tokens.size());
  if (n <= 0 || k <= 0 || len <= n) return {};
  const int32_t* suffix = tokens.data() + len - n;
  // Latest first: recent text is the likeliest to continue the same way. A match may overlap the suffix
  // (a repeating pattern), but its continuation must start before the end.
  for (int start = len - n - 1; start >= 0; --start) {
    if (tokens[start] != suffix[0] || !std::equal(suffix, suffix + n, tokens.data() + start)) continue;
    const int from = start + n;
    const int take = std::min(k, len - from);
    return {tokens.begin() + from, tokens.begin() + from + take};
  }
  return {};
}

Status LookupProposer::propose(std::span<DraftJob> jobs) {
  for (DraftJob& j : jobs) {
    j.draft.clear();
    j.q.clear();
    for (int n = max_ngram_; n >= min_ngram_ && j.draft.empty(); --n) j.draft = lookup(*j.tokens, n, j.k);
  }
  return Status::ok();
}

}  // namespace cachet
