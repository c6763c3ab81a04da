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
  c->add_option("-t,--threads", o->llm.threads, "compute threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  add_rope_flags(c, &o->llm.rope);
  auto kv = std::make_shared<KvFlags>();  // parsed into the options' kv_type in the callback
  add_kv_flags(c, kv.get());
  c->add_option("--http-threads", o->http_threads, "connections served at once")->check(CLI::Range(4, 4096));
  c->add_option("-c,--ctx-size", o->ctx, "context per request in tokens")->check(CLI::PositiveNumber);
  c->add_option("--kv-memory", *kv_memory, "KV cache memory: 512MiB, 2GiB, or a fraction of RAM (0.25)");
  c->add_option("--parallel", o->llm.max_running, "most sequences decoded together")->check(CLI::PositiveNumber);
  c->add_option("--batch-tokens", o->llm.max_batch_tokens,
                "token budget of one engine step (default: about 0.4 TFLOP of prompt work, 64-512 tokens; smaller: shorter "
                "steps, sooner first tokens under load)")
      ->check(CLI::PositiveNumber);
  c->add_option("--prefill-chunk", o->llm.prefill_chunk, "most prompt tokens of one request per step (default: min(256, the step's))")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-queue", o->llm.max_waiting, "queued requests before answering 429")
      ->check(CLI::PositiveNumber);
  CLI::Option* max_body =
      c->add_option("--max-body", o->max_body_bytes, "largest request body in bytes (413 above; 1 MiB, 48 MiB with --mmproj)");
  c->add_option("--mmproj", o->llm.mmproj, "the model's projector file (mmproj-*.gguf): chat messages may carry images")
      ->check(CLI::ExistingFile);
  c->add_option("--encoder-layers-per-step", o->llm.encoder_layers_per_step,
                "an image's encoder layers run per step while other requests decode (0: the whole image in one step)")
      ->check(CLI::NonNegativeNumber);
  auto template_file = std::make_shared<std::string>();
  c->add_option("--chat-template-file", *template_file,
                 "a Jinja chat template replacing the model's (rendered within the template limits)")
      ->check(CLI::ExistingFile);
  c->add_flag("--trust-request-chat-template", o->trust_request_chat_template,
              "accept a 'chat_template' in chat requests (vLLM's field; rendered within the template limits)");
  auto pooling = std::make_shared<std::string>();
  c->add_option("--pooling", *pooling,
                "the pooling of /v1/embeddings instead of the file's: mean, cls or last; rank serves /v1/rerank from "
                "a model with a classifier head")
      ->check(CLI::IsMember({"mean", "cls", "last", "rank"}));
  auto no_prefix_cache = std::make_shared<bool>(false);
  c->add_flag("--no-prefix-cache", *no_prefix_cache, "do not reuse the KV blocks of shared prompt prefixes");
  c->add_option("--state-checkpoint-every", o->llm.state_checkpoint_every,
                 "hybrid models: a recurrent-state checkpoint for the prefix cache every N prompt tokens (0: none)")
      ->check(CLI::NonNegativeNumber);
  add_spec_flags(c, &o->llm.speculation);
  c->callback([o, kv, kv_memory, template_file, no_prefix_cache, pooling, max_body, exit_code] {
    if (Status s = o->llm.speculation.validate(); !s.is_ok()) {
      *exit_code = fail(s);
      return;
    }
    server::ServerOptions opts = *o;
    // Images arrive inline, base64 (4/3 of the bytes): room for the image decoder's 32 MiB limit.
    if (!opts.llm.mmproj.empty() && max_body->count() == 0) opts.max_body_bytes = size_t{48} << 20;
    kv->apply(&opts.llm);
    opts.llm.prefix_cache = !*no_prefix_cache;
    if (!pooling->empty()) opts.pooling = pooling_from_name(*pooling);
    if (!template_file->empty()) {
      auto t = read_file(*template_file);
      if (!t.is_ok()) {
        *exit_code = fail(t.status());
        return;
      }
      opts.llm.chat_template = *t;
    }
    opts.model_path = resolve_model_path(opts.model_path);
    if (opts.api_key.empty())
      if (const char* k = std::getenv("CACHET_API_KEY")) opts.api_key = k;
    auto mem = parse_memory(*kv_memory);
    if (!mem.is_ok()) {
      *exit_code = fail(mem.status());
      return;
    }
    opts.llm.kv_memory_bytes = *mem;
    if (tp_size() > 1) {
      // Ranks other than 0 serve rank 0, not HTTP: their load runs the worker loop and exits there.
      LoadOptions lo;
      lo.n_threads = opts.llm.threads;
      lo.rope = opts.llm.rope;
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
    if (*exit_code == server::kExitEngineStuck) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(*exit_code);  // the engine thread cannot be joined (server.h): end here, not in main's cleanup
    }
  });
}

}  // namespace cachet::cli
