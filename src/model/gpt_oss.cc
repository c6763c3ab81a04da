// `gpt-oss`: OpenAI's open-weight mixture of experts (gpt-oss-20b, -120b). Every layer attends with GQA (head_dim
// 64 from attention.key_length), Q/K/V and output biases, NeoX RoPE under the file's YaRN on every layer, and
// attention sinks: a learned logit per head in each softmax (attn_sinks.weight). Layers alternate a sliding
// window (even layers, attention.sliding_window) and full attention. The FFN input norm is post_attention_norm;
// the router has a bias, picks the top expert_used_count experts by logit and weighs them by a softmax over the
// chosen ones (the renormalized softmax, the same weights); each expert's gate, up and down projections have
// biases and its activation is the clamped SwiGLU (ops.h swiglu_oai_mul). The experts ship as MXFP4.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status gpt_oss(ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
  c->rope_neox = true;
  c->ffn_act = "swiglu_oai";
  allowed->qkv_bias = allowed->out_bias = allowed->attn_sinks = allowed->expert_biases = true;
  allowed->ffn_norm = "post_attention_norm.weight";
  CACHET_RETURN_IF_ERROR(r.experts(c, "expert_feed_forward_length"));
  if (c->n_expert == 0) return invalid_argument("a gpt-oss file without gpt-oss.expert_count");
  c->expert_norm = true;  // softmax over the chosen logits == the full softmax renormalized over them
  CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window", 0));
  if (c->sliding_window > 0) {
    CACHET_ASSIGN_OR_RETURN(c->swa_layers, r.swa_layers(c->n_layer, 2));
    CACHET_ASSIGN_OR_RETURN(c->rope_theta_swa, r.real("rope.freq_base_swa", c->rope_theta));
    c->rope_freq_scale_swa = c->rope_freq_scale;  // the local layers scale as the global ones (llama.cpp)
  }
  return Status::ok();
}

}  // namespace

void register_gpt_oss_arch() {
  register_arch("gpt-oss", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, gpt_oss);
  });
}

}  // namespace cachet
