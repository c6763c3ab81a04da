// Kernel micro-benchmarks: matvec (decode) per weight type and GEMM (prefill) on one thread, for every
// kernel table this CPU supports. Bytes/s for matvec (it is bandwidth-bound), FLOP/s for GEMM.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/kernels.h"
#include "kernels/quantize.h"

using namespace cachet;

namespace {

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

int register_all() {
  for (const Kernels* k : supported_kernels()) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
      std::string name = std::string("dot_rows/") + isa_name(k->isa) + "/" + dtype_name(t);
      // A 576x1536 (SmolLM2 FFN) matrix fits L2; 2048x8192 (Llama-3.2-1B FFN) does not.
      benchmark::RegisterBenchmark(name.c_str(), BM_DotRows, k, t)->Args({576, 1536})->Args({2048, 8192});
    }
    std::string name = std::string("gemm_nt/") + isa_name(k->isa);
    benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, k)->Args({64, 64, 576})->Args({128, 64, 2048});
  }
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
