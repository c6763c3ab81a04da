// What a user asks of speculative decoding (docs/speculative.md), one struct for every front end: the CLI's
// run, chat and batch and the server fill it from the same flags, and load_speculation turns it into an
// engine's configuration, loading the draft model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cachet/config.h"
#include "cachet/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/rope_scaling.h"

namespace cachet {

// Checks o, loads its draft model (or the target file's MTP head) on the target's threads (with the target's
// RoPE overrides) into *draft and sets cfg's speculation fields. Errors: more than one proposer asked for; a
// draft that does not load; a file without an MTP head. (Engine::create then refuses a draft whose vocabulary
// is not the target's.)
Status load_speculation(const SpecOptions& o, const RopeOverrides& rope, Model& target, EngineConfig* cfg,
                        std::unique_ptr<Model>* draft);

}  // namespace cachet
