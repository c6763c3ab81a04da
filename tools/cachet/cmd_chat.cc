// cachet chat: an interactive chat with the model's template, streaming replies; multi-turn history reuses
// the KV cache of earlier turns, so each turn prefills only its new tokens. /image FILE (with --mmproj) adds a
// picture to the next message. /reset, /exit, Ctrl-D.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "api/llm_impl.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct ChatArgs {
  std::string model, system, mmproj;
  SamplingParams sampling;
  int threads = 0;
  int ctx_size = 4096;
  KvFlags kv;
  bool precise = false;
  SpecOptions spec;
  RopeOverrides rope;
};

int chat(ChatArgs a) {
  LLMConfig cfg;
  cfg.threads = a.threads;
  cfg.precise = a.precise;
  cfg.rope = a.rope;
  a.kv.apply(&cfg);
  cfg.speculation = a.spec;
  cfg.mmproj = a.mmproj;
  auto model = load(a.model, cfg.threads, cfg.precise, cfg.rope);
  if (!model.is_ok()) return fail(model.status());
  const int ctx = static_cast<int>(std::min<int64_t>(a.ctx_size, (*model)->config().n_ctx_train));
  // This conversation and the cached last turn: the prefix cache keeps the earlier turns' blocks, so each turn
  // prefills only its new tokens.
  cfg.kv_tokens = 2 * static_cast<int64_t>(ctx) + 2 * cfg.block_size;
  auto llm_r = make_llm(std::move(*model), cfg);
  if (!llm_r.is_ok()) return fail(llm_r.status());
  LLM& llm = **llm_r;
  if (!llm.info().has_tokenizer) return fail(invalid_argument("chat needs a model file with a tokenizer"));
  if (!llm.info().has_chat_template)
    return fail(invalid_argument("the model file has no chat template (tokenizer.chat_template)"));

  std::vector<ChatMessage> messages;
  auto reset = [&] {
    messages.clear();
    if (!a.system.empty()) messages.push_back({"system", a.system});
  };
  reset();
  const bool interactive = isatty(STDIN_FILENO);
  int turn = 0;
  std::vector<std::string> images;  // for the next message
  int image_rows = 0;               // positions the conversation's pictures take
  int pending_rows = 0;             // and those of the pictures going with the next message
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
      images.clear();
      image_rows = pending_rows = 0;
      std::fprintf(stderr, "[history cleared]\n");
      continue;
    }
    if (line.rfind("/image ", 0) == 0) {
      if (!llm.impl().vision) {
        std::fprintf(stderr, "[no projector: start with --mmproj FILE to send images]\n");
        continue;
      }
      auto bytes = read_file(line.substr(7));
      if (!bytes.is_ok()) {
        std::fprintf(stderr, "[%s]\n", bytes.status().message().c_str());
        continue;
      }
      const VisionEncoder& enc = *llm.impl().vision;
      auto img = decode_image(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
      auto size = img.is_ok() ? enc.input_size(img->width, img->height) : Result<ImageGrid>(img.status());
      if (!size.is_ok()) {
        std::fprintf(stderr, "[%s]\n", size.status().message().c_str());
        continue;
      }
      pending_rows += enc.output_grid(size->x, size->y).rows();
      images.push_back(std::move(*bytes));
      std::fprintf(stderr, "[image %zu goes with the next message]\n", images.size());
      continue;
    }
    if (line.empty()) continue;
    const int new_rows = pending_rows;
    pending_rows = 0;
    messages.push_back({"user", line, std::move(images)});
    images.clear();
    auto text = llm.apply_chat_template(messages);
    if (!text.is_ok()) return fail(text.status());
    SamplingParams params = a.sampling;
    auto prompt = llm.tokenize(*text, /*add_special=*/false, /*parse_special=*/true);
    if (!prompt.is_ok()) return fail(prompt.status());
    params.max_tokens =
        std::min(a.sampling.max_tokens, ctx - static_cast<int>(prompt->size()) - image_rows - new_rows);
    if (params.max_tokens <= 0) {
      std::fprintf(stderr, "[the conversation no longer fits the %d-token context: /reset]\n", ctx);
      messages.pop_back();
      continue;
    }
    image_rows += new_rows;
    auto on_event = [&](const OutputEvent& ev) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    auto res = llm.chat(messages, params, on_event);
    if (!res.is_ok()) return fail(res.status());
    std::printf("\n");
    std::fflush(stdout);
    ++turn;
    std::fprintf(stderr,
                 "[turn %d: prompt %d tokens, reused %d, prefilled %d | generated %zu | TTFT %.1f ms | %.1f tok/s]\n",
                 turn, res->prompt_tokens, res->cached_tokens, res->prompt_tokens - res->cached_tokens,
                 res->token_ids.size(), res->ttft_ms, decode_tok_per_s(*res));
    if (a.spec.any())
      std::fprintf(stderr, "[speculative: %lld of %lld draft tokens accepted]\n",
                   static_cast<long long>(res->spec_accepted_tokens), static_cast<long long>(res->spec_draft_tokens));
    messages.push_back({"assistant", res->text});
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ChatArgs>();
  a->sampling.max_tokens = 512;
  CLI::App* c = app.add_subcommand("chat", "chat with the model in its chat template (/image FILE, /reset, /exit, Ctrl-D)");
  c->add_option("-m,--model", a->model, "GGUF file (default: SmolLM2-135M-Instruct)");
  c->add_option("--system", a->system, "system message");
  c->add_option("--mmproj", a->mmproj, "the model's projector file (mmproj-*.gguf): /image FILE sends a picture");
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
