// The BERT family as llama.cpp's converter writes it (model/encoder.h runs them):
// - `bert`: BERT, RoBERTa, XLM-RoBERTa and their embedders and rerankers (BGE, MiniLM, E5, bge-reranker):
//   absolute position embeddings, Q/K/V/output and FFN biases, GELU FFN, post-norm LayerNorms.
// - `nomic-bert`: nomic-embed-text: RoPE (NeoX) instead of position embeddings, fused QKV, a SiLU-gated FFN,
//   post-norm.
// - `nomic-bert-moe`: nomic-embed-text-v2-moe: nomic-bert with a fused QKV bias and BERT's GELU FFN with biases;
//   every moe_every_n_layers-th layer (from layer 1) a mixture of expert_count ungated GELU experts, the top
//   expert_used_count by softmax, weights not renormalized.
// - `modern-bert`: ModernBERT (and gte-modernbert, Granite Embedding R2): RoPE, fused QKV, a GELU- or
//   SiLU-gated FFN (hidden_activation), pre-norm with a final norm, no biases; every layer but each
//   global_attn_every_n_layers-th (from the first) attends within a centred window (rope.freq_base_swa).
// All of them are bidirectional (attention.causal, when given, must be false) and use LayerNorm with
// attention.layer_norm_epsilon. A reranker's rank pooling reads the [CLS] state unless
// classifier.pooling_type says mean (modern-bert's default).
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/encoder.h"

namespace cachet {

namespace {

enum class Family { kBert, kNomic, kNomicMoe, kModern };

Result<std::unique_ptr<Model>> load_bert_family(Family fam, std::unique_ptr<GgufFile> f,
                                                std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
  CACHET_ASSIGN_OR_RETURN(std::string arch, f->get_string("general.architecture"));
  ArchReader r(*f, arch);
  CACHET_ASSIGN_OR_RETURN(ModelConfig c, r.base_config());
  if (c.n_layer > static_cast<int64_t>(f->tensors().size()))
    return invalid_argument(arch + ".block_count is larger than the file's tensor count");
  CACHET_ASSIGN_OR_RETURN(c.rms_eps, r.real("attention.layer_norm_epsilon", 1e-12));
  bool causal = false;
  if (f->find(arch + ".attention.causal")) {
    CACHET_ASSIGN_OR_RETURN(causal, f->get_bool(arch + ".attention.causal"));
  }
  r.consume("attention.causal");
  if (causal) return unimplemented(arch + ".attention.causal = true: a causal " + arch + " is not supported");
  c.causal = false;
  c.rope_neox = true;
  EncoderSpec spec;
  spec.rope = fam != Family::kBert;
  c.ffn_act = fam == Family::kNomic ? "silu" : "gelu";
  if (fam == Family::kNomicMoe) {
    CACHET_RETURN_IF_ERROR(r.experts(&c));
    CACHET_ASSIGN_OR_RETURN(int64_t every, r.dim("moe_every_n_layers", int64_t{0}));
    if (c.n_expert == 0 || every == 0) return invalid_argument(arch + ": a MoE file without expert_count or moe_every_n_layers");
    c.expert_norm = false;
  }
  if (fam == Family::kModern) {
    spec.gelu_classifier = true;
    CACHET_ASSIGN_OR_RETURN(std::string act, r.text("hidden_activation", std::string("gelu")));
    if (act == "silu" || act == "swish") {
      c.ffn_act = "silu";
    } else if (act != "gelu" && act != "gelu_pytorch_tanh" && act != "gelu_new") {
      return unimplemented(arch + ".hidden_activation '" + act + "' is not supported (gelu, silu)");
    }
    CACHET_ASSIGN_OR_RETURN(c.sliding_window, r.dim("attention.sliding_window", int64_t{0}));
    if (c.sliding_window > 0) {
      c.swa_symmetric = true;
      CACHET_ASSIGN_OR_RETURN(c.swa_layers, r.swa_layers(c.n_layer, 3, /*dense_first=*/true));
      CACHET_ASSIGN_OR_RETURN(c.rope_theta_swa, r.real("rope.freq_base_swa", c.rope_theta));
    }
  }
  // Rank pooling's input: classifier.pooling_type in llama.cpp's numbering (1 mean, 2 cls, 3 last).
  CACHET_ASSIGN_OR_RETURN(int64_t cls_pool, r.dim("classifier.pooling_type", fam == Family::kModern ? 1 : 2));
  if (cls_pool < 1 || cls_pool > 3)
    return invalid_argument(arch + ".classifier.pooling_type " + std::to_string(cls_pool) + " is not mean, cls or last");
  static const char* const kInputs[] = {"", "mean", "cls", "last"};
  c.rank_input = kInputs[cls_pool];
  r.consume("classifier.output_labels");
  return load_encoder(r, std::move(c), spec, std::move(f), std::move(pool), opts);
}

}  // namespace

void register_bert_archs() {
  register_arch("bert", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_bert_family(Family::kBert, std::move(f), std::move(pool), opts);
  });
  register_arch("nomic-bert", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                 const LoadOptions& opts) {
    return load_bert_family(Family::kNomic, std::move(f), std::move(pool), opts);
  });
  register_arch("nomic-bert-moe", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                     const LoadOptions& opts) {
    return load_bert_family(Family::kNomicMoe, std::move(f), std::move(pool), opts);
  });
  register_arch("modern-bert", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                  const LoadOptions& opts) {
    return load_bert_family(Family::kModern, std::move(f), std::move(pool), opts);
  });
}

}  // namespace cachet
