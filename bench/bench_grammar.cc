// Constrained decoding's costs on a real vocabulary (default: llama.cpp's Qwen2 vocab file, 151,643 tokens):
// compile time per schema / tool set (median, p99) and mask time per token (median, p99), walking each grammar
// token by token to its end with a seeded choice among the allowed tokens (the walk a model's sampling makes),
// plus the time to apply a mask to a logits row. One thread, as the engine's mask thread runs.
//
//   bench_grammar --vocab ~/.cache/cachet/llama.cpp/src-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf \
//                 --schemas tests/data/schemas/tools.json
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "chat/tool_format.h"
#include "grammar/grammar.h"
#include "grammar/schema_check.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace cachet;
using Clock = std::chrono::steady_clock;

namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"constrained decoding: compile and mask times"};
  std::string vocab_path, schemas_path;
  int walks = 3, max_steps = 200;
  app.add_option("--vocab", vocab_path, "a GGUF with a vocabulary")->required();
  app.add_option("--schemas", schemas_path, "tools.json (OpenAI tools: their parameter schemas)")->required();
  app.add_option("--walks", walks, "seeded walks per grammar");
  app.add_option("--max-steps", max_steps, "tokens per walk at most");
  CLI11_PARSE(app, argc, argv);

  auto f = GgufFile::open(vocab_path);
  if (!f.is_ok()) return std::fprintf(stderr, "%s\n", f.status().message().c_str()), 1;
  auto tok = Tokenizer::from_gguf(**f);
  if (!tok.is_ok()) return std::fprintf(stderr, "%s\n", tok.status().message().c_str()), 1;
  const Tokenizer& t = **tok;
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < t.n_vocab(); ++id)
    if (t.is_end_of_generation(id)) stops.push_back(id);
  auto t0 = Clock::now();
  GrammarCompiler gc(t, stops, t.n_vocab());
  std::printf("vocabulary: %d tokens; compiler built in %.1f ms\n", t.n_vocab(), since(t0) * 1e3);

  const auto tools = nlohmann::ordered_json::parse(std::ifstream(schemas_path));
  // Grammars: each function's parameters as a response_format, and tool sets of 1-4 functions as required calls.
  std::vector<std::pair<std::string, std::shared_ptr<const Grammar>>> grammars;
  std::vector<double> compile_schema, compile_tools;
  for (const auto& tool : tools) {
    const auto checked = check_json_schema(tool["function"]["parameters"]);
    if (!checked.is_ok()) continue;
    t0 = Clock::now();
    auto g = gc.json_schema(checked->dump());
    compile_schema.push_back(since(t0));
    if (g.is_ok()) grammars.emplace_back("schema", *g);
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 40; ++k) {
    OutputShape s;
    s.format.tools = ToolSyntax::kHermes;
    s.choice = ToolChoice::kRequired;
    for (int j = 0; j < 1 + k % 4; ++j) {
      const auto& fn = tools[rng() % tools.size()]["function"];
      if (auto c = check_json_schema(fn["parameters"]); c.is_ok()) s.tools.push_back({fn["name"], *c});
    }
    t0 = Clock::now();
    auto g = gc.structural_tag(*structural_tag_for(s));
    compile_tools.push_back(since(t0));
    if (g.is_ok()) grammars.emplace_back("tools", *g);
  }
  std::printf("compile, schema:   median %.2f ms, p99 %.2f ms (%zu schemas)\n", pct(compile_schema, 0.5) * 1e3,
              pct(compile_schema, 0.99) * 1e3, compile_schema.size());
  std::printf("compile, tool set: median %.2f ms, p99 %.2f ms (%zu sets of 1-4 functions)\n",
              pct(compile_tools, 0.5) * 1e3, pct(compile_tools, 0.99) * 1e3, compile_tools.size());

  // Walks: at each step the mask, then a seeded pick among the allowed tokens (a closing token more likely as the
  // walk grows, so walks end).
  std::vector<uint32_t> mask(static_cast<size_t>(GrammarMatcher::mask_words(gc.vocab_size())));
  std::vector<float> logits(static_cast<size_t>(gc.vocab_size()), 0.5f);
  std::vector<double> mask_times, apply_times;
  int64_t tokens = 0, ended = 0;
  for (const auto& [kind, g] : grammars)
    for (int w = 0; w < walks; ++w) {
      auto m = g->matcher();
      for (int step = 0; step < max_steps; ++step) {
        t0 = Clock::now();
        const int64_t n = m->fill_mask(mask);
        mask_times.push_back(since(t0));
        t0 = Clock::now();
        apply_token_mask(mask, logits.data(), gc.vocab_size());
        apply_times.push_back(since(t0));
        if (n == 0) break;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < gc.vocab_size(); ++id)
          if ((mask[id / 32] >> (id % 32)) & 1u) allowed.push_back(id);
        int32_t pick = allowed[rng() % allowed.size()];
        for (int32_t s : stops)
          if (std::find(allowed.begin(), allowed.end(), s) != allowed.end() && rng() % 4 == 0) pick = s;
        // Short tokens keep strings short: prefer a 1-byte token half the time.
        if (rng() % 2)
          for (int tries = 0; tries < 8; ++tries) {
            const int32_t c = allowed[rng() % allowed.size()];
            if (t.token_to_piece(c, false).size() == 1) { pick = c; break; }
          }
        if (!m->accept(pick)) break;
        ++tokens;
        if (m->terminated()) { ++ended; break; }
      }
      std::fill(logits.begin(), logits.end(), 0.5f);
    }
  std::printf("mask per token:    median %.1f us, p99 %.1f us (%lld tokens, %lld of %zu walks ended)\n",
              pct(mask_times, 0.5) * 1e6, pct(mask_times, 0.99) * 1e6, static_cast<long long>(tokens),
              static_cast<long long>(ended), grammars.size() * static_cast<size_t>(walks));
  std::printf("apply to a row:    median %.1f us, p99 %.1f us\n", pct(apply_times, 0.5) * 1e6,
              pct(apply_times, 0.99) * 1e6);
  return 0;
}
