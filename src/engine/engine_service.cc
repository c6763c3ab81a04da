#include "engine/engine_service.h"

#include <unordered_set>

namespace cachet {

bool RequestStream::wait(std::vector<StreamEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty(); });
  if (events_.empty()) return false;
  for (auto& e : events_) out->push_back(std::move(e));
  events_.clear();
  return true;
}

void RequestStream::push(StreamEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

EngineService::EngineService(std::unique_ptr<Engine> engine, int max_waiting)
    : engine_(std::move(engine)), max_waiting_(max_waiting) {
  snapshot_.counters = engine_->counters();
  thread_ = std::thread([this] { loop(); });
}

EngineService::~EngineService() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<std::shared_ptr<RequestStream>> EngineService::submit(std::vector<int32_t> prompt,
                                                             const SamplingParams& params,
                                                             std::vector<int32_t> stop_ids, bool stop_at_eos,
                                                             int n, uint64_t cache_ns, std::optional<SpecMode> spec,
                                                             std::vector<PromptImage> images) {
  auto stream = std::make_shared<RequestStream>(n);
  CACHET_ASSIGN_OR_RETURN(RequestId id, add(std::move(prompt), params, std::move(stop_ids), stop_at_eos, n, cache_ns,
                                            spec, stream, 0, std::move(images)));
  stream->set_first_id(id);
  return stream;
}

Result<RequestId> EngineService::add(std::vector<int32_t> prompt, const SamplingParams& params,
                                     std::vector<int32_t> stop_ids, bool stop_at_eos, int n, uint64_t cache_ns,
                                     std::optional<SpecMode> spec, std::shared_ptr<RequestStream> stream,
                                     int index_base, std::vector<PromptImage> images) {
  Submission sub{std::move(prompt), params, std::move(stop_ids), stop_at_eos, n, cache_ns, spec, std::nullopt,
                 std::move(stream), index_base, {}, std::move(images)};
  return enqueue(sub);
}

Result<RequestId> EngineService::add_embedding(std::vector<int32_t> prompt, Pooling pooling, uint64_t cache_ns,
                                               std::shared_ptr<RequestStream> stream, int index) {
  Submission sub{std::move(prompt), SamplingParams{}, {}, false, 1, cache_ns, std::nullopt, pooling,
                 std::move(stream), index, {}};
  return enqueue(sub);
}

Result<RequestId> EngineService::enqueue(Submission& sub) {
  auto fut = sub.done.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return unavailable("the engine is shutting down");
    const ServiceSnapshot snap = snapshot();
    if (snap.counters.waiting + static_cast<int>(submissions_.size()) >= max_waiting_)
      return resource_exhausted("the request queue is full (" + std::to_string(max_waiting_) +
                                " waiting); retry later");
    submissions_.push_back(&sub);
  }
  cv_.notify_all();
  return fut.get();
}

void EngineService::cancel(const std::shared_ptr<RequestStream>& s, int index) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (int i = 0; i < s->n(); ++i)
      if (index < 0 || i == index) cancels_.push_back(s->first_id() + i);
  }
  cv_.notify_all();
}

void EngineService::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

ServiceSnapshot EngineService::snapshot() const {
  std::lock_guard<std::mutex> lk(snap_mu_);
  return snapshot_;
}

void EngineService::loop() {
  int64_t steps = 0;
  double step_seconds = 0.0;
  for (;;) {
    std::deque<Submission*> subs;
    std::vector<RequestId> cancels;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !submissions_.empty() || !cancels_.empty() || engine_->has_work(); });
      if (stop_) break;
      subs.swap(submissions_);
      cancels.swap(cancels_);
    }
    for (Submission* sub : subs) {
      auto id = sub->pooling ? engine_->add_embedding(std::move(sub->prompt), *sub->pooling, sub->cache_ns)
                             : engine_->add_request(std::move(sub->prompt), sub->params, std::move(sub->stop_ids),
                                                    sub->stop_at_eos, sub->n, sub->cache_ns, sub->spec,
                                                    std::move(sub->images));
      if (!id.is_ok()) {
        sub->done.set_value(id.status());
        continue;
      }
      for (int i = 0; i < sub->n; ++i) routes_[*id + i] = {sub->stream, sub->index_base + i};
      sub->done.set_value(*id);
    }
    for (RequestId id : cancels)
      if (routes_.count(id)) engine_->abort(id);
    if (engine_->has_work()) {
      const auto t0 = std::chrono::steady_clock::now();
      auto events = engine_->step();
      ++steps;
      step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      {  // before the events go out: whoever sees a request's last event sees the counters of its last step
        std::lock_guard<std::mutex> lk(snap_mu_);
        snapshot_.counters = engine_->counters();
        snapshot_.steps = steps;
        snapshot_.step_seconds = step_seconds;
      }
      if (!events.is_ok()) {
        // A failed forward pass (NaN logits, ...) ends every running request with an error event; the
        // server stays up.
        for (auto& [id, route] : routes_) engine_->abort(id);
        for (auto& [id, route] : routes_)
          route.first->push({route.second, RequestEvent{id, std::nullopt, RequestFinish::kAborted, 0.0f, {}},
                             events.status().message()});
        routes_.clear();
      } else {
        for (RequestEvent& ev : *events) {
          auto it = routes_.find(ev.id);
          if (it == routes_.end()) continue;
          const bool done = ev.finish != RequestFinish::kNone;
          it->second.first->push({it->second.second, std::move(ev), {}});
          if (done) routes_.erase(it);
        }
      }
    }
    std::unordered_set<const RequestStream*> live;
    for (const auto& [id, route] : routes_) live.insert(route.first.get());
    // The tree's largest nodes and the blocks requests hold cost a walk: at most four times a second.
    const auto now = std::chrono::steady_clock::now();
    // (and always before the thread goes idle, so a quiet server shows its final state).
    const bool detail = now - last_detail_ >= std::chrono::milliseconds(250) || !engine_->has_work();
    std::vector<RadixCache::NodeInfo> nodes;
    int held = 0;
    if (detail) {
      last_detail_ = now;
      if (engine_->prefix_cache()) nodes = engine_->prefix_cache()->largest(24);
      held = engine_->blocks_held_by_requests();
    }
    std::lock_guard<std::mutex> lk(snap_mu_);
    if (detail) {
      snapshot_.nodes = std::move(nodes);
      snapshot_.blocks_held_by_requests = held;
    }
    snapshot_.counters = engine_->counters();
    snapshot_.steps = steps;
    snapshot_.step_seconds = step_seconds;
    snapshot_.active_streams = static_cast<int>(live.size());
  }
  // Shutting down: whoever still waits gets an aborted finish.
  for (auto& [id, route] : routes_)
    route.first->push(
        {route.second, RequestEvent{id, std::nullopt, RequestFinish::kAborted, 0.0f, {}}, "the engine stopped"});
  std::lock_guard<std::mutex> lk(mu_);
  for (Submission* sub : submissions_) sub->done.set_value(unavailable("the engine is shutting down"));
  submissions_.clear();
}

}  // namespace cachet
