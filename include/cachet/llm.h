// cachet's library API: load a model once, then generate for one request or many, streamed or not.
//
//   auto llm = cachet::LLM::load("model.gguf");              // Result<std::unique_ptr<LLM>>
//   cachet::Request r;
//   r.prompt = "The capital of France is";
//   r.params.max_tokens = 16;
//   auto out = (*llm)->generate(r);                          // Result<Completion>
//   std::cout << out->text;
//
// Every request runs in one continuous-batching engine (a paged KV cache, chunked prefill, a prefix cache),
// on a thread the LLM owns: requests from several calls or threads share its steps, and outputs are bitwise
// the same whatever shares the batch. End-of-generation tokens, stop sequences and UTF-8 streaming are
// handled here, the same way for every front end (the CLI and the server are built on this class).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cachet/config.h"
#include "cachet/embedding.h"
#include "cachet/export.h"
#include "cachet/sampling.h"
#include "cachet/status.h"

namespace cachet {

// Where an image goes in a text prompt or a chat message (llama.cpp's marker, so prompts written for it work).
inline constexpr std::string_view kImageMarker = "<__media__>";

struct Request {
  // The prompt: text (tokenized with BOS as the vocabulary says; special tokens such as <|im_start|> are
  // parsed), or token ids (then `prompt` is ignored).
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  bool ignore_eos = false;  // generate past end-of-generation tokens (EOS, EOT, <|im_end|>, ...)
  int n = 1;                // independent samples of the same prompt (seeds seed, seed + 1, ...)
  // Prompts never share cached KV across namespaces (a tenant: an API key, a cache salt).
  uint64_t cache_namespace = 0;
  // Images (the bytes of JPEG, PNG or WebP files) for a model loaded with a projector (LLMConfig::mmproj), in
  // the order the text prompt marks them with kImageMarker; a prompt without markers gets them at its start.
  // The same picture sent again reuses its cached KV (keyed by its pixels).
  std::vector<std::string> images;
  bool add_special = true;  // the vocabulary's BOS (and EOS where it adds one) around a text prompt
};

enum class FinishReason {
  kStop,     // an end-of-generation token or a stop sequence
  kLength,   // max_tokens
  kAborted,  // the caller stopped it (a callback returned false), or the engine failed
};

CACHET_API const char* finish_reason_name(FinishReason f);  // "stop", "length", "abort"

struct TokenInfo {
  int32_t id = 0;
  float logprob = 0.0f;           // under the raw logits (when SamplingParams::logprobs >= 0)
  std::vector<TokenLogprob> top;  // the logprobs most likely alternatives, most likely first
};

// One step of a streamed request.
struct OutputEvent {
  int request = 0;  // index of the request in the call
  int sample = 0;   // which of its n samples
  // The token chosen; none when the event only carries text or a finish (the held-back tail at the end).
  std::optional<TokenInfo> token;
  std::string text;  // text now safe to show: whole UTF-8 characters, a possible stop sequence held back
  std::optional<FinishReason> finish;  // set on the sample's last event
};

struct Completion {
  std::vector<int32_t> token_ids;  // every token generated (an end-of-generation token included)
  std::string text;                // the text, end-of-generation tokens and the stop sequence excluded
  FinishReason finish = FinishReason::kLength;
  std::vector<TokenInfo> tokens;   // per generated token, with logprobs when asked
  int prompt_tokens = 0;
  int cached_tokens = 0;           // prompt tokens whose KV the prefix cache supplied
  double ttft_ms = 0;              // request in -> first token out
  std::vector<double> tbt_ms;      // time between consecutive tokens
  int64_t spec_draft_tokens = 0;   // speculative decoding: draft tokens the target verified, and accepted
  int64_t spec_accepted_tokens = 0;
};

struct ChatMessage {
  std::string role;  // system, user, assistant, ...
  std::string content;
  // Images (file bytes) of this message, where its content marks them with kImageMarker (else before its text).
  std::vector<std::string> images;
};

struct BeamParams {
  int width = 4;
  int max_tokens = 32;
  float length_penalty = 1.0f;  // score = logprob / length^length_penalty
  bool ignore_eos = false;
};

struct BeamCompletion {
  std::vector<int32_t> token_ids;  // the best hypothesis (its end-of-generation token included)
  std::string text;
  double logprob = 0.0;
  double score = 0.0;
};

struct ModelInfo {
  std::string architecture, name;
  int64_t n_vocab = 0, n_ctx_train = 0, n_layer = 0, n_embd = 0;
  bool has_tokenizer = false, has_chat_template = false;
  std::optional<Pooling> pooling;  // an embedding model's, from its file
};

// Called for each event; returning false aborts that request (its other samples and requests go on).
using OutputCallback = std::function<bool(const OutputEvent&)>;

class CACHET_API LLM {
 public:
  // Loads a GGUF file or a llama2.c checkpoint. Errors: the file (missing, malformed, an architecture or type
  // cachet does not run), the configuration (an unknown KV type, a draft model with another vocabulary).
  static Result<std::unique_ptr<LLM>> load(const std::string& path, const LLMConfig& config = {});
  ~LLM();
  LLM(LLM&&) noexcept;
  LLM& operator=(LLM&&) noexcept;

  ModelInfo info() const;
  const LLMConfig& config() const;

  // Text <-> tokens (errors: the file has no tokenizer).
  Result<std::vector<int32_t>> tokenize(const std::string& text, bool add_special = true,
                                        bool parse_special = true) const;
  Result<std::string> detokenize(const std::vector<int32_t>& ids) const;
  // The model's chat template over a conversation (errors: no template; the template's own errors).
  Result<std::string> apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt = true) const;

  // One request, its samples streamed to `on_event`. Returns the first sample's completion.
  Result<Completion> generate(const Request& request, const OutputCallback& on_event = {});
  // Many requests at once, batched; one completion per request and sample (request i's samples at
  // [i's first .. + n)), in request order.
  Result<std::vector<Completion>> generate(const std::vector<Request>& requests, const OutputCallback& on_event = {});
  // A conversation through the chat template (no BOS added: the template writes it), then generate.
  Result<Completion> chat(const std::vector<ChatMessage>& messages, const SamplingParams& params,
                          const OutputCallback& on_event = {});
  // Beam search instead of sampling.
  Result<BeamCompletion> beam_search(const Request& request, const BeamParams& params);
  // One embedding per input, in order, batched in the engine with whatever else runs. Texts are tokenized with
  // the vocabulary's BOS/EOS/[SEP] (special tokens in the text not parsed). Errors: an empty input, an input
  // longer than the model's context (unless params.truncate), no pooling, a bad `dimensions`.
  Result<std::vector<std::vector<float>>> embed(const std::vector<std::string>& inputs, const EmbedParams& params = {});
  Result<std::vector<std::vector<float>>> embed(const std::vector<std::vector<int32_t>>& inputs,
                                                const EmbedParams& params = {});

  // A reranker's input for a query and a document: the file's rerank template (tokenizer.chat_template.rerank,
  // with {query} and {document} filled in, then tokenized parsing special tokens), or else [BOS] query [EOS] [SEP] document
  // [EOS] as the vocabulary adds each (errors: no tokenizer).
  Result<std::vector<int32_t>> rerank_tokens(const std::string& query, const std::string& document) const;
  // One relevance score per document (higher: more relevant), in document order: each (query, document) pair
  // through the model's classifier head (rank pooling), batched in the engine. Errors: the model is not a
  // reranker, a pair longer than the model's context, an empty query or document.
  Result<std::vector<float>> rerank(const std::string& query, const std::vector<std::string>& documents,
                                    const RerankParams& params = {});

  // Engine-internal access for cachet's own front ends (src/api/llm_impl.h); not part of the API.
  struct Impl;
  Impl& impl() { return *impl_; }
  explicit LLM(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachet
