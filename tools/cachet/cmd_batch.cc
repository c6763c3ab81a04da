// cachet batch: many prompts (one per line of a file) through the continuous-batching engine at once.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "api/llm_impl.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

Result<int64_t> parse_memory(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  if (end == s.c_str() || v <= 0) return invalid_argument("--kv-memory: '" + s + "' is not a size");
  if (unit.empty() && v < 1.0) {
    const int64_t phys = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    return static_cast<int64_t>(v * static_cast<double>(phys));
  }
  static const std::map<std::string, int64_t> kUnits = {{"", 1}, {"B", 1}, {"KiB", 1 << 10}, {"MiB", 1 << 20},
                                                        {"GiB", 1ll << 30}, {"KB", 1000}, {"MB", 1000000},
                                                        {"GB", 1000000000}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return invalid_argument("--kv-memory: unknown unit '" + unit + "'");
  return static_cast<int64_t>(v * static_cast<double>(it->second));
}

int run_batch(const BatchOptions& o) {
  auto mem = parse_memory(o.kv_memory);
  if (!mem.is_ok()) return fail(mem.status());
  LLMConfig cfg;
  cfg.threads = o.threads;
  cfg.rope = o.rope;
  cfg.kv_memory_bytes = *mem;
  cfg.block_size = o.block_size;
  cfg.max_running = o.parallel;
  cfg.prefill_chunk = o.chunk;
  cfg.prefix_cache = !o.no_prefix_cache;
  cfg.speculation = o.spec;
  o.kv.apply(&cfg);
  auto llm_r = load_llm(o.model, cfg);
  if (!llm_r.is_ok()) return fail(llm_r.status());
  LLM& llm = **llm_r;
  if (!llm.info().has_tokenizer) return fail(invalid_argument("batch needs a model file with a tokenizer"));
  auto text = read_file(o.prompts_file);
  if (!text.is_ok()) return fail(text.status());
  // Each line as a user message in the chat template (which writes BOS itself), or as is with --raw.
  const bool templated = !o.raw && llm.info().has_chat_template;
  std::vector<Request> requests;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Request r;
    r.params = o.sampling;
    r.ignore_eos = o.ignore_eos;
    if (templated) {
      auto t = llm.apply_chat_template({{"user", line}});
      if (!t.is_ok()) return fail(t.status());
      auto ids = llm.tokenize(*t, /*add_special=*/false, /*parse_special=*/true);
      if (!ids.is_ok()) return fail(ids.status());
      r.prompt_ids = std::move(*ids);
    } else {
      r.prompt = line;
    }
    requests.push_back(std::move(r));
  }
  const int64_t steps0 = llm.impl().service->snapshot().steps;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = llm.generate(requests);
  if (!out.is_ok()) return fail(out.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t generated = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    const Completion& c = (*out)[i];
    generated += static_cast<int64_t>(c.token_ids.size());
    std::vector<int32_t> ids = c.token_ids;  // without the end-of-generation token, as the text
    if (c.finish == FinishReason::kStop && !ids.empty() &&
        std::find(llm.impl().end_ids.begin(), llm.impl().end_ids.end(), ids.back()) != llm.impl().end_ids.end())
      ids.pop_back();
    if (o.json) std::printf("%s\n", nlohmann::json({{"index", i}, {"text", c.text}, {"token_ids", ids}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    else std::printf("[%zu] %s\n", i, c.text.c_str());
  }
  const ServiceSnapshot snap = llm.impl().service->snapshot();
  const EngineCounters& cnt = snap.counters;
  std::fprintf(stderr, "%zu prompts, %lld tokens in %.2f s (%.1f tok/s aggregate), %lld steps, %lld preemptions, "
               "%d KV blocks of %d tokens\n", out->size(), static_cast<long long>(generated), secs, generated / secs,
               static_cast<long long>(snap.steps - steps0), static_cast<long long>(cnt.preemptions),
               cnt.blocks_total, cfg.block_size);
  if (o.spec.any())
    std::fprintf(stderr, "speculative: %lld draft tokens verified, %lld accepted (%.1f%%)\n",
                 static_cast<long long>(cnt.spec_draft_tokens), static_cast<long long>(cnt.spec_accepted_tokens),
                 cnt.spec_draft_tokens ? 100.0 * cnt.spec_accepted_tokens / cnt.spec_draft_tokens : 0.0);
  return 0;
}

void add_batch_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BatchOptions>();
  a->sampling.max_tokens = 64;
  CLI::App* c = app.add_subcommand("batch", "run many prompts at once with continuous batching (one per line)");
  c->add_option("-m,--model", a->model, "model file (default: SmolLM2-135M-Instruct)");
  c->add_option("-f,--prompts-file", a->prompts_file, "prompts, one per line")->required();
  c->add_option("--parallel", a->parallel, "most requests running at once");
  c->add_option("-n,--n-predict", a->sampling.max_tokens, "tokens per prompt");
  c->add_option("--temp", a->sampling.temperature, "temperature (0 = greedy)");
  c->add_option("--top-p", a->sampling.top_p);
  c->add_option("--top-k", a->sampling.top_k);
  c->add_option("--seed", a->sampling.seed);
  c->add_option("--stop", a->sampling.stop, "stop sequence (text; repeatable)");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  add_kv_flags(c, &a->kv);
  c->add_option("--kv-memory", a->kv_memory, "KV cache memory: bytes with a unit (512MiB) or a fraction of RAM");
  c->add_option("--block-size", a->block_size, "tokens per KV block (a multiple of 16)");
  c->add_option("--prefill-chunk", a->chunk, "most prompt tokens of one request per step");
  c->add_option("-t,--threads", a->threads);
  c->add_flag("--json", a->json, "one JSON object per prompt");
  c->add_flag("--no-prefix-cache", a->no_prefix_cache, "do not reuse the KV blocks of shared prompt prefixes");
  add_spec_flags(c, &a->spec);
  add_rope_flags(c, &a->rope);
  c->add_flag("--raw", a->raw, "send each line as is (default: as a user message in the chat template)");
  c->callback([a, exit_code] { *exit_code = run_batch(*a); });
}

}  // namespace cachet::cli
