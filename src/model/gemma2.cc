// `gemma2`: Gemma 2. Embeddings times sqrt(n_embd); RMSNorm weights stored with Gemma's +1 already added by
// the converter (so plain RMSNorm here); post-attention and post-FFN norms; GELU-gated FFN; NeoX RoPE;
// attention scores and final logits soft-capped (attn_logit_softcapping, final_logit_softcapping: 50 and 30
// unless the file says otherwise); every other layer a sliding window (layer 0 local, attention.sliding_window,
// default 4096); query scale 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 27B (46 layers), the rule
// llama.cpp follows since the files do not carry query_pre_attn_scalar.
#include <cmath>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

// The parts Gemma 2 and 3 share.
Status gemma_common(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, int64_t layers_27b) {
  c->rope_neox = true;
  c->embd_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->ffn_act = "gelu";
  allowed->post_norms = allowed->need_post_norms = true;
  if (!r.has("attention.scale"))
    c->attn_scale = c->n_layer == layers_27b ? 1.0f / std::sqrt(static_cast<float>(c->n_embd / c->n_head))
                                             : 1.0f / std::sqrt(static_cast<float>(c->head_dim));
  return Status::ok();
}

void register_gemma2_arch() {
  register_arch("gemma2", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* allowed) -> Status {
                                    CACHET_RETURN_IF_ERROR(gemma_common(r, c, allowed, 46));
                                    CACHET_ASSIGN_OR_RETURN(c->attn_softcap, r.real("attn_logit_softcapping", 50.0));
                                    CACHET_ASSIGN_OR_RETURN(c->final_softcap, r.real("final_logit_softcapping", 30.0));
                                    CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window", 4096));
                                    CACHET_ASSIGN_OR_RETURN(c->swa_layers, r.swa_layers(c->n_layer, 2));
                                    CACHET_ASSIGN_OR_RETURN(c->rope_theta_swa, r.real("rope.freq_base_swa", c->rope_theta));
                                    c->rope_freq_scale_swa = c->rope_freq_scale;
                                    if (c->sliding_window == 0) c->swa_layers.clear();
                                    return Status::ok();
                                  });
  });
}

}  // namespace cachet
