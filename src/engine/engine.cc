#include "engine/engine.h"

#include <algorithm>

#include "base/check.h"

namespace cachet {

Engine::Engine(Model& model, EngineConfig cfg) : model_(model), cfg_(cfg) {
  const ModelConfig& c = model.config();
  if (cfg_.n_blocks <= 0) {
    const int64_t per_block = c.kv_bytes_per_token(cfg_.kv_type == DType::kF32 ? 4 : 2) * cfg_.block_size;
    cfg_.n_blocks = static_cast<int>(std::max<int64_t>(1, cfg_.kv_memory_bytes / per_block));
  }
  // Attention tiles are 16 positions; blocks must hold whole tiles (docs/decisions.md).
  CACHET_CHECK(cfg_.block_size % 16 == 0);
  storage_ = std::make_unique<KvBlockStorage>(c, cfg_.n_blocks, cfg_.block_size, cfg_.kv_type);
  manager_ = std::make_unique<KvCacheManager>(cfg_.n_blocks, cfg_.block_size,
                                              [this](BlockId a, BlockId b, int n) { storage_->copy_block(a, b, n); });
  if (cfg_.prefix_cache) radix_ = std::make_unique<RadixCache>(manager_->shared_pool(), cfg_.block_size);
}

Engine::~Engine() {
  for (auto& [id, r] : requests_)
    if (r->cache_node) radix_->unlock(r->cache_node);
  radix_.reset();  // gives the tree's references back before the pool goes
}

Result<RequestId> Engine::add_request(std::vector<int32_t> prompt, const SamplingParams& params,
                                      std::vector<int32_t> stop_ids, bool stop_at_eos, int n, uint64_t cache_ns) {
  if (n < 1 || n > 128) return invalid_argument("n must be in 1..128, got " + std::to_string(n));
  const ModelConfig& c = model_.config();
  CACHET_RETURN_IF_ERROR(params.validate(c.n_vocab));
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= c.n_vocab) return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary");
  const int64_t max_len = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  const int64_t blocks = (max_len + cfg_.block_size - 1) / cfg_.block_size +
                         (n - 1) * ((params.max_tokens + cfg_.block_size - 1) / cfg_.block_size + 1);
  if (blocks > cfg_.n_blocks)
    return resource_exhausted("the request needs up to " + std::to_string(blocks) + " KV blocks (" +
                              std::to_string(max_len) + " tokens) but the pool has " +
                              std::to_string(cfg_.n_blocks) + " in all: it can never fit");
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->n_prompt = static_cast<int>(prompt.size());
  r->tokens = std::move(prompt);
  r->params = params;
  r->sampler = std::make_unique<Sampler>(params);
  r->stop_ids = std::move(stop_ids);
  r->stop_at_eos = stop_at_eos;
  r->n_forks = n - 1;
  r->cache_ns = cache_ns;
  r->view = std::make_unique<PagedKvSequence>(*storage_, *manager_, r->id);
  waiting_.push_back(r.get());
  const RequestId id = r->id;
  next_id_ += n - 1;  // the samples' ids
  requests_.emplace(id, std::move(r));
  return id;
}

void Engine::abort(RequestId id) {
  if (requests_.count(id)) aborted_.push_back(id);
}

void Engine::take_cached_prefix(Request* r) {
  if (!radix_ || manager_->has(r->id)) return;
  // The last token is always computed (its logits are what the request samples from).
  const int n = static_cast<int>(r->tokens.size());
  RadixCache::Match m = radix_->match(r->cache_ns, r->tokens.data(), n, (n - 1) / cfg_.block_size);
  if (!m.last) return;
  radix_->lock(m.last);
  r->cache_node = m.last;
  manager_->adopt(r->id, m.blocks);
  r->num_computed = m.n_tokens;
  if (r->cached_tokens == 0) r->cached_tokens = m.n_tokens;
}

void Engine::release(Request* r) {
  if (radix_ && manager_->has(r->id)) {
    const int full = r->num_computed / cfg_.block_size;  // only whole blocks of computed tokens
    radix_->insert(r->cache_ns, r->tokens.data(), full * cfg_.block_size, manager_->block_table(r->id).data());
  }
  if (r->cache_node) radix_->unlock(r->cache_node);
  r->cache_node = nullptr;
  manager_->free(r->id);
}

bool Engine::make_room(int n) {
  const int short_by = n - manager_->pool().n_free();
  if (short_by > 0 && radix_) radix_->evict(short_by);
  return manager_->pool().can_allocate(n);
}

void Engine::preempt(Request* r) {
  release(r);
  r->num_computed = 0;  // recompute: its tokens (prompt and output so far) are prefilled again
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_front(r);
  ++preemptions_;
}

void Engine::finish(Request* r) {
  release(r);
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
  requests_.erase(r->id);
}

Result<std::vector<RequestEvent>> Engine::step() {
  std::vector<RequestEvent> events;
  for (RequestId id : aborted_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    events.push_back({id, -1, RequestFinish::kAborted, 0.0f, {}, it->second->cached_tokens});
    finish(it->second.get());
  }
  aborted_.clear();

  // Schedule. Running requests first (oldest first), preempting the youngest when blocks run short.
  struct Work {
    Request* r;
    int n;
  };
  std::vector<Work> work;
  int budget = cfg_.max_batch_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int n = std::min({static_cast<int>(r->tokens.size()) - r->num_computed, cfg_.prefill_chunk, budget});
    const int grow = r->num_computed + n - manager_->num_tokens(r->id);
    if (manager_->can_append(r->id, grow) || make_room(manager_->blocks_to_append(r->id, grow))) {
      manager_->append(r->id, r->num_computed + n - manager_->num_tokens(r->id));
      work.push_back({r, n});
      budget -= n;
      ++i;
      continue;
    }
    Request* victim = running_.back();
    const bool self = victim == r;
    // Undo any work already scheduled for the victim before preempting it.
    work.erase(std::remove_if(work.begin(), work.end(), [&](const Work& w) {
                 if (w.r == victim) budget += w.n;
                 return w.r == victim;
               }),
               work.end());
    preempt(victim);
    if (self) continue;  // r itself was the youngest: running_[i] is now the next request
  }
  // Admit waiting requests while the budget and the blocks allow.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_running) {
    Request* r = waiting_.front();
    take_cached_prefix(r);
    const int n = std::min({static_cast<int>(r->tokens.size()) - r->num_computed, cfg_.prefill_chunk, budget});
    if (!manager_->can_append(r->id, n) && !make_room(manager_->blocks_to_append(r->id, n))) {
      if (r->cache_node) {  // give the prefix back: it waits holding nothing
        radix_->unlock(r->cache_node);
        r->cache_node = nullptr;
      }
      manager_->free(r->id);
      r->num_computed = 0;
      break;
    }
    manager_->append(r->id, n);
    waiting_.pop_front();
    running_.push_back(r);
    work.push_back({r, n});
    budget -= n;
  }
  if (work.empty()) return events;

  // One forward pass over every scheduled token.
  ForwardBatch b;
  std::vector<Request*> sampled;
  for (const Work& w : work) {
    const int seq = static_cast<int>(b.seqs.size());
    b.seqs.push_back(w.r->view.get());
    for (int k = 0; k < w.n; ++k) {
      const int pos = w.r->num_computed + k;
      b.token_ids.push_back(w.r->tokens[pos]);
      b.positions.push_back(pos);
      b.seq_index.push_back(seq);
      const bool last = pos + 1 == static_cast<int>(w.r->tokens.size());
      b.want_logits.push_back(last);
      if (last) sampled.push_back(w.r);
    }
  }
  const int64_t V = model_.config().n_vocab;
  logits_.resize(sampled.size() * V);
  CACHET_RETURN_IF_ERROR(model_.forward(b, logits_.data()));
  for (const Work& w : work) w.r->num_computed += w.n;

  // Sample, append, and retire finished requests.
  const SpecialTokens& sp = model_.special_tokens();
  std::vector<std::pair<Request*, const float*>> to_sample;
  for (size_t i = 0; i < sampled.size(); ++i) {
    Request* r = sampled[i];
    to_sample.emplace_back(r, logits_.data() + i * V);
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
      c->stop_ids = r->stop_ids;
      c->stop_at_eos = r->stop_at_eos;
      c->view = std::make_unique<PagedKvSequence>(*storage_, *manager_, c->id);
      c->cache_ns = r->cache_ns;
      c->cached_tokens = r->cached_tokens;
      manager_->fork(r->id, c->id);
      running_.push_back(c.get());
      to_sample.emplace_back(c.get(), logits_.data() + i * V);
      requests_.emplace(c->id, std::move(c));
    }
    r->n_forks = 0;
  }
  for (auto [r, row] : to_sample) {
    if (cfg_.on_logits) cfg_.on_logits(r->id, row, V);
    CACHET_ASSIGN_OR_RETURN(SampleResult s, r->sampler->sample(row, V, r->tokens, r->n_prompt));
    r->tokens.push_back(s.id);
    RequestEvent ev{r->id, s.id, RequestFinish::kNone, s.logprob, std::move(s.top), r->cached_tokens};
    const bool stop = (r->stop_at_eos && sp.eos && s.id == *sp.eos) ||
                      std::find(r->stop_ids.begin(), r->stop_ids.end(), s.id) != r->stop_ids.end();
    if (stop) ev.finish = RequestFinish::kStop;
    else if (static_cast<int>(r->tokens.size()) - r->n_prompt >= r->params.max_tokens) ev.finish = RequestFinish::kLength;
    events.push_back(ev);
    if (ev.finish != RequestFinish::kNone) finish(r);
  }
  return events;
}

EngineCounters Engine::counters() const {
  EngineCounters c;
  c.blocks_total = manager_->pool().n_total();
  c.blocks_used = manager_->pool().n_used();
  for (const Request* r : running_) c.tokens_stored += r->num_computed;
  c.preemptions = preemptions_;
  c.running = static_cast<int>(running_.size());
  c.waiting = static_cast<int>(waiting_.size());
  if (radix_) {
    c.blocks_cached = radix_->cached_blocks();
    c.prefix_queries = radix_->queries();
    c.prefix_query_tokens = radix_->query_tokens();
    c.prefix_hit_tokens = radix_->hit_tokens();
  }
  return c;
}

int Engine::blocks_held_by_requests() const {
  std::vector<uint8_t> held(manager_->pool().n_total(), 0);
  for (const auto& [id, r] : requests_)
    for (BlockId b : manager_->block_table(id)) held[b] = 1;
  return static_cast<int>(std::count(held.begin(), held.end(), 1));
}

std::string Engine::check() const {
  std::string err = manager_->check([this](BlockId b) { return radix_ && radix_->holds(b) ? 1 : 0; });
  if (radix_) err += radix_->check();
  return err;
}

}  // namespace cachet
