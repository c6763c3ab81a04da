// Every SIMD kernel table against the scalar reference: sizes 0 .. 2x the vector width plus tails,
// misaligned sources and destinations, tolerances derived from the data's norms.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "base/fp16.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"
#include "kv/kv_type.h"
#include "tests/kv_rows.h"
#include "tests/simd_tables.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

using testing::random_floats;
using testing::store_kv_row;

const DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                        DType::kQ5_0, DType::kQ5_1, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                        DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

// Row lengths to test for a type: every length up to 2x the widest vector plus tails for element types,
// 0..4 blocks plus a long row for block types.
std::vector<int64_t> lengths(DType t) {
  std::vector<int64_t> v;
  const int64_t bs = traits(t).block_size;
  if (bs == 1) {
    for (int64_t n = 0; n <= 2 * 16 + 3; ++n) v.push_back(n);
    v.push_back(100);
    v.push_back(577);
  } else {
    for (int64_t b = 0; b <= 4; ++b) v.push_back(b * bs);
    v.push_back(18 * bs);
  }
  return v;
}

// `rows` quantized rows of n elements, starting `misalign` bytes into the returned buffer.
struct QuantRows {
  std::vector<uint8_t> storage;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
};
QuantRows make_rows(DType t, int rows, int64_t n, uint64_t seed, size_t misalign) {
  QuantRows q;
  q.row_bytes = *row_bytes(t, n);
  q.storage.resize(q.row_bytes * rows + misalign + 64);
  auto vals = random_floats(static_cast<size_t>(rows) * n + 1, seed, -2.0f, 2.0f);
  for (int r = 0; r < rows; ++r)
    EXPECT_TRUE(quantize_row(t, vals.data() + r * n, q.storage.data() + misalign + r * q.row_bytes, n).is_ok());
  q.data = q.storage.data() + misalign;
  return q;
}

// Rows in files are aligned to their element (f32: 4, f16/bf16 and the blocks' fp16 scales: 2); the tests
// offset by multiples of that, which misaligns them against every vector width.
size_t natural_align(DType t) { return t == DType::kF32 ? 4 : 2; }

float tol(const float* w, const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(w[i]) * x[i]);
  return static_cast<float>(2e-6 * s + 1e-6);
}

TEST(Kernels, ScalarTableIsAlwaysSupported) {
  auto all = supported_kernels();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front()->isa, Isa::kScalar);
}

TEST(Kernels, DequantizeMatchesScalarBitwise) {
  for (const Kernels* k : simd_tables()) {
    for (DType t : kTypes) {
      for (int64_t n : lengths(t)) {
        for (size_t mis : {0, 1, 3}) {
          QuantRows q = make_rows(t, 1, n, 11 + n, mis * natural_align(t));
          std::vector<float> ref(n + 4, -7.0f), got(n + 4 + mis, -7.0f);
          ref::kKernels.dequantize_row(t, q.data, ref.data(), n);
          k->dequantize_row(t, q.data, got.data() + mis, n);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(f32_to_bits(ref[i]), f32_to_bits(got[mis + i]))
                << isa_name(k->isa) << " " << dtype_name(t) << " n=" << n << " i=" << i;
          EXPECT_EQ(got[mis + n], -7.0f) << "wrote past the end";
        }
      }
    }
  }
}

TEST(Kernels, DotRowsMatchesScalar) {
  for (const Kernels* k : simd_tables()) {
    for (DType t : kTypes) {
      for (int64_t n : lengths(t)) {
        for (int rows : {1, 3, 4, 7}) {
          QuantRows q = make_rows(t, rows, n, 5 + n, (n % 3) * natural_align(t));
          auto xs = random_floats(n + 3, 99 + n);
          const float* x = xs.data() + (n % 3);  // misaligned activations
          std::vector<float> ref(rows), got(rows);
          ref::kKernels.dot_rows(t, q.data, q.row_bytes, rows, x, n, ref.data());
          k->dot_rows(t, q.data, q.row_bytes, rows, x, n, got.data());
          std::vector<float> w(n);
          for (int r = 0; r < rows; ++r) {
            ref::kKernels.dequantize_row(t, q.data + r * q.row_bytes, w.data(), n);
            ASSERT_NEAR(got[r], ref[r], tol(w.data(), x, n))
                << isa_name(k->isa) << " " << dtype_name(t) << " n=" << n << " row " << r;
          }
        }
      }
    }
  }
}

// The batch-invariance contract: gemm over dequantized rows == dot_rows, bit for bit, for any m and n.
TEST(Kernels, GemmEqualsDotRowsBitwise) {
  for (const Kernels* k : supported_kernels()) {
    for (DType t : kTypes) {
      for (int64_t K : {static_cast<int64_t>(traits(t).block_size * 3), int64_t{64 * 9}}) {
        if (K % traits(t).block_size) continue;
        const int N = 11, M = 9;
        QuantRows q = make_rows(t, N, K, 3 + K, 0);
        std::vector<float> wf(static_cast<size_t>(N) * K);
        for (int j = 0; j < N; ++j) k->dequantize_row(t, q.data + j * q.row_bytes, wf.data() + j * K, K);
        auto x = random_floats(static_cast<size_t>(M) * K, 77);
        for (int m = 1; m <= M; m += 2) {
          std::vector<float> c(static_cast<size_t>(m) * N);
          k->gemm_nt(m, N, K, x.data(), K, wf.data(), K, c.data(), N);
          for (int i = 0; i < m; ++i) {
            std::vector<float> d(N);
            k->dot_rows(t, q.data, q.row_bytes, N, x.data() + i * K, K, d.data());
            for (int j = 0; j < N; ++j)
              ASSERT_EQ(f32_to_bits(c[i * N + j]), f32_to_bits(d[j]))
                  << isa_name(k->isa) << " " << dtype_name(t) << " K=" << K << " m=" << m << " (" << i << ","
                  << j << ")";
          }
        }
      }
    }
  }
}

TEST(Kernels, GemmMatchesScalar) {
  for (const Kernels* k : simd_tables()) {
    for (int m : {0, 1, 2, 3, 4, 5, 9}) {
      for (int n : {0, 1, 4, 5, 13}) {
        for (int64_t K : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{35}, int64_t{128}}) {
          auto a = random_floats(static_cast<size_t>(m) * (K + 1) + 1, 1 + m);
          auto b = random_floats(static_cast<size_t>(n) * (K + 2) + 1, 2 + n);
          std::vector<float> ref(static_cast<size_t>(m) * n + 1), got(static_cast<size_t>(m) * n + 1);
          // Strides larger than K and misaligned bases.
          ref::kKernels.gemm_nt(m, n, K, a.data() + 1, K + 1, b.data() + 1, K + 2, ref.data(), n);
          k->gemm_nt(m, n, K, a.data() + 1, K + 1, b.data() + 1, K + 2, got.data(), n);
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j)
              ASSERT_NEAR(got[i * n + j], ref[i * n + j],
                          tol(a.data() + 1 + i * (K + 1), b.data() + 1 + j * (K + 2), K))
                  << isa_name(k->isa) << " m=" << m << " n=" << n << " K=" << K;
        }
      }
    }
  }
}

TEST(Kernels, KvKernelsMatchScalar) {
  for (const Kernels* k : simd_tables()) {
    for (DType t : {DType::kF32, DType::kF16}) {
      const size_t elem = t == DType::kF32 ? 4 : 2;
      for (int d : {1, 7, 8, 15, 16, 17, 33, 64, 128}) {
        for (int n : {0, 1, 5, 40}) {
          const size_t stride = (d + 3) * elem;  // rows padded, like several heads in one row
          std::vector<uint8_t> cache(stride * (n + 1) + 16);
          auto vals = random_floats(static_cast<size_t>(d) * (n + 1), 3 + d);
          uint8_t* base = cache.data() + elem;  // misaligned by one element
          for (int i = 0; i < n; ++i) {
            std::vector<uint8_t> ref_row(d * elem), got_row(d * elem);
            ref::kKernels.kv_store(t, vals.data() + i * d, ref_row.data(), d);
            k->kv_store(t, vals.data() + i * d, got_row.data(), d);
            ASSERT_EQ(0, std::memcmp(ref_row.data(), got_row.data(), d * elem)) << "kv_store d=" << d;
            std::memcpy(base + i * stride, got_row.data(), d * elem);
          }
          auto q = random_floats(d + 1, 5);
          std::vector<float> rs(n + 1), gs(n + 1);
          ref::kKernels.kv_scores(t, base, stride, n, q.data() + 1, d, 0.125f, rs.data());
          k->kv_scores(t, base, stride, n, q.data() + 1, d, 0.125f, gs.data());
          for (int i = 0; i < n; ++i) ASSERT_NEAR(gs[i], rs[i], 1e-5f * d) << "kv_scores d=" << d;
          auto p = random_floats(n + 1, 9, 0.0f, 1.0f);
          std::vector<float> ro(d + 1, 0.5f), go(d + 1, 0.5f);
          ref::kKernels.kv_accumulate(t, base, stride, n, p.data(), d, ro.data());
          k->kv_accumulate(t, base, stride, n, p.data(), d, go.data());
          for (int j = 0; j <= d; ++j) ASSERT_NEAR(go[j], ro[j], 1e-5f * (n + 1)) << "kv_accumulate d=" << d;
        }
      }
    }
  }
}

TEST(Kernels, AttnTileMatchesScalar) {
  // Several tiles in a row per case, so the running max, the correction and the sums are all exercised;
  // float rows padded and misaligned by one element; block rows (Q8_0, Q4_0: whole blocks) padded by a block.
  const std::pair<DType, DType> pairs[] = {{DType::kF32, DType::kF32},   {DType::kF16, DType::kF16},
                                           {DType::kBF16, DType::kBF16}, {DType::kQ8_0, DType::kQ8_0},
                                           {DType::kQ4_0, DType::kQ4_0}, {DType::kQ8_0, DType::kQ4_0},
                                           {DType::kIQ4_NL, DType::kIQ4_NL}, {DType::kQ8_0, DType::kIQ4_NL}};
  for (const Kernels* k : simd_tables()) {
    for (auto [tk, tv] : pairs) {
      ASSERT_TRUE(attn_tile_reads(tk, tv));
      const bool blocks = attn_integer_keys(tk);  // block rows: whole blocks, integer Q.K
      for (int d : {1, 7, 8, 16, 17, 32, 33, 64, 80, 96, 128, 512, 576}) {  // 96: 2 + 1 value blocks per pass
        if (blocks && d % 32 != 0) continue;
        for (int group : {1, 3, 4}) {
          for (int n : {1, 5, 8, 15, 16}) {
           for (float cap : {0.0f, 1.5f}) {  // without and with soft-capping (cap below the scores' range)
            auto row_bytes_of = [&](DType t) {
              if (t == DType::kQ8_0) return static_cast<size_t>(d / 32 + 1) * 34;
              if (t == DType::kQ4_0 || t == DType::kIQ4_NL) return static_cast<size_t>(d / 32 + 1) * 18;
              return static_cast<size_t>(d + 3) * (t == DType::kF32 ? 4 : 2);
            };
            const size_t ks = row_bytes_of(tk), vs = row_bytes_of(tv);
            const size_t ke = blocks ? 0 : (tk == DType::kF32 ? 4 : 2), ve = blocks ? 0 : (tv == DType::kF32 ? 4 : 2);
            const int tiles = 3;
            std::vector<uint8_t> kc(ks * n * tiles + 16), vc(vs * n * tiles + 16);
            auto kv = random_floats(static_cast<size_t>(d) * n * tiles * 2, 11 + d + n);
            uint8_t* kb = kc.data() + ke;
            uint8_t* vb = vc.data() + ve;
            auto store = [&](DType t, const float* x, uint8_t* dst) { store_kv_row(t, x, dst, d); };
            for (int i = 0; i < n * tiles; ++i) {
              store(tk, kv.data() + static_cast<size_t>(i) * d, kb + i * ks);
              store(tv, kv.data() + static_cast<size_t>(n * tiles + i) * d, vb + i * vs);
            }
            auto q = random_floats(static_cast<size_t>(group) * d, 17 + group, -3.0f, 3.0f);
            std::vector<ActQ8> qq(blocks ? static_cast<size_t>(group) * d / 16 : 0);
            if (blocks) quantize_query(q.data(), group * d, qq.data());
            const float inf = std::numeric_limits<float>::infinity();
            std::vector<float> rm(group, -inf), gm(group, -inf), rl(group, 0), gl(group, 0);
            std::vector<float> ra(static_cast<size_t>(group) * d, 0), ga(ra);
            for (int tile = 0; tile < tiles; ++tile) {
              const size_t ko = static_cast<size_t>(tile) * n * ks, vo = static_cast<size_t>(tile) * n * vs;
              ref::kKernels.attn_tile(tk, tv, kb + ko, ks, vb + vo, vs, n, q.data(), qq.data(), group, d, 0.3f, cap,
                                      rm.data(), rl.data(), ra.data());
              k->attn_tile(tk, tv, kb + ko, ks, vb + vo, vs, n, q.data(), qq.data(), group, d, 0.3f, cap, gm.data(),
                           gl.data(), ga.data());
            }
            // Block-quantized values: the AVX-512 tables round each row's weight to 15 bits per tile and block
            // (x86/attn_values_int.inc), so their outputs move by about 2^-15 sqrt(rows) max|v| more.
            float tol = 2e-5f;
            if (attn_integer_keys(tv) && k->isa >= Isa::kAvx512) {
              float vmax = 0;
              for (size_t i = static_cast<size_t>(d) * n * tiles; i < kv.size(); ++i) vmax = std::max(vmax, std::fabs(kv[i]));
              tol += std::ldexp(1.0f, -15) * std::sqrt(static_cast<float>(n * tiles)) * vmax;
            }
            // A score's rounding grows with the dot product's length (the sums' order differs from the reference's).
            const float rel = 1e-5f * std::max(1.0f, d / 256.0f);
            for (int g = 0; g < group; ++g) {
              ASSERT_NEAR(gm[g], rm[g], rel * std::max(1.0f, std::fabs(rm[g]))) << "d=" << d << " n=" << n;
              ASSERT_NEAR(gl[g], rl[g], rel * rl[g]) << dtype_name(tk) << " d=" << d << " n=" << n;
              for (int j = 0; j < d; ++j) {
                const size_t x = static_cast<size_t>(g) * d + j;
                ASSERT_NEAR(ga[x] / gl[g], ra[x] / rl[g], tol)
                    << isa_name(k->isa) << " " << dtype_name(tk) << "/" << dtype_name(tv) << " d=" << d << " n=" << n
                    << " cap=" << cap;
              }
              if (cap != 0.0f) ASSERT_LE(rm[g], cap);  // the cap holds
              // Integer Q.K: every table forms the scores with the scalar reference's operations, so the running
              // max (the largest score) is the same float.
              if (blocks && cap == 0.0f) ASSERT_EQ(gm[g], rm[g]) << isa_name(k->isa) << " d=" << d << " n=" << n;
            }
           }
          }
        }
      }
    }
  }
}

// A tile's query heads are split into passes that share each K and V row (up to 3 or 4 heads a pass, by the
// table's registers); every head's running max, sum and output must be the bits it gets alone.
TEST(Kernels, AttnTileHeadsDoNotDependOnTheirGroup) {
  const std::pair<DType, DType> pairs[] = {{DType::kF16, DType::kF16}, {DType::kF32, DType::kF32},
                                           {DType::kQ8_0, DType::kQ8_0}, {DType::kQ4_0, DType::kQ4_0},
                                           {DType::kQ8_0, DType::kIQ4_NL}};
  std::vector<const Kernels*> tables = simd_tables();
  tables.push_back(&ref::kKernels);
  for (const Kernels* k : tables) {
    for (auto [tk, tv] : pairs) {
      const bool blocks = attn_integer_keys(tk);
      for (int d : {64, 96}) {
        const size_t ks = blocks ? (tk == DType::kQ8_0 ? 34u : 18u) * (d / 32) : d * (tk == DType::kF32 ? 4u : 2u);
        const size_t vs = blocks ? (tv == DType::kQ8_0 ? 34u : 18u) * (d / 32) : d * (tv == DType::kF32 ? 4u : 2u);
        for (int n : {16, 11}) {
          std::vector<uint8_t> kc(ks * n * 2), vc(vs * n * 2);
          auto kv = random_floats(static_cast<size_t>(d) * n * 4, 5 + d + n);
          auto store = [&](DType t, const float* x, uint8_t* dst) { store_kv_row(t, x, dst, d); };
          for (int i = 0; i < n * 2; ++i) {
            store(tk, kv.data() + static_cast<size_t>(i) * d, kc.data() + i * ks);
            store(tv, kv.data() + static_cast<size_t>(n * 2 + i) * d, vc.data() + i * vs);
          }
          for (int group = 2; group <= 8; ++group) {
            auto q = random_floats(static_cast<size_t>(group) * d, 29 + group, -3.0f, 3.0f);
            std::vector<ActQ8> qq(blocks ? static_cast<size_t>(group) * d / 16 : 1);
            if (blocks) quantize_query(q.data(), group * d, qq.data());
            const float inf = std::numeric_limits<float>::infinity();
            std::vector<float> gm(group, -inf), gl(group, 0), ga(static_cast<size_t>(group) * d, 0);
            for (int tile = 0; tile < 2; ++tile)
              k->attn_tile(tk, tv, kc.data() + tile * n * ks, ks, vc.data() + tile * n * vs, vs, n, q.data(),
                           qq.data(), group, d, 0.3f, 0.0f, gm.data(), gl.data(), ga.data());
            for (int h = 0; h < group; ++h) {
              float m = -inf, l = 0;
              std::vector<float> a(d, 0);
              for (int tile = 0; tile < 2; ++tile)
                k->attn_tile(tk, tv, kc.data() + tile * n * ks, ks, vc.data() + tile * n * vs, vs, n,
                             q.data() + static_cast<size_t>(h) * d, qq.data() + (blocks ? h * d / 16 : 0), 1, d, 0.3f,
                             0.0f, &m, &l, a.data());
              const std::string what = std::string(isa_name(k->isa)) + " " + dtype_name(tk) + "/" + dtype_name(tv) +
                                       " d=" + std::to_string(d) + " n=" + std::to_string(n) +
                                       " group=" + std::to_string(group) + " head=" + std::to_string(h);
              ASSERT_EQ(gm[h], m) << what;
              ASSERT_EQ(gl[h], l) << what;
              for (int j = 0; j < d; ++j) ASSERT_EQ(ga[static_cast<size_t>(h) * d + j], a[j]) << what << " j=" << j;
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, AttnTileExpIsAccurate) {
  // The vector exponential inside attn_tile, seen through a one-position tile per score: with a single
  // position, p = e^(s - m') with m' the running max, so feeding a first tile with a large score and then
  // one position of score s gives l = 1 + e^(s - s0).
  for (const Kernels* k : simd_tables()) {
    const float q = 1.0f;
    for (float s : {0.0f, -1e-3f, -0.5f, -1.0f, -10.0f, -50.0f, -87.0f, -87.5f, -100.0f, -1e30f}) {
      float kk[2] = {0.0f, s}, vv[2] = {0.0f, 0.0f};
      float m = -std::numeric_limits<float>::infinity(), l = 0, acc = 0;
      k->attn_tile(DType::kF32, DType::kF32, &kk[0], sizeof(float), &vv[0], sizeof(float), 1, &q, nullptr, 1, 1,
                   1.0f, 0.0f, &m, &l, &acc);
      k->attn_tile(DType::kF32, DType::kF32, &kk[1], sizeof(float), &vv[1], sizeof(float), 1, &q, nullptr, 1, 1,
                   1.0f, 0.0f, &m, &l, &acc);
      const float want = std::exp(s);
      const float got = l - 1.0f;
      if (want < 1e-37f) {
        ASSERT_LE(got, 1.2e-38f) << s;  // flushed below ln(2^-126), never garbage
      } else {
        ASSERT_NEAR(got, want, 3e-7f * std::max(want, 1.0f) + 1e-7f) << isa_name(k->isa) << " s=" << s;
      }
    }
  }
}

TEST(Kernels, SiluMulMatchesScalar) {
  for (const Kernels* k : simd_tables()) {
    for (int n : {0, 1, 7, 15, 16, 17, 33, 100}) {
      auto g = random_floats(n + 1, 21 + n, -12.0f, 12.0f);
      auto u = random_floats(n + 1, 22 + n, -2.0f, 2.0f);
      if (n > 3) g[1] = -100.0f, g[2] = 100.0f, g[3] = -1e30f;  // saturated tails, both sides
      std::vector<float> rg(g), gg(g);
      ref::kKernels.silu_mul(rg.data() + 1, u.data() + 1, n);
      k->silu_mul(gg.data() + 1, u.data() + 1, n);
      ASSERT_EQ(gg[0], g[0]);  // nothing before the range is touched
      for (int i = 1; i <= n; ++i)
        ASSERT_NEAR(gg[i], rg[i], 1e-6f * std::max(1.0f, std::fabs(rg[i]))) << isa_name(k->isa) << " g=" << g[i];
    }
  }
}

TEST(Kernels, GeluMulMatchesScalarAndTheTanhForm) {
  for (const Kernels* k : supported_kernels()) {
    for (int n : {0, 1, 7, 15, 16, 17, 33, 100}) {
      auto g = random_floats(n + 1, 31 + n, -8.0f, 8.0f);
      auto u = random_floats(n + 1, 32 + n, -2.0f, 2.0f);
      if (n > 3) g[1] = -100.0f, g[2] = 100.0f, g[3] = -1e30f;
      std::vector<float> rg(g), gg(g);
      ref::kKernels.gelu_mul(rg.data() + 1, u.data() + 1, n);
      k->gelu_mul(gg.data() + 1, u.data() + 1, n);
      ASSERT_EQ(gg[0], g[0]);
      for (int i = 1; i <= n; ++i) {
        // The textbook form, in double.
        const double x = g[i];
        const double want = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
        const double tol = 2e-6 * std::max(1.0, std::fabs(want));
        ASSERT_NEAR(gg[i], rg[i], 1e-6f * std::max(1.0f, std::fabs(rg[i]))) << isa_name(k->isa) << " g=" << g[i];
        if (std::fabs(x) < 1e6) ASSERT_NEAR(gg[i], want, tol) << isa_name(k->isa) << " g=" << g[i];
      }
    }
  }
}

// A softmax's exponentials and their sum (the vision encoders' attention): every table against e^x in double,
// values far below the shift (0 past e^-87.3) and tails of every length; the bytes past the range untouched.
TEST(Kernels, ExpSumMatchesExpInDouble) {
  for (const Kernels* k : supported_kernels()) {
    for (int n : {0, 1, 7, 15, 16, 17, 33, 100, 1000}) {
      auto x = random_floats(n + 2, 41 + n, -30.0f, 5.0f);
      if (n > 3) x[1] = -1e30f, x[2] = -200.0f;
      std::vector<float> y(x);
      const float shift = 4.5f;
      const float sum = k->exp_sum(y.data() + 1, n, shift);
      ASSERT_EQ(y[0], x[0]);
      ASSERT_EQ(y[static_cast<size_t>(n) + 1], x[static_cast<size_t>(n) + 1]);
      double want_sum = 0;
      for (int i = 1; i <= n; ++i) {
        const float d = x[i] - shift;  // the difference in float, as the tables take it
        const double want = d < -87.33654f ? 0.0 : std::exp(static_cast<double>(d));
        want_sum += y[i];
        ASSERT_NEAR(y[i], want, 4e-7 * std::max(want, 1e-30)) << isa_name(k->isa) << " x=" << x[i];
      }
      ASSERT_NEAR(sum, want_sum, 1e-6 * std::max(want_sum, 1.0)) << isa_name(k->isa) << " n=" << n;
    }
  }
}

TEST(Quantize, RoundTripErrorIsBounded) {
  auto x = random_floats(32 * 64, 3);
  for (DType t : kTypes) {
    std::vector<uint8_t> q(*row_bytes(t, x.size()));
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), x.size()).is_ok());
    std::vector<float> y(x.size());
    ref::kKernels.dequantize_row(t, q.data(), y.data(), y.size());
    // Half a quantization step for values in [-1, 1] (Q4_0: a whole step where the top level is clamped).
    float bound = 0.0f;
    switch (t) {
      case DType::kF16: bound = 1.0f / 2048; break;
      case DType::kBF16: bound = 1.0f / 256; break;
      case DType::kQ8_0: bound = 1.0f / 254 * 1.15f; break;  // + the fp16 rounding of the scale
      case DType::kQ4_0: bound = 1.0f / 8; break;
      case DType::kQ4_1: bound = 1.0f / 15; break;
      case DType::kQ5_0: bound = 1.0f / 16; break;
      case DType::kQ5_1: bound = 1.0f / 31; break;
      default: break;
    }
    if (t == DType::kMXFP4) {
      // E2M1's levels at d = 2^-3 (largest |x| just under 1): steps of d up to 4d, of 2d up to 8d, so on uniform
      // values the RMS error is sqrt((d^2 / 12 + (2d)^2 / 12) / 2); held to within 10% of it.
      const double d = 0.125, rms = std::sqrt((d * d / 12 + 4 * d * d / 12) / 2);
      double se = 0;
      for (size_t i = 0; i < x.size(); ++i) se += (x[i] - y[i]) * (x[i] - y[i]);
      EXPECT_LE(std::sqrt(se / x.size()), 1.1 * rms);
      continue;
    }
    if (traits(t).block_size == 256 || t == DType::kIQ4_NL) {
      // K-quants: the 6/8-bit sub-block scales make the worst case loose; hold the RMS error instead, to
      // within 25% of a uniform quantizer's over [-1, 1] with 2^bits levels (step^2 / 12). IQ4_*: 16 levels
      // denser near 0 (for Gaussian weights), held to the same bound on these uniform values.
      const int bits = t == DType::kQ3_K ? 3 : t == DType::kQ4_K || t == DType::kIQ4_NL || t == DType::kIQ4_XS ? 4
                       : t == DType::kQ5_K ? 5 : 6;
      const double step = 2.0 / ((1 << bits) - 1);
      double se = 0;
      for (size_t i = 0; i < x.size(); ++i) se += (x[i] - y[i]) * (x[i] - y[i]);
      EXPECT_LE(std::sqrt(se / x.size()), 1.25 * step / std::sqrt(12.0)) << dtype_name(t);
      continue;
    }
    for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::fabs(x[i] - y[i]), bound * 1.05f) << dtype_name(t);
  }
  EXPECT_FALSE(quantize_row(DType::kQ4_0, x.data(), nullptr, 31).is_ok());
}

}  // namespace
}  // namespace cachet

namespace cachet {
namespace {

// The integer path: SIMD == scalar bit for bit, and the scalar one == the plain dot product of the
// dequantized weights with the dequantized activations (up to float rounding).
TEST(PackedKernels, QuantizeActIsBitwiseAcrossTables) {
  for (int bps : {1, 8}) {
    for (int64_t n : {256, 512, 32 * 18 * 8}) {
      auto x = random_floats(n, 21 + n, -3.0f, 3.0f);
      x[5] = 0.0f;
      // One large value (under bps 8 the first super-block's scale is its alone) and blocks far below it.
      for (int64_t i = 32; i < 64; ++i) x[i] *= 0.6f;
      for (int64_t i = 64; i < 96; ++i) x[i] *= 0.05f;
      x[10] = 7.5f;
      bool seen[4] = {};
      std::vector<float> zeros(32 * bps, 0.0f);
      std::vector<ActQ8> ref(n / 32), got(n / 32);
      ref::kKernels.quantize_act(x.data(), n, bps, ref.data());
      for (const Kernels* k : simd_tables()) {
        k->quantize_act(x.data(), n, bps, got.data());
        ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(ActQ8))) << isa_name(k->isa) << " " << bps;
        std::vector<ActQ8> z(bps);
        k->quantize_act(zeros.data(), 32 * bps, bps, z.data());
        EXPECT_EQ(z[0].d, 0.0f);
        EXPECT_EQ(z[0].sum, 0);
      }
      for (size_t b = 0; b < ref.size(); ++b) {
        // One scale per block (bps 1: its largest |x| becomes 127), or per run of 8 blocks the largest block's,
        // the others' that divided by the largest power of two up to 8 that keeps their quants within 127.
        float amax = 0.0f, block = 0.0f;
        const size_t b0 = b / bps * bps;
        for (size_t i = b0 * 32; i < (b0 + bps) * 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        for (size_t i = b * 32; i < b * 32 + 32; ++i) block = std::max(block, std::fabs(x[i]));
        const int k = ref[b].shift;
        ASSERT_LE(k, bps == 1 ? 0 : 3);
        EXPECT_EQ(ref[b].d, amax / 127.0f / static_cast<float>(1 << (bps == 1 ? 0 : 3 - k))) << b;
        if (bps == 8 && k > 0) EXPECT_GT(block, amax / static_cast<float>(1 << (4 - k))) << b;  // no finer fits
        seen[k] = true;
        if (bps == 8 && k < 3) EXPECT_LE(block, amax / static_cast<float>(1 << (3 - k))) << b;
        int32_t s = 0;
        for (int i = 0; i < 32; ++i) {
          s += ref[b].q[i];
          EXPECT_NEAR(ref[b].q[i] * ref[b].d, x[b * 32 + i], ref[b].d * 0.5f + 1e-7f);
        }
        EXPECT_EQ(s, ref[b].sum);
        int32_t lo = 0;
        for (int i = 0; i < 16; ++i) lo += ref[b].q[i];
        EXPECT_EQ(lo, ref[b].hsum[0]);
        EXPECT_EQ(s - lo, ref[b].hsum[1]);
      }
      if (bps == 8) EXPECT_TRUE(seen[0] && seen[1] && seen[2] && seen[3]) << "every shift exercised, n=" << n;
    }
  }
}

// MXFP4's E8M0 block scale 2^(e-128) in the packed layout's f16: exact over 104..143 (packed.h), where the
// weights of real models' blocks lie; held in range beyond, never inf.
TEST(PackedKernels, Mxfp4PackedScaleIsExactWhereF16HoldsIt) {
  for (int e = 0; e < 256; ++e) {
    const float packed = fp16_to_f32(mxfp4_packed_scale(static_cast<uint8_t>(e)));
    if (e >= 104 && e <= 143) ASSERT_EQ(packed, std::ldexp(1.0f, e - 128)) << e;
    else ASSERT_TRUE(std::isfinite(packed) && packed <= 32768.0f && packed >= 0.0f) << e;
    ASSERT_EQ(mxfp4_scale(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128)) << e;
  }
}

// Each table against the scalar reference of its own arithmetic (KSums), and both references against the plain
// dot product of the dequantized operands.
TEST(PackedKernels, PackedDotMatchesScalarBitwiseAndTheDequantizedDot) {
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4}) {
    const bool kq = traits(t).block_size == 256;
    // 2304 and 2080: rows longer than a decode walk's prefetch distance (4 KiB), 65 blocks an odd count.
    for (int64_t K : kq ? std::vector<int64_t>{256, 512, 1536, 2304} : std::vector<int64_t>{32, 96, 576, 2080}) {
      for (int rows : {16, 5}) {
        const int64_t nb = K / 32;
        QuantRows q = make_rows(t, rows, K, 40 + K + rows, 0);
        std::vector<uint8_t> group(packed_group_bytes(t, K, FloatPack::kHalfRows));
        repack_group(t, q.data, q.row_bytes, rows, K, FloatPack::kHalfRows, group.data());
        const int T = 37;
        auto x = random_floats(T * K, 8 + K, -2.0f, 2.0f);
        for (int i = 0; i < T; ++i) x[i * K + (i * 37) % K] = 6.0f;  // activation outliers, as real ones have
        for (KSums sums : {KSums::kPerBlock, KSums::kPerSuper}) {
          if (sums == KSums::kPerSuper && !kq) continue;
          const int bps = act_blocks_per_scale(t, sums);
          std::vector<ActQ8> act(T * nb);
          for (int tok = 0; tok < T; ++tok) ref::kKernels.quantize_act(x.data() + tok * K, K, bps, act.data() + tok * nb);
          std::vector<float> ref(T * kPackRows);
          if (super_sums(t, sums)) ref::packed_dot_super(t, group.data(), nb, act.data(), nb, T, ref.data(), kPackRows);
          else ref::kKernels.packed_dot(t, group.data(), nb, act.data(), nb, T, ref.data(), kPackRows);
          // Against the plain dot of dequantized operands.
          std::vector<float> w(K), xa(K);
          for (int tok = 0; tok < T; ++tok) {
            for (int64_t b = 0; b < nb; ++b)
              for (int i = 0; i < 32; ++i) xa[b * 32 + i] = act[tok * nb + b].q[i] * act[tok * nb + b].d;
            for (int r = 0; r < kPackRows; ++r) {
              double want = 0;
              if (r < rows) {
                ref::kKernels.dequantize_row(t, q.data + r * q.row_bytes, w.data(), K);
                for (int64_t i = 0; i < K; ++i) want += static_cast<double>(w[i]) * xa[i];
              }
              ASSERT_NEAR(ref[tok * kPackRows + r], want, 1e-4 * K)
                  << dtype_name(t) << " K=" << K << " row " << r << " tok " << tok << " bps " << bps;
            }
          }
          for (const Kernels* k : simd_tables()) {
            if (act_blocks_per_scale(t, k->k_sums) != bps) continue;
            // Every walk width (even_walks: 17 = 6 + 6 + 5) and runs of several walks (37: 8 + 8 + 7 + 7 + 7).
            for (int nt : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 19, 32, 37}) {
              std::vector<float> got(T * kPackRows, -1.0f);
              k->packed_dot(t, group.data(), nb, act.data(), nb, nt, got.data(), kPackRows);
              ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), nt * kPackRows * sizeof(float)))
                  << isa_name(k->isa) << " " << dtype_name(t) << " K=" << K << " nt=" << nt;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cachet

namespace cachet {
namespace {

// got[tok * 16 + r] (a packed float dot of `rows` rows of q and T rows of x) against the double-precision dot of
// the operands as the kernel sees them (`as_seen`: the bf16 rounding, or none), within the f32 chains' rounding.
template <class F>
void expect_double_dot(const std::vector<float>& got, const QuantRows& q, DType t, int rows, int64_t K, int T,
                       const float* x, F as_seen, double rel = 1e-6) {
  std::vector<float> w(K);
  for (int tok = 0; tok < T; ++tok)
    for (int r = 0; r < kPackRows; ++r) {
      double want = 0, mag = 0;
      if (r < rows) {
        ref::kKernels.dequantize_row(t, q.data + r * q.row_bytes, w.data(), K);
        for (int64_t i = 0; i < K; ++i) {
          const double p = static_cast<double>(as_seen(w[i])) * as_seen(x[tok * K + i]);
          want += p;
          mag += std::fabs(p);
        }
      }
      ASSERT_NEAR(got[tok * kPackRows + r], want, rel * mag + 1e-7) << dtype_name(t) << " K=" << K << " token " << tok;
    }
}

// Packed float weights (bf16 pairs): SIMD == scalar bit for bit for every token count and length (odd k pads a
// pair, tails of the two chains), and the scalar one == the double-precision dot of the bf16-rounded values.
TEST(PackedKernels, PackedBf16DotMatchesScalarBitwiseAndDouble) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (int64_t K : {1, 2, 3, 4, 5, 64, 577}) {
      for (int rows : {16, 7}) {
        QuantRows q = make_rows(t, rows, K, 90 + K + rows, 0);
        std::vector<uint8_t> group(packed_group_bytes(t, K, FloatPack::kBf16Pairs));
        repack_group(t, q.data, q.row_bytes, rows, K, FloatPack::kBf16Pairs, group.data());
        const int T = 13;
        const int64_t np = (K + 1) / 2;
        auto x = random_floats(T * K, 5 + K, -2.0f, 2.0f);
        std::vector<uint16_t> xb(T * np * 2, 0);
        for (int tok = 0; tok < T; ++tok) ref::kKernels.round_bf16(x.data() + tok * K, K, xb.data() + tok * np * 2);
        const auto* xp = reinterpret_cast<const uint32_t*>(xb.data());
        std::vector<float> ref(T * kPackRows);
        ref::kKernels.packed_dot_bf16(group.data(), np, xp, np, T, ref.data(), kPackRows);
        expect_double_dot(ref, q, t, rows, K, T, x.data(),
                          [](float v) { return bf16_to_f32(f32_to_bf16_daz(v)); });
        for (const Kernels* k : simd_tables())
          for (int nt : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13}) {
            if (k->isa == Isa::kAmx) continue;  // its own order: PackedBf16DotAmx
            std::vector<float> got(T * kPackRows, -1.0f);
            k->packed_dot_bf16(group.data(), np, xp, np, nt, got.data(), kPackRows);
            ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), nt * kPackRows * sizeof(float)))
                << isa_name(k->isa) << " " << dtype_name(t) << " K=" << K << " nt=" << nt;
          }
      }
    }
  }
}

// The AMX table's bf16 pairs: the tiles sum in their own order, so == the double-precision dot of the bf16-rounded
// values within 1e-6 of the sum of |products| (as the scalar one), and == itself bit for bit whatever the token
// count (a token alone, in a partial tile, in the second or third tile of 16) and the chunk tails (K not a
// multiple of 32 pairs; the four chains unevenly filled).
TEST(PackedKernels, PackedBf16DotAmxWithinToleranceAndTokenInvariant) {
  const Kernels* amx = nullptr;
  for (const Kernels* k : simd_tables())
    if (k->isa == Isa::kAmx) amx = k;
  if (!amx) GTEST_SKIP() << "no AMX on this CPU";
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (int64_t K : {1, 2, 3, 31, 32, 33, 64, 128, 577, 2048, 2113}) {
      for (int rows : {16, 7}) {
        QuantRows q = make_rows(t, rows, K, 290 + K + rows, 0);
        std::vector<uint8_t> group(packed_group_bytes(t, K, FloatPack::kBf16Pairs));
        repack_group(t, q.data, q.row_bytes, rows, K, FloatPack::kBf16Pairs, group.data());
        const int T = 37;
        const int64_t np = (K + 1) / 2, stride = np + 3;  // rows of x not 64-byte aligned against each other
        auto x = random_floats(T * K, 7 + K, -2.0f, 2.0f);
        std::vector<uint16_t> xb(T * stride * 2, 0);
        for (int tok = 0; tok < T; ++tok) ref::kKernels.round_bf16(x.data() + tok * K, K, xb.data() + tok * stride * 2);
        const auto* xp = reinterpret_cast<const uint32_t*>(xb.data());
        std::vector<float> all(T * kPackRows, -1.0f);
        amx->packed_dot_bf16(group.data(), np, xp, stride, T, all.data(), kPackRows);
        expect_double_dot(all, q, t, rows, K, T, x.data(), [](float v) { return bf16_to_f32(f32_to_bf16_daz(v)); });
        for (int nt : {1, 2, 3, 15, 16, 17, 33}) {
          for (int first : {0, 3}) {
            std::vector<float> got(nt * kPackRows, -1.0f);
            amx->packed_dot_bf16(group.data(), np, xp + first * stride, stride, nt, got.data(), kPackRows);
            ASSERT_EQ(0, std::memcmp(all.data() + first * kPackRows, got.data(), nt * kPackRows * sizeof(float)))
                << dtype_name(t) << " K=" << K << " nt=" << nt << " from token " << first;
          }
        }
      }
    }
  }
}

// Packed float weights kept in their 16-bit type (FloatPack::kHalfRows): scalar == the double-precision dot of the
// exact weights and activations within the two f32 chains' rounding; every SIMD table == scalar bit for bit for
// every token count (each register-block width) and length (odd k: the tail of the even chain).
TEST(PackedKernels, PackedHalfDotMatchesScalarBitwiseAndDouble) {
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (int64_t K : {1, 2, 3, 4, 5, 17, 64, 577}) {
      for (int rows : {16, 7}) {
        QuantRows q = make_rows(t, rows, K, 190 + K + rows, 0);
        std::vector<uint8_t> group(packed_group_bytes(t, K, FloatPack::kHalfRows) + 4);
        uint8_t* g = group.data() + 4;  // misaligned against every vector width
        repack_group(t, q.data, q.row_bytes, rows, K, FloatPack::kHalfRows, g);
        const int T = 29;
        auto xs = random_floats(T * K + 1, 15 + K, -2.0f, 2.0f);
        const float* x = xs.data() + 1;
        std::vector<float> ref(T * kPackRows);
        ref::kKernels.packed_dot_half(t, g, K, x, K, T, ref.data(), kPackRows);
        expect_double_dot(ref, q, t, rows, K, T, x, [](float v) { return v; });
        for (const Kernels* k : simd_tables())
          for (int nt : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 24, 25, 29}) {
            std::vector<float> got(T * kPackRows, -1.0f);
            k->packed_dot_half(t, g, K, x, K, nt, got.data(), kPackRows);
            ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), nt * kPackRows * sizeof(float)))
                << isa_name(k->isa) << " " << dtype_name(t) << " K=" << K << " nt=" << nt;
          }
      }
    }
  }
}

// Activations to bf16: every table == f32_to_bf16_daz, including subnormals (flushed, sign kept), NaN, infinities,
// ties and the largest finite values, at every length and misalignment.
TEST(PackedKernels, RoundBf16MatchesScalar) {
  std::vector<float> x = random_floats(300, 77, -3.0f, 3.0f);
  const float specials[] = {0.0f, -0.0f, 1e-39f, -1e-39f, 1.17549435e-38f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::nanf(""), 3.4028235e38f, -3.4028235e38f,
                            1.00390625f, 1.01171875f, 65504.0f, 1e-45f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7] = specials[i];
  EXPECT_EQ(f32_to_bf16_daz(1e-39f), 0x0000);
  EXPECT_EQ(f32_to_bf16_daz(-1e-39f), 0x8000);
  EXPECT_EQ(f32_to_bf16_daz(1.00390625f), 0x3f80);  // tie to even
  EXPECT_EQ(f32_to_bf16_daz(1.01171875f), 0x3f82);
  EXPECT_EQ(f32_to_bf16_daz(3.4028235e38f), 0x7f80);  // rounds up to infinity, as vcvtneps2bf16
  for (const Kernels* k : simd_tables())
    for (int off : {0, 1, 3})
      for (int64_t n : {0, 1, 15, 16, 17, 31, 33, 64, 299 - 3}) {
        std::vector<uint16_t> want(n + 1, 0xdead), got(n + 1, 0xdead);
        ref::kKernels.round_bf16(x.data() + off, n, want.data());
        k->round_bf16(x.data() + off, n, got.data());
        ASSERT_EQ(want, got) << isa_name(k->isa) << " n=" << n << " off=" << off;
      }
}

}  // namespace
}  // namespace cachet
