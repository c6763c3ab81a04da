// One generation request in flight, whatever API it came through (OpenAI chat and completions, Anthropic
// messages, OpenAI responses): its choices' text with stop matching, the split into reasoning, answer and
// tool calls (chat/output_parser.h), logprobs, timings and usage. pump() returns API-neutral events; each API
// shapes them (server/openai_format.h, server/anthropic.h, server/responses.h). Internal to src/server.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "engine/engine_service.h"
#include "engine/text_stream.h"
#include "server/openai.h"
#include "server/server_app.h"

namespace cachet::server {

using Clock = std::chrono::steady_clock;

// What a chat's output holds besides text: reasoning markers and the tools whose calls are parsed out.
struct OutputSpec {
  ChatFormat format;
  bool reasoning = false;        // split reasoning out
  bool inside_thinking = false;  // the prompt opened it
  std::vector<ToolSpec> tools;   // empty: no call parsing
};

struct ChoiceEvent {
  int index = 0;
  OutputDelta delta;
  nlohmann::json logprobs;  // null, or this token's (OpenAI's shape for the endpoint)
  std::string finish;       // "" until the choice ends: "stop", "length", "tool_calls", "abort"
};

struct ToolCall {
  std::string id, name, arguments;
};

class Generation {
 public:
  struct Choice {
    explicit Choice(const Tokenizer* tok, const std::vector<std::string>& stops) : text_stream(tok, stops) {}
    TextStream text_stream;
    std::unique_ptr<ChatOutputParser> parser;
    std::string text;  // everything generated (after stop trimming)
    std::string content, reasoning;
    std::vector<ToolCall> calls;
    std::string finish;
    int tokens = 0;
    bool done = false;
    nlohmann::json lp_content = nlohmann::json::array();  // chat
    nlohmann::json lp_completion = {{"tokens", nlohmann::json::array()},
                                    {"token_logprobs", nlohmann::json::array()},
                                    {"top_logprobs", nlohmann::json::array()},
                                    {"text_offset", nlohmann::json::array()}};
  };

  // id_prefix: "chatcmpl-", "cmpl-", "msg_", "resp_".
  Generation(App& app, GenerationRequest r, int n_prompt, Clock::time_point t0, std::optional<OutputSpec> out,
             const std::string& id_prefix);
  ~Generation();
  void set_stream(std::shared_ptr<RequestStream> s) { stream_ = std::move(s); }
  bool chat() const { return r_.endpoint == Endpoint::kChat; }
  bool all_done() const;
  void cancel();
  // Waits for events (up to `timeout`) and applies them; returns what they added, per choice.
  std::vector<ChoiceEvent> pump(std::chrono::milliseconds timeout);

  const GenerationRequest& request() const { return r_; }
  const Choice& choice(int i) const { return *choices_[static_cast<size_t>(i)]; }
  int n_choices() const { return static_cast<int>(choices_.size()); }
  const std::string& id() const { return id_; }
  std::time_t created() const { return created_; }
  const std::string& model_id() const { return app_.model_id; }
  int n_prompt() const { return n_prompt_; }
  int cached_tokens() const { return cached_tokens_; }
  int completion_tokens() const;

 private:
  void apply(StreamEvent& e, std::vector<ChoiceEvent>* out);
  nlohmann::json record_logprobs(Choice& c, const RequestEvent& ev);
  void observe_end();

  App& app_;
  GenerationRequest r_;
  int n_prompt_;
  Clock::time_point t0_, last_token_;
  std::time_t created_;
  std::string id_;
  std::vector<std::unique_ptr<Choice>> choices_;
  std::shared_ptr<RequestStream> stream_;
  bool first_token_ = false, observed_end_ = false;
  int cached_tokens_ = 0;  // prompt tokens the prefix cache supplied
};

// How one API shapes a generation: the SSE text of a stream (its opening, each event, its end) and the
// non-streamed body.
class ApiShape {
 public:
  virtual ~ApiShape() = default;
  virtual std::string open(const Generation& g) = 0;
  virtual std::string event(const Generation& g, const ChoiceEvent& e) = 0;
  virtual std::string close(const Generation& g) = 0;
  virtual nlohmann::json response(const Generation& g) = 0;
  virtual std::string error_event(const ApiError& e) = 0;
  // The error body of this API (OpenAI's shape unless overridden).
  virtual nlohmann::json error_body(const ApiError& e) { return e.body(); }
};

std::string sse(const nlohmann::json& j);

}  // namespace cachet::server
