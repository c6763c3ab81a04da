// cachet serve: the OpenAI-compatible server (src/server, docs/server.md).
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "server/server.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

void add_serve_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<server::ServerOptions>();
  auto kv_memory = std::make_shared<std::string>("512MiB");
  CLI::App* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  c->add_option("-m,--model", o->model_path, "GGUF model (default: SmolLM2-135M-Instruct)");
  c->add_option("--alias", o->model_alias, "model id clients send (default: the file name without .gguf)");
  c->add_option("--host", o->host, "address to listen on");
  c->add_option("--port", o->port, "port")->check(CLI::Range(0, 65535));
  c->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on /v1/* (or $CACHET_API_KEY)");
  c->add_option("--cors", o->cors_origin, "send CORS headers allowing this origin (e.g. '*')");
  c->add_option("-t,--threads", o->threads, "compute threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  add_rope_flags(c, &o->rope);
  auto kv = std::make_shared<KvFlags>();  // parsed into the options' kv_type in the callback
  add_kv_flags(c, kv.get());
  c->add_option("--http-threads", o->http_threads, "connections served at once")->check(CLI::Range(4, 4096));
  c->add_option("-c,--ctx-size", o->ctx, "context per request in tokens")->check(CLI::PositiveNumber);
  c->add_option("--kv-memory", *kv_memory, "KV cache memory: 512MiB, 2GiB, or a fraction of RAM (0.25)");
  c->add_option("--parallel", o->max_running, "most sequences decoded together")->check(CLI::PositiveNumber);
  c->add_option("--max-queue", o->max_waiting, "queued requests before answering 429")->check(CLI::PositiveNumber);
  c->add_option("--max-body", o->max_body_bytes, "largest request body in bytes (413 above)");
  c->add_option("--chat-template-file", o->chat_template_file,
                 "a Jinja chat template replacing the model's (rendered within the template limits)")
      ->check(CLI::ExistingFile);
  c->add_flag("--trust-request-chat-template", o->trust_request_chat_template,
              "accept a 'chat_template' in chat requests (vLLM's field; rendered within the template limits)");
  c->add_flag("--no-prefix-cache", o->no_prefix_cache, "do not reuse the KV blocks of shared prompt prefixes");
  add_spec_flags(c, &o->spec);
  c->callback([o, kv, kv_memory, exit_code] {
    if (Status s = o->spec.validate(); !s.is_ok()) {
      *exit_code = fail(s);
      return;
    }
    server::ServerOptions opts = *o;
    opts.kv_type = kv->types();
    opts.model_path = resolve_model_path(opts.model_path);
    if (opts.api_key.empty())
      if (const char* k = std::getenv("CACHET_API_KEY")) opts.api_key = k;
    auto mem = parse_memory(*kv_memory);
    if (!mem.is_ok()) {
      *exit_code = fail(mem.status());
      return;
    }
    opts.kv_memory_bytes = *mem;
    if (tp_size() > 1) {
      // Ranks other than 0 serve rank 0, not HTTP: their load runs the worker loop and exits there.
      LoadOptions lo;
      lo.n_threads = opts.threads;
      lo.rope = opts.rope;
      if (Status s = tp_prepare(&lo); !s.is_ok()) {
        *exit_code = fail(s);
        return;
      }
      if (lo.tp.rank != 0) {
        *exit_code = fail(load_tp(opts.model_path, lo).status());
        return;
      }
      opts.load = load_tp;
      opts.drain_stall_ms = 300;
    }
    *exit_code = server::serve(opts);
  });
}

}  // namespace cachet::cli
