// What the server's handlers share: its state, the loaded LLM and views into it, the metrics, and how an
// error becomes an OpenAI-shaped answer. Internal to src/server.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "base/utf8.h"
#include "cachet/llm.h"
#include "engine/engine_service.h"
#include "grammar/grammar.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace cachet::server {

enum class State { kLoading, kReady, kDraining };

struct Metrics {
  LabeledCounter requests{"cachet_requests_total", "HTTP requests by status code", "status"};
  Histogram ttft{"cachet_time_to_first_token_seconds", "request arrival to its first generated token",
                 exponential_buckets(0.005, 2, 14)};
  Histogram itl{"cachet_inter_token_latency_seconds", "time between consecutive tokens of a request",
                exponential_buckets(0.001, 2, 14)};
  Histogram e2e{"cachet_request_duration_seconds", "request arrival to its last token",
                exponential_buckets(0.01, 2, 14)};
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0};
};

struct App {
  ServerOptions opts;
  std::atomic<State> state{State::kLoading};
  std::unique_ptr<LLM> llm;
  // Views into llm, set once it is loaded.
  const Tokenizer* tok = nullptr;
  EngineService* service = nullptr;
  std::string model_id, chat_template;
  int n_ctx = 0;
  size_t max_token_bytes = 1;  // the longest token text of the vocabulary
  bool trust_request_template = false;
  std::unique_ptr<GrammarCompiler> grammars;  // response_format, grammar, tool calls (docs/structured-output.md)
  Metrics metrics;
  std::atomic<int> in_flight{0};  // generation requests between acceptance and their last byte
  // The engine can no longer finish a step (a tensor-parallel rank died): waiting requests answer with this.
  std::atomic<bool> broken{false};
  std::string broken_message;  // written before `broken` is set
};

// A 400 naming the request field at fault ("" for none).
inline ApiError invalid_request(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, ""};
}

inline void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body().dump(), "application/json");
}

inline ApiError error_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kResourceExhausted: return {429, s.message(), "rate_limit_error", "", "queue_full"};
    case StatusCode::kUnavailable: return {503, s.message(), "server_error", "", "unavailable"};
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return {400, s.message(), "invalid_request_error", "", ""};
    default: return {500, s.message(), "server_error", "", ""};
  }
}

// The checks every POST handler makes first: the server is ready (else 503 with Retry-After), and the body is
// UTF-8 and JSON within the nesting limit (else 400). The body, or nullopt once the error has been sent.
inline std::optional<nlohmann::json> accept_json_body(App& app, const httplib::Request& req,
                                                      httplib::Response& res) {
  const State st = app.state.load();
  if (st != State::kReady) {
    res.set_header("Retry-After", "5");
    send_error(res, {503, st == State::kLoading ? "the model is still loading" : "the server is shutting down",
                     "server_error", "", "unavailable"});
    return std::nullopt;
  }
  if (sanitize_utf8(req.body) != req.body) {
    send_error(res, {400, "invalid JSON body: the request is not valid UTF-8", "invalid_request_error", "", ""});
    return std::nullopt;
  }
  auto body_or = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body_or)) {
    send_error(res, *e);
    return std::nullopt;
  }
  return std::get<nlohmann::json>(std::move(body_or));
}

}  // namespace cachet::server
