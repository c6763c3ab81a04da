// `gemma3`: Gemma 3 (text). Gemma 2's block (scaled embeddings, +1-baked norms, post-norms, GELU, NeoX RoPE)
// with a per-head RMSNorm of Q and K instead of soft-capping (final_logit_softcapping only if the file says);
// when attention.sliding_window is set, five local layers to one global (sliding_window_pattern, default 6),
// the local ones with their own RoPE base (rope.freq_base_swa, default 10000) and no RoPE scaling, the global
// ones with rope.freq_base and the file's linear scaling (factor 8 on the 4B and larger).
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

Status gemma_common(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, int64_t layers_27b);

void register_gemma3_arch() {
  register_arch("gemma3", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* allowed) -> Status {
                                    CACHET_RETURN_IF_ERROR(gemma_common(r, c, allowed, 62));
                                    allowed->qk_norm = allowed->need_qk_norm = true;
                                    CACHET_ASSIGN_OR_RETURN(c->final_softcap, r.real("final_logit_softcapping", 0.0));
                                    CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window", 0));
                                    if (c->sliding_window > 0) {
                                      CACHET_ASSIGN_OR_RETURN(c->swa_layers, r.swa_layers(c->n_layer, 6));
                                      CACHET_ASSIGN_OR_RETURN(c->rope_theta_swa, r.real("rope.freq_base_swa", 10000.0));
                                    }
                                    return Status::ok();
                                  });
  });
}

}  // namespace cachet
