// The recurrent mixers' kernels (the gated delta rule, Mamba-2's scan, the short causal conv) on every table against the scalar one,
// and each table's prefill form (many tokens in one call) against one token at a time, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "tests/simd_tables.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

using testing::random_floats;

// The gated delta rule: every table against the scalar one, head sizes across every vector width and tail,
// states that have run a few tokens (decay < 1, rows of mixed sign), within rounding of the dot products; and
// on each table, n tokens in one call (the prefill form: blocks of rows through groups of tokens) equal n calls
// of one token each bit for bit, for runs across the token groups' edges.
TEST(Kernels, DeltaRuleMatchesScalar) {
  for (const Kernels* k : simd_tables()) {
    for (int d : {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 128}) {
      auto S0 = random_floats(static_cast<size_t>(d) * d + 1, 41 + d, -1.0f, 1.0f);
      std::vector<float> rs(S0), ks(S0), ro(d + 1, 7.0f), ko(d + 1, 7.0f);
      for (int t = 0; t < 4; ++t) {
        auto q = random_floats(d, 50 + t, -0.3f, 0.3f);
        auto kk = random_floats(d, 60 + t, -0.3f, 0.3f);
        auto v = random_floats(d, 70 + t, -2.0f, 2.0f);
        const float decay = 0.7f + 0.05f * t, beta = 0.3f + 0.1f * t;
        ref::kKernels.delta_rule(rs.data() + 1, q.data(), kk.data(), v.data(), 0, &decay, &beta, ro.data(), 0, 1, d);
        k->delta_rule(ks.data() + 1, q.data(), kk.data(), v.data(), 0, &decay, &beta, ko.data(), 0, 1, d);
        ASSERT_EQ(ks[0], S0[0]) << "nothing before the state is touched";
        ASSERT_EQ(ko[d], 7.0f) << "nothing after the output is touched";
        for (int i = 1; i <= d * d; ++i)
          ASSERT_NEAR(ks[i], rs[i], 2e-5f * std::max(1.0f, std::fabs(rs[i]))) << isa_name(k->isa) << " d=" << d;
        for (int j = 0; j < d; ++j)
          ASSERT_NEAR(ko[j], ro[j], 2e-5f * std::sqrt(static_cast<float>(d)) * std::max(1.0f, std::fabs(ro[j])))
              << isa_name(k->isa) << " d=" << d << " row " << j;
      }
    }
  }
}

TEST(Kernels, DeltaRuleManyTokensEqualsOneAtATimeBitwise) {
  for (const Kernels* k : supported_kernels()) {
    for (int d : {5, 16, 33, 128}) {
      for (int n : {2, 15, 16, 17, 40}) {
        const int64_t in_stride = 3 * d + 5, out_stride = d + 3;  // rows of a batch: q | k | v | other channels
        auto in = random_floats(static_cast<size_t>(n * in_stride), 90 + n + d, -0.4f, 0.4f);
        auto decay = random_floats(static_cast<size_t>(n), 91 + n, 0.5f, 1.0f);
        auto beta = random_floats(static_cast<size_t>(n), 92 + n, 0.0f, 1.0f);
        auto S0 = random_floats(static_cast<size_t>(d) * d, 93 + d, -1.0f, 1.0f);
        std::vector<float> Sa(S0), Sb(S0), oa(static_cast<size_t>(n * out_stride), 7.0f), ob(oa);
        k->delta_rule(Sa.data(), in.data(), in.data() + d, in.data() + 2 * d, in_stride, decay.data(), beta.data(),
                      oa.data(), out_stride, n, d);
        for (int t = 0; t < n; ++t) {
          const float* x = in.data() + t * in_stride;
          k->delta_rule(Sb.data(), x, x + d, x + 2 * d, 0, &decay[t], &beta[t], ob.data() + t * out_stride, 0, 1, d);
        }
        ASSERT_EQ(0, std::memcmp(Sa.data(), Sb.data(), Sa.size() * sizeof(float))) << isa_name(k->isa) << " d=" << d << " n=" << n;
        ASSERT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float))) << isa_name(k->isa) << " d=" << d << " n=" << n;
      }
    }
  }
}

// Mamba-2's scan: every table against the scalar one over head widths and state widths across every vector
// width and tail, within rounding of the dot products; on each table, n tokens in one call equal n calls of one
// token bit for bit, for runs across the token groups' edges.
TEST(Kernels, SsmScanMatchesScalar) {
  for (const Kernels* k : simd_tables()) {
    for (int hd : {1, 3, 4, 7, 64}) {
      for (int ds : {1, 7, 8, 16, 17, 33, 128}) {
        auto S0 = random_floats(static_cast<size_t>(hd) * ds + 1, 141 + ds, -1.0f, 1.0f);
        std::vector<float> rs(S0), ks(S0), ry(hd + 1, 7.0f), ky(hd + 1, 7.0f);
        for (int t = 0; t < 3; ++t) {
          auto x = random_floats(hd, 150 + t, -1.0f, 1.0f);
          auto b = random_floats(ds, 160 + t, -0.5f, 0.5f);
          auto c = random_floats(ds, 170 + t, -0.5f, 0.5f);
          const float dt = 0.2f + 0.3f * t, da = 0.9f - 0.1f * t;
          ref::kKernels.ssm_scan(rs.data() + 1, x.data(), b.data(), c.data(), 0, &dt, &da, ry.data(), 0, 1, hd, ds);
          k->ssm_scan(ks.data() + 1, x.data(), b.data(), c.data(), 0, &dt, &da, ky.data(), 0, 1, hd, ds);
          ASSERT_EQ(ks[0], S0[0]) << "nothing before the state is touched";
          ASSERT_EQ(ky[hd], 7.0f) << "nothing after the output is touched";
          for (int i = 1; i <= hd * ds; ++i)
            ASSERT_NEAR(ks[i], rs[i], 2e-5f * std::max(1.0f, std::fabs(rs[i]))) << isa_name(k->isa) << " ds=" << ds;
          for (int i = 0; i < hd; ++i)
            ASSERT_NEAR(ky[i], ry[i], 2e-5f * std::sqrt(static_cast<float>(ds)) * std::max(1.0f, std::fabs(ry[i])))
                << isa_name(k->isa) << " hd=" << hd << " ds=" << ds << " row " << i;
        }
      }
    }
  }
}

TEST(Kernels, SsmScanManyTokensEqualsOneAtATimeBitwise) {
  for (const Kernels* k : supported_kernels()) {
    for (int hd : {5, 64}) {
      for (int ds : {16, 33, 128}) {
        for (int n : {2, 15, 16, 17, 40}) {
          const int64_t in_stride = hd + 2 * ds + 3, out_stride = hd + 2;  // rows of a batch: x | B | C | other
          auto in = random_floats(static_cast<size_t>(n * in_stride), 190 + n + ds, -0.6f, 0.6f);
          auto dt = random_floats(static_cast<size_t>(n), 191 + n, 0.0f, 1.0f);
          auto da = random_floats(static_cast<size_t>(n), 192 + n, 0.5f, 1.0f);
          auto S0 = random_floats(static_cast<size_t>(hd) * ds, 193 + ds, -1.0f, 1.0f);
          std::vector<float> Sa(S0), Sb(S0), ya(static_cast<size_t>(n * out_stride), 7.0f), yb(ya);
          k->ssm_scan(Sa.data(), in.data(), in.data() + hd, in.data() + hd + ds, in_stride, dt.data(), da.data(),
                      ya.data(), out_stride, n, hd, ds);
          for (int t = 0; t < n; ++t) {
            const float* x = in.data() + t * in_stride;
            k->ssm_scan(Sb.data(), x, x + hd, x + hd + ds, 0, &dt[t], &da[t], yb.data() + t * out_stride, 0, 1, hd, ds);
          }
          ASSERT_EQ(0, std::memcmp(Sa.data(), Sb.data(), Sa.size() * sizeof(float))) << isa_name(k->isa) << " n=" << n;
          ASSERT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float))) << isa_name(k->isa) << " n=" << n;
        }
      }
    }
  }
}

// The short causal conv: every table against the scalar one (channel counts across every vector width and tail,
// conv lengths 1-9 past the tables' register blocks, with and without bias and SiLU), nothing outside the
// channels touched; on each table, n tokens in one call equal n calls of one, and channels split in two ranges
// equal the whole, bit for bit.
TEST(Kernels, CausalConvMatchesScalar) {
  for (const Kernels* k : simd_tables()) {
    for (int64_t ch : {1, 3, 15, 16, 17, 33, 100}) {
      for (int K : {1, 2, 3, 4, 5, 9}) {
        for (int mode = 0; mode < 4; ++mode) {
          const bool silu = mode & 1, with_bias = mode & 2;
          const int n = 5;
          const int64_t stride = ch + 3;
          auto taps = random_floats(static_cast<size_t>(ch * K), 200 + K, -1.0f, 1.0f);
          auto bias = random_floats(static_cast<size_t>(ch), 201, -0.5f, 0.5f);
          auto w0 = random_floats(static_cast<size_t>(ch * (K - 1) + 1), 202 + ch, -2.0f, 2.0f);
          auto x0 = random_floats(static_cast<size_t>(n * stride), 203 + ch, -2.0f, 2.0f);
          std::vector<float> rw(w0), kw(w0), rx(x0), kx(x0);
          ref::kKernels.causal_conv(rw.data(), taps.data(), with_bias ? bias.data() : nullptr, rx.data(), stride, n,
                                    ch, K, silu);
          k->causal_conv(kw.data(), taps.data(), with_bias ? bias.data() : nullptr, kx.data(), stride, n, ch, K, silu);
          ASSERT_EQ(kw.back(), w0.back()) << "nothing after the windows is touched";
          for (size_t i = 0; i < rw.size(); ++i) ASSERT_EQ(kw[i], rw[i]) << "the windows hold the inputs";
          for (int t = 0; t < n; ++t)
            for (int64_t c = 0; c < stride; ++c) {
              const size_t i = static_cast<size_t>(t * stride + c);
              if (c >= ch) {
                ASSERT_EQ(kx[i], x0[i]) << "nothing past the channels is touched";
                continue;
              }
              ASSERT_NEAR(kx[i], rx[i], 2e-6f * K * std::max(1.0f, std::fabs(rx[i])))
                  << isa_name(k->isa) << " ch=" << ch << " K=" << K << " mode " << mode << " t=" << t;
            }
        }
      }
    }
  }
}

TEST(Kernels, CausalConvManyTokensAndChannelSplitsAreBitwise) {
  for (const Kernels* k : supported_kernels()) {
    for (int64_t ch : {17, 48, 100}) {
      for (int K : {3, 4, 9}) {
        const int n = 21;
        const int64_t stride = ch + 5;
        auto taps = random_floats(static_cast<size_t>(ch * K), 210 + K, -1.0f, 1.0f);
        auto bias = random_floats(static_cast<size_t>(ch), 211, -0.5f, 0.5f);
        auto w0 = random_floats(static_cast<size_t>(ch * (K - 1)), 212 + ch, -2.0f, 2.0f);
        auto x0 = random_floats(static_cast<size_t>(n * stride), 213 + ch, -2.0f, 2.0f);
        std::vector<float> wa(w0), wb(w0), wc(w0), xa(x0), xb(x0), xc(x0);
        k->causal_conv(wa.data(), taps.data(), bias.data(), xa.data(), stride, n, ch, K, true);
        for (int t = 0; t < n; ++t) k->causal_conv(wb.data(), taps.data(), bias.data(), xb.data() + t * stride, 0, 1, ch, K, true);
        const int64_t split = 7;  // a range not on a vector edge
        k->causal_conv(wc.data(), taps.data(), bias.data(), xc.data(), stride, n, split, K, true);
        k->causal_conv(wc.data() + split * (K - 1), taps.data() + split * K, bias.data() + split, xc.data() + split, stride,
                       n, ch - split, K, true);
        for (const auto* other : {&wb, &wc})
          ASSERT_EQ(0, std::memcmp(wa.data(), other->data(), wa.size() * sizeof(float))) << isa_name(k->isa);
        for (const auto* other : {&xb, &xc})
          ASSERT_EQ(0, std::memcmp(xa.data(), other->data(), xa.size() * sizeof(float))) << isa_name(k->isa) << " K=" << K;
      }
    }
  }
}

}  // namespace
}  // namespace cachet
