// cachet passkey: the standard long-context retrieval test. A five-digit number is hidden at a chosen depth in
// filler text of a chosen length and asked back at the end; greedy decoding must repeat it. Contexts past the
// model's trained length need RoPE scaling (the same flags as run), so this is where context extension shows.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct PasskeyArgs {
  std::string model;
  std::vector<int> contexts = {1024, 2048, 4096};
  std::vector<double> depths = {0.1, 0.5, 0.9};
  int trials = 1, threads = 0;
  uint32_t seed = 1;
  bool json = false;
  KvFlags kv;
  RopeOverrides rope;
};

// The prompt's tokens: filler sentences up to about n_ctx tokens with the key's sentence at `depth` of them.
std::vector<int32_t> passkey_prompt(const Tokenizer& tok, int n_ctx, double depth, int key) {
  const std::string filler = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
  const std::string needle = " The pass key is " + std::to_string(key) + ". Remember it. " + std::to_string(key) +
                             " is the pass key.";
  const std::string head = "There is important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                           "I will quiz you about the important information there.";
  const std::string tail = " What is the pass key? The pass key is";
  const int per_filler = static_cast<int>(tok.encode(filler, false, false).size());
  const int fixed = static_cast<int>(tok.encode(head + needle + tail, true, false).size());
  const int n_fill = std::max(0, (n_ctx - fixed - 16) / std::max(1, per_filler));
  const int before = static_cast<int>(n_fill * depth);
  std::string text = head;
  for (int i = 0; i < before; ++i) text += filler;
  text += needle;
  for (int i = before; i < n_fill; ++i) text += filler;
  text += tail;
  return tok.encode(text, true, false);
}

int passkey(const PasskeyArgs& a) {
  auto lm = load_with_tokenizer(a.model, a.threads, false, a.rope);
  if (!lm.is_ok()) return fail(lm.status());
  if (!lm->tokenizer) return fail(invalid_argument("passkey needs a model file with a tokenizer"));
  Model& model = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  if (Status s = kv_types_fit(model.config(), a.kv.types()); !s.is_ok()) return fail(s);
  std::mt19937 rng(a.seed);
  nlohmann::json rows = nlohmann::json::array();
  for (int n_ctx : a.contexts) {
    for (double depth : a.depths) {
      int found = 0;
      int64_t prompt_len = 0;
      for (int t = 0; t < a.trials; ++t) {
        const int key = 10000 + static_cast<int>(rng() % 90000);
        const std::vector<int32_t> prompt = passkey_prompt(tok, n_ctx, depth, key);
        prompt_len = static_cast<int64_t>(prompt.size());
        GenerateOptions o;
        o.sampling.max_tokens = 8;
        o.kv_type = a.kv.types();
        auto r = generate(model, prompt, o);
        if (!r.is_ok()) return fail(r.status());
        const std::string answer = tok.decode(r->token_ids, false);
        found += answer.find(std::to_string(key)) != std::string::npos;
      }
      rows.push_back({{"context", n_ctx}, {"prompt_tokens", prompt_len}, {"depth", depth}, {"trials", a.trials},
                      {"found", found}, {"accuracy", static_cast<double>(found) / a.trials}});
      if (!a.json)
        std::printf("context %6d (%6lld tokens)  depth %.2f  found %d/%d\n", n_ctx, static_cast<long long>(prompt_len),
                    depth, found, a.trials);
    }
  }
  if (a.json) {
    const ModelConfig& c = model.config();
    nlohmann::json j = {{"rope_scaling", c.rope_scaling}, {"rope_freq_scale", c.rope_freq_scale},
                        {"rope_theta", c.rope_theta}, {"n_ctx_train", c.n_ctx_train},
                        {"kv_type_k", kv_type_name(a.kv.types().k)}, {"kv_type_v", kv_type_name(a.kv.types().v)},
                        {"results", rows}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

void add_passkey_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<PasskeyArgs>();
  CLI::App* c = app.add_subcommand("passkey", "long-context retrieval: a number hidden in filler text, asked back");
  c->add_option("-m,--model", a->model, "model file");
  c->add_option("-c,--ctx", a->contexts, "prompt lengths in tokens (several allowed)");
  c->add_option("--depth", a->depths, "where the key sits, 0 (start) .. 1 (end) (several allowed)");
  c->add_option("--trials", a->trials, "keys per (context, depth)")->check(CLI::PositiveNumber);
  c->add_option("--seed", a->seed, "seed of the keys");
  c->add_option("-t,--threads", a->threads);
  add_kv_flags(c, &a->kv);
  add_rope_flags(c, &a->rope);
  c->add_flag("--json", a->json, "print JSON");
  c->callback([a, exit_code] { *exit_code = passkey(*a); });
}

}  // namespace cachet::cli
