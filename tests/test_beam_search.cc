// Beam search on hand-set toy distributions against brute-force enumeration, and on a model: width 1 is
// greedy decoding; wider beams fork paged-KV sequences that share the prompt's blocks.
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/beam_search.h"
#include "engine/generate.h"
#include "kv/kv_cache.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

using Dist = std::function<std::vector<double>(const std::vector<int32_t>& prefix)>;

// A scorer over a toy "model" given as next-token probabilities of each prefix.
BeamScorer toy_scorer(const Dist& dist) {
  auto prefixes = std::make_shared<std::vector<std::vector<int32_t>>>();
  return [dist, prefixes](const std::vector<int>& parents, const std::vector<int32_t>& tokens)
             -> Result<std::vector<std::vector<float>>> {
    std::vector<std::vector<int32_t>> next;
    for (size_t i = 0; i < parents.size(); ++i) {
      std::vector<int32_t> p = parents[i] < 0 ? std::vector<int32_t>{} : (*prefixes)[parents[i]];
      if (parents[i] >= 0) p.push_back(tokens[i]);
      next.push_back(p);
    }
    *prefixes = next;
    std::vector<std::vector<float>> out;
    for (const auto& p : next) {
      std::vector<float> lp;
      for (double x : dist(p)) lp.push_back(static_cast<float>(std::log(x)));
      out.push_back(lp);
    }
    return out;
  };
}

std::pair<std::vector<int32_t>, double> brute_force(const Dist& dist, int vocab, int len) {
  std::vector<int32_t> best, cur;
  double best_lp = -1e300;
  std::function<void(double)> rec = [&](double lp) {
    if (static_cast<int>(cur.size()) == len) {
      if (lp > best_lp) best_lp = lp, best = cur;
      return;
    }
    auto d = dist(cur);
    for (int t = 0; t < vocab; ++t) {
      cur.push_back(t);
      rec(lp + std::log(d[t]));
      cur.pop_back();
    }
  };
  rec(0.0);
  return {best, best_lp};
}

TEST(BeamSearch, FindsTheBestSequenceGreedyMisses) {
  // A B C: greedy takes A (0.5) then 0.34; the best is B then A: 0.4 * 0.9 = 0.36.
  Dist d = [](const std::vector<int32_t>& p) -> std::vector<double> {
    if (p.empty()) return {0.5, 0.4, 0.1};
    if (p.back() == 0) return {0.34, 0.33, 0.33};
    if (p.back() == 1) return {0.9, 0.05, 0.05};
    return {0.3, 0.3, 0.4};
  };
  auto [want, want_lp] = brute_force(d, 3, 2);
  BeamSearchParams p;
  p.max_tokens = 2;
  p.width = 2;
  p.length_penalty = 0.0f;
  auto r = beam_search(p, toy_scorer(d));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->tokens, want);
  EXPECT_EQ(want, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(r->logprob, want_lp, 1e-6);
  p.width = 1;
  auto g = beam_search(p, toy_scorer(d));
  EXPECT_EQ(g->tokens, (std::vector<int32_t>{0, 0}));  // width 1 is greedy
}

TEST(BeamSearch, WideEnoughBeamsEqualBruteForceOnRandomToys) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    std::map<std::vector<int32_t>, std::vector<double>> table;
    Dist d = [&](const std::vector<int32_t>& p) {
      auto it = table.find(p);
      if (it != table.end()) return it->second;
      std::vector<double> v(4);
      double s = 0;
      for (double& x : v) s += x = 0.05 + std::uniform_real_distribution<double>(0, 1)(rng);
      for (double& x : v) x /= s;
      return table[p] = v;
    };
    auto [want, want_lp] = brute_force(d, 4, 4);
    BeamSearchParams p;
    p.max_tokens = 4;
    p.width = 64;  // 4^3: every prefix survives to the last step, so the search is exhaustive
    p.length_penalty = 0.0f;
    auto r = beam_search(p, toy_scorer(d));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->tokens, want) << "trial " << trial;
    EXPECT_NEAR(r->logprob, want_lp, 1e-5);
  }
}

TEST(BeamSearch, WidthOneOnAModelIsGreedy) {
  SyntheticSpec s;
  s.type = DType::kQ8_0;
  s.embd_type = DType::kQ8_0;
  const std::string path = testing::temp_path("beam.gguf");
  ASSERT_TRUE(write_synthetic_model(s, path).is_ok());
  auto m = load_model(path, {2});
  ASSERT_TRUE(m.is_ok());
  const std::vector<int32_t> prompt = {5, 17, 3, 99, 42, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  GenerateOptions o;
  o.sampling.max_tokens = 12;
  o.stop_at_eos = false;
  auto greedy = generate(**m, prompt, o);
  ASSERT_TRUE(greedy.is_ok());
  BeamSearchParams p;
  p.width = 1;
  p.max_tokens = 12;
  auto b1 = beam_search_model(**m, prompt, p);
  ASSERT_TRUE(b1.is_ok()) << b1.status().message();
  EXPECT_EQ(b1->tokens, greedy->token_ids);
  p.width = 4;
  auto b4 = beam_search_model(**m, prompt, p);
  ASSERT_TRUE(b4.is_ok());
  // The forked beams scored their tokens right: recompute the winner's log-probability in one plain pass.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), b4->tokens.begin(), b4->tokens.end());
  const int64_t V = (*m)->config().n_vocab;
  ContiguousKvCache cache((*m)->config(), static_cast<int>(all.size()), DType::kF16);
  std::vector<float> logits(all.size() * V);
  ASSERT_TRUE((*m)->forward(ForwardBatch::single(cache, all, 0, true), logits.data()).is_ok());
  double lp = 0;
  for (size_t i = 0; i < b4->tokens.size(); ++i) {
    const float* l = logits.data() + (prompt.size() - 1 + i) * V;
    double mx = l[0], s = 0;
    for (int64_t j = 1; j < V; ++j) mx = std::max<double>(mx, l[j]);
    for (int64_t j = 0; j < V; ++j) s += std::exp(l[j] - mx);
    lp += l[b4->tokens[i]] - mx - std::log(s);
  }
  EXPECT_NEAR(b4->logprob, lp, 1e-3);
}

}  // namespace
}  // namespace cachet
