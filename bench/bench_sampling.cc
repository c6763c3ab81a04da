// One draw from a 128,256-token logits row (Llama-3 vocabulary) on one core, for each sampler setting.
// The target is <= 1 ms per draw at any setting (median of the repetitions).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "sampling/sampler.h"

using namespace cachet;

namespace {

constexpr int kVocab = 128256;

std::vector<float> realistic_logits() {
  // LM-like: a broad normal body with a few strong candidates.
  std::mt19937 rng(5);
  std::normal_distribution<float> body(0.0f, 2.5f);
  std::vector<float> l(kVocab);
  for (auto& x : l) x = body(rng);
  for (int i = 0; i < 20; ++i) l[rng() % kVocab] = 12.0f + i * 0.3f;
  return l;
}

void BM_Sample(benchmark::State& st, SamplingParams p) {
  const auto logits = realistic_logits();
  std::vector<int32_t> history;
  for (int i = 0; i < 256; ++i) history.push_back((i * 7919) % kVocab);
  Sampler s(p);
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(logits.data(), kVocab, history, 128)->id);
}

// A decode step's sampling: 64 requests, each its own sampler, one draw each from its own row of a 49,152-token
// vocabulary (the default model's), as the engine's step does on one thread. Arg 1: through sample(), whose
// working arrays are the thread's; arg 0: through distribution() + draw(), whose arrays are each request's own
// (12.6 MB of logits and 25 MB of working arrays in all: from L3 or memory, not L2). Time is per step.
void BM_Step64(benchmark::State& st) {
  constexpr int kRequests = 64, kV = 49152;
  std::mt19937 rng(7);
  std::normal_distribution<float> body(0.0f, 2.5f);
  std::vector<float> logits(static_cast<size_t>(kRequests) * kV);
  for (auto& x : logits) x = body(rng);
  std::vector<Sampler> samplers;
  for (int r = 0; r < kRequests; ++r) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.seed = r;
    samplers.emplace_back(p);
  }
  const std::vector<int32_t> history = {1, 2, 3};
  for (auto _ : st) {
    for (int r = 0; r < kRequests; ++r) {
      const float* row = logits.data() + static_cast<size_t>(r) * kV;
      if (st.range(0)) {
        benchmark::DoNotOptimize(samplers[r].sample(row, kV, history, 3)->id);
      } else {
        const TokenDist* d = *samplers[r].distribution(row, kV, history, 3);
        benchmark::DoNotOptimize(d->draw(samplers[r].next_uniform()));
      }
    }
  }
}

SamplingParams make(float t, int k, float top_p, float min_p, float rep, int logprobs) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = rep;
  p.frequency_penalty = rep != 1.0f ? 0.1f : 0.0f;
  p.presence_penalty = rep != 1.0f ? 0.1f : 0.0f;
  p.logprobs = logprobs;
  p.seed = 1;
  return p;
}

}  // namespace

BENCHMARK_CAPTURE(BM_Sample, greedy, make(0.0f, 0, 1.0f, 0.0f, 1.0f, -1))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temperature, make(0.8f, 0, 1.0f, 0.0f, 1.0f, -1))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_k_40, make(0.8f, 40, 1.0f, 0.0f, 1.0f, -1))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_p_0_95, make(0.8f, 0, 0.95f, 0.0f, 1.0f, -1))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_p_0_95_hot, make(3.0f, 0, 0.95f, 0.0f, 1.0f, -1))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, min_p_0_05, make(0.8f, 0, 1.0f, 0.05f, 1.0f, -1))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, all_with_penalties, make(0.8f, 40, 0.95f, 0.05f, 1.1f, -1))
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_p_with_logprobs_5, make(1.0f, 0, 0.9f, 0.0f, 1.0f, 5))
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_Step64)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
