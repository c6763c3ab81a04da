// Paged KV bookkeeping without a model (a randomized property test of 100k operations), then the paged
// cache under a real model: the same logits as the contiguous cache, bit for bit, forks included.
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"
#include "kv/kv_block_storage.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

TEST(BlockPool, AllocateFreeAndLruOrder) {
  BlockPool p(4);
  std::vector<BlockId> a;
  ASSERT_TRUE(p.allocate(3, &a));
  EXPECT_EQ(p.n_free(), 1);
  EXPECT_FALSE(p.allocate(2, &a));  // refuses and changes nothing
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(p.n_free(), 1);
  p.decref(a[1]);
  p.decref(a[0]);
  // Least recently freed first: the never-used block 3, then a[1], then a[0].
  std::vector<BlockId> b;
  ASSERT_TRUE(p.allocate(3, &b));
  EXPECT_EQ(b, (std::vector<BlockId>{3, a[1], a[0]}));
  EXPECT_EQ(p.check(), "");
}

// Copy-on-write is recorded, not done: the copy reaches the next batch; one whose destination went back to the
// pool first (its sequence freed or cut) never does, since that block may be handed out again.
TEST(KvCacheManager, CopiesAreRecordedAndDroppedWithTheirBlock) {
  KvCacheManager m(8, 4);
  ASSERT_TRUE(m.append(1, 6));  // blocks: one full, one with 2 tokens
  m.fork(1, 2);
  EXPECT_FALSE(m.has_copies());
  ASSERT_TRUE(m.append(2, 1));  // the shared partial block is copied for 2
  const BlockId shared = m.block_table(1)[1], own = m.block_table(2)[1];
  EXPECT_NE(shared, own);
  EXPECT_EQ(m.take_copies(), (std::vector<KvBlockCopy>{{shared, own, 2}}));
  EXPECT_TRUE(m.take_copies().empty());
  m.fork(1, 3);
  ASSERT_TRUE(m.append(3, 1));
  m.free(3);
  EXPECT_TRUE(m.take_copies().empty());
  m.fork(1, 4);
  ASSERT_TRUE(m.append(4, 3));  // copy of the partial block, then a fresh one
  m.truncate(4, 4);             // back to the full block only: the copy's destination is gone
  EXPECT_TRUE(m.take_copies().empty());
  EXPECT_EQ(m.check(), "");
}

// A model of the KV contents: each token slot holds the value its sequence wrote there.
TEST(KvCacheManager, RandomizedOperationsKeepEveryInvariant) {
  constexpr int kBlocks = 64, kBs = 4;
  std::map<BlockId, std::vector<int64_t>> phys;  // block -> slot values
  KvCacheManager m(kBlocks, kBs);
  std::map<SeqId, std::vector<int64_t>> logical;  // what each sequence must read back
  std::mt19937_64 rng(42);
  SeqId next_id = 1;
  int64_t next_value = 1;
  int preemptions = 0, cows = 0, forks = 0;
  auto write = [&](SeqId s, int from, int to) {
    for (const KvBlockCopy& c : m.take_copies()) {  // as the model does before a step writes
      auto& d = phys[c.dst];
      d.assign(kBs, -1);
      for (int i = 0; i < c.n_tokens; ++i) d[i] = phys[c.src][i];
    }
    const auto& t = m.block_table(s);
    for (int p = from; p < to; ++p) {
      auto& blk = phys[t[p / kBs]];
      if (blk.size() != kBs) blk.assign(kBs, -1);
      blk[p % kBs] = next_value;
      logical[s].push_back(next_value++);
    }
  };
  auto verify = [&](SeqId s) {
    const auto& t = m.block_table(s);
    const auto& want = logical[s];
    ASSERT_EQ(m.num_tokens(s), static_cast<int>(want.size()));
    for (size_t p = 0; p < want.size(); ++p) ASSERT_EQ(phys[t[p / kBs]][p % kBs], want[p]) << "seq " << s << " pos " << p;
  };
  auto pick = [&]() {
    auto it = logical.begin();
    std::advance(it, rng() % logical.size());
    return it->first;
  };
  for (int op = 0; op < 100000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (logical.empty() || kind < 2) {  // a new request with a prompt
      const int n = 1 + static_cast<int>(rng() % 24);
      const SeqId s = next_id++;
      if (m.append(s, n)) write(s, 0, n);
      else ASSERT_FALSE(m.has(s)) << "a refused append must change nothing";
    } else if (kind < 7) {  // decode: one to three tokens
      const SeqId s = pick();
      const int n = 1 + static_cast<int>(rng() % 3), before = m.num_tokens(s);
      const bool shared_tail = before % kBs != 0 && m.pool().ref_cnt(m.block_table(s).back()) > 1;
      if (m.append(s, n)) {
        cows += shared_tail;
        write(s, before, before + n);
      } else {
        // Out of blocks: preempt the youngest request (recompute later), as the scheduler will.
        ASSERT_EQ(m.num_tokens(s), before);
        m.free(logical.rbegin()->first);
        logical.erase(std::prev(logical.end()));
        ++preemptions;
      }
    } else if (kind < 8) {  // fork (n > 1 samples, beam search)
      const SeqId parent = pick(), child = next_id++;
      m.fork(parent, child);
      logical[child] = logical[parent];
      ++forks;
    } else {  // finish or abort
      const SeqId s = pick();
      m.free(s);
      logical.erase(s);
    }
    ASSERT_EQ(m.check(), "") << "after operation " << op;
    if (op % 97 == 0)
      for (const auto& [s, v] : logical) verify(s);
  }
  for (const auto& [s, v] : logical) verify(s);
  for (const auto& [s, v] : logical) m.free(s);
  EXPECT_EQ(m.pool().n_free(), kBlocks);
  EXPECT_EQ(m.check(), "");
  EXPECT_GT(preemptions, 100);
  EXPECT_GT(cows, 100);
  EXPECT_GT(forks, 1000);
}

TEST(PagedKvCache, SameLogitsAsTheContiguousCacheForksIncluded) {
  SyntheticSpec s;
  s.type = DType::kQ4_0;
  s.embd_type = DType::kQ8_0;
  s.n_head = 4;
  s.n_head_kv = 2;
  const std::string path = testing::temp_path("paged.gguf");
  ASSERT_TRUE(write_synthetic_model(s, path).is_ok());
  auto m = load_model(path, {2});
  ASSERT_TRUE(m.is_ok());
  Model& model = **m;
  const ModelConfig& c = model.config();
  constexpr int kBs = 16;
  KvBlockStorage storage(c, 32, kBs, DType::kF16);
  KvCacheManager mgr(32, kBs);
  // A sequence's batch: its block table, and the copy-on-writes recorded since the last batch.
  auto paged = [&](SeqId s, const std::vector<int32_t>& tokens, int pos) {
    ForwardBatch b = ForwardBatch::single(storage, mgr.block_table(s), tokens, pos, false);
    b.copies = mgr.take_copies();
    return b;
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((i * 31 + 7) % static_cast<int>(c.n_vocab));
  const int64_t V = c.n_vocab;
  std::vector<float> lp(V), lc(V), lf(V), lr(V);

  ContiguousKvCache contiguous(c, 128, DType::kF16);
  ASSERT_TRUE(mgr.append(1, static_cast<int>(prompt.size())));
  ASSERT_TRUE(model.forward(paged(1, prompt, 0), lp.data()).is_ok());
  ASSERT_TRUE(model.forward(ForwardBatch::single(contiguous, prompt, 0, false), lc.data()).is_ok());
  ASSERT_EQ(0, std::memcmp(lp.data(), lc.data(), V * sizeof(float)));

  // Fork after the prompt: the child shares the 3 prompt blocks; its first append copies the shared,
  // partly filled last block. Both continue with different tokens and must match independent runs.
  mgr.fork(1, 2);
  ContiguousKvCache child_ref(c, 128, DType::kF16);
  ASSERT_TRUE(model.forward(ForwardBatch::single(child_ref, prompt, 0, false), lr.data()).is_ok());
  int32_t tok_p = 3, tok_c = 5;
  for (int step = 0; step < 20; ++step) {
    const int pos = static_cast<int>(prompt.size()) + step;
    ASSERT_TRUE(mgr.append(1, 1) && mgr.append(2, 1));
    ASSERT_TRUE(model.forward(paged(1, {tok_p}, pos), lp.data()).is_ok());
    ASSERT_TRUE(model.forward(ForwardBatch::single(contiguous, {tok_p}, pos, false), lc.data()).is_ok());
    ASSERT_TRUE(model.forward(paged(2, {tok_c}, pos), lf.data()).is_ok());
    ASSERT_TRUE(model.forward(ForwardBatch::single(child_ref, {tok_c}, pos, false), lr.data()).is_ok());
    ASSERT_EQ(0, std::memcmp(lp.data(), lc.data(), V * sizeof(float))) << "parent, step " << step;
    ASSERT_EQ(0, std::memcmp(lf.data(), lr.data(), V * sizeof(float))) << "child, step " << step;
    tok_p = (tok_p * 7 + 1) % static_cast<int32_t>(V);
    tok_c = (tok_c * 5 + 2) % static_cast<int32_t>(V);
  }
  EXPECT_EQ(mgr.check(), "");
}

}  // namespace
}  // namespace cachet
