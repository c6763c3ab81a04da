// A draft model proposes: any model with the target's vocabulary (a low-bit `cachet quantize` of the target,
// a smaller model of the same family). It keeps its own paged KV cache per request, catches up on the
// tokens it has not seen (the prompt, then each step's accepted tokens) and drafts k tokens autoregressively;
// every drafted position is one batched forward pass over all drafting requests. A draft of exactly the
// target's shape (a requantization: equal ModelConfig) instead reads the target's own cache
// (share_target_kv): no second pool, no catch-up prefill of each prompt, never behind. Greedy requests draft the
// draft's best token, and stop early when the draft's own confidence falls below p_min (llama.cpp's
// --draft-p-min rule); sampling requests draw from the draft's distribution after the request's own sampler
// chain, with a generator of their own (seeded from the request's seed), and report it as q.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>

#include "cachet/config.h"
#include "kv/kv_block_storage.h"
#include "kv/kv_cache_manager.h"
#include "kv/state_store.h"
#include "model/model.h"
#include "speculative/proposer.h"

namespace cachet {

struct DraftModelConfig {
  int n_blocks = 0;      // its KV pool; blocks of block_size tokens
  int block_size = 16;
  KvTypes kv_type;
  // Attend over the target's K/V (DraftJob::target_kv) instead of a pool of its own (n_blocks unused): the
  // draft's K/V of a computed position would be the target's up to its weights' rounding, so it is the
  // target's; only the draft's own tokens of this step get rows of its own, in the target's slots past its
  // computed positions, which the verification overwrites before reading. Requires draft config == target's.
  bool share_target_kv = false;
  float p_min = kDefaultDraftPMin;  // greedy: stop drafting when the draft's top probability is below this
  // A hybrid draft (recurrent layers): state slots for its sequences and the snapshots a rollback needs; a
  // request finding none free does not draft that step.
  int n_state_slots = 0;
};

class DraftModelProposer final : public Proposer {
 public:
  // Errors: the vocabularies differ; share_target_kv with a draft not of the target's shape.
  static Result<std::unique_ptr<DraftModelProposer>> create(Model& draft, const Model& target,
                                                            DraftModelConfig cfg);
  Status propose(std::span<DraftJob> jobs) override;
  void truncate(int64_t id, int n_valid) override;
  void release(int64_t id) override;

  // A pass after the first feeds every request still drafting one more token. A request stays in it while
  // P(its next draft token is accepted) (DraftJob::first * cont^j) times token_secs (what a token costs without
  // speculation at this batch size) covers its verification (verify_secs_per_token) and what it adds to the
  // pass; the pass runs while the sum over the requests left covers pass_secs(requests) plus their
  // verification. Without it, a batch step ran pass after pass for the one or two requests still confident
  // (each pass reads all the draft's weights) long after they paid.
  // token_secs <= 0: no such stop (every request drafts to its k or its p_min stop).
  struct PassBudget {
    double token_secs = 0;
    double verify_secs_per_token = 0;
    std::function<double(int)> pass_secs;
  };
  void set_pass_budget(PassBudget b) { budget_ = std::move(b); }

  // Its own pool's block tables (null when it reads the target's cache).
  const KvCacheManager* own_kv() const { return manager_.get(); }
  bool shares_target_kv() const { return cfg_.share_target_kv; }
  // Tokens of the request whose K/V the draft holds (0 before its first draft; own pool only).
  int computed(int64_t id) const {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? 0 : it->second.computed;
  }
  // Times the draft's passes (1 and 4 tokens with logits each, a 64-token catch-up; warm) on a scratch
  // sequence, so the engine's cost model knows what a draft token and a draft prefill cost before any request
  // pays one to find out. (tokens, seconds) pairs.
  std::vector<std::pair<int, double>> calibrate();
  // The last propose() call's forward passes: tokens in each and its seconds (the engine's cost model).
  const std::vector<std::pair<int, double>>& last_passes() const { return last_passes_; }

 private:
  DraftModelProposer(Model& draft, DraftModelConfig cfg);
  struct Seq {
    int computed = 0;  // tokens whose K/V the draft holds
    std::unique_ptr<Sampler> sampler;
    // A hybrid draft: the slot holding its state after token computed - 1, and the states after the positions
    // of the last propose() a verification may roll back to ({position, slot}).
    StateSlot slot = -1;
    std::vector<std::pair<int, StateSlot>> snaps;
    std::vector<StateSlot> spare;  // during propose(): slots for the states after positions still to be fed
  };
  Seq& seq(const DraftJob& j);
  // A hybrid draft's sequence back to `n` computed tokens: the snapshot after token n - 1 becomes its state, or,
  // with none, it starts over from position 0; the other snapshots are freed.
  void roll_back_state(Seq& s, int n);

  Model& model_;
  DraftModelConfig cfg_;
  std::unique_ptr<KvBlockStorage> storage_;  // own pool (both null with share_target_kv)
  std::unique_ptr<KvCacheManager> manager_;
  std::unique_ptr<StateStore> state_;  // a hybrid draft's recurrent states (null otherwise)
  std::unordered_map<int64_t, Seq> seqs_;
  std::vector<float> logits_;
  std::vector<std::pair<int, double>> last_passes_;
  PassBudget budget_;
};

}  // namespace cachet
