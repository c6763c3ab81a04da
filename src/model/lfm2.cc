// `lfm2`: Liquid AI's LFM2 (350M to 2.6B, and LFM2-VL's language model), a CPU-first hybrid: short conv layers
// (model/short_conv.h: where the file's per-layer attention.head_count_kv is 0) beside GQA attention layers with
// per-head Q/K RMSNorm and NeoX RoPE; every layer's FFN a dense SwiGLU behind ffn_norm; the final norm is stored
// as token_embd_norm. The short conv's window (shortconv.l_cache - 1 inputs of the width) is each sequence's
// recurrent state in the engine's StateStore, as Qwen3.5's. An optional attention.sliding_window applies to the
// attention layers. `lfm2moe` (LFM2-8B-A1B, LFM2-24B-A2B): the same layers, the first leading_dense_block_count
// FFNs dense (feed_forward_length wide), the rest mixtures of experts (expert_feed_forward_length wide) routed by
// each expert's sigmoid probability, chosen by probability + a per-expert selection bias (exp_probs_b), weighed
// by the probabilities renormalized to sum 1 (llama.cpp's build_moe_ffn with LFM2's settings).
#include <string>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status lfm2(ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
  c->rope_neox = true;
  allowed->qk_norm = allowed->need_qk_norm = true;
  allowed->output_norm = "token_embd_norm.weight";
  CACHET_ASSIGN_OR_RETURN(c->ssm_conv_kernel, r.dim("shortconv.l_cache"));
  if (c->ssm_conv_kernel < 2) return invalid_argument(r.arch() + ".shortconv.l_cache must be at least 2");
  const std::vector<int64_t>& kv = r.kv_heads_per_layer();
  c->layer_kinds.assign(static_cast<size_t>(c->n_layer), 'A');
  for (size_t l = 0; l < kv.size(); ++l)
    if (kv[l] == 0) c->layer_kinds[l] = 'C';
  if (r.has("attention.sliding_window")) {
    CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window"));
    if (c->sliding_window > 0) {
      c->swa_layers.assign(static_cast<size_t>(c->n_layer), 'G');
      for (int64_t l = 0; l < c->n_layer; ++l)
        if (!c->is_recurrent(l)) c->swa_layers[l] = 'S';
      c->rope_theta_swa = c->rope_theta;
    }
  }
  return Status::ok();
}

Status lfm2moe(ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
  CACHET_RETURN_IF_ERROR(lfm2(r, c, allowed));
  c->n_ff_dense = c->n_ff;
  CACHET_RETURN_IF_ERROR(r.experts(c, "expert_feed_forward_length"));
  if (c->n_expert == 0 || c->n_expert_used <= 0)
    return invalid_argument("an lfm2moe file without " + r.arch() + ".expert_count / expert_used_count");
  CACHET_ASSIGN_OR_RETURN(c->n_dense_lead, r.dim("leading_dense_block_count", int64_t{0}));
  if (c->n_dense_lead > c->n_layer) return invalid_argument(r.arch() + ".leading_dense_block_count exceeds the layers");
  CACHET_ASSIGN_OR_RETURN(int64_t gating, r.dim("expert_gating_func", int64_t{2}));
  if (gating != 1 && gating != 2)  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid
    return unimplemented(r.arch() + ".expert_gating_func " + std::to_string(gating) + " is not softmax or sigmoid");
  c->expert_gating = gating == 2 ? "sigmoid" : "softmax";
  c->expert_norm = true;
  allowed->router_bias = true;
  return Status::ok();
}

}  // namespace

void register_lfm2_arch() {
  register_arch("lfm2moe", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, lfm2moe);
  });
  register_arch("lfm2", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, lfm2);
  });
}

}  // namespace cachet
