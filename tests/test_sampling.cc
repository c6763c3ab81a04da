// The sampler against an independent, sort-based model of the intended distribution: 200k draws per
// setting, chi-square at p = 0.001; a deliberately wrong top-p must fail the same test.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "sampling/stop.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const std::vector<float> kLogits = {2.0f, 1.5f, 1.5f, 0.3f, -0.5f, 3.1f, -kInf, 0.9f, 0.0f, -2.0f, 2.6f, 1.0f};

// The intended distribution, computed the obvious way: full sort, cumulative sums.
std::vector<double> expected(const SamplingParams& p, std::vector<float> l, const std::vector<int32_t>& history) {
  const int n = static_cast<int>(l.size());
  std::map<int32_t, int> counts;
  for (int32_t t : history) counts[t]++;
  for (auto [id, c] : counts) {
    if (p.repetition_penalty != 1.0f) l[id] = l[id] > 0 ? l[id] / p.repetition_penalty : l[id] * p.repetition_penalty;
    l[id] -= c * p.frequency_penalty + p.presence_penalty;
  }
  for (auto [id, b] : p.logit_bias) l[id] += b;
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<double> prob(n, 0.0);
  int keep = 0;
  while (keep < n && l[order[keep]] > -kInf) ++keep;
  if (p.top_k > 0) keep = std::min(keep, p.top_k);
  auto softmax_over = [&](int m) {
    std::vector<double> q(n, 0.0);
    double mx = l[order[0]] / p.temperature, s = 0;
    for (int i = 0; i < m; ++i) s += q[order[i]] = std::exp(l[order[i]] / p.temperature - mx);
    for (double& x : q) x /= s;
    return q;
  };
  if (p.top_p < 1.0f) {
    auto q = softmax_over(keep);
    double cum = 0;
    int m = 0;
    while (m < keep) {
      cum += q[order[m++]];
      if (cum >= p.top_p) break;
    }
    keep = std::max(1, m);
  }
  if (p.min_p > 0.0f) {
    auto q = softmax_over(keep);
    int m = 0;
    while (m < keep && q[order[m]] >= p.min_p * q[order[0]]) ++m;
    keep = m;
  }
  return softmax_over(keep);
}

// Wilson-Hilferty approximation of the chi-square quantile at 1 - 0.001.
double chi2_critical(int df) {
  const double z = 3.090232;
  double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

using SampleFn = std::function<int32_t(Sampler&)>;

// True when 200k draws are consistent with `want` (no draw outside its support; chi-square below the
// 0.001 critical value).
bool consistent(const std::vector<double>& want, const SampleFn& draw_one, Sampler& s, std::string* why) {
  const int kDraws = 200000;
  std::vector<int> got(want.size(), 0);
  for (int i = 0; i < kDraws; ++i) got[draw_one(s)]++;
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0.0) {
      if (got[i] != 0) {
        *why = "token " + std::to_string(i) + " drawn " + std::to_string(got[i]) + " times, expected never";
        return false;
      }
      continue;
    }
    double e = want[i] * kDraws;
    chi2 += (got[i] - e) * (got[i] - e) / e;
    ++df;
  }
  if (df <= 0) return true;
  *why = "chi2 " + std::to_string(chi2) + " vs critical " + std::to_string(chi2_critical(df)) + " (df " +
         std::to_string(df) + ")";
  return chi2 < chi2_critical(df);
}

struct Setting {
  const char* name;
  SamplingParams p;
  std::vector<int32_t> history;
};

std::vector<Setting> settings() {
  std::vector<Setting> v;
  auto mk = [](float t) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 1234;
    return p;
  };
  v.push_back({"temperature 1", mk(1.0f), {}});
  v.push_back({"temperature 0.6", mk(0.6f), {}});
  v.push_back({"temperature 1.7", mk(1.7f), {}});
  { auto p = mk(1.0f); p.top_k = 3; v.push_back({"top-k 3", p, {}}); }
  { auto p = mk(1.0f); p.top_k = 4; v.push_back({"top-k 4 (tie at the edge)", p, {}}); }
  { auto p = mk(1.0f); p.top_p = 0.8f; v.push_back({"top-p 0.8", p, {}}); }
  { auto p = mk(1.0f); p.top_p = 0.5f; v.push_back({"top-p 0.5", p, {}}); }
  { auto p = mk(1.0f); p.min_p = 0.2f; v.push_back({"min-p 0.2", p, {}}); }
  { auto p = mk(0.8f); p.top_k = 6; p.top_p = 0.9f; p.min_p = 0.05f; v.push_back({"T 0.8 + top-k + top-p + min-p", p, {}}); }
  { auto p = mk(1.0f); p.repetition_penalty = 1.3f; p.frequency_penalty = 0.2f; p.presence_penalty = 0.1f;
    v.push_back({"penalties", p, {5, 5, 10, 9, 0}}); }
  { auto p = mk(1.2f); p.logit_bias = {{5, -kInf}, {3, 1.5f}}; p.top_p = 0.95f; v.push_back({"logit bias + ban", p, {}}); }
  return v;
}

int32_t sample_ours(Sampler& s, const std::vector<int32_t>& history) {
  return s.sample(kLogits.data(), kLogits.size(), history, 0)->id;
}

TEST(Sampling, DrawsMatchTheIntendedDistribution) {
  for (const Setting& st : settings()) {
    Sampler s(st.p);
    ASSERT_TRUE(st.p.validate(kLogits.size()).is_ok()) << st.name;
    std::string why;
    EXPECT_TRUE(consistent(expected(st.p, kLogits, st.history), [&](Sampler& x) { return sample_ours(x, st.history); },
                           s, &why))
        << st.name << ": " << why;
  }
}

// The same harness must reject a sampler whose top-p drops the token that crosses p.
TEST(Sampling, AWrongTopPFailsTheTest) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.8f;
  auto wrong = [&](Sampler& s) {
    std::vector<int32_t> order;
    for (int32_t i = 0; i < static_cast<int32_t>(kLogits.size()); ++i)
      if (kLogits[i] > -kInf) order.push_back(i);
    std::sort(order.begin(), order.end(), [](int32_t a, int32_t b) { return kLogits[a] > kLogits[b]; });
    double total = 0, cum = 0;
    for (int32_t i : order) total += std::exp(kLogits[i]);
    size_t m = 0;
    while (m < order.size() && (cum + std::exp(kLogits[order[m]])) / total < p.top_p) cum += std::exp(kLogits[order[m++]]);
    std::vector<float> l(kLogits.size(), -kInf);
    for (size_t i = 0; i < std::max<size_t>(1, m); ++i) l[order[i]] = kLogits[order[i]];  // bug: crossing token dropped
    TokenDist d;
    d.reset(l.data(), l.size());
    d.compute_weights();
    return d.draw(s.next_uniform());
  };
  Sampler s(p);
  std::string why;
  EXPECT_FALSE(consistent(expected(p, kLogits, {}), wrong, s, &why)) << "the wrong top-p passed: " << why;
}

std::vector<int32_t> top_p_set(const std::vector<float>& logits, float p) {
  TokenDist d;
  d.reset(logits.data(), logits.size());
  EXPECT_TRUE(d.compute_weights());
  d.top_p(p);
  return d.kept();
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.5, 0.3, 0.2 (logits are their logs), listed out of order.
  const std::vector<float> l = {std::log(0.3f), std::log(0.2f), std::log(0.5f)};
  EXPECT_EQ(top_p_set(l, 0.4f), (std::vector<int32_t>{2}));
  EXPECT_EQ(top_p_set(l, 0.49f), (std::vector<int32_t>{2}));
  EXPECT_EQ(top_p_set(l, 0.6f), (std::vector<int32_t>{0, 2}));     // the crossing token is kept
  EXPECT_EQ(top_p_set(l, 0.81f), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(top_p_set(l, 1e-6f), (std::vector<int32_t>{2}));       // always at least one
  // Ties: equal logits are ordered by id, so the set is unique.
  EXPECT_EQ(top_p_set({0.0f, 0.0f, 0.0f, -5.0f}, 0.5f), (std::vector<int32_t>{0, 1}));
  // -inf is never kept.
  EXPECT_EQ(top_p_set({-kInf, 1.0f, -kInf}, 0.99f), (std::vector<int32_t>{1}));
  // A large random row: the same set as the sort-based definition.
  auto r = testing::random_floats(5000, 3, -4.0f, 4.0f);
  auto got = top_p_set(r, 0.9f);
  std::vector<int32_t> order(5000);
  for (int i = 0; i < 5000; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return r[a] > r[b]; });
  double total = 0, cum = 0;
  for (float x : r) total += std::exp(static_cast<double>(x));
  size_t m = 0;
  while (m < order.size()) {
    cum += std::exp(static_cast<double>(r[order[m++]]));
    if (cum >= 0.9 * total) break;
  }
  std::vector<int32_t> want(order.begin(), order.begin() + m);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

// The chain's order on every token, exactly: ((raw penalized) + bias) x 1/T, whether a token is penalized,
// biased, both, or neither (reset scales the whole row, adjust redoes only the tokens it touches).
TEST(Sampling, AdjustAppliesPenaltiesThenBiasThenTemperatureToEveryToken) {
  std::vector<float> raw(1000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<float>((i * 7919) % 613) / 37.0f - 8.0f;
  SamplingParams p;
  p.temperature = 0.7f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.125f;
  p.penalty_last_n = 6;
  p.logit_bias = {{3, 2.5f}, {17, -kInf}, {42, -1.0f}, {999, 0.5f}, {5000, 1.0f}};
  const std::vector<int32_t> history = {1, 3, 3, 900, 42, 3, 7, 7, -4, 1200};  // the last 6 count
  const float inv = 1.0f / p.temperature;
  std::vector<float> want(raw);
  std::map<int32_t, int> count;
  for (size_t i = history.size() - 6; i < history.size(); ++i) count[history[i]]++;
  for (auto [id, c] : count) {
    if (id < 0 || id >= 1000) continue;
    float& l = want[id];
    l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
  }
  for (auto [id, b] : p.logit_bias)
    if (id < 1000) want[id] += b;
  for (float& l : want) l *= inv;
  TokenDist d;
  ASSERT_EQ(d.reset(raw.data(), 1000, inv), 0);
  d.adjust(p, raw.data(), history.data(), history.size(), inv);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(d.logits()[i], want[i]) << "token " << i;
}

TEST(Sampling, GreedyEdgeCases) {
  SamplingParams p;  // temperature 0
  Sampler s(p);
  EXPECT_EQ(s.sample(kLogits.data(), kLogits.size(), {}, 0)->id, 5);
  std::vector<float> ties = {1.0f, 3.0f, 3.0f, -kInf};
  EXPECT_EQ(s.sample(ties.data(), ties.size(), {}, 0)->id, 1);  // lowest id wins ties
  std::vector<float> nan = {0.1f, std::nanf(""), 0.5f, 0.2f};
  auto bad = s.sample(nan.data(), nan.size(), {}, 0);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("NaN value(s) (first at token 1)"), std::string::npos) << bad.status().message();
  // Temperature -> 0 approaches greedy.
  SamplingParams cold;
  cold.temperature = 1e-3f;
  cold.seed = 9;
  Sampler c(cold);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(c.sample(kLogits.data(), kLogits.size(), {}, 0)->id, 5);
  // -inf is never drawn, even at a high temperature, and a banned token never wins greedy.
  SamplingParams hot;
  hot.temperature = 50.0f;
  Sampler h(hot);
  for (int i = 0; i < 20000; ++i) ASSERT_NE(h.sample(kLogits.data(), kLogits.size(), {}, 0)->id, 6);
  SamplingParams ban;
  ban.logit_bias = {{5, -kInf}};
  EXPECT_EQ(Sampler(ban).sample(kLogits.data(), kLogits.size(), {}, 0)->id, 10);
}

TEST(Sampling, SameSeedSameTokensDifferentSeedDifferent) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 77;
  Sampler a(p), b(p);
  p.seed = 78;
  Sampler c(p);
  int diff = 0;
  for (int i = 0; i < 200; ++i) {
    int x = a.sample(kLogits.data(), kLogits.size(), {}, 0)->id;
    ASSERT_EQ(x, b.sample(kLogits.data(), kLogits.size(), {}, 0)->id);
    diff += x != c.sample(kLogits.data(), kLogits.size(), {}, 0)->id;
  }
  EXPECT_GT(diff, 20);
}

TEST(Sampling, LogprobsAreTheRawLogSoftmax) {
  SamplingParams p;
  p.logprobs = 3;
  p.logit_bias = {{0, 5.0f}};  // changes the choice, not the reported logprobs
  auto r = *Sampler(p).sample(kLogits.data(), kLogits.size(), {}, 0);
  EXPECT_EQ(r.id, 0);
  double total = 0;
  for (float l : kLogits) total += std::exp(static_cast<double>(l));
  EXPECT_NEAR(r.logprob, kLogits[0] - std::log(total), 1e-5);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].id, 5);
  EXPECT_EQ(r.top[1].id, 10);
  EXPECT_EQ(r.top[2].id, 0);
  EXPECT_NEAR(r.top[0].logprob, kLogits[5] - std::log(total), 1e-5);
}

// Top-k's kept set and logprobs' top N on a large row with many ties, NaNs and -inf, against a full sort (higher
// logit first, then lower id): both skip 64-token blocks that cannot beat their current worst.
TEST(Sampling, TopKAndTopLogprobsEqualAFullSortWithTies) {
  const int64_t V = 5003;
  std::vector<float> l(V);
  for (int64_t i = 0; i < V; ++i) l[i] = static_cast<float>((i * 7919) % 97) / 8.0f;  // ~52 tokens per value
  l[70] = kInf * 0.0f;  // NaN
  l[4000] = -kInf;
  l[4999] = 20.0f;      // the best, late in the row
  std::vector<int32_t> order;
  for (int32_t i = 0; i < V; ++i)
    if (l[i] == l[i] && l[i] > -kInf) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  for (int k : {1, 40, 100, 300}) {
    std::vector<float> clean(l);
    clean[70] = -kInf;  // the sampler refuses NaN rows; top-k sees the row after reset
    TokenDist d;
    d.reset(clean.data(), V);
    d.top_k(k);
    std::vector<int32_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(d.live(), want) << "k=" << k;
  }
  SamplingParams p;
  p.logprobs = 20;
  Sampler s(p);
  SampleResult r;
  r.id = 0;
  s.fill_logprobs(l.data(), V, &r);
  ASSERT_EQ(r.top.size(), 20u);
  for (int j = 0; j < 20; ++j) EXPECT_EQ(r.top[j].id, order[j]) << "rank " << j;
}

TEST(Sampling, InvalidParamsAreErrors) {
  auto bad = [](std::function<void(SamplingParams&)> f, const char* phrase) {
    SamplingParams p;
    f(p);
    Status s = p.validate(100);
    EXPECT_FALSE(s.is_ok()) << phrase;
    EXPECT_NE(s.message().find(phrase), std::string::npos) << s.message();
  };
  bad([](auto& p) { p.temperature = -1.0f; }, "temperature");
  bad([](auto& p) { p.temperature = std::nanf(""); }, "temperature");
  bad([](auto& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1]");
  bad([](auto& p) { p.top_p = 1.5f; }, "top_p");
  bad([](auto& p) { p.min_p = -0.1f; }, "min_p");
  bad([](auto& p) { p.top_k = -3; }, "top_k");
  bad([](auto& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  bad([](auto& p) { p.frequency_penalty = 3.0f; }, "frequency_penalty");
  bad([](auto& p) { p.logit_bias = {{100, 1.0f}}; }, "outside the vocabulary");
  bad([](auto& p) { p.logit_bias = {{1, std::nanf("")}}; }, "logit_bias");
  bad([](auto& p) { p.stop = {""}; }, "stop");
  bad([](auto& p) { p.max_tokens = -1; }, "max_tokens");
  EXPECT_TRUE(SamplingParams{}.validate(100).is_ok());
}

TEST(StopMatcher, SequencesSpanningPiecesStopAtTheRightPlace) {
  StopMatcher m({"<|end|>", "\n\n"});
  std::string out;
  for (const char* piece : {"Hello", " wor", "ld<|", "en", "d|> more"}) out += m.feed(piece);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello world");
  // A partial match that turns out not to be one is released.
  StopMatcher n({"STOP"});
  std::string o2 = n.feed("aST") + n.feed("Ob") + n.feed("c");
  EXPECT_FALSE(n.stopped());
  EXPECT_EQ(o2 + n.flush(), "aSTObc");
  // The earliest match wins across stop strings; text after it is never returned.
  StopMatcher k({"cd", "b"});
  EXPECT_EQ(k.feed("abcd"), "a");
  EXPECT_EQ(k.feed("zzz"), "");
  // A stop at the very start returns nothing.
  StopMatcher z({"x"});
  EXPECT_EQ(z.feed("xyz"), "");
  EXPECT_TRUE(z.stopped());
}

TEST(StopMatcher, GenerateStopsOnTextAcrossTokens) {
  auto m = load_model(testing::shared_dir() + "/models/stories260K.bin");
  ASSERT_TRUE(m.is_ok());
  GenerateOptions o;
  o.sampling.max_tokens = 40;
  o.stop_at_eos = false;
  o.token_text = [](int32_t id) { return "<" + std::to_string(id) + ">"; };
  auto full = generate(**m, {1}, o);
  ASSERT_TRUE(full.is_ok());
  ASSERT_GE(full->token_ids.size(), 12u);
  // Stop on text spanning tokens 5 and 6: the end of token 5's text and the start of token 6's.
  std::string t5 = o.token_text(full->token_ids[5]), t6 = o.token_text(full->token_ids[6]);
  o.sampling.stop = {t5.substr(t5.size() - 2) + t6.substr(0, 2)};
  std::string want;
  for (int i = 0; i < 5; ++i) want += o.token_text(full->token_ids[i]);
  want += t5.substr(0, t5.size() - 2);
  auto stopped = generate(**m, {1}, o);
  ASSERT_TRUE(stopped.is_ok());
  EXPECT_EQ(stopped->finish, FinishReason::kStop);
  EXPECT_EQ(stopped->token_ids.size(), 7u);
  // The earliest occurrence counts: a stop string seen earlier in the text would stop sooner.
  if (want.find(o.sampling.stop[0]) == std::string::npos) EXPECT_EQ(stopped->text, want);
  EXPECT_EQ(stopped->text.find(o.sampling.stop[0]), std::string::npos);
  // Without a tokenizer stop sequences are an error, not ignored.
  o.token_text = nullptr;
  EXPECT_FALSE(generate(**m, {1}, o).is_ok());
}

}  // namespace
}  // namespace cachet
