// Proposer: where a speculating request's draft comes from. Each engine step hands every proposer its
// requests (one job each) at once, so a draft model runs one batched pass per drafted position for all of
// them. Kinds: prompt lookup (spec/lookup.h, no model), a draft model (spec/draft_model.h) and the model's
// own multi-token-prediction head (spec/mtp.h). A request picks its kind; kinds mix freely in one batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cachet/status.h"
#include "kv/kv_block_storage.h"
#include "sampling/sampler.h"

namespace cachet {


enum class SpecMode { kOff, kLookup, kDraft, kMtp };

struct DraftJob {
  int64_t id = 0;                             // request id
  const std::vector<int32_t>* tokens = nullptr;  // prompt + accepted output, the last one not yet computed
  int n_prompt = 0;
  const SamplingParams* params = nullptr;
  int k = 0;                                  // most tokens to propose
  // The engine's estimate that draft token j (0-based) is accepted: first * cont^j (spec/policy.h). A draft
  // model weighs a further pass by it (DraftModelProposer::set_pass_budget); 1, 1: every token counts whole.
  double first = 1.0, cont = 1.0;
  // The request's own K/V in the target's cache, for a draft model that reads it instead of keeping a cache of
  // its own (DraftModelConfig::share_target_kv): positions below tokens->size() - 1 hold the target's K/V, and
  // the engine has made room up to position tokens->size() + k - 2 for the draft's own rows, which the target's
  // verification overwrites before it reads them; target_copies, the copy-on-writes that making room recorded,
  // go first. Null storage otherwise.
  KvBlockStorage* target_kv = nullptr;
  std::vector<BlockId> target_blocks;
  std::vector<KvBlockCopy> target_copies;
  // Out: the draft, and per token the draft's distribution when it sampled (temperature > 0). Empty q: the
  // draft is deterministic (all of q's mass on each draft token).
  std::vector<int32_t> draft;
  std::vector<TokenDist> q;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual Status propose(std::span<DraftJob> jobs) = 0;
  // After verification: the request's first n_valid tokens are final (the proposer's own state past them,
  // e.g. a draft model's KV, is stale).
  virtual void truncate(int64_t id, int n_valid) { (void)id, (void)n_valid; }
  // The request is finished, aborted or preempted.
  virtual void release(int64_t id) { (void)id; }
};

}  // namespace cachet
