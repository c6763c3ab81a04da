// The two phases and the cache, on synthetic models of every type and head layout:
// cached decode == the no-cache recompute; one-pass prefill == feeding the prompt one token at a time.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kv/kv_cache.h"
#include "model/ops.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

struct Variant {
  DType type;
  int n_head, n_head_kv;
  bool neox;
};

std::string name_of(const Variant& v) {
  return std::string(dtype_name(v.type)) + "_h" + std::to_string(v.n_head) + "_kv" + std::to_string(v.n_head_kv) +
         (v.neox ? "_neox" : "");
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    v.push_back({t, 4, 4, false});  // multi-head
    v.push_back({t, 4, 2, false});  // GQA
  }
  v.push_back({DType::kF32, 4, 1, false});  // MQA
  v.push_back({DType::kF32, 4, 2, true});   // NeoX rotation
  v.push_back({DType::kQ4_0, 8, 2, true});
  return v;
}

std::unique_ptr<Model> synth(const Variant& v, int threads = 2) {
  SyntheticSpec s;
  s.type = v.type;
  s.embd_type = v.type;
  s.n_head = v.n_head;
  s.n_head_kv = v.n_head_kv;
  s.n_embd = 64;
  s.n_ff = 160;
  s.n_layer = 2;
  s.rope_neox = v.neox;
  s.tied_output = v.type != DType::kQ4_1;  // exercise both heads
  std::string path = testing::temp_path(name_of(v) + ".gguf");
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  LoadOptions o;
  o.n_threads = threads;
  auto m = load_model(path, o);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return std::move(m).value();
}

std::vector<int32_t> prompt_for(const Model& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % m.config().n_vocab));
  return p;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

void expect_cached_equals_uncached(Model& m, const std::string& label) {
  const auto prompt = prompt_for(m, 7, 1);
  GenerateOptions o;
  o.sampling.max_tokens = 64;
  o.kv_type = DType::kF32;
  o.stop_at_eos = false;
  auto cached = generate(m, prompt, o);
  o.use_kv_cache = false;
  auto naive = generate(m, prompt, o);
  ASSERT_TRUE(cached.is_ok() && naive.is_ok());
  ASSERT_EQ(cached->token_ids.size(), 64u);
  EXPECT_EQ(cached->token_ids, naive->token_ids) << label;

  // Last-position logits: decode step by step against the cache vs one recompute of everything.
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), cached->token_ids.begin(), cached->token_ids.end() - 1);
  const int64_t V = m.config().n_vocab;
  std::vector<float> a(V), b(V);
  ContiguousKvCache cache(m.config(), static_cast<int>(seq.size()), DType::kF32);
  ForwardBatch pre = ForwardBatch::single(cache, prompt, 0, false);
  ASSERT_TRUE(m.forward(pre, a.data()).is_ok());
  for (size_t i = prompt.size(); i < seq.size(); ++i) {
    ForwardBatch step = ForwardBatch::single(cache, {seq[i]}, static_cast<int>(i), false);
    ASSERT_TRUE(m.forward(step, a.data()).is_ok());
  }
  ContiguousKvCache fresh(m.config(), static_cast<int>(seq.size()), DType::kF32);
  ForwardBatch all = ForwardBatch::single(fresh, seq, 0, false);
  ASSERT_TRUE(m.forward(all, b.data()).is_ok());
  EXPECT_LE(max_abs_diff(a, b), 1e-4f) << label;
}

// gpt-oss's clamped SwiGLU on the kernel's silu: x sigmoid(1.702 x) (y + 1) with x = min(g, 7), y = clamp(u, -7, 7),
// across and beyond the limits.
TEST(Ops, SwigluOaiClampsAndMatchesTheFormula) {
  std::vector<float> g, u;
  for (int i = 0; i <= 400; ++i) {
    g.push_back(-20.0f + 0.1f * static_cast<float>(i));
    u.push_back(20.0f - 0.1f * static_cast<float>(i));
  }
  std::vector<float> out = g, up = u;
  swiglu_oai_mul(out.data(), up.data(), static_cast<int64_t>(out.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = std::min(static_cast<double>(g[i]), 7.0), y = std::clamp(static_cast<double>(u[i]), -7.0, 7.0);
    const double want = x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
    EXPECT_NEAR(out[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << "g " << g[i] << " u " << u[i];
  }
  // Beyond the limits the clamp holds the result: g = 20, u = -20 gives 7 sigmoid(11.9) (-6).
  EXPECT_NEAR(out[400], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-4);
}

TEST(Model, CachedDecodeEqualsNoCacheRecompute) {
  for (const Variant& v : variants()) {
    auto m = synth(v);
    expect_cached_equals_uncached(*m, name_of(v));
  }
}

TEST(Model, CachedDecodeEqualsNoCacheOnStories260K) {
  auto m = load_model(testing::shared_dir() + "/models/stories260K.bin");
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  expect_cached_equals_uncached(**m, "stories260K");
}

TEST(Model, PrefillInOnePassEqualsOneTokenAtATime) {
  for (const Variant& v : variants()) {
    auto m = synth(v);
    const ModelConfig& c = m->config();
    const auto prompt = prompt_for(*m, 33, 2);
    const int n = static_cast<int>(prompt.size());
    for (DType kv : {DType::kF32, DType::kF16}) {
      ContiguousKvCache one(c, n, kv), step(c, n, kv);
      std::vector<float> la(static_cast<size_t>(n) * c.n_vocab), lb(la.size());
      ASSERT_TRUE(m->forward(ForwardBatch::single(one, prompt, 0, true), la.data()).is_ok());
      for (int i = 0; i < n; ++i)
        ASSERT_TRUE(m->forward(ForwardBatch::single(step, {prompt[i]}, i, true), lb.data() + i * c.n_vocab).is_ok());
      EXPECT_LE(max_abs_diff(la, lb), 1e-4f) << name_of(v);
      // The kernels' reduction-order contract makes this exact, not just close.
      EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << name_of(v) << " not bitwise";
      const size_t elem = kv == DType::kF32 ? 4 : 2;
      for (int l = 0; l < c.n_layer; ++l) {
        for (int p = 0; p < n; ++p) {
          const size_t bytes = c.kv_dim() * elem;
          if (kv == DType::kF32) {
            auto* ka = reinterpret_cast<const float*>(one.k_row(l, p));
            auto* kb = reinterpret_cast<const float*>(step.k_row(l, p));
            auto* va = reinterpret_cast<const float*>(one.v_row(l, p));
            auto* vb = reinterpret_cast<const float*>(step.v_row(l, p));
            for (int64_t j = 0; j < c.kv_dim(); ++j) {
              ASSERT_NEAR(ka[j], kb[j], 1e-4f);
              ASSERT_NEAR(va[j], vb[j], 1e-4f);
            }
          }
          EXPECT_EQ(0, std::memcmp(one.k_row(l, p), step.k_row(l, p), bytes)) << name_of(v) << " K l" << l << " p" << p;
          EXPECT_EQ(0, std::memcmp(one.v_row(l, p), step.v_row(l, p), bytes)) << name_of(v) << " V l" << l << " p" << p;
        }
      }
    }
  }
}

TEST(Model, TwoSequencesInOneBatchEqualSeparateRuns) {
  auto m = synth({DType::kQ4_0, 4, 2, false});
  const ModelConfig& c = m->config();
  auto pa = prompt_for(*m, 9, 3), pb = prompt_for(*m, 5, 4);
  ContiguousKvCache sa(c, 16, DType::kF16), sb(c, 16, DType::kF16);
  KvBlockStorage pool(c, 2, 16, DType::kF16);  // a on block 1, b on block 0
  ForwardBatch both;
  both.kv = &pool;
  both.add_sequence({1});
  both.add_sequence({0});
  for (size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {  // interleaved tokens of both sequences
    const int pos = static_cast<int>(i);
    if (i < pa.size()) both.add_token(pa[i], pos, 0, i + 1 == pa.size());
    if (i < pb.size()) both.add_token(pb[i], pos, 1, i + 1 == pb.size());
  }
  std::vector<float> lboth(2 * c.n_vocab), la(c.n_vocab), lb(c.n_vocab);
  ASSERT_TRUE(m->forward(both, lboth.data()).is_ok());
  ASSERT_TRUE(m->forward(ForwardBatch::single(sa, pa, 0, false), la.data()).is_ok());
  ASSERT_TRUE(m->forward(ForwardBatch::single(sb, pb, 0, false), lb.data()).is_ok());
  // Logit rows come in batch order: b's last token (i = 4) precedes a's (i = 8).
  EXPECT_EQ(0, std::memcmp(lboth.data(), lb.data(), lb.size() * 4));
  EXPECT_EQ(0, std::memcmp(lboth.data() + c.n_vocab, la.data(), la.size() * 4));
}

TEST(Model, ThreadCountDoesNotChangeResults) {
  auto m1 = synth({DType::kQ8_0, 4, 2, false}, 1);
  auto m2 = synth({DType::kQ8_0, 4, 2, false}, 2);
  const auto prompt = prompt_for(*m1, 20, 5);
  GenerateOptions o;
  o.sampling.max_tokens = 32;
  o.stop_at_eos = false;
  auto a = generate(*m1, prompt, o);
  auto b = generate(*m2, prompt, o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->token_ids, b->token_ids);
}

TEST(Model, BadBatchesAreErrors) {
  auto m = synth({DType::kF32, 4, 2, false});
  ContiguousKvCache c(m->config(), 4, DType::kF32);
  std::vector<float> logits(m->config().n_vocab);
  EXPECT_FALSE(m->forward(ForwardBatch::single(c, {1, 2, 3, 4, 5}, 0, false), logits.data()).is_ok());
  EXPECT_FALSE(m->forward(ForwardBatch::single(c, {static_cast<int32_t>(m->config().n_vocab)}, 0, false),
                          logits.data()).is_ok());
  EXPECT_FALSE(m->forward(ForwardBatch::single(c, {-1}, 0, false), logits.data()).is_ok());
  // Plain data from elsewhere (another rank's bytes) is checked too: slots, blocks and copies in range.
  ForwardBatch slot = ForwardBatch::single(c, {1}, 0, false);
  slot.slots[0] = 4;
  EXPECT_FALSE(m->forward(slot, logits.data()).is_ok());
  ForwardBatch block = ForwardBatch::single(c, {1}, 0, false);
  block.block_tables[0][0] = 1;
  EXPECT_FALSE(m->forward(block, logits.data()).is_ok());
  ForwardBatch copy = ForwardBatch::single(c, {1}, 0, false);
  copy.copies.push_back({0, 1, 1});
  EXPECT_FALSE(m->forward(copy, logits.data()).is_ok());
  ForwardBatch none = ForwardBatch::single(c, {1}, 0, false);
  none.kv = nullptr;
  EXPECT_FALSE(m->forward(none, logits.data()).is_ok());
  EXPECT_TRUE(m->forward(ForwardBatch::single(c, {1}, 0, false), logits.data()).is_ok());
  auto empty = generate(*m, {}, GenerateOptions{});
  EXPECT_FALSE(empty.is_ok());
}

// matmul_multi shares one quantized input only between weights that read the same activations (on the AVX2
// table the K types quantize theirs per super-block, the others per 32-block): over a mix of types, fused or
// not, every output is bitwise what matmul() gives it alone, at every token count. Runs on every table
// (scripts/test_isa_levels.sh runs the Model tests under each).
TEST(Model, MatmulMultiOverMixedTypesEqualsOneAtATime) {
  constexpr int64_t K = 512, N = 40;
  ThreadPool pool(2);
  const DType types[] = {DType::kQ4_K, DType::kQ8_0, DType::kQ6_K, DType::kQ5_K, DType::kQ4_0};
  std::vector<std::vector<uint8_t>> raw;
  std::vector<AlignedBuffer<uint8_t>> packed(std::size(types));
  std::vector<TensorView> w(std::size(types));
  for (size_t i = 0; i < std::size(types); ++i) {
    const size_t rb = *row_bytes(types[i], K);
    raw.emplace_back(rb * N);
    const auto src = testing::random_floats(K * N, 90 + i);
    for (int64_t r = 0; r < N; ++r) ASSERT_TRUE(quantize_row(types[i], src.data() + r * K, raw[i].data() + r * rb, K).is_ok());
    w[i].type = types[i];
    w[i].ne = {K, N, 1, 1};
    w[i].data = raw[i].data();
    w[i].row_bytes = rb;
    pack_weight(pool, &w[i], &packed[i]);
    ASSERT_NE(w[i].packed, nullptr);
  }
  for (int n : {1, 3, 9}) {
    auto x = testing::random_floats(n * K, 7 + n, -2.0f, 2.0f);
    x[5] = 9.0f;  // an outlier: super-block activation scales differ from per-block ones
    std::vector<std::vector<float>> alone(std::size(types), std::vector<float>(n * N));
    for (size_t i = 0; i < std::size(types); ++i) matmul(pool, w[i], x.data(), n, alone[i].data());
    // Each call's outputs checked on their own: Q8_0 after a K type, a K type after Q8_0, K types together.
    const std::vector<std::vector<int>> calls = {{0, 1, 2}, {1, 0, 3}, {2, 3, 0}, {4, 1}};
    for (const auto& c : calls) {
      std::vector<std::vector<float>> y(c.size(), std::vector<float>(n * N, -1.0f));
      std::vector<MatmulOut> outs;
      for (size_t j = 0; j < c.size(); ++j) outs.push_back({&w[c[j]], y[j].data()});
      if (outs.size() == 3) matmul_multi(pool, {outs[0], outs[1], outs[2]}, x.data(), n);
      else matmul_multi(pool, {outs[0], outs[1]}, x.data(), n);
      for (size_t j = 0; j < c.size(); ++j)
        EXPECT_EQ(0, std::memcmp(alone[c[j]].data(), y[j].data(), n * N * sizeof(float)))
            << dtype_name(types[c[j]]) << " in call " << c[0] << c[1] << " n=" << n << " on " << isa_name(kernels().isa);
    }
  }
}

}  // namespace
}  // namespace cachet
