// Engine: many requests on one model with continuous (iteration-level) batching over the paged KV cache.
// Each step() is schedule -> run -> postprocess:
//  - the Scheduler (engine/scheduler.h) says which requests run and how many of their tokens: each catches up
//    from num_computed by up to the chunk size (prefill, chunked prefill, a prefix-cache hit's remainder) or by
//    one token (decode), within a token budget, so prefill chunks and decode tokens share one pass over the
//    weights; when blocks run out it evicts cached prefixes, then preempts the youngest request (recomputed
//    later, nothing lost); a request that could never fit is rejected when added;
//  - the engine flattens that into one ForwardBatch, runs the model, samples, and retires finished requests.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cachet/status.h"
#include "kv/paged_kv_cache.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "speculative/draft_model.h"
#include "speculative/lookup.h"
#include "speculative/policy.h"

namespace cachet {

struct EngineConfig {
  int block_size = 16;
  int n_blocks = 0;            // 0: from kv_memory_bytes
  int64_t kv_memory_bytes = 256ll << 20;
  int max_batch_tokens = 512;  // token budget of one step
  int prefill_chunk = 256;     // most prompt tokens of one request per step
  int max_running = 256;
  KvTypes kv_type;  // K and V element types (f16 both by default; kv/kv_type.h)
  // Reuse the KV blocks of earlier requests' prefixes (kv/radix_cache.h). Outputs are bitwise the same either way.
  bool prefix_cache = true;
  // The tokens that end a request that stops at end of generation (EOS, EOT, <|im_end|>, ...;
  // end_of_generation_ids in engine/text_stream.h). The model's EOS always does.
  std::vector<int32_t> end_of_generation;
  // Called with every row of logits a request samples from (tests: batch invariance; debugging).
  std::function<void(RequestId, const float*, int64_t)> on_logits;
  // Speculative decoding (docs/speculative.md): the mode of requests that do not choose one; the draft model
  // (same vocabulary; not owned; required for SpecMode::kDraft); the most draft tokens per step. With
  // spec_adaptive each request drafts what the measured costs and its own acceptance say pays (possibly
  // nothing); without, always draft_max (tests).
  SpecMode spec = SpecMode::kOff;
  Model* draft_model = nullptr;
  int draft_max = 8;
  float draft_p_min = kDefaultDraftPMin;
  bool spec_adaptive = true;
  // A draft model of the target's exact shape (a requantization) reads the target's KV cache
  // (DraftModelConfig::share_target_kv) unless this is set: then it keeps a pool of its own, as a draft of
  // another shape must.
  bool draft_own_kv = false;
};

enum class RequestFinish { kNone, kStop, kLength, kAborted };

struct RequestEvent {
  RequestId id;
  std::optional<int32_t> token;  // none when the event only reports a finish
  RequestFinish finish = RequestFinish::kNone;
  float logprob = 0.0f;           // of the token under the raw logits, when params.logprobs >= 0
  std::vector<TokenLogprob> top;  // the params.logprobs most likely alternatives
  int cached_tokens = 0;          // prompt tokens the prefix cache supplied (on the request's events)
  int64_t spec_drafted = 0;       // speculation so far: the request's draft tokens verified, and accepted
  int64_t spec_accepted = 0;
};

struct EngineCounters {
  int blocks_total = 0, blocks_used = 0;
  int64_t tokens_stored = 0;  // token slots holding a computed K/V
  int64_t preemptions = 0;
  int running = 0, waiting = 0;
  int blocks_cached = 0;                       // blocks the prefix cache holds
  int64_t prefix_queries = 0;                  // admissions that looked up the cache
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t spec_draft_tokens = 0;               // draft tokens the target verified
  int64_t spec_accepted_tokens = 0;            // of those, accepted
};

class Engine {
 public:
  // The only way to build one. Errors: KV types the model cannot use, a draft model that is not usable
  // (another vocabulary), speculation settings out of range.
  static Result<std::unique_ptr<Engine>> create(Model& model, EngineConfig cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Errors: invalid sampling parameters, an empty prompt, or a request that could never fit in the pool.
  // stop_ids end the request, and so do the config's end_of_generation ids when stop_at_eos. n > 1 asks for n samples: they share the
  // prompt's blocks (one prefill, then the sequences fork) and get the ids id, id + 1, ..., id + n - 1, with
  // seeds seed, seed + 1, ...
  // cache_ns: the prefix cache's namespace (a tenant: API key and cache_salt); prefixes never match across them.
  // spec: this request's speculation (default: the config's); kDraft needs the config's draft model.
  Result<RequestId> add_request(std::vector<int32_t> prompt, const SamplingParams& params,
                                std::vector<int32_t> stop_ids = {}, bool stop_at_eos = true, int n = 1,
                                uint64_t cache_ns = 0, std::optional<SpecMode> spec = std::nullopt);
  // Frees the request's blocks at the next step.
  void abort(RequestId id);
  Result<std::vector<RequestEvent>> step();
  bool has_work() const { return scheduler_->has_work() || !aborted_.empty(); }
  EngineCounters counters() const;
  const EngineConfig& config() const { return cfg_; }
  // The prefix cache (nullptr when off), for inspection (dashboard, tests).
  const RadixCache* prefix_cache() const { return scheduler_->prefix_cache(); }
  // Blocks at least one request's table references (the rest of the used ones only the prefix cache keeps).
  int blocks_held_by_requests() const;
  // Every bookkeeping invariant (block tables, ref counts, the tree); empty when all hold.
  std::string check() const;
  // Inspection of a live request (tests): its tokens whose K/V are computed, and those K/V rows' bytes
  // (every layer, K then V per position); the token slots its block table holds.
  int num_computed(RequestId id) const;
  int kv_slots(RequestId id) const { return scheduler_->kv().num_tokens(id); }
  std::vector<uint8_t> kv_contents(RequestId id, int n_positions) const;
  const DraftModelProposer* draft_proposer() const { return draft_.get(); }

 private:
  Engine(Model& model, EngineConfig cfg);
  Status init_speculation();  // the draft proposer and the speculation policy's calibration
  struct Request : SchedRequest {
    SamplingParams params;
    std::unique_ptr<Sampler> sampler;
    std::vector<int32_t> stop_ids;
    bool stop_at_eos = true;
    int n_forks = 0;  // samples still to fork off at the first sampling point
    std::unique_ptr<PagedKvSequence> view;
    SpecMode spec = SpecMode::kOff;
    Acceptance acceptance;
    int spec_idle = 0;               // steps since it last drafted
    std::vector<TokenDist> draft_q;  // the draft's distributions when it sampled (else empty)
    int64_t spec_drafted = 0, spec_accepted = 0;
  };
  // A request's rows of logits in this step's pass: positions from its last accepted token on.
  struct Rows {
    Request* r;
    const float* first;
    int n;
  };
  void finish(Request* r);
  Proposer* proposer(SpecMode m);
  // Speculation (engine_spec.cc): drafts for caught-up speculating requests, appended to their tokens;
  // after the pass, the accept/resample rule over a request's rows, the rejected positions rolled back.
  void calibrate_spec();
  Status propose_drafts();
  Status verify_drafts(const Rows& rows, std::vector<RequestEvent>* events);
  // Drafts that were not scheduled this step (or were preempted) are dropped.
  void drop_draft(Request* r, int n_accepted_tokens);
  // Appends a chosen token and its event; true when it ends the request.
  bool emit(Request* r, const SampleResult& s, std::vector<RequestEvent>* events);

  Model& model_;
  EngineConfig cfg_;
  std::unique_ptr<KvBlockStorage> storage_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<RequestId> aborted_;
  RequestId next_id_ = 1;
  std::vector<float> logits_;
  LookupProposer lookup_;
  std::unique_ptr<DraftModelProposer> draft_;
  SpecPolicy policy_;
  std::vector<std::pair<Request*, int>> drafted_;  // this step's drafting requests and their accepted length
  // Per SpecMode, over every request: a new request's prior (a longer memory than a request's own counts).
  Acceptance mode_acceptance_[3] = {{.decay = Acceptance::kEngineDecay},
                                    {.decay = Acceptance::kEngineDecay},
                                    {.decay = Acceptance::kEngineDecay}};
  double mode_idle_secs_[3] = {};  // per SpecMode: time of steps with candidates of that kind and none drafting
  double catch_up_secs_ = 0;       // this step's draft catch-up prefill (left out of the guard's step rate)
  double output_len_ = 0;          // finished requests' generated tokens, a moving average (0: none yet)
  int64_t spec_draft_tokens_ = 0, spec_accepted_tokens_ = 0;
};

}  // namespace cachet
