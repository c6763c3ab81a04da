// Speculative decoding (docs/speculative.md):
//  - the accept/resample rule keeps the target's distribution exactly, for every sampler setting, with a
//    deliberately bad draft (chi-square over 120k draws), and the same test rejects a broken rule;
//  - the engine's whole loop (draft model or prompt lookup, k tokens, bonus token) emits sequences distributed
//    as the target's, on a toy Markov-chain model whose exact sequence probabilities are known;
//  - greedy with speculation == greedy without, token ids and logits bitwise, alone and in a batch of 32 with
//    the prefix cache on, for both proposers; the KV cache after rejections equals one built without
//    speculation, and no block leaks;
//  (the policy, the lookup proposer and the scheduler's rollback without a model: test_spec_policy.cc).
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/spec_options.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "speculative/draft_model.h"
#include "speculative/verify.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

// Pearson's chi-square of observed counts against probabilities, and its critical value at p = 1e-5 (the
// Wilson-Hilferty approximation): a correct rule fails about once in 100k runs.
struct ChiSquare {
  double stat = 0.0;
  int df = -1;
  double critical() const {
    const double d = df, z = 4.265;
    return d * std::pow(1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d)), 3.0);
  }
  bool fits() const { return stat < critical(); }
};

ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  ChiSquare r;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] <= 0.0) {
      if (counts[i] > 0) r.stat = INFINITY;  // a token the target can never emit
      continue;
    }
    const double e = probs[i] * static_cast<double>(total);
    r.stat += (counts[i] - e) * (counts[i] - e) / e;
    ++r.df;
  }
  return r;
}

std::vector<float> logits_of(std::initializer_list<float> l) { return std::vector<float>(l); }

struct Setting {
  const char* name;
  SamplingParams p;
};

std::vector<Setting> settings() {
  std::vector<Setting> v;
  SamplingParams p;
  p.temperature = 1.0f;
  v.push_back({"temperature 1", p});
  p.temperature = 0.7f;
  p.top_k = 4;
  v.push_back({"top-k 4", p});
  p = {};
  p.temperature = 1.3f;
  p.top_p = 0.7f;
  v.push_back({"top-p 0.7", p});
  p = {};
  p.temperature = 1.0f;
  p.min_p = 0.15f;
  v.push_back({"min-p 0.15", p});
  p = {};
  p.temperature = 0.9f;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.5f;
  p.logit_bias[5] = -INFINITY;
  v.push_back({"penalties + bias", p});
  return v;
}

// One position: the emitted token is distributed as p whatever q is; "always accept" emits q instead.
TEST(SpecVerify, AcceptResampleKeepsTheTargetDistributionForEverySamplerSetting) {
  const std::vector<float> lp = logits_of({2.0f, 1.5f, 0.2f, -1.0f, 1.0f, 0.5f, -0.3f, 0.9f});
  const std::vector<float> lq = logits_of({-1.0f, 0.1f, 2.5f, 1.8f, -2.0f, 0.4f, 1.2f, -0.5f});  // a bad draft
  const std::vector<int32_t> history = {1, 1, 4, 7};
  const int V = 8, draws = 120000;
  for (const Setting& s : settings()) {
    Sampler sp(s.p), sq(s.p);
    const TokenDist p = **sp.distribution(lp.data(), V, history, 0);
    const TokenDist q = **sq.distribution(lq.data(), V, history, 0);
    std::vector<double> probs(V);
    for (int i = 0; i < V; ++i) probs[i] = p.prob(i);
    std::mt19937_64 rng(7);
    auto u = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
    std::vector<int64_t> rule(V, 0), broken(V, 0), lookup(V, 0);
    int64_t accepted = 0;
    for (int d = 0; d < draws; ++d) {
      const int32_t x = q.draw(u());
      const Verdict v = verify_draft_token(p, &q, x, u(), u());
      ++rule[v.token];
      accepted += v.accepted;
      ++broken[x];
      // A deterministic draft (prompt lookup) always proposing token 1.
      ++lookup[verify_draft_token(p, nullptr, 1, u(), u()).token];
    }
    EXPECT_TRUE(chi_square(rule, probs).fits()) << s.name << ": chi2 " << chi_square(rule, probs).stat;
    EXPECT_TRUE(chi_square(lookup, probs).fits()) << s.name << ": chi2 " << chi_square(lookup, probs).stat;
    EXPECT_FALSE(chi_square(broken, probs).fits()) << s.name << ": the test must reject 'always accept'";
    // The acceptance rate is sum_x min(p, q): the rule is the optimal coupling, not merely exact.
    double overlap = 0.0;
    for (int i = 0; i < V; ++i) overlap += std::min(p.prob(i), q.prob(i));
    EXPECT_NEAR(static_cast<double>(accepted) / draws, overlap, 0.01) << s.name;
  }
}

TEST(SpecVerify, GreedyAcceptsExactlyTheBestToken) {
  SamplingParams g;
  const std::vector<float> lp = logits_of({0.0f, 3.0f, 1.0f, 3.0f});
  Sampler sp(g);
  const TokenDist p = **sp.distribution(lp.data(), 4, {}, 0);
  EXPECT_EQ(verify_draft_token(p, nullptr, 1, 0.0, 0.0).accepted, true);
  const Verdict v = verify_draft_token(p, nullptr, 3, 0.0, 0.0);  // a tie goes to the lower id, as argmax
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.token, 1);
}

// A model whose next-token logits depend on the last token only (a Markov chain): exact sequence
// probabilities are known, and the engine runs it like any model. Its K/V are never read.
class MarkovModel final : public Model {
 public:
  MarkovModel(std::vector<std::vector<float>> table) : table_(std::move(table)), pool_(1) {
    cfg_.arch = "markov";
    cfg_.n_vocab = static_cast<int64_t>(table_.size());
    cfg_.n_layer = 1;
    cfg_.n_embd = 16;
    cfg_.n_head = 1;
    cfg_.n_head_kv = 1;
    cfg_.head_dim = 16;
  }
  const ModelConfig& config() const override { return cfg_; }
  Status forward(const ForwardBatch& b, float* logits, float* hidden = nullptr) override {
    for (int t = 0; t < b.n_tokens(); ++t)
      if (b.want_logits[t]) {
        const auto& row = table_.at(static_cast<size_t>(b.token_ids[t]));
        logits = std::copy(row.begin(), row.end(), logits);
      }
    return Status::ok();
  }
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  const SpecialTokens& special_tokens() const override { return special_; }
  const GgufFile* gguf() const override { return nullptr; }
  ThreadPool& pool() override { return pool_; }

 private:
  std::vector<std::vector<float>> table_;
  ModelConfig cfg_;
  std::vector<TensorView> tensors_;
  SpecialTokens special_;
  ThreadPool pool_;
};

// The engine's loop end to end: 3-token continuations of a 3-token prompt, drafted by a bad draft model or by
// prompt lookup (the prompt repeats, so lookup drafts), mixed in one batch; the joint distribution of the
// 5^3 outcomes must be the target's. Sampling the draft chain instead ("always accept") is rejected.
TEST(SpecEngine, SampledSequencesFollowTheTargetExactly) {
  const int V = 5;
  const std::vector<std::vector<float>> P = {{1.0f, 0.2f, -0.5f, 0.8f, 0.0f},
                                             {0.3f, 1.2f, 0.1f, -1.0f, 0.6f},
                                             {-0.2f, 0.4f, 0.9f, 0.5f, -0.8f},
                                             {0.7f, -0.3f, 0.2f, 1.1f, 0.1f},
                                             {0.0f, 0.5f, -0.4f, 0.3f, 1.0f}};
  std::vector<std::vector<float>> Q = P;  // the draft: every row reversed
  for (auto& row : Q) std::reverse(row.begin(), row.end());
  MarkovModel target(P), draft(Q);
  const std::vector<int32_t> prompt = {1, 2, 1};
  for (const Setting& s : {settings()[0], settings()[1], settings()[3]}) {
    EngineConfig cfg;
    cfg.n_blocks = 2048;
    cfg.draft_model = &draft;
    cfg.draft_max = 3;
    cfg.spec_adaptive = false;
    cfg.max_running = 512;
    cfg.prefix_cache = false;
    auto e = Engine::create(target, cfg);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    // Exact probabilities of each continuation under the target's chain (with the sampler setting).
    auto probs_of = [&](const std::vector<std::vector<float>>& M) {
      std::vector<double> pr(V * V * V);
      for (int c = 0; c < V * V * V; ++c) {
        int32_t prev = prompt.back();
        const int32_t seq[3] = {c / (V * V), (c / V) % V, c % V};
        double pc = 1.0;
        Sampler smp(s.p);
        std::vector<int32_t> hist = prompt;
        for (int32_t t : seq) {
          pc *= (*smp.distribution(M[prev].data(), V, hist, 3))->prob(t);
          hist.push_back(t);
          prev = t;
        }
        pr[c] = pc;
      }
      return pr;
    };
    const std::vector<double> exact = probs_of(P);
    std::map<RequestId, std::vector<int32_t>> out;
    std::map<RequestId, SpecMode> mode;
    const int n_req = 60000;
    for (int i = 0; i < n_req;) {
      for (int k = 0; k < 512 && i < n_req; ++k, ++i) {
        SamplingParams p = s.p;
        p.max_tokens = 3;
        p.seed = static_cast<uint64_t>(i) * 7919 + 1;
        const SpecMode m = i % 2 ? SpecMode::kLookup : SpecMode::kDraft;
        auto id = (*e)->add_request(prompt, p, {}, false, 1, 0, m);
        ASSERT_TRUE(id.is_ok());
        mode[*id] = m;
      }
      while ((*e)->has_work()) {
        auto ev = (*e)->step();
        ASSERT_TRUE(ev.is_ok());
        for (const auto& x : *ev)
          if (x.token) out[x.id].push_back(*x.token);
      }
    }
    std::vector<int64_t> by_draft(V * V * V, 0), by_lookup(V * V * V, 0);
    for (const auto& [id, toks] : out) {
      ASSERT_EQ(toks.size(), 3u);
      const int c = toks[0] * V * V + toks[1] * V + toks[2];
      ++(mode[id] == SpecMode::kDraft ? by_draft : by_lookup)[c];
    }
    const EngineCounters cnt = (*e)->counters();
    EXPECT_GT(cnt.spec_draft_tokens, n_req / 2) << s.name;
    EXPECT_GT(cnt.spec_accepted_tokens, 0) << s.name;
    EXPECT_LT(cnt.spec_accepted_tokens, cnt.spec_draft_tokens) << s.name;
    EXPECT_TRUE(chi_square(by_draft, exact).fits()) << s.name << ": chi2 " << chi_square(by_draft, exact).stat;
    EXPECT_TRUE(chi_square(by_lookup, exact).fits()) << s.name << ": chi2 " << chi_square(by_lookup, exact).stat;
    // The same test has the power to see a wrong distribution: the draft chain's own sequences.
    const std::vector<double> of_q = probs_of(Q);
    std::mt19937_64 rng(3);
    std::discrete_distribution<int> dq(of_q.begin(), of_q.end());
    std::vector<int64_t> broken(V * V * V, 0);
    for (int i = 0; i < n_req / 2; ++i) ++broken[dq(rng)];
    EXPECT_FALSE(chi_square(broken, exact).fits()) << s.name;
    EXPECT_EQ((*e)->counters().blocks_used, 0);
    if (const KvCacheManager* kv = (*e)->draft_proposer()->own_kv()) EXPECT_EQ(kv->pool().n_used(), 0);
  }
}

std::unique_ptr<Model> synthetic(uint64_t seed, const std::string& name, int64_t logit_rows = 0, int n_layer = 2) {
  SyntheticSpec s;
  s.type = DType::kQ4_0;
  s.embd_type = DType::kQ8_0;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_layer = n_layer;
  s.seed = seed;
  const std::string path = testing::temp_path(name);
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  LoadOptions o;
  o.n_threads = 2;
  o.logit_rows = logit_rows;
  auto m = load_model(path, o);
  EXPECT_TRUE(m.is_ok());
  return std::move(m).value();
}

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams p;
  SpecMode mode;
};

// Prompts that repeat a random phrase (so lookup finds matches), of random lengths; modes off, lookup, draft.
std::vector<Job> spec_jobs(int n, int V, uint32_t seed, bool sampled) {
  std::mt19937 rng(seed);
  std::vector<Job> v;
  for (int i = 0; i < n; ++i) {
    Job j;
    std::vector<int32_t> phrase(3 + rng() % 12);
    for (auto& t : phrase) t = static_cast<int32_t>(rng() % V);
    for (int r = 1 + static_cast<int>(rng() % 4); r > 0; --r) {
      j.prompt.insert(j.prompt.end(), phrase.begin(), phrase.end());
      j.prompt.push_back(static_cast<int32_t>(rng() % V));
    }
    j.p.max_tokens = 8 + static_cast<int>(rng() % 40);
    if (sampled) {
      j.p.temperature = 0.9f;
      j.p.top_k = 20;
      j.p.seed = 500 + i;
    }
    j.mode = static_cast<SpecMode>(i % 3);
    v.push_back(j);
  }
  return v;
}

struct Served {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> logits;
  EngineCounters counters;
};

// own_kv: the draft keeps a cache of its own even when it could read the target's (same shape).
Served serve(Model& m, Model* draft, const std::vector<Job>& js, bool spec, bool adaptive, int max_running,
             bool own_kv = false) {
  EngineConfig cfg;
  cfg.draft_own_kv = own_kv;
  cfg.n_blocks = 120;
  cfg.draft_model = draft;
  cfg.draft_max = 5;
  cfg.spec_adaptive = adaptive;
  cfg.max_running = max_running;
  cfg.prefill_chunk = 24;
  cfg.max_batch_tokens = 64;
  Served out;
  out.ids.resize(js.size());
  out.logits.resize(js.size());
  std::map<RequestId, size_t> job_of;
  cfg.on_logits = [&](RequestId id, const float* row, int64_t n) {
    auto& l = out.logits[job_of.at(id)];
    l.insert(l.end(), row, row + n);
  };
  auto e = Engine::create(m, cfg);
  EXPECT_TRUE(e.is_ok());
  for (size_t i = 0; i < js.size(); ++i) {
    auto id = (*e)->add_request(js[i].prompt, js[i].p, {}, false, 1, 0, spec ? js[i].mode : SpecMode::kOff);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    job_of[*id] = i;
  }
  while ((*e)->has_work()) {
    auto ev = (*e)->step();
    EXPECT_TRUE(ev.is_ok());
    for (const auto& x : *ev)
      if (x.token) out.ids[job_of.at(x.id)].push_back(*x.token);
    EXPECT_EQ((*e)->check(), "");
  }
  out.counters = (*e)->counters();
  EXPECT_EQ(out.counters.blocks_used, out.counters.blocks_cached) << "no block leaked";
  if (draft) {
    EXPECT_EQ((*e)->draft_proposer()->shares_target_kv(), !own_kv && draft->config() == m.config());
    if (const KvCacheManager* kv = (*e)->draft_proposer()->own_kv())
      EXPECT_EQ(kv->pool().n_used(), 0) << "no draft block leaked";
  }
  return out;
}

// Greedy: token ids and every logits row bitwise the same with and without speculation, for a draft that
// always agrees (the target itself), one that mostly does not (another model), and lookup; 32 at once with the
// prefix cache on and a pool small enough to preempt, and each request alone.
TEST(SpecEngine, GreedyWithSpeculationEqualsGreedyWithoutBitwise) {
  auto target = synthetic(42, "spec_target.gguf");
  auto same = synthetic(42, "spec_target.gguf");
  auto other = synthetic(7, "spec_other.gguf");
  auto same_subset = synthetic(42, "spec_target.gguf", /*logit_rows=*/100);  // --draft-vocab 100 (112 rows)
  const int V = static_cast<int>(target->config().n_vocab);
  const std::vector<Job> js = spec_jobs(32, V, 99, /*sampled=*/false);
  const Served base = serve(*target, nullptr, js, false, false, 32);
  // Each draft both reading the target's cache (same shape) and keeping its own.
  for (Model* draft : {same.get(), other.get(), same_subset.get()}) {
    for (bool adaptive : {false, true}) {
      for (bool own_kv : {false, true}) {
        const Served s = serve(*target, draft, js, true, adaptive, 32, own_kv);
        for (size_t i = 0; i < js.size(); ++i) {
          EXPECT_EQ(s.ids[i], base.ids[i]) << "request " << i << " mode " << static_cast<int>(js[i].mode);
          EXPECT_TRUE(s.logits[i] == base.logits[i]) << "request " << i;
        }
        EXPECT_GT(s.counters.spec_accepted_tokens, 0);
        if (draft == other.get() && !adaptive)
          EXPECT_LT(s.counters.spec_accepted_tokens, s.counters.spec_draft_tokens);
      }
    }
  }
  // Alone (one request at a time).
  for (size_t i = 0; i < 6; ++i) {
    for (bool own_kv : {false, true}) {
      const Served s = serve(*target, other.get(), {js[i]}, true, false, 1, own_kv);
      EXPECT_EQ(s.ids[0], base.ids[i]) << "request " << i << " alone";
    }
  }
}

// --draft-vocab: the head's first rows (rounded up to whole groups of 16) give bitwise the logits of the whole
// head, every later id is -inf; a subset as large as the vocabulary is the whole head. Logits of a subset draft
// are a distribution over those ids alone, so a sampled draft never proposes past them.
TEST(SpecDraftVocab, HeadSubsetEqualsTheWholeHeadOnItsRows) {
  auto whole = synthetic(42, "spec_target.gguf");
  auto subset = synthetic(42, "spec_target.gguf", 100);
  auto all = synthetic(42, "spec_target.gguf", 256);
  const int64_t V = whole->config().n_vocab;
  ASSERT_EQ(V, 256);
  const std::vector<int32_t> prompt = {1, 17, 200, 45, 3, 99, 250};
  std::vector<std::vector<float>> out;
  for (Model* m : {whole.get(), subset.get(), all.get()}) {
    ContiguousKvCache kv(m->config(), 16, KvTypes{});
    std::vector<float> logits(prompt.size() * V);
    ForwardBatch b = ForwardBatch::single(kv, prompt, 0, true);
    ASSERT_TRUE(m->forward(b, logits.data()).is_ok());
    out.push_back(std::move(logits));
  }
  EXPECT_TRUE(out[2] == out[0]);
  for (size_t t = 0; t < prompt.size(); ++t)
    for (int64_t v = 0; v < V; ++v) {
      const float got = out[1][t * V + v];
      if (v < 112)
        EXPECT_EQ(got, out[0][t * V + v]) << "token " << t << " id " << v;
      else
        EXPECT_TRUE(std::isinf(got) && got < 0) << "token " << t << " id " << v;
    }
  LoadOptions bad;
  bad.logit_rows = -1;
  EXPECT_FALSE(load_model(testing::temp_path("spec_target.gguf"), bad).is_ok());
}

// A draft model's further passes run only while they pay (DraftModelProposer::PassBudget): a pass dear next
// to what a token is worth stops every request at its first draft token; a cheap one lets the likely requests
// (first * cont^j) go on after the unlikely ones stop; without a budget each drafts its k (p_min 0). The draft
// is always a prefix of the unbudgeted one (the same greedy tokens, fewer of them).
TEST(SpecDraftModel, FurtherPassesRunOnlyWhileTheyPay) {
  auto target = synthetic(42, "spec_target.gguf");
  auto draft = synthetic(7, "spec_other.gguf");
  const int V = static_cast<int>(target->config().n_vocab);
  DraftModelConfig dc;
  dc.n_blocks = 64;
  dc.p_min = 0.0f;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  std::vector<std::vector<int32_t>> prompts;
  std::mt19937 rng(5);
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 9 + i; ++t) p.push_back(static_cast<int32_t>(rng() % V));
    prompts.push_back(std::move(p));
  }
  auto propose = [&](const DraftModelProposer::PassBudget& budget, double likely_first, double unlikely_first) {
    auto d = DraftModelProposer::create(*draft, *target, dc);
    EXPECT_TRUE(d.is_ok());
    (*d)->set_pass_budget(budget);
    std::vector<DraftJob> jobs(prompts.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs[i].id = static_cast<int64_t>(i);
      jobs[i].tokens = &prompts[i];
      jobs[i].n_prompt = static_cast<int>(prompts[i].size());
      jobs[i].params = &greedy;
      jobs[i].k = 6;
      jobs[i].first = i < 2 ? likely_first : unlikely_first;
      jobs[i].cont = 0.9;
    }
    EXPECT_TRUE((*d)->propose(jobs).is_ok());
    std::vector<std::vector<int32_t>> out;
    for (DraftJob& j : jobs) out.push_back(j.draft);
    return out;
  };
  const auto full = propose({}, 1.0, 1.0);
  for (const auto& d : full) EXPECT_EQ(d.size(), 6u);
  DraftModelProposer::PassBudget dear;
  dear.token_secs = 1e-3;
  dear.pass_secs = [](int) { return 10e-3; };
  for (const auto& d : propose(dear, 1.0, 1.0)) EXPECT_EQ(d.size(), 1u);
  // 1 ms a pass, 1 ms a token, 0.1 ms to verify one: the two unlikely requests (first 0.05: worth 0.05 ms)
  // leave after their first token; the two likely ones (first 1.0) pay for passes on their own while
  // 2 * 0.9^j >= 1.2 ms (j <= 4: five tokens).
  DraftModelProposer::PassBudget cheap;
  cheap.token_secs = 1e-3;
  cheap.verify_secs_per_token = 0.1e-3;
  cheap.pass_secs = [](int) { return 1e-3; };
  const auto some = propose(cheap, 1.0, 0.05);
  for (size_t i = 0; i < some.size(); ++i) {
    EXPECT_EQ(some[i].size(), i < 2 ? 5u : 1u) << i;
    EXPECT_TRUE(std::equal(some[i].begin(), some[i].end(), full[i].begin())) << i;
  }
}

// What run, chat, batch and serve accept: one proposer, a p_min that is a probability; load_speculation carries
// the numbers into the engine's configuration.
TEST(SpecOptions, ValidatesAndCarriesIntoTheEngineConfig) {
  SpecOptions o;
  o.lookup = true;
  EXPECT_TRUE(o.validate().is_ok());
  o.draft_model = "d.gguf";
  EXPECT_FALSE(o.validate().is_ok());
  o.draft_model.clear();
  for (float bad : {-0.1f, 1.5f, std::nanf("")}) {
    o.draft_p_min = bad;
    EXPECT_FALSE(o.validate().is_ok()) << bad;
  }
  o.draft_p_min = 0.35f;
  o.draft_max = 5;
  auto target = synthetic(42, "spec_target.gguf");
  EngineConfig cfg;
  std::unique_ptr<Model> draft;
  ASSERT_TRUE(load_speculation(o, RopeOverrides{}, *target, &cfg, &draft).is_ok());
  EXPECT_EQ(cfg.draft_p_min, 0.35f);
  EXPECT_EQ(cfg.draft_max, 5);
  EXPECT_EQ(cfg.spec, SpecMode::kLookup);
  EXPECT_EQ(draft, nullptr);
  EXPECT_FALSE(cfg.draft_own_kv);
  o.draft_own_kv = true;
  ASSERT_TRUE(load_speculation(o, RopeOverrides{}, *target, &cfg, &draft).is_ok());
  EXPECT_TRUE(cfg.draft_own_kv);
  o.draft_p_min = 2.0f;
  EXPECT_FALSE(load_speculation(o, RopeOverrides{}, *target, &cfg, &draft).is_ok());
}

// A draft reads the target's cache only when it has the target's shape exactly; the engine picks that by
// itself for such a draft and keeps a pool for the draft otherwise.
TEST(SpecDraftModel, ReadsTheTargetsCacheOnlyWithItsShape) {
  auto target = synthetic(42, "spec_target.gguf");
  auto same_shape = synthetic(7, "spec_other.gguf");
  auto deeper = synthetic(7, "spec_deeper.gguf", 0, /*n_layer=*/3);
  DraftModelConfig dc;
  dc.share_target_kv = true;
  EXPECT_TRUE(DraftModelProposer::create(*same_shape, *target, dc).is_ok());
  EXPECT_FALSE(DraftModelProposer::create(*deeper, *target, dc).is_ok());
  for (Model* d : {same_shape.get(), deeper.get()}) {
    EngineConfig cfg;
    cfg.n_blocks = 32;
    cfg.draft_model = d;
    auto e = Engine::create(*target, cfg);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ((*e)->draft_proposer()->shares_target_kv(), d == same_shape.get());
    EXPECT_EQ((*e)->draft_proposer()->own_kv() == nullptr, d == same_shape.get());
  }
}

// Sampling with speculation: the same seed gives the same tokens (and other requests in the batch do not
// change them when k is fixed).
TEST(SpecEngine, SameSeedSameTokens) {
  auto target = synthetic(42, "spec_target.gguf");
  auto other = synthetic(7, "spec_other.gguf");
  const int V = static_cast<int>(target->config().n_vocab);
  const std::vector<Job> js = spec_jobs(12, V, 5, /*sampled=*/true);
  for (bool own_kv : {false, true}) {
    const Served a = serve(*target, other.get(), js, true, false, 12, own_kv);
    const Served b = serve(*target, other.get(), js, true, false, 12, own_kv);
    EXPECT_EQ(a.ids, b.ids);
    for (size_t i = 0; i < 4; ++i) {
      const Served alone = serve(*target, other.get(), {js[i]}, true, false, 1, own_kv);
      EXPECT_EQ(alone.ids[0], a.ids[i]) << "request " << i;
    }
  }
}

// After random accept/reject sequences, the K/V the cache holds equals what a run without speculation
// computed, bitwise, and the block table holds no slot past the computed tokens.
TEST(SpecEngine, RollbackLeavesTheCacheAsWithoutSpeculation) {
  auto target = synthetic(42, "spec_target.gguf");
  auto other = synthetic(7, "spec_other.gguf");
  const int V = static_cast<int>(target->config().n_vocab);
  std::vector<Job> js = spec_jobs(6, V, 17, false);
  for (auto& j : js) j.p.max_tokens = 200;
  auto run = [&](bool spec, bool own_kv, const std::map<size_t, int>* until, std::map<size_t, int>* computed,
                 std::map<size_t, std::vector<uint8_t>>* kv) {
    EngineConfig cfg;
    cfg.draft_own_kv = own_kv;
    cfg.n_blocks = 200;
    cfg.draft_model = other.get();
    cfg.draft_max = 6;
    cfg.spec_adaptive = false;
    auto e = Engine::create(*target, cfg);
    ASSERT_TRUE(e.is_ok());
    std::vector<RequestId> ids;
    for (const Job& j : js) ids.push_back(*(*e)->add_request(j.prompt, j.p, {}, false, 1, 0,
                                                             spec ? (j.mode == SpecMode::kOff ? SpecMode::kDraft : j.mode)
                                                                  : SpecMode::kOff));
    // Each request's cache is read at the first step boundary where it holds enough positions (it may finish
    // soon after: a request whose drafts are accepted runs fast).
    int steps = 0;
    while (computed->size() < js.size() && (*e)->has_work() && ++steps < 2000) {
      auto ev = (*e)->step();
      ASSERT_TRUE(ev.is_ok());
      for (size_t i = 0; i < js.size(); ++i) {
        const int nc = (*e)->num_computed(ids[i]);
        if (spec && nc > 0) EXPECT_EQ((*e)->kv_slots(ids[i]), nc) << "slots past the computed tokens after a step";
        const int need = until ? until->at(i) : static_cast<int>(js[i].prompt.size()) + 40;
        if (!computed->count(i) && nc >= need) {
          const int n = until ? need : nc;
          (*computed)[i] = n;
          (*kv)[i] = (*e)->kv_contents(ids[i], n);
        }
      }
    }
    ASSERT_EQ(computed->size(), js.size());
    if (spec) EXPECT_LT((*e)->counters().spec_accepted_tokens, (*e)->counters().spec_draft_tokens);
  };
  // The draft writes its own rows into the target's cache when it reads it (own_kv false): those too must be
  // gone or overwritten.
  for (bool own_kv : {false, true}) {
    std::map<size_t, int> n_spec, n_base;
    std::map<size_t, std::vector<uint8_t>> kv_spec, kv_base;
    run(true, own_kv, nullptr, &n_spec, &kv_spec);
    run(false, own_kv, &n_spec, &n_base, &kv_base);
    for (size_t i = 0; i < js.size(); ++i) {
      ASSERT_GT(n_spec[i], static_cast<int>(js[i].prompt.size()) + 39);
      EXPECT_TRUE(kv_spec[i] == kv_base[i])
          << "request " << i << ", " << n_spec[i] << " positions, own_kv " << own_kv;
    }
  }
}

}  // namespace
}  // namespace cachet
