// `gemma-embedding`: EmbeddingGemma. Gemma 3's block (scaled embeddings, +1-baked norms, post-norms, per-head
// Q/K norms, GELU-gated FFN, NeoX RoPE) attending both ways: five local layers to one global
// (sliding_window_pattern, default 6), the local ones over a window centred on the token (positions within
// sliding_window / 2 either side) with their own RoPE base (rope.freq_base_swa, default 10000). Query scale
// 1/sqrt(head_dim). Files converted with sentence-transformers' dense modules add dense_2 (n_embd -> n) and
// dense_3 (n -> n_embd), applied to the pooled vector.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

Status gemma_common(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, int64_t layers_27b);

void register_gemma_embedding_arch() {
  register_arch("gemma-embedding", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                      const LoadOptions& opts) {
    return load_decoder_from_gguf(
        std::move(f), std::move(pool), opts, [](ArchReader& r, ModelConfig* c, DecoderTensors* allowed) -> Status {
          CACHET_RETURN_IF_ERROR(gemma_common(r, c, allowed, -1));
          allowed->qk_norm = allowed->need_qk_norm = true;
          allowed->dense_out = true;
          c->causal = false;
          c->swa_symmetric = true;
          CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window"));
          CACHET_ASSIGN_OR_RETURN(c->swa_layers, r.swa_layers(c->n_layer, 6));
          CACHET_ASSIGN_OR_RETURN(c->rope_theta_swa, r.real("rope.freq_base_swa", 10000.0));
          // The dense modules' widths, checked against their tensors' shapes when the weights are read.
          CACHET_ASSIGN_OR_RETURN(int64_t in2, r.dim("dense_2_feat_in", c->n_embd));
          CACHET_ASSIGN_OR_RETURN(int64_t out3, r.dim("dense_3_feat_out", c->n_embd));
          r.consume("dense_2_feat_out");
          r.consume("dense_3_feat_in");
          if (in2 != c->n_embd || out3 != c->n_embd)
            return invalid_argument("gemma-embedding: dense_2_feat_in and dense_3_feat_out must equal n_embd");
          return Status::ok();
        });
  });
}

}  // namespace cachet
