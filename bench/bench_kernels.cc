// Kernel micro-benchmarks: matvec (decode) per weight type and GEMM (prefill) on one thread, for every
// kernel table this CPU supports. Bytes/s for matvec (it is bandwidth-bound), FLOP/s for GEMM; the packed
// matmuls' multiply-adds per second also as a share of the table's peak (`peak%`: bench/peak.h, measured here
// first and printed as peak/<table>/<kind>); activation quantization in floats/s.
#include <benchmark/benchmark.h>

#include <map>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "bench/peak.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/quantize.h"

using namespace cachet;

namespace {

// One thread's peak multiply-adds per second of a kind on a table, measured once (median of 3 runs).
double peak_of(bench::PeakKind kind, Isa isa) {
  static std::map<std::pair<bench::PeakKind, Isa>, double> peaks;
  auto it = peaks.find({kind, isa});
  if (it == peaks.end()) it = peaks.emplace(std::make_pair(kind, isa), bench::peak_macs(kind, isa, 1, 3)).first;
  return it->second;
}

void BM_Peak(benchmark::State& st, bench::PeakKind kind, Isa isa) {
  double macs = 0.0;
  for (auto _ : st) macs = bench::peak_macs(kind, isa, 1, 1);
  st.counters["MAC/s"] = macs;
}

void BM_DotRows(benchmark::State& st, const Kernels* k, DType t) {
  const int64_t K = st.range(0), N = st.range(1);
  const size_t rb = *row_bytes(t, K);
  std::vector<uint8_t> w(rb * N);
  std::vector<float> src(K);
  for (int64_t i = 0; i < K; ++i) src[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (int64_t r = 0; r < N; ++r) (void)quantize_row(t, src.data(), w.data() + r * rb, K);
  std::vector<float> x(src), y(N);
  for (auto _ : st) {
    k->dot_rows(t, w.data(), rb, static_cast<int>(N), x.data(), K, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * rb * N);
}

void BM_Gemm(benchmark::State& st, const Kernels* k) {
  const int M = static_cast<int>(st.range(0)), N = static_cast<int>(st.range(1));
  const int64_t K = st.range(2);
  std::vector<float> a(M * K, 0.5f), b(N * K, 0.25f), c(M * N);
  for (auto _ : st) {
    k->gemm_nt(M, N, K, a.data(), K, b.data(), K, c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * M * N * K * st.iterations(), benchmark::Counter::kIsRate);
}

// The integer path: one thread, a K = 576 x N = 1536 weight (1536 x 576 for the K-quants, whose rows are
// 256-element super-blocks) packed in 16-row groups, n_tokens activation rows; with a second argument C > 1,
// C copies of it walked in turn (C = 64: 40-60 MB, from memory, as a decode or a speculative verify reads);
// third and fourth arguments, when given, K and N instead. Reports integer multiply-adds per second
// (K * N * n_tokens per call).
void BM_PackedDot(benchmark::State& st, const Kernels* k, DType t) {
  const bool kq = traits(t).block_size == 256;
  const int64_t K = st.range(2) ? st.range(2) : kq ? 1536 : 576, N = st.range(3) ? st.range(3) : kq ? 576 : 1536;
  const int n_tokens = static_cast<int>(st.range(0));
  const int64_t copies = st.range(1);
  const size_t rb = *row_bytes(t, K);
  std::vector<uint8_t> w(rb * N);
  std::vector<float> src(K * n_tokens);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (int64_t r = 0; r < N; ++r) (void)quantize_row(t, src.data(), w.data() + r * rb, K);
  const int64_t nb = K / 32, gb = static_cast<int64_t>(packed_group_bytes(t, K, k->float_pack));
  AlignedBuffer<uint8_t> packed(gb * (N / kPackRows) * copies);
  for (int64_t g = 0; g < N / kPackRows; ++g)
    repack_group(t, w.data() + g * kPackRows * rb, rb, kPackRows, K, k->float_pack, packed.data() + g * gb);
  for (int64_t c = 1; c < copies; ++c)
    std::copy(packed.data(), packed.data() + gb * (N / kPackRows), packed.data() + c * gb * (N / kPackRows));
  // 64-byte aligned as the engine's packed weights and activation buffers are (an AMX tile row of 64 bytes then spans one line).
  AlignedBuffer<ActQ8> act(nb * n_tokens);
  AlignedBuffer<uint16_t> act_bf16(K * n_tokens);
  const bool is_float = packed_is_float(t);
  for (int i = 0; i < n_tokens; ++i) {
    if (!is_float) k->quantize_act(src.data() + i * K, K, act_blocks_per_scale(t, k->k_sums), act.data() + i * nb);
    if (is_float) k->round_bf16(src.data() + i * K, K, act_bf16.data() + i * K);
  }
  std::vector<float> y(N * n_tokens);
  for (auto _ : st) {
    for (int64_t gc = 0; gc < N / kPackRows * copies; ++gc) {
      const int64_t g = gc % (N / kPackRows);
      float* out = y.data() + g * kPackRows;
      const uint8_t* grp = packed.data() + gc * gb;
      if (!is_float) {
        k->packed_dot(t, grp, nb, act.data(), nb, n_tokens, out, N);
      } else if (k->float_pack == FloatPack::kHalfRows) {
        k->packed_dot_half(t, grp, K, src.data(), K, n_tokens, out, N);
      } else {
        k->packed_dot_bf16(grp, K / 2, reinterpret_cast<const uint32_t*>(act_bf16.data()), K / 2, n_tokens, out, N);
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double macs = static_cast<double>(K) * N * n_tokens * copies * st.iterations();
  st.counters["MAC/s"] = benchmark::Counter(macs, benchmark::Counter::kIsRate);
  if (const double peak = peak_of(bench::peak_kind_of(t, k->isa), k->isa); peak > 0.0)
    st.counters["peak%"] = benchmark::Counter(100.0 * macs / peak, benchmark::Counter::kIsRate);
}

// The thread pool's dispatch + join: one parallel_for over 2 items doing nothing (the per-matmul overhead a
// decode step pays a few hundred times).
// The gated delta rule on one value head of d = 128 (Qwen3.5): 64 tokens as 64 calls of one token (decode's
// form; the 64 KiB state read and written twice per token, from L2) or as one call of 64 (the prefill form).
// Tokens/s; each token is about 4 d^2 FLOPs.
void BM_DeltaRule(benchmark::State& st, const Kernels* k) {
  constexpr int d = 128, n = 64;
  const bool one_call = st.range(0) != 0;
  std::vector<float> S(d * d, 0.01f), in(static_cast<size_t>(n) * 3 * d), o(static_cast<size_t>(n) * d);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 37) % 101) / 500.0f - 0.1f;
  std::vector<float> decay(n, 0.95f), beta(n, 0.5f);
  for (auto _ : st) {
    if (one_call) {
      k->delta_rule(S.data(), in.data(), in.data() + d, in.data() + 2 * d, 3 * d, decay.data(), beta.data(), o.data(),
                    d, n, d);
    } else {
      for (int t = 0; t < n; ++t) {
        const float* x = in.data() + static_cast<size_t>(t) * 3 * d;
        k->delta_rule(S.data(), x, x + d, x + 2 * d, 0, &decay[t], &beta[t], o.data() + t * d, 0, 1, d);
      }
    }
    benchmark::DoNotOptimize(o.data());
  }
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n) * st.iterations(), benchmark::Counter::kIsRate);
  st.counters["FLOP/s"] =
      benchmark::Counter(4.0 * d * d * n * st.iterations(), benchmark::Counter::kIsRate);
}

// Activation quantization (ActQ8) of 64 rows of K floats, as a 64-sequence decode does before each matmul;
// blocks_per_scale 1 (Q4_0/Q8_0's) or 8 (the K types' super-block grouping). Floats/s.
void BM_QuantizeAct(benchmark::State& st, const Kernels* k) {
  const int64_t K = st.range(0), rows = 64, nb = K / 32;
  const int bps = static_cast<int>(st.range(1));
  std::vector<float> x(K * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  AlignedBuffer<ActQ8> act(nb * rows);
  for (auto _ : st) {
    for (int64_t r = 0; r < rows; ++r) k->quantize_act(x.data() + r * K, K, bps, act.data() + r * nb);
    benchmark::DoNotOptimize(act.data());
  }
  st.counters["floats/s"] =
      benchmark::Counter(static_cast<double>(K) * rows * st.iterations(), benchmark::Counter::kIsRate);
}

void BM_PoolSync(benchmark::State& st) {
  ThreadPool pool(static_cast<int>(st.range(0)));
  int64_t sink = 0;
  for (auto _ : st) {
    pool.parallel_for(pool.n_threads(), [&](int, int64_t b, int64_t e) { benchmark::DoNotOptimize(sink += e - b); });
  }
}
BENCHMARK(BM_PoolSync)->Arg(2)->UseRealTime();

int register_all() {
  for (const Kernels* k : supported_kernels()) {
    for (auto [kind, kname] : {std::pair{bench::PeakKind::kF32, "f32"}, std::pair{bench::PeakKind::kInt8, "int8"},
                               std::pair{bench::PeakKind::kBf16, "bf16"}}) {
      const std::string name = std::string("peak/") + isa_name(k->isa) + "/" + kname;
      benchmark::RegisterBenchmark(name.c_str(), BM_Peak, kind, k->isa)->Iterations(1)->UseRealTime();
    }
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
      std::string name = std::string("dot_rows/") + isa_name(k->isa) + "/" + dtype_name(t);
      // A 576x1536 (SmolLM2 FFN) matrix fits L2; 2048x8192 (Llama-3.2-1B FFN) does not.
      benchmark::RegisterBenchmark(name.c_str(), BM_DotRows, k, t)->Args({576, 1536})->Args({2048, 8192});
    }
    for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K,
                    DType::kQ6_K, DType::kQ3_K, DType::kQ2_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4, DType::kF16, DType::kBF16}) {
      std::string name = std::string("packed_dot/") + isa_name(k->isa) + "/" + dtype_name(t);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_PackedDot, k, t);
      for (auto [n_tokens, copies] : {std::pair{1, 1}, {8, 1}, {16, 1}, {64, 1}, {128, 1}, {1, 64}, {2, 64}, {4, 64},
                                      {5, 64}, {6, 64}, {8, 64}, {9, 64}, {64, 64}})
        b->Args({n_tokens, copies, 0, 0});
      // Llama-3.2-1B's FFN up (2048 -> 8192) and down (8192 -> 2048), 64 tokens (a prefill chunk): weights from
      // L3, activations from L2; the up projection also with 8 and 16 tokens (one and two walks of a group).
      b->Args({64, 1, 2048, 8192})->Args({64, 1, 8192, 2048})->Args({8, 1, 2048, 8192})->Args({16, 1, 2048, 8192});
    }
    const std::string dr = std::string("delta_rule/") + isa_name(k->isa);
    benchmark::RegisterBenchmark(dr.c_str(), BM_DeltaRule, k)->Arg(0)->Arg(1);
    const std::string qa = std::string("quantize_act/") + isa_name(k->isa);
    benchmark::RegisterBenchmark(qa.c_str(), BM_QuantizeAct, k)->Args({576, 1})->Args({1536, 8})->Args({2048, 1});
    std::string name = std::string("gemm_nt/") + isa_name(k->isa);
    benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, k)->Args({64, 64, 576})->Args({128, 64, 2048});
  }
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
