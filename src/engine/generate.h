// Single-sequence generation: prefill the prompt in one forward pass, then decode one token per step
// against the KV cache until EOS, max_tokens or a stop token. The no-cache mode instead recomputes the
// whole sequence every step (the naive loop), for tests and to show what the cache buys.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/dtype.h"
#include "kv/kv_cache.h"
#include "cachet/llm.h"
#include "cachet/status.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace cachet {

struct GenerateOptions {
  SamplingParams sampling;        // includes max_tokens, seed and the stop sequences
  bool use_kv_cache = true;
  KvTypes kv_type;  // K and V element types (f16 both by default)
  bool stop_at_eos = true;
  std::vector<int32_t> stop_ids;  // besides EOS/EOT
  // Text of a token, for stop sequences and the streamed text; required when sampling.stop is not empty.
  std::function<std::string(int32_t)> token_text;
};

// One generated token as it is streamed.
struct TokenEvent {
  std::optional<int32_t> id;  // none on the last event when it only flushes held-back text
  std::string text;  // text now safe to emit (empty while a possible stop sequence is held back)
  SampleResult sample;
};

struct GenerateResult {
  int n_reused = 0;                // prompt tokens whose K/V were already in the session's cache
  int n_prefilled = 0;             // prompt tokens run through the model in the prefill
  std::vector<int32_t> token_ids;  // generated tokens (a stop token is included)
  std::string text;                // emitted text, stop sequence excluded (with token_text only)
  std::vector<SampleResult> samples;  // per token, with logprobs when asked
  FinishReason finish = FinishReason::kLength;
  int n_prompt = 0;
  double ttft_ms = 0;              // prompt in -> first token out
  double prefill_ms = 0;
  double decode_ms = 0;            // after the first token
  std::vector<double> tbt_ms;      // time between consecutive tokens
  int64_t spec_draft_tokens = 0;   // speculative decoding: draft tokens verified, and accepted
  int64_t spec_accepted_tokens = 0;

  double decode_tok_per_s() const;
  double prefill_tok_per_s() const { return prefill_ms > 0 ? n_prompt * 1000.0 / prefill_ms : 0.0; }
  double tbt_mean_ms() const;
  double tbt_percentile_ms(double p) const;
};

using TokenCallback = std::function<bool(const TokenEvent&)>;

// A sequence that keeps its KV cache between calls (a chat): each generate() takes the whole token
// sequence so far, reuses the cached K/V of its longest common prefix with what the cache holds, prefills
// only the rest, and decodes.
class Session {
 public:
  Session(Model& model, int capacity, KvTypes kv_type);
  // on_token is called as each token is chosen (before the next step); returning false stops early.
  Result<GenerateResult> generate(const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                  const TokenCallback& on_token = {});
  void reset() { cached_.clear(); }
  int capacity() const { return capacity_; }
  // Tokens whose K/V are in the cache, in order.
  const std::vector<int32_t>& cached_tokens() const { return cached_; }

 private:
  Model& model_;
  int capacity_;
  KvTypes kv_type_;
  std::unique_ptr<ContiguousKvCache> cache_;
  std::vector<int32_t> cached_;
};

// One-shot generation: a fresh session sized for the prompt plus max_tokens (or, with use_kv_cache off,
// the naive loop that recomputes the whole sequence every step).
Result<GenerateResult> generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const TokenCallback& on_token = {});

}  // namespace cachet
