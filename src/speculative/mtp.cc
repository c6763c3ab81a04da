#include "speculative/mtp.h"

#include <algorithm>
#include <chrono>

#include "speculative/draft_token.h"

namespace cachet {

Result<std::unique_ptr<MtpProposer>> MtpProposer::create(Model& head, const Model& target, MtpConfig cfg) {
  const ModelConfig& h = head.config();
  if (!h.mtp_head) return invalid_argument("the MTP proposer needs a model loaded as a multi-token-prediction head");
  if (h.n_vocab != target.config().n_vocab || h.n_embd != target.config().n_embd)
    return invalid_argument("the multi-token-prediction head is not this model's (width or vocabulary differ)");
  if (cfg.n_blocks <= 0 || cfg.block_size <= 0 || cfg.block_size % 16 != 0)
    return invalid_argument("MTP KV pool: n_blocks > 0 and block_size a multiple of 16");
  return std::unique_ptr<MtpProposer>(new MtpProposer(head, cfg));
}

MtpProposer::MtpProposer(Model& head, MtpConfig cfg) : model_(head), cfg_(cfg), d_(head.config().n_embd) {
  storage_ = std::make_unique<KvBlockStorage>(head.config(), cfg.n_blocks, cfg.block_size, cfg.kv_type);
  manager_ = std::make_unique<KvCacheManager>(cfg.n_blocks, cfg.block_size);
}

MtpProposer::Seq& MtpProposer::seq(int64_t id, const SamplingParams* params) {
  Seq& s = seqs_[id];
  if (!s.sampler && params) {
    SamplingParams p = *params;
    p.seed = p.seed ^ 0xD1B54A32D192ED03ull;  // the head's own generator, not the target's
    p.logprobs = -1;
    s.sampler = std::make_unique<Sampler>(std::move(p));
  }
  return s;
}

void MtpProposer::trim(Seq& s) {
  const int keep_from = std::max(s.h0, s.fed - 1);
  const int drop = std::min(keep_from - s.h0, s.n_rows);
  if (drop <= 0) return;
  s.rows.erase(s.rows.begin(), s.rows.begin() + static_cast<std::ptrdiff_t>(drop) * d_);
  s.h0 += drop;
  s.n_rows -= drop;
}

void MtpProposer::observe(int64_t id, const std::vector<int32_t>& tokens, int n_final, int pos0, const float* rows,
                          int n) {
  Seq& s = seq(id, nullptr);
  // Rows at or after pos0 are computed again (a preempted request starts over): the new ones replace them. A gap
  // (positions the trunk took from the prefix cache) is left unknown: those positions are fed with zeros.
  if (s.n_rows == 0 || pos0 < s.h0 || pos0 > s.h0 + s.n_rows) {
    s.rows.clear();
    s.h0 = pos0;
    s.n_rows = 0;
  } else {
    s.n_rows = pos0 - s.h0;
    s.rows.resize(static_cast<size_t>(s.n_rows) * d_);
  }
  s.rows.insert(s.rows.end(), rows, rows + static_cast<std::ptrdiff_t>(n) * d_);
  s.n_rows += n;
  s.tokens.assign(tokens.begin(), tokens.begin() + n_final);
  if (std::find(queued_.begin(), queued_.end(), id) == queued_.end()) queued_.push_back(id);
}

bool MtpProposer::feed(int64_t id, Seq& s, int end, bool logits, ForwardBatch* b, int seq) {
  if (end <= s.fed) return true;
  if (manager_->num_tokens(id) > s.fed) manager_->truncate(id, s.fed);
  if (!manager_->append(id, end - manager_->num_tokens(id))) return false;
  b->block_tables[seq] = manager_->block_table(id);
  for (int p = s.fed; p < end; ++p) {
    b->add_token(s.tokens[p], p, seq, logits && p + 1 == end);
    const int r = p - 1 - s.h0;  // the trunk's state before p
    if (p > 0 && r >= 0 && r < s.n_rows) {
      const float* row = s.rows.data() + static_cast<std::ptrdiff_t>(r) * d_;
      b->input_hidden.insert(b->input_hidden.end(), row, row + d_);
    } else {
      b->input_hidden.resize(b->input_hidden.size() + d_, 0.0f);
    }
  }
  return true;
}

Status MtpProposer::catch_up() {
  last_passes_.clear();
  ForwardBatch b;
  b.kv = storage_.get();
  std::vector<std::pair<Seq*, int>> fed;
  for (int64_t id : queued_) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    Seq& s = it->second;
    // Position p needs its token (final) and the trunk's state at p - 1: as far as both are known.
    const int end = std::min(static_cast<int>(s.tokens.size()), s.h0 + s.n_rows + 1);
    if (end <= s.fed) continue;
    const int seq = b.add_sequence({});
    if (!feed(id, s, end, false, &b, seq)) {  // the head's pool is full: this request starts over later
      b.block_tables.pop_back();
      manager_->free(id);
      s.fed = 0;
      continue;
    }
    fed.emplace_back(&s, end);
  }
  queued_.clear();
  if (b.n_tokens() == 0) return Status::ok();
  b.copies = manager_->take_copies();
  const auto t0 = std::chrono::steady_clock::now();
  CACHET_RETURN_IF_ERROR(model_.forward(b, nullptr));
  last_passes_.emplace_back(b.n_tokens(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (auto [s, end] : fed) {
    s->fed = end;
    trim(*s);
  }
  return Status::ok();
}

Status MtpProposer::propose(std::span<DraftJob> jobs) {
  last_passes_.clear();
  const int64_t V = model_.config().n_vocab;
  struct Live {
    DraftJob* job;
    Seq* s;
    std::vector<int32_t> history;  // tokens, then the draft so far
  };
  std::vector<Live> live;
  ForwardBatch b;
  b.kv = storage_.get();
  for (DraftJob& j : jobs) {
    j.draft.clear();
    j.q.clear();
    if (j.k <= 0) continue;
    Seq& s = seq(j.id, j.params);
    const int len = static_cast<int>(j.tokens->size());
    s.tokens = *j.tokens;
    // The last token is fed now (its output is the first draft's): it is never in the cache already.
    s.fed = std::min(s.fed, len - 1);
    const int seq = b.add_sequence({});
    if (!feed(j.id, s, len, true, &b, seq)) {
      b.block_tables.pop_back();
      release(j.id);
      continue;
    }
    b.want_hidden_of_last();
    live.push_back({&j, &s, *j.tokens});
  }
  // Pass 0 feeds each request's positions up to its last token; pass r > 0 its previous draft token, with the
  // head's own output state at the position before. Each drafts one more token from its last row.
  for (int pass = 0; !live.empty(); ++pass) {
    if (pass > 0) {
      ForwardBatch nb;
      nb.kv = storage_.get();
      for (size_t i = 0; i < live.size(); ++i) {
        Live& l = live[i];
        const int p = static_cast<int>(l.history.size()) - 1;
        if (!manager_->append(l.job->id, p + 1 - manager_->num_tokens(l.job->id))) {
          l.job = nullptr;  // no room for a longer draft: the draft so far stands
          continue;
        }
        const int seq = nb.add_sequence(manager_->block_table(l.job->id));
        nb.add_token(l.history[p], p, seq, true);
        nb.want_hidden_of_last();
        nb.input_hidden.insert(nb.input_hidden.end(), hidden_.begin() + static_cast<std::ptrdiff_t>(i) * d_,
                               hidden_.begin() + static_cast<std::ptrdiff_t>(i + 1) * d_);
      }
      std::erase_if(live, [](const Live& l) { return l.job == nullptr; });
      if (live.empty()) break;
      b = std::move(nb);
    }
    b.copies = manager_->take_copies();
    logits_.resize(live.size() * V);
    hidden_.resize(live.size() * d_);
    const auto t0 = std::chrono::steady_clock::now();
    CACHET_RETURN_IF_ERROR(model_.forward(b, logits_.data(), hidden_.data()));
    last_passes_.emplace_back(b.n_tokens(),
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (pass == 0)
      for (Live& l : live) l.s->fed = static_cast<int>(l.history.size());
    std::vector<Live> next;
    std::vector<float> next_hidden;
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      DraftJob& j = *l.job;
      int32_t x;
      CACHET_ASSIGN_OR_RETURN(const bool go_on,
                              next_draft_token(logits_.data() + i * V, V, *l.s->sampler, l.history, cfg_.p_min, j, &x));
      if (!go_on) continue;
      j.draft.push_back(x);
      if (static_cast<int>(j.draft.size()) < j.k) {
        l.history.push_back(x);
        next_hidden.insert(next_hidden.end(), hidden_.begin() + static_cast<std::ptrdiff_t>(i) * d_,
                           hidden_.begin() + static_cast<std::ptrdiff_t>(i + 1) * d_);
        next.push_back(std::move(l));
      }
    }
    live = std::move(next);
    hidden_ = std::move(next_hidden);
  }
  // The drafted positions were fed with the head's own states, not the trunk's: they leave its cache.
  for (DraftJob& j : jobs)
    if (auto it = seqs_.find(j.id); it != seqs_.end() && manager_->has(j.id)) {
      manager_->truncate(j.id, std::min(manager_->num_tokens(j.id), it->second.fed));
      trim(it->second);
    }
  return Status::ok();
}

void MtpProposer::truncate(int64_t id, int n_valid) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  s.fed = std::min(s.fed, n_valid);
  if (manager_->has(id)) manager_->truncate(id, std::min(manager_->num_tokens(id), s.fed));
  // The trunk's rows past the valid tokens were computed from rejected drafts.
  const int keep = std::clamp(n_valid - s.h0, 0, s.n_rows);
  s.n_rows = keep;
  s.rows.resize(static_cast<size_t>(keep) * d_);
  if (static_cast<int>(s.tokens.size()) > n_valid) s.tokens.resize(n_valid);
}

void MtpProposer::release(int64_t id) {
  manager_->free(id);
  seqs_.erase(id);
  std::erase(queued_, id);
}

std::vector<std::pair<int, double>> MtpProposer::calibrate() {
  constexpr int64_t kScratch = -1;  // request ids are >= 0
  constexpr int kCatchUp = 64;
  std::vector<std::pair<int, double>> out;
  if (!manager_->append(kScratch, kCatchUp)) return out;
  for (int rep = 0; rep < 3; ++rep) {
    for (int n : {1, 4, kCatchUp}) {
      if (n == kCatchUp && rep == 1) continue;
      ForwardBatch b = ForwardBatch::single(*storage_, manager_->block_table(kScratch), std::vector<int32_t>(n, 0), 0,
                                            n != kCatchUp);
      b.input_hidden.assign(static_cast<size_t>(n) * d_, 0.0f);
      logits_.resize(static_cast<size_t>(model_.config().n_vocab) * (n == kCatchUp ? 1 : n));
      const auto t0 = std::chrono::steady_clock::now();
      if (!model_.forward(b, logits_.data()).is_ok()) break;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) out.emplace_back(n, secs);
    }
  }
  manager_->free(kScratch);
  return out;
}

}  // namespace cachet
