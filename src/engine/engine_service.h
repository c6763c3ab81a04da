// The engine thread behind every front end (the LLM API, hence the CLI and the server): one thread owns the Engine and runs step() while there is work; callers'
// threads submit requests and cancellations through a queue the engine thread drains between steps (so a
// submission waits at most one step, and nobody else ever touches the Engine). Each submitted request gets a
// RequestStream that receives its token events; n > 1 choices share one stream.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cachet/status.h"
#include "engine/engine.h"

namespace cachet {

struct StreamEvent {
  int index = 0;  // choice
  RequestEvent ev;
  std::string error;  // on an aborted finish: why, when the engine failed (a forward pass, shutting down)
};

// The events of one or more requests (several requests may share a stream, each with its own index range).
class RequestStream {
 public:
  explicit RequestStream(int n) : n_(n) {}
  RequestId first_id() const { return first_; }
  void set_first_id(RequestId id) { first_ = id; }
  int n() const { return n_; }
  // Waits up to `timeout` for events; moves them into *out. Returns false when nothing arrived.
  bool wait(std::vector<StreamEvent>* out, std::chrono::milliseconds timeout);
  void push(StreamEvent e);

 private:
  RequestId first_ = 0;
  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StreamEvent> events_;
};

struct ServiceSnapshot {
  EngineCounters counters;
  int64_t steps = 0;
  double step_seconds = 0.0;  // time inside the steps: its rate is the engine's busy fraction
  int active_streams = 0;  // submitted and not yet finished (all choices)
  int blocks_held_by_requests = 0;           // blocks some request's table references
  std::vector<RadixCache::NodeInfo> nodes;   // the prefix cache's largest nodes (refreshed every 250 ms)
};

class EngineService {
 public:
  EngineService(std::unique_ptr<Engine> engine, int max_waiting);
  ~EngineService();
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  // Adds a request (blocks until the engine thread took it, at most one step). kResourceExhausted when the
  // waiting queue is full; the Engine's own errors (invalid parameters, a request that can never fit) as is.
  Result<std::shared_ptr<RequestStream>> submit(std::vector<int32_t> prompt, const SamplingParams& params,
                                                std::vector<int32_t> stop_ids, bool stop_at_eos, int n,
                                                uint64_t cache_ns = 0, std::optional<SpecMode> spec = std::nullopt,
                                                std::vector<PromptImage> images = {});
  // The same into a given stream, whose events for this request carry indices index_base .. index_base + n - 1.
  // Returns the request's first id (its samples: id .. id + n - 1).
  Result<RequestId> add(std::vector<int32_t> prompt, const SamplingParams& params, std::vector<int32_t> stop_ids,
                        bool stop_at_eos, int n, uint64_t cache_ns, std::optional<SpecMode> spec,
                        std::shared_ptr<RequestStream> stream, int index_base, std::vector<PromptImage> images = {});
  // An embedding request (Engine::add_embedding) into a stream, its one event at index `index`.
  Result<RequestId> add_embedding(std::vector<int32_t> prompt, Pooling pooling, uint64_t cache_ns,
                                  std::shared_ptr<RequestStream> stream, int index);
  // Cancels the choices of a stream that have not finished; their blocks are freed at the next step.
  void cancel(const std::shared_ptr<RequestStream>& s, int index = -1);
  // Cancels one sample by its id.
  void cancel(RequestId id);
  ServiceSnapshot snapshot() const;
  const EngineConfig& config() const { return engine_->config(); }

 private:
  struct Submission {
    std::vector<int32_t> prompt;
    SamplingParams params;
    std::vector<int32_t> stop_ids;
    bool stop_at_eos;
    int n;
    uint64_t cache_ns;
    std::optional<SpecMode> spec;
    std::optional<Pooling> pooling;  // an embedding request
    std::shared_ptr<RequestStream> stream;
    int index_base;
    std::promise<Result<RequestId>> done;
    std::vector<PromptImage> images;
  };
  void loop();
  Result<RequestId> enqueue(Submission& sub);  // to the engine thread; waits until it took the submission

  std::unique_ptr<Engine> engine_;
  int max_waiting_;
  std::mutex mu_;  // guards the queues below and stop_
  std::condition_variable cv_;
  std::deque<Submission*> submissions_;
  std::vector<RequestId> cancels_;
  bool stop_ = false;
  // Engine thread only (except snapshot_, under snap_mu_).
  std::unordered_map<RequestId, std::pair<std::shared_ptr<RequestStream>, int>> routes_;
  mutable std::mutex snap_mu_;
  ServiceSnapshot snapshot_;
  std::chrono::steady_clock::time_point last_detail_{};
  std::thread thread_;
};

}  // namespace cachet
