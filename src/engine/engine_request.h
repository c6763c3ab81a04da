// EngineRequest: what the Engine keeps of a request beyond the scheduler's view (SchedRequest): its sampling
// state, stop rules, samples still to fork, and its speculation (kind, acceptance record, pending draft).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "cachet/embedding.h"
#include "engine/scheduler.h"
#include "grammar/grammar.h"
#include "sampling/sampler.h"
#include "speculative/policy.h"
#include "kv/state_store.h"
#include "speculative/proposer.h"
#include "vision/prompt_image.h"

namespace cachet {

struct EngineRequest : SchedRequest {
  SamplingParams params;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> stop_ids;
  bool stop_at_eos = true;
  int n_forks = 0;  // samples still to fork off at the first sampling point
  SpecMode spec = SpecMode::kOff;
  Acceptance acceptance;
  int spec_idle = 0;               // steps since it last drafted
  std::vector<TokenDist> draft_q;  // the draft's distributions when it sampled (else empty)
  int64_t spec_drafted = 0, spec_accepted = 0;
  // Constrained decoding (params.grammar): the matcher over the accepted tokens, and this step's masks, one per
  // row of logits (the last accepted token's, then each draft token's), words of GrammarMatcher::mask_words.
  std::unique_ptr<GrammarMatcher> matcher;
  std::vector<uint32_t> masks;
  int64_t allowed_next = -1;  // tokens the first row's mask allows (0: the grammar can go no further)
  // An embedding request: no sampling; its final hidden states pooled (summed so far, for the mean).
  std::optional<Pooling> pooling;
  std::vector<float> pooled;
  // A hybrid model's recurrent state (kv/state_store.h): the slot holding it, taken when first scheduled.
  std::optional<StateSlot> state_slot;
  // Its state checkpoints not yet in the prefix cache (attached when it finishes), {position, slot}: where its
  // prompt branches off a cached path, every state_checkpoint_every prompt tokens, the prompt's last block
  // boundary, and the latest boundary it passed (kept in that order of kinds: CheckpointKind).
  struct PendingCheckpoint {
    int kind;
    int pos;
    StateSlot slot;
  };
  std::vector<PendingCheckpoint> ckpts;
  // Speculating on a hybrid model: this step's snapshots, [i] the state after the last accepted token and i
  // draft tokens (the rollback target when the verification accepts exactly i of them).
  std::vector<StateSlot> spec_snapshots;
  // Its prompt's images (SchedRequest::images gives their positions), and each one's rows once encoded
  // ([n_rows, n_embd]; kept for a recompute after preemption, shared with its samples).
  std::vector<PromptImage> prompt_images;
  std::vector<std::shared_ptr<const std::vector<float>>> image_rows;
};

}  // namespace cachet
