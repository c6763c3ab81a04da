// IBM's Granite families. `granite` (3.x dense) and `granitemoe` (3.x MoE, with a shared expert in
// "MoE shared" files): Llama's block (interleaved RoPE, GQA, SwiGLU; softmax routing, top-k weights renormalized)
// with four scalars: the embeddings times embedding_scale, each attention and FFN output times residual_scale
// before its residual add, queries times attention.scale (instead of 1/sqrt(head_dim)), the logits divided by
// logit_scale. `granitehybrid` (Granite 4.0-H): the same with Mamba-2 mixers (model/mamba2.h) in the layers whose
// attention.head_count_kv is 0; dense or MoE FFNs (experts feed_forward_length wide, a shared expert
// expert_shared_feed_forward_length wide, ungated). rope.scaling.finetuned false (4.0-H's files) turns RoPE off in
// every layer: its attention layers see no positions, the Mamba-2 layers carry the order.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status granite(ArchReader& r, ModelConfig* c, DecoderTensors*, bool hybrid) {
  const std::string a = r.arch() + ".";
  CACHET_ASSIGN_OR_RETURN(c->embd_scale, r.real("embedding_scale", 1.0));
  CACHET_ASSIGN_OR_RETURN(c->residual_scale, r.real("residual_scale", 1.0));
  CACHET_ASSIGN_OR_RETURN(c->logit_scale, r.real("logit_scale", 1.0));
  if (c->embd_scale == 0.0) c->embd_scale = 1.0;  // llama.cpp: 0 means "not set"
  if (c->residual_scale == 0.0) c->residual_scale = 1.0;
  if (c->logit_scale == 0.0) c->logit_scale = 1.0;
  r.consume("rope.scaling.finetuned");
  if (const GgufValue* v = r.file().find(a + "rope.scaling.finetuned"); v) {
    CACHET_ASSIGN_OR_RETURN(bool rope_on, r.file().get_bool(a + "rope.scaling.finetuned"));
    if (!rope_on) c->nope_interval = 1;  // every layer without positions
  }
  CACHET_RETURN_IF_ERROR(r.experts(c));
  if (c->n_expert > 0) {
    if (c->n_expert_used <= 0) return invalid_argument(a + "expert_used_count must be positive");
    c->expert_norm = true;
    CACHET_ASSIGN_OR_RETURN(c->n_ff_shared, r.dim("expert_shared_feed_forward_length", int64_t{0}));
  }
  if (!hybrid) return Status::ok();

  // Mamba-2 where a layer has no KV heads; its widths from the ssm.* keys.
  const std::vector<int64_t>& kv = r.kv_heads_per_layer();
  c->layer_kinds.assign(static_cast<size_t>(c->n_layer), 'A');
  for (size_t l = 0; l < kv.size(); ++l)
    if (kv[l] == 0) c->layer_kinds[l] = 'M';
  return r.mamba2(c);
}

}  // namespace

void register_granite_arch() {
  for (const char* name : {"granite", "granitemoe"})
    register_arch(name, [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
      return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                    [](ArchReader& r, ModelConfig* c, DecoderTensors* t) {
                                      return granite(r, c, t, false);
                                    });
    });
  register_arch("granitehybrid", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                    const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* t) {
                                    return granite(r, c, t, true);
                                  });
  });
}

}  // namespace cachet
