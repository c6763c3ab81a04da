// cachet: run, serve and inspect LLMs on the CPU.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "api/llm_impl.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

std::string default_model_path() {
  const char* cache = std::getenv("CACHET_CACHE_DIR");
  std::string dir;
  if (cache && *cache) {
    dir = cache;
  } else {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    dir = (xdg && *xdg) ? std::string(xdg) + "/cachet" : std::string(home ? home : ".") + "/.cache/cachet";
  }
  return dir + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string resolve_model_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("CACHET_MODEL");
  if (env && *env) return env;
  return default_model_path();
}

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream is(text);
  std::string tok;
  while (is >> tok) {
    for (char& c : tok)
      if (c == ',') c = ' ';
    std::istringstream inner(tok);
    std::string part;
    while (inner >> part) {
      char* end = nullptr;
      long long v = std::strtoll(part.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v > INT32_MAX) return invalid_argument("'" + part + "' is not a token id");
      ids.push_back(static_cast<int32_t>(v));
    }
  }
  return ids;
}

Result<std::unique_ptr<Model>> load(const std::string& model_flag, int n_threads, bool precise,
                                    const RopeOverrides& rope) {
  std::string path = resolve_model_path(model_flag);
  if (model_flag.empty() && !std::filesystem::exists(path))
    return not_found("no model given and the default model is not at " + path +
                     " (run scripts/setup.sh, or pass -m MODEL)");
  LoadOptions o;
  o.n_threads = n_threads;
  o.precise = precise;
  o.rope = rope;
  return load_tp(path, o);
}

LoadedModel::LoadedModel() = default;
LoadedModel::~LoadedModel() = default;
LoadedModel::LoadedModel(LoadedModel&&) noexcept = default;

Result<LoadedModel> load_with_tokenizer(const std::string& model_flag, int n_threads, bool precise,
                                        const RopeOverrides& rope) {
  LoadedModel lm;
  CACHET_ASSIGN_OR_RETURN(lm.model, load(model_flag, n_threads, precise, rope));
  const GgufFile* g = lm.model->gguf();
  if (g && g->find("tokenizer.ggml.model")) {
    CACHET_ASSIGN_OR_RETURN(lm.tokenizer, Tokenizer::from_gguf(*g));
  }
  return lm;
}

Result<std::vector<int32_t>> prompt_tokens(const Tokenizer* tok, const std::string& text, const std::string& ids,
                                           const std::string& fallback_ids) {
  if (!text.empty()) {
    if (!tok) return invalid_argument("this model file has no tokenizer: give the prompt as --prompt-ids");
    return tok->encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  return parse_ids(ids.empty() ? fallback_ids : ids);
}

Result<LoadedModel> load_with_prompt(const std::string& model_flag, int n_threads, const std::string& text,
                                     const std::string& ids, const std::string& fallback_ids) {
  CACHET_ASSIGN_OR_RETURN(LoadedModel lm, load_with_tokenizer(model_flag, n_threads));
  CACHET_ASSIGN_OR_RETURN(lm.prompt, prompt_tokens(lm.tokenizer.get(), text, ids, fallback_ids));
  return lm;
}

Result<std::unique_ptr<LLM>> load_llm(const std::string& model_flag, const LLMConfig& config) {
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load(model_flag, config.threads, config.precise, config.rope));
  return make_llm(std::move(model), config);
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Result<std::vector<std::string>> read_lines_json(const std::string& path) {
  CACHET_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_string())
      return invalid_argument(path + ": line " + std::to_string(out.size() + 1) + " is not a JSON string");
    out.push_back(j.get<std::string>());
  }
  return out;
}

double prefill_tok_per_s(const Completion& c) { return c.ttft_ms > 0 ? c.prompt_tokens * 1000.0 / c.ttft_ms : 0.0; }

double decode_tok_per_s(const Completion& c) {
  const double ms = std::accumulate(c.tbt_ms.begin(), c.tbt_ms.end(), 0.0);
  return ms > 0 ? c.tbt_ms.size() * 1000.0 / ms : 0.0;
}

double tbt_mean_ms(const Completion& c) {
  return c.tbt_ms.empty() ? 0.0 : std::accumulate(c.tbt_ms.begin(), c.tbt_ms.end(), 0.0) / c.tbt_ms.size();
}

double tbt_percentile_ms(const Completion& c, double p) {
  if (c.tbt_ms.empty()) return 0.0;
  std::vector<double> v = c.tbt_ms;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::clamp(p / 100.0, 0.0, 1.0) * (v.size() - 1) + 0.5)];
}

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

}  // namespace cachet::cli

int main(int argc, char** argv) {
  CLI::App app{"cachet: an LLM inference engine for CPUs"};
  app.require_subcommand(1);
  int exit_code = 0;
  cachet::cli::add_tp_flag(app);  // first: the subcommands inherit its fall-through
  cachet::cli::add_run_command(app, &exit_code);
  cachet::cli::add_info_command(app, &exit_code);
  cachet::cli::add_synth_command(app, &exit_code);
  cachet::cli::add_logits_command(app, &exit_code);
  cachet::cli::add_tokenize_commands(app, &exit_code);
  cachet::cli::add_embed_command(app, &exit_code);
  cachet::cli::add_encode_image_command(app, &exit_code);
  cachet::cli::add_template_command(app, &exit_code);
  cachet::cli::add_chat_command(app, &exit_code);
  cachet::cli::add_kv_math_command(app, &exit_code);
  cachet::cli::add_trace_command(app, &exit_code);
  cachet::cli::add_break_command(app, &exit_code);
  cachet::cli::add_batch_command(app, &exit_code);
  cachet::cli::add_serve_command(app, &exit_code);
  cachet::cli::add_quantize_commands(app, &exit_code);
  cachet::cli::add_perplexity_command(app, &exit_code);
  cachet::cli::add_passkey_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    cachet::cli::tp_shutdown();
    return app.exit(e);
  }
  cachet::cli::tp_shutdown();
  return exit_code;
}
