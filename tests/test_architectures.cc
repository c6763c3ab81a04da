// Every attention-only architecture (llama, qwen2/3, MoEs, gemma2/3/4, phi3, gpt-oss, granite, deepseek2), on synthetic files: one-pass prefill == one token at a time and cached decode == the
// no-cache recompute, bitwise; the paged cache == the contiguous one, bitwise; a batch of several sequences ==
// each alone (MoE: tokens picking different experts); routing against a brute-force reference; and files that
// say something cachet would not apply refuse to load, naming it.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_block_storage.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/ops.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

struct Arch {
  std::string label;
  SyntheticSpec spec;
};

std::vector<Arch> archs() {
  std::vector<Arch> v;
  auto add = [&](std::string label, std::string arch, auto tweak) {
    for (DType t : {DType::kF32, DType::kQ4_0}) {
      SyntheticSpec s;
      s.arch = arch;
      s.type = t;
      s.embd_type = t == DType::kF32 ? DType::kF32 : DType::kQ8_0;
      s.n_embd = 64, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 96, s.n_layer = 3, s.n_vocab = 300;
      s.tied_output = false;
      tweak(s);
      v.push_back({label + "_" + dtype_name(t), s});
    }
  };
  add("llama3", "llama", [](SyntheticSpec& s) { s.rope_freqs = true; });
  add("mixtral", "llama", [](SyntheticSpec& s) { s.n_expert = 4, s.n_expert_used = 2; });
  add("qwen2", "qwen2", [](SyntheticSpec&) {});
  add("qwen3", "qwen3", [](SyntheticSpec& s) { s.head_dim = 32; });
  add("qwen3moe", "qwen3moe", [](SyntheticSpec& s) { s.n_expert = 6, s.n_expert_used = 3, s.head_dim = 32; });
  // Windows shorter than the prompts and not a multiple of the attention tile; soft-caps that bite.
  add("gemma2", "gemma2", [](SyntheticSpec& s) { s.sliding_window = 11, s.attn_softcap = 2.0, s.final_softcap = 3.0; });
  add("gemma3", "gemma3", [](SyntheticSpec& s) { s.sliding_window = 11, s.head_dim = 32, s.n_layer = 7; });
  add("phi3", "phi3", [](SyntheticSpec&) {});
  add("smollm3", "smollm3", [](SyntheticSpec& s) { s.n_layer = 4; });  // layer 3 without RoPE
  add("mistral3", "mistral3", [](SyntheticSpec& s) {  // YaRN; the temperature past position 8
    s.rope_scaling = "yarn", s.rope_scale = 4.0, s.rope_orig_ctx = 8, s.attn_temp_scale = 0.5;
  });
  // Sinks, biases, a biased router over biased experts, every other layer windowed (shorter than the prompts).
  add("gpt-oss", "gpt-oss", [](SyntheticSpec& s) {
    s.n_expert = 4, s.n_expert_used = 2, s.head_dim = 32, s.sliding_window = 11;
  });
  // Gemma 4: local layers of 16-wide heads, 2 KV heads; global ones of 32-wide heads, 1 KV head, quarter-turning
  // RoPE. E2B-shaped: per-layer embeddings, the last 3 layers on earlier layers' KV with a double-wide FFN; the
  // MoE one: K as V on the global layers, a dense MLP beside 4 experts (2 used).
  add("gemma4", "gemma4", [](SyntheticSpec& s) {
    s.n_layer = 9, s.head_dim = 16, s.global_head_dim = 32, s.n_head_kv_global = 1, s.full_attn_interval = 3;
    s.sliding_window = 11, s.final_softcap = 3.0, s.n_kv_shared = 3, s.n_embd_per_layer = 32, s.double_wide_mlp = true;
  });
  add("gemma4moe", "gemma4", [](SyntheticSpec& s) {
    s.n_layer = 6, s.head_dim = 16, s.global_head_dim = 32, s.n_head_kv_global = 1, s.full_attn_interval = 3;
    s.sliding_window = 11, s.k_eq_v = true, s.n_expert = 4, s.n_expert_used = 2, s.n_ff = 64, s.n_ff_dense = 96;
  });
  // Granite 3.x: its four scalars (embedding, residual, attention, logit); the MoE with a shared expert.
  add("granite", "granite", [](SyntheticSpec&) {});
  add("granitemoe", "granitemoe", [](SyntheticSpec& s) { s.n_expert = 4, s.n_expert_used = 2, s.n_ff_shared = 64; });
  // DeepSeek-V3-shaped MLA (a compressed query, the cache one 32-wide latent + 16 rotated dims per token): a
  // leading dense layer, then 4 experts (2 used) behind a biased sigmoid router limited to the better of 2 groups,
  // beside a shared expert; Lite-shaped: Q from the input, softmax routing, DeepSeek's YaRN.
  add("deepseek2", "deepseek2", [](SyntheticSpec& s) {
    s.head_dim = 16, s.kv_lora_rank = 32, s.mla_rope_dim = 16, s.q_lora_rank = 32, s.n_expert = 4, s.n_expert_used = 2;
    s.n_ff = 32, s.n_ff_shared = 32, s.n_dense_lead = 1, s.n_ff_dense = 96, s.sigmoid_router = true;
    s.n_expert_groups = 2, s.n_expert_groups_used = 1;
  });
  add("deepseek2lite", "deepseek2", [](SyntheticSpec& s) {
    s.head_dim = 16, s.kv_lora_rank = 32, s.mla_rope_dim = 16, s.n_expert = 4, s.n_expert_used = 2, s.n_ff = 32;
    s.n_ff_shared = 32, s.n_dense_lead = 1, s.n_ff_dense = 96, s.rope_scaling = "yarn", s.rope_scale = 4.0;
    s.rope_orig_ctx = 8, s.rope_yarn_log_mul = 0.707;
  });
  return v;
}

std::unique_ptr<Model> load(const Arch& a, int threads = 2) {
  const std::string path = testing::temp_path(a.label + ".gguf");
  EXPECT_TRUE(write_synthetic_model(a.spec, path).is_ok()) << a.label;
  LoadOptions o;
  o.n_threads = threads;
  auto m = load_model(path, o);
  EXPECT_TRUE(m.is_ok()) << a.label << ": " << m.status().message();
  return std::move(m).value();
}

std::vector<int32_t> prompt(const Model& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + static_cast<int32_t>(rng() % (m.config().n_vocab - 3)));
  return p;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Architectures, PrefillEqualsOneTokenAtATimeBitwise) {
  for (const Arch& a : archs()) {
    auto m = load(a);
    const ModelConfig& c = m->config();
    const auto p = prompt(*m, 40, 2);
    const int n = static_cast<int>(p.size());
    for (DType kv : {DType::kF32, DType::kF16}) {
      ContiguousKvCache one(c, n, kv), step(c, n, kv);
      std::vector<float> la(static_cast<size_t>(n) * c.n_vocab), lb(la.size());
      ASSERT_TRUE(m->forward(ForwardBatch::single(one, p, 0, true), la.data()).is_ok());
      for (int i = 0; i < n; ++i)
        ASSERT_TRUE(m->forward(ForwardBatch::single(step, {p[i]}, i, true), lb.data() + i * c.n_vocab).is_ok());
      EXPECT_TRUE(same(la, lb)) << a.label << " kv " << dtype_name(kv);
    }
  }
}

// Every matrix of a quantized file runs on the repacked integer path: one the loader forgot to repack would run
// on the slow row-by-row one, right but several times slower (it happened to Mamba-2's input projection).
TEST(Architectures, EveryQuantizedMatmulRunsPacked) {
  for (const Arch& a : archs()) {
    if (a.spec.type == DType::kF32) continue;
    auto m = load(a);
    const ModelConfig& c = m->config();
    const auto p = prompt(*m, 40, 2);
    ContiguousKvCache cache(c, static_cast<int>(p.size()) + 1, DType::kF16);
    std::vector<float> logits(c.n_vocab);
    const int64_t before = unpacked_matmuls();
    ASSERT_TRUE(m->forward(ForwardBatch::single(cache, p, 0, false), logits.data()).is_ok());
    ASSERT_TRUE(m->forward(ForwardBatch::single(cache, {p[0]}, static_cast<int>(p.size()), false), logits.data()).is_ok());
    EXPECT_EQ(unpacked_matmuls(), before) << a.label;
  }
}

TEST(Architectures, CachedDecodeEqualsNoCacheRecomputeBitwise) {
  for (const Arch& a : archs()) {
    auto m = load(a);
    const ModelConfig& c = m->config();
    auto seq = prompt(*m, 9, 3);
    const int n0 = static_cast<int>(seq.size());
    ContiguousKvCache cache(c, 64, DType::kF32);
    std::vector<float> step(c.n_vocab), full(c.n_vocab);
    ASSERT_TRUE(m->forward(ForwardBatch::single(cache, seq, 0, false), step.data()).is_ok());
    for (int i = 0; i < 30; ++i) {  // greedy: the next token from the cached logits
      const int32_t next = static_cast<int32_t>(std::max_element(step.begin(), step.end()) - step.begin());
      seq.push_back(next);
      ASSERT_TRUE(m->forward(ForwardBatch::single(cache, {next}, n0 + i, false), step.data()).is_ok());
      ContiguousKvCache fresh(c, static_cast<int>(seq.size()), DType::kF32);
      ASSERT_TRUE(m->forward(ForwardBatch::single(fresh, seq, 0, false), full.data()).is_ok());
      ASSERT_TRUE(same(step, full)) << a.label << " at position " << seq.size() - 1;
    }
  }
}

TEST(Architectures, PagedCacheEqualsContiguousAndBatchEqualsAlone) {
  for (const Arch& a : archs()) {
    auto m = load(a);
    const ModelConfig& c = m->config();
    const int64_t V = c.n_vocab;
    constexpr int kBs = 16;
    KvBlockStorage storage(c, 16, kBs, DType::kF16);
    KvCacheManager mgr(16, kBs);
    // Two sequences of different lengths in one batch (paged), against each alone (contiguous).
    const auto p1 = prompt(*m, 37, 5), p2 = prompt(*m, 21, 6);
    ASSERT_TRUE(mgr.append(1, static_cast<int>(p1.size())) && mgr.append(2, static_cast<int>(p2.size())));
    ForwardBatch b;
    b.kv = &storage;
    b.add_sequence(mgr.block_table(1));
    b.add_sequence(mgr.block_table(2));
    for (size_t i = 0; i < p1.size() || i < p2.size(); ++i)
      for (int s = 0; s < 2; ++s) {
        const auto& p = s == 0 ? p1 : p2;
        if (i < p.size()) b.add_token(p[i], static_cast<int32_t>(i), s, true);
      }
    std::vector<float> batched(static_cast<size_t>(b.n_tokens()) * V);
    ASSERT_TRUE(m->forward(b, batched.data()).is_ok());
    for (int s = 0; s < 2; ++s) {
      const auto& p = s == 0 ? p1 : p2;
      ContiguousKvCache alone_cache(c, 64, DType::kF16);
      std::vector<float> alone(p.size() * V);
      ASSERT_TRUE(m->forward(ForwardBatch::single(alone_cache, p, 0, true), alone.data()).is_ok());
      int row = 0;
      for (int t = 0; t < b.n_tokens(); ++t) {
        if (b.seq_index[t] != s) continue;
        const int pos = b.positions[t];
        ASSERT_EQ(0, std::memcmp(batched.data() + static_cast<size_t>(t) * V, alone.data() + static_cast<size_t>(pos) * V,
                                 V * sizeof(float)))
            << a.label << " sequence " << s << " position " << pos;
        ++row;
      }
      EXPECT_EQ(row, static_cast<int>(p.size()));
    }
  }
}

// A brute-force router: every k-subset's probability mass, the heaviest subset (lexicographically first on ties).
TEST(Moe, RoutingMatchesBruteForce) {
  auto brute = [](const std::vector<float>& z, int k, bool renorm) {
    const int E = static_cast<int>(z.size());
    std::vector<double> p(E);
    double mx = *std::max_element(z.begin(), z.end()), sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(static_cast<double>(z[e]) - mx);
    for (double& x : p) x /= sum;
    // Rank experts: by probability, then index; the top k in that order.
    std::vector<int> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    for (int i = 0; i < E; ++i)
      for (int j = i + 1; j < E; ++j)
        if (p[idx[j]] > p[idx[i]] || (p[idx[j]] == p[idx[i]] && idx[j] < idx[i])) std::swap(idx[i], idx[j]);
    idx.resize(k);
    double chosen = 0;
    for (int e : idx) chosen += p[e];
    std::vector<std::pair<int, double>> out;
    for (int e : idx) out.push_back({e, renorm ? p[e] / chosen : p[e]});
    return out;
  };
  std::mt19937 rng(11);
  std::vector<std::vector<float>> cases = {
      {1.0f, 1.0f, 1.0f, 1.0f},              // all tied: the lowest indices
      {0.5f, 2.0f, 2.0f, -1.0f, 2.0f},       // a three-way tie for two places
      {-3.0f, 0.0f, 5.0f, 5.0f, 0.0f, 1.0f},
  };
  for (int i = 0; i < 200; ++i) {
    std::vector<float> z(2 + rng() % 14);
    for (float& x : z) x = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;  // many ties
    cases.push_back(z);
  }
  for (const auto& z : cases) {
    const int E = static_cast<int>(z.size());
    for (int k = 1; k <= std::min(E, 4); ++k)
      for (bool renorm : {true, false}) {
        const MoeRouting r = route_experts(z.data(), 1, E, k, renorm, 1.0f);
        const auto want = brute(z, k, renorm);
        for (int j = 0; j < k; ++j) {
          ASSERT_EQ(r.expert[j], want[j].first) << "E=" << E << " k=" << k << " slot " << j;
          ASSERT_NEAR(r.weight[j], want[j].second, 1e-6) << "E=" << E << " k=" << k;
        }
        if (renorm) {
          double s = 0;
          for (int j = 0; j < k; ++j) s += r.weight[j];
          ASSERT_NEAR(s, 1.0, 1e-6);
        }
      }
  }
  // Tokens are routed independently: a batch's routing is each token's alone.
  std::vector<float> z(5 * 8);
  for (float& x : z) x = static_cast<float>(rng() % 1000) / 100.0f;
  const MoeRouting all = route_experts(z.data(), 5, 8, 3, true, 0.5f);
  for (int t = 0; t < 5; ++t) {
    const MoeRouting one = route_experts(z.data() + t * 8, 1, 8, 3, true, 0.5f);
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(all.expert[t * 3 + j], one.expert[j]);
      EXPECT_EQ(all.weight[t * 3 + j], one.weight[j]);
    }
  }
}

// A sigmoid router with a selection bias (LFM2-MoE): the bias decides which experts, the probabilities alone
// weigh them; without a bias the order is the probabilities'.
TEST(Moe, SigmoidRouterChoosesByBiasedScoreAndWeighsByProbability) {
  const std::vector<float> z = {2.0f, 1.0f, 0.0f, -1.0f};  // sigmoid: 0.881, 0.731, 0.5, 0.269
  auto sig = [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  const MoeRouting plain = route_experts(z.data(), 1, 4, 2, true, 1.0f, true, nullptr);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(plain.weight[0], sig(2.0f) / (sig(2.0f) + sig(1.0f)), 1e-6);
  const std::vector<float> bias = {0.0f, 0.0f, 0.5f, 0.7f};  // scores 0.881, 0.731, 1.0, 0.969
  const MoeRouting biased = route_experts(z.data(), 1, 4, 2, true, 2.0f, true, bias.data());
  EXPECT_EQ(biased.expert, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(biased.weight[0], 2.0f * sig(0.0f) / (sig(0.0f) + sig(-1.0f)), 1e-6);
  EXPECT_NEAR(biased.weight[1], 2.0f * sig(-1.0f) / (sig(0.0f) + sig(-1.0f)), 1e-6);
  const MoeRouting unnormalized = route_experts(z.data(), 1, 4, 2, false, 1.0f, true, bias.data());
  EXPECT_NEAR(unnormalized.weight[0], sig(0.0f), 1e-6);
}

// Group-limited routing (DeepSeek-V3): a group is scored by its two best selection scores, not its best one;
// only the best groups' experts compete, even when another group holds the single best expert.
TEST(Moe, GroupLimitedRoutingChoosesFromTheBestGroupsByTheirTwoBest) {
  // Softmax over 6 experts in 3 groups of 2 (the groups are scored on the probabilities); group 0 holds the best
  // expert but a poor second.
  const std::vector<float> z = {3.0f, -3.0f, 2.6f, 2.5f, 2.55f, 2.45f};
  const MoeRouting plain = route_experts(z.data(), 1, 6, 2, true, 1.0f);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 2}));
  const MoeRouting one_group = route_experts(z.data(), 1, 6, 2, true, 1.0f, false, nullptr, 3, 1);
  EXPECT_EQ(one_group.expert, (std::vector<int32_t>{2, 3}));  // e^2.6 + e^2.5 beats e^2.55 + e^2.45 and e^3 + e^-3
  const MoeRouting two_groups = route_experts(z.data(), 1, 6, 3, true, 1.0f, false, nullptr, 3, 2);
  EXPECT_EQ(two_groups.expert, (std::vector<int32_t>{2, 4, 3}));  // groups 1 and 2: expert 0 is out
  // The weights are the chosen probabilities, renormalized: the masking decides which, never how much.
  const float e2 = std::exp(2.6f - 3.0f), e3 = std::exp(2.5f - 3.0f);
  EXPECT_NEAR(one_group.weight[0], e2 / (e2 + e3), 1e-6);
  // With a selection bias (sigmoid router) the groups are scored on the biased scores.
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 2.0f, 2.0f};
  const MoeRouting biased = route_experts(z.data(), 1, 6, 2, true, 1.0f, true, bias.data(), 3, 1);
  EXPECT_EQ(biased.expert, (std::vector<int32_t>{4, 5}));
}

TEST(Moe, ResultsDoNotDependOnTheThreadCount) {
  // (The batch test above already mixes tokens that pick different experts: 40 random tokens over 4-6 experts.)
  // 2 threads: every expert active, at least two per thread, so each thread runs whole experts (moe_ffn); 3
  // threads: the 6-expert file runs whole experts too, the 4-expert ones split each expert's matmuls instead.
  for (const Arch& a : archs()) {
    if (a.spec.n_expert == 0) continue;
    auto m = load(a);
    const auto p = prompt(*m, 40, 9);
    ContiguousKvCache cache(m->config(), 64, DType::kF32);
    std::vector<float> l(p.size() * m->config().n_vocab);
    ASSERT_TRUE(m->forward(ForwardBatch::single(cache, p, 0, true), l.data()).is_ok());
    for (int threads : {1, 2, 3}) {
      auto m2 = load(a, threads);
      ContiguousKvCache c2(m2->config(), 64, DType::kF32);
      std::vector<float> l2(l.size());
      ASSERT_TRUE(m2->forward(ForwardBatch::single(c2, p, 0, true), l2.data()).is_ok());
      EXPECT_TRUE(same(l, l2)) << a.label << " threads " << threads;
    }
  }
}

// A synthetic file with one extra key or tensor appended.
std::string with_extra(const Arch& a, const std::string& name, bool tensor) {
  const std::string base = testing::temp_path(a.label + "_base.gguf");
  EXPECT_TRUE(write_synthetic_model(a.spec, base).is_ok());
  auto f = GgufFile::open(base);
  EXPECT_TRUE(f.is_ok());
  GgufWriter w;
  for (const std::string& k : (*f)->keys()) w.set_value(k, *(*f)->find(k));
  for (const auto& t : (*f)->tensors())
    EXPECT_TRUE(w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                             std::vector<uint8_t>(t.data, t.data + t.n_bytes))
                    .is_ok());
  if (tensor) {
    std::vector<float> v(64, 1.0f);
    EXPECT_TRUE(w.add_tensor_f32(name, DType::kF32, {64}, v.data()).is_ok());
  } else {
    w.set_f32(name, 0.5f);
  }
  const std::string path = testing::temp_path(a.label + "_extra.gguf");
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

TEST(Architectures, UnknownMathChangingTensorOrKeyRefusesToLoad) {
  const Arch a = archs()[4];  // qwen2 F32
  for (auto [name, tensor] : std::vector<std::pair<std::string, bool>>{
           {"blk.0.attn_output.bias", true},          // llama.cpp knows it; cachet does not apply it
           {"rope_factors_long.weight", true},        // LongRoPE
           {"blk.1.ffn_gate_inp.weight", true},       // experts in a dense file
           {"qwen2.attention.clamp_kqv", false},      // a clamp
           {"qwen2.logit_scale", false},              // a scale
           {"qwen2.rope.scaling.alpha", false},        // a RoPE scaling cachet does not apply
       }) {
    auto m = load_model(with_extra(a, name, tensor));
    ASSERT_FALSE(m.is_ok()) << name << " loaded";
    EXPECT_NE(m.status().message().find(name), std::string::npos) << m.status().message();
  }
  // And the known harmless ones do not.
  // YaRN's attention factor is read and applied now (model/rope_scaling.h).
  auto m = load_model(with_extra(a, "qwen2.rope.scaling.attn_factor", false));
  EXPECT_TRUE(m.is_ok()) << m.status().message();
}

TEST(Architectures, QueryScaleSoftCapsAndWindowsComeFromTheFile) {
  for (const Arch& a : archs()) {
    auto m = load(a);
    const ModelConfig& c = m->config();
    if (a.spec.arch == "gemma2") {
      EXPECT_EQ(c.attn_softcap, 2.0);
      EXPECT_EQ(c.final_softcap, 3.0);
      EXPECT_EQ(c.sliding_window, 11);
      EXPECT_EQ(c.swa_layers, "SGS");  // every other layer, layer 0 local
      EXPECT_TRUE(c.post_norms);
      EXPECT_EQ(c.ffn_act, "gelu");
    } else if (a.spec.arch == "gemma3") {
      EXPECT_EQ(c.swa_layers, "SSSSSGS");  // five local to one global
      EXPECT_EQ(c.rope_theta_swa, 10000.0);
      EXPECT_TRUE(c.qk_norm && c.post_norms);
      EXPECT_FLOAT_EQ(static_cast<float>(c.attn_scale), 1.0f / std::sqrt(32.0f));
    } else if (a.label.rfind("gemma4moe", 0) == 0) {
      EXPECT_TRUE(c.moe_beside_dense && c.v_from_k && c.v_norm);
      EXPECT_EQ(c.n_ff, 64);
      EXPECT_EQ(c.n_ff_dense, 96);
      EXPECT_EQ(c.n_kv_layers(), 6);
    } else if (a.spec.arch == "gemma4") {  // E2B-shaped
      EXPECT_EQ(c.swa_layers, "SSGSSGSSG");
      EXPECT_EQ(c.head_dim, 32);
      EXPECT_EQ(c.head_dim_swa, 16);
      EXPECT_EQ(c.n_head_kv, 1);
      EXPECT_EQ(c.n_head_kv_swa, 2);
      EXPECT_EQ(c.rope_dim_swa, 16);
      EXPECT_EQ(c.attn_scale, 1.0);
      EXPECT_EQ(c.n_kv_layers(), 6);  // layers 6..8 read layers 4 (local) and 5 (global)
      EXPECT_EQ(c.kv_layer(6), 4);
      EXPECT_EQ(c.kv_layer(8), 5);
      EXPECT_EQ(c.ffn_width(5), 96);
      EXPECT_EQ(c.ffn_width(6), 192);
      EXPECT_EQ(c.n_embd_per_layer, 32);
      // K and V bytes per token: six layers of their own, four local (2 x 16) and two global (1 x 32), f32.
      EXPECT_EQ(c.kv_bytes_per_token(4), 2 * (4 * 32 + 2 * 32) * 4);
    } else if (a.spec.arch == "qwen2") {
      EXPECT_TRUE(c.qkv_bias && c.rope_neox);
    } else if (a.spec.arch == "qwen3") {
      EXPECT_EQ(c.head_dim, 32);
      EXPECT_TRUE(c.qk_norm && !c.qkv_bias);
    } else if (a.label.rfind("llama3", 0) == 0) {
      EXPECT_TRUE(c.rope_freq_factors);
      EXPECT_FALSE(c.rope_neox);
    }
  }
}

}  // namespace
}  // namespace cachet
