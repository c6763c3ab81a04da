// The radix prefix cache alone, without a model or KV memory: hand-made cases, then a randomized run of 100k
// operations (requests that match, lock, allocate, insert and finish; evictions; several namespaces) with every
// invariant checked after each one.
#include <algorithm>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "kv/block_pool.h"
#include "kv/radix_cache.h"
#include "kv/state_store.h"

namespace cachet {
namespace {

constexpr int kBs = 4;

std::vector<int32_t> seq(std::initializer_list<int32_t> v) { return v; }

TEST(RadixCache, MatchesWholeBlocksSplitsAndKeepsNamespacesApart) {
  BlockPool pool(64);
  RadixCache rc(&pool, kBs);
  std::vector<BlockId> b;
  ASSERT_TRUE(pool.allocate(3, &b));
  const auto t = seq({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13});  // 3 whole blocks and one token
  EXPECT_EQ(rc.insert(7, t.data(), static_cast<int>(t.size()), b.data()), 3);
  EXPECT_EQ(rc.cached_blocks(), 3);
  for (BlockId x : b) EXPECT_EQ(pool.ref_cnt(x), 2);  // the request's and the tree's

  // Same namespace: the two blocks it shares; the third differs.
  const auto u = seq({1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0});
  RadixCache::Match m = rc.match(7, u.data(), static_cast<int>(u.size()));
  EXPECT_EQ(m.n_tokens, 8);
  EXPECT_EQ(m.blocks, (std::vector<BlockId>{b[0], b[1]}));  // the node was split after two blocks
  EXPECT_EQ(rc.check(), "");
  // A partial block never matches; another namespace never matches.
  EXPECT_EQ(rc.match(7, t.data(), 3).n_tokens, 0);
  EXPECT_EQ(rc.match(8, t.data(), static_cast<int>(t.size())).n_tokens, 0);
  // max_blocks caps the match (a request keeps its last prompt token to compute).
  EXPECT_EQ(rc.match(7, t.data(), static_cast<int>(t.size()), 1).n_tokens, 4);

  // Locked paths survive eviction; unlocked leaves go, least recently used first.
  m = rc.match(7, t.data(), 8);
  rc.lock(m.last);
  for (BlockId x : b) pool.decref(x);  // the first request finished
  EXPECT_EQ(rc.evict(100), 1);        // only the third block's node is unlocked
  EXPECT_EQ(rc.cached_blocks(), 2);
  EXPECT_EQ(rc.match(7, t.data(), static_cast<int>(t.size())).n_tokens, 8);
  rc.unlock(m.last);
  EXPECT_EQ(rc.evict(100), 2);
  EXPECT_EQ(pool.n_free(), pool.n_total());
  EXPECT_EQ(rc.check(), "");
}

TEST(RadixCache, InsertKeepsTheTreesOwnBlocksForKnownPrefixes) {
  BlockPool pool(16);
  RadixCache rc(&pool, kBs);
  std::vector<BlockId> a, c;
  ASSERT_TRUE(pool.allocate(2, &a) && pool.allocate(3, &c));
  const auto t = seq({1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9});
  EXPECT_EQ(rc.insert(0, t.data(), 8, a.data()), 2);
  // A second request computed the same two blocks itself (different ids) and one more.
  EXPECT_EQ(rc.insert(0, t.data(), 12, c.data()), 1);
  const RadixCache::Match m = rc.match(0, t.data(), 12);
  EXPECT_EQ(m.blocks, (std::vector<BlockId>{a[0], a[1], c[2]}));
  EXPECT_EQ(pool.ref_cnt(c[0]), 1);  // not taken by the tree
  EXPECT_EQ(rc.check(), "");
}

// What a block holds: the namespace and every token up to and including it.
struct Content {
  uint64_t ns;
  std::vector<int32_t> prefix;
  bool operator==(const Content& o) const { return ns == o.ns && prefix == o.prefix; }
};

TEST(RadixCache, RandomizedHundredThousandOperations) {
  constexpr int kBlocks = 96;
  BlockPool pool(kBlocks);
  RadixCache rc(&pool, kBs);
  std::mt19937 rng(20261122);
  std::vector<Content> content(kBlocks);  // valid for blocks some request or the tree references

  // A few shared beginnings per namespace (system prompts), random tails; tokens from a small alphabet so
  // prefixes collide often.
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> b(kBs * (1 + rng() % 6));
    for (auto& x : b) x = static_cast<int32_t>(rng() % 3);
    bases.push_back(b);
  }
  struct Req {
    uint64_t ns;
    std::vector<int32_t> tokens;
    RadixCache::Match m;
    std::vector<BlockId> table;  // every block of the request's prompt (matched, then allocated)
  };
  std::vector<Req> running;
  int64_t evictions = 0, hits = 0, lru_checked = 0;

  auto finish = [&](size_t i) {
    Req& r = running[i];
    rc.insert(r.ns, r.tokens.data(), static_cast<int>(r.table.size()) * kBs, r.table.data());
    if (r.m.last) rc.unlock(r.m.last);
    for (BlockId b : r.table) pool.decref(b);
    running.erase(running.begin() + static_cast<long>(i));
  };

  for (int op = 0; op < 100000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 5 || running.empty()) {  // a request arrives
      Req r;
      r.ns = rng() % 3;
      r.tokens = bases[rng() % bases.size()];
      const int tail = static_cast<int>(rng() % (3 * kBs));
      for (int j = 0; j < tail; ++j) r.tokens.push_back(static_cast<int32_t>(rng() % 3));
      const int n = static_cast<int>(r.tokens.size());
      // The last prompt token is always computed: at most (n - 1) / kBs blocks may come from the cache.
      r.m = rc.match(r.ns, r.tokens.data(), n, (n - 1) / kBs);
      // Every matched block holds exactly this prefix in this namespace.
      for (size_t k = 0; k < r.m.blocks.size(); ++k) {
        const Content want{r.ns, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + (k + 1) * kBs)};
        ASSERT_TRUE(content[r.m.blocks[k]] == want) << "op " << op << ": a block of another prefix matched";
      }
      // A running request's locked prefix is never lost: the same beginning matches at least that far.
      for (const Req& o : running) {
        if (o.ns != r.ns) continue;
        size_t common = 0;
        while (common < o.tokens.size() && common < r.tokens.size() && o.tokens[common] == r.tokens[common]) ++common;
        const int want = std::min<int>(static_cast<int>(common) / kBs, static_cast<int>(o.m.blocks.size()));
        ASSERT_GE(static_cast<int>(r.m.blocks.size()), std::min(want, (n - 1) / kBs)) << "op " << op;
      }
      if (r.m.last) rc.lock(r.m.last);
      hits += r.m.n_tokens;
      for (BlockId b : r.m.blocks) pool.incref(b);
      r.table = r.m.blocks;
      const int need = n / kBs - static_cast<int>(r.m.blocks.size());
      if (!pool.can_allocate(need)) {  // evict before giving up (a scheduler would preempt after this)
        const uint64_t before_oldest = rc.oldest_evictable_access();
        const int got = rc.evict(need - pool.n_free());
        ++evictions;
        if (got > 0) {
          ASSERT_LE(rc.last_evicted_access(), rc.oldest_evictable_access()) << "op " << op << ": not LRU order";
          ASSERT_GE(rc.last_evicted_access(), before_oldest);
          ++lru_checked;
        }
      }
      std::vector<BlockId> fresh;
      if (pool.allocate(need, &fresh)) {
        for (size_t k = 0; k < fresh.size(); ++k) {
          const size_t idx = r.table.size() + k;
          content[fresh[k]] = {r.ns, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + (idx + 1) * kBs)};
        }
        r.table.insert(r.table.end(), fresh.begin(), fresh.end());
        running.push_back(std::move(r));
      } else {  // no room even after eviction: the request does not start
        if (r.m.last) rc.unlock(r.m.last);
        for (BlockId b : r.table) pool.decref(b);
      }
    } else if (kind < 9) {  // a request finishes (or is aborted / preempted): its blocks go to the tree
      finish(rng() % running.size());
    } else {  // memory pressure from elsewhere
      const uint64_t before_oldest = rc.oldest_evictable_access();
      if (rc.evict(static_cast<int>(rng() % 8)) > 0) {
        ASSERT_LE(rc.last_evicted_access(), rc.oldest_evictable_access()) << "op " << op;
        ASSERT_GE(rc.last_evicted_access(), before_oldest);
        ++lru_checked;
      }
    }
    const std::string err = rc.check() + pool.check();
    ASSERT_EQ(err, "") << "after op " << op;
    // Tree references + requests' references == the pool's counts.
    if (op % 97 == 0) {
      std::vector<int> refs(kBlocks, 0);
      for (const Req& q : running)
        for (BlockId b : q.table) ++refs[b];
      int tree_refs = 0;
      for (int b = 0; b < kBlocks; ++b) {
        ASSERT_GE(pool.ref_cnt(b), refs[b]);
        tree_refs += pool.ref_cnt(b) - refs[b];
      }
      ASSERT_EQ(tree_refs, rc.cached_blocks()) << "op " << op;
    }
  }
  while (!running.empty()) finish(running.size() - 1);
  rc.evict(1 << 30);
  EXPECT_EQ(rc.cached_blocks(), 0);
  EXPECT_EQ(pool.n_free(), pool.n_total());  // nothing leaked, nothing freed twice (the pool checks that)
  EXPECT_EQ(rc.check() + pool.check(), "");
  EXPECT_GT(hits, 100000);
  EXPECT_GT(evictions, 100);
  EXPECT_GT(lru_checked, 100);
  EXPECT_GT(rc.hit_tokens(), 0);
}


// Hybrid models' state checkpoints on the tree: a match that needs one ends at a node holding the state of exactly
// its prefix (in its namespace); evictions and LRU drops hand every slot back; the slots the tree holds never
// exceed the store, and none leaks (the store's used slots are the tree's checkpoints, always).
// Which checkpoint goes first: one with a deeper checkpoint on its node's only path on (a conversation's earlier
// turn), even the most recent; then the least recently used, on a tie (one touch stamps a whole path) the
// shallower; a branch point (a shared system prompt) counts as the deepest of its paths.
TEST(RadixCache, DropsShadowedCheckpointsFirstThenTheLeastRecent) {
  BlockPool pool(32);
  RadixCache rc(&pool, kBs);
  // Conversation a: system (block 1), turn 1 (block 2), turn 2 (block 3); conversation b: system, then block 9.
  const auto a = seq({1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  const auto b = seq({1, 1, 1, 1, 9, 9, 9, 9});
  std::vector<BlockId> ba, bb;
  ASSERT_TRUE(pool.allocate(3, &ba) && pool.allocate(2, &bb));
  rc.insert(0, a.data(), 12, ba.data());
  rc.insert(0, b.data(), 8, bb.data());
  for (BlockId x : ba) pool.decref(x);
  for (BlockId x : bb) pool.decref(x);
  ASSERT_TRUE(rc.attach_checkpoint(0, a.data(), 4, 10));   // the system prompt: a branch point
  ASSERT_TRUE(rc.attach_checkpoint(0, a.data(), 8, 11));   // a's turn 1: shadowed by turn 2
  ASSERT_TRUE(rc.attach_checkpoint(0, a.data(), 12, 12));  // a's turn 2
  ASSERT_TRUE(rc.attach_checkpoint(0, b.data(), 8, 13));   // b's turn 1
  // b used last, then a (whose match stamps its whole path): a's turn 1 is still the first to go.
  rc.match(0, b.data(), 8, 2, true);
  rc.match(0, a.data(), 12, 3, true);
  const auto drop = [&] {
    EXPECT_TRUE(rc.drop_lru_checkpoint());
    const std::vector<int32_t> d = rc.take_dropped_checkpoints();
    return d.size() == 1 ? d[0] : -1;
  };
  EXPECT_EQ(drop(), 11);
  // Then by use: b's turn 1 (stamped before a's path), then the system prompt and a's turn 2, stamped together
  // by a's match: the shallower first.
  EXPECT_EQ(drop(), 13);
  EXPECT_EQ(drop(), 10);
  EXPECT_EQ(drop(), 12);
  EXPECT_FALSE(rc.drop_lru_checkpoint());
  EXPECT_EQ(rc.check(), "");
}

// A request that resumed from a checkpoint locks its node's path: the checkpoint it adopted stays until it ends,
// those above it on the path (its conversation's earlier turns, the system prompt) may still go.
TEST(RadixCache, OnlyTheAdoptedCheckpointOfALockedPathStays) {
  BlockPool pool(32);
  RadixCache rc(&pool, kBs);
  const auto a = seq({1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  std::vector<BlockId> ba;
  ASSERT_TRUE(pool.allocate(3, &ba));
  rc.insert(0, a.data(), 12, ba.data());
  for (BlockId x : ba) pool.decref(x);
  ASSERT_TRUE(rc.attach_checkpoint(0, a.data(), 4, 10));
  ASSERT_TRUE(rc.attach_checkpoint(0, a.data(), 8, 11));
  ASSERT_TRUE(rc.attach_checkpoint(0, a.data(), 12, 12));
  const RadixCache::Match m = rc.match(0, a.data(), 12, 3, true);
  ASSERT_EQ(m.checkpoint, 12);
  rc.lock(m.last);
  std::vector<int32_t> dropped;
  while (rc.drop_lru_checkpoint())
    for (int32_t s : rc.take_dropped_checkpoints()) dropped.push_back(s);
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<int32_t>{10, 11}));
  rc.unlock(m.last);
  EXPECT_TRUE(rc.drop_lru_checkpoint());
  EXPECT_EQ(rc.take_dropped_checkpoints(), std::vector<int32_t>{12});
  EXPECT_EQ(rc.check(), "");
}

TEST(RadixCache, RandomizedCheckpointsNeverLeakOrLie) {
  constexpr int kBlocks = 64, kSlots = 6;
  BlockPool pool(kBlocks);
  RadixCache rc(&pool, kBs);
  StateStore slots(kSlots, 0, 0, 0);  // bookkeeping only
  std::map<int32_t, Content> state_of;  // what each checkpoint slot holds
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> b(kBs * (1 + rng() % 5) + rng() % kBs);
    for (auto& x : b) x = static_cast<int32_t>(rng() % 3);
    bases.push_back(b);
  }
  auto reclaim = [&] {
    for (int32_t s : rc.take_dropped_checkpoints()) {
      state_of.erase(s);
      slots.free(s);
    }
  };
  struct Req {
    uint64_t ns;
    std::vector<int32_t> tokens;
    RadixCache::Match m;
    std::vector<BlockId> table;
  };
  std::vector<Req> running;
  int64_t resumed = 0, attached = 0;
  for (int op = 0; op < 30000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 5 || running.empty()) {
      Req r;
      r.ns = rng() % 2;
      r.tokens = bases[rng() % bases.size()];
      for (int j = static_cast<int>(rng() % (2 * kBs)); j > 0; --j) r.tokens.push_back(static_cast<int32_t>(rng() % 3));
      const int n = static_cast<int>(r.tokens.size());
      r.m = rc.match(r.ns, r.tokens.data(), n, (n - 1) / kBs, /*need_checkpoint=*/true);
      if (r.m.last) {
        ASSERT_GE(r.m.checkpoint, 0) << "op " << op;
        const Content want{r.ns, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + r.m.n_tokens)};
        ASSERT_TRUE(state_of.at(r.m.checkpoint) == want) << "op " << op << ": a checkpoint of another prefix";
        rc.lock(r.m.last);
        ++resumed;
      } else {
        ASSERT_EQ(r.m.n_tokens, 0);
      }
      for (BlockId b : r.m.blocks) pool.incref(b);
      r.table = r.m.blocks;
      const int need = n / kBs - static_cast<int>(r.m.blocks.size());
      if (!pool.can_allocate(need)) rc.evict(need - pool.n_free());
      reclaim();
      std::vector<BlockId> fresh;
      if (pool.allocate(need, &fresh)) {
        r.table.insert(r.table.end(), fresh.begin(), fresh.end());
        running.push_back(std::move(r));
      } else {
        if (r.m.last) rc.unlock(r.m.last);
        for (BlockId b : r.table) pool.decref(b);
      }
    } else if (kind < 9) {  // finishes: blocks to the tree, then a checkpoint at a random boundary of them
      const size_t i = rng() % running.size();
      Req& r = running[i];
      const int nb = static_cast<int>(r.table.size());
      rc.insert(r.ns, r.tokens.data(), nb * kBs, r.table.data());
      if (nb > 0) {
        std::optional<StateSlot> s = slots.allocate();
        if (!s && rc.drop_lru_checkpoint()) {
          reclaim();
          s = slots.allocate();
        }
        if (s) {
          const int pos = kBs * (1 + static_cast<int>(rng() % nb));
          state_of[*s] = {r.ns, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + pos)};
          if (rc.attach_checkpoint(r.ns, r.tokens.data(), pos, *s)) {
            ++attached;
          } else {
            state_of.erase(*s);
            slots.free(*s);
          }
        }
      }
      if (r.m.last) {
        // The checkpoint it adopted is still the tree's (a locked node's own is never dropped).
        ASSERT_TRUE(state_of.count(r.m.checkpoint) &&
                    state_of.at(r.m.checkpoint) ==
                        (Content{r.ns, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + r.m.n_tokens)}))
            << "op " << op << ": a running request's checkpoint went";
        rc.unlock(r.m.last);
      }
      for (BlockId b : r.table) pool.decref(b);
      running.erase(running.begin() + static_cast<long>(i));
    } else {
      rc.evict(static_cast<int>(rng() % 8));
      reclaim();
    }
    ASSERT_EQ(rc.check() + pool.check() + slots.check(), "") << "after op " << op;
    ASSERT_EQ(slots.n_used(), rc.checkpoints()) << "after op " << op << ": a checkpoint slot leaked";
    ASSERT_LE(rc.checkpoints(), kSlots);
  }
  EXPECT_GT(resumed, 1000);
  EXPECT_GT(attached, 1000);
}

}  // namespace
}  // namespace cachet
