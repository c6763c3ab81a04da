// How a model is loaded and served: one LLMConfig for every front end (the library, `cachet run`, `chat`,
// `batch`, `serve`), each field the flag of the same name (README, CLI).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cachet/export.h"
#include "cachet/status.h"

namespace cachet {

// Overrides of the file's RoPE settings (--rope-scaling, --rope-scale, --rope-freq-base, --yarn-orig-ctx,
// --yarn-beta-fast, --yarn-beta-slow, --yarn-attn-factor; docs/rope.md). Unset fields keep the file's.
struct RopeOverrides {
  std::optional<std::string> scaling;  // none, linear, yarn, ntk
  std::optional<double> scale;         // the context factor s (> 0; freq_scale = 1 / s)
  std::optional<double> freq_base;
  std::optional<int64_t> yarn_orig_ctx;
  std::optional<double> yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
  bool any() const {
    return scaling || scale || freq_base || yarn_orig_ctx || yarn_beta_fast || yarn_beta_slow || yarn_attn_factor;
  }
};

// A draft model stops drafting (greedy) when its top probability falls below this.
inline constexpr float kDefaultDraftPMin = 0.2f;

// Speculative decoding (docs/speculative.md): a draft model with the target's vocabulary, the model's own
// multi-token-prediction head, or prompt lookup. Outputs are exactly the target's whichever proposes.
struct CACHET_API SpecOptions {
  std::string draft_model;  // a GGUF with the target's vocabulary (e.g. a low-bit quantization of it)
  bool lookup = false;      // prompt lookup instead (the three exclude each other)
  bool mtp = false;         // the model file's own multi-token-prediction head (Qwen3.5 / 3.6: nextn layers)
  int draft_max = 8;        // most draft tokens per request and step
  bool fixed = false;       // always draft_max tokens, cost model off (measuring, testing)
  int64_t draft_vocab = 0;  // the draft proposes only token ids below this (0: all)
  float draft_p_min = kDefaultDraftPMin;
  bool draft_own_kv = false;  // a draft of the target's shape keeps its own cache instead of reading the target's
  bool any() const { return lookup || mtp || !draft_model.empty(); }
  // Errors: more than one proposer asked for; draft_p_min outside [0, 1].
  Status validate() const;
};

struct LLMConfig {
  int threads = 0;       // 0: all cores
  bool precise = false;  // f32 activations in every matmul (slower; docs/numerics.md)
  RopeOverrides rope;
  // The paged KV cache: its memory (the pool's block count follows from it and the KV types), block size (a
  // multiple of 16), and the element types of K and V (f32 f16 bf16 q8_0 q4_0 q4r; docs/kv_quant.md).
  int64_t kv_memory_bytes = int64_t{512} << 20;
  int64_t kv_tokens = 0;  // > 0: the pool holds this many tokens instead (kv_memory_bytes unused)
  int block_size = 16;
  std::string kv_type_k = "f16", kv_type_v = "f16";
  // Continuous batching: most requests decoded together, most tokens of one step, most prompt tokens of one
  // request per step (chunked prefill). 0: chosen for the model, about 0.4 TFLOP of prompt work a step (a
  // multiple of 16 tokens in 64-512: 512 for a 135M model, 128 for a 2B, 64 for an 8B), and a request's share
  // min(256, the step's).
  int max_running = 64;
  int max_batch_tokens = 0;
  int prefill_chunk = 0;
  int max_waiting = 1 << 30;  // queued requests past this are refused (kResourceExhausted)
  bool prefix_cache = true;   // reuse the KV blocks of prompts that begin alike (outputs unchanged)
  // Hybrid models (recurrent layers): with the prefix cache, a state checkpoint every this many prompt tokens
  // too (a multiple of the KV block size, 0: none), beside the prompt's end, the latest block and branch points.
  int state_checkpoint_every = 2048;
  SpecOptions speculation;
  // The chat template to use instead of the file's `tokenizer.chat_template` (its source text).
  std::string chat_template;
  // A projector file (mmproj-*.gguf, the model's vision encoder): requests may then carry images.
  std::string mmproj;
  // An image's encoder runs this many of its layers a step while other requests decode (all at once when none
  // do; 0: always at once): their tokens keep coming during a long encoding.
  int encoder_layers_per_step = 1;
};

}  // namespace cachet
