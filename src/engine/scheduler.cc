#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace cachet {

Scheduler::Scheduler(SchedulerConfig cfg) : cfg_(cfg), manager_(cfg.n_blocks, cfg.block_size) {
  if (cfg_.prefix_cache) radix_ = std::make_unique<RadixCache>(manager_.shared_pool(), cfg_.block_size);
}

Scheduler::~Scheduler() {
  // The tree's references go back before the manager's pool handle does. Requests are the caller's and may be gone
  // already, so their locks are not touched: a lock only keeps a node from eviction, and the tree ends here.
  radix_.reset();
}

void Scheduler::take_cached_prefix(SchedRequest* r) {
  if (!radix_ || !r->reuse_prefix || manager_.has(r->id)) return;
  // The last token is always computed: its logits are what the request samples from.
  const int n = static_cast<int>(r->tokens.size());
  int max_blocks = (n - 1) / cfg_.block_size;
  RadixCache::Match m = radix_->match(r->cache_ns, r->tokens.data(), n, max_blocks, cfg_.state_checkpoints);
  // An image's K/V hold its rows seen both ways: a match ending inside one is cut back to before it.
  for (bool cut = true; cut && m.last;) {
    cut = false;
    for (auto [b, e] : r->images)
      if (b < m.n_tokens && m.n_tokens < e) {
        max_blocks = b / cfg_.block_size;
        m = radix_->match(r->cache_ns, r->tokens.data(), n, max_blocks, cfg_.state_checkpoints);
        cut = true;
        break;
      }
  }
  r->branch_tokens = m.kv_tokens;
  if (!m.last) return;
  r->resume_state = m.checkpoint;
  radix_->lock(m.last);
  r->cache_node = m.last;
  manager_.adopt(r->id, m.blocks);
  r->num_computed = m.n_tokens;
  if (r->cached_tokens == 0) r->cached_tokens = m.n_tokens;
}

int Scheduler::fit_images(const SchedRequest* r, int n) {
  const int from = r->num_computed, to = from + n;
  for (size_t k = 0; k < r->images.size(); ++k) {
    const auto [b, e] = r->images[k];
    if (e <= from || b >= to) continue;
    if (k < r->image_ready.size() && !r->image_ready[k]) return b > from ? b - from : 0;
    if (to < e) return b > from ? b - from : e - from;
  }
  return n;
}

void Scheduler::release(SchedRequest* r) {
  if (radix_ && manager_.has(r->id) && !r->whole) {
    const int full = r->num_computed / cfg_.block_size;  // only whole blocks of computed tokens
    radix_->insert(r->cache_ns, r->tokens.data(), full * cfg_.block_size, manager_.block_table(r->id).data());
  }
  if (r->cache_node) radix_->unlock(r->cache_node);
  r->cache_node = nullptr;
  manager_.free(r->id);
}

bool Scheduler::make_room(int n) {
  const int short_by = n - manager_.pool().n_free();
  if (short_by > 0 && radix_) radix_->evict(short_by);
  return manager_.pool().can_allocate(n);
}

void Scheduler::preempt(SchedRequest* r) {
  release(r);
  r->tokens.resize(r->tokens.size() - r->n_draft);  // a draft is proposed again when it runs again
  r->n_draft = 0;
  r->num_computed = 0;  // recompute: its tokens (prompt and output so far) are prefilled again
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_front(r);
  ++preemptions_;
}

void Scheduler::rollback(SchedRequest* r, int n_tokens) {
  n_tokens = std::min(n_tokens, manager_.num_tokens(r->id));
  manager_.truncate(r->id, n_tokens);
  r->num_computed = std::min(r->num_computed, n_tokens);
}

bool Scheduler::reserve(SchedRequest* r, int n_tokens) {
  const int grow = n_tokens - manager_.num_tokens(r->id);
  return grow <= 0 || manager_.append(r->id, grow);
}

void Scheduler::finish(SchedRequest* r) {
  release(r);
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r), waiting_.end());
}

void Scheduler::fork(SchedRequest* parent, SchedRequest* child) {
  manager_.fork(parent->id, child->id);
  running_.push_back(child);
}

std::vector<ScheduledWork> Scheduler::schedule() {
  std::vector<ScheduledWork> work;
  int budget = cfg_.max_batch_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SchedRequest* r = running_[i];
    const int n =
        fit_images(r, std::min({static_cast<int>(r->tokens.size()) - r->num_computed, cfg_.prefill_chunk, budget}));
    if (n == 0) {  // waiting at an image its encoder has not finished
      ++i;
      continue;
    }
    const int grow = r->num_computed + n - manager_.num_tokens(r->id);
    if (manager_.can_append(r->id, grow) || make_room(manager_.blocks_to_append(r->id, grow))) {
      manager_.append(r->id, grow);
      work.push_back({r, n});
      budget -= n;
      ++i;
      continue;
    }
    SchedRequest* victim = running_.back();
    const bool self = victim == r;
    // Undo any work already scheduled for the victim before preempting it.
    work.erase(std::remove_if(work.begin(), work.end(), [&](const ScheduledWork& w) {
                 if (w.r == victim) budget += w.n;
                 return w.r == victim;
               }),
               work.end());
    preempt(victim);
    if (self) continue;  // r itself was the youngest: running_[i] is now the next request
  }
  // Admit waiting requests while the budget and the blocks allow.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_running) {
    SchedRequest* r = waiting_.front();
    take_cached_prefix(r);
    const int left = static_cast<int>(r->tokens.size()) - r->num_computed;
    const int n = r->whole ? left : fit_images(r, std::min({left, cfg_.prefill_chunk, budget}));
    if (!manager_.can_append(r->id, n) && !make_room(manager_.blocks_to_append(r->id, n))) {
      if (r->cache_node) {  // give the prefix back: it waits holding nothing
        radix_->unlock(r->cache_node);
        r->cache_node = nullptr;
      }
      r->resume_state = -1;
      manager_.free(r->id);
      r->num_computed = 0;
      break;
    }
    manager_.append(r->id, n);
    waiting_.pop_front();
    running_.push_back(r);
    if (n > 0) work.push_back({r, n});  // none: its prompt opens with an image still being encoded
    budget -= n;
  }
  return work;
}

void Scheduler::computed(const std::vector<ScheduledWork>& work) {
  for (const ScheduledWork& w : work) w.r->num_computed += w.n;
}

int Scheduler::blocks_held_by_requests() const {
  std::vector<uint8_t> held(manager_.pool().n_total(), 0);
  for (const auto* q : {&running_})
    for (const SchedRequest* r : *q)
      for (BlockId b : manager_.block_table(r->id)) held[b] = 1;
  for (const SchedRequest* r : waiting_)
    for (BlockId b : manager_.block_table(r->id)) held[b] = 1;
  return static_cast<int>(std::count(held.begin(), held.end(), 1));
}

std::string Scheduler::check() const {
  std::string err = manager_.check([this](BlockId b) { return radix_ && radix_->holds(b) ? 1 : 0; });
  if (radix_) err += radix_->check();
  return err;
}

}  // namespace cachet
