// How many tokens one engine step takes when the user does not say: a step's prompt work bounded in compute, not
// in tokens. 512 tokens of a 135M model are a tenth of a second on two cores; 512 of a 2B hybrid were 2.4 s, and
// every request arriving meanwhile (a new turn, a token due to a streaming user) waited for the step to end.
#pragma once

#include "model/model.h"

namespace cachet {

// Multiply-adds of one prompt token through the model's matrices (experts as routed; neither the embedding
// lookup nor the output head, which prefill runs for a prompt's last token only).
double prompt_token_macs(const Model& model);

// kStepMacs of prompt work a step: that many tokens, a multiple of 16 within [64, 512] (below 64 tokens the
// matmuls lose their efficiency; 512 was the fixed budget before). Qwen3.5-2B: 144; Llama-3.2-1B: 192 (0.97 G
// MACs a token); SmolLM2-135M: 512; an 8B: 64.
constexpr double kStepMacs = 2e11;
int step_token_budget(double token_macs);
inline int step_token_budget(const Model& model) { return step_token_budget(prompt_token_macs(model)); }

}  // namespace cachet
