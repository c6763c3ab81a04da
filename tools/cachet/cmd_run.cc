// cachet run: prefill a prompt, then stream generated tokens; one summary line at the end.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "api/llm_impl.h"
#include "engine/generate.h"
#include "engine/text_stream.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  SamplingParams sampling;
  std::vector<std::string> logit_bias;  // "ID=BIAS"
  int threads = 0;
  bool no_kv_cache = false;
  KvFlags kv;
  std::string format = "text";
  bool ignore_eos = false;
  bool precise = false;
  int beam_width = 0;
  float length_penalty = 1.0f;
  std::string prompts_file;  // with --parallel: many prompts through the batching engine
  int parallel = 0;
  std::string kv_memory;  // empty: a pool sized for the request (with -f: 512MiB)
  bool no_prefix_cache = false;
  SpecOptions spec;
  RopeOverrides rope;
  std::string mmproj;
  std::vector<std::string> images;
};

Status parse_logit_bias(const std::vector<std::string>& flags, SamplingParams* p) {
  for (const auto& lb : flags) {
    auto eq = lb.find('=');
    char* end = nullptr;
    long id = eq == std::string::npos ? -1 : std::strtol(lb.c_str(), &end, 10);
    if (eq == std::string::npos || end != lb.c_str() + eq)
      return invalid_argument("--logit-bias takes ID=BIAS, got '" + lb + "'");
    std::string v = lb.substr(eq + 1);
    p->logit_bias[static_cast<int32_t>(id)] =
        (v == "-inf" || v == "-Inf") ? -std::numeric_limits<float>::infinity() : std::strtof(v.c_str(), nullptr);
  }
  return Status::ok();
}

void print_ids(const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
}

// --no-kv-cache: the naive loop that recomputes the whole sequence every step (engine/generate.h), to compare
// against; the same end-of-generation ids and text handling as the engine's path.
int run_naive(const RunArgs& a, const SamplingParams& sampling) {
  if (a.spec.any()) return fail(invalid_argument("speculative decoding needs the KV cache"));
  auto lm = load_with_tokenizer(a.model, a.threads, a.precise, a.rope);
  if (!lm.is_ok()) return fail(lm.status());
  const Tokenizer* tok = lm->tokenizer.get();
  auto prompt = prompt_tokens(tok, a.prompt, a.prompt_ids);
  if (!prompt.is_ok()) return fail(prompt.status());
  GenerateOptions o;
  o.sampling = sampling;
  o.use_kv_cache = false;
  o.kv_type = a.kv.types();
  o.stop_at_eos = !a.ignore_eos;
  if (!a.ignore_eos) o.stop_ids = end_of_generation_ids(*lm->model, tok);
  if (tok) o.token_text = [&](int32_t id) { return tok->token_to_piece(id, false); };
  auto r = generate(*lm->model, *prompt, o);
  if (!r.is_ok()) return fail(r.status());
  if (a.format == "json") {
    std::printf("%s\n", nlohmann::json({{"token_ids", r->token_ids}, {"text", r->text}, {"prompt_tokens", r->n_prompt},
                                        {"generated_tokens", r->token_ids.size()},
                                        {"finish_reason", finish_reason_name(r->finish)}, {"kv_cache", false}})
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  } else {
    if (tok) std::fwrite(r->text.data(), 1, r->text.size(), stdout);
    else print_ids(r->token_ids);
    std::printf("\n");
  }
  return 0;
}

int run(const RunArgs& a) {
  if (!a.prompts_file.empty() || a.parallel > 0) {
    if (a.prompts_file.empty()) return fail(invalid_argument("--parallel needs -f/--prompts-file (one prompt per line)"));
    if (!a.prompt.empty() || !a.prompt_ids.empty() || a.beam_width > 0 || a.no_kv_cache)
      return fail(invalid_argument("-f/--prompts-file does not combine with -p, --prompt-ids, --beam-width or "
                                   "--no-kv-cache"));
    BatchOptions o;
    o.model = a.model;
    o.prompts_file = a.prompts_file;
    o.kv_memory = a.kv_memory.empty() ? "512MiB" : a.kv_memory;
    o.parallel = a.parallel > 0 ? a.parallel : 16;
    o.threads = a.threads;
    o.sampling = a.sampling;
    o.json = a.format == "json";
    o.no_prefix_cache = a.no_prefix_cache;
    o.spec = a.spec;
    o.rope = a.rope;
    o.kv = a.kv;
    o.ignore_eos = a.ignore_eos;
    return run_batch(o);
  }
  if (a.prompt.empty() == a.prompt_ids.empty()) return fail(invalid_argument("give exactly one of -p or --prompt-ids"));
  if (!a.images.empty() && (a.mmproj.empty() || a.prompt.empty() || a.no_kv_cache || a.beam_width > 0))
    return fail(invalid_argument("--image needs --mmproj and a text prompt (-p), and runs in the engine (not with "
                                 "--no-kv-cache or --beam-width)"));
  SamplingParams sampling = a.sampling;
  if (Status s = parse_logit_bias(a.logit_bias, &sampling); !s.is_ok()) return fail(s);
  if (a.beam_width > 0 && a.spec.any()) return fail(invalid_argument("beam search does not combine with speculation"));
  if (a.no_kv_cache) return run_naive(a, sampling);

  LLMConfig cfg;
  cfg.threads = a.threads;
  cfg.precise = a.precise;
  cfg.rope = a.rope;
  a.kv.apply(&cfg);
  cfg.prefix_cache = false;  // one request: nothing to share
  cfg.speculation = a.spec;
  cfg.mmproj = a.mmproj;
  // One request: a pool that holds it, unless --kv-memory says otherwise (speculation drafts past the end).
  if (!a.kv_memory.empty() || a.spec.any()) {
    auto mem = parse_memory(a.kv_memory.empty() ? "512MiB" : a.kv_memory);
    if (!mem.is_ok()) return fail(mem.status());
    cfg.kv_memory_bytes = *mem;
  }
  auto model = load(a.model, cfg.threads, cfg.precise, cfg.rope);
  if (!model.is_ok()) return fail(model.status());
  std::unique_ptr<Tokenizer> tok;
  if (const GgufFile* g = (*model)->gguf(); g && g->find("tokenizer.ggml.model")) {
    auto t = Tokenizer::from_gguf(*g);
    if (!t.is_ok()) return fail(t.status());
    tok = std::move(*t);
  }
  auto prompt = prompt_tokens(tok.get(), a.prompt, a.prompt_ids);
  if (!prompt.is_ok()) return fail(prompt.status());
  std::vector<std::string> images;
  for (const std::string& f : a.images) {
    auto bytes = read_file(f);
    if (!bytes.is_ok()) return fail(bytes.status());
    images.push_back(std::move(*bytes));
  }
  if (a.kv_memory.empty() && !a.spec.any() && images.empty())
    cfg.kv_tokens = static_cast<int64_t>(prompt->size()) +
                    std::max(a.beam_width > 0 ? 0 : sampling.max_tokens, 1) + cfg.block_size;
  auto llm_r = make_llm(std::move(*model), cfg, std::move(tok));  // the tokenizer is built once
  if (!llm_r.is_ok()) return fail(llm_r.status());
  LLM& llm = **llm_r;
  const bool has_text = llm.info().has_tokenizer;
  Request req;
  req.prompt_ids = *prompt;
  if (!images.empty()) {  // the text goes with them: the images' rows are placed where it marks them
    req.prompt_ids.clear();
    req.prompt = a.prompt;
    req.images = std::move(images);
  }
  req.params = sampling;
  req.ignore_eos = a.ignore_eos;

  if (a.beam_width > 0) {
    // Beam search instead of sampling: beams are forked paged-KV sequences sharing the prompt's blocks.
    BeamParams bp;
    bp.width = a.beam_width;
    bp.max_tokens = sampling.max_tokens;
    bp.length_penalty = a.length_penalty;
    bp.ignore_eos = a.ignore_eos;
    auto r = llm.beam_search(req, bp);
    if (!r.is_ok()) return fail(r.status());
    if (a.format == "json") {
      nlohmann::json j = {{"token_ids", r->token_ids}, {"text", r->text}, {"logprob", r->logprob},
                          {"score", r->score}, {"beam_width", a.beam_width}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      if (has_text) std::printf("%s", r->text.c_str());
      else print_ids(r->token_ids);
      std::printf("\n");
    }
    std::fflush(stdout);
    std::fprintf(stderr, "beam width %d: %zu tokens, logprob %.4f, score %.4f\n", a.beam_width, r->token_ids.size(),
                 r->logprob, r->score);
    return 0;
  }

  const bool text = a.format == "text";
  bool first = true;
  auto on_event = [&](const OutputEvent& ev) {
    if (!text) return true;
    if (has_text) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    } else if (ev.token) {
      std::printf(first ? "%d" : " %d", ev.token->id);
      first = false;
    }
    std::fflush(stdout);
    return true;
  };
  auto res = llm.generate(req, on_event);
  if (!res.is_ok()) return fail(res.status());
  const Completion& r = *res;
  const bool shares_kv = llm.impl().draft_shares_target_kv;
  if (text) {
    std::printf("\n");
    std::fprintf(stderr,
                 "prompt tokens: %d | generated: %zu | TTFT: %.2f ms | prefill: %.1f tok/s | decode: %.1f tok/s | "
                 "TBT mean %.2f p50 %.2f p99 %.2f ms\n",
                 r.prompt_tokens, r.token_ids.size(), r.ttft_ms, prefill_tok_per_s(r), decode_tok_per_s(r),
                 tbt_mean_ms(r), tbt_percentile_ms(r, 50), tbt_percentile_ms(r, 99));
    if (a.spec.any())
      std::fprintf(stderr, "speculative (%s): %lld draft tokens verified, %lld accepted (%.1f%%)\n",
                   a.spec.lookup ? "lookup"
                   : a.spec.mtp  ? "the model's MTP head"
                   : shares_kv   ? "draft model, reading the target's KV cache"
                                 : "draft model, its own KV cache",
                   static_cast<long long>(r.spec_draft_tokens), static_cast<long long>(r.spec_accepted_tokens),
                   r.spec_draft_tokens ? 100.0 * r.spec_accepted_tokens / r.spec_draft_tokens : 0.0);
  } else {
    nlohmann::json j;
    j["token_ids"] = r.token_ids;
    j["text"] = r.text;
    j["prompt_tokens"] = r.prompt_tokens;
    j["generated_tokens"] = r.token_ids.size();
    j["finish_reason"] = finish_reason_name(r.finish);
    j["kv_cache"] = true;
    if (a.spec.any())
      j["speculative"] = {{"mode", a.spec.lookup ? "lookup" : a.spec.mtp ? "mtp" : "draft"},
                          {"draft_max", a.spec.draft_max},
                          {"proposed", r.spec_draft_tokens},
                          {"accepted", r.spec_accepted_tokens}};
    if (a.spec.any() && !a.spec.lookup && !a.spec.mtp) j["speculative"]["draft_kv"] = shares_kv ? "target" : "own";
    if (sampling.logprobs >= 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& sm : r.tokens) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& t : sm.top) top.push_back({{"id", t.id}, {"logprob", t.logprob}});
        lp.push_back({{"id", sm.id}, {"logprob", sm.logprob}, {"top", top}});
      }
      j["logprobs"] = lp;
    }
    j["timings"] = {{"ttft_ms", r.ttft_ms},
                    {"prefill_tok_per_s", prefill_tok_per_s(r)},
                    {"decode_tok_per_s", decode_tok_per_s(r)},
                    {"tbt_mean_ms", tbt_mean_ms(r)},
                    {"tbt_p50_ms", tbt_percentile_ms(r, 50)},
                    {"tbt_p99_ms", tbt_percentile_ms(r, 99)}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
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
  c->add_option("--mmproj", a->mmproj, "the model's projector file (mmproj-*.gguf), for --image");
  c->add_option("--image", a->images,
                "an image (JPEG, PNG, WebP) for the prompt, where it says <__media__> (else first); repeatable");
  SamplingParams& s = a->sampling;
  c->add_option("-n,--n-predict", s.max_tokens, "tokens to generate");
  c->add_option("--temp", s.temperature, "temperature (0 = greedy)");
  c->add_option("--top-k", s.top_k, "keep the k most likely tokens (0 = off)");
  c->add_option("--top-p", s.top_p, "keep the smallest set whose probability reaches p (1 = off)");
  c->add_option("--min-p", s.min_p, "keep tokens with p >= min_p * p_max (0 = off)");
  c->add_option("--repeat-penalty", s.repetition_penalty, "penalize repeated tokens (1 = off)");
  c->add_option("--frequency-penalty", s.frequency_penalty, "subtract count x this from repeated tokens' logits");
  c->add_option("--presence-penalty", s.presence_penalty, "subtract this from every seen token's logit");
  c->add_option("--repeat-last-n", s.penalty_last_n, "tokens the penalties look back at (-1 = all)");
  c->add_option("--logit-bias", a->logit_bias, "ID=BIAS added to a token's logit (repeatable; -inf bans)");
  c->add_option("--logprobs", s.logprobs, "report each token's logprob and the top N alternatives (json)");
  c->add_option("--stop", s.stop, "stop sequence (text; repeatable)");
  c->add_option("--seed", s.seed, "sampling seed");
  c->add_option("-t,--threads", a->threads, "threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  c->add_flag("--no-kv-cache", a->no_kv_cache, "recompute the whole sequence every step (slow; for comparison)");
  add_kv_flags(c, &a->kv);
  c->add_option("--beam-width", a->beam_width, "beam search with this many beams instead of sampling");
  c->add_option("--length-penalty", a->length_penalty, "beam score = logprob / length^penalty");
  c->add_flag("--precise", a->precise, "f32 activations in every matmul (slower; see docs/numerics.md)");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens");
  c->add_option("--format", a->format, "output format")->check(CLI::IsMember({"text", "json"}));
  c->add_option("-f,--prompts-file", a->prompts_file, "many prompts, one per line, batched (see --parallel)");
  c->add_option("--parallel", a->parallel, "with -f: most prompts running at once (continuous batching)")
      ->check(CLI::PositiveNumber);
  c->add_option("--kv-memory", a->kv_memory,
                "KV cache memory (512MiB, 2GiB, a fraction of RAM; default: what the request needs, 512MiB with -f)");
  c->add_flag("--no-prefix-cache", a->no_prefix_cache, "with -f: do not reuse the KV blocks of shared prefixes");
  add_spec_flags(c, &a->spec);
  add_rope_flags(c, &a->rope);
  c->callback([a, exit_code] { *exit_code = run(*a); });
}

}  // namespace cachet::cli
