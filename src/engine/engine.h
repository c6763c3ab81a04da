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
#include "engine/engine_config.h"
#include "engine/engine_request.h"
#include "engine/scheduler.h"
#include "engine/speculator.h"
#include "kv/kv_block_storage.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace cachet {

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
  std::vector<float> embedding = {};  // an embedding request's pooled hidden state (with its kStop finish)
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
  int state_slots_total = 0, state_slots_used = 0;  // hybrid models: recurrent state slots (kv/state_store.h)
  int state_checkpoints = 0;                        // of those, checkpoints the prefix cache holds
  int64_t state_bytes_per_slot = 0;
  int64_t images_encoded = 0;  // images the vision encoder ran on (a prefix-cache hit on one needs none)
};

// Whether the language model takes the rows of this projector (their width, deepstack rows, M-RoPE, two-way
// attention): ok, or why not.
Status projector_fits(const Model& model, const VisionConfig& vc);

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
  // images: where the prompt's images are (vision/prompt_image.h; the config's vision encoder makes their rows,
  // and their positions' ids are set from their hashes); such a request does not speculate. Errors: no
  // encoder, a model that cannot take image rows, images out of the prompt or overlapping.
  Result<RequestId> add_request(std::vector<int32_t> prompt, const SamplingParams& params,
                                std::vector<int32_t> stop_ids = {}, bool stop_at_eos = true, int n = 1,
                                uint64_t cache_ns = 0, std::optional<SpecMode> spec = std::nullopt,
                                std::vector<PromptImage> images = {});
  // An embedding request: the prompt runs like any other (batched with generation, chunked), nothing is
  // sampled, and its finishing event carries the final hidden states pooled (not normalized) through the
  // model's pooled head (Model::pooled_head: a reranker's scores for rank pooling). Mean and CLS pooling need
  // every token's (the first token's) state, so they never start from a cached prefix. On a bidirectional
  // model an input runs whole in one pass (SchedRequest::whole) and is never cached.
  Result<RequestId> add_embedding(std::vector<int32_t> prompt, Pooling pooling, uint64_t cache_ns = 0);
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
  const DraftModelProposer* draft_proposer() const { return spec_->draft_proposer(); }
  // A hybrid model: the bytes of request id's recurrent state (after its computed tokens); empty without one.
  std::vector<uint8_t> state_contents(RequestId id) const;

 private:
  Engine(Model& model, EngineConfig cfg);
  using Request = EngineRequest;
  // Whose final hidden states a pooling sums: rank pooling reads the state the model's file names.
  Pooling rows_pooled(Pooling p) const;
  // A request's rows of logits in this step's pass: positions from its last accepted token on.
  struct Rows {
    Request* r;
    const float* first;
    int n;
  };
  void finish(Request* r);
  // A constrained request's masks for its n rows of this step (the engine's mask thread, beside the forward).
  void fill_masks(Request* r, int n);
  // Appends a chosen token and its event; true when it ends the request.
  // grammar_took: the request's grammar already took (or refused) the token; else emit advances it.
  bool emit(Request* r, const SampleResult& s, std::vector<RequestEvent>* events,
            std::optional<bool> grammar_took = std::nullopt);

  Model& model_;
  EngineConfig cfg_;
  std::unique_ptr<KvBlockStorage> storage_;
  std::unique_ptr<StateStore> state_;  // hybrid models: one recurrent state per running sequence
  // A state slot for r: a free one, else one held by a request that is not running (preempted; it starts over
  // from position 0 when it runs again, which zeroes its state).
  StateSlot take_state_slot(Request* r);
  // Prefix cache on a hybrid model: a slot for a state checkpoint, leaving one for every sequence that may
  // still run; nothing when none can be had. When the store is short, the pending checkpoints that requests'
  // own latest-boundary ones shadow go back first (`latest_for` is taking one at `latest_pos`), then (`evict`)
  // the tree's least recently used checkpoint.
  std::optional<StateSlot> take_checkpoint_slot(bool evict = true, const Request* latest_for = nullptr,
                                                int latest_pos = 0);
  // Pending checkpoints shadowed by their request's own latest-boundary one (its prompt end, its every-N points
  // before it) back to the store.
  void release_shadowed_checkpoints(const Request* latest_for, int latest_pos);
  // Speculation on a hybrid model: a slot for the state after a position the verification may roll back to,
  // leaving one for every sequence that may still run (checkpoints are not dropped for it); nothing when none
  // can be had (the draft is then cut there).
  std::optional<StateSlot> take_spare_slot();
  // After r's verification: the state after its last accepted token becomes its slot (a snapshot when the
  // verification rejected a computed draft token); the other snapshots go back to the store.
  void settle_snapshots(Request* r, int last_accepted);
  int spec_slots_ = 0;  // slots kept out of the checkpoints' reach for speculation's snapshots
  // Slots of checkpoints the tree dropped (evicted nodes, LRU) back to the store.
  void reclaim_checkpoints();
  // The snapshots r's work this step should leave (its prompt's last block boundary, its latest one), added to
  // the batch (r's tokens start at batch index `first`); planned[] records them for after the pass.
  enum CheckpointKind { kBranch, kEvery, kPromptEnd, kLatest };
  struct PlannedCheckpoint {
    Request* r;
    Request::PendingCheckpoint c;
  };
  void plan_checkpoints(Request* r, int n, int first, ForwardBatch* b, std::vector<PlannedCheckpoint>* planned);
  // Images (engine_images.cc): a request's images checked and their rows' ids set; the rows of the images r's
  // positions [from, from + n) cover encoded (if not yet) and given to the batch, whose token `first` is
  // position from (embd_row, and attn_end for two-way attention within an image).
  Status set_images(Request* r, std::vector<PromptImage> images);
  Status add_image_rows(Request* r, int from, int n, int first, ForwardBatch* b);
  // The encoder's share of a step: the image under way (or the next one an admitted request waits at) advances
  // encoder_layers_per_step layers, all of them when no other request can run; a finished image's rows go to
  // its request, whose tokens the scheduler then lets past it.
  Status advance_images();
  int64_t images_encoded_ = 0;
  RequestId encoding_id_ = 0;  // the request whose image the encoder holds (0: none)
  size_t encoding_image_ = 0;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<RequestId> aborted_;
  RequestId next_id_ = 1;
  std::vector<float> logits_;
  std::vector<float> hidden_;
  std::unique_ptr<Speculator> spec_;
};

}  // namespace cachet
