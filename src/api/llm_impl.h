// What an LLM holds: the model (and a speculative draft), its tokenizer and chat template, the
// end-of-generation ids, and the engine thread. cachet's own front ends reach it here (the server streams
// per request through the service, the CLI reads counters); users see include/cachet/llm.h only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cachet/llm.h"
#include "engine/engine_service.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vision/prompt_image.h"
#include "vision/vision_encoder.h"

namespace cachet {

struct LLM::Impl {
  LLMConfig config;
  std::unique_ptr<Model> model;
  std::unique_ptr<Model> draft;     // speculative decoding's draft (outlives the service: declared before it)
  std::unique_ptr<Tokenizer> tok;   // null for a checkpoint without a vocabulary (llama2.c)
  std::string chat_template;        // the config's or the file's; empty when neither has one
  std::vector<int32_t> end_ids;     // end_of_generation_ids
  bool draft_shares_target_kv = false;
  std::unique_ptr<VisionEncoder> vision;  // LLMConfig::mmproj's (outlives the service: declared before it)
  std::unique_ptr<EngineService> service;

  // A request's prompt as token ids (errors: text without a tokenizer, an empty prompt).
  Result<std::vector<int32_t>> prompt_ids(const Request& r) const;
  // The same with its images placed (errors: images without a projector or a text prompt; an image that does
  // not decode; markers that do not match the images).
  Result<ImagePrompt> prompt(const Request& r) const;
};

// The LLM over an already loaded model (the CLI's tensor-parallel load, tests): reads the tokenizer (unless the
// caller already built it from the same file) and chat template from its file, loads the config's draft, builds
// the engine once through Engine::create.
Result<std::unique_ptr<LLM>> make_llm(std::unique_ptr<Model> model, const LLMConfig& config,
                                      std::unique_ptr<Tokenizer> tokenizer = nullptr);

// The engine configuration an LLMConfig asks for (KV types parsed, speculation fields; the draft not loaded).
Result<EngineConfig> engine_config(const LLMConfig& c, const Model& model);

}  // namespace cachet
