// Model: a loaded network that runs ForwardBatches. One implementation file per architecture registers
// itself by GGUF `general.architecture` name; shared code never switches on the architecture.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cachet/embedding.h"
#include "cachet/status.h"
#include "model/config.h"
#include "model/rope_scaling.h"
#include "model/forward_batch.h"
#include "model/tensor.h"
#include "model/tp_shard.h"
#include "model/trace.h"

namespace cachet {

class GgufFile;

struct SpecialTokens {
  std::optional<int32_t> bos, eos, eot, pad, unk;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs every token of the batch: writes its K and V into its sequence's cache, then, for each token with
  // want_logits, writes n_vocab next-token logits to `logits`, and for each with want_hidden, its final hidden
  // state (after the output norm: what embedding models pool; n_embd floats) to `hidden` (rows in batch order).
  virtual Status forward(const ForwardBatch& batch, float* logits, float* hidden = nullptr) = 0;
  // An embedding model's head on a pooled vector (n_embd floats, the final hidden states pooled as `p` says):
  // a reranker's classifier for rank pooling, the file's dense projections for the others. Writes
  // pooled_dim(p) floats to `out`.
  virtual int64_t pooled_dim(Pooling p) const {
    return p == Pooling::kRank ? config().n_cls_out : config().n_embd;
  }
  virtual Status pooled_head(const float* pooled, Pooling p, float* out) {
    if (p == Pooling::kRank) return unimplemented("this model has no classifier head for rank pooling");
    std::copy_n(pooled, config().n_embd, out);
    return Status::ok();
  }
  // Whether forward() takes an image's rows in place of tokens (ForwardBatch::embd_row), seeing each other both
  // ways when both_ways (ForwardBatch::attn_end), with deepstack_rows more rows beside each (Qwen3-VL), placed by
  // M-RoPE positions when mrope (ForwardBatch::rope_pos): ok, or why not.
  virtual Status accepts_image_rows(bool both_ways, int64_t deepstack_rows, bool mrope) const {
    (void)both_ways;
    (void)deepstack_rows;
    (void)mrope;
    return unimplemented("this model (" + config().arch + ") does not take image rows");
  }
  // The weights in file order (for `cachet info`).
  virtual const std::vector<TensorView>& tensors() const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;
  // The GGUF file behind the model, if it came from one (tokenizer, chat template); else nullptr.
  virtual const GgufFile* gguf() const = 0;
  virtual ThreadPool& pool() = 0;
  // Reports the ops of each forward pass to `t` (nullptr: off). Not owned.
  void set_tracer(Tracer* t) { tracer_ = t; }
  // The pool as load_model made it, so another model (a speculative draft) can share its threads rather than
  // run a second set that spins while this one works.
  std::shared_ptr<ThreadPool> shared_pool() const { return shared_pool_; }
  void set_shared_pool(std::shared_ptr<ThreadPool> p) { shared_pool_ = std::move(p); }

 protected:
  Tracer* tracer_ = nullptr;
  std::shared_ptr<ThreadPool> shared_pool_;
};

struct LoadOptions {
  int n_threads = 0;  // 0: all cores
  // Q4_0 / Q4_1 / Q8_0 matmuls quantize activations to 8 bits per 32-block and use integer dot products
  // (kernels/packed.h), as llama.cpp does. `precise` keeps f32 activations (dequantize-on-the-fly FMA):
  // slower, and what the f32 reference oracle is compared against (docs/numerics.md).
  bool precise = false;
  // Run on this pool (shared with another model) instead of a new one of n_threads.
  std::shared_ptr<ThreadPool> pool;
  // RoPE settings that replace the file's (context extension from the command line).
  RopeOverrides rope;
  // Tensor parallelism: load only this rank's shard and all-reduce through tp.reducer (model/tp_shard.h).
  TpOptions tp;
  // Logits only for token ids below this (rounded up to a multiple of 16), -inf for the rest; 0: every id.
  // For a speculative draft (--draft-vocab): it proposes from the frequent start of a BPE vocabulary and skips
  // most of its head's bytes; the target's verification keeps the output exact whatever the draft proposes.
  int64_t logit_rows = 0;
  // Load the file's multi-token-prediction head (a qwen35 / qwen35moe file's `nextn` block, or a file holding only
  // that block) instead of its trunk: a one-layer model whose input per token is its embedding and the trunk's
  // final hidden state before it (ForwardBatch::input_hidden); a speculative proposer (speculative/mtp.h).
  bool mtp_head = false;
};

// Opens a GGUF file or a llama2.c checkpoint (by its contents), validates everything, and builds the model.
Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& opts = {});

// Architecture registry.
using ArchFactory = std::function<Result<std::unique_ptr<Model>>(std::unique_ptr<GgufFile>,
                                                                 std::shared_ptr<ThreadPool>, const LoadOptions&)>;
bool register_arch(const std::string& name, ArchFactory factory);

}  // namespace cachet
