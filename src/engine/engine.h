// Engine: many requests on one model with continuous (iteration-level) batching over the paged KV cache.
// Each step() schedules, runs one forward pass over every scheduled token, and postprocesses:
//  - a request is its tokens (prompt + output so far) and num_computed_tokens; every step each running
//    request catches up by up to the chunk size (chunked prefill) or by one token (decode), within a token
//    budget, so prefill chunks and decode tokens share one pass over the weights;
//  - requests join when blocks suffice for their next chunk, and leave when they finish or are aborted;
//  - when blocks run out, the youngest running request is preempted (its blocks freed, its tokens kept) and
//    recomputed later, so nothing is lost; a request that could never fit is rejected when added.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachet/status.h"
#include "kv/paged_kv_cache.h"
#include "kv/radix_cache.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace cachet {

using RequestId = int64_t;

struct EngineConfig {
  int block_size = 16;
  int n_blocks = 0;            // 0: from kv_memory_bytes
  int64_t kv_memory_bytes = 256ll << 20;
  int max_batch_tokens = 512;  // token budget of one step
  int prefill_chunk = 256;     // most prompt tokens of one request per step
  int max_running = 256;
  DType kv_type = DType::kF16;
  // Reuse the KV blocks of earlier requests' prefixes (kv/radix_cache.h). Outputs are bitwise the same either way.
  bool prefix_cache = true;
  // Called with every row of logits a request samples from (tests: batch invariance; debugging).
  std::function<void(RequestId, const float*, int64_t)> on_logits;
};

enum class RequestFinish { kNone, kStop, kLength, kAborted };

struct RequestEvent {
  RequestId id;
  int32_t token = -1;  // -1 when the event only reports a finish
  RequestFinish finish = RequestFinish::kNone;
  float logprob = 0.0f;           // of the token under the raw logits, when params.logprobs >= 0
  std::vector<TokenLogprob> top;  // the params.logprobs most likely alternatives
  int cached_tokens = 0;          // prompt tokens the prefix cache supplied (on the request's events)
};

struct EngineCounters {
  int blocks_total = 0, blocks_used = 0;
  int64_t tokens_stored = 0;  // token slots holding a computed K/V
  int64_t preemptions = 0;
  int running = 0, waiting = 0;
  int blocks_cached = 0;                       // blocks the prefix cache holds
  int64_t prefix_queries = 0;                  // admissions that looked up the cache
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
};

class Engine {
 public:
  Engine(Model& model, EngineConfig cfg);
  ~Engine();

  // Errors: invalid sampling parameters, an empty prompt, or a request that could never fit in the pool.
  // stop_ids end the request (besides EOS when stop_at_eos). n > 1 asks for n samples: they share the
  // prompt's blocks (one prefill, then the sequences fork) and get the ids id, id + 1, ..., id + n - 1, with
  // seeds seed, seed + 1, ...
  // cache_ns: the prefix cache's namespace (a tenant: API key and cache_salt); prefixes never match across them.
  Result<RequestId> add_request(std::vector<int32_t> prompt, const SamplingParams& params,
                                std::vector<int32_t> stop_ids = {}, bool stop_at_eos = true, int n = 1,
                                uint64_t cache_ns = 0);
  // Frees the request's blocks at the next step.
  void abort(RequestId id);
  Result<std::vector<RequestEvent>> step();
  bool has_work() const { return !running_.empty() || !waiting_.empty() || !aborted_.empty(); }
  EngineCounters counters() const;
  const EngineConfig& config() const { return cfg_; }
  // The prefix cache (nullptr when off), for inspection (dashboard, tests).
  const RadixCache* prefix_cache() const { return radix_.get(); }
  // Blocks at least one request's table references (the rest of the used ones only the prefix cache keeps).
  int blocks_held_by_requests() const;
  // Every bookkeeping invariant (block tables, ref counts, the tree); empty when all hold.
  std::string check() const;

 private:
  struct Request {
    RequestId id;
    std::vector<int32_t> tokens;  // prompt, then output
    int n_prompt;
    int num_computed = 0;
    SamplingParams params;
    std::unique_ptr<Sampler> sampler;
    std::vector<int32_t> stop_ids;
    bool stop_at_eos = true;
    int n_forks = 0;  // samples still to fork off at the first sampling point
    std::unique_ptr<PagedKvSequence> view;
    uint64_t cache_ns = 0;
    RadixCache::Node* cache_node = nullptr;  // the locked end of the prefix it took from the cache
    int cached_tokens = 0;
  };
  void preempt(Request* r);
  void finish(Request* r);
  // Takes the longest cached prefix of a request that holds no blocks yet (admission).
  void take_cached_prefix(Request* r);
  // Gives a request's full blocks of computed tokens to the cache, unlocks its path, frees its blocks.
  void release(Request* r);
  // Frees up to n blocks from the cache's unlocked leaves; true if the pool then has n free.
  bool make_room(int n);

  Model& model_;
  EngineConfig cfg_;
  std::unique_ptr<KvBlockStorage> storage_;
  std::unique_ptr<KvCacheManager> manager_;
  std::unique_ptr<RadixCache> radix_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // oldest first
  std::deque<Request*> waiting_;   // admission order (preempted requests go to the front)
  std::vector<RequestId> aborted_;
  RequestId next_id_ = 1;
  int64_t preemptions_ = 0;
  std::vector<float> logits_;
};

}  // namespace cachet
