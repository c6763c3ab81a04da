// cachet run: prefill a prompt, then stream generated tokens; one summary line at the end.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  int n_predict = 128;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int threads = 0;
  bool no_kv_cache = false;
  std::string kv_type = "f16";
  std::string format = "text";
  bool ignore_eos = false;
  bool precise = false;
};

int run(const RunArgs& a) {
  if (a.prompt.empty() == a.prompt_ids.empty()) return fail(invalid_argument("give exactly one of -p or --prompt-ids"));
  if (!a.prompt.empty())
    return fail(unimplemented("text prompts need the tokenizer, which is not built yet; use --prompt-ids"));
  auto ids = parse_ids(a.prompt_ids);
  if (!ids.is_ok()) return fail(ids.status());
  auto model = load(a.model, a.threads, a.precise);
  if (!model.is_ok()) return fail(model.status());

  GenerateOptions o;
  o.max_tokens = a.n_predict;
  o.use_kv_cache = !a.no_kv_cache;
  o.kv_type = a.kv_type == "f32" ? DType::kF32 : DType::kF16;
  o.stop_at_eos = !a.ignore_eos;
  o.sampling.temperature = a.temperature;
  o.sampling.seed = a.seed;
  const bool text = a.format == "text";
  bool first = true;
  auto res = generate(**model, *ids, o, [&](int32_t id) {
    if (text) {
      std::printf(first ? "%d" : " %d", id);
      std::fflush(stdout);
      first = false;
    }
    return true;
  });
  if (!res.is_ok()) return fail(res.status());
  const GenerateResult& r = *res;
  if (text) {
    std::printf("\n");
    std::fprintf(stderr,
                 "prompt tokens: %d | generated: %zu | TTFT: %.2f ms | prefill: %.1f tok/s | decode: %.1f tok/s | "
                 "TBT mean %.2f p50 %.2f p99 %.2f ms\n",
                 r.n_prompt, r.token_ids.size(), r.ttft_ms, r.prefill_tok_per_s(), r.decode_tok_per_s(),
                 r.tbt_mean_ms(), r.tbt_percentile_ms(50), r.tbt_percentile_ms(99));
  } else {
    nlohmann::json j;
    j["token_ids"] = r.token_ids;
    j["text"] = "";
    j["prompt_tokens"] = r.n_prompt;
    j["generated_tokens"] = r.token_ids.size();
    j["finish_reason"] = r.finish == FinishReason::kStop ? "stop" : "length";
    j["kv_cache"] = o.use_kv_cache;
    j["timings"] = {{"ttft_ms", r.ttft_ms},
                    {"prefill_tok_per_s", r.prefill_tok_per_s()},
                    {"decode_tok_per_s", r.decode_tok_per_s()},
                    {"tbt_mean_ms", r.tbt_mean_ms()},
                    {"tbt_p50_ms", r.tbt_percentile_ms(50)},
                    {"tbt_p99_ms", r.tbt_percentile_ms(99)}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "generate from a prompt (prefill, then decode with the KV cache)");
  c->add_option("-m,--model", a->model, "GGUF file or llama2.c checkpoint (default: SmolLM2-135M-Instruct)");
  c->add_option("-p,--prompt", a->prompt, "prompt text");
  c->add_option("--prompt-ids", a->prompt_ids, "prompt as token ids, e.g. \"1 2 3\"");
  c->add_option("-n,--n-predict", a->n_predict, "tokens to generate")->check(CLI::NonNegativeNumber);
  c->add_option("--temp", a->temperature, "temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  c->add_option("--seed", a->seed, "sampling seed");
  c->add_option("-t,--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  c->add_flag("--no-kv-cache", a->no_kv_cache, "recompute the whole sequence every step (slow; for comparison)");
  c->add_option("--kv-type", a->kv_type, "KV cache element type")->check(CLI::IsMember({"f16", "f32"}));
  c->add_flag("--precise", a->precise, "f32 activations in every matmul (slower; see docs/numerics.md)");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens");
  c->add_option("--format", a->format, "output format")->check(CLI::IsMember({"text", "json"}));
  c->callback([a, exit_code] { *exit_code = run(*a); });
}

}  // namespace cachet::cli
