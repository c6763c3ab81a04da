// cachet tokenize / detokenize: the tokenizer of any GGUF file with one (vocab-only files too).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

Result<std::unique_ptr<Tokenizer>> open_tokenizer(const std::string& model_flag) {
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(resolve_model_path(model_flag)));
  return Tokenizer::from_gguf(*f);
}

}  // namespace

void add_tokenize_commands(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, text, file, ids, lines_json;
    bool no_add_special = false, parse_special = false, json = false, special = false, time = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* t = app.add_subcommand("tokenize", "print the token ids of a text");
  t->add_option("-m,--model", a->model, "GGUF file with a tokenizer (default: SmolLM2-135M-Instruct)");
  auto* text_opt = t->add_option("--text", a->text, "text to tokenize");
  auto* file_opt = t->add_option("-f,--file", a->file, "file whose bytes to tokenize, exactly (nothing stripped)");
  text_opt->excludes(file_opt);
  t->add_option("--lines-json", a->lines_json,
                "batch mode: each line of this file is a JSON string; prints one JSON array of ids per line");
  t->add_flag("--no-add-special", a->no_add_special, "do not add BOS/EOS");
  t->add_flag("--parse-special", a->parse_special, "text spelling a control token becomes that token");
  t->add_flag("--json", a->json, "print ids and pieces as JSON");
  t->add_flag("--time", a->time, "report the encoding time (encode only) on stderr");
  t->callback([a, exit_code] {
    auto tok = open_tokenizer(a->model);
    if (!tok.is_ok()) {
      *exit_code = fail(tok.status());
      return;
    }
    if (!a->lines_json.empty()) {
      auto lines = read_lines_json(a->lines_json);
      if (!lines.is_ok()) {
        *exit_code = fail(lines.status());
        return;
      }
      for (const std::string& line : *lines)
        std::printf("%s\n", nlohmann::json((*tok)->encode(line, !a->no_add_special, a->parse_special)).dump().c_str());
      *exit_code = 0;
      return;
    }
    std::string text = a->text;
    if (!a->file.empty()) {
      std::ifstream in(a->file, std::ios::binary);
      if (!in) {
        *exit_code = fail(io_error("cannot read " + a->file));
        return;
      }
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = (*tok)->encode(text, !a->no_add_special, a->parse_special);
    if (a->time)
      std::fprintf(stderr, "encode_seconds=%.6f\n",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (a->json) {
      nlohmann::json j = nlohmann::json::array();
      for (int32_t id : ids) {
        std::string piece = sanitize_utf8((*tok)->token_to_piece(id, true));
        j.push_back({{"id", id}, {"piece", piece}});
      }
      std::printf("%s\n", j.dump().c_str());
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
      std::printf("\n");
    }
    *exit_code = 0;
  });

  CLI::App* d = app.add_subcommand("detokenize", "print the text of token ids");
  d->add_option("-m,--model", a->model, "GGUF file with a tokenizer (default: SmolLM2-135M-Instruct)");
  d->add_option("--ids", a->ids, "token ids, e.g. \"1 2 3\"")->required();
  d->add_flag("--special", a->special, "render control tokens as their text");
  d->callback([a, exit_code] {
    auto tok = open_tokenizer(a->model);
    if (!tok.is_ok()) {
      *exit_code = fail(tok.status());
      return;
    }
    auto ids = parse_ids(a->ids);
    if (!ids.is_ok()) {
      *exit_code = fail(ids.status());
      return;
    }
    for (int32_t id : *ids)
      if (id >= (*tok)->n_vocab()) {
        *exit_code = fail(invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary"));
        return;
      }
    std::string s = (*tok)->decode(*ids, a->special);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::printf("\n");
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
