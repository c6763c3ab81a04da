// ForwardBatch: the contract between whoever schedules tokens and the model. A flat list of tokens, each
// with its position and the sequence (KV cache) it belongs to. Tokens of one sequence appear in position
// order; a token attends to positions [0, its position] of its own sequence (the causal mask).
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"

namespace cachet {

struct ForwardBatch {
  std::vector<int32_t> token_ids;    // [n_tokens]
  std::vector<int32_t> positions;    // [n_tokens]
  std::vector<int32_t> seq_index;    // [n_tokens] index into seqs
  std::vector<uint8_t> want_logits;  // [n_tokens] 1 = return this token's next-token logits
  std::vector<KvSequence*> seqs;     // [n_seqs]

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_logits() const {
    int n = 0;
    for (uint8_t w : want_logits) n += w;
    return n;
  }

  // One sequence: tokens at positions pos0.. ; logits for the last token only, or for all.
  static ForwardBatch single(KvSequence* seq, const std::vector<int32_t>& tokens, int pos0, bool all_logits) {
    ForwardBatch b;
    b.seqs = {seq};
    for (size_t i = 0; i < tokens.size(); ++i) {
      b.token_ids.push_back(tokens[i]);
      b.positions.push_back(pos0 + static_cast<int32_t>(i));
      b.seq_index.push_back(0);
      b.want_logits.push_back(all_logits || i + 1 == tokens.size());
    }
    return b;
  }
};

}  // namespace cachet
