#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "base/check.h"

namespace cachet {

Result<std::unique_ptr<Engine>> Engine::create(Model& model, EngineConfig cfg) {
  if (cfg.draft_model && cfg.draft_model->config().n_vocab != model.config().n_vocab)
    return invalid_argument("the draft model's vocabulary has " + std::to_string(cfg.draft_model->config().n_vocab) +
                            " tokens but the target's has " + std::to_string(model.config().n_vocab) +
                            ": a draft must share the target's tokenizer");
  CACHET_RETURN_IF_ERROR(kv_types_fit(model.config(), cfg.kv_type));
  if (cfg.draft_model) CACHET_RETURN_IF_ERROR(kv_types_fit(cfg.draft_model->config(), cfg.kv_type));
  if (cfg.spec == SpecMode::kDraft && !cfg.draft_model)
    return invalid_argument("speculation with a draft model needs a draft model");
  if (cfg.spec == SpecMode::kMtp && !cfg.mtp_model)
    return invalid_argument("speculation with the model's MTP head needs the head loaded (LoadOptions::mtp_head)");
  if (cfg.mtp_model) CACHET_RETURN_IF_ERROR(kv_types_fit(cfg.mtp_model->config(), cfg.kv_type));
  if (cfg.draft_max < 1 || cfg.draft_max > 64)
    return invalid_argument("draft_max must be in 1..64, got " + std::to_string(cfg.draft_max));
  if (cfg.block_size <= 0 || cfg.block_size % 16 != 0)
    return invalid_argument("the KV block size must be a positive multiple of 16, got " +
                            std::to_string(cfg.block_size));
  if (cfg.state_checkpoint_every < 0 || cfg.state_checkpoint_every % cfg.block_size != 0)
    return invalid_argument("state checkpoints every N tokens: N must be 0 or a multiple of the block size (" +
                            std::to_string(cfg.block_size) + "), got " + std::to_string(cfg.state_checkpoint_every));
  if (cfg.vision) CACHET_RETURN_IF_ERROR(projector_fits(model, cfg.vision->config()));
  std::unique_ptr<Engine> e(new Engine(model, std::move(cfg)));
  CACHET_ASSIGN_OR_RETURN(e->spec_, Speculator::create(model, *e->storage_, e->cfg_));
  return e;
}

Engine::Engine(Model& model, EngineConfig cfg) : model_(model), cfg_(cfg) {
  const ModelConfig& c = model.config();
  if (cfg_.n_blocks <= 0) {
    // The chosen K and V types size the pool: a fixed --kv-memory holds more tokens when they are smaller.
    int64_t per_block = 0;
    for (int kl = 0; kl < static_cast<int>(c.n_kv_layers()); ++kl)
      per_block += static_cast<int64_t>(cfg_.kv_type.row_bytes(c.kv_dim_of_kv_layer(kl))) * cfg_.block_size;
    cfg_.n_blocks = static_cast<int>(std::max<int64_t>(1, cfg_.kv_memory_bytes / per_block));
  }
  // Attention tiles are 16 positions; blocks must hold whole tiles (docs/decisions.md).
  CACHET_CHECK(cfg_.block_size % 16 == 0);
  storage_ = std::make_unique<KvBlockStorage>(c, cfg_.n_blocks, cfg_.block_size, cfg_.kv_type);
  if (c.n_recurrent_layers() > 0) {
    // A hybrid model: one recurrent state per running sequence, the slots sized like the KV pool (a quarter of
    // its budget again, at least one); they bound the running sequences. With the prefix cache, as many again
    // (at least two) for state checkpoints: a cached KV prefix alone cannot restore a recurrent state, so a
    // prefix is reused only up to a checkpoint (docs/hybrid.md).
    const int64_t per_slot = c.state_bytes_per_seq();
    const int64_t slots = std::clamp<int64_t>(cfg_.kv_memory_bytes / 4 / per_slot, 1, cfg_.max_running);
    const int64_t checkpoints = cfg_.prefix_cache ? std::clamp<int64_t>(cfg_.kv_memory_bytes / 4 / per_slot, 2, 4096) : 0;
    // Speculation: the state after each computed draft position, so that a rejection rolls back exactly (a
    // request can also ask for it when the engine's default is off: it then drafts into what is free).
    spec_slots_ = cfg_.spec != SpecMode::kOff || cfg_.draft_model || cfg_.mtp_model ? cfg_.draft_max : 0;
    state_ = std::make_unique<StateStore>(c, static_cast<int>(slots + checkpoints + spec_slots_));
    cfg_.max_running = static_cast<int>(slots);
  }
  SchedulerConfig sc;
  sc.block_size = cfg_.block_size;
  sc.n_blocks = cfg_.n_blocks;
  sc.max_batch_tokens = cfg_.max_batch_tokens;
  sc.prefill_chunk = cfg_.prefill_chunk;
  sc.max_running = cfg_.max_running;
  sc.prefix_cache = cfg_.prefix_cache;
  sc.state_checkpoints = state_ != nullptr;
  scheduler_ = std::make_unique<Scheduler>(sc);
}

Engine::~Engine() {
  scheduler_.reset();  // releases the requests' locks and the tree's blocks while the requests still exist
}

Result<RequestId> Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params,
                                      std::vector<int32_t> stop_ids, bool stop_at_eos, int n, uint64_t cache_ns,
                                      std::optional<SpecMode> spec, std::vector<PromptImage> images) {
  if (n < 1 || n > 128) return invalid_argument("n must be in 1..128, got " + std::to_string(n));
  const SpecMode mode = images.empty() ? spec.value_or(cfg_.spec) : SpecMode::kOff;
  if (mode == SpecMode::kDraft && !spec_->has_draft_model())
    return invalid_argument("speculation with a draft model was asked for, but the engine has no draft model");
  if (mode == SpecMode::kMtp && !spec_->has_mtp())
    return invalid_argument("speculation with the model's MTP head was asked for, but the engine has no MTP head");
  const ModelConfig& c = model_.config();
  if (!c.causal)
    return invalid_argument("this model attends both ways (an encoder or embedding model): it embeds and ranks, it "
                            "does not generate text");
  CACHET_RETURN_IF_ERROR(params.validate(c.n_vocab));
  if (params.grammar && params.grammar->vocab_size() < c.n_vocab)
    return invalid_argument("the grammar was compiled for another vocabulary (" +
                            std::to_string(params.grammar->vocab_size()) + " tokens, the model has " +
                            std::to_string(c.n_vocab) + ")");
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  auto r = std::make_unique<Request>();
  r->tokens = std::move(prompt);
  CACHET_RETURN_IF_ERROR(set_images(r.get(), std::move(images)));  // the image rows' ids, before the check
  size_t img = 0;  // the image whose rows are at or past the position
  for (int pos = 0; pos < static_cast<int>(r->tokens.size()); ++pos) {
    while (img < r->images.size() && r->images[img].second <= pos) ++img;
    if (img < r->images.size() && r->images[img].first <= pos) continue;
    if (const int32_t t = r->tokens[static_cast<size_t>(pos)]; t < 0 || t >= c.n_vocab)
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary");
  }
  const int64_t max_len = static_cast<int64_t>(r->tokens.size()) + params.max_tokens;
  const int64_t blocks = (max_len + cfg_.block_size - 1) / cfg_.block_size +
                         (n - 1) * ((params.max_tokens + cfg_.block_size - 1) / cfg_.block_size + 1);
  if (blocks > cfg_.n_blocks)
    return resource_exhausted("the request needs up to " + std::to_string(blocks) + " KV blocks (" +
                              std::to_string(max_len) + " tokens) but the pool has " +
                              std::to_string(cfg_.n_blocks) + " in all: it can never fit");
  r->id = next_id_++;
  r->n_prompt = static_cast<int>(r->tokens.size());
  r->params = params;
  r->sampler = std::make_unique<Sampler>(params);
  if (params.grammar) r->matcher = params.grammar->matcher(cfg_.draft_max + 1);
  r->stop_ids = std::move(stop_ids);
  r->stop_at_eos = stop_at_eos;
  r->n_forks = n - 1;
  r->cache_ns = cache_ns;
  r->spec = mode;
  scheduler_->add(r.get());
  const RequestId id = r->id;
  next_id_ += n - 1;  // the samples' ids
  requests_.emplace(id, std::move(r));
  return id;
}

Pooling Engine::rows_pooled(Pooling p) const {
  if (p != Pooling::kRank) return p;
  const ModelConfig& c = model_.config();
  if (c.rank_input.empty()) return c.causal ? Pooling::kLast : Pooling::kCls;
  return *pooling_from_name(c.rank_input);
}

Result<RequestId> Engine::add_embedding(std::vector<int32_t> prompt, Pooling pooling, uint64_t cache_ns) {
  const ModelConfig& c = model_.config();
  if (prompt.empty()) return invalid_argument("the input is empty");
  if (pooling == Pooling::kRank && model_.pooled_dim(pooling) == 0)
    return invalid_argument("rank pooling needs a reranker: this model's file has no classifier head (cls.output)");
  if (!c.causal && static_cast<int64_t>(prompt.size()) > c.n_ctx_train)
    return invalid_argument("the input has " + std::to_string(prompt.size()) + " tokens, more than the model's " +
                            "context of " + std::to_string(c.n_ctx_train));
  for (int32_t t : prompt)
    if (t < 0 || t >= c.n_vocab) return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary");
  const int64_t blocks = (static_cast<int64_t>(prompt.size()) + cfg_.block_size - 1) / cfg_.block_size;
  if (blocks > cfg_.n_blocks)
    return resource_exhausted("the input needs " + std::to_string(blocks) + " KV blocks (" +
                              std::to_string(prompt.size()) + " tokens) but the pool has " +
                              std::to_string(cfg_.n_blocks) + " in all: it can never fit");
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->n_prompt = static_cast<int>(prompt.size());
  r->tokens = std::move(prompt);
  r->params.max_tokens = 0;
  r->cache_ns = cache_ns;
  r->pooling = pooling;
  // A causal model's last token is always computed, the others' states are not kept: only last-token pooling
  // may start from a cached prefix. A bidirectional model's states depend on the whole input: never cached.
  r->reuse_prefix = c.causal && rows_pooled(pooling) == Pooling::kLast;
  r->whole = !c.causal;
  if (pooling != Pooling::kNone) r->pooled.assign(static_cast<size_t>(c.n_embd), 0.0f);
  scheduler_->add(r.get());
  const RequestId id = r->id;
  requests_.emplace(id, std::move(r));
  return id;
}

void Engine::abort(RequestId id) {
  if (requests_.count(id)) aborted_.push_back(id);
}

StateSlot Engine::take_state_slot(Request* r) {
  if (auto s = state_->allocate()) return *s;
  if (RadixCache* rc = scheduler_->prefix_cache(); rc && rc->drop_lru_checkpoint()) {
    reclaim_checkpoints();
    if (auto s = state_->allocate()) return *s;
  }
  const std::vector<SchedRequest*>& running = scheduler_->running();
  for (auto& [id, other] : requests_) {
    if (other.get() == r || !other->state_slot) continue;
    if (std::find(running.begin(), running.end(), other.get()) != running.end()) continue;
    const StateSlot s = *other->state_slot;
    other->state_slot.reset();
    return s;
  }
  CACHET_CHECK(false && "more running sequences than state slots");
  return 0;
}

std::optional<StateSlot> Engine::take_checkpoint_slot(bool evict, const Request* latest_for, int latest_pos) {
  int holders = 0;  // sequences holding a slot; the others that may run each need one left
  for (const auto& [id, q] : requests_) holders += q->state_slot.has_value();
  const int reserve = cfg_.max_running - std::min(holders, cfg_.max_running) + spec_slots_;
  RadixCache* rc = scheduler_->prefix_cache();
  if (state_->n_free() <= reserve) release_shadowed_checkpoints(latest_for, latest_pos);
  if (evict && state_->n_free() <= reserve && rc->drop_lru_checkpoint()) reclaim_checkpoints();
  if (state_->n_free() <= reserve) return std::nullopt;
  return state_->allocate();
}

// A running conversation's prompt-end (and every-N) snapshots serve only prompts that leave its path before
// the answer's latest boundary; once that one is taken, the tree would drop them first anyway when the request
// ends (a deeper checkpoint lies on their only path on). Held until then, 8 agents' pending pairs took the
// slots of other conversations' resume points, which then recomputed their whole last turn or more.
void Engine::release_shadowed_checkpoints(const Request* latest_for, int latest_pos) {
  for (auto& [id, q] : requests_) {
    int latest = q.get() == latest_for ? latest_pos : 0;
    for (const auto& c : q->ckpts)
      if (c.kind == kLatest) latest = std::max(latest, c.pos);
    if (latest == 0) continue;
    std::erase_if(q->ckpts, [&](const Request::PendingCheckpoint& c) {
      const bool shadowed = (c.kind == kPromptEnd || c.kind == kEvery) && c.pos < latest;
      if (shadowed) state_->free(c.slot);
      return shadowed;
    });
  }
}

std::optional<StateSlot> Engine::take_spare_slot() {
  int holders = 0;
  for (const auto& [id, q] : requests_) holders += q->state_slot.has_value();
  if (state_->n_free() <= cfg_.max_running - std::min(holders, cfg_.max_running)) return std::nullopt;
  return state_->allocate();
}

void Engine::settle_snapshots(Request* r, int last_accepted) {
  const int accepted = r->num_computed - last_accepted - 1;  // the rollback left the accepted drafts computed
  // The prefix cache's latest-boundary checkpoint: a boundary the accepted drafts crossed is one of the
  // snapshots (kept instead of freed) or the slot itself (copied).
  const int bs = cfg_.block_size, latest = r->num_computed / bs * bs;
  int newest = 0;
  for (const auto& c : r->ckpts)
    if (c.kind == kLatest) newest = c.pos;
  const int at = scheduler_->prefix_cache() && latest > newest && latest > r->n_prompt / bs * bs
                     ? latest - 1 - last_accepted  // the snapshot holding the state after token latest - 1
                     : -1;
  StateSlot keep = -1;
  for (int i = 0; i < static_cast<int>(r->spec_snapshots.size()); ++i) {
    const StateSlot s = r->spec_snapshots[static_cast<size_t>(i)];
    if (i == accepted) {
      state_->free(*r->state_slot);
      r->state_slot = s;
    } else if (i == at) {
      keep = s;
    } else {
      state_->free(s);
    }
  }
  r->spec_snapshots.clear();
  if (at >= 0 && at == accepted)
    if (auto slot = take_checkpoint_slot(true, r, latest)) {
      state_->copy(*r->state_slot, *slot);
      keep = *slot;
    }
  if (keep < 0) return;
  std::erase_if(r->ckpts, [this](const Request::PendingCheckpoint& c) {
    if (c.kind == kLatest) state_->free(c.slot);
    return c.kind == kLatest;
  });
  r->ckpts.push_back({kLatest, latest, keep});
}

void Engine::reclaim_checkpoints() {
  if (RadixCache* rc = scheduler_->prefix_cache())
    for (int32_t s : rc->take_dropped_checkpoints()) state_->free(s);
}

void Engine::plan_checkpoints(Request* r, int n, int first, ForwardBatch* b, std::vector<PlannedCheckpoint>* planned) {
  const int bs = cfg_.block_size, from = r->num_computed, to = r->num_computed + n;
  auto has = [r](int pos) {
    return std::any_of(r->ckpts.begin(), r->ckpts.end(), [pos](const auto& c) { return c.pos == pos; });
  };
  auto plan = [&](int kind, int pos) {
    if (pos <= from || pos > to || pos <= 0 || has(pos)) return;
    for (const PlannedCheckpoint& p : *planned)
      if (p.r == r && p.c.pos == pos) return;
    // An every-N point is worth a free slot, not another conversation's checkpoint.
    auto slot = take_checkpoint_slot(kind != kEvery, kind == kLatest ? r : nullptr, pos);
    if (!slot) return;
    b->state_snapshots.emplace_back(first + (pos - 1 - from), *slot);  // the state after token pos - 1
    planned->push_back({r, {kind, pos, *slot}});
  };
  const int prompt_end = r->n_prompt / bs * bs, latest = to / bs * bs;
  if (r->branch_tokens < prompt_end) plan(kBranch, r->branch_tokens);
  if (const int every = cfg_.state_checkpoint_every; every > 0)
    for (int pos = (from / every + 1) * every; pos < prompt_end && pos <= to; pos += every) plan(kEvery, pos);
  plan(kPromptEnd, prompt_end);
  int newest = 0;
  for (const auto& c : r->ckpts)
    if (c.kind == kLatest) newest = c.pos;
  if (latest > newest && latest > prompt_end) plan(kLatest, latest);
}

void Engine::finish(Request* r) {
  if (encoding_id_ == r->id) {  // its image's encoding is dropped
    cfg_.vision->cancel();
    encoding_id_ = 0;
  }
  if (r->state_slot) state_->free(*r->state_slot);
  for (StateSlot s : r->spec_snapshots) state_->free(s);
  spec_->finished(*r);
  scheduler_->finish(r);
  // Its checkpoints go to the prefix cache, whose tree now holds its blocks (or back to the store).
  for (const auto& c : r->ckpts) {
    RadixCache* rc = scheduler_->prefix_cache();
    if (!rc || !rc->attach_checkpoint(r->cache_ns, r->tokens.data(), c.pos, c.slot)) state_->free(c.slot);
  }
  if (state_) reclaim_checkpoints();
  requests_.erase(r->id);
}

Result<std::vector<RequestEvent>> Engine::step() {
  std::vector<RequestEvent> events;
  for (RequestId id : aborted_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    events.push_back({id, std::nullopt, RequestFinish::kAborted, 0.0f, {}, it->second->cached_tokens});
    finish(it->second.get());
  }
  aborted_.clear();

  const auto step_start = std::chrono::steady_clock::now();
  CACHET_RETURN_IF_ERROR(advance_images());
  CACHET_RETURN_IF_ERROR(spec_->propose(*scheduler_));
  const std::vector<ScheduledWork> work = scheduler_->schedule();

  // One forward pass over every scheduled token; logits from each request's last accepted token on (one row,
  // or 1 + its draft's length when it speculates).
  ForwardBatch b;
  b.kv = storage_.get();
  b.copies = scheduler_->take_kv_copies();
  b.state = state_.get();
  std::vector<PlannedCheckpoint> planned;  // hybrid models: state checkpoints this pass writes
  std::vector<std::pair<StateSlot, StateSlot>> snapshot_copies;  // (checkpoint, speculation snapshot) after the pass
  if (state_) reclaim_checkpoints();  // admissions may have evicted checkpointed nodes
  std::vector<std::pair<Request*, int>> row_counts;
  struct PooledRows {
    Request* r;
    int n, row;  // rows of hidden states, the first's index in hidden_
  };
  std::vector<PooledRows> hidden_rows;  // embedding requests
  struct MtpRows {
    Request* r;
    int pos0, n, row;  // positions [pos0, pos0 + n), their first row of hidden_
  };
  std::vector<MtpRows> mtp_rows;  // MTP-speculating requests: every computed token's final hidden state
  bool decode_only = true;  // every scheduled request was caught up (no prompt chunk in the pass)
  for (const ScheduledWork& w : work) {
    Request* r = static_cast<Request*>(w.r);
    const int seq = b.add_sequence(scheduler_->kv().block_table(r->id));
    const int last_accepted = static_cast<int>(r->tokens.size()) - r->n_draft - 1;
    int n_add = w.n;  // tokens of r this pass computes
    if (state_) {
      if (!r->state_slot) r->state_slot = take_state_slot(r);
      b.state_slots.push_back(*r->state_slot);
      if (r->resume_state >= 0) {  // its cached prefix ends at a checkpoint: that state first
        b.state_copies.emplace_back(r->resume_state, *r->state_slot);
        r->resume_state = -1;
      }
      // Checkpoints only up to the last accepted token (a draft token's state may be rolled back).
      const int n_sure = r->n_draft > 0 ? std::min(w.n, last_accepted + 1 - r->num_computed) : w.n;
      if (scheduler_->prefix_cache() && !r->whole) plan_checkpoints(r, n_sure, b.n_tokens(), &b, &planned);
      // Draft tokens: the state after the last accepted token and each computed draft token but the last (which
      // the slot holds), for the rollback; where no slot is left the draft is cut (verified as far as computed).
      const int drafts = r->num_computed + w.n - last_accepted - 1;
      int kept = 0;
      for (; kept < drafts; ++kept) {
        std::optional<StateSlot> s = take_spare_slot();
        if (!s) break;
        r->spec_snapshots.push_back(*s);
        // A checkpoint after the last accepted token (a block boundary) is the same state: copied after the pass
        // (a token has one snapshot slot).
        auto ck = std::find_if(planned.begin(), planned.end(), [&](const PlannedCheckpoint& p) {
          return p.r == r && p.c.pos == last_accepted + 1;
        });
        if (kept == 0 && ck != planned.end()) snapshot_copies.emplace_back(ck->c.slot, *s);
        else b.state_snapshots.emplace_back(b.n_tokens() + last_accepted + kept - r->num_computed, *s);
      }
      n_add = std::min(w.n, last_accepted + 1 + kept - r->num_computed);
    }
    if (r->pooling) {
      // A chunk from position 0: the first, or the request was preempted and starts over.
      if (r->num_computed == 0 && *r->pooling == Pooling::kNone) r->pooled.clear();
      if (r->num_computed == 0 && *r->pooling != Pooling::kNone) std::fill(r->pooled.begin(), r->pooled.end(), 0.0f);
      const int last = static_cast<int>(r->tokens.size()) - 1;
      const Pooling p = rows_pooled(*r->pooling);
      int rows = 0;
      const int first_row = b.n_hidden();
      for (int k = 0; k < w.n; ++k) {
        const int pos = r->num_computed + k;
        b.add_token(r->tokens[pos], pos, seq, false);
        if (p == Pooling::kMean || p == Pooling::kNone || (p == Pooling::kCls && pos == 0) ||
            (p == Pooling::kLast && pos == last)) {
          b.want_hidden_of_last();
          ++rows;
        }
      }
      if (rows > 0) hidden_rows.push_back({r, rows, first_row});
      decode_only = false;
      continue;
    }
    int rows = 0;
    const bool mtp = r->spec == SpecMode::kMtp && spec_->has_mtp();
    if (mtp && n_add > 0) mtp_rows.push_back({r, r->num_computed, n_add, b.n_hidden()});
    const int first = b.n_tokens();
    for (int k = 0; k < n_add; ++k) {
      const int pos = r->num_computed + k;
      b.add_token(r->tokens[pos], pos, seq, pos >= last_accepted);
      if (mtp) b.want_hidden_of_last();
      rows += pos >= last_accepted;
    }
    if (!r->images.empty()) CACHET_RETURN_IF_ERROR(add_image_rows(r, r->num_computed, n_add, first, &b));
    if (rows > 0) row_counts.emplace_back(r, rows);
    decode_only = decode_only && rows == n_add;
  }
  if (!b.embd_row.empty()) b.embd_row.resize(static_cast<size_t>(b.n_tokens()), -1);  // images' rows
  if (!b.attn_end.empty()) b.attn_end.resize(static_cast<size_t>(b.n_tokens()), -1);
  for (int t = static_cast<int>(b.rope_pos.size() / 3); !b.rope_pos.empty() && t < b.n_tokens(); ++t)
    b.rope_pos.insert(b.rope_pos.end(), 3, b.positions[t]);  // text of requests after the last with images
  if (work.empty()) {
    if (!b.copies.empty()) CACHET_RETURN_IF_ERROR(model_.forward(b, nullptr));
    spec_->drop_unverified([](const EngineRequest*) { return false; });
    return events;
  }
  const int64_t V = model_.config().n_vocab;
  logits_.resize(static_cast<size_t>(b.n_logits()) * V);
  const int64_t D = model_.config().n_embd;
  hidden_.resize(static_cast<size_t>(b.n_hidden()) * D);
  // Constrained requests' token masks (they depend only on accepted tokens and drafts, never on this pass's
  // logits): computed beside the forward pass on a thread of their own when a core is free for it; when the
  // forward's pool has every core, a third thread would only preempt its workers (they meet at barriers), so
  // the masks come first, on this thread, in the same step.
  std::future<void> masks;
  std::vector<std::pair<Request*, int>> constrained;
  for (auto [r, n] : row_counts)
    if (r->matcher) constrained.emplace_back(r, n);
  if (!constrained.empty()) {
    if (model_.pool().n_threads() < static_cast<int>(std::thread::hardware_concurrency())) {
      masks = std::async(std::launch::async, [this, &constrained] {
        for (auto [r, n] : constrained) fill_masks(r, n);
      });
    } else {
      model_.pool().parallel_chunks(static_cast<int64_t>(constrained.size()), [this, &constrained](int, int64_t a, int64_t e) {
        for (int64_t i = a; i < e; ++i) fill_masks(constrained[static_cast<size_t>(i)].first, constrained[static_cast<size_t>(i)].second);
      });
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status fwd = model_.forward(b, logits_.data(), hidden_.data());
  if (masks.valid()) masks.get();
  CACHET_RETURN_IF_ERROR(fwd);
  for (auto [src, dst] : snapshot_copies) state_->copy(src, dst);
  for (const PlannedCheckpoint& p : planned) {  // a request's newest latest-boundary checkpoint replaces its older one
    auto& mine = p.r->ckpts;
    if (p.c.kind == kLatest)
      for (auto it = mine.begin(); it != mine.end(); ++it)
        if (it->kind == kLatest) {
          state_->free(it->slot);
          mine.erase(it);
          break;
        }
    mine.push_back(p.c);
  }
  spec_->observe_pass(b.n_tokens(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  scheduler_->computed(work);

  // Embedding requests: their rows of hidden states summed (in position order, so the sum does not depend on
  // the chunking); a request whose every token is computed finishes with its pooled vector.
  // MTP-speculating requests: the head follows the trunk (one batched pass of its own over every such request).
  for (const MtpRows& m : mtp_rows)
    spec_->observe_hidden(*m.r, m.pos0, hidden_.data() + static_cast<size_t>(m.row) * D, m.n);
  if (!mtp_rows.empty()) CACHET_RETURN_IF_ERROR(spec_->catch_up_hidden());
  for (auto [r, n, row] : hidden_rows) {
    const float* hrow = hidden_.data() + static_cast<size_t>(row) * D;
    if (*r->pooling == Pooling::kNone) {  // every row kept, in position order
      r->pooled.insert(r->pooled.end(), hrow, hrow + n * D);
      continue;
    }
    for (int i = 0; i < n; ++i, hrow += D)
      for (int64_t j = 0; j < D; ++j) r->pooled[j] += hrow[j];
  }
  for (const ScheduledWork& w : work) {
    Request* r = static_cast<Request*>(w.r);
    if (!r->pooling || r->num_computed < static_cast<int>(r->tokens.size())) continue;
    if (rows_pooled(*r->pooling) == Pooling::kMean)
      for (float& x : r->pooled) x /= static_cast<float>(r->tokens.size());
    RequestEvent ev{r->id, std::nullopt, RequestFinish::kStop, 0.0f, {}, r->cached_tokens};
    if (*r->pooling == Pooling::kNone) {  // the model's head on each token's row (EmbeddingGemma's projections)
      const int64_t D = model_.config().n_embd;
      ev.embedding.resize(r->pooled.size());
      for (size_t at = 0; at < r->pooled.size(); at += static_cast<size_t>(D))
        CACHET_RETURN_IF_ERROR(model_.pooled_head(r->pooled.data() + at, Pooling::kNone, ev.embedding.data() + at));
    } else {
      ev.embedding.resize(static_cast<size_t>(model_.pooled_dim(*r->pooling)));
      CACHET_RETURN_IF_ERROR(model_.pooled_head(r->pooled.data(), *r->pooling, ev.embedding.data()));
    }
    events.push_back(std::move(ev));
    finish(r);
  }

  // Drafts: verified (accepted prefix, a replacement or bonus token), and those not scheduled dropped.
  std::vector<Rows> rows;
  const float* next_row = logits_.data();
  for (auto [r, n] : row_counts) {
    rows.push_back({r, next_row, n});
    next_row += static_cast<size_t>(n) * V;
  }
  spec_->drop_unverified([&rows](const EngineRequest* r) {
    return std::any_of(rows.begin(), rows.end(), [r](const Rows& x) { return x.r == r; });
  });

  // Masks on constrained rows (each row its own, across the pool); a request whose grammar allows nothing more
  // ends here.
  {
    const size_t W = static_cast<size_t>(GrammarMatcher::mask_words(static_cast<int32_t>(V)));
    std::vector<std::pair<const uint32_t*, float*>> masked;
    for (const Rows& x : rows)
      if (x.r->matcher)
        for (int i = 0; i < x.n; ++i)
          masked.emplace_back(x.r->masks.data() + i * W, const_cast<float*>(x.first) + static_cast<size_t>(i) * V);
    model_.pool().parallel_chunks(static_cast<int64_t>(masked.size()), [&](int, int64_t a, int64_t e) {
      for (auto i = static_cast<size_t>(a); i < static_cast<size_t>(e); ++i)
        apply_token_mask({masked[i].first, W}, masked[i].second, V);
    });
  }
  for (Rows& x : rows) {
    Request* r = x.r;
    if (!r->matcher) continue;
    if (r->allowed_next == 0) {
      events.push_back({r->id, std::nullopt, RequestFinish::kStop, 0.0f, {}, r->cached_tokens});
      finish(r);
      x.r = nullptr;
    }
  }
  std::erase_if(rows, [](const Rows& x) { return x.r == nullptr; });

  // Sample, append, and retire finished requests.
  std::vector<std::pair<Request*, const float*>> to_sample;
  bool step_drafted = false;
  for (const Rows& x : rows) {
    Request* r = x.r;
    step_drafted = step_drafted || r->n_draft > 0;
    if (r->n_draft > 0) {
      const int last_accepted = static_cast<int>(r->tokens.size()) - r->n_draft - 1;
      const size_t first_event = events.size();
      CACHET_ASSIGN_OR_RETURN(const bool done, spec_->verify(r, x.first, x.n, *scheduler_, [&](const SampleResult& s) {
        return emit(r, s, &events);
      }));
      for (size_t i = first_event; i < events.size(); ++i) {
        events[i].spec_drafted = r->spec_drafted;
        events[i].spec_accepted = r->spec_accepted;
      }
      if (state_) settle_snapshots(r, last_accepted);
      if (done) finish(r);
      continue;
    }
    to_sample.emplace_back(r, x.first);
    // n > 1: the prompt is computed once; the samples fork here, sharing its blocks, and draw from the same row.
    for (int k = 1; k <= r->n_forks; ++k) {
      auto c = std::make_unique<Request>();
      c->id = r->id + k;
      c->tokens = r->tokens;
      c->n_prompt = r->n_prompt;
      c->num_computed = r->num_computed;
      c->params = r->params;
      c->params.seed = r->params.seed + static_cast<uint64_t>(k);
      c->sampler = std::make_unique<Sampler>(c->params);
      if (c->params.grammar) c->matcher = c->params.grammar->matcher(cfg_.draft_max + 1);
      c->stop_ids = r->stop_ids;
      c->stop_at_eos = r->stop_at_eos;
      c->cache_ns = r->cache_ns;
      c->cached_tokens = r->cached_tokens;
      c->spec = r->spec;
      c->images = r->images;
      c->prompt_images = r->prompt_images;
      c->image_rows = r->image_rows;
      c->image_ready = r->image_ready;
      if (state_) {  // the sample continues from the prompt's recurrent state
        c->state_slot = take_state_slot(c.get());
        state_->copy(*r->state_slot, *c->state_slot);
      }
      scheduler_->fork(r, c.get());
      to_sample.emplace_back(c.get(), x.first);
      requests_.emplace(c->id, std::move(c));
    }
    r->n_forks = 0;
  }
  // Each request draws from its own row with its own sampler (its own random stream) and advances its own
  // grammar: across the pool, the same bits whatever thread does it; then the tokens go out in order.
  if (cfg_.on_logits)
    for (auto [r, row] : to_sample) cfg_.on_logits(r->id, row, V);
  std::vector<std::optional<Result<SampleResult>>> drawn(to_sample.size());
  std::vector<char> grammar_took(to_sample.size(), 1);
  model_.pool().parallel_chunks(static_cast<int64_t>(to_sample.size()), [&](int, int64_t a, int64_t e) {
    for (auto i = static_cast<size_t>(a); i < static_cast<size_t>(e); ++i) {
      auto [r, row] = to_sample[i];
      drawn[i] = r->sampler->sample(row, V, r->tokens, r->n_prompt);
      if (r->matcher && drawn[i]->is_ok()) grammar_took[i] = r->matcher->accept(drawn[i]->value().id);
    }
  });
  for (size_t i = 0; i < to_sample.size(); ++i) {
    CACHET_RETURN_IF_ERROR(drawn[i]->status());
    if (emit(to_sample[i].first, drawn[i]->value(), &events, grammar_took[i] != 0)) finish(to_sample[i].first);
  }
  // The realized rate of this step, for the speculation policy's guard (decode steps of speculating engines).
  if (decode_only) {
    int emitted = 0;
    for (const RequestEvent& e : events) emitted += e.token.has_value();
    spec_->observe_step(static_cast<int>(work.size()), step_drafted, emitted,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
  }
  return events;
}

void Engine::fill_masks(Request* r, int n) {
  const int32_t V = static_cast<int32_t>(model_.config().n_vocab);
  const size_t W = static_cast<size_t>(GrammarMatcher::mask_words(V));
  r->masks.assign(static_cast<size_t>(n) * W, 0xffffffffu);
  const int last_accepted = static_cast<int>(r->tokens.size()) - r->n_draft - 1;
  int tentative = 0;  // draft tokens the matcher took, taken back below
  for (int i = 0; i < n; ++i) {
    const int64_t allowed = r->matcher->fill_mask({r->masks.data() + i * W, W});
    if (i == 0) r->allowed_next = allowed;
    if (i + 1 == n) break;
    // The draft token at this row: where the grammar refuses it, verification rejects it here (the mask bans
    // it), and later rows are never read.
    if (!r->matcher->accept(r->tokens[static_cast<size_t>(last_accepted + 1 + i)])) break;
    ++tentative;
  }
  r->matcher->rollback(tentative);
}

bool Engine::emit(Request* r, const SampleResult& s, std::vector<RequestEvent>* events,
                  std::optional<bool> grammar_took) {
  const SpecialTokens& sp = model_.special_tokens();
  if (r->matcher && !(grammar_took ? *grammar_took : r->matcher->accept(s.id))) {
    // Only a token outside the mask can get here (the grammar ended and generation goes on past end-of-text):
    // the request ends without it.
    events->push_back({r->id, std::nullopt, RequestFinish::kStop, 0.0f, {}, r->cached_tokens, r->spec_drafted,
                       r->spec_accepted});
    return true;
  }
  r->tokens.push_back(s.id);
  RequestEvent ev{r->id, s.id, RequestFinish::kNone, s.logprob, s.top, r->cached_tokens, r->spec_drafted,
                  r->spec_accepted};
  const auto& eog = cfg_.end_of_generation;
  const bool stop = (r->stop_at_eos && ((sp.eos && s.id == *sp.eos) || std::find(eog.begin(), eog.end(), s.id) != eog.end())) ||
                    std::find(r->stop_ids.begin(), r->stop_ids.end(), s.id) != r->stop_ids.end();
  if (stop) ev.finish = RequestFinish::kStop;
  else if (static_cast<int>(r->tokens.size()) - r->n_prompt >= r->params.max_tokens) ev.finish = RequestFinish::kLength;
  events->push_back(std::move(ev));
  return events->back().finish != RequestFinish::kNone;
}

EngineCounters Engine::counters() const {
  EngineCounters c;
  const KvCacheManager& kv = scheduler_->kv();
  c.blocks_total = kv.pool().n_total();
  c.blocks_used = kv.pool().n_used();
  for (const SchedRequest* r : scheduler_->running()) c.tokens_stored += r->num_computed;
  c.preemptions = scheduler_->preemptions();
  c.running = scheduler_->n_running();
  c.waiting = scheduler_->n_waiting();
  if (const RadixCache* rc = scheduler_->prefix_cache()) {
    c.blocks_cached = rc->cached_blocks();
    c.prefix_queries = rc->queries();
    c.prefix_query_tokens = rc->query_tokens();
    c.prefix_hit_tokens = rc->hit_tokens();
  }
  if (state_) {
    c.state_slots_total = state_->n_slots();
    c.state_slots_used = state_->n_used();
    c.state_bytes_per_slot = state_->bytes_per_slot();
    if (const RadixCache* rc = scheduler_->prefix_cache()) c.state_checkpoints = rc->checkpoints();
  }
  c.spec_draft_tokens = spec_->draft_tokens();
  c.spec_accepted_tokens = spec_->accepted_tokens();
  c.images_encoded = images_encoded_;
  return c;
}

int Engine::blocks_held_by_requests() const { return scheduler_->blocks_held_by_requests(); }

std::string Engine::check() const { return scheduler_->check(); }

int Engine::num_computed(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second->num_computed;
}

std::vector<uint8_t> Engine::kv_contents(RequestId id, int n_positions) const {
  std::vector<uint8_t> out;
  auto it = requests_.find(id);
  if (it == requests_.end()) return out;
  const KvView v{storage_.get(), scheduler_->kv().block_table(id)};
  for (int layer = 0; layer < storage_->n_layers(); ++layer)
    for (int pos = 0; pos < n_positions; ++pos) {
      const size_t k_row = storage_->k_row_bytes(layer), v_row = storage_->v_row_bytes(layer);
      const uint8_t* k = v.k_row(static_cast<int>(layer), pos);
      const uint8_t* val = v.v_row(static_cast<int>(layer), pos);
      out.insert(out.end(), k, k + k_row);
      out.insert(out.end(), val, val + v_row);
    }
  return out;
}

std::vector<uint8_t> Engine::state_contents(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second->state_slot) return {};
  const auto* p = reinterpret_cast<const uint8_t*>(state_->slot_data(*it->second->state_slot));
  return std::vector<uint8_t>(p, p + state_->bytes_per_slot());
}

}  // namespace cachet
