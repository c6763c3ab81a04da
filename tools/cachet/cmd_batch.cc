// cachet batch: many prompts (one per line of a file) through the continuous-batching engine at once.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
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
  auto lm = load_with_tokenizer(o.model, o.threads, false, o.rope);
  if (!lm.is_ok()) return fail(lm.status());
  if (!lm->tokenizer) return fail(invalid_argument("batch needs a model file with a tokenizer"));
  const Tokenizer& tok = *lm->tokenizer;
  auto mem = parse_memory(o.kv_memory);
  if (!mem.is_ok() || o.block_size % 16 != 0 || o.block_size <= 0) return fail(mem.is_ok() ? invalid_argument("--block-size must be a positive multiple of 16") : mem.status());
  EngineConfig cfg;
  cfg.kv_memory_bytes = *mem;
  cfg.block_size = o.block_size;
  cfg.max_running = o.parallel;
  cfg.prefill_chunk = o.chunk;
  cfg.prefix_cache = !o.no_prefix_cache;
  cfg.kv_type = o.kv.types();
  std::unique_ptr<Model> draft;
  if (Status s = load_speculation(o.spec, o.rope, *lm->model, &cfg, &draft); !s.is_ok()) return fail(s);
  auto created = Engine::create(*lm->model, cfg);
  if (!created.is_ok()) return fail(created.status());
  Engine& engine = **created;
  std::ifstream in(o.prompts_file);
  if (!in) return fail(io_error("cannot read " + o.prompts_file));
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < tok.n_vocab(); ++id)
    if (tok.is_end_of_generation(id)) eog.push_back(id);
  std::vector<RequestId> ids;
  std::map<RequestId, std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::string text = line;
    const GgufFile* g = lm->model->gguf();
    if (!o.raw && g && g->find("tokenizer.chat_template")) {
      ChatTemplateInputs ti;
      ti.messages.push_back({{"role", "user"}, {"content", line}});
      if (tok.bos()) ti.bos_token = tok.token_text(*tok.bos());
      if (tok.eos()) ti.eos_token = tok.token_text(*tok.eos());
      auto r = render_chat_template(*g->get_string("tokenizer.chat_template"), ti);
      if (!r.is_ok()) return fail(r.status());
      text = *r;
    }
    auto id = engine.add_request(tok.encode(text, !(!o.raw && g && g->find("tokenizer.chat_template")), true),
                                 o.sampling, eog);
    if (!id.is_ok()) return fail(id.status());
    ids.push_back(*id);
  }
  const auto t0 = std::chrono::steady_clock::now();
  int64_t generated = 0, steps = 0;
  while (engine.has_work()) {
    auto ev = engine.step();
    if (!ev.is_ok()) return fail(ev.status());
    ++steps;
    for (const auto& x : *ev)
      if (x.token >= 0) out[x.id].push_back(x.token), ++generated;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<int32_t> toks = out[ids[i]];
    if (!toks.empty() && tok.is_end_of_generation(toks.back())) toks.pop_back();
    const std::string text = tok.decode(toks);
    if (o.json) std::printf("%s\n", nlohmann::json({{"index", i}, {"text", text}, {"token_ids", toks}}).dump().c_str());
    else std::printf("[%zu] %s\n", i, text.c_str());
  }
  const EngineCounters cnt = engine.counters();
  std::fprintf(stderr, "%zu prompts, %lld tokens in %.2f s (%.1f tok/s aggregate), %lld steps, %lld preemptions, "
               "%d KV blocks of %d tokens\n", ids.size(), static_cast<long long>(generated), secs, generated / secs,
               static_cast<long long>(steps), static_cast<long long>(cnt.preemptions), cnt.blocks_total,
               cfg.block_size);
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
