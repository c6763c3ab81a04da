#include "engine/speculator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "speculative/verify.h"

namespace cachet {

Result<std::unique_ptr<Speculator>> Speculator::create(Model& target, KvBlockStorage& target_kv,
                                                       const EngineConfig& cfg) {
  std::unique_ptr<Speculator> s(new Speculator(target, target_kv, cfg));
  if (cfg.draft_model) {
    // The draft tracks the same sequences as the target: as many token slots as the target's pool.
    DraftModelConfig dc;
    // A hybrid draft keeps a recurrent state of its own per sequence, so it never reads the target's cache.
    dc.share_target_kv = !cfg.draft_own_kv && cfg.draft_model->config() == target.config() &&
                         cfg.draft_model->config().n_recurrent_layers() == 0;
    dc.n_state_slots = cfg.max_running + 2 * cfg.draft_max;
    dc.n_blocks = dc.share_target_kv ? 0 : cfg.n_blocks;
    dc.block_size = cfg.block_size;
    dc.kv_type = cfg.kv_type;
    dc.p_min = cfg.draft_p_min;
    CACHET_ASSIGN_OR_RETURN(s->draft_, DraftModelProposer::create(*cfg.draft_model, target, dc));
  }
  if (cfg.mtp_model) {
    // One cost curve serves the model-based proposer: a draft model or the MTP head, not both.
    if (cfg.draft_model) return invalid_argument("speculation takes a draft model or the MTP head, not both");
    MtpConfig mc;
    mc.n_blocks = cfg.n_blocks;
    mc.block_size = cfg.block_size;
    mc.kv_type = cfg.kv_type;
    mc.p_min = cfg.draft_p_min;
    CACHET_ASSIGN_OR_RETURN(s->mtp_, MtpProposer::create(*cfg.mtp_model, target, mc));
  }
  if (cfg.spec_adaptive && (cfg.spec != SpecMode::kOff || s->draft_ || s->mtp_)) s->calibrate();
  return s;
}

Proposer* Speculator::proposer(SpecMode m) {
  if (m == SpecMode::kLookup) return &lookup_;
  if (m == SpecMode::kDraft) return draft_.get();
  if (m == SpecMode::kMtp) return mtp_.get();
  return nullptr;
}

void Speculator::observe_hidden(const EngineRequest& r, int pos0, const float* rows, int n) {
  if (mtp_) mtp_->observe(r.id, r.tokens, static_cast<int>(r.tokens.size()) - r.n_draft, pos0, rows, n);
}

Status Speculator::catch_up_hidden() {
  if (!mtp_) return Status::ok();
  CACHET_RETURN_IF_ERROR(mtp_->catch_up());
  for (auto [tokens, secs] : mtp_->last_passes()) {
    policy_.observe_draft(tokens, secs);
    catch_up_secs_ += secs;  // what following the target costs, drafting or not (left out of the guard's rates)
  }
  return Status::ok();
}

void Speculator::finished(const EngineRequest& r) {
  // How long outputs run here (a draft's catch-up prefill is earned back only over the tokens still to come).
  const double generated = static_cast<double>(r.tokens.size()) - r.n_draft - r.n_prompt;
  output_len_ = output_len_ <= 0 ? generated : 0.9 * output_len_ + 0.1 * generated;
  if (draft_) draft_->release(r.id);
  if (mtp_) mtp_->release(r.id);
}

void Speculator::calibrate() {
  // The policy's first choices need the cost of small passes (verifying k drafts) before any step measured
  // them: a few warm passes of 1..9 tokens on a scratch cache (the first round pays one-time costs: scratch
  // buffers growing, caches cold, and is not kept), then the draft model's 1- and 4-token passes.
  ContiguousKvCache scratch(target_.config(), 16, cfg_.kv_type);
  std::vector<float> logits(static_cast<size_t>(target_.config().n_vocab) * 9);
  for (int rep = 0; rep < 2; ++rep) {
    for (int n = 1; n <= 9; ++n) {
      ForwardBatch b = ForwardBatch::single(scratch, std::vector<int32_t>(n, 0), 0, true);
      const auto t0 = std::chrono::steady_clock::now();
      if (!target_.forward(b, logits.data()).is_ok()) return;
      if (rep > 0)
        policy_.observe_target(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  if (draft_)
    for (auto [tokens, secs] : draft_->calibrate()) policy_.observe_draft(tokens, secs);
  if (mtp_)
    for (auto [tokens, secs] : mtp_->calibrate()) policy_.observe_draft(tokens, secs);
}

Status Speculator::propose(Scheduler& sched) {
  drafted_.clear();
  catch_up_secs_ = 0;
  std::vector<EngineRequest*> cands;
  int other_tokens = 0;
  for (SchedRequest* sr : sched.running()) {
    auto* r = static_cast<EngineRequest*>(sr);
    const int len = static_cast<int>(r->tokens.size());
    const int room = r->params.max_tokens - (len - r->n_prompt) - 1;  // the step emits up to k + 1 tokens
    if (r->spec != SpecMode::kOff && r->num_computed == len - 1 && r->n_forks == 0 && room >= 1) {
      cands.push_back(r);
    } else {
      other_tokens += std::min(len - r->num_computed, cfg_.prefill_chunk);
    }
  }
  if (cands.empty()) return Status::ok();
  for (size_t i = 0; i < static_cast<size_t>(sched.n_waiting()) && other_tokens < cfg_.max_batch_tokens; ++i)
    other_tokens += cfg_.prefill_chunk;  // waiting prompts take what budget is left
  other_tokens = std::min(other_tokens, cfg_.max_batch_tokens);

  std::vector<int> ks(cands.size(), cfg_.draft_max);
  std::vector<AcceptRates> rates;
  if (cfg_.spec_adaptive) {
    std::vector<bool> uses_draft;
    std::vector<int> catch_up, remaining;
    for (EngineRequest* r : cands) {
      const bool model_based = r->spec == SpecMode::kDraft || r->spec == SpecMode::kMtp;
      const double weight = model_based ? Acceptance::kDraftPriorWeight : Acceptance::kLookupPriorWeight;
      rates.push_back(
          r->acceptance.rates(mode_acceptance_[static_cast<int>(r->spec)].rates(unmeasured_prior()), weight));
      uses_draft.push_back(model_based);
      const int len = static_cast<int>(r->tokens.size());
      // A draft reading the target's cache is never behind: it feeds the last token only.
      int behind = 0;
      if (r->spec == SpecMode::kDraft) behind = draft_->shares_target_kv() ? 1 : len - draft_->computed(r->id);
      if (r->spec == SpecMode::kMtp) behind = len - mtp_->fed(r->id);
      catch_up.push_back(behind);
      // Tokens still to come: at most max_tokens, and about what outputs here have run to (at least 16 more).
      const int left = r->params.max_tokens - (len - r->n_prompt);
      const int typical = output_len_ > 0 ? std::max(16, static_cast<int>(output_len_) - (len - r->n_prompt)) : left;
      remaining.push_back(std::min(left, typical));
    }
    const int batch = sched.n_running();
    ks = policy_.plain_probe(batch) ? std::vector<int>(cands.size(), 0)
                                    : policy_.choose(rates, uses_draft, other_tokens, batch, &catch_up, &remaining);
    // A request the policy keeps from drafting still tries now and then (SpecPolicy::idle_retry).
    policy_.earn_retry_credit(policy_.target_cost().predict(batch));
    for (size_t i = 0; i < cands.size(); ++i) {
      cands[i]->spec_idle = ks[i] > 0 ? 0 : cands[i]->spec_idle + 1;
      if (const int retry = policy_.idle_retry(cands[i]->spec_idle, catch_up[i], batch); retry > 0) {
        ks[i] = retry;
        cands[i]->spec_idle = 0;
      }
    }
    // Now and then one drafting request drafts a token more than chosen (SpecPolicy::explore_probe).
    if (policy_.explore_probe(batch)) {
      int most = -1;
      for (size_t i = 0; i < ks.size(); ++i)
        if (ks[i] > 0 && ks[i] < cfg_.draft_max && (most < 0 || ks[i] > ks[most])) most = static_cast<int>(i);
      if (most >= 0) ++ks[most];
    }
    // A kind nobody drafts with is measured by nobody: a draft model judged poor once would never again be
    // caught up on a prompt, so its engine-wide rate (every new request's prior) would stay at that one reading.
    // So once the steps without any draft of a kind add up to 50 times the cheapest catch-up among its
    // candidates, that candidate drafts two tokens, catch-up included: at most 2% of the time where the draft
    // model really does not pay.
    const double step_secs = policy_.target_cost().predict(batch);
    for (SpecMode mode : {SpecMode::kLookup, SpecMode::kDraft, SpecMode::kMtp}) {
      const int m = static_cast<int>(mode);
      int cheapest = -1;
      bool drafting = false;
      for (size_t i = 0; i < cands.size(); ++i)
        if (cands[i]->spec == mode) {
          if (cheapest < 0 || catch_up[i] < catch_up[cheapest]) cheapest = static_cast<int>(i);
          drafting = drafting || ks[i] > 0;
        }
      if (cheapest < 0) continue;
      mode_idle_secs_[m] = drafting ? 0.0 : mode_idle_secs_[m] + step_secs;
      const double explore_secs = catch_up[cheapest] > 0 ? policy_.draft_time(catch_up[cheapest]) : step_secs;
      if (mode_idle_secs_[m] >= 50.0 * explore_secs) {
        ks[cheapest] = 2;
        mode_idle_secs_[m] = 0.0;
      }
    }
    if (std::getenv("CACHET_SPEC_DEBUG")) {
      const CostCurve& t = policy_.target_cost();
      const CostCurve& d = policy_.draft_cost();
      std::fprintf(stderr, "[spec] target t(1..8) %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f ms, draft t(1) %.2f t(2) %.2f; k:",
                   t.predict(1) * 1e3, t.predict(2) * 1e3, t.predict(3) * 1e3, t.predict(4) * 1e3, t.predict(5) * 1e3,
                   t.predict(6) * 1e3, t.predict(7) * 1e3, t.predict(8) * 1e3, d.predict(1) * 1e3, d.predict(2) * 1e3);
      for (size_t i = 0; i < ks.size(); ++i)
        std::fprintf(stderr, " %d(first=%.2f cont=%.2f catch-up %d)", ks[i], rates[i].first, rates[i].cont, catch_up[i]);
      const auto [drafting, plain] = policy_.step_rates(sched.n_running());
      std::fprintf(stderr, "; guard %.0f vs %.0f tok/s\n", drafting, plain);
    }
  }
  // One job list per proposer kind; every job of a kind is proposed at once (a draft model batches them).
  for (SpecMode mode : {SpecMode::kLookup, SpecMode::kDraft, SpecMode::kMtp}) {
    std::vector<DraftJob> jobs;
    std::vector<EngineRequest*> owners;
    std::vector<std::pair<EngineRequest*, int>> reserved;  // slots made for a draft in the target's cache: tokens before
    for (size_t i = 0; i < cands.size(); ++i) {
      EngineRequest* r = cands[i];
      const int room = r->params.max_tokens - (static_cast<int>(r->tokens.size()) - r->n_prompt) - 1;
      const int k = std::min(ks[i], room);
      if (r->spec != mode || k <= 0) continue;
      DraftJob j;
      j.id = r->id;
      j.tokens = &r->tokens;
      j.n_prompt = r->n_prompt;
      j.params = &r->params;
      j.k = k;
      if (!rates.empty()) {
        j.first = rates[i].first;
        j.cont = rates[i].cont;
      }
      if (mode == SpecMode::kDraft && draft_->shares_target_kv()) {
        // The draft's rows of this step go to the target's slots past the last token (the verification
        // overwrites them); without room for them (a full pool) the request does not draft now.
        const int before = sched.kv().num_tokens(r->id);
        if (!sched.reserve(r, static_cast<int>(r->tokens.size()) + k - 1)) continue;
        reserved.emplace_back(r, before);
        j.target_kv = &target_kv_;
        j.target_blocks = sched.kv().block_table(r->id);
        j.target_copies = sched.take_kv_copies();
      }
      jobs.push_back(std::move(j));
      owners.push_back(r);
    }
    if (jobs.empty()) continue;
    if (mode == SpecMode::kDraft) {
      // Further draft passes only while they pay at this batch size (DraftModelProposer::PassBudget).
      DraftModelProposer::PassBudget budget;
      if (cfg_.spec_adaptive && policy_.target_cost().measured() && policy_.draft_cost().measured()) {
        const int batch = std::max(1, sched.n_running());
        budget.token_secs = policy_.target_cost().predict(batch) / batch;
        const int v0 = other_tokens + static_cast<int>(cands.size()), dv = 4 * static_cast<int>(jobs.size());
        budget.verify_secs_per_token =
            std::max(0.0, (policy_.target_cost().predict(v0 + dv) - policy_.target_cost().predict(v0)) / dv);
        budget.pass_secs = [this](int n) { return policy_.draft_time(n); };
      }
      draft_->set_pass_budget(std::move(budget));
    }
    const Status proposed = proposer(mode)->propose(jobs);
    for (auto [r, before] : reserved) sched.rollback(r, before);  // schedule() makes room for the verify
    CACHET_RETURN_IF_ERROR(proposed);
    if (mode == SpecMode::kDraft || mode == SpecMode::kMtp)
      for (auto [tokens, secs] : mode == SpecMode::kDraft ? draft_->last_passes() : mtp_->last_passes()) {
        policy_.observe_draft(tokens, secs);
        // A pass carrying more than a few tokens per request is mostly catch-up prefill.
        if (tokens > 4 * static_cast<int>(jobs.size())) catch_up_secs_ += secs;
        if (std::getenv("CACHET_SPEC_DEBUG")) std::fprintf(stderr, "[spec] draft pass %d tokens %.2f ms\n", tokens, secs * 1e3);
      }
    for (size_t i = 0; i < jobs.size(); ++i) {
      EngineRequest* r = owners[i];
      if (jobs[i].draft.empty()) continue;
      drafted_.emplace_back(r, static_cast<int>(r->tokens.size()));
      r->tokens.insert(r->tokens.end(), jobs[i].draft.begin(), jobs[i].draft.end());
      r->n_draft = static_cast<int>(jobs[i].draft.size());
      r->draft_q = std::move(jobs[i].q);
    }
  }
  return Status::ok();
}

void Speculator::drop_unverified(const std::function<bool(const EngineRequest*)>& verified) {
  for (auto [r, len] : drafted_)
    if (r->n_draft == 0 || !verified(r)) drop_draft(r, len);
  drafted_.clear();
}

void Speculator::observe_step(int n_running, bool drafted, int emitted, double secs) {
  if (cfg_.spec_adaptive && (cfg_.spec != SpecMode::kOff || draft_))
    policy_.observe_step(n_running, drafted, emitted, secs - catch_up_secs_);
}

void Speculator::drop_draft(EngineRequest* r, int n_accepted_tokens) {
  r->tokens.resize(n_accepted_tokens);
  r->n_draft = 0;
  r->draft_q.clear();
  if (Proposer* p = proposer(r->spec)) p->truncate(r->id, n_accepted_tokens);
}

Result<bool> Speculator::verify(EngineRequest* r, const float* rows, int n_rows, Scheduler& sched,
                                const std::function<bool(const SampleResult&)>& emit) {
  const int64_t V = target_.config().n_vocab;
  const int len = static_cast<int>(r->tokens.size()) - r->n_draft;  // accepted tokens before this step
  const std::vector<int32_t> draft(r->tokens.begin() + len, r->tokens.end());
  const std::vector<TokenDist> q = std::move(r->draft_q);
  r->tokens.resize(len);
  r->n_draft = 0;
  r->draft_q.clear();
  const int m = n_rows - 1;  // draft tokens the pass computed (fewer than drafted when the token budget cut it)
  const bool greedy = r->params.temperature <= 0.0f;
  int accepted = 0;
  bool done = false;
  for (int i = 0; i <= m && !done; ++i) {
    const float* row = rows + static_cast<size_t>(i) * V;
    if (cfg_.on_logits) cfg_.on_logits(r->id, row, V);
    SampleResult s;
    bool rejected = false;
    if (i < m) {
      CACHET_ASSIGN_OR_RETURN(const TokenDist* p, r->sampler->distribution(row, V, r->tokens, r->n_prompt));
      const double u_accept = greedy ? 0.0 : r->sampler->next_uniform();
      const double u_resample = greedy ? 0.0 : r->sampler->next_uniform();
      const Verdict v = verify_draft_token(*p, q.empty() ? nullptr : &q[i], draft[i], u_accept, u_resample);
      s.id = v.token;
      r->sampler->fill_logprobs(row, V, &s);
      accepted += v.accepted;
      rejected = !v.accepted;
    } else {
      // Every computed draft token passed: the next token comes from the target's row (the bonus token).
      CACHET_ASSIGN_OR_RETURN(s, r->sampler->sample(row, V, r->tokens, r->n_prompt));
    }
    done = emit(s);
    if (rejected) break;
  }
  draft_tokens_ += m;
  accepted_tokens_ += accepted;
  r->spec_drafted += m;
  r->spec_accepted += accepted;
  if (m > 0) {
    r->acceptance.add(m, accepted);
    mode_acceptance_[static_cast<int>(r->spec)].add(m, accepted);
  }
  // K/V is valid for the accepted tokens; the positions of rejected (or never verified) draft tokens go back.
  sched.rollback(r, len + accepted);
  if (Proposer* p = proposer(r->spec)) p->truncate(r->id, len + accepted);
  return done;
}

}  // namespace cachet
