// "Build it, break it, measure it" (seed 003): two deliberate corruptions of the KV cache, each measured
// against a clean run of the same prompt. (a) After K generated tokens, one cached key vector in the middle of
// the sequence (every layer and KV head at that position) is overwritten with random values. (b) From K on,
// K and V are written one slot off (position p lands in p-1). Both runs generate greedily from their own
// tokens; each step compares the two tokens and the two next-token distributions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cachet/status.h"
#include "model/model.h"

namespace cachet {

enum class Corruption { kNone, kRandomKey, kShiftedWrite };
const char* corruption_name(Corruption c);

struct BreakStep {
  int step;             // generated tokens so far (0 = the prefill's prediction)
  bool corrupted;       // the corruption is in effect at this step
  int32_t clean_token;  // the clean run's greedy token
  int32_t broken_token; // the corrupted run's greedy token at the same step
  double kl;            // KL(clean || corrupted) of the next-token distributions, nats
};

struct BreakReport {
  Corruption kind;
  int corrupt_pos = -1;  // the key overwritten (kRandomKey) or first shifted write (kShiftedWrite)
  std::vector<BreakStep> steps;
  std::vector<int32_t> clean_ids;     // the clean continuation
  std::vector<int32_t> free_run_ids;  // the corrupted run's tokens
};

// n_steps greedy steps after the prompt; the corruption takes effect after `after` generated tokens.
Result<BreakReport> run_break_experiment(Model& model, const std::vector<int32_t>& prompt, int n_steps, int after,
                                         Corruption kind, uint64_t seed);

}  // namespace cachet
