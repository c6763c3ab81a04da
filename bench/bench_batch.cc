// Continuous batching throughput: aggregate decode tokens/s at 1, 4, 16 and 64 concurrent sequences (one
// pass over the weights serves them all) on the paged cache of a chosen KV type, and TTFT / time between tokens
// under Poisson arrivals. With --peak, each rate also as multiply-adds per second and the share of the kernel
// table's peak (bench/peak.h) that most of the matmuls run on.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "bench/peak.h"
#include "engine/engine.h"
#include "model/model.h"

using namespace cachet;
using Clock = std::chrono::steady_clock;

namespace {

// Engine::create, failing the program on an error.
std::unique_ptr<Engine> make_engine(Model& m, EngineConfig cfg) {
  auto e = Engine::create(m, std::move(cfg));
  if (!e.is_ok()) {
    std::fprintf(stderr, "Engine::create: %s\n", e.status().message().c_str());
    std::exit(1);
  }
  return std::move(*e);
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_batch: continuous batching throughput and latency"};
  std::string model_path;
  int threads = 2, prompt_len = 32, gen = 64, n_poisson = 48, reps = 3;
  bool peak = false;
  double rate = 4.0;
  std::vector<int> batches{1, 4, 16, 64};
  std::string kv = "f16";
  app.add_option("-m,--model", model_path)->required();
  app.add_option("-t,--threads", threads);
  app.add_option("-p,--prompt", prompt_len);
  app.add_option("-n,--gen", gen);
  app.add_option("--poisson-requests", n_poisson);
  app.add_option("--rate", rate, "Poisson arrivals per second");
  app.add_option("--batches", batches, "concurrent sequence counts to time (ratios are to the first)");
  app.add_option("--kv-type", kv, "KV cache type of K and V (f16, q8_0, q4_0, ...)");
  app.add_option("-r,--reps", reps, "runs per sequence count (the median is reported)");
  app.add_flag("--peak", peak, "measure the table's peak and report each rate's share of it");
  CLI11_PARSE(app, argc, argv);
  LoadOptions lo;
  lo.n_threads = threads;
  auto m = load_model(model_path, lo);
  if (!m.is_ok()) {
    std::fprintf(stderr, "error: %s\n", m.status().message().c_str());
    return 1;
  }
  Model& model = **m;
  std::mt19937 rng(1);
  auto prompt = [&] {
    std::vector<int32_t> p(prompt_len);
    for (auto& t : p) t = static_cast<int32_t>(3 + rng() % (model.config().n_vocab - 3));
    return p;
  };
  const auto kv_type = kv_type_from_name(kv);
  if (!kv_type) {
    std::fprintf(stderr, "error: unknown KV type '%s'\n", kv.c_str());
    return 1;
  }
  EngineConfig cfg;
  cfg.kv_memory_bytes = 1ll << 30;
  cfg.kv_type = KvTypes(*kv_type);
  // A decoded token's multiply-adds: every matrix with the output head, and attention (QK and PV) over the
  // prompt and half the generated tokens on average.
  const Isa isa = kernels().isa;
  const bench::TokenMacs tm = bench::token_macs(model, isa, true);
  const ModelConfig& c = model.config();
  const double macs = tm.macs + 2.0 * c.n_layer * c.q_dim() * (prompt_len + gen / 2.0);
  const double peak_macs = peak ? bench::peak_macs(tm.kind, isa, threads, 3) : 0.0;
  const char* kind = std::array{"f32 FMA", "int8 dot", "bf16 dot"}[static_cast<int>(tm.kind)];
  if (peak)
    std::printf("table %s, %.2f G multiply-adds a decoded token, %s peak %.1f G MAC/s (%d threads)\n\n",
                isa_name(isa), macs / 1e9, kind, peak_macs / 1e9, threads);
  double base = 0;
  std::printf("| concurrent sequences | aggregate decode tok/s (median of %d) | runs | vs 1 |%s\n|---|---|---|---|%s\n",
              reps, peak ? " G MAC/s | of the peak |" : "", peak ? "---|---|" : "");
  for (int n : batches) {
    std::vector<double> runs;
    for (int r = 0; r < reps; ++r) {
      auto e_owner = make_engine(model, cfg);
      Engine& e = *e_owner;
      SamplingParams sp;
      sp.max_tokens = gen;
      for (int i = 0; i < n; ++i) (void)e.add_request(prompt(), sp, {}, false);
      // Prefill everyone first, then time pure decode steps.
      int64_t tokens = 0;
      Clock::time_point t0;
      bool timing = false;
      while (e.has_work()) {
        auto ev = e.step();
        if (!ev.is_ok()) return 1;
        if (!timing && e.counters().tokens_stored >= static_cast<int64_t>(n) * prompt_len) {
          timing = true;
          t0 = Clock::now();
          continue;
        }
        if (timing)
          for (const auto& x : *ev) tokens += x.token.has_value();
      }
      runs.push_back(tokens / since(t0));
    }
    const double tps = pct(runs, 50);
    if (base == 0) base = tps;
    std::string all;
    for (double x : runs) all += (all.empty() ? "" : " / ") + std::to_string(static_cast<int>(x + 0.5));
    std::printf("| %d | %.1f | %s | %.2fx |", n, tps, all.c_str(), tps / base);
    if (peak) std::printf(" %.1f | %.0f%% |", tps * macs / 1e9, 100.0 * tps * macs / peak_macs);
    std::printf("\n");
    std::fflush(stdout);
  }
  // Poisson arrivals: TTFT and time between tokens as users see them (--poisson-requests 0: none).
  if (n_poisson <= 0) return 0;
  auto e_owner = make_engine(model, cfg);
  Engine& e = *e_owner;
  std::exponential_distribution<double> gap(rate);
  std::vector<double> arrivals;
  double t = 0;
  for (int i = 0; i < n_poisson; ++i) arrivals.push_back(t += gap(rng));
  std::map<RequestId, double> arrived, last;
  std::vector<double> ttft, tbt;
  size_t next = 0;
  const auto t0 = Clock::now();
  while (next < arrivals.size() || e.has_work()) {
    const double now = since(t0);
    while (next < arrivals.size() && arrivals[next] <= now) {
      SamplingParams sp;
      sp.max_tokens = gen;
      auto id = e.add_request(prompt(), sp, {}, false);
      if (id.is_ok()) arrived[*id] = arrivals[next];
      ++next;
    }
    if (!e.has_work()) continue;
    auto ev = e.step();
    if (!ev.is_ok()) return 1;
    const double after = since(t0);
    for (const auto& x : *ev) {
      if (!x.token) continue;
      if (!last.count(x.id)) ttft.push_back(after - arrived[x.id]);
      else tbt.push_back(after - last[x.id]);
      last[x.id] = after;
    }
  }
  std::printf("\nPoisson arrivals, %d requests at %.1f/s (prompt %d, generate %d): TTFT p50 %.1f ms p99 %.1f ms; "
              "time between tokens p50 %.1f ms p99 %.1f ms\n",
              n_poisson, rate, prompt_len, gen, 1e3 * pct(ttft, 50), 1e3 * pct(ttft, 99), 1e3 * pct(tbt, 50),
              1e3 * pct(tbt, 99));
  return 0;
}
