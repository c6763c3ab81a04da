// The Scheduler alone, without a model: the catch-up rule, the budget, chunking, preemption and prefix-cache
// admission on a randomized stream of requests, with every bookkeeping invariant after each step.
#include <algorithm>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "engine/scheduler.h"

namespace cachet {
namespace {

TEST(Scheduler, CatchUpRuleCoversPrefillChunksDecodeAndCacheHits) {
  SchedulerConfig cfg;
  cfg.n_blocks = 32;
  cfg.prefill_chunk = 20;
  cfg.max_batch_tokens = 50;
  Scheduler s(cfg);
  SchedRequest a;
  a.id = 1;
  for (int i = 0; i < 45; ++i) a.tokens.push_back(i);
  a.n_prompt = 45;
  s.add(&a);
  // Prefill in chunks of 20, 20, 5; then one token per step once a new token is appended.
  for (int want : {20, 20, 5}) {
    auto w = s.schedule();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].n, want);
    s.computed(w);
  }
  a.tokens.push_back(99);  // sampled
  auto w = s.schedule();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].n, 1);
  s.computed(w);
  s.finish(&a);  // 46 computed tokens: 2 whole blocks go to the tree
  EXPECT_EQ(s.prefix_cache()->cached_blocks(), 2);
  // The same prompt again: it starts at 32 computed tokens and computes the rest, last token included.
  SchedRequest b;
  b.id = 2;
  b.tokens.assign(a.tokens.begin(), a.tokens.begin() + 45);
  b.n_prompt = 45;
  s.add(&b);
  w = s.schedule();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(b.cached_tokens, 32);
  EXPECT_EQ(b.num_computed, 32);
  EXPECT_EQ(w[0].n, 13);
  // A prompt of exactly two blocks keeps its last token to compute: one block from the cache.
  SchedRequest c;
  c.id = 3;
  c.tokens.assign(a.tokens.begin(), a.tokens.begin() + 32);
  c.n_prompt = 32;
  s.add(&c);
  w = s.schedule();
  EXPECT_EQ(c.cached_tokens, 16);
  EXPECT_EQ(s.check(), "");
}

// An encoder's input runs whole in one step, past the token budget and the chunk size if it must, and never
// goes into the prefix cache (its states depend on all of it).
TEST(Scheduler, WholeInputsRunInOnePassAndAreNeverCached) {
  SchedulerConfig cfg;
  cfg.n_blocks = 32;
  cfg.prefill_chunk = 16;
  cfg.max_batch_tokens = 40;
  Scheduler s(cfg);
  SchedRequest a, b, c;
  a.id = 1, b.id = 2, c.id = 3;
  for (int i = 0; i < 30; ++i) a.tokens.push_back(i);
  for (int i = 0; i < 70; ++i) b.tokens.push_back(i);
  c.tokens = a.tokens;
  for (SchedRequest* r : {&a, &b, &c}) {
    r->n_prompt = static_cast<int>(r->tokens.size());
    r->whole = true;
    r->reuse_prefix = false;
    s.add(r);
  }
  auto w = s.schedule();  // a whole (30 > the chunk of 16); b whole too, past the budget's 10 left; c waits
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].n, 30);
  EXPECT_EQ(w[1].n, 70);
  s.computed(w);
  s.finish(&a);
  s.finish(&b);
  EXPECT_EQ(s.prefix_cache()->cached_blocks(), 0);
  w = s.schedule();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].n, 30);
  EXPECT_EQ(c.cached_tokens, 0);
  s.computed(w);
  s.finish(&c);
  EXPECT_EQ(s.check(), "");
}

TEST(Scheduler, RandomizedStreamKeepsEveryInvariant) {
  for (bool cache : {false, true}) {
    SchedulerConfig cfg;
    cfg.n_blocks = cache ? 14 : 24;  // the cache saves blocks: tighter, so it must evict and still preempt
    cfg.prefill_chunk = 13;
    cfg.max_batch_tokens = 40;
    cfg.max_running = 6;
    cfg.prefix_cache = cache;
    Scheduler s(cfg);
    std::mt19937 rng(cache ? 7 : 8);
    std::vector<std::unique_ptr<SchedRequest>> live;
    std::vector<int> max_new;
    std::vector<int32_t> shared(70);
    for (auto& x : shared) x = static_cast<int32_t>(rng() % 50);
    RequestId next = 1;
    int64_t finished = 0;
    for (int step = 0; step < 4000; ++step) {
      if (rng() % 3 == 0 && live.size() < 12) {
        auto r = std::make_unique<SchedRequest>();
        r->id = next++;
        r->tokens.assign(shared.begin(), shared.begin() + 1 + rng() % shared.size());
        for (int k = static_cast<int>(rng() % 30); k > 0; --k) r->tokens.push_back(static_cast<int32_t>(rng() % 50));
        r->n_prompt = static_cast<int>(r->tokens.size());
        s.add(r.get());
        live.push_back(std::move(r));
        max_new.push_back(1 + static_cast<int>(rng() % 20));
      }
      const std::vector<ScheduledWork> w = s.schedule();
      int total = 0;
      for (const ScheduledWork& x : w) {
        ASSERT_GT(x.n, 0);
        ASSERT_LE(x.n, cfg.prefill_chunk);
        ASSERT_LE(x.r->num_computed + x.n, static_cast<int>(x.r->tokens.size()));  // never past its tokens
        ASSERT_GE(s.kv().num_tokens(x.r->id), x.r->num_computed + x.n);           // blocks are reserved
        total += x.n;
      }
      ASSERT_LE(total, cfg.max_batch_tokens);
      s.computed(w);
      // Requests whose every token is computed sample one more, and finish at their length.
      for (size_t i = 0; i < live.size();) {
        SchedRequest* r = live[i].get();
        const bool caught_up = r->num_computed == static_cast<int>(r->tokens.size());
        const bool scheduled = std::any_of(w.begin(), w.end(), [&](const ScheduledWork& x) { return x.r == r; });
        if (caught_up && scheduled) {
          r->tokens.push_back(static_cast<int32_t>(rng() % 50));
          if (static_cast<int>(r->tokens.size()) - r->n_prompt >= max_new[i]) {
            s.finish(r);
            live.erase(live.begin() + static_cast<long>(i));
            max_new.erase(max_new.begin() + static_cast<long>(i));
            ++finished;
            continue;
          }
        }
        ++i;
      }
      ASSERT_EQ(s.check(), "") << "step " << step;
    }
    EXPECT_GT(finished, 300);
    EXPECT_GT(s.preemptions(), 0) << "cache " << cache << ", finished " << finished;
    if (cache) EXPECT_GT(s.prefix_cache()->hit_tokens(), 1000);
  }
}

}  // namespace
}  // namespace cachet
