// EngineConfig: the KV pool, the step's token budget, the prefix cache, end-of-generation tokens and
// speculation of one Engine (engine/engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_types.h"
#include "model/model.h"
#include "speculative/proposer.h"
#include "speculative/draft_model.h"
#include "vision/vision_encoder.h"

namespace cachet {

struct EngineConfig {
  int block_size = 16;
  int n_blocks = 0;            // 0: from kv_memory_bytes
  int64_t kv_memory_bytes = 256ll << 20;
  int max_batch_tokens = 512;  // token budget of one step
  int prefill_chunk = 256;     // most prompt tokens of one request per step
  int max_running = 256;
  KvTypes kv_type;  // K and V element types (f16 both by default; kv/kv_type.h)
  // Reuse the KV blocks of earlier requests' prefixes (kv/radix_cache.h). Outputs are bitwise the same either way.
  bool prefix_cache = true;
  // Hybrid models with the prefix cache: a state checkpoint also every this many prompt tokens (a multiple of
  // block_size; 0: none), beside those at the prompt's end, the latest block boundary and a branch point.
  int state_checkpoint_every = 2048;
  // The tokens that end a request that stops at end of generation (EOS, EOT, <|im_end|>, ...;
  // end_of_generation_ids in engine/text_stream.h). The model's EOS always does.
  std::vector<int32_t> end_of_generation;
  // Called with every row of logits a request samples from (tests: batch invariance; debugging).
  std::function<void(RequestId, const float*, int64_t)> on_logits;
  // Speculative decoding (docs/speculative.md): the mode of requests that do not choose one; the draft model
  // (same vocabulary; not owned; required for SpecMode::kDraft); the most draft tokens per step. With
  // spec_adaptive each request drafts what the measured costs and its own acceptance say pays (possibly
  // nothing); without, always draft_max (tests).
  SpecMode spec = SpecMode::kOff;
  Model* draft_model = nullptr;
  // The target's multi-token-prediction head (LoadOptions::mtp_head; not owned; required for SpecMode::kMtp).
  Model* mtp_model = nullptr;
  int draft_max = 8;
  float draft_p_min = kDefaultDraftPMin;
  bool spec_adaptive = true;
  // A draft model of the target's exact shape (a requantization) reads the target's KV cache
  // (DraftModelConfig::share_target_kv) unless this is set: then it keeps a pool of its own, as a draft of
  // another shape must.
  bool draft_own_kv = false;
  // The vision encoder of requests with images (not owned; its output rows as wide as the model's embeddings):
  // an image is encoded on the engine's steps, this many of its layers a step while other requests have tokens
  // to run (all of them when none has; 0: always the whole image in one step), before the step's forward pass.
  VisionEncoder* vision = nullptr;
  int encoder_layers_per_step = 1;
};

}  // namespace cachet
