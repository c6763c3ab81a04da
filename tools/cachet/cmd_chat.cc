// cachet chat: an interactive chat with the model's template, streaming replies; multi-turn history reuses
// the KV cache of earlier turns, so each turn prefills only its new tokens. /reset, /exit, Ctrl-D.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct ChatArgs {
  std::string model, system;
  SamplingParams sampling;
  int threads = 0;
  int ctx_size = 4096;
  KvFlags kv;
  bool precise = false;
  SpecOptions spec;
  RopeOverrides rope;
};

int chat(ChatArgs a) {
  auto model = load(a.model, a.threads, a.precise, a.rope);
  if (!model.is_ok()) return fail(model.status());
  const GgufFile* g = (*model)->gguf();
  if (!g || !g->find("tokenizer.ggml.model")) return fail(invalid_argument("chat needs a model file with a tokenizer"));
  auto tok_r = Tokenizer::from_gguf(*g);
  if (!tok_r.is_ok()) return fail(tok_r.status());
  const Tokenizer& tok = **tok_r;
  auto tmpl = g->get_string("tokenizer.chat_template");
  if (!tmpl.is_ok()) return fail(invalid_argument("the model file has no chat template (tokenizer.chat_template)"));
  const int ctx = static_cast<int>(std::min<int64_t>(a.ctx_size, (*model)->config().n_ctx_train));
  if (Status s = kv_types_fit((*model)->config(), a.kv.types()); !s.is_ok()) return fail(s);
  Session session(**model, ctx, a.kv.types());
  // Speculative decoding runs in the batching engine, whose prefix cache keeps the earlier turns' blocks.
  std::unique_ptr<Model> draft;
  std::unique_ptr<Engine> engine;
  if (a.spec.any()) {
    EngineConfig cfg;
    cfg.kv_type = a.kv.types();
    cfg.n_blocks = (ctx + cfg.block_size - 1) / cfg.block_size * 2;  // this conversation and the cached last turn
    if (Status s = load_speculation(a.spec, a.rope, **model, &cfg, &draft); !s.is_ok()) return fail(s);
    auto e = Engine::create(**model, cfg);
    if (!e.is_ok()) return fail(e.status());
    engine = std::move(*e);
  }

  GenerateOptions o;
  o.sampling = a.sampling;
  o.token_text = [&](int32_t id) { return tok.token_to_piece(id, false); };
  for (int32_t id = 0; id < tok.n_vocab(); ++id)
    if (tok.is_end_of_generation(id)) o.stop_ids.push_back(id);

  ChatTemplateInputs in;
  if (tok.bos()) in.bos_token = tok.token_text(*tok.bos());
  if (tok.eos()) in.eos_token = tok.token_text(*tok.eos());
  auto reset = [&] {
    in.messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) in.messages.push_back({{"role", "system"}, {"content", a.system}});
    session.reset();
  };
  reset();
  const bool interactive = isatty(STDIN_FILENO);
  int turn = 0;
  for (;;) {
    if (interactive) {
      std::printf("> ");
      std::fflush(stdout);
    }
    std::string line;
    if (!std::getline(std::cin, line)) break;  // Ctrl-D
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      std::fprintf(stderr, "[history cleared]\n");
      continue;
    }
    if (line.empty()) continue;
    in.messages.push_back({{"role", "user"}, {"content", line}});
    auto text = render_chat_template(*tmpl, in);
    if (!text.is_ok()) return fail(text.status());
    // The template writes BOS and the role markers itself, so nothing is added and special tokens are parsed.
    std::vector<int32_t> prompt = tok.encode(*text, /*add_special=*/false, /*parse_special=*/true);
    o.sampling.max_tokens = std::min(a.sampling.max_tokens, session.capacity() - static_cast<int>(prompt.size()));
    if (o.sampling.max_tokens <= 0) {
      std::fprintf(stderr, "[the conversation no longer fits the %d-token context: /reset]\n", session.capacity());
      in.messages.erase(in.messages.end() - 1);
      continue;
    }
    auto on_token = [&](const TokenEvent& ev) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    auto res = engine ? generate(*engine, prompt, o, on_token) : session.generate(prompt, o, on_token);
    if (!res.is_ok()) return fail(res.status());
    std::printf("\n");
    std::fflush(stdout);
    ++turn;
    std::fprintf(stderr,
                 "[turn %d: prompt %d tokens, reused %d, prefilled %d | generated %zu | TTFT %.1f ms | %.1f tok/s]\n",
                 turn, res->n_prompt, res->n_reused, res->n_prefilled, res->token_ids.size(), res->ttft_ms,
                 res->decode_tok_per_s());
    if (engine)
      std::fprintf(stderr, "[speculative: %lld of %lld draft tokens accepted]\n",
                   static_cast<long long>(res->spec_accepted_tokens), static_cast<long long>(res->spec_draft_tokens));
    in.messages.push_back({{"role", "assistant"}, {"content", res->text}});
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ChatArgs>();
  a->sampling.max_tokens = 512;
  CLI::App* c = app.add_subcommand("chat", "chat with the model in its chat template (/reset, /exit, Ctrl-D)");
  c->add_option("-m,--model", a->model, "GGUF file (default: SmolLM2-135M-Instruct)");
  c->add_option("--system", a->system, "system message");
  c->add_option("-n,--n-predict", a->sampling.max_tokens, "most tokens per reply");
  c->add_option("-c,--ctx-size", a->ctx_size, "context size in tokens (KV cache capacity)");
  c->add_option("-t,--threads", a->threads, "threads (0 = all cores)");
  c->add_option("--temp", a->sampling.temperature, "temperature (0 = greedy)");
  c->add_option("--top-k", a->sampling.top_k, "top-k (0 = off)");
  c->add_option("--top-p", a->sampling.top_p, "top-p (1 = off)");
  c->add_option("--min-p", a->sampling.min_p, "min-p (0 = off)");
  c->add_option("--repeat-penalty", a->sampling.repetition_penalty, "repetition penalty (1 = off)");
  c->add_option("--seed", a->sampling.seed, "sampling seed");
  add_kv_flags(c, &a->kv);
  c->add_flag("--precise", a->precise, "f32 activations in every matmul");
  add_spec_flags(c, &a->spec);
  add_rope_flags(c, &a->rope);
  c->callback([a, exit_code] { *exit_code = chat(*a); });
}

}  // namespace cachet::cli
