// attn_chunk (kernels.h): a chunk of attention tiles for KV heads' groups from a fresh state. Every table against
// the scalar one (a run of attn_tile calls), on chunks cut as the walks cut them (a partial first and last tile,
// whole tiles between, up to a whole chunk of 256 positions), and every head bitwise the same whatever group it is
// computed in and whatever KV heads share its call.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/fp16.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kv/kv_type.h"
#include "tests/kv_rows.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

using testing::random_floats;
using testing::store_kv_row;

size_t row_bytes(DType t, int d) {
  if (t == DType::kQ8_0) return static_cast<size_t>(d / 32) * 34;
  if (t == DType::kQ4_0 || t == DType::kIQ4_NL) return static_cast<size_t>(d / 32) * 18;
  return static_cast<size_t>(d) * (t == DType::kF32 ? 4 : 2);
}

// A cache of `rows` positions of n_kv heads (rows of every head, as the caches lay them out) and the tiles of
// positions [p0, p1) cut at multiples of 16.
struct Chunk {
  int d, n_kv;
  DType tk, tv;
  std::vector<uint8_t> k, v;
  std::vector<AttnTile> tiles;
  float vmax = 0;
  Chunk(DType tk_, DType tv_, int d_, int n_kv_, int p0, int p1, uint64_t seed)
      : d(d_), n_kv(n_kv_), tk(tk_), tv(tv_) {
    const size_t ks = row_bytes(tk, d) * n_kv, vs = row_bytes(tv, d) * n_kv;
    k.resize(ks * p1 + 64);
    v.resize(vs * p1 + 64);
    auto x = random_floats(static_cast<size_t>(d) * p1 * n_kv * 2, seed);
    for (int p = 0; p < p1; ++p)
      for (int h = 0; h < n_kv; ++h) {
        const float* kx = x.data() + (static_cast<size_t>(p) * n_kv + h) * d;
        const float* vx = kx + static_cast<size_t>(p1) * n_kv * d;
        store_kv_row(tk, kx, k.data() + p * ks + h * row_bytes(tk, d), d);
        store_kv_row(tv, vx, v.data() + p * vs + h * row_bytes(tv, d), d);
        for (int j = 0; j < d; ++j) vmax = std::max(vmax, std::fabs(vx[j]));
      }
    for (int p = p0; p < p1;) {
      const int n = std::min(16 - p % 16, p1 - p);
      tiles.push_back({k.data() + p * ks, v.data() + p * vs, ks, vs, n});
      p += n;
    }
  }
  AttnChunk head(int h) const {
    return AttnChunk{tiles.data(), static_cast<int>(tiles.size()), h * row_bytes(tk, d), h * row_bytes(tv, d)};
  }
};

struct Out {
  std::vector<float> m, l, acc;
  Out(int group, int d) : m(group), l(group), acc(static_cast<size_t>(group) * d) {}
};

Out run(const Kernels& k, const Chunk& c, int h, const std::vector<float>& q, const std::vector<ActQ8>& qq, int group,
        float cap) {
  Out o(group, c.d);
  k.attn_chunk(c.tk, c.tv, c.head(h), q.data(), qq.empty() ? nullptr : qq.data(), group, c.d, 0.3f, cap, o.m.data(),
               o.l.data(), o.acc.data());
  return o;
}

const std::pair<DType, DType> kPairs[] = {{DType::kF32, DType::kF32},     {DType::kF16, DType::kF16},
                                          {DType::kBF16, DType::kBF16},   {DType::kQ8_0, DType::kQ8_0},
                                          {DType::kQ4_0, DType::kQ4_0},   {DType::kQ8_0, DType::kQ4_0},
                                          {DType::kIQ4_NL, DType::kIQ4_NL}, {DType::kQ8_0, DType::kIQ4_NL}};

TEST(AttnChunk, EveryTableMatchesTheScalarRunOfTiles) {
  // Position ranges as the walks cut them: a whole chunk, a window's partial start, a token's partial end, one
  // position, one tile.
  const std::pair<int, int> ranges[] = {{0, 256}, {256 + 5, 512}, {0, 37}, {511, 512}, {16, 32}, {3, 250}};
  for (const Kernels* k : supported_kernels()) {
    if (k->isa == Isa::kScalar) continue;
    for (auto [tk, tv] : kPairs) {
      const bool blocks = attn_integer_keys(tk);
      for (int d : {32, 64, 96, 128, 512}) {
        for (auto [p0, p1] : ranges) {
          if (d == 512 && p1 - p0 > 64) continue;  // keep the run short
          const Chunk c(tk, tv, d, 2, p0, p1, 7 + d + p0);
          for (int group : {1, 3, 4, 7}) {
            auto q = random_floats(static_cast<size_t>(group) * d, 19 + group, -3.0f, 3.0f);
            std::vector<ActQ8> qq(blocks ? static_cast<size_t>(group) * d / 16 : 0);
            if (blocks) quantize_query(q.data(), group * d, qq.data());
            for (float cap : {0.0f, 1.5f}) {
              const Out r = run(ref::kKernels, c, 1, q, qq, group, cap), g = run(*k, c, 1, q, qq, group, cap);
              // Block-quantized values on the AVX-512 tables: weights rounded to 15 bits against the chunk's
              // largest weight and scale (x86/attn_chunk.inc).
              float tol = 2e-5f * std::max(1.0f, c.vmax);  // float rounding, values up to vmax
              if (attn_integer_keys(tv) && k->isa >= Isa::kAvx512)
                tol += std::ldexp(1.0f, -15) * std::sqrt(static_cast<float>(p1 - p0)) * c.vmax;
              const std::string what = std::string(isa_name(k->isa)) + " " + dtype_name(tk) + "/" + dtype_name(tv) +
                                       " d=" + std::to_string(d) + " [" + std::to_string(p0) + "," +
                                       std::to_string(p1) + ") group=" + std::to_string(group) +
                                       " cap=" + std::to_string(cap);
              for (int h = 0; h < group; ++h) {
                // Integer Q.K: the same score floats in every table, so the same largest score (soft-capping
                // takes each table's exponential).
                if (blocks && cap == 0.0f) ASSERT_EQ(g.m[h], r.m[h]) << what;
                else ASSERT_NEAR(g.m[h], r.m[h], 1e-5f * std::max(1.0f, std::fabs(r.m[h]))) << what;
                ASSERT_NEAR(g.l[h], r.l[h], 2e-5f * r.l[h]) << what;
                for (int j = 0; j < d; ++j) {
                  const size_t x = static_cast<size_t>(h) * d + j;
                  ASSERT_NEAR(g.acc[x] / g.l[h], r.acc[x] / r.l[h], tol) << what << " h=" << h << " j=" << j;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The two-pass kernels split a group into passes of up to 4 heads; each head's result is the bits it gets alone.
TEST(AttnChunk, HeadsDoNotDependOnTheirGroup) {
  for (const Kernels* k : supported_kernels()) {
    for (auto [tk, tv] : kPairs) {
      const bool blocks = attn_integer_keys(tk);
      for (int d : {64, 96}) {
        const Chunk c(tk, tv, d, 1, 5, 200, 3 + d);
        for (int group = 2; group <= 8; ++group) {
          auto q = random_floats(static_cast<size_t>(group) * d, 41 + group, -3.0f, 3.0f);
          std::vector<ActQ8> qq(blocks ? static_cast<size_t>(group) * d / 16 : 0);
          if (blocks) quantize_query(q.data(), group * d, qq.data());
          const Out all = run(*k, c, 0, q, qq, group, 0.0f);
          for (int h = 0; h < group; ++h) {
            const std::vector<float> qh(q.begin() + h * d, q.begin() + (h + 1) * d);
            const std::vector<ActQ8> qqh(blocks ? qq.begin() + h * d / 16 : qq.end(),
                                         blocks ? qq.begin() + (h + 1) * d / 16 : qq.end());
            const Out one = run(*k, c, 0, qh, qqh, 1, 0.0f);
            const std::string what = std::string(isa_name(k->isa)) + " " + dtype_name(tk) + "/" + dtype_name(tv) +
                                     " d=" + std::to_string(d) + " group=" + std::to_string(group) +
                                     " head=" + std::to_string(h);
            ASSERT_EQ(all.m[h], one.m[0]) << what;
            ASSERT_EQ(all.l[h], one.l[0]) << what;
            for (int j = 0; j < d; ++j) ASSERT_EQ(all.acc[static_cast<size_t>(h) * d + j], one.acc[j]) << what;
          }
        }
      }
    }
  }
}

// Several KV heads a call (AttnChunk::n_heads, the decode walk's whole rows): each head's bits are those of a call
// for it alone, whatever heads share the call, their strides and the prefetch hints.
TEST(AttnChunk, SeveralHeadsACallEqualEachHeadAlone) {
  for (const Kernels* k : supported_kernels()) {
    for (auto [tk, tv] : kPairs) {
      const bool blocks = attn_integer_keys(tk);
      for (int d : {64, 128}) {
        for (int n_kv : {3, 8}) {
          const Chunk c(tk, tv, d, n_kv, 7, 250, 11 + d + n_kv);
          for (int group : {1, 3, 5}) {
            // Heads [h0, h0 + n) of the rows; queries group x d apart plus a gap, states with a gap too.
            const int h0 = n_kv == 8 ? 0 : 1, n = n_kv - h0;
            const size_t q_stride = static_cast<size_t>(group) * d + 32;
            const size_t st_stride = static_cast<size_t>(group) * d + 2 * group + 16;
            auto q = random_floats(q_stride * n, 5 + group, -3.0f, 3.0f);
            std::vector<ActQ8> qq(blocks ? q.size() / 16 : 0);
            if (blocks) quantize_query(q.data(), static_cast<int64_t>(q.size()), qq.data());
            std::vector<float> st(st_stride * n, std::nanf(""));
            AttnChunk all = c.head(h0);
            all.n_heads = n, all.k_head = row_bytes(tk, d), all.v_head = row_bytes(tv, d);
            all.q_stride = q_stride, all.state_stride = st_stride;
            all.next = c.tiles.data(), all.n_next = static_cast<int>(c.tiles.size());
            float* acc = st.data();
            float* m = acc + static_cast<size_t>(group) * d;
            float* l = m + group;
            k->attn_chunk(tk, tv, all, q.data(), blocks ? qq.data() : nullptr, group, d, 0.3f, 0.0f, m, l, acc);
            for (int h = 0; h < n; ++h) {
              const std::vector<float> qh(q.begin() + h * q_stride, q.begin() + h * q_stride + group * d);
              std::vector<ActQ8> qqh;
              if (blocks) qqh.assign(qq.begin() + h * q_stride / 16, qq.begin() + (h * q_stride + group * d) / 16);
              const Out one = run(*k, c, h0 + h, qh, qqh, group, 0.0f);
              const std::string what = std::string(isa_name(k->isa)) + " " + dtype_name(tk) + "/" +
                                       dtype_name(tv) + " d=" + std::to_string(d) + " n_kv=" + std::to_string(n_kv) +
                                       " group=" + std::to_string(group) + " head=" + std::to_string(h);
              const size_t so = h * st_stride;
              for (int g = 0; g < group; ++g) {
                ASSERT_EQ(m[so + g], one.m[g]) << what;
                ASSERT_EQ(l[so + g], one.l[g]) << what;
              }
              for (int j = 0; j < group * d; ++j) ASSERT_EQ(acc[so + j], one.acc[j]) << what << " j=" << j;
            }
          }
        }
      }
    }
  }
}

// AttnChunk::keys_again (a prefill's query block over one chunk, model/ops.cc attend_tokens): every token after
// the first may read keys the kernel kept from the calls before (x86/attn_keys_t.inc), and each token's bits are
// those of its call alone, whatever its range within the chunk (a partial first or last tile, whole tiles from
// another start) and whatever chains ran before on the thread with other keys at the same addresses.
TEST(AttnChunk, KeysAgainGiveEachCallsOwnBits) {
  for (const Kernels* k : supported_kernels()) {
    for (auto [tk, tv] : kPairs) {
      const bool blocks = attn_integer_keys(tk);
      for (int d : {64, 80, 128, 256}) {
        if (blocks && d % 32 != 0) continue;
        Chunk c(tk, tv, d, 2, 0, 256, 17 + d);
        for (int round = 0; round < 2; ++round) {
          if (round == 1) {  // other keys and values at the same addresses, after chains on round 0's
            const Chunk other(tk, tv, d, 2, 0, 256, 18 + d);
            c.k = other.k, c.v = other.v;
          }
          for (int group : {1, 4, 6}) {
            for (float cap : {0.0f, 30.0f}) {
              const int tokens = 6;
              auto q = random_floats(static_cast<size_t>(tokens) * group * d, 9 + group + round, -3.0f, 3.0f);
              std::vector<ActQ8> qq(blocks ? q.size() / 16 : 0);
              if (blocks) quantize_query(q.data(), static_cast<int64_t>(q.size()), qq.data());
              for (int kvh = 0; kvh < 2; ++kvh) {
                // Token t's positions [p0, p1): causal ends, and a token starting inside a tile.
                const int p0[tokens] = {0, 0, 0, 3, 0, 0}, p1[tokens] = {256, 37, 240, 256, 128, 256};
                std::vector<Out> chained, alone;
                for (int pass = 0; pass < 2; ++pass) {
                  for (int t = 0; t < tokens; ++t) {
                    std::vector<AttnTile> mine;
                    for (const AttnTile& ti : c.tiles) {
                      const int p = static_cast<int>((ti.k - c.k.data()) / c.tiles[0].k_stride);
                      const int s0 = std::max(p, p0[t]), s1 = std::min(p + ti.n, p1[t]);
                      if (s0 >= s1) continue;
                      const size_t skip = static_cast<size_t>(s0 - p);
                      mine.push_back({ti.k + skip * ti.k_stride, ti.v + skip * ti.v_stride, ti.k_stride, ti.v_stride,
                                      s1 - s0});
                    }
                    AttnChunk ch{mine.data(), static_cast<int>(mine.size()), kvh * row_bytes(tk, d),
                                 kvh * row_bytes(tv, d)};
                    ch.keys_again = pass == 0 && t > 0;
                    Out o(group, d);
                    const size_t qo = static_cast<size_t>(t) * group * d;
                    k->attn_chunk(tk, tv, ch, q.data() + qo, blocks ? qq.data() + qo / 16 : nullptr, group, d, 0.3f,
                                  cap, o.m.data(), o.l.data(), o.acc.data());
                    (pass == 0 ? chained : alone).push_back(std::move(o));
                  }
                }
                for (int t = 0; t < tokens; ++t) {
                  const std::string what = std::string(isa_name(k->isa)) + " " + dtype_name(tk) + "/" +
                                           dtype_name(tv) + " d=" + std::to_string(d) + " group=" +
                                           std::to_string(group) + " token=" + std::to_string(t) +
                                           " round=" + std::to_string(round);
                  ASSERT_EQ(chained[t].m, alone[t].m) << what;
                  ASSERT_EQ(chained[t].l, alone[t].l) << what;
                  ASSERT_EQ(chained[t].acc, alone[t].acc) << what;
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cachet
