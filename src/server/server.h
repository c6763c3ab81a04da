// `cachet serve`: an OpenAI-compatible HTTP server over the continuous-batching engine (docs/server.md).
#pragma once

#include <functional>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cachet/config.h"
#include "cachet/embedding.h"
#include "model/model.h"

namespace cachet::server {

struct ServerOptions {
  std::string model_path;
  std::string model_alias;            // the id clients send as "model" (default: the file name without .gguf)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                // empty: no authentication
  std::string cors_origin;            // empty: no CORS headers
  int http_threads = 256;             // connections served at once (a streaming request holds one)
  int ctx = 8192;                     // context per request (capped at the model's training context)
  size_t max_body_bytes = 1 << 20;    // larger bodies get 413
  bool trust_request_chat_template = false;  // accept vLLM's per-request `chat_template` (rendered in the sandbox)
  std::optional<Pooling> pooling;     // /v1/embeddings' pooling when the model's file names none
  // The engine: threads, KV cache, batching, prefix cache, speculation, RoPE overrides and the chat template
  // replacing the model's (llama-server's --chat-template-file). max_waiting: queued requests before 429.
  LLMConfig llm = [] {
    LLMConfig c;
    c.max_waiting = 256;
    return c;
  }();
  // > 0: while draining after SIGTERM, when no engine step has finished for this long, the in-flight requests
  // get a 503 and serve returns kExitEngineStuck. Under mpirun a dead rank never lets a step finish, and mpirun
  // kills the survivors 1 s after its SIGTERM (docs/tensor_parallel.md). 0: drain for as long as it takes.
  int drain_stall_ms = 0;
  // How the model is loaded (the CLI's adds tensor parallelism); empty: load_model.
  std::function<Result<std::unique_ptr<Model>>(const std::string&, const LoadOptions&)> load;
};

// serve's exit code when the engine thread is stuck inside a tensor-parallel collective: nothing can shut it
// down cleanly, so the caller ends the process at once (std::_Exit) rather than join it.
inline constexpr int kExitEngineStuck = 3;

// Runs until SIGTERM or SIGINT, then drains: new requests get 503, running ones finish; returns the exit
// code (0 after a clean drain, 1 when the model or the port fails, kExitEngineStuck).
int serve(const ServerOptions& opts);

}  // namespace cachet::server
