// Single-sequence generation: prefill the prompt in one forward pass, then decode one token per step
// against the KV cache until EOS, max_tokens or a stop token. The no-cache mode instead recomputes the
// whole sequence every step (the naive loop), for tests and to show what the cache buys.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/dtype.h"
#include "cachet/status.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace cachet {

struct GenerateOptions {
  SamplingParams sampling;        // includes max_tokens, seed and the stop sequences
  bool use_kv_cache = true;
  DType kv_type = DType::kF16;
  bool stop_at_eos = true;
  std::vector<int32_t> stop_ids;  // besides EOS/EOT
  // Text of a token, for stop sequences and the streamed text; required when sampling.stop is not empty.
  std::function<std::string(int32_t)> token_text;
};

enum class FinishReason { kLength, kStop };

// One generated token as it is streamed.
struct TokenEvent {
  int32_t id;
  std::string text;  // text now safe to emit (empty while a possible stop sequence is held back)
  SampleResult sample;
};

struct GenerateResult {
  std::vector<int32_t> token_ids;  // generated tokens (a stop token is included)
  std::string text;                // emitted text, stop sequence excluded (with token_text only)
  std::vector<SampleResult> samples;  // per token, with logprobs when asked
  FinishReason finish = FinishReason::kLength;
  int n_prompt = 0;
  double ttft_ms = 0;              // prompt in -> first token out
  double prefill_ms = 0;
  double decode_ms = 0;            // after the first token
  std::vector<double> tbt_ms;      // time between consecutive tokens

  double decode_tok_per_s() const;
  double prefill_tok_per_s() const { return prefill_ms > 0 ? n_prompt * 1000.0 / prefill_ms : 0.0; }
  double tbt_mean_ms() const;
  double tbt_percentile_ms(double p) const;
};

// on_token is called as each token is chosen (before the next step); returning false stops early.
Result<GenerateResult> generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const std::function<bool(const TokenEvent&)>& on_token = {});

}  // namespace cachet
