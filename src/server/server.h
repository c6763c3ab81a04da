// `cachet serve`: an OpenAI-compatible HTTP server over the continuous-batching engine (docs/server.md).
#pragma once

#include <functional>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/spec_options.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/rope_scaling.h"

namespace cachet::server {

struct ServerOptions {
  std::string model_path;
  std::string model_alias;            // the id clients send as "model" (default: the file name without .gguf)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                // empty: no authentication
  std::string cors_origin;            // empty: no CORS headers
  int threads = 0;                    // compute threads (0: all cores)
  int http_threads = 256;             // connections served at once (a streaming request holds one)
  int ctx = 8192;                     // context per request (capped at the model's training context)
  int64_t kv_memory_bytes = 512ll << 20;
  int max_running = 64;               // sequences decoded together
  int max_waiting = 256;              // queued requests before 429
  size_t max_body_bytes = 1 << 20;    // larger bodies get 413
  bool trust_request_chat_template = false;
  std::string chat_template_file;     // a Jinja chat template replacing the model's (llama-server's --chat-template-file)  // accept vLLM's per-request `chat_template` (rendered in the sandbox)
  bool no_prefix_cache = false;       // prefix caching is on unless this is set
  SpecOptions spec;                   // speculative decoding (engine/spec_options.h)
  RopeOverrides rope;                 // RoPE settings replacing the file's (target and draft)
  KvTypes kv_type;                    // K and V element types of the KV cache
  // > 0: while draining after SIGTERM, when no engine step has finished for this long, the in-flight requests
  // get a 503 and the process exits with 3. Under mpirun a dead rank never lets a step finish, and mpirun
  // kills the survivors 1 s after its SIGTERM (docs/tensor_parallel.md). 0: drain for as long as it takes.
  int drain_stall_ms = 0;
  // How the model is loaded (the CLI's adds tensor parallelism); empty: load_model.
  std::function<Result<std::unique_ptr<Model>>(const std::string&, const LoadOptions&)> load;
};

// Runs until SIGTERM or SIGINT, then drains: new requests get 503, running ones finish; returns the exit
// code (0 after a clean drain, 1 when the model or the port fails).
int serve(const ServerOptions& opts);

}  // namespace cachet::server
