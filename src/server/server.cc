#include "server/server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <variant>

#include "api/llm_impl.h"
#include "base/utf8.h"
#include "chat/chat_template.h"
#include "engine/engine_service.h"
#include "engine/text_stream.h"
#include "io/gguf.h"
#include "model/model.h"
#include "server/chat_page.h"
#include "server/dashboard_page.h"
#include "server/metrics.h"
#include "server/stack_trim.h"
#include "server/openai.h"
#include "server/server_app.h"
#include "server/anthropic.h"
#include "server/embeddings.h"
#include "server/generation.h"
#include "server/openai_format.h"
#include "server/prepare.h"
#include "server/rerank.h"
#include "server/responses.h"
#include "tokenizer/tokenizer.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;

// cpp-httplib 0.11 does not expose a request's socket, so a handler finds it by the peer address; then
// poll(POLLRDHUP) tells whether the client has gone, even while nothing is being written (queued, prefill).
int connection_fd(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    char host[INET6_ADDRSTRLEN] = {0};
    int port = -1;
    if (ss.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
    }
    if (port == req.remote_port && req.remote_addr == host) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLRDHUP), 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

}  // namespace

void run_generation(App& app, const httplib::Request& req, httplib::Response& res, GenerationRequest r, Prepared p,
                    std::shared_ptr<ApiShape> shape, const std::string& id_prefix, Clock::time_point t0) {
  const int n_prompt = static_cast<int>(p.prompt.size());
  if (r.sampling.max_tokens < 0) r.sampling.max_tokens = std::max(1, app.n_ctx - n_prompt);
  if (static_cast<int64_t>(n_prompt) + r.sampling.max_tokens > app.n_ctx) {
    const ApiError e{400,
                     "This model's maximum context length is " + std::to_string(app.n_ctx) +
                         " tokens. However, you requested " + std::to_string(n_prompt + r.sampling.max_tokens) +
                         " tokens (" + std::to_string(n_prompt) + " in the prompt, " +
                         std::to_string(r.sampling.max_tokens) + " for the completion).",
                     "invalid_request_error", "max_tokens", "context_length_exceeded"};
    res.status = e.status;
    return res.set_content(shape->error_body(e).dump(), "application/json");
  }
  r.sampling.grammar = p.grammar;
  auto gen = std::make_shared<Generation>(app, r, n_prompt, t0, p.output, id_prefix);
  const int fd = connection_fd(req);
  // The prefix cache's namespace: the caller's API key and the request's cache_salt, so one tenant's prefix is
  // never served to another (the key is whatever the client sent, checked or not).
  const std::string key = req.has_header("Authorization") ? req.get_header_value("Authorization")
                                                          : req.get_header_value("x-api-key");
  const uint64_t cache_ns = std::hash<std::string>{}(key + '\0' + r.cache_salt);
  auto stream = app.service->submit(p.prompt, r.sampling, {}, !r.ignore_eos, r.n, cache_ns, r.speculative,
                                    std::move(p.images));
  if (!stream.is_ok()) {
    if (stream.status().code() == StatusCode::kResourceExhausted) res.set_header("Retry-After", "1");
    const ApiError e = error_of(stream.status());
    res.status = e.status;
    return res.set_content(shape->error_body(e).dump(), "application/json");
  }
  gen->set_stream(*stream);
  app.metrics.prompt_tokens += n_prompt;

  if (!r.stream) {
    while (!gen->all_done()) {
      gen->pump(std::chrono::milliseconds(20));
      if (app.broken) {
        const ApiError e = error_of(unavailable(app.broken_message));
        res.status = e.status;
        return res.set_content(shape->error_body(e).dump(), "application/json");
      }
      if (peer_closed(fd)) {
        gen->cancel();
        res.status = 499;  // client closed the request (nothing can be sent)
        return;
      }
    }
    res.set_content(shape->response(*gen).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", [gen, shape, fd, &app](size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
    if (!write(shape->open(*gen))) return gen->cancel(), false;
    while (!gen->all_done()) {
      for (const ChoiceEvent& e : gen->pump(std::chrono::milliseconds(20)))
        if (!write(shape->event(*gen, e))) return gen->cancel(), false;
      if (app.broken) {  // an error event, as the APIs send mid-stream, then the stream ends
        (void)write(shape->error_event(error_of(unavailable(app.broken_message))));
        return false;
      }
      if (!gen->all_done() && peer_closed(fd)) return gen->cancel(), false;
    }
    if (!write(shape->close(*gen))) return false;
    sink.done();
    return true;
  });
}

namespace {

void handle_generate(App& app, const httplib::Request& req, httplib::Response& res, Endpoint ep) {
  const auto t0 = Clock::now();
  const std::optional<json> body_or = accept_json_body(app, req, res);
  if (!body_or) return;
  const json& body = *body_or;
  // Schemas and tools keep the body's key order (the output follows a schema's property order).
  const bool structured = body.is_object() && (body.contains("tools") || body.contains("response_format") ||
                                               body.contains("json_schema") || body.contains("chat_template_kwargs"));
  const nlohmann::ordered_json ordered = structured ? nlohmann::ordered_json::parse(req.body) : nlohmann::ordered_json();
  auto parsed = parse_generation_request(body, ep, app.tok->n_vocab(), structured ? &ordered : nullptr);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  GenerationRequest r = std::move(std::get<GenerationRequest>(parsed));
  if (!r.model.empty() && r.model != app.model_id)
    return send_error(res, {404, "The model '" + r.model + "' does not exist; this server serves '" + app.model_id + "'",
                            "invalid_request_error", "model", "model_not_found"});
  if (r.chat_template && !app.trust_request_template)
    return send_error(res, {400, "'chat_template' in a request needs the server's --trust-request-chat-template",
                            "invalid_request_error", "chat_template", ""});
  auto prepared = prepare_generation(app, r);
  if (auto* e = std::get_if<ApiError>(&prepared)) return send_error(res, *e);
  run_generation(app, req, res, std::move(r), std::move(std::get<Prepared>(prepared)), openai_shape(),
                 ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-", t0);
}

std::string metrics_text(App& app) {
  std::string out;
  app.metrics.requests.render(&out);
  app.metrics.ttft.render(&out);
  app.metrics.itl.render(&out);
  app.metrics.e2e.render(&out);
  render_scalar(&out, "cachet_prompt_tokens_total", "counter", "prompt tokens of accepted requests",
                static_cast<double>(app.metrics.prompt_tokens.load()));
  render_scalar(&out, "cachet_generation_tokens_total", "counter", "tokens generated",
                static_cast<double>(app.metrics.generation_tokens.load()));
  ServiceSnapshot s;
  if (app.service) s = app.service->snapshot();
  render_scalar(&out, "cachet_requests_running", "gauge", "sequences in the running batch", s.counters.running);
  render_scalar(&out, "cachet_requests_waiting", "gauge", "sequences waiting for KV blocks or a batch slot",
                s.counters.waiting);
  render_scalar(&out, "cachet_kv_blocks_used", "gauge", "KV cache blocks in use", s.counters.blocks_used);
  render_scalar(&out, "cachet_kv_blocks_total", "gauge", "KV cache blocks in the pool", s.counters.blocks_total);
  render_scalar(&out, "cachet_kv_tokens_stored", "gauge", "token slots holding computed K/V",
                static_cast<double>(s.counters.tokens_stored));
  render_scalar(&out, "cachet_preemptions_total", "counter", "requests preempted (blocks freed, recomputed later)",
                static_cast<double>(s.counters.preemptions));
  render_scalar(&out, "cachet_engine_steps_total", "counter", "engine steps (one forward pass each)",
                static_cast<double>(s.steps));
  render_scalar(&out, "cachet_engine_step_seconds_total", "counter",
                "seconds the engine spent in steps (its rate is the engine's busy fraction)", s.step_seconds);
  if (s.counters.state_slots_total > 0) {  // hybrid models' recurrent states
    render_scalar(&out, "cachet_state_slots_used", "gauge", "recurrent state slots held by sequences",
                  s.counters.state_slots_used);
    render_scalar(&out, "cachet_state_slots_total", "gauge", "recurrent state slots in the store",
                  s.counters.state_slots_total);
    render_scalar(&out, "cachet_state_checkpoints", "gauge",
                  "state slots the prefix cache holds as checkpoints (prefix ends a request can resume from)",
                  s.counters.state_checkpoints);
    render_scalar(&out, "cachet_state_bytes_per_slot", "gauge", "bytes of one sequence's recurrent state",
                  static_cast<double>(s.counters.state_bytes_per_slot));
  }
  render_scalar(&out, "cachet_prefix_cache_blocks", "gauge", "KV blocks the prefix cache holds",
                s.counters.blocks_cached);
  // vLLM's names, so routers and autoscalers that read them (sglang-router, the Gateway API Inference
  // Extension) work unchanged: queries and hits count prompt tokens looked up and found.
  render_scalar(&out, "vllm:prefix_cache_queries", "counter", "prefix cache queries, in prompt tokens",
                static_cast<double>(s.counters.prefix_query_tokens));
  render_scalar(&out, "vllm:prefix_cache_hits", "counter", "prefix cache hits, in prompt tokens",
                static_cast<double>(s.counters.prefix_hit_tokens));
  // Speculative decoding, as vLLM names it: draft tokens the target verified, and those it accepted.
  render_scalar(&out, "vllm:spec_decode_num_draft_tokens", "counter", "draft tokens verified by the target",
                static_cast<double>(s.counters.spec_draft_tokens));
  render_scalar(&out, "vllm:spec_decode_num_accepted_tokens", "counter", "draft tokens accepted",
                static_cast<double>(s.counters.spec_accepted_tokens));
  render_scalar(&out, "cachet_images_encoded_total", "counter",
                "images the vision encoder ran on (a prefix-cache hit on a picture needs none)",
                static_cast<double>(s.counters.images_encoded));
  render_scalar(&out, "vllm:num_requests_running", "gauge", "requests in the running batch", s.counters.running);
  render_scalar(&out, "vllm:num_requests_waiting", "gauge", "requests waiting", s.counters.waiting);
  render_scalar(&out, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage (1 = all blocks in use)",
                s.counters.blocks_total > 0 ? static_cast<double>(s.counters.blocks_used) / s.counters.blocks_total
                                            : 0.0);
  render_scalar(&out, "cachet_http_in_flight", "gauge", "generation requests being served", app.in_flight.load());
  return out;
}

void install_routes(App& app, httplib::Server& svr) {
  const ServerOptions& o = app.opts;
  if (!o.cors_origin.empty())
    svr.set_default_headers({{"Access-Control-Allow-Origin", o.cors_origin},
                             {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                             {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"}});
  svr.Options(R"(/.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
  // After each handler (the deep parts of a request, rendering its template and parsing its body, are behind
  // it; a stream's later writes are shallow): hand back the stack pages it touched (server/stack_trim.h).
  svr.set_post_routing_handler([](const httplib::Request&, httplib::Response&) { release_unused_stack(); });
  svr.set_pre_routing_handler([&app](const httplib::Request& req, httplib::Response& res) {
    if (app.opts.api_key.empty() || req.method == "OPTIONS" || req.path.rfind("/v1/", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    // Bearer (OpenAI's clients) or x-api-key (Anthropic's).
    if (req.get_header_value("Authorization") == "Bearer " + app.opts.api_key ||
        req.get_header_value("x-api-key") == app.opts.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, {401, "missing or invalid API key (send 'Authorization: Bearer <key>' or 'x-api-key: <key>')",
                     "invalid_request_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = "error " + std::to_string(res.status);
    if (res.status == 404) msg = "no route for " + req.method + " " + req.path;
    if (res.status == 413) msg = "the request body is larger than the server accepts";
    if (res.status == 405) msg = "method not allowed";
    ApiError e{res.status, msg, res.status >= 500 ? "server_error" : "invalid_request_error", "", ""};
    res.set_content(e.body().dump(), "application/json");
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, {500, what, "server_error", "", ""});
  });
  svr.set_logger([&app](const httplib::Request&, const httplib::Response& res) {
    app.metrics.requests.add(std::to_string(res.status));
  });
  svr.Get("/health", [&app](const httplib::Request&, httplib::Response& res) {
    const State s = app.state.load();
    res.status = s == State::kReady ? 200 : 503;
    res.set_content(json({{"status", s == State::kReady ? "ok" : s == State::kLoading ? "loading" : "draining"}}).dump(),
                    "application/json");
  });
  svr.Get("/metrics", [&app](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(app), "text/plain; version=0.0.4");
  });
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kChatPage, "text/html"); });
  svr.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kDashboardPage, "text/html");
  });
  // The dashboard's data. It shows the beginnings of cached prompts (every tenant's), so with --api-key it
  // wants the key too: the Authorization header, or ?key= (the page passes the one in its URL's #key=).
  svr.Get("/dashboard/state", [&app](const httplib::Request& req, httplib::Response& res) {
    if (!app.opts.api_key.empty() && req.get_header_value("Authorization") != "Bearer " + app.opts.api_key &&
        req.get_param_value("key") != app.opts.api_key)
      return send_error(res, {401, "missing or invalid API key", "invalid_request_error", "", "invalid_api_key"});
    ServiceSnapshot s;
    if (app.service) s = app.service->snapshot();
    json nodes = json::array();
    for (const auto& n : s.nodes)
      nodes.push_back({{"depth", n.depth_tokens}, {"tokens", n.n_tokens}, {"hits", n.hits}, {"locks", n.lock_ref},
                       {"text", app.tok ? app.tok->decode(n.first_tokens) : std::string()}});
    const EngineCounters& c = s.counters;
    res.set_content(json({{"model", app.model_id}, {"running", c.running}, {"waiting", c.waiting}, {"steps", s.steps},
                          {"blocks_total", c.blocks_total}, {"blocks_used", c.blocks_used},
                          {"blocks_cached", c.blocks_cached}, {"blocks_held_by_requests", s.blocks_held_by_requests},
                          {"prefix_query_tokens", c.prefix_query_tokens}, {"prefix_hit_tokens", c.prefix_hit_tokens},
                          {"state_slots_total", c.state_slots_total}, {"state_slots_used", c.state_slots_used},
                          {"state_checkpoints", c.state_checkpoints},
                          {"state_bytes_per_slot", c.state_bytes_per_slot}, {"nodes", nodes}})
                        .dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });
  svr.Get("/v1/models", [&app](const httplib::Request&, httplib::Response& res) {
    if (app.state.load() == State::kLoading)
      return send_error(res, {503, "the model is still loading", "server_error", "", "unavailable"});
    res.set_content(json({{"object", "list"},
                          {"data", json::array({{{"id", app.model_id},
                                                 {"object", "model"},
                                                 {"created", 0},
                                                 {"owned_by", "cachet"},
                                                 {"context_length", app.n_ctx},
                                                 {"modalities", {{"vision", app.llm->impl().vision != nullptr}}}}})}})
                        .dump(),
                    "application/json");
  });
  svr.Post("/v1/completions", [&app](const httplib::Request& req, httplib::Response& res) {
    handle_generate(app, req, res, Endpoint::kCompletions);
  });
  svr.Post("/v1/chat/completions", [&app](const httplib::Request& req, httplib::Response& res) {
    handle_generate(app, req, res, Endpoint::kChat);
  });
  svr.Post("/v1/embeddings", [&app](const httplib::Request& req, httplib::Response& res) {
    handle_embeddings(app, req, res);
  });
  for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking"})
    svr.Post(path, [&app](const httplib::Request& req, httplib::Response& res) { handle_rerank(app, req, res); });
  svr.Post("/v1/responses", [&app](const httplib::Request& req, httplib::Response& res) {
    handle_responses(app, req, res);
  });
  svr.Post("/v1/messages", [&app](const httplib::Request& req, httplib::Response& res) {
    handle_anthropic_messages(app, req, res);
  });
  svr.Post("/v1/messages/count_tokens", [&app](const httplib::Request& req, httplib::Response& res) {
    handle_anthropic_count_tokens(app, req, res);
  });
  // llama-server's: {"content", "add_special"} -> {"tokens"}, and {"tokens"} -> {"content"}.
  svr.Post("/tokenize", [&app](const httplib::Request& req, httplib::Response& res) {
    const std::optional<json> b = accept_json_body(app, req, res);
    if (!b) return;
    if (!b->is_object() || !b->contains("content") || !(*b)["content"].is_string())
      return send_error(res, {400, "'content' must be a string", "invalid_request_error", "content", ""});
    const bool add_special = b->value("add_special", false);
    res.set_content(json({{"tokens", app.tok->encode((*b)["content"].get<std::string>(), add_special, true)}}).dump(),
                    "application/json");
  });
  svr.Post("/detokenize", [&app](const httplib::Request& req, httplib::Response& res) {
    const std::optional<json> b = accept_json_body(app, req, res);
    if (!b) return;
    std::vector<int32_t> ids;
    if (b->is_object() && b->contains("tokens") && (*b)["tokens"].is_array())
      for (const json& t : (*b)["tokens"])
        if (t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < app.tok->n_vocab())
          ids.push_back(t.get<int32_t>());
        else
          return send_error(res, {400, "'tokens' must be token ids", "invalid_request_error", "tokens", ""});
    else
      return send_error(res, {400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens", ""});
    res.set_content(json({{"content", app.tok->decode(ids)}}).dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });
}

}  // namespace

int serve(const ServerOptions& opts) {
  // SIGTERM/SIGINT are taken by sigwait below; every thread started from here on inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // glibc's defaults let a long-running server's resident size creep (bench/soak.py: +70 MiB over an hour, no
  // live heap growth under heaptrack): a freed large block raises the mmap threshold up to 32 MiB, so later
  // large buffers (10 MB request bodies, long prompts' activations) come from thread arenas and fragment them,
  // and every HTTP thread may get an arena of its own (8 per core). A fixed 1 MiB threshold keeps large
  // blocks in mmap (returned on free) and four arenas bound the fragmentation. Before any thread starts.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 4);

  App app;
  app.opts = opts;
  httplib::Server svr;
  const int http_threads = opts.http_threads;
  svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  svr.set_payload_max_length(opts.max_body_bytes);
  svr.set_keep_alive_max_count(1000);
  // An idle keep-alive connection is closed after 30 s (httplib's default, 5 s, races clients that reuse a
  // connection a moment late on a loaded machine: they meet a reset instead of a response).
  svr.set_keep_alive_timeout(30);
  // Small writes go out at once. With Nagle's algorithm a stream's second small write (the first token's event
  // after the response head, each event after the one before) waits for the client's ACK of the first, which
  // a client delays by up to 40 ms: 44 ms to the first token of a 7-token prompt on an idle server (6 ms with
  // this), and as much on every non-streamed response (its body after its head).
  svr.set_tcp_nodelay(true);
  // Debian's compiled httplib listens with a backlog of 5: a burst of clients connecting at once (100 streaming
  // clients in test_server.py) overflows the accept queue (TcpExtListenOverflows) and, rarely, a client meets a
  // reset before its response. The listening socket is the last one handed to this hook before bind_to_port
  // returns; listening on it again raises its backlog to the system's limit (net.core.somaxconn).
  int listen_fd = -1;
  svr.set_socket_options([&listen_fd](int sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  install_routes(app, svr);
  if (!svr.bind_to_port(opts.host.c_str(), opts.port)) {
    std::fprintf(stderr, "error: cannot listen on %s:%d\n", opts.host.c_str(), opts.port);
    return 1;
  }
  if (listen_fd < 0 || ::listen(listen_fd, SOMAXCONN) != 0)
    std::fprintf(stderr, "warning: could not raise the listen backlog; bursts of connections may be refused\n");
  std::thread http([&svr] { svr.listen_after_bind(); });
  std::fprintf(stderr, "cachet serve: listening on http://%s:%d (loading %s)\n", opts.host.c_str(), opts.port,
               opts.model_path.c_str());

  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    svr.stop();
    http.join();
    return 1;
  };
  LoadOptions lo;
  lo.n_threads = opts.llm.threads;
  lo.rope = opts.llm.rope;
  auto model = opts.load ? opts.load(opts.model_path, lo) : load_model(opts.model_path, lo);
  if (!model.is_ok()) return fail(model.status().message());
  auto llm = make_llm(std::move(*model), opts.llm);
  if (!llm.is_ok()) return fail(llm.status().message());
  app.llm = std::move(*llm);
  LLM::Impl& impl = app.llm->impl();
  if (!impl.tok) return fail("the server needs a GGUF model with a tokenizer");
  app.tok = impl.tok.get();
  app.service = impl.service.get();
  app.chat_template = impl.chat_template;
  // Constrained decoding's view of the vocabulary (each token's bytes), built once.
  app.grammars = std::make_unique<GrammarCompiler>(*app.tok, impl.end_ids, impl.model->config().n_vocab);
  for (int32_t id = 0; id < app.tok->n_vocab(); ++id)
    app.max_token_bytes = std::max(app.max_token_bytes, app.tok->token_text(id).size());
  app.trust_request_template = opts.trust_request_chat_template;
  app.model_id = opts.model_alias;
  if (app.model_id.empty()) {
    std::string base = opts.model_path.substr(opts.model_path.find_last_of('/') + 1);
    if (base.size() > 5 && base.substr(base.size() - 5) == ".gguf") base.resize(base.size() - 5);
    app.model_id = base;
  }
  app.n_ctx = static_cast<int>(std::min<int64_t>(opts.ctx, impl.model->config().n_ctx_train));
  app.state = State::kReady;
  const ServiceSnapshot s = app.service->snapshot();
  const Result<EngineConfig> ec = engine_config(opts.llm, *impl.model);
  std::fprintf(stderr, "cachet serve: ready, model '%s', context %d, %d KV blocks of %d tokens, steps of up to %d tokens\n",
               app.model_id.c_str(), app.n_ctx, s.counters.blocks_total, opts.llm.block_size,
               ec.is_ok() ? ec->max_batch_tokens : 0);

  // While waiting for a signal, every 10 s: hand memory freed since back to the system. glibc keeps what a
  // request's thread freed in that thread's arena (one per HTTP thread, up to 8 per core), so a burst of large,
  // short-lived allocations (a long prompt's buffers, a template at its limits) raises the resident size for
  // good, arena by arena, without a leak; malloc_trim releases the free pages of every arena (a few ms).
  int sig = -1;
  const timespec every{10, 0};
  while (sig < 0) {
    sig = sigtimedwait(&sigs, nullptr, &every);
    if (sig < 0) malloc_trim(0);
  }
  std::fprintf(stderr, "cachet serve: %s, draining %d request(s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
               app.in_flight.load());
  app.state = State::kDraining;
  int64_t last_steps = app.service->snapshot().steps;
  auto last_progress = std::chrono::steady_clock::now();
  while (app.in_flight.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (opts.drain_stall_ms <= 0) continue;
    const int64_t steps = app.service->snapshot().steps;
    const auto now = std::chrono::steady_clock::now();
    if (steps != last_steps) {
      last_steps = steps;
      last_progress = now;
    } else if (now - last_progress > std::chrono::milliseconds(opts.drain_stall_ms)) {
      app.broken_message = "the engine stopped: no step finished for " + std::to_string(opts.drain_stall_ms) +
                           " ms while draining (a tensor-parallel rank has died); retry on another replica";
      app.broken = true;
      std::fprintf(stderr, "error: cachet serve: %s; failing %d in-flight request(s), exiting with 3\n",
                   app.broken_message.c_str(), app.in_flight.load());
      std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the handlers write their errors
      std::fflush(stderr);
      // The engine thread is stuck inside a collective: it can never be joined, so the LLM is left to the
      // caller's process exit. The handlers have seen `broken` and end.
      svr.stop();
      http.join();
      (void)app.llm.release();
      return kExitEngineStuck;
    }
  }
  svr.stop();
  http.join();
  app.service = nullptr;
  app.llm.reset();
  std::fprintf(stderr, "cachet serve: drained, exiting\n");
  return 0;
}

}  // namespace cachet::server
