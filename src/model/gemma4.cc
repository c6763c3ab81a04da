// `gemma4`: Gemma 4 (E2B, E4B, 31B dense; 26B-A4B mixture of experts), text. Gemma's block (scaled embeddings,
// post-norms, GELU, NeoX RoPE, per-head Q/K norms, final soft-cap) with:
// - sliding and global layers per attention.sliding_window_pattern (one bool per layer), each kind with its own
//   head width (key_length_swa vs key_length: 256 vs 512), KV head count (head_count_kv per layer), rotated dims
//   (rope.dimension_count_swa) and RoPE base (rope.freq_base_swa); the global layers' RoPE is "proportional":
//   rope_freqs holds 1 for the turning quarter of the pairs and 1e30 (standing still) for the rest;
// - no query scaling (the norms set the scale: attention scale 1); V RMS-normalized without a weight; a layer
//   without attn_v takes K's projection as V (the larger models' global layers);
// - the last attention.shared_kv_layers layers compute only Q and read the KV of the last earlier layer of
//   their kind (E2B/E4B); their dense FFN may be twice as wide (feed_forward_length per layer);
// - per-layer embeddings (embedding_length_per_layer_input > 0, E2B/E4B): model/decoder.h;
// - each layer's output times layer_output_scale;
// - 26B-A4B: every FFN a dense GELU MLP (feed_forward_length) beside experts (expert_feed_forward_length) with
//   fused gate|up, routed by rms(x) / sqrt(d) * ffn_gate_inp.scale through a softmax, top-k renormalized, each
//   expert's output times ffn_down_exps.scale (model/decoder.h moe_beside_dense).
// Norm weights are used as stored (Gemma 4's converter adds no 1).
#include <cmath>
#include <string>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status gemma4(ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
  c->rope_neox = true;
  c->embd_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->ffn_act = "gelu";
  c->attn_scale = 1.0;
  c->v_norm = c->v_from_k = true;
  allowed->post_norms = allowed->need_post_norms = true;
  allowed->qk_norm = allowed->need_qk_norm = true;
  allowed->rope_freqs = allowed->layer_out_scale = true;
  // Without the key, 30: the model's config default (Gemma4TextConfig), and llama.cpp's.
  CACHET_ASSIGN_OR_RETURN(c->final_softcap, r.real("final_logit_softcapping", 30.0));
  CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window"));
  CACHET_ASSIGN_OR_RETURN(c->swa_layers, r.swa_layers(c->n_layer, 6));
  CACHET_ASSIGN_OR_RETURN(c->rope_theta_swa, r.real("rope.freq_base_swa", 10000.0));
  // The global layers' shapes came from key_length / rope.dimension_count; the local layers' are their own.
  CACHET_ASSIGN_OR_RETURN(c->head_dim_swa, r.dim("attention.key_length_swa", c->head_dim));
  CACHET_ASSIGN_OR_RETURN(int64_t v_swa, r.dim("attention.value_length_swa", c->head_dim_swa));
  if (v_swa != c->head_dim_swa) return unimplemented("gemma4: value_length_swa differs from key_length_swa");
  CACHET_ASSIGN_OR_RETURN(c->rope_dim_swa, r.dim("rope.dimension_count_swa", c->head_dim_swa));
  // KV heads per kind of layer, one count each.
  const std::vector<int64_t>& kv = r.kv_heads_per_layer();
  r.accept_kv_heads_differing();
  int64_t kv_swa = 0, kv_global = 0;
  for (size_t l = 0; l < kv.size(); ++l) {
    int64_t& kind = c->swa_layers[l] == 'S' ? kv_swa : kv_global;
    if (kv[l] <= 0 || (kind != 0 && kind != kv[l]))
      return unimplemented("gemma4: attention.head_count_kv differs within the sliding or the global layers");
    kind = kv[l];
  }
  if (kv_global > 0) c->n_head_kv = kv_global;
  if (kv_swa > 0) c->n_head_kv_swa = kv_swa;
  CACHET_ASSIGN_OR_RETURN(c->kv_shared_layers, r.dim("attention.shared_kv_layers", int64_t{0}));
  CACHET_ASSIGN_OR_RETURN(c->n_embd_per_layer, r.dim("embedding_length_per_layer_input", int64_t{0}));
  allowed->per_layer_embd = c->n_embd_per_layer > 0;
  // Images: the large models attend both ways among an image's rows in their sliding-window layers (their
  // config's use_bidirectional_attention "vision"); the small ones, with per-layer embeddings, causally.
  c->image_attention = c->n_embd_per_layer > 0 ? "causal" : "swa";
  // A dense FFN width per layer: one width, or one for the first layers and twice it from some layer on.
  const std::vector<int64_t>& ff = r.ff_per_layer();
  for (size_t l = 1; l < ff.size(); ++l) {
    if (ff[l] == ff[l - 1]) continue;
    if (c->n_ff_wide != 0 || ff[l] != 2 * ff[0])
      return unimplemented("gemma4: feed_forward_length changes other than once to twice its width");
    c->n_ff_wide = ff[l];
    c->ffn_wide_from = static_cast<int64_t>(l);
  }
  CACHET_RETURN_IF_ERROR(r.experts(c, nullptr));
  if (c->n_expert > 0) {  // every FFN: the dense MLP beside the experts
    if (c->n_ff_wide != 0) return unimplemented("gemma4: per-layer FFN widths with experts");
    c->n_ff_dense = c->n_ff;
    CACHET_ASSIGN_OR_RETURN(c->n_ff, r.dim("expert_feed_forward_length"));
    c->moe_beside_dense = allowed->moe_beside_dense = true;
    c->expert_norm = true;
  }
  return Status::ok();
}

}  // namespace

void register_gemma4_arch() {
  register_arch("gemma4", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, gemma4);
  });
}

}  // namespace cachet
