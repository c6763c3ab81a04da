#include "bench/peak.h"

#include <immintrin.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/packed.h"

namespace cachet::bench {
namespace {

constexpr int kChains = 12;

// Each loop runs kChains independent chains of one instruction, its operands read through volatile (with
// constants the compiler folds the loop away) and every chain feeding the result (else the others are dead
// code). Compiled for the ISA by target attributes (a macro: lambdas would not inherit them), called only after
// the cpuid check. INIT(i) makes chain i's start, STEP(a, b) one instruction.
#define CACHET_PEAK_LOOP(NAME, TARGET, VEC, INIT, STEP)              \
  __attribute__((target(TARGET))) double NAME(int64_t iters) {       \
    VEC a[kChains];                                                  \
    for (int i = 0; i < kChains; ++i) a[i] = INIT(i);                \
    const VEC b = INIT(kChains);                                     \
    for (int64_t k = 0; k < iters; ++k) {                            \
      _Pragma("GCC unroll 12") for (int i = 0; i < kChains; ++i) {   \
        a[i] = STEP(a[i], b);                                        \
      }                                                              \
    }                                                                \
    double r = 0.0;                                                  \
    for (int i = 0; i < kChains; ++i) {                              \
      float out[sizeof(VEC) / 4];                                    \
      std::memcpy(out, &a[i], sizeof(VEC));                          \
      r += out[0];                                                   \
    }                                                                \
    return r;                                                        \
  }

volatile float g_x = 0.9999f, g_c = 1e-4f;
volatile int g_i = 0x01020304;

#define F512(i) _mm512_set1_ps(g_x * static_cast<float>((i) + 1))
#define F256(i) _mm256_set1_ps(g_x * static_cast<float>((i) + 1))
#define I512(i) _mm512_set1_epi32(g_i + (i))
#define I256(i) _mm256_set1_epi32(g_i + (i))
#define FMA512(a, b) _mm512_fmadd_ps(a, b, _mm512_set1_ps(g_c))
#define FMA256(a, b) _mm256_fmadd_ps(a, b, _mm256_set1_ps(g_c))
#define DPBUSD512(a, b) _mm512_dpbusd_epi32(a, b, b)
#define DPBUSD256(a, b) _mm256_dpbusd_avx_epi32(a, b, b)
// The chain runs through vpmaddubsw's own input (its int16 sums read again as bytes): nothing to hoist.
#define MADDUBS256(a, b) _mm256_maddubs_epi16(a, b)
#define DPBF16(a, b) _mm512_dpbf16_ps(a, reinterpret_cast<__m512bh>(b), reinterpret_cast<__m512bh>(b))

CACHET_PEAK_LOOP(fma_zmm, "avx512f", __m512, F512, FMA512)
CACHET_PEAK_LOOP(fma_ymm, "avx2,fma", __m256, F256, FMA256)
CACHET_PEAK_LOOP(dpbusd_zmm, "avx512f,avx512vnni", __m512i, I512, DPBUSD512)
CACHET_PEAK_LOOP(dpbusd_ymm, "avx2,avxvnni", __m256i, I256, DPBUSD256)
CACHET_PEAK_LOOP(maddubs_ymm, "avx2", __m256i, I256, MADDUBS256)
CACHET_PEAK_LOOP(dpbf16_zmm, "avx512f,avx512bf16", __m512, F512, DPBF16)

struct Loop {
  double (*run)(int64_t);
  int macs_per_step;  // multiply-adds of one instruction
};

Loop loop_for(PeakKind kind, Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool zmm = isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16 || isa == Isa::kAmx;
  switch (kind) {
    case PeakKind::kF32:
      if (zmm && f.avx512f) return {fma_zmm, 16};
      if (isa != Isa::kScalar && f.avx2 && f.fma) return {fma_ymm, 8};
      return {nullptr, 0};
    case PeakKind::kInt8:
      if (zmm && f.avx512vnni) return {dpbusd_zmm, 64};
      if (isa == Isa::kAvxVnni && f.avx_vnni) return {dpbusd_ymm, 32};
      if (isa == Isa::kAvx2 && f.avx2) return {maddubs_ymm, 32};
      return {nullptr, 0};
    case PeakKind::kBf16:
      // The AMX table's float path runs on tiles, whose peak this loop does not measure.
      if (isa == Isa::kAvx512Bf16 && f.avx512bf16) return {dpbf16_zmm, 32};
      if (isa == Isa::kAmx) return {nullptr, 0};
      return loop_for(PeakKind::kF32, isa);
  }
  return {nullptr, 0};
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

// Each thread's rate over its own CPU time, summed: the machine is shared, and time a thread spends descheduled
// is not the core's arithmetic (wall time halved it here while other jobs ran).
double peak_macs(PeakKind kind, Isa isa, int threads, int reps) {
  const Loop l = loop_for(kind, isa);
  if (!l.run) return 0.0;
  constexpr int64_t kIters = 20'000'000;
  ThreadPool pool(threads);
  std::vector<double> runs;
  std::vector<double> rate(threads), sink(threads);
  for (int r = 0; r < std::max(1, reps); ++r) {
    pool.parallel_for(threads, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double t0 = thread_cpu_seconds();
        sink[i] += l.run(kIters);
        rate[i] = static_cast<double>(kIters) * kChains * l.macs_per_step / (thread_cpu_seconds() - t0);
      }
    });
    double total = 0.0;
    for (double x : rate) total += x;
    runs.push_back(total);
  }
  if (sink[0] == 12345.0) std::printf(" ");
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

TokenMacs token_macs(const Model& model, Isa isa, bool with_head) {
  const ModelConfig& c = model.config();
  TokenMacs r;
  double by_kind[3] = {0.0, 0.0, 0.0};
  for (const auto& t : model.tensors()) {
    const bool head = t.name == "output.weight" || (t.name == "token_embd.weight" && c.tied_output);
    if ((head && !with_head) || (t.name == "token_embd.weight" && !head) || t.ne[1] <= 1) continue;
    double n = static_cast<double>(t.ne[0]) * t.ne[1] * std::max<int64_t>(1, t.ne[2]);
    if (t.name.find("_exps.") != std::string::npos && c.n_expert > 0) n *= static_cast<double>(c.n_expert_used) / c.n_expert;
    if (t.name.find("ffn_gate_inp") != std::string::npos) n = static_cast<double>(t.ne[0]) * t.ne[1];
    r.macs += n;
    by_kind[static_cast<int>(peak_kind_of(t.type, isa))] += n;
  }
  r.kind = static_cast<PeakKind>(std::max_element(by_kind, by_kind + 3) - by_kind);
  return r;
}

PeakKind peak_kind_of(DType t, Isa isa) {
  if (packed_is_float(t)) return isa == Isa::kAvx512Bf16 || isa == Isa::kAmx ? PeakKind::kBf16 : PeakKind::kF32;
  // Block types without a packed layout are dequantized to f32 and multiplied by f32 FMA.
  return packable(t) ? PeakKind::kInt8 : PeakKind::kF32;
}

}  // namespace cachet::bench
