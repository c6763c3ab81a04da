// `deepseek2`: DeepSeek-V2 / V2.5 / V3 / R1, Kimi K2, GLM-4.7-Flash, GigaChat 3, Kanana 2 as llama.cpp's converter
// writes them. Multi-head latent attention (model/mla.h: the cache holds each token's latent and rotated key part,
// absorbed decode), interleaved RoPE on the rotated parts only, YaRN with DeepSeek's mscale on the scores; the
// first leading_dense_block_count layers a dense SwiGLU FFN (feed_forward_length wide), the others a mixture of
// experts (expert_feed_forward_length wide) routed by softmax or by sigmoid with a selection bias (exp_probs_b),
// optionally group-limited (expert_group_count), renormalized (expert_weights_norm) and scaled
// (expert_weights_scale), beside expert_shared_count shared experts (one SwiGLU that wide, ungated output).
// GLM-4.7-Flash's multi-token-prediction block loads as a proposer of its own (model/decoder.h take_mtp_blocks).
// Files converted before llama.cpp split attn_kv_b (no key_length_mla) are refused with the reason; so are
// DeepSeek-OCR (deepseek2ocr) and V3.2's sparse attention (deepseek32), other architecture names.
#include <cmath>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status deepseek2(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool mtp_head) {
  const std::string a = r.arch() + ".";
  c->rope_neox = false;
  // GLM-4.7-Flash's files carry its multi-token-prediction block after the trunk: an MLA + MoE layer behind
  // eh_proj, run as a speculative proposer (--mtp).
  CACHET_RETURN_IF_ERROR(take_mtp_blocks(r, c, allowed, mtp_head));
  const int64_t n_trunk = c->n_layer;
  if (mtp_head) c->n_layer = 1;
  if (!r.has("attention.key_length_mla") || !r.has("attention.value_length_mla"))
    return unimplemented(a + "attention.key_length_mla is missing: a file converted before llama.cpp's MLA "
                             "conversion (a fused attn_kv_b); convert the model again");
  CACHET_ASSIGN_OR_RETURN(c->kv_lora_rank, r.dim("attention.kv_lora_rank"));
  CACHET_ASSIGN_OR_RETURN(c->q_lora_rank, r.dim("attention.q_lora_rank", int64_t{0}));
  CACHET_ASSIGN_OR_RETURN(c->mla_k_dim, r.dim("attention.key_length_mla"));
  CACHET_ASSIGN_OR_RETURN(c->mla_v_dim, r.dim("attention.value_length_mla"));
  if (r.value_length() != c->kv_lora_rank)
    return invalid_argument(a + "attention.value_length must be the latent's width (kv_lora_rank " +
                            std::to_string(c->kv_lora_rank) + ")");
  if (c->head_dim != c->kv_lora_rank + c->rope_dim || c->n_head_kv != 1)
    return invalid_argument(a + "attention.key_length must be kv_lora_rank + rope.dimension_count with one KV head "
                                "(the cached latent | rotated key)");
  // llama.cpp's converter writes 0.1 x mscale_all_dim; the score scale takes mscale_all_dim itself.
  c->rope_yarn_log_mul /= 0.1;
  r.consume("rope.scaling.yarn_log_multiplier");
  CACHET_ASSIGN_OR_RETURN(c->attn_temp_scale, r.real("attention.temperature_scale", 0.0));
  if (c->attn_temp_scale != 0.0) {  // Mistral Large 3
    CACHET_ASSIGN_OR_RETURN(c->attn_temp_floor, r.dim("attention.temperature_length", c->rope_yarn_orig_ctx));
    if (c->attn_temp_floor <= 0) return invalid_argument(a + "attention.temperature_scale needs a positive length");
  }

  CACHET_ASSIGN_OR_RETURN(c->n_dense_lead, r.dim("leading_dense_block_count", int64_t{0}));
  CACHET_RETURN_IF_ERROR(r.experts(c));
  const int64_t dense_ff = c->n_ff;
  CACHET_ASSIGN_OR_RETURN(int64_t exp_ff, r.dim("expert_feed_forward_length", dense_ff));
  CACHET_ASSIGN_OR_RETURN(int64_t n_shared, r.dim("expert_shared_count", int64_t{0}));
  if (c->n_expert == 0) {  // dense (Youtu-LLM): every layer the leading kind
    c->n_dense_lead = c->n_layer;
    return Status::ok();
  }
  if (c->n_dense_lead > n_trunk) return invalid_argument(a + "leading_dense_block_count exceeds block_count");
  if (mtp_head) c->n_dense_lead = 0;  // the head's block comes after every dense layer
  c->n_ff = exp_ff;
  c->n_ff_dense = dense_ff;
  c->n_ff_shared = exp_ff * n_shared;
  r.consume("expert_weights_norm");
  c->expert_norm = false;  // llama.cpp's default
  if (r.file().find(a + "expert_weights_norm")) {
    CACHET_ASSIGN_OR_RETURN(c->expert_norm, r.file().get_bool(a + "expert_weights_norm"));
  }
  // expert_gating_func: 1 softmax, 2 sigmoid. Files without it: softmax (DeepSeek V2 / V2.5), except GLM-4.7-Flash's
  // first files (47 layers and its 154880-token vocabulary), which llama.cpp reads as sigmoid too.
  int64_t gating = 0;
  CACHET_ASSIGN_OR_RETURN(gating, r.dim("expert_gating_func", int64_t{0}));
  if (gating == 0) gating = (n_trunk == 47 || n_trunk == 48) && c->n_vocab == 154880 ? 2 : 1;
  if (gating != 1 && gating != 2)
    return unimplemented(a + "expert_gating_func " + std::to_string(gating) + " (1 softmax and 2 sigmoid are run)");
  c->expert_gating = gating == 2 ? "sigmoid" : "softmax";
  CACHET_RETURN_IF_ERROR(r.expert_groups(c));
  allowed->router_bias = true;
  return Status::ok();
}

}  // namespace

void register_deepseek2_arch() {
  register_arch("deepseek2", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [&opts](ArchReader& r, ModelConfig* c, DecoderTensors* t) {
                                    return deepseek2(r, c, t, opts.mtp_head);
                                  });
  });
}

}  // namespace cachet
