// Speculative decoding's bookkeeping, without a model (docs/speculative.md): the policy's cost fit, its
// acceptance rates and choices, the guard and the retry credit; the lookup proposer; rollback of drafted
// tokens in the scheduler on a random stream (every invariant each step, every block back).
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "speculative/lookup.h"
#include "speculative/policy.h"

namespace cachet {
namespace {

TEST(SpecLookup, FindsTheLatestEarlierOccurrence) {
  const std::vector<int32_t> t = {5, 6, 7, 1, 5, 6, 8, 9, 5, 6};
  EXPECT_EQ(LookupProposer::lookup(t, 2, 3), (std::vector<int32_t>{8, 9, 5}));  // the latest "5 6" before the end
  EXPECT_EQ(LookupProposer::lookup(t, 3, 3), (std::vector<int32_t>{}));         // "9 5 6" never occurred before
  const std::vector<int32_t> rep = {1, 2, 1, 2, 1, 2};
  EXPECT_EQ(LookupProposer::lookup(rep, 2, 4), (std::vector<int32_t>{1, 2}));  // overlapping pattern, up to the end
  EXPECT_EQ(LookupProposer::lookup({}, 2, 4), (std::vector<int32_t>{}));
}

TEST(SpecPolicy, FitsCostsAndDraftsOnlyWhenItPays) {
  CostCurve c;
  EXPECT_EQ(c.predict(4), 0.0);
  for (int i = 0; i < 10; ++i) {
    c.observe(1, 0.010);
    c.observe(5, 0.011);
    c.observe(64, 0.030);
  }
  EXPECT_NEAR(c.predict(1), 0.010, 1e-12);
  EXPECT_NEAR(c.predict(3), 0.0105, 1e-12);         // between measured counts: linear
  EXPECT_NEAR(c.predict(128), 0.030 + 64 * 0.019 / 59, 1e-9);  // past them: the last slope
  // Memory-bound (a 64-token step costs ~1.3x a 1-token step): confident requests draft up to k_max.
  SpecPolicy mem(8);
  for (int i = 0; i < 20; ++i) mem.observe_target(1 + (i % 4) * 20, 0.010 + 0.00005 * (1 + (i % 4) * 20));
  auto k = mem.choose({0.9, 0.9}, {false, false}, 0);
  EXPECT_EQ(k, (std::vector<int>{8, 8}));
  // A poor acceptance rate drafts less than a good one.
  k = mem.choose({0.9, 0.2}, {false, false}, 0);
  EXPECT_GT(k[0], k[1]);
  // Compute-bound (time proportional to tokens): nothing pays at a large batch.
  SpecPolicy cpu(8);
  for (int i = 0; i < 20; ++i) cpu.observe_target(16 + (i % 4) * 40, 0.0001 + 0.001 * (16 + (i % 4) * 40));
  k = cpu.choose(std::vector<AcceptRates>(64, 0.6), std::vector<bool>(64, false), 0);
  EXPECT_EQ(std::count(k.begin(), k.end(), 0), 64);
  // A draft model whose pass costs as much as the target's: low acceptance does not pay for it.
  SpecPolicy costly(8);
  for (int i = 0; i < 20; ++i) {
    costly.observe_target(1 + (i % 4) * 20, 0.010 + 0.00005 * (1 + (i % 4) * 20));
    costly.observe_draft(1 + i % 3, 0.010);
  }
  k = costly.choose({0.3}, {true}, 0);
  EXPECT_EQ(k[0], 0);
  k = costly.choose({0.3}, {false}, 0);  // the same rate with free lookup drafts does pay
  EXPECT_GT(k[0], 0);
}

// The two rates: a first token accepted half the time, then copying on (lookup's all-or-nothing drafts),
// is worth a longer draft than the same half-rate geometric model; counting follows the definitions.
TEST(SpecPolicy, FirstAndContinuationRates) {
  Acceptance a;
  a.add(5, 5);  // first accepted, 4 of 4 continuations
  a.add(4, 0);  // first rejected, no continuation tried
  a.add(6, 2);  // first accepted, one continuation accepted, the next rejected
  EXPECT_NEAR(a.first_tried, 0.81 + 0.9 + 1, 1e-12);
  EXPECT_NEAR(a.first_accepted, 0.81 + 1, 1e-12);
  EXPECT_NEAR(a.cont_tried, 4 * 0.81 + 0 + 2, 1e-12);
  EXPECT_NEAR(a.cont_accepted, 4 * 0.81 + 1, 1e-12);
  a.add(0, 0);  // nothing proposed: nothing counted
  EXPECT_NEAR(a.first_tried, 0.81 + 0.9 + 1, 1e-12);

  // A curve with knees like the ones measured on 2 cores: t(1) 1, t(2) 1.06, t(3) 1.4, t(4..8) gently rising.
  SpecPolicy p(8);
  const double t[] = {0, 1.0, 1.06, 1.40, 1.38, 1.45, 1.55, 1.70, 1.85, 2.0};
  for (int rep = 0; rep < 6; ++rep)
    for (int n = 1; n <= 9; ++n) p.observe_target(n, t[n] * 1e-3);
  const auto geometric = p.choose({AcceptRates(0.5)}, {false}, 0);
  const auto copying = p.choose({AcceptRates(0.5, 0.95)}, {false}, 0);
  EXPECT_GT(copying[0], geometric[0]);
  EXPECT_GE(copying[0], 3);  // past the bump at 3 tokens: the best prefix, not the first token that loses
}

// The guard: drafting steps faster than plain ones keep speculation on, slower ones turn it off (every 32nd
// step tries again). A catch-up prefill at a batch size where drafting has not been measured faster is an
// experiment paid from the engine-wide credit; once drafting is proven there, catch-ups are the cost model's.
TEST(SpecPolicy, GuardComparesDraftingWithPlainStepsAndCatchUpsWaitForProof) {
  auto warmed = [] {
    SpecPolicy p(8);
    for (int rep = 0; rep < 6; ++rep)
      for (int n = 1; n <= 9; ++n) p.observe_target(n, (10.0 + 0.1 * n) * 1e-3);
    for (int rep = 0; rep < 6; ++rep) {
      p.observe_draft(1, 1e-3);
      p.observe_draft(64, 30e-3);
    }
    return p;
  };
  // Plain steps: 1 token in 10 ms (100 tok/s); drafting steps: 2 tokens in 15 ms (133 tok/s), or 1 in 15.
  auto run = [](SpecPolicy& p, int drafted_tokens) {
    for (int i = 0; i < 64; ++i) {
      p.observe_step(1, false, 1, 0.010);
      p.observe_step(1, true, drafted_tokens, 0.015);
    }
  };
  SpecPolicy pays = warmed();
  run(pays, 2);
  EXPECT_GT(pays.step_rates(1).first, pays.step_rates(1).second);
  EXPECT_TRUE(pays.drafting_proven(1));
  EXPECT_GT(pays.choose({0.9}, {true}, 0, 1)[0], 0);
  SpecPolicy loses = warmed();
  run(loses, 1);
  EXPECT_TRUE(loses.guard_holds(1));
  int drafted = 0;
  for (int i = 0; i < 64; ++i) drafted += loses.choose({0.9}, {true}, 0, 1)[0] > 0;
  EXPECT_EQ(drafted, 2);  // every 32nd
  // A request 64 tokens behind (a 30 ms catch-up) at a proven batch size drafts; at an unproven one (4
  // clients, nothing measured there) it spends the credit (0.1 s at start: three such catch-ups), then waits
  // for the credit its steps earn (1/50 of each).
  const std::vector<int> behind = {64}, left = {1000};
  EXPECT_GT(pays.choose({0.9}, {true}, 0, 1, &behind, &left)[0], 0);
  SpecPolicy fresh = warmed();
  int started = 0;
  for (int i = 0; i < 20; ++i) started += fresh.choose({0.9}, {true}, 0, 4, &behind, &left)[0] > 0;
  EXPECT_EQ(started, 3);
  // 10 ms of credit left; each 10 ms step earns 0.2 ms: 100 steps to the next.
  for (int i = 0; i < 98; ++i) fresh.earn_retry_credit(10e-3);
  EXPECT_EQ(fresh.choose({0.9}, {true}, 0, 4, &behind, &left)[0], 0);
  for (int i = 0; i < 3; ++i) fresh.earn_retry_credit(10e-3);
  EXPECT_GT(fresh.choose({0.9}, {true}, 0, 4, &behind, &left)[0], 0);
}

// A proposer kind nothing has measured starts optimistic, so it is tried (and then measured); two
// pseudo-observations, so a poor measured rate takes over within a few drafts.
TEST(SpecPolicy, UnmeasuredKindIsTriedThenMeasured) {
  Acceptance kind{.decay = Acceptance::kEngineDecay};
  EXPECT_GT(kind.rates(unmeasured_prior()).first, 0.75);
  for (int i = 0; i < 8; ++i) kind.add(4, 0);
  EXPECT_LT(kind.rates(unmeasured_prior()).first, 0.35);
}

// A draft model's misses are the draft's more than the request's: its engine-wide rate weighs 8 pseudo-
// observations, so a run of first-token misses (common at a 0.7 rate) lowers a request's estimate without
// sinking it; prompt lookup keeps the request's own text in charge (2).
TEST(SpecPolicy, DraftModelRatesLeanOnTheEngineWideRate) {
  Acceptance request;
  for (int i = 0; i < 3; ++i) request.add(5, 5);
  for (int i = 0; i < 4; ++i) request.add(5, 0);
  const AcceptRates kind(0.7);
  const double draft_first = request.rates(kind, Acceptance::kDraftPriorWeight).first;
  const double lookup_first = request.rates(kind, Acceptance::kLookupPriorWeight).first;
  EXPECT_LT(lookup_first, 0.45);  // the request's own four misses rule
  EXPECT_GT(draft_first, 0.55);   // the kind's rate still counts
  EXPECT_LT(draft_first, 0.7);    // and the misses do too
}

// A request kept from drafting retries: every 32nd idle step while its draft is caught up; when the draft fell
// behind, once the engine-wide credit (1/50 of every step's time) covers the catch-up, one budget for all the
// requests that wait; a catch-up that only grows while the request waits does not keep it from drafting forever.
TEST(SpecPolicy, IdleRequestRetriesOnceItsCatchUpIsWorthIt) {
  SpecPolicy p(8);
  for (int rep = 0; rep < 6; ++rep) {
    for (int n = 1; n <= 9; ++n) p.observe_target(n, 10e-3);
    p.observe_draft(1, 3e-3);
    p.observe_draft(64, 30e-3);
  }
  EXPECT_EQ(p.idle_retry(31, 1, 1), 0);
  EXPECT_EQ(p.idle_retry(32, 1, 1), 1);
  EXPECT_EQ(p.idle_retry(32, 8, 1), 1);
  // 64 tokens behind: a 30 ms catch-up. The starting credit (0.1 s) pays three at once, leaving 10 ms; then
  // each 10 ms step earns 0.2 ms: 100 steps to the next, 150 (50 catch-ups' worth of time) to each after it.
  int at_once = 0;
  while (p.idle_retry(32, 64, 1) != 0) ++at_once;
  EXPECT_EQ(at_once, 3);
  int steps = 0;
  while (p.idle_retry(32, 64, 1) == 0 && steps < 1000) p.earn_retry_credit(10e-3), ++steps;
  EXPECT_NEAR(steps, 100, 1);
  // The credit is spent: sixteen requests waiting together retry one at a time, 150 steps apart.
  for (int r = 0; r < 16; ++r) {
    int waited = 0;
    while (p.idle_retry(40, 64, 1) == 0 && waited < 1000) p.earn_retry_credit(10e-3), ++waited;
    EXPECT_GE(waited, 149) << r;
    EXPECT_LE(waited, 151) << r;
  }
  // Far behind (a catch-up worth more than the credit can hold): after 256 idle steps, on credit not in debt;
  // then the debt is earned back before the next.
  EXPECT_EQ(p.idle_retry(255, 5000, 1), 0);
  EXPECT_EQ(p.idle_retry(256, 5000, 1), 2);
  EXPECT_EQ(p.idle_retry(1000, 5000, 1), 0);
  // While the guard holds speculation off at this batch size, no catch-up: only caught-up drafts retry.
  EXPECT_FALSE(p.guard_holds(1));
  for (int i = 0; i < 8; ++i) {
    p.observe_step(1, false, 1, 0.010);
    p.observe_step(1, true, 1, 0.020);
  }
  EXPECT_TRUE(p.guard_holds(1));
  EXPECT_EQ(p.idle_retry(1000, 64, 1), 0);
  EXPECT_EQ(p.idle_retry(32, 4, 1), 1);
}

// Probes per batch size: every 16th step drafts nothing (plain_probe), every 16th half-way between lets one
// request draft a token more (explore_probe); they never fall on the same step.
TEST(SpecPolicy, PlainAndExploreProbesTakeTurns) {
  SpecPolicy p(8);
  int plain = 0, explore = 0;
  for (int step = 1; step <= 64; ++step) {
    const bool a = p.plain_probe(1), b = p.explore_probe(1);
    EXPECT_FALSE(a && b) << step;
    plain += a;
    explore += b;
    EXPECT_EQ(b, step % 16 == 8) << step;
  }
  EXPECT_EQ(plain, 4);
  EXPECT_EQ(explore, 4);
  EXPECT_FALSE(p.explore_probe(16));  // each batch size counts its own steps
}

// The scheduler with drafts on a random stream: drafts appended, scheduled with everything else, rolled back
// by a random accepted count; every invariant holds each step and all blocks come back.
TEST(SpecScheduler, RandomDraftsAndRollbacksKeepEveryInvariant) {
  SchedulerConfig cfg;
  cfg.n_blocks = 30;
  cfg.prefill_chunk = 16;
  cfg.max_batch_tokens = 48;
  cfg.max_running = 6;
  Scheduler s(cfg);
  std::mt19937 rng(21);
  std::vector<std::unique_ptr<SchedRequest>> live;
  RequestId next = 1;
  int finished = 0;
  for (int step = 0; step < 3000; ++step) {
    if (rng() % 3 == 0 && live.size() < 10) {
      auto r = std::make_unique<SchedRequest>();
      r->id = next++;
      for (int k = 1 + static_cast<int>(rng() % 40); k > 0; --k) r->tokens.push_back(static_cast<int32_t>(rng() % 9));
      r->n_prompt = static_cast<int>(r->tokens.size());
      s.add(r.get());
      live.push_back(std::move(r));
    }
    std::map<SchedRequest*, int> len;
    for (SchedRequest* r : s.running())
      if (r->num_computed + 1 == static_cast<int>(r->tokens.size()) && rng() % 2) {
        len[r] = static_cast<int>(r->tokens.size());
        r->n_draft = 1 + static_cast<int>(rng() % 6);
        if (rng() % 2) {
          // A draft model reading the target's cache: room for its own rows, given back before schedule().
          const int before = s.kv().num_tokens(r->id);
          if (s.reserve(r, len[r] + r->n_draft - 1)) {
            EXPECT_GE(s.kv().num_tokens(r->id), len[r] + r->n_draft - 1);
            s.rollback(r, before);
          }
          EXPECT_EQ(s.kv().num_tokens(r->id), before);
        }
        for (int k = 0; k < r->n_draft; ++k) r->tokens.push_back(static_cast<int32_t>(rng() % 9));
      }
    const std::vector<ScheduledWork> w = s.schedule();
    s.computed(w);
    for (size_t i = 0; i < live.size();) {
      SchedRequest* r = live[i].get();
      const bool ran = std::any_of(w.begin(), w.end(), [&](const ScheduledWork& x) { return x.r == r; });
      if (len.count(r)) {
        const int L = len[r];
        r->tokens.resize(L);
        const int was_draft = r->n_draft;
        r->n_draft = 0;
        if (ran && was_draft > 0) {
          const int m = r->num_computed - L;  // draft tokens computed
          const int a = m > 0 ? static_cast<int>(rng() % (m + 1)) : 0;
          for (int k = 0; k < a; ++k) r->tokens.push_back(static_cast<int32_t>(rng() % 9));
          s.rollback(r, L + a);
          r->tokens.push_back(static_cast<int32_t>(rng() % 9));
        } else if (r->num_computed > L - 1 + (ran ? 1 : 0)) {
          ADD_FAILURE() << "computed past its accepted tokens";
        }
      } else if (ran && r->num_computed == static_cast<int>(r->tokens.size())) {
        r->tokens.push_back(static_cast<int32_t>(rng() % 9));
      }
      if (static_cast<int>(r->tokens.size()) - r->n_prompt >= 30) {
        s.finish(r);
        live.erase(live.begin() + static_cast<long>(i));
        ++finished;
        continue;
      }
      ++i;
    }
    ASSERT_EQ(s.check(), "") << "step " << step;
    for (SchedRequest* r : s.running()) ASSERT_LE(r->num_computed, static_cast<int>(r->tokens.size()));
  }
  for (auto& r : live) s.finish(r.get());
  EXPECT_GT(finished, 100);
  EXPECT_EQ(s.kv().pool().n_used(), s.prefix_cache()->cached_blocks());
}

}  // namespace
}  // namespace cachet
