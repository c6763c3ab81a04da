// cachet perplexity: llama.cpp's measure. The text is tokenized once (BOS as the vocabulary says) and cut
// into consecutive chunks of --ctx tokens; each chunk is one prefill from an empty cache (its first token
// replaced by BOS when the vocabulary adds one), and only the second half of each chunk is scored, so every
// scored token sees at least ctx/2 tokens of context. PPL = exp(mean negative log-likelihood).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "base/fp16.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

namespace {

struct PplArgs {
  std::string model, file, kl_save, kl_base;
  KvFlags kv;
  int ctx = 512, chunks = 0, threads = 0;
  int64_t skip = 0;   // text tokens before the first chunk
  int score_last = 0;  // predictions scored per chunk, its last ones (0: the second half)
  bool precise = false, json = false;
  RopeOverrides rope;
};

int perplexity(const PplArgs& a) {
  std::ifstream in(a.file, std::ios::binary);
  if (!in) return fail(io_error("cannot read " + a.file));
  std::stringstream ss;
  ss << in.rdbuf();
  auto lm = load_with_tokenizer(a.model, a.threads, a.precise, a.rope);
  if (!lm.is_ok()) return fail(lm.status());
  if (!lm->tokenizer) return fail(invalid_argument("this model file has no tokenizer"));
  Model& model = *lm->model;
  const Tokenizer& tok = *lm->tokenizer;
  if (a.ctx < 4) return fail(invalid_argument("--ctx must be at least 4"));
  if (a.ctx > model.config().n_ctx_train)  // measuring what happens past it is what context extension is about
    std::fprintf(stderr, "note: --ctx %d is past the model's context %lld (RoPE scaling: %s)\n", a.ctx,
                 static_cast<long long>(model.config().n_ctx_train), model.config().rope_scaling.c_str());
  std::vector<int32_t> tokens = tok.encode(ss.str(), /*add_special=*/true, /*parse_special=*/false);
  if (a.skip < 0 || a.skip >= static_cast<int64_t>(tokens.size()))
    return fail(invalid_argument("--skip " + std::to_string(a.skip) + " is outside the text's " +
                                 std::to_string(tokens.size()) + " tokens"));
  tokens.erase(tokens.begin(), tokens.begin() + a.skip);
  if (a.score_last < 0 || a.score_last > a.ctx - 1)
    return fail(invalid_argument("--score-last must be in 1.." + std::to_string(a.ctx - 1)));
  int n_chunks = static_cast<int>(tokens.size() / a.ctx);
  if (a.chunks > 0) n_chunks = std::min(n_chunks, a.chunks);
  if (n_chunks == 0)
    return fail(invalid_argument("the text has " + std::to_string(tokens.size()) + " tokens, fewer than --ctx " +
                                 std::to_string(a.ctx)));
  const int64_t V = model.config().n_vocab;
  // Scored: the predictions from position `first` on (the second half, or the last --score-last of them). With
  // --skip, chunks of different lengths can end at the same text and score the same tokens (context extension).
  const int first = a.score_last > 0 ? a.ctx - 1 - a.score_last : a.ctx / 2;
  if (Status s = kv_types_fit(model.config(), a.kv.types()); !s.is_ok()) return fail(s);
  ContiguousKvCache cache(model.config(), a.ctx, a.kv.types());
  std::vector<float> logits(static_cast<size_t>(a.ctx) * V);
  // KL divergence against a saved run (llama.cpp's --kl-divergence-base / --kl-divergence): the scored
  // positions' log-probabilities, f16, after a header naming the shape.
  std::ofstream kl_out;
  std::ifstream kl_in;
  const int64_t header[4] = {0x42444C4B544843LL /* "CHTKLDB" */, V, a.ctx, n_chunks};
  if (!a.kl_save.empty()) {
    kl_out.open(a.kl_save, std::ios::binary);
    if (!kl_out) return fail(io_error("cannot write " + a.kl_save));
    kl_out.write(reinterpret_cast<const char*>(header), sizeof header);
  }
  if (!a.kl_base.empty()) {
    kl_in.open(a.kl_base, std::ios::binary);
    int64_t h[4] = {};
    if (!kl_in || !kl_in.read(reinterpret_cast<char*>(h), sizeof h) || h[0] != header[0])
      return fail(io_error(a.kl_base + " is not a saved perplexity run (--kl-save)"));
    if (h[1] != V || h[2] != a.ctx || h[3] < n_chunks)
      return fail(invalid_argument(a.kl_base + " was saved with another vocabulary, --ctx or fewer chunks"));
  }
  std::vector<double> kld;
  int64_t same_top = 0;
  std::vector<uint16_t> lp16(V), base16(V);
  double nll = 0.0;
  int64_t scored = 0;
  std::vector<double> running;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> ids(tokens.begin() + static_cast<int64_t>(c) * a.ctx,
                             tokens.begin() + static_cast<int64_t>(c + 1) * a.ctx);
    if (tok.add_bos() && tok.bos()) ids[0] = *tok.bos();
    // The cache is addressed by position: this chunk's prefill overwrites the previous chunk's rows.
    ForwardBatch b = ForwardBatch::single(cache, ids, 0, true);
    if (Status s = model.forward(b, logits.data()); !s.is_ok()) return fail(s);
    for (int i = first; i < a.ctx - 1; ++i) {
      const float* l = logits.data() + static_cast<size_t>(i) * V;
      float mx = l[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, l[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v] - mx));
      nll += std::log(sum) + mx - l[ids[i + 1]];
      ++scored;
      if (kl_out.is_open() || kl_in.is_open()) {
        const double lse = std::log(sum) + mx;
        for (int64_t v = 0; v < V; ++v) lp16[v] = f32_to_fp16(static_cast<float>(l[v] - lse));
        if (kl_out.is_open()) kl_out.write(reinterpret_cast<const char*>(lp16.data()), V * 2);
        if (kl_in.is_open()) {
          if (!kl_in.read(reinterpret_cast<char*>(base16.data()), V * 2))
            return fail(io_error(a.kl_base + " ends early"));
          // KL(base || this run) over the whole vocabulary, both sides as stored (f16 log-probabilities).
          double k = 0;
          int64_t top_b = 0, top_o = 0;
          for (int64_t v = 0; v < V; ++v) {
            const double lb = fp16_to_f32(base16[v]), lo = fp16_to_f32(lp16[v]);
            k += std::exp(lb) * (lb - lo);
            if (lb > fp16_to_f32(base16[top_b])) top_b = v;
            if (lo > fp16_to_f32(lp16[top_o])) top_o = v;
          }
          kld.push_back(std::max(0.0, k));
          same_top += top_b == top_o;
        }
      }
    }
    running.push_back(std::exp(nll / scored));
    if (!a.json) std::fprintf(stderr, "[%d] %.4f\n", c + 1, running.back());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ppl = std::exp(nll / scored);
  nlohmann::json kl;
  if (!kld.empty()) {
    std::vector<double> sorted = kld;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0, sq = 0;
    for (double x : kld) mean += x;
    mean /= static_cast<double>(kld.size());
    for (double x : kld) sq += (x - mean) * (x - mean);
    const double se = std::sqrt(sq / std::max<double>(1.0, static_cast<double>(kld.size()) - 1.0) /
                                static_cast<double>(kld.size()));
    kl = {{"mean", mean},
          {"stderr", se},
          {"median", sorted[sorted.size() / 2]},
          {"p99", sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)]},
          {"max", sorted.back()},
          {"same_top", static_cast<double>(same_top) / static_cast<double>(kld.size())},
          {"positions", kld.size()}};
  }
  if (a.json) {
    nlohmann::json j = {{"ppl", ppl}, {"nll", nll / scored}, {"chunks", n_chunks}, {"ctx", a.ctx},
                        {"scored_tokens", scored}, {"text_tokens", tokens.size()}, {"seconds", secs},
                        {"running", running}, {"kv_type_k", kv_type_name(a.kv.types().k)},
                        {"kv_type_v", kv_type_name(a.kv.types().v)}};
    if (!kl.is_null()) j["kld"] = kl;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("perplexity: %.4f over %lld tokens (%d chunks of %d, %s scored), %.1f tokens/s\n", ppl,
                static_cast<long long>(scored), n_chunks, a.ctx,
                a.score_last > 0 ? ("the last " + std::to_string(a.score_last)).c_str() : "second halves",
                n_chunks * a.ctx / secs);
    if (!kl.is_null())
      std::printf("KL divergence from %s: mean %.6f +/- %.6f, median %.6f, 99%% %.6f; same top token %.2f%%\n",
                  a.kl_base.c_str(), kl["mean"].get<double>(), kl["stderr"].get<double>(),
                  kl["median"].get<double>(), kl["p99"].get<double>(), 100.0 * kl["same_top"].get<double>());
  }
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<PplArgs>();
  CLI::App* c = app.add_subcommand("perplexity", "perplexity of a model on a text (llama.cpp's chunked measure)");
  c->add_option("-m,--model", a->model, "model file");
  c->add_option("-f,--file", a->file, "text file (data/kjv_genesis_1-12.txt is shipped for this)")->required();
  c->add_option("-c,--ctx", a->ctx, "tokens per chunk; the second half of each is scored");
  c->add_option("--chunks", a->chunks, "score at most this many chunks (0: all)");
  c->add_option("--skip", a->skip, "text tokens to skip before the first chunk");
  c->add_option("--score-last", a->score_last, "score the last N predictions of each chunk (default: its second half)");
  add_kv_flags(c, &a->kv);
  c->add_option("--kl-save", a->kl_save, "save this run's log-probabilities (the base for --kl-base)");
  c->add_option("--kl-base", a->kl_base, "report the KL divergence from a run saved with --kl-save");
  c->add_option("-t,--threads", a->threads);
  add_rope_flags(c, &a->rope);
  c->add_flag("--precise", a->precise, "f32 activations in every matmul");
  c->add_flag("--json", a->json, "print JSON");
  c->callback([a, exit_code] { *exit_code = perplexity(*a); });
}

}  // namespace cachet::cli
