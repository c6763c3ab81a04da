// Speculation on a hybrid model (Qwen3.5-shaped synthetic file: gated delta nets and attention). A rejected
// draft token must take the recurrent state back to the last accepted token exactly (the engine keeps the state
// after each computed draft position and adopts the right one; a hybrid draft model does the same with its own
// states). So: greedy ids and every logits row bitwise the same with and without speculation (prompt lookup, a
// hybrid draft that always agrees, one that mostly does not), with the prefix cache on and a pool small enough
// to preempt; after every step the state of each request equals the state a run without speculation has at the
// same position; no slot or block leaks.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "speculative/draft_model.h"
#include "speculative/mtp.h"
#include "tests/hybrid_fixture.h"
#include "tests/test_util.h"

namespace cachet {
namespace {

std::unique_ptr<Model> hybrid(uint64_t seed, const std::string& name, const std::string& arch = "qwen35") {
  return testing::hybrid_test_model(seed, arch == "qwen35" ? name : arch + "_" + name, false, false, arch);
}

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams p;
  SpecMode mode;
};

// Prompts that repeat a short phrase (prompt lookup finds continuations), of random lengths.
std::vector<Job> jobs(int n, int V, uint32_t seed, SpecMode mode) {
  std::mt19937 rng(seed);
  std::vector<Job> v;
  for (int i = 0; i < n; ++i) {
    Job j;
    std::vector<int32_t> phrase(3 + rng() % 6);
    for (auto& x : phrase) x = static_cast<int32_t>(rng() % V);
    const int reps = 1 + static_cast<int>(rng() % 6);
    for (int r = 0; r < reps; ++r) j.prompt.insert(j.prompt.end(), phrase.begin(), phrase.end());
    j.prompt.push_back(static_cast<int32_t>(rng() % V));
    j.p.max_tokens = 10 + static_cast<int>(rng() % 40);
    j.mode = mode;
    v.push_back(j);
  }
  return v;
}

struct Served {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> logits;
  // Per request: its state after each number of computed tokens seen at a step boundary.
  std::vector<std::map<int, std::vector<uint8_t>>> states;
  EngineCounters counters;
};

// Jobs from index `second` on are added once the first ones have finished (a conversation's next turns).
Served serve(Model& target, Model* draft, const std::vector<Job>& js, bool spec, int n_blocks, bool cache,
             size_t second = SIZE_MAX) {
  Served out;
  out.ids.resize(js.size());
  out.logits.resize(js.size());
  out.states.resize(js.size());
  std::map<RequestId, size_t> job_of;
  EngineConfig cfg;
  cfg.n_blocks = n_blocks;
  cfg.prefix_cache = cache;
  // A multi-token-prediction head proposes as the model's own; any other model is a draft model.
  (draft && draft->config().mtp_head ? cfg.mtp_model : cfg.draft_model) = draft;
  cfg.spec = spec ? js[0].mode : SpecMode::kOff;  // the engine's default: spare state slots for the snapshots
  cfg.draft_max = 5;
  cfg.spec_adaptive = false;
  cfg.max_running = 6;
  cfg.on_logits = [&](RequestId id, const float* row, int64_t n) {
    auto& l = out.logits[job_of.at(id)];
    l.insert(l.end(), row, row + n);
  };
  auto e = Engine::create(target, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return out;
  size_t added = 0;
  auto add = [&](size_t end) {
    for (; added < std::min(end, js.size()); ++added) {
      const Job& j = js[added];
      auto id = (*e)->add_request(j.prompt, j.p, {}, false, 1, 0, spec ? j.mode : SpecMode::kOff);
      EXPECT_TRUE(id.is_ok()) << id.status().message();
      job_of[*id] = added;
    }
  };
  add(second);
  for (int steps = 0; steps < 20000; ++steps) {
    if (!(*e)->has_work()) add(js.size());
    if (!(*e)->has_work()) break;
    auto ev = (*e)->step();
    EXPECT_TRUE(ev.is_ok()) << ev.status().message();
    if (!ev.is_ok()) break;
    for (const auto& x : *ev)
      if (x.token) out.ids[job_of.at(x.id)].push_back(*x.token);
    for (auto [id, i] : job_of) {
      const int nc = (*e)->num_computed(id);
      std::vector<uint8_t> st = (*e)->state_contents(id);
      if (nc > static_cast<int>(js[i].prompt.size()) && !st.empty()) out.states[i][nc] = std::move(st);
    }
    EXPECT_EQ((*e)->check(), "");
  }
  out.counters = (*e)->counters();
  EXPECT_EQ(out.counters.blocks_used, out.counters.blocks_cached) << "no block leaked";
  EXPECT_EQ(out.counters.state_slots_used, out.counters.state_checkpoints) << "no state slot leaked";
  return out;
}

void expect_same(const Served& s, const Served& base, const std::vector<Job>& js, const char* what) {
  int compared = 0;
  for (size_t i = 0; i < js.size(); ++i) {
    EXPECT_EQ(s.ids[i], base.ids[i]) << what << ": request " << i;
    EXPECT_TRUE(s.logits[i] == base.logits[i]) << what << ": request " << i << " logits";
    for (const auto& [nc, st] : s.states[i]) {
      auto it = base.states[i].find(nc);
      if (it == base.states[i].end()) continue;
      EXPECT_TRUE(st == it->second) << what << ": request " << i << " state after " << nc << " tokens";
      ++compared;
    }
  }
  EXPECT_GT(compared, static_cast<int>(js.size())) << what << ": states compared";
}

// The three hybrid families: Qwen3.5's gated delta nets, LFM2's short convs, Granite 4.0-H's and Nemotron-H's Mamba-2 (their conv
// windows roll back alike).
class HybridSpeculationGreedy : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Archs, HybridSpeculationGreedy,
                         ::testing::Values("qwen35", "lfm2", "granitehybrid", "nemotron_h", "nemotron_h_moe",
                                           "nemotron_h_moe_latent"));

TEST_P(HybridSpeculationGreedy, IdsLogitsAndStatesEqualNoSpeculationBitwise) {
  auto target = hybrid(42, "hybrid_spec_target.gguf", GetParam());
  auto same = hybrid(42, "hybrid_spec_target.gguf", GetParam());   // a draft that always agrees
  auto other = hybrid(7, "hybrid_spec_other.gguf", GetParam());    // one that mostly does not
  const int V = static_cast<int>(target->config().n_vocab);
  for (bool cache : {false, true}) {
    // 16 at once in a pool of 12 blocks of 16 tokens: preemptions; then in a pool where no cached prefix is
    // evicted (under pressure the two runs evict different prefixes, as draft tokens hold blocks a while, and
    // their prefix hits differ by luck: with another seed, either way).
    for (int n_blocks : {12, 512}) {
      std::vector<Job> lookup = jobs(16, V, 5, SpecMode::kLookup);
      size_t second = SIZE_MAX;
      if (cache) {
        // Next turns: each prompt with its answer and a few tokens more, once the first turns are done, so
        // they resume from checkpoints written while the first turns speculated.
        const Served first = serve(*target, nullptr, lookup, false, n_blocks, cache);
        second = lookup.size();
        for (size_t i = 0; i < second; ++i) {
          Job j = lookup[i];
          j.prompt.insert(j.prompt.end(), first.ids[i].begin(), first.ids[i].end());
          for (int k = 0; k < 5; ++k) j.prompt.push_back(static_cast<int32_t>((i * 31 + k * 7) % V));
          lookup.push_back(j);
        }
      }
      const Served base = serve(*target, nullptr, lookup, false, n_blocks, cache, second);
      const Served s = serve(*target, nullptr, lookup, true, n_blocks, cache, second);
      expect_same(s, base, lookup, "lookup");
      if (cache && n_blocks == 512) {  // the next turns resumed, from checkpoints written while speculating too
        EXPECT_GT(base.counters.prefix_hit_tokens, 16 * 20);
        EXPECT_EQ(s.counters.prefix_hit_tokens, base.counters.prefix_hit_tokens);
      }
      EXPECT_GT(s.counters.spec_accepted_tokens, 0);
      EXPECT_LT(s.counters.spec_accepted_tokens, s.counters.spec_draft_tokens) << "no rollback was exercised";
      if (n_blocks == 12) EXPECT_GT(s.counters.preemptions, 0);
      std::vector<Job> drafted = jobs(16, V, 9, SpecMode::kDraft);
      const Served base_d = serve(*target, nullptr, drafted, false, n_blocks, cache);
      for (Model* d : {same.get(), other.get()}) {
        const Served sd = serve(*target, d, drafted, true, n_blocks, cache);
        expect_same(sd, base_d, drafted, d == same.get() ? "draft (same)" : "draft (other)");
        EXPECT_GT(sd.counters.spec_accepted_tokens, 0);
        if (d == other.get()) EXPECT_LT(sd.counters.spec_accepted_tokens, sd.counters.spec_draft_tokens);
        if (d == same.get()) EXPECT_EQ(sd.counters.spec_accepted_tokens, sd.counters.spec_draft_tokens);
      }
    }
  }
}

// The model's own multi-token-prediction head: one that echoes the token it is given (it agrees wherever the
// target repeats a token) and a random one (it agrees nowhere). Greedy ids, logits and states as without
// speculation, bitwise, with the cache on and off and with preemptions.
TEST(HybridSpeculation, MtpHeadGreedyIdsLogitsAndStatesEqualNoSpeculationBitwise) {
  auto echo = testing::hybrid_test_model(42, "hybrid_spec_mtp_echo.gguf", /*mtp=*/true, /*echo=*/true);
  auto random = testing::hybrid_test_model(42, "hybrid_spec_mtp_random.gguf", /*mtp=*/true);
  ASSERT_TRUE(echo->config().mtp_head);
  EXPECT_EQ(echo->config().n_layer, 1);
  auto trunk = load_model(testing::temp_path("hybrid_spec_mtp_echo.gguf"), {2});  // the same file's trunk
  ASSERT_TRUE(trunk.is_ok()) << trunk.status().message();
  Model& target = **trunk;
  EXPECT_EQ(target.config().n_mtp_layers, 1);
  EXPECT_FALSE(target.config().mtp_head);
  const int V = static_cast<int>(target.config().n_vocab);
  for (bool cache : {false, true}) {
    for (int n_blocks : {12, 64}) {
      const std::vector<Job> js = jobs(16, V, 13, SpecMode::kMtp);
      const Served base = serve(target, nullptr, js, false, n_blocks, cache);
      for (Model* head : {echo.get(), random.get()}) {
        const Served s = serve(target, head, js, true, n_blocks, cache);
        const bool agrees = head == echo.get();
        expect_same(s, base, js, agrees ? "mtp (echo)" : "mtp (random)");
        EXPECT_GT(s.counters.spec_draft_tokens, 0);
        EXPECT_LT(s.counters.spec_accepted_tokens, s.counters.spec_draft_tokens) << "no rollback was exercised";
        if (agrees) EXPECT_GT(s.counters.spec_accepted_tokens, 0);
        if (n_blocks == 12) EXPECT_GT(s.counters.preemptions, 0);
      }
    }
  }
}

// The head follows a long prompt chunk by chunk holding only the trunk rows it still needs (not the prompt's),
// drafts from the last token, and after a rejection keeps only positions fed with the trunk's states.
TEST(HybridSpeculation, MtpProposerHoldsOnlyTheRowsItNeeds) {
  auto head = testing::hybrid_test_model(42, "hybrid_spec_mtp_echo.gguf", /*mtp=*/true, /*echo=*/true);
  auto trunk = load_model(testing::temp_path("hybrid_spec_mtp_echo.gguf"), {2});
  ASSERT_TRUE(trunk.is_ok());
  MtpConfig mc;
  mc.n_blocks = 64;
  auto p = MtpProposer::create(*head, **trunk, mc);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_FALSE(MtpProposer::create(**trunk, **trunk, mc).is_ok()) << "the trunk is not a head";
  const int64_t d = head->config().n_embd;
  std::vector<int32_t> tokens(600);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(3 + i % 97);
  std::vector<float> rows(256 * d);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = std::sin(0.01f * static_cast<float>(i));
  for (int pos0 = 0; pos0 < 600; pos0 += 256) {  // the trunk's prefill chunks
    const int n = std::min(256, 600 - pos0);
    (*p)->observe(7, tokens, 600, pos0, rows.data(), n);
    ASSERT_TRUE((*p)->catch_up().is_ok());
    EXPECT_EQ((*p)->fed(7), pos0 + n + 1 <= 600 ? pos0 + n + 1 : 600);
    EXPECT_LE((*p)->held_rows(7), 1);
  }
  tokens.push_back(5);  // the first sampled token
  SamplingParams sp;
  DraftJob j;
  j.id = 7;
  j.tokens = &tokens;
  j.n_prompt = 600;
  j.params = &sp;
  j.k = 4;
  std::vector<DraftJob> jobs{j};
  ASSERT_TRUE((*p)->propose(jobs).is_ok());
  EXPECT_EQ(jobs[0].draft.size(), 4u);
  EXPECT_EQ((*p)->fed(7), 601) << "drafted positions leave the head's cache";
  // The target verifies the last token and the draft (5 rows) and rejects all but the first draft token.
  tokens.insert(tokens.end(), jobs[0].draft.begin(), jobs[0].draft.end());
  (*p)->observe(7, tokens, 601, 600, rows.data(), 5);
  ASSERT_TRUE((*p)->catch_up().is_ok());
  (*p)->truncate(7, 602);
  EXPECT_EQ((*p)->fed(7), 601);
  EXPECT_EQ((*p)->held_rows(7), 2) << "the rows of positions 600 and 601";
  (*p)->release(7);
  EXPECT_EQ((*p)->held_rows(7), 0);
}

// Sampled requests: the same seed gives the same tokens, and the slots all come back.
TEST(HybridSpeculation, SampledRequestsAreReproducibleAndLeakNothing) {
  auto target = hybrid(42, "hybrid_spec_target.gguf");
  auto other = hybrid(7, "hybrid_spec_other.gguf");
  const int V = static_cast<int>(target->config().n_vocab);
  std::vector<Job> js = jobs(12, V, 21, SpecMode::kDraft);
  for (size_t i = 0; i < js.size(); ++i) {
    js[i].p.temperature = 0.8f;
    js[i].p.seed = 100 + i;
    if (i % 2) js[i].mode = SpecMode::kLookup;
  }
  const Served a = serve(*target, other.get(), js, true, 16, true);
  const Served b = serve(*target, other.get(), js, true, 16, true);
  for (size_t i = 0; i < js.size(); ++i) EXPECT_EQ(a.ids[i], b.ids[i]) << "request " << i;
  EXPECT_GT(a.counters.spec_draft_tokens, 0);
}

// A hybrid draft model keeps its own state slots; it cannot read the target's cache.
TEST(HybridSpeculation, HybridDraftNeedsItsOwnPoolAndStates) {
  auto target = hybrid(42, "hybrid_spec_target.gguf");
  DraftModelConfig dc;
  dc.share_target_kv = true;
  dc.n_state_slots = 8;
  EXPECT_FALSE(DraftModelProposer::create(*target, *target, dc).is_ok());
  dc.share_target_kv = false;
  dc.n_blocks = 16;
  dc.n_state_slots = 1;
  EXPECT_FALSE(DraftModelProposer::create(*target, *target, dc).is_ok());
  dc.n_state_slots = 8;
  EXPECT_TRUE(DraftModelProposer::create(*target, *target, dc).is_ok());
}

// A hybrid draft model after a verification that accepted some of its tokens drafts exactly what a fresh draft
// of the same tokens drafts (its state rolled back to the last accepted token, not left after its own guesses):
// rounds of random acceptance, each compared with a proposer that never drafted before.
TEST(HybridSpeculation, HybridDraftRollsBackItsStateExactly) {
  auto target = hybrid(42, "hybrid_spec_target.gguf");
  auto draft = hybrid(7, "hybrid_spec_other.gguf");
  const int V = static_cast<int>(target->config().n_vocab);
  DraftModelConfig dc;
  dc.n_blocks = 32;
  dc.n_state_slots = 8;
  dc.p_min = 0.0f;
  auto p = DraftModelProposer::create(*draft, *target, dc);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(30);
  for (auto& x : tokens) x = static_cast<int32_t>(rng() % V);
  SamplingParams sp;
  auto propose = [&](DraftModelProposer& prop, int64_t id) {
    DraftJob j;
    j.id = id;
    j.tokens = &tokens;
    j.n_prompt = 30;
    j.params = &sp;
    j.k = 4;
    std::vector<DraftJob> js{j};
    EXPECT_TRUE(prop.propose(js).is_ok());
    return js[0].draft;
  };
  int rolled_back = 0;
  for (int round = 0; round < 12; ++round) {
    const std::vector<int32_t> d = propose(**p, 1);
    ASSERT_EQ(d.size(), 4u);
    auto fresh = DraftModelProposer::create(*draft, *target, dc);
    ASSERT_TRUE(fresh.is_ok());
    EXPECT_EQ(d, propose(**fresh, 2)) << "round " << round;
    // The target accepts a of the draft, then a token of its own.
    const int a = static_cast<int>(rng() % 5);
    const int len = static_cast<int>(tokens.size());
    tokens.insert(tokens.end(), d.begin(), d.begin() + a);
    tokens.push_back(static_cast<int32_t>(rng() % V));
    (*p)->truncate(1, len + a);
    rolled_back += a < 3;  // the draft had fed positions past the last accepted one
  }
  EXPECT_GT(rolled_back, 3);
}

}  // namespace
}  // namespace cachet
