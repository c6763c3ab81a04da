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
  SchedulerConfig sc;
  sc.block_size = cfg_.block_size;
  sc.n_blocks = cfg_.n_blocks;
  sc.max_batch_tokens = cfg_.max_batch_tokens;
  sc.prefill_chunk = cfg_.prefill_chunk;
  sc.max_running = cfg_.max_running;
  sc.prefix_cache = cfg_.prefix_cache;
  scheduler_ = std::make_unique<Scheduler>(sc, [this](BlockId a, BlockId b, int n) { storage_->copy_block(a, b, n); });
}

Engine::~Engine() {
  scheduler_.reset();  // releases the requests' locks and the tree's blocks while the requests still exist
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
  r->view = std::make_unique<PagedKvSequence>(*storage_, scheduler_->kv(), r->id);
  scheduler_->add(r.get());
  const RequestId id = r->id;
  next_id_ += n - 1;  // the samples' ids
  requests_.emplace(id, std::move(r));
  return id;
}

void Engine::abort(RequestId id) {
  if (requests_.count(id)) aborted_.push_back(id);
}

void Engine::finish(Request* r) {
  scheduler_->finish(r);
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

  const std::vector<ScheduledWork> work = scheduler_->schedule();
  if (work.empty()) return events;

  // One forward pass over every scheduled token.
  ForwardBatch b;
  std::vector<Request*> sampled;
  for (const ScheduledWork& w : work) {
    Request* r = static_cast<Request*>(w.r);
    const int seq = static_cast<int>(b.seqs.size());
    b.seqs.push_back(r->view.get());
    for (int k = 0; k < w.n; ++k) {
      const int pos = r->num_computed + k;
      b.token_ids.push_back(r->tokens[pos]);
      b.positions.push_back(pos);
      b.seq_index.push_back(seq);
      const bool last = pos + 1 == static_cast<int>(r->tokens.size());
      b.want_logits.push_back(last);
      if (last) sampled.push_back(r);
    }
  }
  const int64_t V = model_.config().n_vocab;
  logits_.resize(sampled.size() * V);
  CACHET_RETURN_IF_ERROR(model_.forward(b, logits_.data()));
  scheduler_->computed(work);

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
      c->view = std::make_unique<PagedKvSequence>(*storage_, scheduler_->kv(), c->id);
      c->cache_ns = r->cache_ns;
      c->cached_tokens = r->cached_tokens;
      scheduler_->fork(r, c.get());
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
  return c;
}

int Engine::blocks_held_by_requests() const { return scheduler_->blocks_held_by_requests(); }

std::string Engine::check() const { return scheduler_->check(); }

}  // namespace cachet
