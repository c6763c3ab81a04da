// Speculator: the speculative part of an engine step (docs/speculative.md), in a class of its own that the
// Engine calls at three points. Before scheduling, caught-up speculating requests get a draft appended to their
// tokens (n_draft of them), so the scheduler's catch-up rule schedules the last accepted token and the draft in
// the step's one forward pass, next to other requests' prefill and decode tokens. After the pass, drafts the
// pass did not compute are dropped, and the accept/resample rule (speculative/verify.h) walks each computed
// draft against the target's rows; the K/V of rejected positions leave the block table. It owns the proposers
// (prompt lookup; a draft model; the model's MTP head), the cost model and policy that choose each request's draft length, and the
// acceptance records those choices learn from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "cachet/status.h"
#include "engine/engine_config.h"
#include "engine/engine_request.h"
#include "engine/scheduler.h"
#include "kv/kv_block_storage.h"
#include "model/model.h"
#include "speculative/draft_model.h"
#include "speculative/lookup.h"
#include "speculative/mtp.h"
#include "speculative/policy.h"

namespace cachet {

class Speculator {
 public:
  // The draft proposer (when the config has a draft model) and the cost model's first measurements (adaptive
  // speculation). target_kv: the engine's storage, which a draft of the target's exact shape reads.
  static Result<std::unique_ptr<Speculator>> create(Model& target, KvBlockStorage& target_kv, const EngineConfig& cfg);

  bool has_draft_model() const { return draft_ != nullptr; }
  bool has_mtp() const { return mtp_ != nullptr; }
  const DraftModelProposer* draft_proposer() const { return draft_.get(); }
  const MtpProposer* mtp_proposer() const { return mtp_.get(); }

  // After the pass, before verification: an MTP-speculating request's trunk hidden states of positions
  // [pos0, pos0 + n) (MtpProposer::observe); then one catch-up pass of the head over all of them.
  void observe_hidden(const EngineRequest& r, int pos0, const float* rows, int n);
  Status catch_up_hidden();

  // Before scheduling: drafts for the caught-up speculating requests among the scheduler's running ones.
  Status propose(Scheduler& sched);
  // A forward pass of the target over n_tokens took secs (the cost model).
  void observe_pass(int n_tokens, double secs) { policy_.observe_target(n_tokens, secs); }
  // After the pass: this step's drafts that `verified` says the pass did not compute are dropped.
  void drop_unverified(const std::function<bool(const EngineRequest*)>& verified);
  // The accept/resample rule over a drafting request's n_rows rows (its last accepted token, then the draft
  // tokens the pass computed): emit(token) appends each chosen token and says whether it ended the request,
  // which stops the walk. The rejected positions' K/V leave the scheduler's block table. True when it ended.
  Result<bool> verify(EngineRequest* r, const float* rows, int n_rows, Scheduler& sched,
                      const std::function<bool(const SampleResult&)>& emit);
  // A decode-only step of n_running requests that emitted `emitted` tokens in secs (drafting or not): the
  // policy's guard compares the realized rates.
  void observe_step(int n_running, bool drafted, int emitted, double secs);
  // A draft catch-up prefill's share of this step (left out of the guard's step rate).
  double catch_up_secs() const { return catch_up_secs_; }
  // The request is finished, aborted or gone: its generated length (a typical output length) and its draft state.
  void finished(const EngineRequest& r);
  // Draft tokens the target verified, and of those accepted, over every request.
  int64_t draft_tokens() const { return draft_tokens_; }
  int64_t accepted_tokens() const { return accepted_tokens_; }

 private:
  Speculator(Model& target, KvBlockStorage& target_kv, const EngineConfig& cfg)
      : target_(target), target_kv_(target_kv), cfg_(cfg), policy_(cfg.draft_max) {}
  void calibrate();
  Proposer* proposer(SpecMode m);
  void drop_draft(EngineRequest* r, int n_accepted_tokens);

  Model& target_;
  KvBlockStorage& target_kv_;
  EngineConfig cfg_;
  LookupProposer lookup_;
  std::unique_ptr<DraftModelProposer> draft_;
  std::unique_ptr<MtpProposer> mtp_;
  SpecPolicy policy_;
  std::vector<std::pair<EngineRequest*, int>> drafted_;  // this step's drafting requests and their accepted length
  // Per SpecMode, over every request: a new request's prior (a longer memory than a request's own counts).
  Acceptance mode_acceptance_[4] = {{.decay = Acceptance::kEngineDecay},
                                    {.decay = Acceptance::kEngineDecay},
                                    {.decay = Acceptance::kEngineDecay},
                                    {.decay = Acceptance::kEngineDecay}};
  double mode_idle_secs_[4] = {};  // per SpecMode: time of steps with candidates of that kind and none drafting
  double catch_up_secs_ = 0;       // this step's draft catch-up prefill
  double output_len_ = 0;          // finished requests' generated tokens, a moving average (0: none yet)
  int64_t draft_tokens_ = 0, accepted_tokens_ = 0;
};

}  // namespace cachet
