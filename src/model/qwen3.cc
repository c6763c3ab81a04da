// `qwen3` and `qwen3moe`: Qwen3 dense and mixture-of-experts. No Q/K/V biases; a per-head RMSNorm of Q and K
// before RoPE (NeoX); head_dim from attention.key_length (128 on the 0.6B, whose n_embd / n_head is 64). The
// MoE variant routes each token to the top expert_used_count of expert_count experts (softmax, renormalized),
// each expert_feed_forward_length wide. Qwen3-Reranker files (pooling_type rank) carry the head's rows of
// "yes" and "no" as cls.output: the reranker's score is the softmax probability of "yes" at the last token.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status qwen3(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool moe) {
  c->rope_neox = true;
  allowed->qk_norm = allowed->need_qk_norm = true;
  allowed->classifier = true;  // Qwen3-Reranker: the head's "yes" and "no" rows as cls.output
  r.consume("classifier.output_labels");
  if (!moe) return Status::ok();
  CACHET_RETURN_IF_ERROR(r.experts(c, "expert_feed_forward_length"));
  if (c->n_expert == 0) return invalid_argument("a qwen3moe file without qwen3moe.expert_count");
  return Status::ok();
}

}  // namespace

void register_qwen3_arch() {
  register_arch("qwen3", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* a) { return qwen3(r, c, a, false); });
  });
  register_arch("qwen3moe", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* a) { return qwen3(r, c, a, true); });
  });
}

}  // namespace cachet
