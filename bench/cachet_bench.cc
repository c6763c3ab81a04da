// cachet_bench: prefill (pp) and decode (tg) tokens/s for a model file at a thread count, as medians of
// several runs, plus the cached vs no-cache speed-up and the machine's memory read bandwidth (the decode
// roofline's denominator). Prints one JSON object per measurement (bench/compare_llamacpp.py reads them).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <cstring>
#include <random>
#include <thread>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "bench/peak.h"
#include "engine/generate.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kv/kv_cache.h"
#include "model/model.h"

using namespace cachet;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Read bandwidth: each thread streams its own contiguous slice of a buffer much larger than the caches,
// front to back, through the packed bf16 matvec (one sequential stream, 2 chains of 16 lanes, light compute):
// the best read rate a decode kernel can reach here, and so the roofline's denominator. (Reading several
// short rows side by side, as a plain row-major matvec does, measured 20-30% lower on this machine.)
double measure_bandwidth_gbs(int threads, int reps) {
  const size_t n = size_t{1} << 30;  // 1 GiB
  AlignedBuffer<uint8_t> buf(n);
  ThreadPool pool(threads);
  pool.parallel_for(static_cast<int64_t>(n / 2), [&](int, int64_t b, int64_t e) {
    auto* h = reinterpret_cast<uint16_t*>(buf.data());
    for (int64_t i = b; i < e; ++i) h[i] = static_cast<uint16_t>(0x3f80 + (i & 7));  // small bf16 values
  });
  std::vector<double> gbs;
  std::vector<double> sums(threads);
  constexpr int64_t kK = 4096;
  const FloatPack fp = kernels().float_pack;
  const size_t group = packed_group_bytes(DType::kF16, kK, fp);  // 128 KiB per call
  const int64_t n_groups = static_cast<int64_t>(n / group);
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    pool.parallel_for(n_groups, [&](int t, int64_t g0, int64_t g1) {
      const auto& k = kernels();
      alignas(64) static thread_local uint32_t ones[kK / 2];
      alignas(64) static thread_local float ones_f32[kK];
      std::fill(ones, ones + kK / 2, 0x3f803f80u);  // bf16 pairs (1, 1)
      std::fill(ones_f32, ones_f32 + kK, 1.0f);
      float out[kPackRows];
      double acc = 0.0;
      for (int64_t g = g0; g < g1; ++g) {
        if (fp == FloatPack::kHalfRows) {
          k.packed_dot_half(DType::kBF16, buf.data() + g * group, kK, ones_f32, kK, 1, out, kPackRows);
        } else {
          k.packed_dot_bf16(buf.data() + g * group, kK / 2, ones, kK / 2, 1, out, kPackRows);
        }
        acc += out[0];
      }
      sums[t] += acc;
    });
    gbs.push_back(static_cast<double>(n_groups * group) / seconds_since(t0) / 1e9);
  }
  return median(gbs);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cachet_bench: prefill/decode throughput of a model"};
  std::string model_path;
  int threads = 2, n_prompt = 128, n_gen = 256, reps = 5;
  bool no_cache = false, bandwidth = false, peak = false;
  std::string kv = "f16";
  app.add_option("-m,--model", model_path, "model file");
  app.add_option("-t,--threads", threads);
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens for pp and before tg");
  app.add_option("-n,--n-gen", n_gen, "generated tokens for tg");
  app.add_option("-r,--reps", reps, "repetitions (median reported)");
  app.add_option("--kv-type", kv, "KV element type of K and V")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4r"}));
  app.add_flag("--no-cache", no_cache, "also time the no-cache recompute and report the speed-up");
  app.add_flag("--bandwidth", bandwidth, "measure memory read bandwidth");
  app.add_flag("--peak-flops", peak,
               "measure the kernel table's peaks: f32 FMA (GFLOP/s), its int8 and bf16 dot products (G MAC/s)");
  CLI11_PARSE(app, argc, argv);

  if (bandwidth) {
    nlohmann::json j = {{"what", "bandwidth"}, {"threads", threads}, {"read_gbs", measure_bandwidth_gbs(threads, reps)}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  if (peak) {
    const Isa isa = kernels().isa;
    nlohmann::json j = {{"what", "peak"},
                        {"threads", threads},
                        {"isa", isa_name(isa)},
                        {"gflops", 2.0 * bench::peak_macs(bench::PeakKind::kF32, isa, threads, reps) / 1e9},
                        {"int8_gmacs", bench::peak_macs(bench::PeakKind::kInt8, isa, threads, reps) / 1e9},
                        {"bf16_gmacs", bench::peak_macs(bench::PeakKind::kBf16, isa, threads, reps) / 1e9}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  if (model_path.empty()) return 0;

  LoadOptions lo;
  lo.n_threads = threads;
  auto m = load_model(model_path, lo);
  if (!m.is_ok()) {
    std::fprintf(stderr, "error: %s\n", m.status().message().c_str());
    return 1;
  }
  Model& model = **m;
  const ModelConfig& c = model.config();
  std::mt19937 rng(1);
  std::vector<int32_t> prompt(n_prompt);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.n_vocab);
  // Bytes of weights a decode step reads: every matrix, but of the experts only the n_expert_used / n_expert
  // a token is routed to (on average), and of an untied token embedding one row. A matrix the model repacked
  // (kernels/packed.h) is read in its packed size: the file's within 3% for most types, 1.06x for IQ4_XS, 1.04x
  // for Q3_K and 1.19x for Q2_K, whose packed scales are bytes.
  const auto read_bytes = [&](const TensorView& t) {
    if (!packable(t.type) || t.ne[1] <= 1) return static_cast<double>(t.n_bytes());
    const int64_t groups = (t.ne[1] + kPackRows - 1) / kPackRows * std::max<int64_t>(1, t.ne[2]);
    return static_cast<double>(packed_group_bytes(t.type, t.ne[0], kernels().float_pack)) * groups;
  };
  size_t weight_bytes = 0;
  double read_per_token = 0.0;
  for (const auto& t : model.tensors()) {
    weight_bytes += t.n_bytes();
    if (t.name.find("_exps.") != std::string::npos && c.n_expert > 0) {
      read_per_token += read_bytes(t) * c.n_expert_used / c.n_expert;
    } else if (t.name == "token_embd.weight" && !c.tied_output) {
      read_per_token += static_cast<double>(t.row_bytes);
    } else {
      read_per_token += read_bytes(t);
    }
  }

  // Multiply-adds of a prompt token: every matrix but the output head (only the last prompt token needs logits),
  // experts as routed, plus attention over the n_prompt / 2 earlier positions on average (QK and PV).
  // The peak that bounds the prefill: that of the kind (int8, bf16, f32: bench/peak.h) most of these run on.
  const bench::TokenMacs tm = bench::token_macs(model, kernels().isa, false);
  double prefill_macs = tm.macs;
  const int peak_kind = static_cast<int>(tm.kind);
  prefill_macs += 2.0 * c.n_layer * c.q_dim() * (n_prompt / 2.0);

  GenerateOptions o;
  // -n 0 measures prefill only: one token is still generated (a run without one never prefills), its decode
  // rate is not reported.
  o.sampling.max_tokens = std::max(n_gen, 1);
  o.stop_at_eos = false;
  o.kv_type = KvTypes(*kv_type_from_name(kv));
  int64_t kv_per_token = 0;  // K and V of every layer that keeps its own, each as wide as its heads
  for (int kl = 0; kl < static_cast<int>(c.n_kv_layers()); ++kl)
    kv_per_token += static_cast<int64_t>(o.kv_type.row_bytes(c.kv_dim_of_kv_layer(kl)));
  GenerateOptions warm = o;
  warm.sampling.max_tokens = 8;
  // Warm-up: page in the weights (a short prompt: a long context's prefill would only double the run's time).
  const std::vector<int32_t> warm_prompt(prompt.begin(), prompt.begin() + std::min<size_t>(prompt.size(), 128));
  if (!generate(model, warm_prompt, warm).is_ok()) return 1;
  std::vector<double> pp, tg;
  for (int r = 0; r < reps; ++r) {
    auto res = generate(model, prompt, o);
    if (!res.is_ok()) {
      std::fprintf(stderr, "error: %s\n", res.status().message().c_str());
      return 1;
    }
    pp.push_back(res->prefill_tok_per_s());
    tg.push_back(n_gen > 0 ? res->decode_tok_per_s() : 0.0);
  }
  nlohmann::json j = {{"what", "generate"},
                      {"model", model_path},
                      {"threads", threads},
                      {"isa", isa_name(kernels().isa)},
                      {"cpu", cpu_description()},
                      {"n_prompt", n_prompt},
                      {"n_gen", n_gen},
                      {"weight_bytes", weight_bytes},
                      {"weight_bytes_read_per_token", read_per_token},
                      {"kv_bytes_per_token", kv_per_token},
                      // A hybrid's recurrent state, read and written by every decoded token.
                      {"state_bytes_per_token", 2 * c.state_bytes_per_seq()},
                      {"kv_type", kv_type_name(o.kv_type.k)},
                      {"prefill_flops_per_token", 2.0 * prefill_macs},
                      {"prefill_peak_kind", std::array{"f32", "int8", "bf16"}[peak_kind]},
                      {"pp_tok_s", median(pp)},
                      {"tg_tok_s", median(tg)},
                      {"pp_runs", pp},
                      {"tg_runs", tg}};
  if (no_cache) {
    // Wall time to generate n_gen tokens after the prompt, with and without the cache.
    std::vector<double> with, without;
    for (int r = 0; r < std::max(1, reps / 2); ++r) {
      auto t0 = Clock::now();
      auto a = generate(model, prompt, o);
      with.push_back(seconds_since(t0));
      GenerateOptions nc = o;
      nc.use_kv_cache = false;
      t0 = Clock::now();
      auto b = generate(model, prompt, nc);
      without.push_back(seconds_since(t0));
      if (!a.is_ok() || !b.is_ok() || a->token_ids != b->token_ids) {
        std::fprintf(stderr, "error: cached and no-cache runs disagree\n");
        return 1;
      }
    }
    j["cached_s"] = median(with);
    j["no_cache_s"] = median(without);
    j["cache_speedup"] = median(without) / median(with);
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
