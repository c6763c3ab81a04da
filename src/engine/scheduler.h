// Scheduler: which requests run this step, and how many of their tokens (nano-vllm's / vLLM v1's shape). There
// is no prefill or decode phase: a request is its tokens (prompt + output so far) and num_computed, and each step
// it catches up by up to prefill_chunk tokens within the step's token budget. That one rule covers prefill,
// chunked prefill, decode (one new token), a prefix-cache hit (admission starts num_computed at the cached
// length) and a preempted request's recompute. It owns the block tables (KvCacheManager) and the prefix cache
// (RadixCache), never a tensor: it runs and is tested without a model.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/radix_cache.h"

namespace cachet {

using RequestId = int64_t;

// What the scheduler knows of a request (the Engine's Request extends it with sampling state).
struct SchedRequest {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt, then output
  int n_prompt = 0;
  int num_computed = 0;         // tokens whose K/V are in the cache
  uint64_t cache_ns = 0;        // prefix cache namespace (tenant)
  RadixCache::Node* cache_node = nullptr;  // the locked end of the prefix it took from the cache
  int cached_tokens = 0;        // prompt tokens the prefix cache supplied at first admission
  int n_draft = 0;              // the last n_draft tokens are a speculative draft, verified by this step's pass
  bool reuse_prefix = true;     // may start from a cached prefix (not when it needs every token's output)
  // All its tokens run in one pass, never cached: an encoder's input, where every token attends to all of them.
  // Admitted whole even past the step's token budget (a step runs at most one such input over it).
  bool whole = false;
  // Hybrid models: the prefix it took ends at a state checkpoint, this slot's state, copied to the request's
  // own slot before its first pass (-1: none; the engine clears it once copied).
  int32_t resume_state = -1;
  // Hybrid models: how far its prompt's blocks matched the tree before backing up to a checkpoint (where it
  // branches off a cached path: a checkpoint there serves the next request that shares as much).
  int branch_tokens = 0;
  // Images in the prompt: each one's rows, [begin, end) positions, ascending. The rows attend to each other, so
  // a step never ends inside an image (it runs whole, even past the step's budget), and a cached prefix is
  // taken only up to an image's first row or past its last.
  std::vector<std::pair<int, int>> images;
  // Whether each image's rows are encoded: a step stops before an image that is not (its encoder may take
  // several steps), and runs no tokens of the request while it waits at one.
  std::vector<uint8_t> image_ready;
};

struct SchedulerConfig {
  int block_size = 16;
  int n_blocks = 0;
  int max_batch_tokens = 512;  // token budget of one step
  int prefill_chunk = 256;     // most tokens of one request per step
  int max_running = 256;
  bool prefix_cache = true;
  bool state_checkpoints = false;  // hybrid models: a cached prefix is taken only up to a state checkpoint
};

// One step's work: each request and how many of its tokens, from num_computed on, run now (blocks reserved).
struct ScheduledWork {
  SchedRequest* r;
  int n;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig cfg);
  ~Scheduler();

  void add(SchedRequest* r) { waiting_.push_back(r); }
  // This step's work: running requests first (oldest first), evicting cached prefixes and then preempting the
  // youngest when blocks run short; then waiting requests, taking their cached prefix, while budget and blocks
  // allow. Blocks for every scheduled token are reserved.
  std::vector<ScheduledWork> schedule();
  // After the forward pass: the scheduled tokens are computed.
  void computed(const std::vector<ScheduledWork>& work);
  // child (a new request, running) shares every block of parent (n > 1 samples).
  void fork(SchedRequest* parent, SchedRequest* child);
  // Speculation rejected positions: r keeps the K/V of its first n_tokens only (blocks past them go back).
  void rollback(SchedRequest* r, int n_tokens);
  // Slots for r's positions below n_tokens, without preempting anyone (false, nothing changed, when the pool
  // is short): a draft model reading the target's cache writes its own rows past the computed positions.
  // Undone by rollback(r, r->num_computed) before the next schedule().
  bool reserve(SchedRequest* r, int n_tokens);
  // Finished or aborted: gives its whole computed blocks to the prefix cache and frees the rest.
  void finish(SchedRequest* r);

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int n_running() const { return static_cast<int>(running_.size()); }
  int n_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  const KvCacheManager& kv() const { return manager_; }
  // The copy-on-writes the block tables need before the next forward pass (KvCacheManager::take_copies).
  std::vector<KvBlockCopy> take_kv_copies() { return manager_.take_copies(); }
  const RadixCache* prefix_cache() const { return radix_.get(); }
  RadixCache* prefix_cache() { return radix_.get(); }
  const std::vector<SchedRequest*>& running() const { return running_; }
  // n tokens of r from num_computed, moved off the inside of an image: back to its start, or (when it starts
  // there) on to its end; and stopped before an image not yet encoded (0 when r waits at one).
  static int fit_images(const SchedRequest* r, int n);
  // Blocks at least one request's table references.
  int blocks_held_by_requests() const;
  // Block tables, ref counts (requests' plus the tree's) and the tree; empty when all hold.
  std::string check() const;

 private:
  void take_cached_prefix(SchedRequest* r);
  void release(SchedRequest* r);
  bool make_room(int n_blocks);
  void preempt(SchedRequest* r);

  SchedulerConfig cfg_;
  KvCacheManager manager_;
  std::unique_ptr<RadixCache> radix_;
  std::vector<SchedRequest*> running_;  // oldest first
  std::deque<SchedRequest*> waiting_;   // admission order (preempted requests go to the front)
  int64_t preemptions_ = 0;
};

}  // namespace cachet
