// Decode attention at depth: the flash-style kernel (16-position tiles, online softmax) against the naive
// one (whole score row, softmax, weighted sum) at 1k and 4k tokens of context, SmolLM2's head layout
// (9 query heads, 3 KV heads, head dim 64), one layer, one thread; and the flash kernel per KV cache type
// (BM_FlashType: f16, q8_0, q4_0, q4r at 16k positions, 30 layers, 2 threads, as a long-context decode step);
// and a prefill's attention at depth (BM_PrefillAttention: a 64-token chunk after 4k-32k positions, causal),
// its FLOPs per second and their share of the table's peak (`peak%`, bench/peak.h: f32 FMA for float keys and
// values, whose dot products are f32 FMAs in every table).
#include <benchmark/benchmark.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "bench/peak.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/ops.h"

using namespace cachet;

namespace {

constexpr int kH = 9, kKH = 3, kD = 64;

struct Setup {
  ModelConfig cfg;
  std::unique_ptr<ContiguousKvCache> cache;
  std::vector<float> q, out;
  // n_head query heads over n_head_kv KV heads of size kD (SmolLM2's 9 / 3 unless given).
  explicit Setup(int n, KvType t = KvType::kF16, int n_head = kH, int n_head_kv = kKH) {
    cfg.n_layer = 1;
    cfg.n_head = n_head;
    cfg.n_head_kv = n_head_kv;
    cfg.head_dim = kD;
    cache = std::make_unique<ContiguousKvCache>(cfg, n, KvTypes(t));
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<float> row(n_head_kv * kD);
    for (int p = 0; p < n; ++p) {
      for (auto& x : row) x = nd(rng);
      kv_quantize_row(t, row.data(), cache->k_row(0, p), n_head_kv * kD, kD);
      kv_quantize_row(t, row.data(), cache->v_row(0, p), n_head_kv * kD, kD);
    }
    q.resize(n_head * kD);
    for (auto& x : q) x = nd(rng);
    out.resize(n_head * kD);
  }
};

// A decode step's attention over n positions, layers' caches of type t visited in turn (30: the KV comes from
// memory rather than L2, as in a decode step; 1: from cache), one token, SmolLM2's head layout.
void run_flash(benchmark::State& st, int n, int threads, int n_layers, KvType t, int n_head = kH,
               int n_head_kv = kKH) {
  std::vector<std::unique_ptr<Setup>> layers;
  for (int l = 0; l < n_layers; ++l) layers.push_back(std::make_unique<Setup>(n, t, n_head, n_head_kv));
  ThreadPool pool(threads);
  size_t li = 0;
  const int32_t pos = n - 1, seq = 0;
  for (auto _ : st) {
    Setup& s = *layers[li++ % layers.size()];
    KvView seqs[] = {s.cache->view()};
    attention(pool, {s.q.data(), s.out.data(), 1, &pos, &seq, seqs, 0, n_head, n_head_kv, kD});
    benchmark::DoNotOptimize(s.out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * n * 2 * kv_row_bytes(t, n_head_kv * kD));
}

// range(0) positions in context, range(1) threads, range(2) 1: 30 layers' caches visited in turn (f16).
void BM_Flash(benchmark::State& st) {
  run_flash(st, static_cast<int>(st.range(0)), static_cast<int>(st.range(1)), st.range(2) ? 30 : 1, KvType::kF16);
}

// range(0) positions, range(1) threads, range(2) the KvType, range(3) layers' caches visited in turn: 30 (from
// memory, as a decode step) or 1 (small enough to stay in L2: the tile kernel's arithmetic alone).
void BM_FlashType(benchmark::State& st) {
  const auto t = static_cast<KvType>(st.range(2));
  st.SetLabel(kv_type_name(t));
  run_flash(st, static_cast<int>(st.range(0)), static_cast<int>(st.range(1)), static_cast<int>(st.range(3)), t);
}

// Llama-3.2-1B's head layout (32 query heads over 8 KV heads: groups of 4), the same ranges as BM_FlashType.
void BM_FlashGroup4(benchmark::State& st) {
  const auto t = static_cast<KvType>(st.range(2));
  st.SetLabel(kv_type_name(t));
  run_flash(st, static_cast<int>(st.range(0)), static_cast<int>(st.range(1)), static_cast<int>(st.range(3)), t, 32,
            8);
}

// A prefill chunk of range(0) = 64 tokens at positions [n - 64, n), n = range(1), each attending causally to
// every position up to its own; Llama-3.2-1B's heads (32 over 8, head dim 64), one layer, range(2) threads,
// KV type range(3). FLOPs: 4 d per (query head, position attended): QK and PV, a multiply and an add each.
void BM_PrefillAttention(benchmark::State& st) {
  const int chunk = static_cast<int>(st.range(0)), n = static_cast<int>(st.range(1));
  const int threads = static_cast<int>(st.range(2));
  const auto t = static_cast<KvType>(st.range(3));
  constexpr int kHeads = 32, kKvHeads = 8;
  st.SetLabel(kv_type_name(t));
  Setup s(n, t, kHeads, kKvHeads);
  std::vector<float> q(static_cast<size_t>(chunk) * kHeads * kD), out(q.size());
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> pos(chunk), seq(chunk, 0);
  double attended = 0.0;
  for (int i = 0; i < chunk; ++i) {
    pos[i] = n - chunk + i;
    attended += pos[i] + 1;
  }
  ThreadPool pool(threads);
  for (auto _ : st) {
    KvView seqs[] = {s.cache->view()};
    attention(pool, {q.data(), out.data(), chunk, pos.data(), seq.data(), seqs, 0, kHeads, kKvHeads, kD});
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * kD * kHeads * attended * static_cast<double>(st.iterations());
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
  const Isa isa = kernels().isa;
  static const double peak = bench::peak_macs(bench::PeakKind::kF32, isa, 1, 3);  // one thread's MAC/s
  if (peak > 0.0)
    st.counters["peak%"] = benchmark::Counter(100.0 * flops / (2.0 * peak * threads), benchmark::Counter::kIsRate);
}

void BM_Naive(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  Setup s(n);
  const Kernels& k = kernels();
  std::vector<float> scores(n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  const KvSpan sp = s.cache->view().span(0, 0, n);
  for (auto _ : st) {
    for (int h = 0; h < kH; ++h) {
      const size_t off = static_cast<size_t>(h / (kH / kKH)) * kD * 2;
      k.kv_scores(DType::kF16, sp.k + off, sp.k_stride, n, s.q.data() + h * kD, kD, scale, scores.data());
      float mx = -std::numeric_limits<float>::infinity(), sum = 0;
      for (float x : scores) mx = std::max(mx, x);
      for (float& x : scores) sum += x = std::exp(x - mx);
      for (float& x : scores) x /= sum;
      std::fill(s.out.begin() + h * kD, s.out.begin() + (h + 1) * kD, 0.0f);
      k.kv_accumulate(DType::kF16, sp.v + off, sp.v_stride, n, scores.data(), kD, s.out.data() + h * kD);
    }
    benchmark::DoNotOptimize(s.out.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * n * 2 * kKH * kD * 2);
}

}  // namespace

BENCHMARK(BM_Flash)->Args({64, 1, 0})->Args({1024, 1, 0})->Args({4096, 1, 0})->Args({1024, 1, 1})->Args({1024, 2, 1})->Args({4096, 2, 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FlashType)
    ->Args({16384, 2, static_cast<int>(KvType::kF16), 30})
    ->Args({16384, 2, static_cast<int>(KvType::kQ8_0), 30})
    ->Args({16384, 2, static_cast<int>(KvType::kQ4_0), 30})
    ->Args({16384, 2, static_cast<int>(KvType::kQ4R), 30})
    ->Args({4096, 2, static_cast<int>(KvType::kF16), 1})
    ->Args({4096, 2, static_cast<int>(KvType::kQ8_0), 1})
    ->Args({4096, 2, static_cast<int>(KvType::kQ4_0), 1})
    ->Args({4096, 2, static_cast<int>(KvType::kQ4R), 1})
    ->Args({4096, 1, static_cast<int>(KvType::kF16), 1})  // one thread: the tile's cost alone, less noise
    ->Args({4096, 1, static_cast<int>(KvType::kQ8_0), 1})
    ->Args({4096, 1, static_cast<int>(KvType::kQ4_0), 1})
    // 1k positions: one layer's K/V fits a 1 MB L2 (Zen 4; 4k of f16 rows is 3 MB), the tile's arithmetic alone.
    ->Args({1024, 1, static_cast<int>(KvType::kF16), 1})
    ->Args({1024, 1, static_cast<int>(KvType::kQ8_0), 1})
    ->Args({1024, 1, static_cast<int>(KvType::kQ4_0), 1})
    // 16k, one thread: from memory (30 layers) and from L3 (one layer, 6.7 MB of q8_0): the walk's memory stalls.
    ->Args({16384, 1, static_cast<int>(KvType::kF16), 30})
    ->Args({16384, 1, static_cast<int>(KvType::kQ8_0), 30})
    ->Args({16384, 1, static_cast<int>(KvType::kF16), 1})
    ->Args({16384, 1, static_cast<int>(KvType::kQ8_0), 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FlashGroup4)
    ->Args({4096, 2, static_cast<int>(KvType::kF16), 16})  // 8.4 MB of f16 K/V a layer, 16 layers: from memory
    ->Args({4096, 2, static_cast<int>(KvType::kQ8_0), 16})
    ->Args({4096, 2, static_cast<int>(KvType::kQ4_0), 16})
    ->Args({1024, 1, static_cast<int>(KvType::kF16), 1})  // 2 MB of f16 K/V: in L2 and L3
    ->Args({1024, 1, static_cast<int>(KvType::kQ8_0), 1})
    ->Args({1024, 1, static_cast<int>(KvType::kQ4_0), 1})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PrefillAttention)
    ->Args({64, 4096, 1, static_cast<int>(KvType::kF16)})
    ->Args({64, 16384, 1, static_cast<int>(KvType::kF16)})
    ->Args({64, 32768, 1, static_cast<int>(KvType::kF16)})
    ->Args({64, 4096, 1, static_cast<int>(KvType::kQ8_0)})
    ->Args({64, 4096, 1, static_cast<int>(KvType::kBF16)})
    ->Args({64, 4096, 1, static_cast<int>(KvType::kF32)})  // the f16 rows' arithmetic without their widening
    ->Args({64, 16384, 1, static_cast<int>(KvType::kQ8_0)})
    ->Args({64, 16384, 2, static_cast<int>(KvType::kF16)})
    ->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Naive)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
