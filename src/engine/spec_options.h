// What a user asks of speculative decoding (docs/speculative.md), one struct for every front end: the CLI's
// run, chat and batch and the server fill it from the same flags, and load_speculation turns it into an
// engine's configuration, loading the draft model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cachet/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/rope_scaling.h"

namespace cachet {

struct SpecOptions {
  std::string draft_model;  // a GGUF with the target's vocabulary (e.g. a low-bit quantization of it)
  bool lookup = false;      // prompt lookup instead (the two exclude each other)
  int draft_max = 8;        // most draft tokens per request and step
  bool fixed = false;       // always draft_max tokens, cost model off (measuring, testing)
  int64_t draft_vocab = 0;  // the draft proposes only token ids below this (0: all; LoadOptions::logit_rows)
  float draft_p_min = kDefaultDraftPMin;  // greedy: a draft model stops when its top probability is below this
  bool draft_own_kv = false;  // a draft of the target's shape keeps its own cache (EngineConfig::draft_own_kv)
  bool any() const { return lookup || !draft_model.empty(); }
  // Errors: both proposers asked for; draft_p_min outside [0, 1].
  Status validate() const;
};

// Checks o, loads its draft model on the target's threads (with the target's RoPE overrides) into *draft and
// sets cfg's speculation fields. Errors: both proposers asked for; a draft that does not load. (Engine::create
// then refuses a draft whose vocabulary is not the target's.)
Status load_speculation(const SpecOptions& o, const RopeOverrides& rope, Model& target, EngineConfig* cfg,
                        std::unique_ptr<Model>* draft);

}  // namespace cachet
