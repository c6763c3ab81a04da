// The model's own multi-token-prediction head proposes (Qwen3.5 / 3.6 files carry one: `nextn_predict_layers`
// blocks after the trunk, loaded with LoadOptions::mtp_head). Position p of the head reads the token at p and
// the trunk's final hidden state at p - 1 (zeros at p = 0 and wherever the trunk's state was never seen, as in
// llama.cpp), so its output at the last token predicts the token after the next one. It keeps a one-layer KV
// cache of its own per request, fed as the target computes: after every target pass the engine hands it each
// speculating request's hidden rows (observe), and the head feeds every position whose token and predecessor are
// final in one batched pass (catch_up); a draft then continues from the last accepted token, each further token
// fed with the head's own output state, as the head was trained. Rows of positions a verification rejects are
// dropped (truncate); the head's cache only ever holds positions fed with the trunk's states.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "cachet/config.h"
#include "kv/kv_block_storage.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "speculative/proposer.h"

namespace cachet {

struct MtpConfig {
  int n_blocks = 0;  // its KV pool (one layer); blocks of block_size tokens
  int block_size = 16;
  KvTypes kv_type;
  float p_min = kDefaultDraftPMin;  // greedy: stop drafting when the head's top probability is below this
};

class MtpProposer final : public Proposer {
 public:
  // Errors: `head` is not a multi-token-prediction head, or not the target's (width, vocabulary).
  static Result<std::unique_ptr<MtpProposer>> create(Model& head, const Model& target, MtpConfig cfg);

  // After a target pass: the trunk's final hidden states (rows of n_embd floats, after its output norm) of the
  // request's positions [pos0, pos0 + n); `tokens` its tokens, of which the first n_final are final (the rest
  // this step's draft). Queued for catch_up().
  void observe(int64_t id, const std::vector<int32_t>& tokens, int n_final, int pos0, const float* rows, int n);
  // Feeds every observed request's positions whose token and trunk state are final: one batched pass.
  Status catch_up();

  Status propose(std::span<DraftJob> jobs) override;
  void truncate(int64_t id, int n_valid) override;
  void release(int64_t id) override;

  // Positions of the request the head holds in its cache (0 before the first).
  int fed(int64_t id) const {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? 0 : it->second.fed;
  }
  // Trunk rows a request keeps waiting for their next token (bounded by a step's draft, not the prompt).
  int held_rows(int64_t id) const {
    auto it = seqs_.find(id);
    return it == seqs_.end() ? 0 : it->second.n_rows;
  }
  // Times the head's passes (1 and 4 tokens with logits, a 64-token catch-up; warm) on a scratch sequence, for
  // the engine's cost model: (tokens, seconds) pairs.
  std::vector<std::pair<int, double>> calibrate();
  // The last catch_up() or propose() call's forward passes: tokens in each and its seconds (the cost model).
  const std::vector<std::pair<int, double>>& last_passes() const { return last_passes_; }

 private:
  MtpProposer(Model& head, MtpConfig cfg);
  struct Seq {
    int fed = 0;  // positions [0, fed) are in the head's cache, fed with the trunk's states
    // The trunk's hidden states of positions [h0, h0 + n_rows), n_embd floats each.
    int h0 = 0, n_rows = 0;
    std::vector<float> rows;
    std::vector<int32_t> tokens;  // final tokens seen so far (observe / propose)
    std::unique_ptr<Sampler> sampler;
  };
  Seq& seq(int64_t id, const SamplingParams* params);
  // Adds positions [s.fed, end) of sequence `seq` to `b` (the trunk state of each one's predecessor, or zeros);
  // logits for the last when `logits`. False: no room in the head's pool (the request is dropped from it).
  bool feed(int64_t id, Seq& s, int end, bool logits, ForwardBatch* b, int seq);
  // Drops the rows no future position needs (those before fed - 1).
  void trim(Seq& s);

  Model& model_;
  MtpConfig cfg_;
  int64_t d_ = 0;
  std::unique_ptr<KvBlockStorage> storage_;
  std::unique_ptr<KvCacheManager> manager_;
  std::unordered_map<int64_t, Seq> seqs_;
  std::vector<int64_t> queued_;  // observed since the last catch_up
  std::vector<float> logits_, hidden_;
  std::vector<std::pair<int, double>> last_passes_;
};

}  // namespace cachet
