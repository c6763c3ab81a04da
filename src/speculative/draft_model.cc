#include "speculative/draft_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "speculative/draft_token.h"

namespace cachet {

Result<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(Model& draft, const Model& target,
                                                                       DraftModelConfig cfg) {
  if (draft.config().n_vocab != target.config().n_vocab)
    return invalid_argument("the draft model's vocabulary has " + std::to_string(draft.config().n_vocab) +
                            " tokens but the target's has " + std::to_string(target.config().n_vocab) +
                            ": a draft must share the target's tokenizer");
  if (cfg.share_target_kv) {
    if (!(draft.config() == target.config()))
      return invalid_argument("a draft model that reads the target's KV cache must have the target's shape "
                              "exactly (a requantization of it)");
  } else if (cfg.n_blocks <= 0 || cfg.block_size <= 0 || cfg.block_size % 16 != 0) {
    return invalid_argument("draft KV pool: n_blocks > 0 and block_size a multiple of 16");
  }
  if (draft.config().n_recurrent_layers() > 0 && (cfg.share_target_kv || cfg.n_state_slots < 2))
    return invalid_argument("a hybrid draft model (recurrent layers) needs a KV pool and state slots of its own");
  return std::unique_ptr<DraftModelProposer>(new DraftModelProposer(draft, cfg));
}

DraftModelProposer::DraftModelProposer(Model& draft, DraftModelConfig cfg) : model_(draft), cfg_(cfg) {
  if (cfg.share_target_kv) return;
  storage_ = std::make_unique<KvBlockStorage>(draft.config(), cfg.n_blocks, cfg.block_size, cfg.kv_type);
  manager_ = std::make_unique<KvCacheManager>(cfg.n_blocks, cfg.block_size);
  if (draft.config().n_recurrent_layers() > 0) state_ = std::make_unique<StateStore>(draft.config(), cfg.n_state_slots);
}

void DraftModelProposer::roll_back_state(Seq& s, int n) {
  bool found = n == s.computed;
  for (auto [pos, slot] : s.snaps) {
    if (!found && pos == n - 1) {
      state_->free(s.slot);
      s.slot = slot;
      found = true;
    } else {
      state_->free(slot);
    }
  }
  s.snaps.clear();
  s.computed = found ? n : 0;  // no state to return to: the sequence is fed again from position 0
}

DraftModelProposer::Seq& DraftModelProposer::seq(const DraftJob& j) {
  Seq& s = seqs_[j.id];
  if (!s.sampler) {
    SamplingParams p = *j.params;
    p.seed = p.seed ^ 0x9E3779B97F4A7C15ull;  // the draft's own generator, not the target's
    p.logprobs = -1;
    s.sampler = std::make_unique<Sampler>(std::move(p));
  }
  return s;
}

Status DraftModelProposer::propose(std::span<DraftJob> jobs) {
  last_passes_.clear();
  const int64_t V = model_.config().n_vocab;
  struct Live {
    DraftJob* job;
    Seq* s;
    std::vector<int32_t> history;  // tokens, then the draft so far
  };
  std::vector<Live> live;
  // The storage every pass reads and writes: the draft's own pool, or the target's (every job's alike).
  KvBlockStorage* kv = storage_.get();
  std::vector<KvBlockCopy> copies;  // the target's copy-on-writes, made before the first pass reads
  for (DraftJob& j : jobs) {
    j.draft.clear();
    j.q.clear();
    if (j.k <= 0) continue;
    Seq& s = seq(j);
    const int len = static_cast<int>(j.tokens->size());
    if (!manager_) {
      // The target's cache: computed up to the last token, room made for k - 1 drafted tokens fed back.
      CACHET_CHECK(j.target_kv && (!kv || kv == j.target_kv) &&
                   static_cast<int64_t>(j.target_blocks.size()) * j.target_kv->block_size() >= len + j.k - 1);
      kv = j.target_kv;
      copies.insert(copies.end(), j.target_copies.begin(), j.target_copies.end());
      s.computed = len - 1;
      live.push_back({&j, &s, *j.tokens});
      continue;
    }
    std::vector<StateSlot>& spare = s.spare;
    if (state_) {
      // A slot for its state, and one for each position fed from the last token on (a verification may roll
      // back to any of them); fewer free: a shorter draft, none: no draft this step.
      if (s.slot < 0) {
        if (auto a = state_->allocate()) s.slot = *a, s.computed = 0;
        else continue;
      }
      roll_back_state(s, std::min(s.computed, len - 1));
      while (static_cast<int>(spare.size()) < j.k)
        if (auto a = state_->allocate()) spare.push_back(*a);
        else break;
      if (spare.empty()) continue;
      j.k = static_cast<int>(spare.size());
    }
    s.computed = std::min(s.computed, len - 1);  // the last token is fed again: its logits are the first draft's
    if (manager_->has(j.id)) manager_->truncate(j.id, std::min(manager_->num_tokens(j.id), s.computed));
    // Room for the catch-up and k - 1 drafted tokens fed back; without it this request does not draft now.
    const int grow = len + j.k - 1 - manager_->num_tokens(j.id);
    if (!manager_->append(j.id, grow)) {
      release(j.id);
      continue;
    }
    live.push_back({&j, &s, *j.tokens});
  }
  // Pass r feeds each live request's unseen tokens (pass 0: the catch-up; later: its previous draft token)
  // and drafts one more token from the last position's logits.
  for (int pass = 0; !live.empty(); ++pass) {
    if (pass > 0 && budget_.token_secs > 0 && budget_.pass_secs) {
      // A request stays in the pass while its next token is worth what it adds (its verification and its
      // share of a fuller pass); the pass runs while the requests left are worth the whole of it.
      const int n = static_cast<int>(live.size());
      const double extra = n > 1 ? std::max(0.0, budget_.pass_secs(n) - budget_.pass_secs(n - 1)) : 0.0;
      std::vector<Live> kept;
      double expected = 0;
      for (Live& l : live) {
        const DraftJob& j = *l.job;
        const double p = j.first * std::pow(j.cont, static_cast<double>(j.draft.size()));
        if (p * budget_.token_secs < budget_.verify_secs_per_token + extra) continue;
        expected += p;
        kept.push_back(std::move(l));
      }
      const int m = static_cast<int>(kept.size());
      if (m == 0 || expected * budget_.token_secs < budget_.pass_secs(m) + m * budget_.verify_secs_per_token) break;
      live = std::move(kept);
    }
    ForwardBatch b;
    b.kv = kv;
    b.copies = manager_ ? manager_->take_copies() : std::exchange(copies, {});
    b.state = state_.get();
    for (Live& l : live) {
      const int seq = b.add_sequence(manager_ ? manager_->block_table(l.job->id) : l.job->target_blocks);
      const int len = static_cast<int>(l.history.size());
      const int from_last = static_cast<int>(l.job->tokens->size()) - 1;  // positions a rollback may return to
      if (state_) b.state_slots.push_back(l.s->slot);
      for (int p = l.s->computed; p < len; ++p) {
        if (state_ && p >= from_last) {
          const StateSlot x = l.s->spare.back();
          l.s->spare.pop_back();
          b.state_snapshots.emplace_back(b.n_tokens(), x);
          l.s->snaps.emplace_back(p, x);
        }
        b.add_token(l.history[p], p, seq, p + 1 == len);
      }
    }
    logits_.resize(live.size() * V);
    const auto t0 = std::chrono::steady_clock::now();
    CACHET_RETURN_IF_ERROR(model_.forward(b, logits_.data()));
    last_passes_.emplace_back(b.n_tokens(),
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::vector<Live> next;
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      l.s->computed = static_cast<int>(l.history.size());
      const float* row = logits_.data() + i * V;
      DraftJob& j = *l.job;
      int32_t x;
      CACHET_ASSIGN_OR_RETURN(const bool go_on, next_draft_token(row, V, *l.s->sampler, l.history, cfg_.p_min, j, &x));
      if (!go_on) continue;
      j.draft.push_back(x);
      if (static_cast<int>(j.draft.size()) < j.k) {
        l.history.push_back(x);
        next.push_back(std::move(l));
      }
    }
    live = std::move(next);
  }
  if (state_)  // slots reserved for positions never fed (an early stop) back
    for (DraftJob& j : jobs)
      if (auto it = seqs_.find(j.id); it != seqs_.end()) {
        for (StateSlot y : it->second.spare) state_->free(y);
        it->second.spare.clear();
      }
  // Blocks reserved for draft tokens never fed (an early stop) go back (the target's: the engine's to undo).
  if (manager_)
    for (DraftJob& j : jobs)
      if (auto it = seqs_.find(j.id); it != seqs_.end() && manager_->has(j.id))
        manager_->truncate(j.id, std::min(manager_->num_tokens(j.id), it->second.computed));
  return Status::ok();
}

void DraftModelProposer::truncate(int64_t id, int n_valid) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (state_) roll_back_state(it->second, std::min(it->second.computed, n_valid));
  it->second.computed = std::min(it->second.computed, n_valid);
  if (manager_ && manager_->has(id)) manager_->truncate(id, std::min(manager_->num_tokens(id), it->second.computed));
}

std::vector<std::pair<int, double>> DraftModelProposer::calibrate() {
  constexpr int64_t kScratch = -1;  // request ids are >= 0
  std::vector<std::pair<int, double>> out;
  constexpr int kCatchUp = 64;
  if (manager_ && !manager_->append(kScratch, kCatchUp)) return out;
  std::optional<StateSlot> scratch = state_ ? state_->allocate() : std::nullopt;
  if (state_ && !scratch) {
    manager_->free(kScratch);
    return out;
  }
  const StateSlot scratch_slot = scratch.value_or(-1);
  {
    // Reading the target's cache, the draft's passes attend as they would over a paged one of its own.
    std::unique_ptr<ContiguousKvCache> contiguous;
    if (!manager_) contiguous = std::make_unique<ContiguousKvCache>(model_.config(), kCatchUp, cfg_.kv_type);
    KvBlockStorage& kv = manager_ ? *storage_ : contiguous->storage();
    const std::vector<BlockId> blocks = manager_ ? manager_->block_table(kScratch) : contiguous->blocks();
    for (int rep = 0; rep < 3; ++rep) {
      // A drafting pass carries one token per request, each with its logits (1 and 4 requests); a catch-up pass
      // (a prompt) many tokens and one row of logits. The catch-up is timed once: on a CPU where the target's
      // prefill runs on a faster unit than the draft's (AMX for F16, not for Q4_0) the target's curve scaled by
      // the one-token ratio underestimates it threefold. It runs twice (warm-up, then timed), not three times.
      for (int n : {1, 4, kCatchUp}) {
        if (n == kCatchUp && rep == 1) continue;
        const std::vector<int32_t> tokens(n, 0);
        ForwardBatch b = ForwardBatch::single(kv, blocks, tokens, 0, n != kCatchUp);
        if (state_) {  // a hybrid draft: a scratch state (position 0 zeroes it)
          b.state = state_.get();
          b.state_slots = {scratch_slot};
        }
        logits_.resize(static_cast<size_t>(model_.config().n_vocab) * (n == kCatchUp ? 1 : n));
        const auto t0 = std::chrono::steady_clock::now();
        if (!model_.forward(b, logits_.data()).is_ok()) break;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0) out.emplace_back(n, secs);  // the first round warms caches and scratch buffers
      }
    }
  }
  if (manager_) manager_->free(kScratch);
  if (scratch) state_->free(*scratch);
  return out;
}

void DraftModelProposer::release(int64_t id) {
  if (manager_) manager_->free(id);
  if (auto it = seqs_.find(id); state_ && it != seqs_.end()) {
    for (auto [pos, slot] : it->second.snaps) state_->free(slot);
    for (StateSlot slot : it->second.spare) state_->free(slot);
    if (it->second.slot >= 0) state_->free(it->second.slot);
  }
  seqs_.erase(id);
}

}  // namespace cachet
