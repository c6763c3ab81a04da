// Hybrid models (Qwen3.5: gated delta net layers with a recurrent state per sequence): the state slots'
// bookkeeping alone, then the engine on a synthetic qwen35 file. Concurrent requests, preempted ones, fewer
// state slots than requests, prompt chunks and forked samples all give exactly the tokens (and logits) a
// request gives alone.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/generate.h"
#include "kv/state_store.h"
#include "model/model.h"
#include "model/ops.h"
#include "model/synthetic.h"
#include "tests/hybrid_fixture.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

TEST(StateStore, RandomAllocateAndFreeKeepsEveryInvariant) {
  StateStore st(7, 2, 3, 5);
  EXPECT_EQ(st.bytes_per_slot(), 2 * (3 + 5) * 4);
  std::mt19937 rng(5);
  std::vector<StateSlot> held;
  for (int i = 0; i < 2000; ++i) {
    if (rng() % 2 && st.can_allocate()) {
      auto s = st.allocate();
      ASSERT_TRUE(s.has_value());
      EXPECT_TRUE(std::find(held.begin(), held.end(), *s) == held.end()) << "slot handed out twice";
      held.push_back(*s);
      std::fill_n(st.conv(*s, 1), 3, static_cast<float>(*s));
    } else if (!held.empty()) {
      const size_t k = rng() % held.size();
      EXPECT_EQ(st.conv(held[k], 1)[2], static_cast<float>(held[k])) << "a slot's state changed under it";
      st.free(held[k]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_EQ(st.check(), "");
    ASSERT_EQ(st.n_used(), static_cast<int>(held.size()));
  }
  while (st.can_allocate()) held.push_back(*st.allocate());
  EXPECT_FALSE(st.allocate().has_value());
  EXPECT_EQ(st.n_free(), 0);
  st.copy(held[0], held[1]);
  EXPECT_EQ(0, std::memcmp(st.conv(held[0], 0), st.conv(held[1], 0), static_cast<size_t>(st.bytes_per_slot())));
  st.zero(held[1]);
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(st.ssm(held[1], r)[i], 0.0f);
}

// Every engine test runs on the three hybrid families: Qwen3.5's gated delta nets, LFM2's short convs and
// Granite 4.0-H's and Nemotron-H's Mamba-2.
std::unique_ptr<Model> hybrid_model(const std::string& arch) {
  return testing::hybrid_test_model(42, "hybrid_engine_" + arch + ".gguf", false, false, arch);
}

class HybridEngine : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Archs, HybridEngine,
                         ::testing::Values("qwen35", "lfm2", "granitehybrid", "nemotron_h", "nemotron_h_moe",
                                           "nemotron_h_moe_latent"));

std::unique_ptr<Engine> make_engine(Model& m, EngineConfig cfg) {
  auto e = Engine::create(m, std::move(cfg));
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

struct Job {
  std::vector<int32_t> prompt;
  int max_tokens;
};

std::vector<Job> jobs(int64_t n_vocab, int n) {
  std::mt19937 rng(17);
  std::vector<Job> v;
  for (int i = 0; i < n; ++i) {
    Job j;
    const int len = 1 + static_cast<int>(rng() % 70);
    for (int k = 0; k < len; ++k) j.prompt.push_back(static_cast<int32_t>(rng() % n_vocab));
    j.max_tokens = 1 + static_cast<int>(rng() % 30);
    v.push_back(j);
  }
  return v;
}

// Every request's tokens and logits rows.
struct Out {
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, std::vector<std::vector<float>>> logits;
  int64_t preemptions = 0;
};

Out run(Model& m, EngineConfig cfg, const std::vector<Job>& js, std::vector<RequestId>* ids) {
  Out out;
  cfg.on_logits = [&](RequestId id, const float* l, int64_t n) { out.logits[id].emplace_back(l, l + n); };
  auto e = make_engine(m, cfg);
  for (const Job& j : js) {
    SamplingParams p;
    p.max_tokens = j.max_tokens;
    auto id = e->add_request(j.prompt, p, {}, false);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    ids->push_back(*id);
  }
  for (int steps = 0; e->has_work() && steps < 100000; ++steps) {
    auto ev = e->step();
    EXPECT_TRUE(ev.is_ok()) << ev.status().message();
    if (!ev.is_ok()) break;
    for (const auto& x : *ev)
      if (x.token) out.tokens[x.id].push_back(*x.token);
  }
  EXPECT_EQ(e->check(), "");
  EXPECT_EQ(e->counters().blocks_used, e->counters().blocks_cached) << "only the prefix cache holds blocks at the end";
  EXPECT_EQ(e->counters().state_slots_used, e->counters().state_checkpoints) << "a state slot leaked";
  out.preemptions = e->counters().preemptions;
  return out;
}

// Every matrix of the (Q8_0) file runs on the repacked integer path, in prefill and decode (tests/
// test_architectures.cc holds the attention-only architectures to it).
TEST_P(HybridEngine, EveryQuantizedMatmulRunsPacked) {
  auto m = hybrid_model(GetParam());
  std::vector<RequestId> ids;
  const int64_t before = unpacked_matmuls();
  run(*m, EngineConfig{}, jobs(m->config().n_vocab, 3), &ids);
  EXPECT_EQ(unpacked_matmuls(), before);
}

void expect_same_as_alone(Model& m, EngineConfig cfg, int64_t min_preemptions) {
  const auto js = jobs(m.config().n_vocab, 24);
  std::vector<RequestId> ids;
  Out together = run(m, cfg, js, &ids);
  for (size_t i = 0; i < js.size(); ++i) {
    GenerateOptions o;
    o.sampling.max_tokens = js[i].max_tokens;
    o.stop_at_eos = false;
    auto alone = generate(m, js[i].prompt, o);
    ASSERT_TRUE(alone.is_ok()) << alone.status().message();
    EXPECT_EQ(together.tokens[ids[i]], alone->token_ids) << "request " << i;
    EngineConfig one;
    one.n_blocks = 64;
    std::vector<RequestId> solo_id;
    Out solo = run(m, one, {js[i]}, &solo_id);
    const auto& a = solo.logits[solo_id[0]];
    const auto& b = together.logits[ids[i]];
    ASSERT_EQ(a.size(), b.size());
    for (size_t s = 0; s < a.size(); ++s)
      ASSERT_EQ(0, std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float))) << "request " << i << " step " << s;
  }
  EXPECT_GE(together.preemptions, min_preemptions);
}

TEST_P(HybridEngine, ConcurrentRequestsEqualRunningAloneBitwise) {
  auto m = hybrid_model(GetParam());
  EngineConfig cfg;
  cfg.n_blocks = 256;
  expect_same_as_alone(*m, cfg, 0);
}

TEST_P(HybridEngine, PreemptionChunksAndFewStateSlotsStillMatch) {
  auto m = hybrid_model(GetParam());
  EngineConfig cfg;
  cfg.n_blocks = 8;  // 128 token slots for 24 requests of up to 100 tokens: preemption
  cfg.prefill_chunk = 16;
  cfg.max_batch_tokens = 48;
  cfg.max_running = 3;  // three state slots for 24 requests
  expect_same_as_alone(*m, cfg, 1);
}

TEST_P(HybridEngine, ForkedSamplesContinueFromThePromptsState) {
  auto m = hybrid_model(GetParam());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 13 + 5) % static_cast<int32_t>(m->config().n_vocab));
  SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 10;
  p.max_tokens = 12;
  EngineConfig cfg;
  cfg.n_blocks = 64;
  auto e = make_engine(*m, cfg);
  auto id = e->add_request(prompt, p, {}, false, 3);
  ASSERT_TRUE(id.is_ok());
  std::map<RequestId, std::vector<int32_t>> out;
  while (e->has_work()) {
    auto ev = e->step();
    ASSERT_TRUE(ev.is_ok()) << ev.status().message();
    for (const auto& x : *ev)
      if (x.token) out[x.id].push_back(*x.token);
  }
  ASSERT_EQ(out.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    SamplingParams q = p;
    q.seed = p.seed + k;
    auto solo = make_engine(*m, cfg);
    auto sid = solo->add_request(prompt, q, {}, false);
    ASSERT_TRUE(sid.is_ok());
    std::vector<int32_t> got;
    while (solo->has_work()) {
      auto ev = solo->step();
      ASSERT_TRUE(ev.is_ok());
      for (const auto& x : *ev)
        if (x.token) got.push_back(*x.token);
    }
    EXPECT_EQ(out[*id + k], got) << "sample " << k;
  }
}

// The prefix cache on a hybrid model: a cached prefix is taken only up to a state checkpoint (the prompt's last
// block boundary or the latest one a finished request passed), and nothing changes: 200 requests whose prompts
// share beginnings that end at random positions, served with the cache off and then on (another order, fewer
// running sequences, shorter chunks, a small pool: evictions and preemptions), give the same ids and logits bit
// for bit; every slot not held by a sequence is a checkpoint in the tree at the end (none leaked).
TEST_P(HybridEngine, PrefixCacheWithStateCheckpointsNeverChangesTokensOrLogits) {
  auto m = hybrid_model(GetParam());
  const int V = static_cast<int>(m->config().n_vocab);
  std::mt19937 rng(404);
  std::vector<std::vector<int32_t>> shared;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> s(20 + rng() % 100);
    for (auto& x : s) x = static_cast<int32_t>(rng() % V);
    shared.push_back(s);
  }
  struct J {
    std::vector<int32_t> prompt;
    SamplingParams p;
  };
  std::vector<J> js;
  for (int i = 0; i < 200; ++i) {
    J j;
    const auto& s = shared[rng() % shared.size()];
    j.prompt.assign(s.begin(), s.begin() + 1 + rng() % s.size());
    const int tail = static_cast<int>(rng() % 20);
    for (int k = 0; k < tail; ++k) j.prompt.push_back(static_cast<int32_t>(rng() % V));
    j.p.max_tokens = 1 + static_cast<int>(rng() % 12);
    if (i % 3 == 0) {
      j.p.temperature = 0.8f;
      j.p.seed = 1000 + i;
    }
    js.push_back(j);
  }
  struct O {
    std::vector<int32_t> ids;
    std::vector<float> logits;
  };
  auto serve = [&](bool cache, int max_running, int chunk, int n_blocks, uint32_t order_seed, EngineCounters* counters,
                   int every = 0) {
    EngineConfig cfg;
    cfg.state_checkpoint_every = every;
    cfg.n_blocks = n_blocks;
    cfg.prefix_cache = cache;
    cfg.max_running = max_running;
    cfg.prefill_chunk = chunk;
    cfg.max_batch_tokens = 3 * chunk;
    std::map<RequestId, size_t> job_of;
    std::vector<O> out(js.size());
    cfg.on_logits = [&](RequestId id, const float* row, int64_t n) {
      auto& l = out[job_of.at(id)].logits;
      l.insert(l.end(), row, row + n);
    };
    auto e = make_engine(*m, cfg);
    std::vector<size_t> order(js.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(order_seed));
    size_t next = 0;
    for (int steps = 0; (next < order.size() || e->has_work()) && steps < 200000; ++steps) {
      for (int k = static_cast<int>(rng() % 8); k > 0 && next < order.size(); --k, ++next) {
        auto id = e->add_request(js[order[next]].prompt, js[order[next]].p, {}, false);
        EXPECT_TRUE(id.is_ok()) << id.status().message();
        job_of[*id] = order[next];
      }
      auto ev = e->step();
      EXPECT_TRUE(ev.is_ok()) << ev.status().message();
      if (!ev.is_ok()) break;
      for (const auto& x : *ev)
        if (x.token) out[job_of.at(x.id)].ids.push_back(*x.token);
      EXPECT_EQ(e->check(), "") << "step " << steps;
    }
    *counters = e->counters();
    return out;
  };
  EngineCounters off_c;
  const auto off = serve(false, 256, 32, 64, 1, &off_c);
  EXPECT_EQ(off_c.prefix_hit_tokens, 0);
  // Checkpoints at the prompt's end, the latest boundary and branch points; then also every 32 prompt tokens
  // (more of them than the store holds: dropped LRU).
  int64_t hits[2] = {};
  for (int every : {0, 32}) {
    EngineCounters on_c;
    const auto on = serve(true, 6, 20, 22, 2, &on_c, every);
    hits[every > 0] = on_c.prefix_hit_tokens;
    EXPECT_GT(on_c.prefix_hit_tokens, 500) << "the cache must resume from checkpoints for this test to mean anything";
    EXPECT_GT(on_c.preemptions, 0);
    EXPECT_GT(on_c.state_checkpoints, 0);
    EXPECT_EQ(on_c.state_slots_used, on_c.state_checkpoints) << "a state slot leaked";
    for (size_t i = 0; i < js.size(); ++i) {
      ASSERT_EQ(on[i].ids, off[i].ids) << "request " << i << " every " << every;
      ASSERT_EQ(on[i].logits.size(), off[i].logits.size());
      ASSERT_EQ(0, std::memcmp(on[i].logits.data(), off[i].logits.data(), on[i].logits.size() * sizeof(float)))
          << "request " << i << ": logits differ with the prefix cache, every " << every;
    }
  }
  EXPECT_NE(hits[0], hits[1]) << "checkpoints every 32 tokens changed nothing";
}

// Users who share only a long system prompt: the first request's checkpoints (prompt end, latest) do not lie on
// the others' paths; the second request branches off the cached path there and leaves a checkpoint at the branch
// point, so from the third on every request resumes after the system prompt.
TEST_P(HybridEngine, BranchPointCheckpointServesPromptsSharingOnlyASystemPrompt) {
  auto m = hybrid_model(GetParam());
  const int V = static_cast<int>(m->config().n_vocab);
  std::mt19937 rng(77);
  std::vector<int32_t> system(150);
  for (auto& x : system) x = static_cast<int32_t>(rng() % V);
  EngineConfig cfg;
  cfg.n_blocks = 128;
  cfg.state_checkpoint_every = 0;
  auto e = make_engine(*m, cfg);
  std::vector<int> cached;
  for (int u = 0; u < 4; ++u) {
    std::vector<int32_t> prompt = system;
    for (int k = 0; k < 40; ++k) prompt.push_back(static_cast<int32_t>(rng() % V));
    SamplingParams p;
    p.max_tokens = 3;
    auto id = e->add_request(prompt, p, {}, false);
    ASSERT_TRUE(id.is_ok());
    int got = -1;
    while (e->has_work()) {
      auto ev = e->step();
      ASSERT_TRUE(ev.is_ok());
      for (const auto& x : *ev) got = x.cached_tokens;
    }
    cached.push_back(got);
  }
  EXPECT_EQ(cached[0], 0);
  EXPECT_EQ(cached[1], 0) << "no checkpoint lies on the second prompt's path yet";
  EXPECT_EQ(cached[2], 144) << "the branch point: the system prompt's whole blocks";
  EXPECT_EQ(cached[3], 144);
}

// Agents: several conversations at once, each turn resending the whole conversation (prompt, answer, a new
// message), on a store with fewer checkpoint slots than every request's pending snapshots plus every
// conversation's resume point. Each turn must still resume past the previous turn's prompt (from the latest
// block boundary its answer crossed), and give the tokens a cache-off engine gives.
TEST_P(HybridEngine, ConcurrentConversationsEachResumeFromTheirOwnLatestCheckpoint) {
  auto m = hybrid_model(GetParam());
  const int V = static_cast<int>(m->config().n_vocab);
  constexpr int kUsers = 4, kTurns = 5;
  // Per turn and user: the cached tokens reported, and the conversation's length computed by the turn's end
  // (its prompt and answer but the answer's last token).
  std::vector<std::vector<int>> cached, computed;
  auto converse = [&](bool cache) {
    EngineConfig cfg;
    cfg.n_blocks = 512;
    cfg.prefix_cache = cache;
    cfg.state_checkpoint_every = 64;
    cfg.max_running = kUsers;
    // 10 checkpoint slots: the 4 conversations' resume points (held while their next turns run) leave 6
    // for 4 running requests' prompt-end and latest-boundary snapshots.
    cfg.kv_memory_bytes = 4 * 10 * m->config().state_bytes_per_seq();
    auto e = make_engine(*m, cfg);
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> conv(kUsers), out(kUsers);
    for (int turn = 0; turn < kTurns; ++turn) {
      std::map<RequestId, int> user;
      for (int u = 0; u < kUsers; ++u) {
        const int add = 30 + static_cast<int>(rng() % 40);
        for (int k = 0; k < add; ++k) conv[u].push_back(static_cast<int32_t>(rng() % V));
        SamplingParams p;
        p.max_tokens = 40;
        auto id = e->add_request(conv[u], p, {}, false);
        EXPECT_TRUE(id.is_ok());
        if (!id.is_ok()) return out;
        user[*id] = u;
      }
      std::vector<int> got(kUsers, -1);
      while (e->has_work()) {
        auto ev = e->step();
        EXPECT_TRUE(ev.is_ok());
        if (!ev.is_ok()) return out;
        for (const auto& x : *ev) {
          const int u = user.at(x.id);
          got[static_cast<size_t>(u)] = x.cached_tokens;
          if (x.token) {
            conv[u].push_back(*x.token);
            out[u].push_back(*x.token);
          }
        }
      }
      if (cache) {
        cached.push_back(got);
        std::vector<int> len;
        for (const auto& c : conv) len.push_back(static_cast<int>(c.size()) - 1);
        computed.push_back(len);
      }
    }
    EXPECT_EQ(e->check(), "");
    EXPECT_EQ(e->counters().state_slots_used, e->counters().state_checkpoints) << "a state slot leaked";
    return out;
  };
  const auto on = converse(true);
  const auto off = converse(false);
  EXPECT_EQ(on, off) << "the prefix cache changed a conversation";
  ASSERT_EQ(cached.size(), static_cast<size_t>(kTurns));
  for (size_t turn = 1; turn < kTurns; ++turn)
    for (size_t u = 0; u < kUsers; ++u)
      EXPECT_EQ(cached[turn][u], computed[turn - 1][u] / 16 * 16)
          << "turn " << turn << " user " << u << ": not resumed from the previous turn's latest block boundary";
}

}  // namespace
}  // namespace cachet
