// Seed 002's toy example through our attention kernel and KV cache: four hand-made heads over
// "Today weather is so" (values 10, 20, 1, 5), then "nice" (7) decoded. Contexts must be [12.5, 5, 10, 9]
// after prefill and [12.5, 7, 10, 8.6] for "nice", identical with and without the cache. (The article's
// cached listing prints 6.0 for the last-token head because its key for "so" was built for n = 4; a
// last-token head must compare positions, which is what a cache preserves. Equality is the point.)
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/ops.h"

namespace cachet {
namespace {

constexpr int kHeads = 4, kDim = 64;
const double kPi = std::acos(-1.0);

ModelConfig toy_config() {
  ModelConfig c;
  c.arch = "toy";
  c.n_vocab = 8;
  c.n_ctx_train = 16;
  c.n_embd = kHeads * kDim;
  c.n_layer = 1;
  c.n_head = kHeads;
  c.n_head_kv = kHeads;
  c.head_dim = kDim;
  c.n_ff = 1;
  c.rope_dim = 2;
  c.rope_theta = 10000;
  c.rms_eps = 1e-5;
  return c;
}

// Query and key of each head for the token at 1-based position p.
void qk_for(int p, float* q, float* k) {
  for (int i = 0; i < kHeads * kDim; ++i) q[i] = k[i] = 0.0f;
  for (int j = 0; j < kDim; ++j) {
    q[0 * kDim + j] = 1.0f;
    k[0 * kDim + j] = p % 2 == 0 ? 1.0f : -1.0f;  // head 1: even positions
    q[2 * kDim + j] = 1.0f;
    k[2 * kDim + j] = p == 1 ? 1.0f : -1.0f;      // head 3: the first token
    q[3 * kDim + j] = 1.0f;
    k[3 * kDim + j] = 1.0f;                       // head 4: every token alike
  }
  // Head 2: the last token = the query's own position: keys and queries as points on a circle, so the score
  // peaks where the key's position equals the query's; it depends on nothing but each token's own position.
  const float r = 24.0f;
  const double a = kPi / 4 * p;
  q[1 * kDim + 0] = k[1 * kDim + 0] = static_cast<float>(r * std::cos(a));
  q[1 * kDim + 1] = k[1 * kDim + 1] = static_cast<float>(r * std::sin(a));
}

void write_kv(ContiguousKvCache& cache, int pos0, const std::vector<float>& values) {
  std::vector<float> q(kHeads * kDim), k(kHeads * kDim), v(kHeads * kDim);
  for (size_t i = 0; i < values.size(); ++i) {
    const int p = pos0 + static_cast<int>(i) + 1;
    qk_for(p, q.data(), k.data());
    for (int h = 0; h < kHeads; ++h)
      for (int j = 0; j < kDim; ++j) v[h * kDim + j] = j == 0 ? values[i] : 0.0f;
    kernels().kv_store(DType::kF32, k.data(), cache.k_row(0, p - 1), kHeads * kDim);
    kernels().kv_store(DType::kF32, v.data(), cache.v_row(0, p - 1), kHeads * kDim);
  }
}

// Contexts (one per head) of the tokens at 1-based positions [first, last].
std::vector<std::vector<float>> contexts(ThreadPool& pool, ContiguousKvCache& cache, int first, int last) {
  const int n = last - first + 1;
  std::vector<float> q(n * kHeads * kDim), k(kHeads * kDim), out(n * kHeads * kDim);
  std::vector<int32_t> pos(n), seq(n, 0);
  for (int i = 0; i < n; ++i) {
    qk_for(first + i, q.data() + i * kHeads * kDim, k.data());
    pos[i] = first + i - 1;
  }
  KvView seqs[] = {cache.view()};
  attention(pool, {q.data(), out.data(), n, pos.data(), seq.data(), seqs, 0, kHeads, kHeads, kDim});
  std::vector<std::vector<float>> r(n, std::vector<float>(kHeads));
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < kHeads; ++h) r[i][h] = out[(i * kHeads + h) * kDim];
  return r;
}

TEST(ToyAttention, Seed002NumbersWithAndWithoutCache) {
  ThreadPool pool(2);
  const ModelConfig cfg = toy_config();
  const std::vector<float> prompt = {10, 20, 1, 5};  // Today weather is so
  const float nice = 7;

  // Prefill: the whole prompt in one pass.
  ContiguousKvCache cache(cfg, 8, DType::kF32);
  write_kv(cache, 0, prompt);
  auto pre = contexts(pool, cache, 1, 4);
  const std::vector<float> want_prefill = {12.5f, 5.0f, 10.0f, 9.0f};
  for (int h = 0; h < kHeads; ++h) EXPECT_NEAR(pre[3][h], want_prefill[h], 1e-4) << "prefill head " << h + 1;

  // Decode "nice" against the cache: only its own K and V are computed and appended.
  write_kv(cache, 4, {nice});
  auto dec = contexts(pool, cache, 5, 5)[0];
  // No cache: all five tokens recomputed from scratch.
  ContiguousKvCache fresh(cfg, 8, DType::kF32);
  write_kv(fresh, 0, {10, 20, 1, 5, nice});
  auto all = contexts(pool, fresh, 1, 5);
  const std::vector<float> want_decode = {12.5f, 7.0f, 10.0f, 8.6f};
  for (int h = 0; h < kHeads; ++h) {
    EXPECT_NEAR(dec[h], want_decode[h], 1e-4) << "decode head " << h + 1;
    EXPECT_EQ(dec[h], all[4][h]) << "cached and uncached differ for head " << h + 1;
  }
}

}  // namespace
}  // namespace cachet
