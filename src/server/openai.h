// OpenAI API requests: parsing and validation of /v1/completions and /v1/chat/completions bodies into one
// GenerationRequest, and the error shape. Every field is checked for type and range; unknown fields are an
// error (as the OpenAI API does), so a typo never silently changes behaviour.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "speculative/proposer.h"

namespace cachet::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  nlohmann::json body() const;
};

enum class Endpoint { kCompletions, kChat };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt_text;              // completions: the prompt; chat: filled by the caller from messages
  std::vector<int32_t> prompt_ids;      // completions given token ids
  nlohmann::ordered_json messages;      // chat
  // Chat: the images of image_url parts (their bytes, decoded from data: URIs), in order; each message's content
  // holds kImageMarker where one was.
  std::vector<std::string> images;
  SamplingParams sampling;              // temperature, top_p, ..., seed, max_tokens (-1 = up to the context)
  std::vector<std::string> stop;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  int logprobs = -1;                    // -1: none; else the number of alternatives (0..20)
  std::string cache_salt;               // vLLM's field: prefixes are shared only between equal salts (and API keys)
  std::optional<SpecMode> speculative;  // ours: "off", "lookup" or "draft" (default: the server's flags)
  std::optional<std::string> chat_template;  // vLLM's field: this request's template (serve --trust-request-chat-template)
  // Structured output and agents (docs/structured-output.md, docs/tools.md); shapes checked here, schemas and
  // grammars compiled by the caller.
  // Kept in the body's key order (a schema's property order is the order the output follows).
  nlohmann::ordered_json response_format;  // null, or {"type": "text" | "json_object" | "json_schema", ...}
  std::string grammar;                  // llama.cpp's `grammar` (GBNF)
  nlohmann::ordered_json tools;         // null, or [{"type": "function", "function": {name, description, parameters}}]
  nlohmann::json tool_choice;           // null (auto), "auto", "none", "required", {"type": "function", ...}
  bool parallel_tool_calls = true;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  std::string reasoning_effort;         // "low" | "medium" | "high" (passed to the template)
  int thinking_budget = 0;              // > 0: reasoning ends after this many tokens
  bool separate_reasoning = true;       // false: the reasoning stays in the content
};

// Bounds on what a request may carry besides its prompt (docs/server.md, "Limits").
constexpr int kMaxJsonDepth = 64;           // nesting of the request body
constexpr size_t kMaxStopBytes = 4096;      // one stop sequence
constexpr size_t kMaxIdBytes = 1024;        // model, user, cache_salt
constexpr size_t kMaxTemplateBytes = 1 << 20;  // a request's chat_template

// j[key] when j is an object holding a string there, else `fallback` (a field of the wrong type is then whatever
// the caller says about a missing one: a 400, never json's type_error).
template <class Json>
std::string string_field(const Json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->template get<std::string>() : fallback;
}

// Parses a request body, refusing bodies nested deeper than kMaxJsonDepth (before building them).
std::variant<nlohmann::json, ApiError> parse_body(const std::string& body);

// Parses a request body (already valid JSON) for the endpoint; n_vocab bounds logit_bias keys.
// `ordered`: the same body parsed keeping key order (schemas and tools are copied from it); null: from body.
std::variant<GenerationRequest, ApiError> parse_generation_request(const nlohmann::json& body, Endpoint endpoint,
                                                                   int64_t n_vocab,
                                                                   const nlohmann::ordered_json* ordered = nullptr);

}  // namespace cachet::server
