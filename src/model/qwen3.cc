// `qwen3` and `qwen3moe`: Qwen3 dense and mixture-of-experts. No Q/K/V biases; a per-head RMSNorm of Q and K
// before RoPE (NeoX); head_dim from attention.key_length (128 on the 0.6B, whose n_embd / n_head is 64). The
// MoE variant routes each token to the top expert_used_count of expert_count experts (softmax, renormalized),
// each expert_feed_forward_length wide. Qwen3-Reranker files (pooling_type rank) carry the head's rows of
// "yes" and "no" as cls.output: the reranker's score is the softmax probability of "yes" at the last token.
// `qwen3vl` and `qwen3vlmoe`: Qwen3-VL's language models, Qwen3 under interleaved M-RoPE sections (a text token
// turns each pair with its position) with deepstack layers (an image's extra rows added after the first
// n_deepstack_layers layers: nothing for text; images with deepstack rows are not taken yet).
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status qwen3(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool moe, bool vl = false) {
  c->rope_neox = true;
  if (vl) {
    CACHET_RETURN_IF_ERROR(r.mrope_sections(c, true));
    CACHET_ASSIGN_OR_RETURN(c->n_deepstack_layers, r.dim("n_deepstack_layers", int64_t{0}));
    if (c->n_deepstack_layers < 0 || c->n_deepstack_layers > c->n_layer)
      return invalid_argument(r.arch() + ".n_deepstack_layers is outside 0..block_count");
  }
  allowed->qk_norm = allowed->need_qk_norm = true;
  allowed->classifier = true;  // Qwen3-Reranker: the head's "yes" and "no" rows as cls.output
  r.consume("classifier.output_labels");
  if (!moe) return Status::ok();
  CACHET_RETURN_IF_ERROR(r.experts(c, "expert_feed_forward_length"));
  if (c->n_expert == 0) return invalid_argument("a " + r.arch() + " file without " + r.arch() + ".expert_count");
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
  register_arch("qwen3vl", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, [](ArchReader& r, ModelConfig* c, DecoderTensors* a) {
      return qwen3(r, c, a, false, true);
    });
  });
  register_arch("qwen3vlmoe", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, [](ArchReader& r, ModelConfig* c, DecoderTensors* a) {
      return qwen3(r, c, a, true, true);
    });
  });
}

}  // namespace cachet
