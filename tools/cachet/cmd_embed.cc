// cachet embed: one embedding per input (the model's pooling, or --pooling), printed as JSON, one array a line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/cachet/common.h"

namespace cachet::cli {

void add_embed_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, lines_json, pooling;
    std::vector<std::string> texts;
    int threads = 0, dimensions = 0;
    bool no_normalize = false, truncate = false, precise = false;
    KvFlags kv;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("embed", "print the embedding of each input (one JSON array a line)");
  c->add_option("-m,--model", a->model, "GGUF file (default: SmolLM2-135M-Instruct)");
  auto* text = c->add_option("--text", a->texts, "an input (repeatable)");
  auto* lines = c->add_option("--lines-json", a->lines_json, "a file whose every line is a JSON string input");
  text->excludes(lines);
  c->add_option("--pooling", a->pooling,
                "mean, cls, last, rank (a reranker's scores) or none (every token's vector; default: the model's "
                "pooling_type)")
      ->check(CLI::IsMember({"mean", "cls", "last", "rank", "none"}));
  c->add_option("--dimensions", a->dimensions, "keep the first N values (Matryoshka), renormalized");
  c->add_flag("--no-normalize", a->no_normalize, "leave the vectors as pooled (default: unit length)");
  c->add_flag("--truncate", a->truncate, "cut inputs longer than the model's context instead of refusing them");
  c->add_flag("--precise", a->precise, "f32 activations (no int8 quantization of activations)");
  c->add_option("-t,--threads", a->threads, "threads (default: the physical cores)");
  add_kv_flags(c, &a->kv);
  c->callback([a, exit_code] {
    std::vector<std::string> inputs = a->texts;
    if (!a->lines_json.empty()) {
      auto lines = read_lines_json(a->lines_json);
      if (!lines.is_ok()) {
        *exit_code = fail(lines.status());
        return;
      }
      inputs.insert(inputs.end(), lines->begin(), lines->end());
    }
    if (inputs.empty()) {
      *exit_code = fail(invalid_argument("nothing to embed: give --text or --lines-json"));
      return;
    }
    LLMConfig cfg;
    cfg.threads = a->threads;
    cfg.precise = a->precise;
    a->kv.apply(&cfg);
    auto llm = load_llm(a->model, cfg);
    if (!llm.is_ok()) {
      *exit_code = fail(llm.status());
      return;
    }
    EmbedParams p;
    if (!a->pooling.empty()) p.pooling = pooling_from_name(a->pooling);
    p.normalize = !a->no_normalize;
    p.dimensions = a->dimensions;
    p.truncate = a->truncate;
    auto out = (*llm)->embed(inputs, p);
    if (!out.is_ok()) {
      *exit_code = fail(out.status());
      return;
    }
    const std::optional<Pooling> used = p.pooling ? p.pooling : (*llm)->info().pooling;
    const size_t d = static_cast<size_t>((*llm)->info().n_embd);
    for (const auto& v : *out) {
      if (used == Pooling::kNone) {  // one array per token
        nlohmann::json rows = nlohmann::json::array();
        for (size_t at = 0; at < v.size(); at += d) rows.push_back(std::vector<float>(v.begin() + at, v.begin() + at + d));
        std::printf("%s\n", rows.dump().c_str());
      } else {
        std::printf("%s\n", nlohmann::json(v).dump().c_str());
      }
    }
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
