// The flash-style attention kernel (tiles + online softmax) against naive attention in double precision,
// for context lengths 1 to 4096, with GQA; and with every KV element type (kv/kv_type.h), against naive
// attention over the values the cache holds.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "kv/kv_type.h"
#include "model/config.h"
#include "model/ops.h"

namespace cachet {
namespace {

ModelConfig one_layer(int n_head, int n_head_kv, int head_dim) {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  return c;
}

// Fills every position's K and V of layer 0 with standard normal values.
void fill_random(ContiguousKvCache* cache, int kv_dim, std::mt19937* rng, int head_dim) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(kv_dim);
  for (int p = 0; p < cache->capacity(); ++p) {
    for (auto& x : row) x = nd(*rng);
    kv_store(cache->types().k, row.data(), cache->k_row(0, p), kv_dim, head_dim);
    for (auto& x : row) x = nd(*rng);
    kv_store(cache->types().v, row.data(), cache->v_row(0, p), kv_dim, head_dim);
  }
}

// The largest difference between `out` (H heads of D) and naive attention in double of q over positions 0..n-1,
// K and V of KV head h at position j given by k(j, h) / v(j, h) (D floats each).
// With sinks (one logit per head), each head's softmax also has e^sink in its denominator.
template <typename KAt, typename VAt>
double worst_vs_naive(const std::vector<float>& q, const std::vector<float>& out, int n, int H, int KH, int D, KAt k,
                      VAt v, const float* sinks = nullptr) {
  double worst = 0;
  for (int h = 0; h < H; ++h) {
    const int kvh = h / (H / KH);
    std::vector<double> s(n);
    double mx = sinks ? sinks[h] : -1e300;
    for (int j = 0; j < n; ++j) {
      const float* kr = k(j, kvh);
      double d = 0;
      for (int i = 0; i < D; ++i) d += static_cast<double>(q[h * D + i]) * kr[i];
      s[j] = d / std::sqrt(static_cast<double>(D));
      mx = std::max(mx, s[j]);
    }
    double sum = sinks ? std::exp(sinks[h] - mx) : 0.0;
    for (double& x : s) sum += x = std::exp(x - mx);
    for (int i = 0; i < D; ++i) {
      double o = 0;
      for (int j = 0; j < n; ++j) o += s[j] * v(j, kvh)[i];
      worst = std::max(worst, std::fabs(o / sum - out[h * D + i]));
    }
  }
  return worst;
}

TEST(Attention, FlashEqualsNaive) {
  const int max_ctx = 4096, H = 8, KH = 2, D = 64;
  ContiguousKvCache cache(one_layer(H, KH, D), max_ctx, DType::kF32);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  fill_random(&cache, KH * D, &rng, D);
  std::vector<int> lengths;
  for (int n = 1; n <= 70; ++n) lengths.push_back(n);
  for (int n = 100; n <= max_ctx; n = n * 3 / 2) lengths.push_back(n);
  lengths.push_back(1023);
  lengths.push_back(1024);
  lengths.push_back(max_ctx);
  ThreadPool pool(2);
  std::vector<float> q(H * D), out(H * D);
  for (int n : lengths) {
    for (auto& x : q) x = 2.0f * nd(rng);  // peaky enough that the running max matters
    const int32_t pos = n - 1, seq = 0;
    KvView seqs[] = {cache.view()};
    attention(pool, {q.data(), out.data(), 1, &pos, &seq, seqs, 0, H, KH, D});
    const double worst = worst_vs_naive(
        q, out, n, H, KH, D, [&](int j, int h) { return reinterpret_cast<const float*>(cache.k_row(0, j)) + h * D; },
        [&](int j, int h) { return reinterpret_cast<const float*>(cache.v_row(0, j)) + h * D; });
    ASSERT_LE(worst, 1e-5) << "context " << n;
  }
}

// Attention sinks (gpt-oss): a per-head logit in each softmax, in both walks (a deep decode step's flash-decoding
// split and merge, and a prefill's query blocks), on f32 and block-quantized caches; sinks far below, near and
// far above the scores.
TEST(Attention, SinksEqualNaiveInBothWalks) {
  const int H = 8, KH = 2, D = 64, n_ctx = 3000;
  ThreadPool pool(2);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (KvType kv : {KvType::kF32, KvType::kQ8_0}) {
    ContiguousKvCache cache(one_layer(H, KH, D), n_ctx, KvTypes(kv));
    fill_random(&cache, KH * D, &rng, D);
    std::vector<float> kf(static_cast<size_t>(n_ctx) * KH * D), vf(kf.size());
    for (int p = 0; p < n_ctx; ++p) {  // the values the cache holds
      kv_dequantize_row(cache.types().k, cache.k_row(0, p), kf.data() + static_cast<size_t>(p) * KH * D, KH * D, D);
      kv_dequantize_row(cache.types().v, cache.v_row(0, p), vf.data() + static_cast<size_t>(p) * KH * D, KH * D, D);
    }
    for (float base : {-30.0f, 0.0f, 3.0f, 30.0f}) {
      std::vector<float> sinks(H);
      for (float& x : sinks) x = base + nd(rng);
      for (int n : {1, 17, 300, n_ctx}) {
        // A decode step at position n - 1 and a prefill block ending there (its last 4 tokens).
        for (int T : {1, 4}) {
          std::vector<float> q(static_cast<size_t>(T) * H * D), out(q.size());
          for (auto& x : q) x = 2.0f * nd(rng);
          std::vector<int32_t> pos(T), seq(T, 0);
          for (int t = 0; t < T; ++t) pos[t] = std::max(0, n - T + t);
          KvView seqs[] = {cache.view()};
          AttentionArgs a{q.data(), out.data(), T, pos.data(), seq.data(), seqs, 0, H, KH, D};
          a.sinks = sinks.data();
          attention(pool, a);
          for (int t = 0; t < T; ++t) {
            const std::vector<float> qt(q.begin() + t * H * D, q.begin() + (t + 1) * H * D);
            const std::vector<float> ot(out.begin() + t * H * D, out.begin() + (t + 1) * H * D);
            const double worst = worst_vs_naive(
                qt, ot, pos[t] + 1, H, KH, D, [&](int j, int h) { return kf.data() + (static_cast<size_t>(j) * KH + h) * D; },
                [&](int j, int h) { return vf.data() + (static_cast<size_t>(j) * KH + h) * D; }, sinks.data());
            ASSERT_LE(worst, kv == KvType::kF32 ? 1e-5 : 2e-3)
                << kv_type_name(kv) << " sink " << base << " context " << n << " tokens " << T;
          }
        }
      }
    }
  }
}

// A deep decode step alone spreads its chunks over threads (flash-decoding) and merges them afterwards; in a
// batch with many heads each thread walks a head's chunks itself. The two must agree bit for bit.
TEST(Attention, SplitChunksEqualWholeHeadsBitwise) {
  const int max_ctx = 1500, H = 6, KH = 2, D = 32, T = 8;
  for (KvTypes kv : {KvTypes(KvType::kF32), KvTypes(KvType::kF16), KvTypes(KvType::kQ8_0), KvTypes(KvType::kQ4R),
                     KvTypes(KvType::kQ8_0, KvType::kQ4_0), KvTypes(KvType::kBF16)}) {
    ContiguousKvCache cache(one_layer(H, KH, D), max_ctx, kv);
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    fill_random(&cache, KH * D, &rng, D);
    ThreadPool pool(2);
    std::vector<float> q(T * H * D), batch_out(T * H * D), alone(H * D);
    for (auto& x : q) x = 2.0f * nd(rng);
    const int32_t positions[T] = {1499, 1024, 255, 256, 257, 700, 3, 1300};
    const int32_t seq_index[T] = {0, 0, 0, 0, 0, 0, 0, 0};
    KvView seqs[] = {cache.view()};
    attention(pool, {q.data(), batch_out.data(), T, positions, seq_index, seqs, 0, H, KH, D});
    for (int t = 0; t < T; ++t) {
      attention(pool, {q.data() + t * H * D, alone.data(), 1, &positions[t], seq_index, seqs, 0, H, KH, D});
      for (int i = 0; i < H * D; ++i)
        ASSERT_EQ(alone[i], batch_out[t * H * D + i]) << "position " << positions[t] << " element " << i;
    }
  }
}

// A prefill's tokens walk each KV head's tiles in query blocks (up to 16 consecutive tokens of a sequence share
// every tile); each token must still get exactly what it gets alone: consecutive and scattered positions, two
// sequences interleaved, a sliding window cutting tiles mid-way, soft-capped scores. (16 heads: a token alone
// is then enough work to take the other path, chunks spread over threads and merged, not the block walk.)
TEST(Attention, QueryBlocksEqualTokensAloneBitwise) {
  const int max_ctx = 1200, H = 16, KH = 2, D = 64, T = 45;
  for (KvTypes kv : {KvTypes(KvType::kF16), KvTypes(KvType::kQ8_0), KvTypes(KvType::kQ8_0, KvType::kQ4_0)}) {
    ContiguousKvCache a_cache(one_layer(H, KH, D), max_ctx, kv), b_cache(one_layer(H, KH, D), max_ctx, kv);
    std::mt19937 rng(21);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    fill_random(&a_cache, KH * D, &rng, D);
    fill_random(&b_cache, KH * D, &rng, D);
    ThreadPool pool(2);
    std::vector<float> q(T * H * D), batch_out(T * H * D), alone(H * D);
    for (auto& x : q) x = 2.0f * nd(rng);
    std::vector<int32_t> positions(T), seq_index(T);
    for (int t = 0; t < T; ++t) {
      seq_index[t] = t >= 20 && t < 30 ? 1 : 0;                      // sequence 1 in the middle
      positions[t] = seq_index[t] ? 1100 + (t - 20) * 7 : 500 + t;   // 0: consecutive; 1: scattered
    }
    KvView seqs[] = {a_cache.view(), b_cache.view()};
    for (int window : {0, 300}) {
      for (float softcap : {0.0f, 30.0f}) {
        AttentionArgs args{q.data(), batch_out.data(), T, positions.data(), seq_index.data(), seqs, 0, H, KH, D};
        args.window = window;
        args.softcap = softcap;
        attention(pool, args);
        for (int t = 0; t < T; ++t) {
          AttentionArgs one = args;
          one.q = q.data() + t * H * D;
          one.out = alone.data();
          one.n_tokens = 1;
          one.positions = &positions[t];
          one.seq_index = &seq_index[t];
          attention(pool, one);
          for (int i = 0; i < H * D; ++i)
            ASSERT_EQ(alone[i], batch_out[t * H * D + i]) << "token " << t << " window " << window << " element " << i;
        }
      }
    }
  }
}

// Bidirectional attention (encoders): every token of a sequence sees all of it, up to its `ends`, or only the
// positions within window / 2 either side (a centred window). Against naive attention over exactly that range,
// and each token bitwise what it gets alone.
TEST(Attention, BidirectionalAndCentredWindowsEqualNaive) {
  const int n = 300, H = 8, KH = 2, D = 64;
  ContiguousKvCache cache(one_layer(H, KH, D), 512, DType::kF32);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  fill_random(&cache, KH * D, &rng, D);
  ThreadPool pool(2);
  std::vector<float> q(n * H * D), out(n * H * D), alone(H * D);
  for (auto& x : q) x = 2.0f * nd(rng);
  std::vector<int32_t> positions(n), seq_index(n, 0), ends(n, n - 1);
  for (int t = 0; t < n; ++t) positions[t] = t;
  KvView seqs[] = {cache.view()};
  for (int window : {0, 64, 7}) {
    AttentionArgs args{q.data(), out.data(), n, positions.data(), seq_index.data(), seqs, 0, H, KH, D};
    args.window = window;
    args.symmetric_window = true;
    args.ends = ends.data();
    attention(pool, args);
    for (int t = 0; t < n; ++t) {
      const int lo = window > 0 ? std::max(0, t - window / 2) : 0, hi = window > 0 ? std::min(n - 1, t + window / 2) : n - 1;
      const std::vector<float> qt(q.begin() + t * H * D, q.begin() + (t + 1) * H * D);
      const std::vector<float> ot(out.begin() + t * H * D, out.begin() + (t + 1) * H * D);
      const double worst = worst_vs_naive(
          qt, ot, hi - lo + 1, H, KH, D,
          [&](int j, int h) { return reinterpret_cast<const float*>(cache.k_row(0, lo + j)) + h * D; },
          [&](int j, int h) { return reinterpret_cast<const float*>(cache.v_row(0, lo + j)) + h * D; });
      ASSERT_LE(worst, 1e-5) << "token " << t << " window " << window;
      AttentionArgs one = args;
      one.q = q.data() + t * H * D;
      one.out = alone.data();
      one.n_tokens = 1;
      one.positions = &positions[t];
      one.seq_index = &seq_index[t];
      one.ends = &ends[t];
      attention(pool, one);
      for (int i = 0; i < H * D; ++i) ASSERT_EQ(alone[i], out[t * H * D + i]) << "token " << t << " window " << window;
    }
  }
}

// Decode tokens of many sequences with many KV heads (8 here, so per-head work items would balance two threads)
// walk whole rows by chunks; the same token as the last of a prefill block walks per KV head. Bitwise equal.
TEST(Attention, DecodeBatchWithManyKvHeadsEqualsThePrefillWalkBitwise) {
  const int max_ctx = 1100, H = 16, KH = 8, D = 64, S = 6;
  for (KvTypes kv : {KvTypes(KvType::kF16), KvTypes(KvType::kQ8_0), KvTypes(KvType::kQ4_0)}) {
    std::vector<std::unique_ptr<ContiguousKvCache>> caches;
    std::vector<KvView> seqs;
    std::mt19937 rng(5);
    for (int s = 0; s < S; ++s) {
      caches.push_back(std::make_unique<ContiguousKvCache>(one_layer(H, KH, D), max_ctx, kv));
      fill_random(caches.back().get(), KH * D, &rng, D);
      seqs.push_back(caches.back()->view());
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(2 * S * H * D), batch_out(S * H * D), pair_out(2 * H * D);
    for (auto& x : q) x = 2.0f * nd(rng);
    std::vector<int32_t> positions(S), seq_index(S);
    for (int s = 0; s < S; ++s) positions[s] = 300 + 150 * s, seq_index[s] = s;
    ThreadPool pool(2);
    AttentionArgs args{q.data(), batch_out.data(), S, positions.data(), seq_index.data(), seqs.data(), 0, H, KH, D};
    attention(pool, args);
    for (int s = 0; s < S; ++s) {
      // Two consecutive tokens of sequence s: a prefill block; the second has the decode token's query.
      std::vector<float> q2(2 * H * D);
      std::copy(q.begin() + (S + s) * H * D, q.begin() + (S + s + 1) * H * D, q2.begin());
      std::copy(q.begin() + s * H * D, q.begin() + (s + 1) * H * D, q2.begin() + H * D);
      int32_t pos2[] = {positions[s] - 1, positions[s]}, seq2[] = {s, s};
      AttentionArgs pair{q2.data(), pair_out.data(), 2, pos2, seq2, seqs.data(), 0, H, KH, D};
      attention(pool, pair);
      for (int i = 0; i < H * D; ++i)
        ASSERT_EQ(pair_out[H * D + i], batch_out[s * H * D + i]) << kv_type_name(kv.k) << " seq " << s << " element " << i;
    }
  }
}

// The query attention reads: block-quantized keys read in place take integer Q.K, so q turned into the cache's
// basis, quantized per 32-block (kernels/attn_query.h), and turned back; otherwise q itself.
std::vector<float> query_as_read(const std::vector<float>& q, KvTypes types, int D) {
  const DType kl = kv_layout(types.k);
  const bool integer_qk = attn_tile_reads(kl, kv_layout(types.v)) && attn_integer_keys(kl);
  if (!integer_qk) return q;
  std::vector<float> t = q;
  const int64_t n = static_cast<int64_t>(t.size());
  if (kv_rotated(types.k)) kv_rotate(t.data(), n, D);
  std::vector<ActQ8> blocks(t.size() / 16);
  quantize_query(t.data(), n, blocks.data());
  for (size_t b = 0; b < t.size() / 32; ++b)
    for (int e = 0; e < 32; ++e)
      t[b * 32 + e] = blocks[2 * b + 1].d * static_cast<float>(kQueryHiScale * blocks[2 * b].q[e] + blocks[2 * b + 1].q[e]);
  if (kv_rotated(types.k)) kv_unrotate(t.data(), n, D);
  return t;
}

// Every K type with every V type: flash attention over the cache equals naive attention in double over the
// values the cache holds (dequantized; q4r turned back), so quantized tiles, the q4r rotation of q and of the
// output, and mixed K/V types are all what they claim.
TEST(Attention, EveryKvTypeEqualsNaiveOverItsValues) {
  const int H = 6, KH = 2, D = 64;
  const KvType all[] = {KvType::kF32, KvType::kF16, KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kQ4R};
  ThreadPool pool(2);
  for (KvType kt : all) {
    for (KvType vt : all) {
      const int n_ctx = 300;
      ContiguousKvCache cache(one_layer(H, KH, D), n_ctx, KvTypes(kt, vt));
      std::mt19937 rng(3 + static_cast<int>(kt) * 7 + static_cast<int>(vt));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      fill_random(&cache, KH * D, &rng, D);
      std::vector<float> kf(static_cast<size_t>(n_ctx) * KH * D), vf(kf.size());
      for (int p = 0; p < n_ctx; ++p) {
        kv_dequantize_row(kt, cache.k_row(0, p), kf.data() + static_cast<size_t>(p) * KH * D, KH * D, D);
        kv_dequantize_row(vt, cache.v_row(0, p), vf.data() + static_cast<size_t>(p) * KH * D, KH * D, D);
      }
      std::vector<float> q(H * D), out(H * D);
      for (int n : {1, 15, 16, 17, 100, 300}) {
        for (auto& x : q) x = 1.5f * nd(rng);
        const int32_t pos = n - 1, seq = 0;
        KvView seqs[] = {cache.view()};
        attention(pool, {q.data(), out.data(), 1, &pos, &seq, seqs, 0, H, KH, D});
        const double worst = worst_vs_naive(
            query_as_read(q, KvTypes(kt, vt), D), out, n, H, KH, D, [&](int j, int h) { return kf.data() + (static_cast<size_t>(j) * KH + h) * D; },
            [&](int j, int h) { return vf.data() + (static_cast<size_t>(j) * KH + h) * D; });
        // Block-quantized values: the AVX-512 tables' 15-bit weights (kernels/x86/attn_values_int.inc) move the
        // output by about 2^-15 sqrt(n) max|v| more.
        double tol = 2e-5;
        if (attn_integer_keys(kv_layout(vt)) && kernels().isa >= Isa::kAvx512) {
          double vmax = 0;
          for (int j = 0; j < n * KH * D; ++j) vmax = std::max(vmax, std::fabs(static_cast<double>(vf[j])));
          tol += std::ldexp(1.0, -15) * std::sqrt(static_cast<double>(n)) * vmax;
        }
        ASSERT_LE(worst, tol) << kv_type_name(kt) << "/" << kv_type_name(vt) << " context " << n;
      }
    }
  }
}

}  // namespace
}  // namespace cachet
