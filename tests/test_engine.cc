// Continuous batching: 32 concurrent requests give exactly the tokens each gives alone, also with a pool so
// small that requests are preempted and with 16-token prefill chunks; aborts and impossible requests.
#include <cstring>
#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

// Engine::create, failing the program on an error (these configurations are valid by construction).
std::unique_ptr<Engine> make_engine(Model& m, EngineConfig cfg) {
  auto e = Engine::create(m, std::move(cfg));
  if (!e.is_ok()) {
    std::fprintf(stderr, "Engine::create: %s\n", e.status().message().c_str());
    std::abort();
  }
  return std::move(*e);
}


// n_embd 64: head size 16; 128: 32, which the block KV types need.
std::unique_ptr<Model> small_model(int64_t n_embd = 64) {
  SyntheticSpec s;
  s.type = DType::kQ4_0;
  s.embd_type = DType::kQ8_0;
  s.n_embd = n_embd;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_layer = 2;
  const std::string path = testing::temp_path("engine_" + std::to_string(n_embd) + ".gguf");
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  auto m = load_model(path, {2});
  EXPECT_TRUE(m.is_ok());
  return std::move(m).value();
}

struct Job {
  std::vector<int32_t> prompt;
  int max_tokens;
};

std::vector<Job> jobs(const Model& m, int n) {
  std::mt19937 rng(11);
  std::vector<Job> v;
  for (int i = 0; i < n; ++i) {
    Job j;
    const int len = 1 + static_cast<int>(rng() % 70);
    for (int k = 0; k < len; ++k) j.prompt.push_back(static_cast<int32_t>(rng() % m.config().n_vocab));
    j.max_tokens = 1 + static_cast<int>(rng() % 40);
    v.push_back(j);
  }
  return v;
}

std::map<RequestId, std::vector<int32_t>> run_engine(Engine& e, const std::vector<Job>& js, std::vector<RequestId>* ids) {
  std::map<RequestId, std::vector<int32_t>> out;
  for (const Job& j : js) {
    SamplingParams p;
    p.max_tokens = j.max_tokens;
    auto id = e.add_request(j.prompt, p, {}, /*stop_at_eos=*/false);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    ids->push_back(*id);
  }
  int steps = 0;
  while (e.has_work()) {
    auto ev = e.step();
    EXPECT_TRUE(ev.is_ok()) << ev.status().message();
    for (const auto& x : *ev)
      if (x.token) out[x.id].push_back(*x.token);
    if (++steps > 100000) break;
  }
  return out;
}

void expect_same_as_alone(Model& m, EngineConfig cfg, int64_t* preemptions) {
  *preemptions = 0;
  for (bool cache : {false, true}) {
  cfg.prefix_cache = cache;
  auto js = jobs(m, 32);
  auto e_owner = make_engine(m, cfg);
  Engine& e = *e_owner;
  std::vector<RequestId> ids;
  auto got = run_engine(e, js, &ids);
  for (size_t i = 0; i < js.size(); ++i) {
    GenerateOptions o;
    o.sampling.max_tokens = js[i].max_tokens;
    o.stop_at_eos = false;
    auto alone = generate(m, js[i].prompt, o);
    ASSERT_TRUE(alone.is_ok());
    EXPECT_EQ(got[ids[i]], alone->token_ids) << "request " << i;
  }
  const EngineCounters c = e.counters();
  EXPECT_EQ(c.blocks_used, c.blocks_cached) << "every block not kept by the prefix cache is free at the end";
  if (!cache) EXPECT_EQ(c.blocks_cached, 0);
  EXPECT_EQ(e.check(), "");
  *preemptions += c.preemptions;
  }
}

TEST(Engine, ConcurrentRequestsEqualRunningAlone) {
  auto m = small_model();
  int64_t preempted = 0;
  EngineConfig cfg;
  cfg.n_blocks = 512;
  expect_same_as_alone(*m, cfg, &preempted);
  EXPECT_EQ(preempted, 0);
}

TEST(Engine, TinyPoolPreemptsAndStillMatches) {
  auto m = small_model();
  int64_t preempted = 0;
  EngineConfig cfg;
  cfg.n_blocks = 12;  // 192 token slots for 32 requests of up to 110 tokens
  expect_same_as_alone(*m, cfg, &preempted);
  EXPECT_GT(preempted, 0);
}

TEST(Engine, ChunkedPrefillOf16Matches) {
  auto m = small_model();
  int64_t preempted = 0;
  EngineConfig cfg;
  cfg.n_blocks = 512;
  cfg.prefill_chunk = 16;
  cfg.max_batch_tokens = 64;
  expect_same_as_alone(*m, cfg, &preempted);
}

TEST(Engine, AbortFreesBlocksAndImpossibleRequestsAreRejected) {
  auto m = small_model();
  EngineConfig cfg;
  cfg.n_blocks = 8;
  auto e_owner = make_engine(*m, cfg);
  Engine& e = *e_owner;
  SamplingParams p;
  p.max_tokens = 200;  // 201 tokens > 8 blocks x 16
  auto bad = e.add_request({1, 2}, p);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("can never fit"), std::string::npos);
  p.max_tokens = 50;
  auto id = e.add_request({1, 2, 3}, p, {}, false);
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(e.step().is_ok());
  EXPECT_GT(e.counters().blocks_used, 0);
  e.abort(*id);
  auto ev = e.step();
  ASSERT_TRUE(ev.is_ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].finish, RequestFinish::kAborted);
  EXPECT_EQ(e.counters().blocks_used, 0);
  EXPECT_FALSE(e.has_work());
}

// Waste: the share of allocated KV slots holding no token, paged (16-token blocks) against allocating each
// request its maximum length up front, over 100 requests with random lengths (time-averaged).
TEST(KvWaste, PagingWastesUnderFourPercent) {
  std::mt19937 rng(3);
  constexpr int kBs = 16;
  KvCacheManager mgr(1 << 16, kBs);
  struct R {
    int len, max_len, target;
  };
  std::map<SeqId, R> live;
  for (SeqId s = 0; s < 100; ++s) {
    const int prompt = 20 + static_cast<int>(rng() % 500), max_new = 1024;
    const int out = 1 + static_cast<int>(rng() % max_new);
    EXPECT_TRUE(mgr.append(s, prompt));
    live[s] = {prompt, prompt + max_new, prompt + out};
  }
  double paged_waste = 0, contiguous_waste = 0;
  int samples = 0;
  while (!live.empty()) {
    int64_t tokens = 0, allocated = 0, reserved = 0;
    for (auto& [s, r] : live) {
      tokens += r.len;
      allocated += static_cast<int64_t>(mgr.block_table(s).size()) * kBs;
      reserved += r.max_len;
    }
    paged_waste += 1.0 - static_cast<double>(tokens) / allocated;
    contiguous_waste += 1.0 - static_cast<double>(tokens) / reserved;
    ++samples;
    for (auto it = live.begin(); it != live.end();) {
      EXPECT_TRUE(mgr.append(it->first, 1));
      if (++it->second.len >= it->second.target) {
        mgr.free(it->first);
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  paged_waste /= samples;
  contiguous_waste /= samples;
  std::printf("KV slots holding no token: paged %.2f%%, max-length contiguous %.2f%%\n", 100 * paged_waste,
              100 * contiguous_waste);
  EXPECT_LT(paged_waste, 0.04);
  EXPECT_GT(contiguous_waste, 0.2);
}

}  // namespace
}  // namespace cachet

namespace cachet {
namespace {

// Batch invariance: the logits a request samples from are bit-identical whatever else shares its batch.
TEST(Engine, LogitsAreBitwiseIdenticalWhateverSharesTheBatch) {
  auto m = small_model();
  auto js = jobs(*m, 32);
  std::map<RequestId, std::vector<std::vector<float>>> together, alone;
  EngineConfig cfg;
  cfg.n_blocks = 512;
  cfg.prefill_chunk = 24;
  cfg.on_logits = [&](RequestId id, const float* l, int64_t n) { together[id].emplace_back(l, l + n); };
  auto e_owner = make_engine(*m, cfg);
  Engine& e = *e_owner;
  std::vector<RequestId> ids;
  run_engine(e, js, &ids);
  for (size_t i = 0; i < js.size(); ++i) {
    EngineConfig one;
    one.n_blocks = 64;
    std::vector<std::vector<float>> rows;
    one.on_logits = [&](RequestId, const float* l, int64_t n) { rows.emplace_back(l, l + n); };
    auto solo_owner = make_engine(*m, one);
    Engine& solo = *solo_owner;
    std::vector<RequestId> solo_ids;
    run_engine(solo, {js[i]}, &solo_ids);
    ASSERT_EQ(rows.size(), together[ids[i]].size());
    for (size_t s = 0; s < rows.size(); ++s)
      ASSERT_EQ(0, std::memcmp(rows[s].data(), together[ids[i]][s].data(), rows[s].size() * sizeof(float)))
          << "request " << i << " step " << s;
  }
}

// n > 1: one prefill, forked samples sharing its blocks, each equal to a separate request with its seed.
TEST(Engine, NSamplesForkFromOnePrefill) {
  auto m = small_model();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 13 + 5) % static_cast<int32_t>(m->config().n_vocab));
  SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 10;
  p.max_tokens = 12;
  EngineConfig cfg;
  cfg.n_blocks = 64;
  auto e_owner = make_engine(*m, cfg);
  Engine& e = *e_owner;
  auto id = e.add_request(prompt, p, {}, false, 4);
  ASSERT_TRUE(id.is_ok());
  std::map<RequestId, std::vector<int32_t>> out;
  bool checked_sharing = false;
  while (e.has_work()) {
    auto ev = e.step();
    ASSERT_TRUE(ev.is_ok());
    for (const auto& x : *ev)
      if (x.token) out[x.id].push_back(*x.token);
    if (!checked_sharing && out.size() == 4) {
      // 40 prompt tokens = 3 blocks, shared; each sample owns at most one copied or new block so far.
      EXPECT_LE(e.counters().blocks_used, 3 + 4);
      checked_sharing = true;
    }
  }
  ASSERT_EQ(out.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    SamplingParams q = p;
    q.seed = p.seed + k;
    auto solo_owner = make_engine(*m, cfg);
    Engine& solo = *solo_owner;
    auto sid = solo.add_request(prompt, q, {}, false);
    std::vector<int32_t> got;
    while (solo.has_work()) {
      auto ev = solo.step();  // keep the Result alive while iterating its events
      ASSERT_TRUE(ev.is_ok());
      for (const auto& x : *ev)
        if (x.token) got.push_back(*x.token);
    }
    EXPECT_EQ(out[*id + k], got) << "sample " << k;
  }
}

// Prefix caching never changes a result: 200 requests whose prompts share beginnings that end at random
// positions (not block or chunk aligned), served with the cache off, then on in another arrival order, at
// another concurrency and with requests arriving while others run, give the same token ids and the same logits,
// bitwise. A small pool makes the cache evict and the scheduler preempt along the way.
TEST(Engine, PrefixCacheNeverChangesTokensOrLogits) {
  auto m = small_model();
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
    j.prompt.assign(s.begin(), s.begin() + 1 + rng() % s.size());  // cut anywhere
    const int tail = static_cast<int>(rng() % 20);
    for (int k = 0; k < tail; ++k) j.prompt.push_back(static_cast<int32_t>(rng() % V));
    j.p.max_tokens = 1 + static_cast<int>(rng() % 12);
    if (i % 3 == 0) {  // some sampled, seeded
      j.p.temperature = 0.8f;
      j.p.seed = 1000 + i;
    }
    js.push_back(j);
  }
  struct Out {
    std::vector<int32_t> ids;
    std::vector<float> logits;
  };
  auto serve = [&](bool cache, int max_running, int chunk, uint32_t order_seed, int64_t* hits, int64_t* preempted) {
    EngineConfig cfg;
    cfg.n_blocks = 40;  // 640 token slots: evictions and preemptions happen
    cfg.prefix_cache = cache;
    cfg.max_running = max_running;
    cfg.prefill_chunk = chunk;  // 20: chunks, and so preempted prefixes, end inside blocks
    cfg.max_batch_tokens = 3 * chunk;
    std::map<RequestId, size_t> job_of;
    std::vector<Out> out(js.size());
    cfg.on_logits = [&](RequestId id, const float* row, int64_t n) {
      auto& l = out[job_of.at(id)].logits;
      l.insert(l.end(), row, row + n);
    };
    auto e_owner = make_engine(*m, cfg);
    Engine& e = *e_owner;
    std::vector<size_t> order(js.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(order_seed));
    size_t next = 0;
    int steps = 0;
    while (next < order.size() || e.has_work()) {
      // Arrivals in waves of 0..7 between steps.
      for (int k = static_cast<int>(rng() % 8); k > 0 && next < order.size(); --k, ++next) {
        const J& j = js[order[next]];
        auto id = e.add_request(j.prompt, j.p, {}, /*stop_at_eos=*/false);
        EXPECT_TRUE(id.is_ok()) << id.status().message();
        job_of[*id] = order[next];
      }
      auto ev = e.step();
      EXPECT_TRUE(ev.is_ok());
      for (const auto& x : *ev)
        if (x.token) out[job_of.at(x.id)].ids.push_back(*x.token);
      EXPECT_EQ(e.check(), "") << "step " << steps;
      if (++steps > 200000) break;
    }
    *hits = e.counters().prefix_hit_tokens;
    *preempted = e.counters().preemptions;
    return out;
  };
  int64_t hits_off = 0, hits_on = 0, pre_off = 0, pre_on = 0;
  const auto off = serve(false, 256, 32, 1, &hits_off, &pre_off);
  const auto on = serve(true, 24, 20, 2, &hits_on, &pre_on);
  EXPECT_EQ(hits_off, 0);
  EXPECT_GT(pre_on, 0) << "preemptions with the cache on (their partial blocks must not enter the tree)";
  EXPECT_GT(hits_on, 2000) << "the cache must actually hit for this test to mean anything";
  for (size_t i = 0; i < js.size(); ++i) {
    ASSERT_EQ(on[i].ids, off[i].ids) << "request " << i;
    ASSERT_EQ(on[i].logits.size(), off[i].logits.size());
    ASSERT_EQ(0, std::memcmp(on[i].logits.data(), off[i].logits.data(), on[i].logits.size() * sizeof(float)))
        << "request " << i << ": logits differ with the prefix cache";
  }
}

// Every KV type keeps the engine's bitwise guarantees: a request's logits are the same bits whatever shares
// its batch, with the prefix cache on or off, and greedy speculation (prompt lookup, every step drafting) gives
// the tokens plain decoding gives. (Quantization is per row at store time, the same bits wherever it runs.)
TEST(Engine, EveryKvTypeKeepsTheBitwiseGuarantees) {
  auto loaded = small_model(128);  // head size 32: the block types fit
  Model& m = *loaded;
  // Prompts that share prefixes, so the prefix cache has something to reuse.
  auto js = jobs(m, 24);
  for (size_t i = 1; i < js.size(); i += 2) {
    std::vector<int32_t> p = js[i - 1].prompt;
    p.insert(p.end(), js[i].prompt.begin(), js[i].prompt.end());
    js[i].prompt = p;
  }
  for (KvTypes kv : {KvTypes(KvType::kQ8_0), KvTypes(KvType::kQ4_0), KvTypes(KvType::kQ4R), KvTypes(KvType::kBF16),
                     KvTypes(KvType::kQ8_0, KvType::kQ4R)}) {
    const std::string name = std::string(kv_type_name(kv.k)) + "/" + kv_type_name(kv.v);
    auto serve = [&](bool prefix_cache, SpecMode mode, const std::vector<Job>& which,
                     std::map<RequestId, std::vector<std::vector<float>>>* logits) {
      EngineConfig cfg;
      cfg.kv_type = kv;
      cfg.n_blocks = 256;
      cfg.prefill_chunk = 24;
      cfg.prefix_cache = prefix_cache;
      cfg.spec = mode;
      cfg.spec_adaptive = false;  // every step drafts
      cfg.draft_max = 4;
      if (logits) cfg.on_logits = [logits](RequestId id, const float* l, int64_t n) { (*logits)[id].emplace_back(l, l + n); };
      auto e_owner = make_engine(m, cfg);
      Engine& e = *e_owner;
      // Two waves: the second half's prompts extend the first half's, whose blocks are cached by then.
      std::vector<Job> first, second;
      for (size_t i = 0; i < which.size(); ++i) (i % 2 == 0 || which.size() == 1 ? first : second).push_back(which[i]);
      std::vector<RequestId> first_ids, second_ids;
      auto toks = run_engine(e, first, &first_ids);
      for (auto& [id, t] : run_engine(e, second, &second_ids)) toks[id] = t;
      std::vector<RequestId> ids;
      for (size_t i = 0, a = 0, b = 0; i < which.size(); ++i)
        ids.push_back(i % 2 == 0 || which.size() == 1 ? first_ids[a++] : second_ids[b++]);
      EXPECT_EQ(e.check(), "") << name;
      // Not vacuous: the cache is hit and lookup drafts (and some drafts are accepted).
      if (prefix_cache && which.size() > 1) EXPECT_GT(e.counters().prefix_hit_tokens, 0) << name;
      if (mode == SpecMode::kLookup) EXPECT_GT(e.counters().spec_accepted_tokens, 0) << name;
      std::vector<std::vector<int32_t>> out;
      for (RequestId id : ids) out.push_back(toks[id]);
      return std::make_pair(out, ids);
    };
    std::map<RequestId, std::vector<std::vector<float>>> together, cached;
    auto [batch_tokens, batch_ids] = serve(false, SpecMode::kOff, js, &together);
    auto [cache_tokens, cache_ids] = serve(true, SpecMode::kOff, js, &cached);
    auto [spec_tokens, spec_ids] = serve(true, SpecMode::kLookup, js, nullptr);
    EXPECT_EQ(cache_tokens, batch_tokens) << name << ": the prefix cache changed tokens";
    EXPECT_EQ(spec_tokens, batch_tokens) << name << ": speculation changed greedy tokens";
    for (size_t i = 0; i < js.size(); ++i) {
      std::map<RequestId, std::vector<std::vector<float>>> solo;
      auto [solo_tokens, solo_ids] = serve(false, SpecMode::kOff, {js[i]}, &solo);
      const auto& a = solo[solo_ids[0]];
      const auto& b = together[batch_ids[i]];
      const auto& c = cached[cache_ids[i]];
      ASSERT_EQ(a.size(), b.size()) << name;
      ASSERT_EQ(a.size(), c.size()) << name;
      for (size_t st = 0; st < a.size(); ++st) {
        ASSERT_EQ(0, std::memcmp(a[st].data(), b[st].data(), a[st].size() * sizeof(float)))
            << name << " request " << i << " step " << st << ": batch changed the logits";
        ASSERT_EQ(0, std::memcmp(a[st].data(), c[st].data(), a[st].size() * sizeof(float)))
            << name << " request " << i << " step " << st << ": the prefix cache changed the logits";
      }
    }
  }
}

}  // namespace
}  // namespace cachet

namespace cachet {
namespace {

// Embedding requests run in the same steps as generation: each pooled vector is bitwise the one its input gets
// alone (chunked, with a preempting pool, with the prefix cache), and the generated tokens are unchanged.
TEST(Engine, EmbeddingsBatchWithGenerationAndEqualAloneBitwise) {
  auto m = small_model();
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> inputs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> in(1 + rng() % 70);
    for (int32_t& t : in) t = static_cast<int32_t>(rng() % m->config().n_vocab);
    inputs.push_back(in);
  }
  inputs.push_back(inputs[0]);  // the same input again: a prefix-cache hit for last pooling
  auto drain = [](Engine& e, std::map<RequestId, std::vector<float>>* vecs,
                  std::map<RequestId, std::vector<int32_t>>* toks) {
    for (int steps = 0; e.has_work() && steps < 100000; ++steps) {
      auto ev = e.step();
      ASSERT_TRUE(ev.is_ok()) << ev.status().message();
      for (const auto& x : *ev) {
        if (x.token) (*toks)[x.id].push_back(*x.token);
        if (!x.embedding.empty()) {
          EXPECT_EQ(x.finish, RequestFinish::kStop);
          (*vecs)[x.id] = x.embedding;
        }
      }
    }
  };
  for (Pooling pooling : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    std::vector<std::vector<float>> alone;
    for (const auto& in : inputs) {
      EngineConfig cfg;
      cfg.n_blocks = 64;
      cfg.prefix_cache = false;
      auto e = make_engine(*m, cfg);
      auto id = e->add_embedding(in, pooling);
      ASSERT_TRUE(id.is_ok());
      std::map<RequestId, std::vector<float>> vecs;
      std::map<RequestId, std::vector<int32_t>> toks;
      drain(*e, &vecs, &toks);
      ASSERT_EQ(vecs.count(*id), 1u);
      ASSERT_EQ(static_cast<int64_t>(vecs[*id].size()), m->config().n_embd);
      alone.push_back(vecs[*id]);
    }
    for (int n_blocks : {512, 12}) {  // 12: preemptions, embeddings among the preempted
      EngineConfig cfg;
      cfg.n_blocks = n_blocks;
      cfg.prefill_chunk = 16;
      cfg.max_batch_tokens = 64;
      auto e = make_engine(*m, cfg);
      const auto js = jobs(*m, 8);
      std::vector<RequestId> gen_ids, emb_ids;
      for (size_t i = 0; i < js.size(); ++i) {
        SamplingParams p;
        p.max_tokens = js[i].max_tokens;
        auto id = e->add_request(js[i].prompt, p, {}, /*stop_at_eos=*/false);
        ASSERT_TRUE(id.is_ok());
        gen_ids.push_back(*id);
        if (i < inputs.size() - 1) {
          auto eid = e->add_embedding(inputs[i], pooling);
          ASSERT_TRUE(eid.is_ok());
          emb_ids.push_back(*eid);
        }
      }
      std::map<RequestId, std::vector<float>> vecs;
      std::map<RequestId, std::vector<int32_t>> toks;
      drain(*e, &vecs, &toks);
      auto again = e->add_embedding(inputs.back(), pooling);  // after inputs[0] finished: cached for kLast
      ASSERT_TRUE(again.is_ok());
      emb_ids.push_back(*again);
      drain(*e, &vecs, &toks);
      for (size_t i = 0; i < emb_ids.size(); ++i)
        EXPECT_EQ(vecs[emb_ids[i]], alone[i]) << pooling_name(pooling) << " input " << i << " pool " << n_blocks;
      for (size_t i = 0; i < js.size(); ++i) {
        GenerateOptions o;
        o.sampling.max_tokens = js[i].max_tokens;
        o.stop_at_eos = false;
        auto ref = generate(*m, js[i].prompt, o);
        ASSERT_TRUE(ref.is_ok());
        EXPECT_EQ(toks[gen_ids[i]], ref->token_ids) << "request " << i;
      }
      EXPECT_EQ(e->check(), "");
      if (n_blocks == 12) EXPECT_GT(e->counters().preemptions, 0);
      const EngineCounters c = e->counters();
      EXPECT_EQ(c.blocks_used, c.blocks_cached);
    }
  }
  EngineConfig cfg;
  cfg.n_blocks = 2;
  auto e = make_engine(*m, cfg);
  EXPECT_FALSE(e->add_embedding({}, Pooling::kMean).is_ok());
  EXPECT_FALSE(e->add_embedding(std::vector<int32_t>(100, 1), Pooling::kMean).is_ok());  // never fits
  EXPECT_FALSE(e->add_embedding({static_cast<int32_t>(m->config().n_vocab)}, Pooling::kMean).is_ok());
}

// An encoder (bidirectional) beside nothing else: each input runs whole whatever the chunk size and budget, and
// gets, batched with others of mixed lengths, the vector (and a reranker's score) it gets alone, bitwise. It
// does not generate text.
TEST(Engine, EncoderInputsRunWholeAndEqualAloneBitwise) {
  SyntheticSpec s;
  s.arch = "bert";
  s.type = DType::kQ8_0;
  s.n_vocab = 300;
  s.n_head = s.n_head_kv = 4;
  s.n_ctx = 256;
  s.pooling_type = 4;
  s.n_cls_out = 1;
  const std::string path = testing::temp_path("engine_bert.gguf");
  ASSERT_TRUE(write_synthetic_model(s, path).is_ok());
  auto loaded = load_model(path, {2});
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  Model& m = **loaded;
  EXPECT_FALSE(m.config().causal);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> inputs;
  for (int len : {5, 40, 120, 1, 77}) {
    std::vector<int32_t> in(len);
    for (int32_t& t : in) t = static_cast<int32_t>(rng() % 300);
    inputs.push_back(in);
  }
  auto run = [&](const std::vector<std::vector<int32_t>>& ins, Pooling p, EngineConfig cfg) {
    auto e = make_engine(m, cfg);
    std::vector<RequestId> ids;
    for (const auto& in : ins) {
      auto id = e->add_embedding(in, p);
      EXPECT_TRUE(id.is_ok()) << id.status().message();
      ids.push_back(*id);
    }
    std::map<RequestId, std::vector<float>> vecs;
    for (int steps = 0; e->has_work() && steps < 1000; ++steps) {
      auto ev = e->step();
      EXPECT_TRUE(ev.is_ok());
      for (const auto& x : *ev) vecs[x.id] = x.embedding;
    }
    EXPECT_EQ(e->check(), "");
    std::vector<std::vector<float>> out;
    for (RequestId id : ids) out.push_back(vecs[id]);
    return out;
  };
  for (Pooling p : {Pooling::kMean, Pooling::kCls, Pooling::kRank}) {
    EngineConfig big;
    big.n_blocks = 64;
    std::vector<std::vector<float>> alone;
    for (const auto& in : inputs) alone.push_back(run({in}, p, big)[0]);
    EngineConfig small = big;
    small.prefill_chunk = 16;  // smaller than most inputs: they still run whole
    small.max_batch_tokens = 32;
    const auto batched = run(inputs, p, small);
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(batched[i].size(), p == Pooling::kRank ? 1u : static_cast<size_t>(m.config().n_embd));
      EXPECT_EQ(batched[i], alone[i]) << pooling_name(p) << " input " << i;
    }
  }
  EngineConfig cfg;
  cfg.n_blocks = 64;
  auto e = make_engine(m, cfg);
  SamplingParams sp;
  sp.max_tokens = 4;
  EXPECT_FALSE(e->add_request({2, 10, 11}, sp).is_ok());
  EXPECT_FALSE(e->add_embedding(std::vector<int32_t>(257, 10), Pooling::kMean).is_ok());  // past its positions
}

}  // namespace
}  // namespace cachet
